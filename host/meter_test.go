package host_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/metrics"
)

// TestMeterTimesEveryStage: with metrics and no observer (the engine
// counts into its meter, not through events), every request of batches
// that reuse their records is counted once and timed end to end, and
// the tasks the meter samples (metrics.SampleEvery) at each of the other
// three stage spans: a stamp the record kept from an earlier batch's task
// is not taken for this one's.
func TestMeterTimesEveryStage(t *testing.T) {
	const size, batch, rounds = 4 << 10, 16, 3
	ctx := context.Background()
	reg := prometheus.NewPedanticRegistry()
	cfg := config.Default("meter-a")
	cfg.PluginDir = binDir
	e, err := host.New(ctx, cfg, host.WithMetricsRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	src, _, seg, base := ownSegment(t, e, batch*size)
	reqs := make([]host.Request, batch)
	for k := range reqs {
		reqs[k] = host.Request{Op: host.Read, Priority: host.PriorityHigh, Local: src[k*size : (k+1)*size], Segment: seg.ID, Remote: base + uint64(k*size), Transport: "shm"}
	}
	for range rounds {
		id, err := e.AllocateBatch(batch)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Submit(id, reqs...); err != nil {
			t.Fatal(err)
		}
		if err := e.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
		if bs, _ := e.BatchStatus(id); bs.Completed != batch {
			t.Fatalf("batch %+v, want %d completed", bs, batch)
		}
		e.FreeBatch(id)
	}
	const n = batch * rounds
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	find := func(name string, labels map[string]string) (counter float64, samples uint64, sum float64, ok bool) {
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		metric:
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if v, want := l.GetValue(), labels[l.GetName()]; want != "" && v != want {
						continue metric
					}
				}
				return m.GetCounter().GetValue(), m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum(), true
			}
		}
		return 0, 0, 0, false
	}
	rh := map[string]string{"engine": "meter-a", "op": "read", "priority": "high"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range rh {
			m[k] = v
		}
		for k := 0; k+1 < len(kv); k += 2 {
			m[kv[k]] = kv[k+1]
		}
		return m
	}
	if v, _, _, _ := find("ferry_requests_queued_total", rh); v != n {
		t.Errorf("queued %v, want %d", v, n)
	}
	if v, _, _, _ := find("ferry_requests_total", with("transport", "shm", "state", "completed")); v != n {
		t.Errorf("completed %v, want %d", v, n)
	}
	if v, _, _, _ := find("ferry_bytes_total", with("transport", "shm")); v != n*size {
		t.Errorf("bytes %v, want %d", v, n*size)
	}
	// Tasks 0, SampleEvery, 2*SampleEvery... of each batch are timed at
	// every stage; every task end to end.
	const sampled = rounds * ((batch + metrics.SampleEvery - 1) / metrics.SampleEvery)
	for _, c := range []struct {
		stage, transport string
		want             uint64
	}{
		{"queued_admitted", "none", sampled}, {"admitted_submitted", "shm", sampled}, {"submitted_completed", "shm", sampled}, {"end_to_end", "shm", n},
	} {
		_, samples, sum, ok := find("ferry_stage_duration_seconds", with("stage", c.stage, "transport", c.transport))
		if !ok || samples != c.want || sum <= 0 {
			t.Errorf("stage %s on %s: %d samples summing %vs (found %v), want %d with a positive sum", c.stage, c.transport, samples, sum, ok, c.want)
		}
	}
}

// TestMeterCountsWithQoS: with a qos block, whose queue holds requests
// back (inflight_requests), and metrics but no observer, the meter still
// counts every request's end and its bytes and times it end to end; it
// used to count none, the qos block's watcher passing the tracker's
// reports on only to an observer (the meter, set as the tracker's
// watcher before it, was replaced).
func TestMeterCountsWithQoS(t *testing.T) {
	const size, n = 4 << 10, 16
	ctx := context.Background()
	reg := prometheus.NewPedanticRegistry()
	e, src, seg, dst := qosEngine(t, "meter-qos", "qos {\n  inflight_requests = 2\n}", n*size, host.WithMetricsRegistry(reg))
	reqs := make([]host.Request, n)
	for k := range reqs {
		reqs[k] = host.Request{Op: host.Write, Local: src[k*size : (k+1)*size], Segment: seg, Remote: dst + uint64(k*size)}
	}
	if err := e.Transfer(ctx, reqs...); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var completed, bytes float64
	var timed uint64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch {
			case mf.GetName() == "ferry_requests_total" && labels["state"] == "completed":
				completed += m.GetCounter().GetValue()
			case mf.GetName() == "ferry_bytes_total":
				bytes += m.GetCounter().GetValue()
			case mf.GetName() == "ferry_stage_duration_seconds" && labels["stage"] == "end_to_end":
				timed += m.GetHistogram().GetSampleCount()
			}
		}
	}
	if completed != n || timed != n || bytes != n*size {
		t.Errorf("meter counted %v completed requests of %v bytes and timed %d end to end, want %d requests of %d bytes, each timed", completed, bytes, timed, n, n*size)
	}
	if q := quick(e).QoS; !q.On || len(q.Tenants) == 0 || q.Tenants[0].Admitted != n {
		t.Errorf("QoS() = %+v, want the default tenant with %d admitted", q, n)
	}
}
