package path

import (
	"testing"

	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// TestQueuedStampKeepsKind: a task's queued stamp holds its time and its
// request's op and priority in one word, and gives each back as it was
// stamped (a priority the meter has no label for as normal, which is how
// the meter labels it anyway); a later stamp is timed from it, an older
// one (the record's previous task's) is not.
func TestQueuedStampKeepsKind(t *testing.T) {
	e := &Executor{tracker: progress.NewTracker(1)}
	e.wirePath(Options{Observer: noopObserver{}})
	b, err := e.tracker.Allocate(8)
	if err != nil {
		t.Fatal(err)
	}
	e.path.attach(b)
	const at = int64(1) << 58 // a clock 9 years on
	for _, c := range []struct {
		op     Op
		pr     sdk.Priority
		wantOp ring.Op
		wantPr sdk.Priority
	}{
		{Write, sdk.PriorityNormal, ring.OpWrite, sdk.PriorityNormal},
		{Read, sdk.PriorityHigh, ring.OpRead, sdk.PriorityHigh},
		{Write, sdk.PriorityLow, ring.OpWrite, sdk.PriorityLow},
		{Read, sdk.Priority(7), ring.OpRead, sdk.PriorityNormal},
	} {
		i := b.Reserve(1, 0)
		*e.path.record(b, i) = taskRecord{req: Request{Op: c.op, Priority: c.pr}}
		e.path.stampQueued(b, i, at+int64(i))
		ts := e.path.stamps(b, i)
		if op, pr := ts.kindOf(); op != c.wantOp || pr != c.wantPr {
			t.Errorf("task %d (%v, priority %d): kind %v, %d; want %v, %d", i, c.op, c.pr, op, pr, c.wantOp, c.wantPr)
		}
		if q := ts.queuedAt(); q != at+int64(i) {
			t.Errorf("task %d: queued at %d, want %d", i, q, at+int64(i))
		}
		if ts.since(at+int64(i)) == 0 || ts.since(at+int64(i)-1) != 0 {
			t.Errorf("task %d: a stamp at its queued time is not timed from, or one before it is", i)
		}
	}
}
