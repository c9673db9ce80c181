package gpu_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ferrydev/ferry/sdk/plugintest"
)

var binary string

func TestMain(m *testing.M) {
	os.Exit(plugintest.Main{
		Extra:      map[string]string{"ferry-device-fakegpu": "github.com/ferrydev/ferry/devices/internal/gpu/testdata/ferry-device-fakegpu"},
		CheckLeaks: true,
	}.Run(m, func(dir string) { binary = filepath.Join(dir, "ferry-device-fakegpu") }))
}

// TestConformance runs the device conformance suite against the core
// devices/cuda and devices/rocm share, over a FAKE driver in Go
// (testdata/ferry-device-fakegpu): its worker and streams, own
// allocations, imports through handles, copies and refusals, through the
// whole plugin protocol. The vendor bindings run the same suite over
// their FAKE libraries (devices/rocm, devices/cuda).
func TestConformance(t *testing.T) {
	plugintest.RunDevice(t, plugintest.DeviceConfig{Binary: binary})
}
