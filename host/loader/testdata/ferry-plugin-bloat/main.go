// Command ferry-plugin-bloat is a test fixture: a plugin whose Describe
// sends a string or list far over the host's caps, chosen by the
// environment variable FERRY_TEST_BLOAT (name, version, kinds, kind, ops),
// so that the host's refusal can be tested.
package main

import (
	"context"
	"os"
	"strings"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

func main() {
	huge := strings.Repeat("x", 1<<20)
	info := sdk.Info{Name: "bloat", Version: "0.0.0", MemoryKinds: []sdk.MemoryKind{sdk.MemoryCPU}, Ops: []ring.Op{ring.OpWrite}}
	switch os.Getenv("FERRY_TEST_BLOAT") {
	case "name":
		info.Name = huge
	case "version":
		info.Version = huge
	case "kinds":
		for range 10000 {
			info.MemoryKinds = append(info.MemoryKinds, sdk.MemoryCPU)
		}
	case "kind":
		info.MemoryKinds = []sdk.MemoryKind{sdk.MemoryKind(huge)}
	case "ops":
		for range 10000 {
			info.Ops = append(info.Ops, ring.OpRead)
		}
	}
	sdk.ServeTransport(&plugintest.Mock{DescribeFunc: func(context.Context) (sdk.Info, error) { return info, nil }})
}
