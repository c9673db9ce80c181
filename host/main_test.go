package host_test

import (
	"fmt"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// binDir holds the ferry and plugin binaries built once for these tests.
var binDir string

func TestMain(m *testing.M) {
	dir, err := plugintest.BuildBinaries(map[string]string{
		"github.com/ferrydev/ferry/cmd/ferry":                             "ferry",
		"github.com/ferrydev/ferry/plugins/shm/cmd/ferry-plugin-shm":      "ferry-plugin-shm",
		"github.com/ferrydev/ferry/plugins/tcp/cmd/ferry-plugin-tcp":      "ferry-plugin-tcp",
		"github.com/ferrydev/ferry/plugins/fault/cmd/ferry-plugin-fault":  "ferry-plugin-fault",
		"github.com/ferrydev/ferry/host/loader/testdata/ferry-plugin-v99": "ferry-plugin-v99",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/hashicorp/go-plugin.(*Client).logStderr")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
