package example_test

import (
	"os"
	"testing"

	"github.com/ferrydev/ferry/sdk/plugintest"
)

// bin is the plugin binary, built once for the package's tests.
var bin string

func TestMain(m *testing.M) {
	os.Exit(plugintest.Main{Extra: map[string]string{
		"ferry-plugin-example": "github.com/ferrydev/ferry/examples/transport/cmd/ferry-plugin-example",
	}}.Run(m, func(dir string) { bin = dir + "/ferry-plugin-example" }))
}

// TestConformance runs the SDK's conformance suite against the real
// binary, launched as a host launches it: two plugin processes, two
// engines' memory, every descriptor checked for exactly one completion.
func TestConformance(t *testing.T) {
	plugintest.Run(t, plugintest.Config{Binary: bin})
}
