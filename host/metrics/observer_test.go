package metrics

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/ferrydev/ferry/host/observe"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// task is the events of one task, on a simulated clock (ms: the time of
// each stage in milliseconds).
func task(tr string, op ring.Op, pr sdk.Priority, length uint64, state progress.State, ms ...int64) []observe.Event {
	ns := func(i int) int64 { return (1000 + ms[i]) * 1e6 } // the engine's clock is never 0: 0 is "not timed"
	base := observe.Event{Batch: 1 << 32, Task: 0, Length: length, Op: op, Priority: pr}
	at := func(st observe.Stage, i, since int, trn string) observe.Event {
		ev := base
		ev.Stage, ev.At, ev.Transport = st, ns(i), trn
		if since >= 0 {
			ev.Since = ns(since)
		}
		return ev
	}
	end := at(observe.Ended, 5, 0, tr)
	end.State = state
	return []observe.Event{
		at(observe.Queued, 0, -1, ""), at(observe.Admitted, 1, 0, ""), at(observe.Routed, 2, -1, tr),
		at(observe.Sliced, 2, -1, tr), at(observe.Submitted, 3, 1, tr), at(observe.Completed, 4, 3, tr), end,
	}
}

func feed(o *Observer, evs []observe.Event) {
	for _, ev := range evs {
		o.Observe(ev)
	}
}

func TestObserverCounts(t *testing.T) {
	o := NewObserver([]string{"shm", "tcp"}, prometheus.Labels{"engine": "a"})
	feed(o, task("tcp", ring.OpWrite, sdk.PriorityNormal, 4096, progress.Completed, 0, 1, 2, 3, 13, 20))
	feed(o, task("tcp", ring.OpWrite, sdk.PriorityNormal, 1000, progress.Completed, 0, 1, 2, 3, 13, 20))
	feed(o, task("shm", ring.OpRead, sdk.PriorityHigh, 64, progress.Timeout, 0, 1, 2, 3, 4, 5))
	feed(o, task("shm", ring.OpRead, sdk.PriorityLow, 64, progress.Canceled, 0, 1, 2, 3, 4, 5))
	feed(o, []observe.Event{{Stage: observe.Queued, Op: ring.OpWrite}, {Stage: observe.Ended, Op: ring.OpWrite, State: progress.Invalid, Length: 9}})

	tpo := func(tr, op, pr string) []string { return []string{"transport", tr, "op", op, "priority", pr} }
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"bytes tcp write", count(t, o, "ferry_bytes_total", tpo("tcp", "write", "normal")...), 5096},
		{"completed tcp", count(t, o, "ferry_requests_total", append(tpo("tcp", "write", "normal"), "state", "completed")...), 2},
		{"timeout shm", count(t, o, "ferry_requests_total", append(tpo("shm", "read", "high"), "state", "timeout")...), 1},
		{"misses shm", count(t, o, "ferry_deadline_misses_total", tpo("shm", "read", "high")...), 1},
		{"cancels shm", count(t, o, "ferry_cancels_total", tpo("shm", "read", "low")...), 1},
		{"invalid", count(t, o, "ferry_requests_total", append(tpo("none", "write", "normal"), "state", "invalid")...), 1},
		{"queued writes", count(t, o, "ferry_requests_queued_total", "op", "write", "priority", "normal"), 3},
		{"bytes of what did not complete", count(t, o, "ferry_bytes_total", tpo("shm", "read", "high")...), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	// Stage latencies, from the simulated clock: two tcp writes of 1 ms
	// queued->admitted, 2 ms admitted->submitted, 10 ms in the plugin,
	// 20 ms end to end.
	for _, c := range []struct {
		stage, tr string
		sum       float64
	}{
		{StageQueuedAdmitted, "none", 0.002},
		{StageAdmittedSubmitted, "tcp", 0.004},
		{StageSubmittedCompleted, "tcp", 0.020},
		{StageEndToEnd, "tcp", 0.040},
	} {
		n, sum := histogram(t, o, "stage", c.stage, "transport", c.tr, "op", "write", "priority", "normal")
		if n != 2 || !near(sum, c.sum) {
			t.Errorf("stage %s on %s: %d samples summing %vs, want 2 summing %vs", c.stage, c.tr, n, sum, c.sum)
		}
	}
	if v := count(t, o, "ferry_metrics_unknown_transport_events_total"); v != 0 {
		t.Errorf("unknown transport events %v", v)
	}
	o.Observe(observe.Event{Stage: observe.Ended, Transport: "rdma", State: progress.Completed, Length: 1})
	if v := count(t, o, "ferry_metrics_unknown_transport_events_total"); v != 1 {
		t.Errorf("an event naming an unknown transport: counted %v, want 1", v)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// series returns the metric of family name that c collects whose
// labels include the name-value pairs, nil if there is none.
func series(t *testing.T, c prometheus.Collector, name string, pairs ...string) *dto.Metric {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k := 0; k+1 < len(pairs); k += 2 {
				if have[pairs[k]] != pairs[k+1] {
					continue metric
				}
			}
			return m
		}
	}
	return nil
}

// count returns a counter's value, 0 when the series does not exist.
func count(t *testing.T, c prometheus.Collector, name string, pairs ...string) float64 {
	t.Helper()
	return series(t, c, name, pairs...).GetCounter().GetValue()
}

// histogram returns the sample count and sum of one stage histogram.
func histogram(t *testing.T, c prometheus.Collector, pairs ...string) (uint64, float64) {
	t.Helper()
	h := series(t, c, "ferry_stage_duration_seconds", pairs...).GetHistogram()
	return h.GetSampleCount(), h.GetSampleSum()
}

func TestObserverRetriesAndFailovers(t *testing.T) {
	o := NewObserver([]string{"fault", "tcp"}, nil)
	retry := func(from, to, cause string) {
		o.Observe(observe.Event{Stage: observe.Retried, From: from, Transport: to, Cause: cause, Err: errors.New("x")})
	}
	retry("fault", "tcp", observe.CausePluginFailed)
	retry("fault", "tcp", observe.CausePluginFailed)
	retry("tcp", "tcp", "peer_unreachable") // another rail: a retry, no failover
	retry("fault", "fault", observe.CausePluginFailed)
	retry("tcp", "fault", "a cause with spaces") // not a word: unknown

	want := `
# HELP ferry_failovers_total Retries that moved a request to another transport, from the failed attempt's transport to the next one's, by cause.
# TYPE ferry_failovers_total counter
ferry_failovers_total{cause="plugin_failed",from="fault",to="tcp"} 2
ferry_failovers_total{cause="unknown",from="tcp",to="fault"} 1
# HELP ferry_retries_total Attempts that failed and were tried again, on another rail, another transport or the restarted plugin, by the failed attempt's transport and cause.
# TYPE ferry_retries_total counter
ferry_retries_total{cause="peer_unreachable",transport="tcp"} 1
ferry_retries_total{cause="plugin_failed",transport="fault"} 3
ferry_retries_total{cause="unknown",transport="tcp"} 1
`
	if err := testutil.CollectAndCompare(o, strings.NewReader(want), "ferry_failovers_total", "ferry_retries_total"); err != nil {
		t.Fatal(err)
	}
}

// TestObserveAllocatesNothing: once a task's series exist, observing its
// every event allocates nothing (the data path's cost).
func TestObserveAllocatesNothing(t *testing.T) {
	o := NewObserver([]string{"shm", "tcp"}, prometheus.Labels{"engine": "a"})
	evs := task("tcp", ring.OpWrite, sdk.PriorityNormal, 4096, progress.Completed, 0, 1, 2, 3, 13, 20)
	feed(o, evs) // creates the series
	if n := testing.AllocsPerRun(1000, func() { feed(o, evs) }); n != 0 {
		t.Fatalf("observing a task allocates %v times, want 0", n)
	}
}

// BenchmarkObserveTask is the observer's cost per request (its seven
// events), from one goroutine and from every core at once on the same
// series (the worst case: one transport, one op, one priority).
func BenchmarkObserveTask(b *testing.B) {
	o := NewObserver([]string{"shm", "tcp"}, nil)
	evs := task("tcp", ring.OpWrite, sdk.PriorityNormal, 4096, progress.Completed, 0, 1, 2, 3, 13, 20)
	feed(o, evs)
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			feed(o, evs)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				feed(o, evs)
			}
		})
	})
}

func eventRetried(from, to, cause string) observe.Event {
	return observe.Event{Stage: observe.Retried, From: from, Transport: to, Cause: cause}
}
