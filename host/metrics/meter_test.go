package metrics

import (
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// TestMeterHistogramIsPrometheus: a span's series is what a Prometheus
// histogram over LatencyBuckets exports for the same samples: the same
// bucket counts (samples on a bound included), count and sum.
func TestMeterHistogramIsPrometheus(t *testing.T) {
	m := NewMeter([]string{"shm"}, nil)
	ref := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ref", Buckets: LatencyBuckets})
	ns := []int64{0, 1, 999, 1000, 1001, 3999, 4000, 4001, 16000, 250_000, 1_000_000, 4_194_304_000, 4_194_304_001, 60e9}
	for _, d := range ns {
		m.Time(SpanSubmittedCompleted, 0, ring.OpRead, sdk.PriorityLow, d)
		ref.Observe(float64(d) / 1e9)
	}
	got := series(t, m, "ferry_stage_duration_seconds", "stage", StageSubmittedCompleted, "transport", "shm", "op", "read", "priority", "low").GetHistogram()
	var w dto.Metric
	if err := ref.Write(&w); err != nil {
		t.Fatal(err)
	}
	want := w.GetHistogram()
	if got.GetSampleCount() != want.GetSampleCount() || !near(got.GetSampleSum(), want.GetSampleSum()) {
		t.Errorf("count %d sum %v, want %d and %v", got.GetSampleCount(), got.GetSampleSum(), want.GetSampleCount(), want.GetSampleSum())
	}
	if len(got.GetBucket()) != len(want.GetBucket()) {
		t.Fatalf("%d buckets, want %d", len(got.GetBucket()), len(want.GetBucket()))
	}
	for k, b := range want.GetBucket() {
		if g := got.GetBucket()[k]; g.GetUpperBound() != b.GetUpperBound() || g.GetCumulativeCount() != b.GetCumulativeCount() {
			t.Errorf("bucket le=%v: %d, want le=%v: %d", g.GetUpperBound(), g.GetCumulativeCount(), b.GetUpperBound(), b.GetCumulativeCount())
		}
	}
	m.Time(SpanEndToEnd, 0, ring.OpRead, sdk.PriorityLow, -1) // a clock that was not read
	if s := series(t, m, "ferry_stage_duration_seconds", "stage", StageEndToEnd); s != nil {
		t.Errorf("a negative span was observed: %v", s)
	}
}

// TestMeterSeriesOnceCounted: a meter exports a series once something
// was counted in it, as the client library's vectors do once a child is
// used: a fresh meter exports only its unknown-transport counter.
func TestMeterSeriesOnceCounted(t *testing.T) {
	m := NewMeter([]string{"shm", "tcp"}, prometheus.Labels{"engine": "a"})
	if n := testutil.CollectAndCount(m); n != 1 {
		t.Fatalf("a fresh meter exports %d series, want 1 (unknown transport events)", n)
	}
	m.Queued(ring.OpWrite, sdk.PriorityNormal)
	m.Ended(1, ring.OpWrite, sdk.PriorityNormal, progress.Completed, 4096)
	m.Ended(0, ring.OpRead, sdk.PriorityHigh, progress.Timeout, 64)
	want := `
# HELP ferry_bytes_total Bytes of the requests that completed, by the transport that carried them; rate() of it is the throughput.
# TYPE ferry_bytes_total counter
ferry_bytes_total{engine="a",op="write",priority="normal",transport="tcp"} 4096
# HELP ferry_deadline_misses_total Requests that ended TIMEOUT: their deadline passed before they completed.
# TYPE ferry_deadline_misses_total counter
ferry_deadline_misses_total{engine="a",op="read",priority="high",transport="shm"} 1
# HELP ferry_requests_queued_total Requests that took their place in a batch (before validation, admission and routing).
# TYPE ferry_requests_queued_total counter
ferry_requests_queued_total{engine="a",op="write",priority="normal"} 1
# HELP ferry_requests_total Requests that ended, by the transport of their last attempt (none: never routed) and terminal state.
# TYPE ferry_requests_total counter
ferry_requests_total{engine="a",op="read",priority="high",state="timeout",transport="shm"} 1
ferry_requests_total{engine="a",op="write",priority="normal",state="completed",transport="tcp"} 1
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "ferry_bytes_total", "ferry_deadline_misses_total",
		"ferry_requests_queued_total", "ferry_requests_total", "ferry_cancels_total", "ferry_stage_duration_seconds"); err != nil {
		t.Fatal(err)
	}
}

// TestMeterUnknownPlugin: a plugin index the meter was not built with is
// counted as unknown and filed under none, never out of bounds.
func TestMeterUnknownPlugin(t *testing.T) {
	m := NewMeter([]string{"shm"}, nil)
	m.Ended(1, ring.OpWrite, sdk.PriorityNormal, progress.Completed, 8)
	m.Time(SpanEndToEnd, 7, ring.OpWrite, sdk.PriorityNormal, 10)
	m.Ended(0, ring.OpWrite, sdk.PriorityNormal, 0, 8) // not a terminal state: nothing
	if v := count(t, m, "ferry_metrics_unknown_transport_events_total"); v != 2 {
		t.Errorf("unknown plugin events %v, want 2", v)
	}
	if v := count(t, m, "ferry_bytes_total", "transport", NoTransport); v != 8 {
		t.Errorf("bytes under none %v, want 8", v)
	}
	if n, _ := histogram(t, m, "stage", StageEndToEnd, "transport", NoTransport); n != 1 {
		t.Errorf("end to end samples under none %d, want 1", n)
	}
	if v := count(t, m, "ferry_requests_total", "transport", "shm"); v != 0 {
		t.Errorf("a non-terminal end was counted on shm: %v", v)
	}
}

// TestMeterAllocatesNothing: counting and timing a request, every span,
// allocates nothing, from its first request on.
func TestMeterAllocatesNothing(t *testing.T) {
	m := NewMeter([]string{"shm", "tcp"}, prometheus.Labels{"engine": "a"})
	if n := testing.AllocsPerRun(1000, func() { meterTask(m) }); n != 0 {
		t.Fatalf("metering a request allocates %v times, want 0", n)
	}
}

// TestMeterScrapeDuringTraffic: scrapes while requests are counted from
// several goroutines neither block them nor lose a count (run with
// -race: Collect reads what the data path writes).
func TestMeterScrapeDuringTraffic(t *testing.T) {
	m := NewMeter([]string{"shm"}, nil)
	const workers, each = 4, 2000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	scraped := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				scraped <- n
				return
			default:
				testutil.CollectAndCount(m)
				n++
			}
		}
	}()
	for range workers {
		wg.Go(func() {
			for range each {
				meterTask(m)
			}
		})
	}
	wg.Wait()
	close(stop)
	if n := <-scraped; n == 0 {
		t.Log("no scrape overlapped the traffic")
	}
	if v := count(t, m, "ferry_requests_total", "transport", "shm", "state", "completed"); v != workers*each {
		t.Errorf("completed %v, want %d", v, workers*each)
	}
	if v := count(t, m, "ferry_bytes_total", "transport", "shm"); v != workers*each*4096 {
		t.Errorf("bytes %v, want %d", v, workers*each*4096)
	}
	if n, sum := histogram(t, m, "stage", StageEndToEnd, "transport", "shm"); n != workers*each || !near(sum, workers*each*20e-6) {
		t.Errorf("end to end: %d samples summing %vs, want %d summing %vs", n, sum, workers*each, workers*each*20e-6)
	}
}

// meterTask is what the engine adds to its meter for one request that
// completes on its first attempt on shm.
func meterTask(m *Meter) {
	m.Queued(ring.OpWrite, sdk.PriorityNormal)
	m.Time(SpanQueuedAdmitted, -1, ring.OpWrite, sdk.PriorityNormal, 1000)
	m.Time(SpanAdmittedSubmitted, 0, ring.OpWrite, sdk.PriorityNormal, 2000)
	m.Time(SpanSubmittedCompleted, 0, ring.OpWrite, sdk.PriorityNormal, 10000)
	m.Ended(0, ring.OpWrite, sdk.PriorityNormal, progress.Completed, 4096)
	m.Time(SpanEndToEnd, 0, ring.OpWrite, sdk.PriorityNormal, 20000)
}

// BenchmarkMeterTask is the meter's cost per request (BenchmarkObserveTask
// is the same request's events through an Observer), from one goroutine
// and from every core at once on the same series.
func BenchmarkMeterTask(b *testing.B) {
	m := NewMeter([]string{"shm", "tcp"}, nil)
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			meterTask(m)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				meterTask(m)
			}
		})
	})
}

// TestTallyAddsOnceAndEmpties: what a submitter's Tally counted reaches
// the meter's queued series, by op and priority, when it is added, and
// the tally is empty afterwards (a second add adds nothing).
func TestTallyAddsOnceAndEmpties(t *testing.T) {
	m := NewMeter([]string{"shm"}, nil)
	var tl Tally
	for range 3 {
		tl.Queued(ring.OpWrite, sdk.PriorityNormal)
	}
	tl.Queued(ring.OpRead, sdk.PriorityHigh)
	m.Queued(ring.OpRead, sdk.PriorityHigh)
	m.AddQueued(&tl)
	m.AddQueued(&tl)
	for _, c := range []struct {
		op, prio string
		want     float64
	}{{"write", "normal", 3}, {"read", "high", 2}} {
		if got := series(t, m, "ferry_requests_queued_total", "op", c.op, "priority", c.prio).GetCounter().GetValue(); got != c.want {
			t.Errorf("queued %s %s: %v, want %v", c.op, c.prio, got, c.want)
		}
	}
}
