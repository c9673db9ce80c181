package host_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/observe"
	"github.com/ferrydev/ferry/host/observe/observetest"
)

// observerTasks is how many worker transfers TestObserverSeesEveryTransition
// makes unless FERRY_OBSERVE_TASKS says otherwise.
const observerTasks = 2000

// TestObserverSeesEveryTransition attaches an observer (the test-only
// observetest.Recorder) with one line of wiring, host.WithObserver, to a
// chaos run: the fault plugin drops, corrupts, delays and crashes, the
// stall plugin stalls and is killed, tasks are canceled and time out. It
// checks that the observer saw every task of the run, each exactly once
// ended, as its op saw it end, and each stage at most once per attempt and
// in order (queued < admitted < routed < sliced < submitted < completed,
// retried attempts going retried, routed, ...); and that failover
// happened, so retried paths were seen.
func TestObserverSeesEveryTransition(t *testing.T) {
	n := observerTasks
	if v := os.Getenv("FERRY_OBSERVE_TASKS"); v != "" {
		if k, err := strconv.Atoi(v); err == nil && k > 0 {
			n = k
		}
	}
	seed := chaosSeed()
	crashAfter := max(100, n/8)
	t.Logf("observer chaos: %d tasks, seed %d (FERRY_CHAOS_SEED replays it)", n, seed)
	ctx, cancel := context.WithTimeout(context.Background(), chaosBound)
	defer cancel()

	rec := observetest.New()
	r := startChaos(t, ctx, "obs", crashAfter, host.WithObserver(rec)) // the one line of wiring
	e := r.e
	r.drive(ctx, n, seed)
	if ctx.Err() != nil {
		t.Fatalf("the run did not end within %v", chaosBound)
	}
	if r.failed.Load() {
		t.FailNow()
	}
	// The batches the run kept are done; freeing them ends nothing.
	for _, cb := range r.batches {
		if err := e.FreeBatch(cb.id); err != nil {
			t.Error(err)
		}
	}

	sum, errs := rec.Check()
	t.Logf("observer: %v", sum)
	for k, err := range errs {
		if k == 10 {
			t.Errorf("... and %d more", len(errs)-k)
			break
		}
		t.Error(err)
	}
	// Every task the run made, and no other, was seen; and each ended as
	// its op saw it end.
	if want := n + r.stallAll; sum.Tasks != want {
		t.Errorf("observer saw %d tasks, the run made %d (%d by workers, %d stall tasks)", sum.Tasks, want, n, r.stallAll)
	}
	// The workers' tasks are counted by state; of the stall tasks only
	// how many timed out.
	for s, c := range r.states {
		if s == host.StateTimeout {
			c += r.stallTO
		}
		if sum.Ended[s.String()] < c {
			t.Errorf("the run saw at least %d tasks end %v, the observer %d", c, s, sum.Ended[s.String()])
		}
	}
	for _, st := range []observe.Stage{observe.Queued, observe.Admitted, observe.Routed, observe.Sliced, observe.Submitted, observe.Completed, observe.Ended} {
		if sum.Stages[st] == 0 {
			t.Errorf("no %v transition over the run", st)
		}
	}
	if sum.Stages[observe.Queued] != sum.Tasks || sum.Stages[observe.Ended] != sum.Tasks {
		t.Errorf("%d queued and %d ended of %d tasks: each must be once per task", sum.Stages[observe.Queued], sum.Stages[observe.Ended], sum.Tasks)
	}
	if sum.Retried == 0 || sum.Stages[observe.Retried] == 0 {
		t.Errorf("no task was retried: the crashes and faults should have failed some over")
	}
	start := time.Now()
	if err := e.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	t.Logf("closed in %v", time.Since(start).Round(time.Millisecond))
}
