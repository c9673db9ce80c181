// Command ferry-plugin-bloat is a test fixture: a plugin whose Describe,
// Probe, Start, Stats or errors send a string or list far over the
// host's caps, chosen by the environment variable FERRY_TEST_BLOAT (name,
// version, kinds, kind, ops; reason, rails, rail; endpoint; counters,
// counter; error), or declare a number outside the host's bounds
// (maxslice, preferred, tinyslice; numa, bandwidth), so that the host's
// refusal can be tested.
package main

import (
	"context"
	"errors"
	"math"
	"os"
	"strconv"
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
	case "maxslice":
		info.MaxSlice = math.MaxUint64
	case "preferred":
		info.PreferredSlice = math.MaxUint64
	case "tinyslice":
		info.MaxSlice = 1
	}
	probe := sdk.ProbeResult{Available: true, Rails: []sdk.Rail{{Name: "r0"}}}
	endpoint := sdk.Endpoint("ep")
	stats := map[string]uint64{"requests": 1}
	var peerErr error
	switch os.Getenv("FERRY_TEST_BLOAT") {
	case "reason":
		probe = sdk.ProbeResult{Reason: huge}
	case "rails":
		probe.Rails = make([]sdk.Rail, 10000)
	case "rail":
		probe.Rails = []sdk.Rail{{Name: huge}}
	case "numa":
		probe.Rails = []sdk.Rail{{Name: "r0", NUMANode: 1 << 30}}
	case "bandwidth":
		probe.Rails = []sdk.Rail{{Name: "r0", BandwidthGbps: math.NaN()}}
	case "endpoint":
		endpoint = sdk.Endpoint(huge)
	case "counters":
		for i := range 10000 {
			stats["c"+strconv.Itoa(i)] = uint64(i)
		}
	case "counter":
		stats[huge] = 1
	case "error":
		peerErr = errors.New(huge)
	}
	sdk.ServeTransport(&plugintest.Mock{
		DescribeFunc: func(context.Context) (sdk.Info, error) { return info, nil },
		ProbeFunc:    func(context.Context) (sdk.ProbeResult, error) { return probe, nil },
		StartFunc:    func(context.Context, sdk.StartConfig) (sdk.Endpoint, error) { return endpoint, nil },
		StatsFunc:    func(context.Context) (map[string]uint64, error) { return stats, nil },
		OpenPeerFunc: func(context.Context, sdk.Peer) error { return peerErr },
	})
}
