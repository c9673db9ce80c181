package cuda_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	dir, err := os.MkdirTemp("", "ferry-fakecuda-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakeLib, exporter = filepath.Join(dir, "libcuda.so.1"), filepath.Join(dir, "fakecuda-export")
	err = errors.Join(
		fakelib.Build(fakeLib, true, "testdata/fakecuda.c"),
		fakelib.Build(exporter, false, "testdata/fakecuda_export.c", "testdata/fakecuda.c"),
	)
	bin := ""
	if err == nil {
		bin, err = plugintest.BuildBinaries(map[string]string{plugintest.Binaries["ferry-device-cuda"]: "ferry-device-cuda"})
		plugin = filepath.Join(bin, "ferry-device-cuda")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cuda tests:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := 0
	func() {
		defer os.RemoveAll(dir)
		defer os.RemoveAll(bin)
		defer func() {
			if err := goleak.Find(plugintest.IgnoreLogStderr); err != nil {
				fmt.Fprintln(os.Stderr, "goleak:", err)
				code = 1
			}
		}()
		code = m.Run()
	}()
	os.Exit(code)
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
