package tcp_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ferrydev/ferry/sdk/plugintest"
)

// TestConformance runs the SDK's conformance suite against the real plugin
// binary, launched by the host's code path (go-plugin, shared-memory
// rings, fd passing).
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and launches the plugin binary")
	}
	bin := filepath.Join(t.TempDir(), "ferry-plugin-tcp")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/ferry-plugin-tcp")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("build plugin: %v", err)
	}
	plugintest.Run(t, plugintest.Config{
		Binary:  bin,
		ConfigA: []byte(`listen = ["127.0.0.1:0"]`),
		ConfigB: []byte(`listen = ["127.0.0.1:0"]` + "\nconnections_per_peer = 4"),
	})
}
