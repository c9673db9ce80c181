package plugintest_test

import (
	"context"
	"testing"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
)

// TestTwoSidedCapability: Info.TwoSided crosses Describe, and a
// transport that does not declare it reads as one-sided (no credit).
func TestTwoSidedCapability(t *testing.T) {
	for _, two := range []bool{true, false} {
		m := &plugintest.Mock{DescribeFunc: func(context.Context) (sdk.Info, error) {
			return sdk.Info{Name: "mock", TwoSided: two}, nil
		}}
		d, err := plugintest.Connect(t, m, 0).Describe(context.Background())
		if err != nil || d.TwoSided != two {
			t.Errorf("declared TwoSided %v: described %+v, %v", two, d, err)
		}
	}
}
