package tcp_test

import (
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
	bin := plugintest.BuildPlugin(t, "github.com/ferrydev/ferry/plugins/tcp/cmd/ferry-plugin-tcp")
	plugintest.Run(t, plugintest.Config{
		Binary:  bin,
		ConfigA: []byte(`listen = ["127.0.0.1:0"]`),
		ConfigB: []byte(`listen = ["127.0.0.1:0"]` + "\nconnections_per_peer = 4"),
	})
}
