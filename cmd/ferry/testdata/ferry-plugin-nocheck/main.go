// Command ferry-plugin-nocheck is a test fixture: a transport that reads
// its settings only in Start (no sdk.ConfigChecker), so that `ferry
// plugins --config` must start it to check them. It declares itself a
// test tool, so that listing the test binaries' directory leaves it out.
package main

import (
	"context"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
)

func main() {
	sdk.ServeTransport(&plugintest.Mock{
		DescribeFunc: func(context.Context) (sdk.Info, error) {
			return sdk.Info{Name: "nocheck", Version: "0.0.1", TestTool: true}, nil
		},
		StartFunc: func(_ context.Context, cfg sdk.StartConfig) (sdk.Endpoint, error) {
			var s struct {
				Depth int `hcl:"depth,optional"`
			}
			return nil, sdk.DecodeConfig(cfg, &s)
		},
	})
}
