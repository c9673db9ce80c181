package shm_test

import (
	"testing"

	"github.com/ferrydev/ferry/sdk/plugintest"
)

// TestConformance runs the SDK's conformance suite against the real plugin
// binary, launched by the host's code path (go-plugin, shared-memory
// rings, fd passing): two plugin processes exchange regions over their
// sockets and copy through each other's memfds.
func TestConformance(t *testing.T) {
	bin := pluginBinary(t)
	plugintest.Run(t, plugintest.Config{Binary: bin})
}
