package plugintest_test

import (
	"context"
	"testing"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
)

// TestTestToolCapability: Info.TestTool crosses Describe, and a plugin
// that does not declare it (every older one) reads as a transport to run.
func TestTestToolCapability(t *testing.T) {
	for _, tool := range []bool{true, false} {
		m := &plugintest.Mock{DescribeFunc: func(context.Context) (sdk.Info, error) {
			return sdk.Info{Name: "mock", TestTool: tool}, nil
		}}
		d, err := plugintest.Connect(t, m, 0).Describe(context.Background())
		if err != nil || d.TestTool != tool {
			t.Errorf("declared TestTool %v: described %+v, %v", tool, d, err)
		}
	}
}
