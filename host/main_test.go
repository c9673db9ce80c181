package host_test

import (
	"github.com/ferrydev/ferry/sdk/plugintest"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// binDir holds the ferry and plugin binaries built once for these tests.
var binDir string

func TestMain(m *testing.M) {
	build := plugintest.Main{
		Binaries:    []string{"ferry", "ferry-plugin-shm", "ferry-plugin-tcp", "ferry-plugin-fault", "ferry-device-simdev", "ferry-device-cuda", "ferry-device-rocm", "ferry-plugin-nvlink"},
		Extra:       map[string]string{"ferry-plugin-v99": "github.com/ferrydev/ferry/host/loader/testdata/ferry-plugin-v99", "ferry-plugin-bloat": "github.com/ferrydev/ferry/host/loader/testdata/ferry-plugin-bloat"},
		CheckLeaks:  true,
		IgnoreLeaks: []goleak.Option{plugintest.IgnoreLogStderr},
	}
	os.Exit(build.Run(m, func(dir string) { binDir = dir }))
}
