package metrics

import (
	"bytes"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// TestBucketOfSearches: bucketOf is the first LatencyBuckets bound at or
// above a sample, as a search of the bounds finds it, on and around every
// bound and far beyond the last.
func TestBucketOfSearches(t *testing.T) {
	search := func(ns int64) int {
		k := 0
		for k < len(latencyBoundsNs) && ns > latencyBoundsNs[k] {
			k++
		}
		return k
	}
	ns := []int64{-5, 0, 1, 60e9, 1 << 62}
	for _, b := range latencyBoundsNs {
		ns = append(ns, b-1, b, b+1, b+b/2)
	}
	for _, v := range ns {
		if got, want := bucketOf(v), search(v); got != want {
			t.Errorf("bucketOf(%d) = %d, want %d", v, got, want)
		}
	}
}

// TestRunTallyIsMeter: what a run's tally counts, once flushed, is what
// the meter exports had each end been counted and timed into it directly
// (Ended, Time end_to_end): every series, counter and histogram; nothing
// shows before the flush, and a flushed tally starts again from empty.
func TestRunTallyIsMeter(t *testing.T) {
	type end struct {
		p      int32
		op     ring.Op
		pr     sdk.Priority
		s      progress.State
		length uint64
		e2e    int64
	}
	ends := []end{
		{0, ring.OpWrite, sdk.PriorityNormal, progress.Completed, 4096, 3000},
		{0, ring.OpWrite, sdk.PriorityNormal, progress.Completed, 4096, 4000},
		{0, ring.OpWrite, sdk.PriorityNormal, progress.Failed, 4096, 70_000},
		{1, ring.OpRead, sdk.PriorityHigh, progress.Completed, 0, 999},
		{1, ring.OpRead, sdk.PriorityLow, progress.Timeout, 64, 5e9},
		{-1, ring.OpWrite, sdk.PriorityNormal, progress.Invalid, 8, -1}, // never routed, not timed
		{1, ring.OpWrite, sdk.PriorityHigh, progress.Canceled, 8, 1},
	}
	names := []string{"shm", "tcp"}
	direct, batched := NewMeter(names, nil), NewMeter(names, nil)
	var r progress.Run
	tally := batched.RunTally(&r)
	if batched.RunTally(&r) != tally {
		t.Fatal("a run's tally is made anew on its second use")
	}
	for round := range 2 { // the second round after a flush: the tally starts from empty
		for _, e := range ends {
			direct.Ended(e.p, e.op, e.pr, e.s, e.length)
			direct.Time(SpanEndToEnd, e.p, e.op, e.pr, e.e2e)
			tally.Ended(e.p, e.op, e.pr, e.s, e.length, e.e2e)
		}
		if round == 0 && expose(t, batched) != expose(t, NewMeter(names, nil)) {
			t.Fatalf("a tally's counts show before its flush:\n%s", expose(t, batched))
		}
		tally.Flush()
		if got, want := expose(t, batched), expose(t, direct); got != want {
			t.Fatalf("round %d: flushed tally exports\n%s\nwant (counted directly)\n%s", round, got, want)
		}
	}
}

// expose is the text exposition of m's series.
func expose(t *testing.T, m *Meter) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, mf := range mfs {
		if err := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain)).Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.String()
}
