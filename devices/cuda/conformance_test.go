package cuda_test

import (
	"fmt"
	"testing"

	"go.uber.org/goleak"

	"github.com/ferrydev/ferry/devices/internal/fakelib"
	"github.com/ferrydev/ferry/sdk/plugintest"
)

// fakeLib and exporter are the FAKE CUDA driver (testdata/fakecuda.c,
// built as libcuda.so.1 in a temporary directory) and an exporter process
// over it, built by TestMain with gcc; plugin is the ferry-device-cuda
// binary, for the conformance suite.
var fakeLib, exporter, plugin string

func TestMain(m *testing.M) {
	fakelib.Main(m, fakelib.Setup{Name: "cuda", Lib: "libcuda.so.1", LibSrc: "testdata/fakecuda.c", ExporterSrc: "testdata/fakecuda_export.c",
		Plugin: "ferry-device-cuda", Leak: []goleak.Option{plugintest.IgnoreLogStderr}},
		func(b fakelib.Built) { fakeLib, exporter, plugin = b.Lib, b.Exporter, b.Plugin })
}

// TestConformance runs the device conformance suite against the plugin's
// binary on the FAKE CUDA driver: it must run, not skip.
func TestConformance(t *testing.T) {
	var suite *testing.T
	t.Run("RunDevice", func(t *testing.T) {
		suite = t
		plugintest.RunDevice(t, plugintest.DeviceConfig{
			Binary:    plugin,
			Config:    []byte(fmt.Sprintf("library = %q\n", fakeLib)),
			AllocSize: 1 << 20,
		})
	})
	if suite.Skipped() {
		t.Fatal("the conformance suite skipped on the FAKE CUDA driver: Probe said unavailable")
	}
}
