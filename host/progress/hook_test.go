package progress

import (
	"fmt"
	"sync"
	"testing"

	"github.com/ferrydev/ferry/sdk/ring"
)

// calls records, in order, the calls a chain of hooks makes.
type calls struct {
	mu  sync.Mutex
	got []string
}

func (c *calls) add(format string, a ...any) {
	c.mu.Lock()
	c.got = append(c.got, fmt.Sprintf(format, a...))
	c.mu.Unlock()
}

func (c *calls) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	got := c.got
	c.got = nil
	return got
}

func sameCalls(t *testing.T, what string, got, want []string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: calls %q, want %q", what, got, want)
	}
}

// recorder is a hook named name that records every event it is told of
// in c; with run, it counts ends in runs (RunEnded, Flush).
func recorder(c *calls, name string, run bool) Hook {
	h := Hook{
		Failed:  func(_ *Batch, i int, _ error) bool { c.add("%s failed %d", name, i); return false },
		Held:    func(_ *Batch, i int) { c.add("%s held %d", name, i) },
		Settled: func(_ *Batch, i int, st ring.Status, _ int64) { c.add("%s settled %d %v", name, i, st) },
		Ended:   func(_ *Batch, i int, s State, _ int64) { c.add("%s ended %d %v", name, i, s) },
		Reaped:  func(_ *Lane, ds []ring.Descriptor) { c.add("%s reaped %d", name, len(ds)) },
	}
	if run {
		h.Unordered = true
		h.RunEnded = func(_ *Run, _ *Batch, i int, s State, settled bool) {
			c.add("%s run-ended %d %v %v", name, i, s, settled)
		}
		h.Flush = func(*Run) { c.add("%s flush", name) }
	}
	return h
}

// TestHookOrder: every event reaches the hooks that take it in the order
// they were registered; a hook without RunEnded hears of an end in a run
// as Settled and Ended, one with it with RunEnded alone.
func TestHookOrder(t *testing.T) {
	var c calls
	tr := NewTracker(2)
	tr.Hook(recorder(&c, "a", false))
	tr.Hook(recorder(&c, "b", true))
	tr.Hook(Hook{}) // takes nothing: changes nothing
	tr.Hook(recorder(&c, "c", false))
	b, _ := tr.Allocate(3)
	for range 3 {
		b.SetSlices(b.Reserve(10, 0), 1)
	}

	tr.Complete(b.Token(0), ring.StatusOK, 10)
	sameCalls(t, "a settling outside a run", c.take(), []string{
		"a settled 0 ok", "b settled 0 ok", "c settled 0 ok", "a ended 0 COMPLETED", "b ended 0 COMPLETED", "c ended 0 COMPLETED"})

	r := &Run{At: 1}
	tr.ApplyRun(b.Token(1), ring.StatusIO, 0, r)
	sameCalls(t, "a failure in a run", c.take(), []string{
		"a settled 1 i/o error", "b settled 1 i/o error", "c settled 1 i/o error", "a failed 1", "b failed 1", "c failed 1",
		"a ended 1 FAILED", "b run-ended 1 FAILED false", "c ended 1 FAILED"})

	b.Finish(2, Canceled, nil) // its slice is out: held
	sameCalls(t, "a hold", c.take(), []string{"a held 2", "b held 2", "c held 2"})
	tr.ApplyRun(b.Token(2), ring.StatusOK, 10, r) // the batch's last end
	sameCalls(t, "a held task's end in a run", c.take(), []string{
		"a ended 2 CANCELED", "b run-ended 2 CANCELED false", "c ended 2 CANCELED", "b flush"})
	tr.FlushRun(r)
	sameCalls(t, "a run's end", c.take(), []string{"b flush"})

	b2, _ := tr.Allocate(2)
	b2.SetSlices(b2.Reserve(10, 0), 1)
	b2.Reserve(10, 0)
	tr.ApplyRun(b2.Token(0), ring.StatusOK, 10, r)
	sameCalls(t, "an end in a run as its attempt settles", c.take(), []string{
		"a settled 0 ok", "c settled 0 ok", "a ended 0 COMPLETED", "b run-ended 0 COMPLETED true", "c ended 0 COMPLETED"})

	l := newTestLane(t, 0)
	p := newPluginEnd(t, l)
	p.complete(b2.Token(1), 0, 10)
	p.complete(b2.Token(1), 0, 10)
	l.Poll(tr)
	if got := c.take(); len(got) < 3 || fmt.Sprint(got[:3]) != "[a reaped 2 b reaped 2 c reaped 2]" {
		t.Errorf("a lane's reaped run: calls %q, want a, b, c told of its 2 completions first", got)
	}
}

// TestHookAfterAllocatePanics: a hook registered once batches were
// handed out would miss their tasks' events; Hook refuses it.
func TestHookAfterAllocatePanics(t *testing.T) {
	tr := NewTracker(1)
	b, _ := tr.Allocate(1)
	tr.Free(b)
	defer func() {
		if recover() == nil {
			t.Error("Hook after Allocate did not panic")
		}
	}()
	tr.Hook(Hook{Ended: func(*Batch, int, State, int64) {}})
}

// TestHookFirstTakerWins: a failed attempt is offered down the chain
// until a hook takes it; the hooks after the taker are not asked, and the
// task stays pending for the taker. Once nobody takes it, it ends FAILED.
func TestHookFirstTakerWins(t *testing.T) {
	var asked []string
	take := map[string]bool{"b": true}
	tr := NewTracker(1)
	for _, name := range []string{"a", "b", "c"} {
		tr.Hook(Hook{Failed: func(*Batch, int, error) bool { asked = append(asked, name); return take[name] }})
	}
	b, _ := tr.Allocate(1)
	i := b.Reserve(10, 0)
	b.SetSlices(i, 1)
	b.Cut(i)
	tr.Complete(b.Token(i), ring.StatusIO, 0)
	if fmt.Sprint(asked) != "[a b]" || b.Task(i).State() != Pending {
		t.Fatalf("asked %v, task %v; want a then b, which takes it (PENDING)", asked, b.Task(i).State())
	}
	if !b.Retry(i) {
		t.Fatal("the taker could not retry the task")
	}
	asked, take["b"] = nil, false
	b.SetSlices(i, 1)
	b.Cut(i)
	tr.Complete(b.Token(i), ring.StatusIO, 0)
	if fmt.Sprint(asked) != "[a b c]" || b.Task(i).State() != Failed {
		t.Fatalf("asked %v, task %v; want all three, then FAILED", asked, b.Task(i).State())
	}
}

// TestHookHold: a chain of Unordered hooks is called without the task's
// hold, in a run or not; a hook that needs the hold is called with it,
// and so are the hooks of the same event around it. Failed and Held are
// called without it.
func TestHookHold(t *testing.T) {
	for _, c := range []struct {
		name    string
		ordered bool // a hook that needs the hold is in the chain
	}{{"unordered", false}, {"one-ordered", true}} {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			var held, free []string
			note := func(what string, b *Batch, i int) {
				mu.Lock()
				if holding(b, i) {
					held = append(held, what)
				} else {
					free = append(free, what)
				}
				mu.Unlock()
			}
			tr := NewTracker(1)
			tr.Hook(Hook{
				Unordered: true,
				Failed:    func(b *Batch, i int, _ error) bool { note("failed", b, i); return false },
				Held:      func(b *Batch, i int) { note("held", b, i) },
				Settled:   func(b *Batch, i int, _ ring.Status, _ int64) { note("settled", b, i) },
				Ended:     func(b *Batch, i int, _ State, _ int64) { note("ended", b, i) },
				RunEnded:  func(_ *Run, b *Batch, i int, _ State, _ bool) { note("run-ended", b, i) },
			})
			if c.ordered {
				tr.Hook(Hook{Settled: func(*Batch, int, ring.Status, int64) {}, Ended: func(*Batch, int, State, int64) {}})
			}
			b, _ := tr.Allocate(4)
			for range 4 {
				b.SetSlices(b.Reserve(10, 0), 1)
			}
			r := &Run{}
			tr.Complete(b.Token(0), ring.StatusOK, 10)    // settled, ended
			tr.ApplyRun(b.Token(1), ring.StatusIO, 0, r)  // settled, failed, run-ended
			tr.ApplyRun(b.Token(2), ring.StatusOK, 10, r) // run-ended
			b.Finish(3, Canceled, nil)                    // held
			b.Release(3)                                  // ended
			wantHeld, wantFree := []string{}, []string{"settled", "ended", "settled", "failed", "run-ended", "run-ended", "held", "ended"}
			if c.ordered {
				wantHeld = []string{"settled", "ended", "settled", "run-ended", "run-ended", "ended"}
				wantFree = []string{"failed", "held"}
			}
			if fmt.Sprint(held) != fmt.Sprint(wantHeld) || fmt.Sprint(free) != fmt.Sprint(wantFree) {
				t.Errorf("under the hold %v, without it %v; want %v and %v", held, free, wantHeld, wantFree)
			}
		})
	}
}

// TestHookFlushOncePerRun: each hook with Flush is told once at the end
// of each run, after the RunEnded of the tasks the run ended (one call a
// task), and once more before the end that completes a batch is counted.
func TestHookFlushOncePerRun(t *testing.T) {
	type tally struct{ ends, flushes int }
	tallies := [2]map[*Run]*tally{{}, {}}
	tr := NewTracker(2)
	for k := range tallies {
		ts := tallies[k]
		of := func(r *Run) *tally {
			if ts[r] == nil {
				ts[r] = &tally{}
			}
			return ts[r]
		}
		tr.Hook(Hook{
			Unordered: true,
			RunEnded:  func(r *Run, _ *Batch, _ int, _ State, _ bool) { of(r).ends++ },
			Flush:     func(r *Run) { of(r).flushes++ },
		})
	}
	b, _ := tr.Allocate(8)
	for range 8 {
		b.SetSlices(b.Reserve(10, 0), 1)
	}
	runs := []*Run{{At: 1}, {At: 2}, {At: 3}}
	for k, r := range runs {
		for _, i := range [][]int{{0, 1, 2}, {3, 4}, {5, 6}}[k] {
			tr.ApplyRun(b.Token(i), ring.StatusOK, 10, r)
		}
		tr.FlushRun(r)
	}
	want := []tally{{3, 1}, {2, 1}, {2, 1}}
	for k, ts := range tallies {
		for n, r := range runs {
			if got := ts[r]; got == nil || *got != want[n] {
				t.Errorf("hook %d, run %d: %+v, want %+v", k, n, got, want[n])
			}
		}
	}
	// The batch's last end, in a fourth run, is flushed before it is
	// counted: twice with the run's own end.
	last := &Run{At: 4}
	tr.ApplyRun(b.Token(7), ring.StatusOK, 10, last)
	if !b.Done(0) {
		t.Fatal("the batch is not done")
	}
	tr.FlushRun(last)
	for k, ts := range tallies {
		if got := ts[last]; got == nil || *got != (tally{1, 2}) {
			t.Errorf("hook %d, the batch's last run: %+v, want one end, two flushes", k, got)
		}
	}
}

// TestHookEndsOnce: with cancels racing completions in runs and out of
// them, each hook of a chain such as the engine's (failover, aborts,
// admission, the meter, an observer) hears of each task's end exactly
// once, with the task's terminal state.
func TestHookEndsOnce(t *testing.T) {
	const tasks, slices, hooks = 64, 4, 3
	for round := range 20 {
		var mu sync.Mutex
		ends := [hooks]map[int][]State{{}, {}, {}}
		end := func(k, i int, s State) {
			mu.Lock()
			ends[k][i] = append(ends[k][i], s)
			mu.Unlock()
		}
		tr := NewTracker(2)
		tr.Hook(Hook{Failed: func(*Batch, int, error) bool { return false }, Held: func(*Batch, int) {}})
		tr.Hook(Hook{Unordered: true, Ended: func(_ *Batch, i int, s State, _ int64) { end(0, i, s) }})
		tr.Hook(Hook{Unordered: true,
			Ended:    func(_ *Batch, i int, s State, _ int64) { end(1, i, s) },
			RunEnded: func(_ *Run, _ *Batch, i int, s State, _ bool) { end(1, i, s) },
			Flush:    func(*Run) {}})
		tr.Hook(Hook{Settled: func(*Batch, int, ring.Status, int64) {}, Ended: func(_ *Batch, i int, s State, _ int64) { end(2, i, s) }})
		b := cutBatch(t, tr, tasks, slices)
		var wg sync.WaitGroup
		for w := range 2 { // two pollers: one in runs, one without
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := &Run{}
				for i := w; i < tasks; i += 2 {
					for s := range slices {
						st := ring.StatusOK
						if i%5 == 0 && s == 0 {
							st = ring.StatusIO
						}
						if w == 0 {
							tr.ApplyRun(b.Token(i), st, 1, r)
						} else {
							tr.Apply(b.Token(i), st, 1)
						}
					}
					tr.FlushRun(r)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := tasks - 1; i >= 0; i-- {
				b.Finish(i, Canceled, nil)
			}
		}()
		wg.Wait()
		if !b.Done(Now()) {
			t.Fatalf("round %d: batch not done", round)
		}
		for k := range ends {
			for i := range tasks {
				if got := ends[k][i]; len(got) != 1 || got[0] != b.Task(i).State() {
					t.Fatalf("round %d, hook %d, task %d: ends %v, task %v; want its one end", round, k, i, got, b.Task(i).State())
				}
			}
		}
	}
}
