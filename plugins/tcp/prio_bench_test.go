package tcp_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// BenchmarkHighBesideBulk times a high-priority 4 KiB read, one at a
// time, alone and then beside a saturating stream of low-priority 1 MiB
// writes (eight in flight, the host's slice size and about its default
// credit window) to the same peer, with priority_connection on and off:
// the plugin's own share of BenchmarkQoSIsolation's tcp leakage, without
// the host. The metrics are the p99s in µs and their ratio. Run with a
// fixed -benchtime (e.g. 2000x); compare the rows in one run. The
// default row keeps the bulk connections' threads at the normal
// niceness (bulk_nice = 0); the priority_thread=false rows have the
// priority connections' readers wait in the runtime's poller (prio.go).
func BenchmarkHighBesideBulk(b *testing.B) {
	for _, row := range []struct{ name, cfg string }{
		{"priority_connection=on", ""},
		{"priority_connection=on/priority_thread=false", "priority_thread = false"},
		{"priority_connection=on/bulk_nice=10", "bulk_nice = 10"},
		{"priority_connection=on/bulk_nice=10/priority_thread=false", "bulk_nice = 10\npriority_thread = false"},
		{"priority_connection=off", "priority_connection = false"},
	} {
		b.Run(row.name, func(b *testing.B) { benchHighBesideBulk(b, "connections_per_peer = 2\n"+row.cfg) })
	}
}

func benchHighBesideBulk(b *testing.B, cfg string) {
	const (
		slice  = 1 << 20
		window = 8
		bulk   = window * slice
	)
	a := startEngine(b, "bench-a", 1, cfg)
	t := startEngine(b, "bench-b", 2, cfg)
	src, dst := make([]byte, bulk+4096), make([]byte, bulk+4096)
	a.register(b, 1, src, sdk.PermLocal)
	t.register(b, 1, dst, sdk.PermRemoteReadWrite)
	a.open(b, 1, t)
	high := ring.Descriptor{Op: ring.OpRead, Prio: uint8(sdk.PriorityHigh), Peer: 1, LocalRegion: 1, LocalOffset: bulk,
		RemoteRegion: 1, RemoteOffset: bulk, Length: 4096}
	done := make(chanCompleter, 1)
	lat := make([]time.Duration, 0, max(b.N, 1000))
	measure := func(n int) time.Duration {
		lat = lat[:0]
		for i := range n {
			high.Token = uint64(i)
			t0 := time.Now()
			a.tr.Submit(&high, done)
			if st := <-done; st != ring.StatusOK {
				b.Fatalf("high read: %v", st)
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
	wg.Add(1)
	go func() {
		defer wg.Done()
		lowDone := make(chanCompleter, window)
		d := ring.Descriptor{Op: ring.OpWrite, Prio: uint8(sdk.PriorityLow), Peer: 1, LocalRegion: 1, RemoteRegion: 1, Length: slice}
		for i := range window {
			d.Token, d.LocalOffset, d.RemoteOffset = uint64(i), uint64(i)*slice, uint64(i)*slice
			a.tr.Submit(&d, lowDone)
		}
		for i := window; ; i++ {
			if st := <-lowDone; st != ring.StatusOK {
				b.Errorf("low write: %v", st)
				return
			}
			select {
			case <-stop:
				for range window - 1 {
					<-lowDone
				}
				return
			default:
			}
			off := uint64(i%window) * slice
			d.Token, d.LocalOffset, d.RemoteOffset = uint64(i), off, off
			a.tr.Submit(&d, lowDone)
		}
	}()
	b.ResetTimer()
	loaded := measure(b.N)
	b.StopTimer()
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(alone.Microseconds()), "p99-alone-µs")
	b.ReportMetric(float64(loaded.Microseconds()), "p99-loaded-µs")
	b.ReportMetric(float64(loaded)/float64(alone), "leakage")
}
