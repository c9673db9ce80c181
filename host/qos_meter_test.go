package host_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
)

// TestQoSKeepsTheMeter: with a qos block and metrics but no observer, the
// admission queue's watcher passes every task's end on to the meter, so
// that the request and byte counters count what moved. (It used to pass
// them on only to an observer: the meter, which wirePath had set as the
// tracker's watcher, was replaced and counted nothing.)
func TestQoSKeepsTheMeter(t *testing.T) {
	const size, n = 64 << 10, 4
	ctx := context.Background()
	reg := prometheus.NewPedanticRegistry()
	cfg := config.Default("qos-meter")
	cfg.PluginDir = binDir
	qosOn(cfg)
	e, err := host.New(ctx, cfg, host.WithMetricsRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	mem, err := e.Allocate(2 * size)
	if err != nil {
		t.Fatal(err)
	}
	src, dst := mem[:size], mem[size:]
	if _, err := e.Register(ctx, src, host.LocalOnly); err != nil {
		t.Fatal(err)
	}
	base, err := e.Register(ctx, dst, host.RemoteReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	seg, err := e.OpenSegment(ctx, e.Name())
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := e.Transfer(ctx, host.Request{Op: host.Write, Local: src, Segment: seg.ID, Remote: base, Transport: "shm"}); err != nil {
			t.Fatal(err)
		}
	}
	want := fmt.Sprintf(`
# HELP ferry_bytes_total Bytes of the requests that completed, by the transport that carried them; rate() of it is the throughput.
# TYPE ferry_bytes_total counter
ferry_bytes_total{engine="qos-meter",op="write",priority="normal",transport="shm"} %d
`, n*size)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ferry_bytes_total"); err != nil {
		t.Fatal(err)
	}
	if q := e.QoS(); !q.On || len(q.Tenants) == 0 || q.Tenants[0].Admitted != n {
		t.Fatalf("QoS() = %+v, want the default tenant with %d admitted", q, n)
	}
}
