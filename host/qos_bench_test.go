package host_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
)

// qosOn is a qos block with nothing bounded: every request goes at once,
// through the queue's bookkeeping (the unloaded path's cost).
func qosOn(c *config.Config) {
	c.QoS = config.QoS{On: true, DefaultTenant: "default", MaxQueued: config.DefaultMaxQueued, Busy: config.QoSBlock, Lanes: config.QoSLanesShared}
}

// BenchmarkQoSRequestPath is BenchmarkRequestPath's 4 KiB writes in
// batches of 128 over shm, and one 4 KiB Transfer at a time, with
// admission off (no qos block) and on (a qos block that bounds nothing):
// what the queue costs a request on the unloaded path. -count=N runs
// each sub-benchmark N times in a row (off, off, off, then on...), not
// interleaved: for the on-off comparison use BenchmarkQoSCost, whose arms
// take turns in one run.
func BenchmarkQoSRequestPath(b *testing.B) {
	for _, on := range []bool{false, true} {
		name, tune := "qos=off", func(c *config.Config) {}
		if on {
			name, tune = "qos=on", qosOn
		}
		b.Run("batch128/"+name, func(b *testing.B) { benchRequestPath(b, tune) })
		b.Run("transfer/"+name, func(b *testing.B) { benchTransfer4K(b, tune) })
	}
}

// benchTransfer4K times one 4 KiB write at a time, Transfer to Transfer.
func benchTransfer4K(b *testing.B, tune func(*config.Config)) {
	ctx := context.Background()
	cfg := config.Default(fmt.Sprintf("bench-t-%d", b.N))
	cfg.PluginDir = binDir
	tune(cfg)
	e, err := host.New(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	mem, err := e.Allocate(8192)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := e.Register(ctx, mem[:4096], host.LocalOnly); err != nil {
		b.Fatal(err)
	}
	base, err := e.Register(ctx, mem[4096:], host.RemoteReadWrite)
	if err != nil {
		b.Fatal(err)
	}
	seg, err := e.OpenSegment(ctx, e.Name())
	if err != nil {
		b.Fatal(err)
	}
	req := host.Request{Op: host.Write, Local: mem[:4096], Segment: seg.ID, Remote: base, Transport: "shm"}
	for range 100 {
		if err := e.Transfer(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := e.Transfer(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkQoSIsolation measures the HIGH 4 KiB read's p99 latency
// alone, then beside a saturating LOW stream of 64 MiB writes (two in
// flight, back to back), over shm and tcp, with three lane layouts (3
// lanes per plugin in each):
//
//	off        no qos block: every class on every lane
//	shared     qos, lanes = "shared": the low class at one request in
//	           flight (shallow rings: at most one 64 MiB request's slices
//	           ahead of a HIGH one)
//	per_class  qos, lanes = "per_class": HIGH alone on the first lane
//
// and, over tcp, each of them again with the plugin's priority_connection
// = false (<mode>/shared_conns: every class on the same connections, as
// before high-priority descriptors had a connection of their own), and
// per_class with receiver credit off (per_class/no_credit: what the
// shared credit window adds to the HIGH read's wait); per_class/bulk_nice=0
// keeps the plugin's bulk threads at the normal niceness (sdk.LowerThread).
//
// b.N HIGH reads are timed under load; the metrics are the p99s in µs
// and their ratio (loaded/unloaded: the isolation leakage). Run with a
// fixed -benchtime (e.g. 2000x).
func BenchmarkQoSIsolation(b *testing.B) {
	for _, transport := range []string{"shm", "tcp"} {
		for _, mode := range []string{"off", "shared", "per_class"} {
			b.Run(transport+"/"+mode, func(b *testing.B) { benchIsolation(b, transport, mode, "") })
			if transport == "tcp" {
				b.Run(transport+"/"+mode+"/shared_conns", func(b *testing.B) { benchIsolation(b, transport, mode, "shared_conns") })
			}
			if transport == "tcp" && mode == "per_class" {
				b.Run(transport+"/"+mode+"/no_credit", func(b *testing.B) { benchIsolation(b, transport, mode, "no_credit") })
			}
			if mode == "per_class" {
				b.Run(transport+"/"+mode+"/bulk_nice=0", func(b *testing.B) { benchIsolation(b, transport, mode, "bulk_nice=0") })
			}
		}
	}
}

func benchIsolation(b *testing.B, transport, mode, variant string) {
	const bulk = 64 << 20
	ctx := context.Background()
	cfg := config.Default(fmt.Sprintf("bench-iso-%d", b.N))
	cfg.PluginDir = binDir
	cfg.Transfer.Lanes = 3
	switch mode {
	case "shared":
		qosOn(cfg)
		cfg.QoS.Classes = []config.QoSClass{{Name: "low", QoSLimits: config.QoSLimits{InflightRequests: 1}}}
	case "per_class":
		qosOn(cfg)
		cfg.QoS.Lanes = config.QoSLanesPerClass
	}
	if mode == "per_class" && transport == "tcp" && variant != "bulk_nice=0" {
		// tcp's bulk_nice is off by default (normal priority rides its
		// bulk connections); per_class is measured with it on.
		for i := range cfg.Plugins {
			if cfg.Plugins[i].Name == "tcp" {
				cfg.Plugins[i].Body = append(cfg.Plugins[i].Body, "bulk_nice = 10\n"...)
			}
		}
	}
	switch variant {
	case "no_credit":
		off := false
		cfg.QoS.Credit.Enabled = &off
	case "shared_conns":
		for i := range cfg.Plugins {
			if cfg.Plugins[i].Name == "tcp" {
				cfg.Plugins[i].Body = append(cfg.Plugins[i].Body, "priority_connection = false\n"...)
			}
		}
	case "bulk_nice=0":
		for i := range cfg.Plugins {
			if cfg.Plugins[i].Name == transport {
				cfg.Plugins[i].Body = append(cfg.Plugins[i].Body, "bulk_nice = 0\n"...)
			}
		}
	}
	e, err := host.New(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	mem, err := e.Allocate(4 * bulk)
	if err != nil {
		b.Fatal(err)
	}
	local, remote := mem[:2*bulk], mem[2*bulk:]
	if _, err := e.Register(ctx, local, host.LocalOnly); err != nil {
		b.Fatal(err)
	}
	base, err := e.Register(ctx, remote, host.RemoteReadWrite)
	if err != nil {
		b.Fatal(err)
	}
	seg, err := e.OpenSegment(ctx, e.Name())
	if err != nil {
		b.Fatal(err)
	}
	high := host.Request{Op: host.Read, Local: local[:4096], Segment: seg.ID, Remote: base, Priority: host.PriorityHigh, Transport: transport}
	lat := make([]time.Duration, 0, max(b.N, 1000))
	measure := func(n int) time.Duration {
		lat = lat[:0]
		for range n {
			t0 := time.Now()
			if err := e.Transfer(ctx, high); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		slices.Sort(lat)
		return lat[len(lat)*99/100]
	}
	measure(200) // warm
	alone := measure(1000)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	started := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		lows := []host.Request{
			{Op: host.Write, Local: local[:bulk], Segment: seg.ID, Remote: base, Priority: host.PriorityLow, Transport: transport},
			{Op: host.Write, Local: local[bulk:], Segment: seg.ID, Remote: base + bulk, Priority: host.PriorityLow, Transport: transport},
		}
		once := sync.Once{}
		for {
			select {
			case <-stop:
				return
			default:
			}
			id, err := e.AllocateBatch(len(lows))
			if err != nil {
				b.Error(err)
				return
			}
			if err := e.Submit(id, lows...); err != nil {
				b.Error(err)
				return
			}
			once.Do(func() { close(started) })
			if err := e.Wait(ctx, id); err != nil {
				b.Error(err)
			}
			e.FreeBatch(id)
		}
	}()
	<-started
	b.ResetTimer()
	loaded := measure(b.N)
	b.StopTimer()
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(alone.Microseconds()), "p99-alone-µs")
	b.ReportMetric(float64(loaded.Microseconds()), "p99-loaded-µs")
	b.ReportMetric(float64(loaded)/float64(alone), "leakage")
}
