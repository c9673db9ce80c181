package waiting

import (
	"testing"
	"time"
)

// The tests' clock: plain unix nanoseconds from t0.
const (
	t0 = int64(1_700_000_000) * int64(time.Second)
	us = int64(time.Microsecond)
	ms = int64(time.Millisecond)
)

// The engine's defaults: transfer.spin and a spin_small of 1 ms.
const (
	spin      = 20 * time.Microsecond
	spinSmall = time.Millisecond
)

// fast and slow are a lane's median small waits: shm's few microseconds,
// tcp's round trip through two plugins and the kernel.
const (
	fast = 3 * us
	slow = 200 * us
)

func TestDecide(t *testing.T) {
	for _, c := range []struct {
		name string
		in   Input
		want Decision
	}{
		// A caller waiting on one lane (Lane.WaitOn).
		{"lane: a poll that reaped polls again, without reading the clock",
			Input{Role: Lane, Reaped: 1, Spin: spin},
			Decision{Act: Poll, Mark: Enter}},
		{"lane: the first empty poll spins for the lane's budget",
			Input{Role: Lane, Now: t0, Start: t0, SpinFrom: t0, Spin: spin},
			Decision{Act: Spin, Until: t0 + 20*us, Yield: YieldSpun, Mark: Enter}},
		{"lane: the spin counts from the first empty poll since it last reaped or slept, not from the wait's start",
			Input{Role: Lane, Now: t0 + 5*ms, Start: t0, SpinFrom: t0 + 5*ms, Spin: spin},
			Decision{Act: Spin, Until: t0 + 5*ms + 20*us, Yield: YieldSpun, Mark: Enter}},
		{"lane: a caller locked to its thread yields only the thread",
			Input{Role: Lane, Now: t0, Start: t0, SpinFrom: t0, Spin: spin, Locked: true},
			Decision{Act: Spin, Until: t0 + 20*us, Yield: YieldNone, Mark: Enter}},
		{"lane: spin budget spent, no deadline: sleep on the ring until woken",
			Input{Role: Lane, Now: t0 + 20*us, Start: t0, SpinFrom: t0, Spin: spin},
			Decision{Act: Sleep, Mark: Enter}},
		{"lane: no spin budget: sleep at once",
			Input{Role: Lane, Now: t0, Start: t0, SpinFrom: t0},
			Decision{Act: Sleep, Mark: Enter}},
		{"lane: a small batch on a fast lane spins the larger of spin and spin_small",
			Input{Role: Lane, Now: t0, Start: t0, SpinFrom: t0, Spin: spin, SpinSmall: spinSmall, Small: true, SmallWait: fast, SmallWaits: 1},
			Decision{Act: Spin, Until: t0 + ms, Yield: YieldSpun, Mark: Enter}},
		{"lane: a small batch on a slow lane (tcp's) spins through its round trip while the cores are not busy",
			Input{Role: Lane, Now: t0, Start: t0, SpinFrom: t0, Spin: spin, SpinSmall: spinSmall, Small: true, SmallWait: slow, SmallWaits: 1},
			Decision{Act: Spin, Until: t0 + ms, Yield: YieldSpun, Mark: Enter}},
		{"lane: a small batch on a slow lane sleeps at once while the cores are busy",
			Input{Role: Lane, Now: t0, Start: t0, SpinFrom: t0, Spin: spin, SpinSmall: spinSmall, Small: true, SmallWait: slow, SmallWaits: 1, Busy: true},
			Decision{Act: Sleep, Mark: Enter}},
		{"lane: a small batch on a lane slower than SpinWorth sleeps at once, busy or not",
			Input{Role: Lane, Now: t0, Start: t0, SpinFrom: t0, Spin: spin, SpinSmall: spinSmall, Small: true, SmallWait: int64(SpinWorth) + 1, SmallWaits: 1},
			Decision{Act: Sleep, Mark: Enter}},
		{"lane: a small batch on a fast lane spins while the cores are busy too",
			Input{Role: Lane, Now: t0, Start: t0, SpinFrom: t0, Spin: spin, SpinSmall: spinSmall, Small: true, SmallWait: fast, SmallWaits: 1, Busy: true},
			Decision{Act: Spin, Until: t0 + ms, Yield: YieldSpun, Mark: Enter}},
		{"lane: every 16th small wait on a slow lane of busy cores probes, spinning 2*SpinWorthBusy",
			Input{Role: Lane, Now: t0, Start: t0, SpinFrom: t0, Spin: spin, SpinSmall: spinSmall, Small: true, SmallWait: slow, SmallWaits: 32, Busy: true},
			Decision{Act: Spin, Until: t0 + 100*us, Yield: YieldSpun, Mark: Enter}},
		{"lane: a large batch spins the lane's spin, not spin_small",
			Input{Role: Lane, Now: t0, Start: t0, SpinFrom: t0, Spin: spin, SpinSmall: spinSmall, SmallWait: fast},
			Decision{Act: Spin, Until: t0 + 20*us, Yield: YieldSpun, Mark: Enter}},
		{"lane: a deadline ahead ends the spin early",
			Input{Role: Lane, Now: t0, Start: t0, SpinFrom: t0, Spin: spin, Deadline: t0 + 10*us},
			Decision{Act: Spin, Until: t0 + 10*us, Yield: YieldSpun, Mark: Enter}},
		{"lane: spun out, a deadline ahead: sleep until it",
			Input{Role: Lane, Now: t0 + 20*us, Start: t0, SpinFrom: t0, Spin: spin, Deadline: t0 + 3*ms},
			Decision{Act: Sleep, Until: t0 + 3*ms, Mark: Enter}},
		{"lane: the deadline came: give the wait back (the caller expires the task)",
			Input{Role: Lane, Now: t0 + 3*ms, Start: t0, SpinFrom: t0 + 3*ms, Spin: spin, Deadline: t0 + 3*ms},
			Decision{Act: Return, Mark: Enter}},
		{"lane: a deadline already passed at the start bounds the wait by HeldPoll",
			Input{Role: Lane, Now: t0 + ms, Start: t0, SpinFrom: t0, Spin: spin, Deadline: t0 - ms},
			Decision{Act: Sleep, Until: t0 + 10*ms, Mark: Enter}},
		{"lane: ... and the wait is given back HeldPoll after its start",
			Input{Role: Lane, Now: t0 + 10*ms, Start: t0, SpinFrom: t0 + 10*ms, Spin: spin, Deadline: t0 - ms},
			Decision{Act: Return, Mark: Enter}},

		// A caller waiting for a batch on several lanes (Tracker.WaitBatch).
		{"batch: a large batch spins for spin from the wait's start, telling the plugins it waits",
			Input{Role: Batch, Now: t0 + 5*us, Start: t0, Spin: spin, SpinSmall: spinSmall},
			Decision{Act: Spin, Until: t0 + 20*us, Yield: YieldSpun, Mark: Begin}},
		{"batch: a dense batch (many small tasks) spins entered in its lanes",
			Input{Role: Batch, Now: t0 + 5*us, Start: t0, Spin: spin, SpinSmall: spinSmall, Dense: true},
			Decision{Act: Spin, Until: t0 + 20*us, Yield: YieldSpun, Mark: Enter}},
		{"batch: a larger batch on a lane whose larger waits fit BulkSpinMax spins entered in it",
			Input{Role: Batch, Now: t0 + 5*us, Start: t0, Spin: spin, BulkWait: int64(BulkSpinMax)},
			Decision{Act: Spin, Until: t0 + 200*us, Yield: YieldSpun, Mark: Enter}},
		{"batch: ... one whose larger waits take longer only tells the plugins it waits",
			Input{Role: Batch, Now: t0 + 5*us, Start: t0, Spin: spin, BulkWait: int64(BulkSpinMax) + 1},
			Decision{Act: Spin, Until: t0 + 20*us, Yield: YieldSpun, Mark: Begin}},
		{"batch: ... and so does one spun out (BulkSpin: four times a 20 us wait)",
			Input{Role: Batch, Now: t0 + 80*us, Start: t0, Spin: spin, BulkWait: 20 * us},
			Decision{Act: Sleep, Mark: Begin}},
		{"batch: a poll that reaped polls again at once",
			Input{Role: Batch, Now: t0 + 5*us, Start: t0, Spin: spin, Reaped: 3},
			Decision{Act: Poll, Mark: Begin}},
		{"batch: a dense batch spun out leaves its lanes to their reapers, telling the plugins it waits",
			Input{Role: Batch, Now: t0 + 20*us, Start: t0, Spin: spin, Dense: true},
			Decision{Act: Sleep, Mark: Begin}},
		{"batch: the spin counts from the start, whatever it reaped since: spent, it sleeps",
			Input{Role: Batch, Now: t0 + 20*us, Start: t0, Spin: spin, Reaped: 3},
			Decision{Act: Sleep, Mark: Begin}},
		{"batch: a small batch spins the larger of spin and spin_small, entered in its lanes",
			Input{Role: Batch, Now: t0, Start: t0, Spin: spin, SpinSmall: spinSmall, Small: true},
			Decision{Act: Spin, Until: t0 + ms, Yield: YieldSpun, Mark: Enter}},
		{"batch: ... the larger: a spin_small under spin leaves spin",
			Input{Role: Batch, Now: t0, Start: t0, Spin: spin, SpinSmall: 5 * time.Microsecond, Small: true},
			Decision{Act: Spin, Until: t0 + 20*us, Yield: YieldSpun, Mark: Enter}},
		{"batch: a small batch that reaped polls again, entered",
			Input{Role: Batch, Now: t0 + 5*us, Start: t0, Spin: spin, SpinSmall: spinSmall, Small: true, Reaped: 1},
			Decision{Act: Poll, Mark: Enter}},
		{"batch: a small batch spun out leaves its lanes to their reapers and sleeps",
			Input{Role: Batch, Now: t0 + ms, Start: t0, Spin: spin, SpinSmall: spinSmall, Small: true},
			Decision{Act: Sleep, Mark: None}},
		{"batch: a caller locked to its thread yields only the thread",
			Input{Role: Batch, Now: t0, Start: t0, Spin: spin, Locked: true},
			Decision{Act: Spin, Until: t0 + 20*us, Yield: YieldNone, Mark: Begin}},
		{"batch: no spin budget: sleep at once",
			Input{Role: Batch, Now: t0, Start: t0, Small: true},
			Decision{Act: Sleep, Mark: None}},
		{"batch: asleep with no deadline: no timer",
			Input{Role: Batch, Now: t0 + 7*ms, Start: t0, Spin: spin},
			Decision{Act: Sleep, Mark: Begin}},
		{"batch: asleep with a deadline ahead: until it",
			Input{Role: Batch, Now: t0 + 7*ms, Start: t0, Spin: spin, Deadline: t0 + 40*ms},
			Decision{Act: Sleep, Until: t0 + 40*ms, Mark: Begin}},
		{"batch: the earliest deadline passed (its task held): look again every HeldPoll",
			Input{Role: Batch, Now: t0 + 40*ms, Start: t0, Spin: spin, Deadline: t0 + 40*ms},
			Decision{Act: Sleep, Until: t0 + 50*ms, Mark: Begin}},

		// A lane's reaper (Lane.Reap).
		{"reaper: a reaper spinning on an empty ring stands by as soon as a waiter enters",
			Input{Role: Reaper, Now: t0 + us, SpinFrom: t0, Spin: time.Hour, Waiters: true},
			Decision{Act: Standby}},
		{"reaper: a waiter in: stand by, whatever the last poll took",
			Input{Role: Reaper, Reaped: 5, Hot: true, Pause: 20 * time.Microsecond, Waiters: true},
			Decision{Act: Standby}},
		{"reaper: a run after a sleep polls again",
			Input{Role: Reaper, Reaped: 1, Pause: 20 * time.Microsecond},
			Decision{Act: Poll}},
		{"reaper: a short run in a stream, nobody waiting: nap",
			Input{Role: Reaper, Reaped: ShortRun - 1, Hot: true, Pause: 20 * time.Microsecond},
			Decision{Act: Nap}},
		{"reaper: a run of ShortRun in a stream: poll again",
			Input{Role: Reaper, Reaped: ShortRun, Hot: true, Pause: 20 * time.Microsecond},
			Decision{Act: Poll}},
		{"reaper: a caller waits on the lane (WaitBegin): no nap",
			Input{Role: Reaper, Reaped: 1, Hot: true, Pause: 20 * time.Microsecond, Waited: true},
			Decision{Act: Poll}},
		{"reaper: the pause is off: no nap",
			Input{Role: Reaper, Reaped: 1, Hot: true},
			Decision{Act: Poll}},
		{"reaper: an empty ring: spin, giving the CPU away from the first look",
			Input{Role: Reaper, Now: t0, SpinFrom: t0, Spin: spin},
			Decision{Act: Spin, Until: t0 + 20*us, Yield: YieldCPU}},
		{"reaper: spun out: sleep on the ring",
			Input{Role: Reaper, Now: t0 + 20*us, SpinFrom: t0, Spin: spin},
			Decision{Act: Sleep}},
		{"reaper: no spin budget: sleep at once",
			Input{Role: Reaper, Now: t0, SpinFrom: t0},
			Decision{Act: Sleep}},
	} {
		if got := Decide(c.in); got != c.want {
			t.Errorf("%s:\n got  %s\n want %s", c.name, show(got), show(c.want))
		}
	}
}

func show(d Decision) string {
	s := d.Act.String()
	if d.Until != 0 {
		s += " until t0+" + time.Duration(d.Until-t0).String()
	}
	if d.Act == Spin {
		s += " " + d.Yield.String()
	}
	return s + " mark " + d.Mark.String()
}

// A large batch's wait on a simulated clock, the way the driver asks:
// it spins (polling) for spin from its start, then sleeps on the batch's
// wake until its earliest deadline, then, that deadline passed but the
// batch not done (a task held), every HeldPoll.
func TestBatchWaitOnAClock(t *testing.T) {
	in := Input{Role: Batch, Start: t0, Spin: spin, Deadline: t0 + 25*ms}
	var got []Decision
	for now := t0; now <= t0+50*ms; {
		in.Now = now
		d := Decide(in)
		got = append(got, d)
		switch d.Act {
		case Spin:
			now += 8 * us // one poll and yield
		case Sleep:
			if d.Until <= now {
				t.Fatalf("at t0+%v a sleep until t0+%v", time.Duration(now-t0), time.Duration(d.Until-t0))
			}
			now = d.Until // nothing woke it
		default:
			t.Fatalf("at t0+%v: %s", time.Duration(now-t0), show(d))
		}
	}
	want := []Decision{
		{Act: Spin, Until: t0 + 20*us, Mark: Begin},
		{Act: Spin, Until: t0 + 20*us, Mark: Begin},
		{Act: Spin, Until: t0 + 20*us, Mark: Begin},
		{Act: Sleep, Until: t0 + 25*ms, Mark: Begin},
		{Act: Sleep, Until: t0 + 35*ms, Mark: Begin},
		{Act: Sleep, Until: t0 + 45*ms, Mark: Begin},
		{Act: Sleep, Until: t0 + 55*ms, Mark: Begin},
	}
	if len(got) != len(want) {
		t.Fatalf("%d decisions, want %d: %v", len(got), len(want), got)
	}
	for k := range want {
		if got[k] != want[k] {
			t.Errorf("decision %d: %s, want %s", k, show(got[k]), show(want[k]))
		}
	}
}

func TestSmallSpin(t *testing.T) {
	for _, c := range []struct {
		spin, spinSmall time.Duration
		median          int64
		n               uint32
		busy            bool
		want            time.Duration
	}{
		{spin, spinSmall, 0, 1, false, spinSmall},                               // a new lane: spin_small
		{spin, spinSmall, int64(SpinWorth), 1, false, spinSmall},                // at SpinWorth: still worth it
		{2 * time.Millisecond, spinSmall, fast, 1, false, 2 * time.Millisecond}, // the larger of the two
		{spin, spinSmall, int64(SpinWorth) + 1, 1, false, 0},                    // past it: sleep at once
		{spin, spinSmall, int64(SpinWorth) + 1, 16, false, spinSmall},           // a probe, at most the budget
		{spin, spinSmall, slow, 1, false, spinSmall},                            // tcp's round trip on idle cores
		{spin, spinSmall, int64(SpinWorthBusy), 1, true, spinSmall},             // busy: at SpinWorthBusy still worth it
		{spin, spinSmall, int64(SpinWorthBusy) + 1, 1, true, 0},                 // busy: past it, sleep at once
		{spin, spinSmall, slow, 15, true, 0},
		{spin, spinSmall, slow, 16, true, 2 * SpinWorthBusy}, // a probe
		{spin, spinSmall, slow, 48, true, 2 * SpinWorthBusy},
		{spin, 30 * time.Microsecond, slow, 16, true, 30 * time.Microsecond}, // a probe spins no more than the budget
	} {
		if got := SmallSpin(c.spin, c.spinSmall, c.median, c.n, c.busy); got != c.want {
			t.Errorf("SmallSpin(%v, %v, median %v, wait %d, busy %v) = %v, want %v", c.spin, c.spinSmall, time.Duration(c.median), c.n, c.busy, got, c.want)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct{ m, d, want int64 }{
		{0, 3 * us, 3 * us},
		{0, 5 * ms, 4 * us}, // a step of at most medianStep
		{10 * us, 9 * us, 9 * us},
		{100 * us, 3 * us, 96 * us},
		{7 * us, 7 * us, 7 * us},
	} {
		if got := Median(c.m, c.d); got != c.want {
			t.Errorf("Median(%v, %v) = %v, want %v", time.Duration(c.m), time.Duration(c.d), time.Duration(got), time.Duration(c.want))
		}
	}
}

// On busy cores, a small batch's waiter spins on a lane whose small waits
// are short and sleeps at once on one whose median wait is past
// SpinWorthBusy, but for one
// wait in probeEvery, which spins a little to keep measuring; the median
// follows the lane back when it gets fast, and a tail of slow waits does
// not move it.
func TestSmallSpinFollowsTheLanesMedianWait(t *testing.T) {
	var median int64
	var n uint32
	next := func() time.Duration { n++; return SmallSpin(spin, spinSmall, median, n, true) }
	if got := next(); got != spinSmall {
		t.Fatalf("a new lane's small spin is %v, want spin_small (%v)", got, spinSmall)
	}

	// A round trip of 200 us (tcp's): the median passes SpinWorthBusy.
	for range 100 {
		median = Median(median, slow)
	}
	probes := 0
	for i := range 10 * probeEvery {
		switch got := next(); got {
		case 0:
		case 2 * SpinWorthBusy:
			probes++
		default:
			t.Fatalf("wait %d on a slow lane spins %v, want 0 or a probe's %v", i, got, 2*SpinWorthBusy)
		}
	}
	if probes != 10 {
		t.Fatalf("%d of %d waits on a slow lane probed, want one in %d", probes, 10*probeEvery, probeEvery)
	}

	// The lane gets fast (3 us, shm's) with a slow tail of a third of
	// the waits: the median comes down and waiters spin again.
	for i := range 300 {
		d := fast
		if i%3 == 0 {
			d = 5 * ms
		}
		median = Median(median, d)
	}
	if m := time.Duration(median); m > SpinWorthBusy {
		t.Fatalf("median wait %v after waits of 3us with a third at 5ms, want at most %v", m, SpinWorthBusy)
	}
	if got := next(); got != spinSmall {
		t.Fatalf("a fast lane's small spin is %v, want %v", got, spinSmall)
	}
}

// Decide allocates nothing: the drivers ask it on the hot path.
func TestDecideAllocatesNothing(t *testing.T) {
	in := Input{Role: Lane, Now: t0, Start: t0, SpinFrom: t0, Spin: spin, Small: true, SmallWait: fast, SmallWaits: 1}
	if n := testing.AllocsPerRun(100, func() { _ = Decide(in) }); n != 0 {
		t.Fatalf("Decide allocates %v times a call", n)
	}
}

// TestBulkSpin: a larger batch's Lane waiter spins four times the lane's
// median bulk wait, at least the plain spin and at most BulkSpinMax, and
// only the plain spin once the median is longer than BulkSpinMax (or
// unknown).
func TestBulkSpin(t *testing.T) {
	const spin = 20 * time.Microsecond
	for _, c := range []struct {
		median int64
		want   time.Duration
	}{
		{0, spin},
		{int64(4 * time.Microsecond), spin},
		{int64(24 * time.Microsecond), 96 * time.Microsecond},
		{int64(60 * time.Microsecond), BulkSpinMax},
		{int64(150 * time.Microsecond), BulkSpinMax},
		{int64(BulkSpinMax), BulkSpinMax},
		{int64(BulkSpinMax) + 1, spin},
		{int64(3500 * time.Microsecond), spin},
	} {
		if got := BulkSpin(spin, c.median); got != c.want {
			t.Errorf("BulkSpin(%v, median %v) = %v, want %v", spin, time.Duration(c.median), got, c.want)
		}
	}
	in := Input{Role: Lane, Spin: spin, BulkWait: int64(24 * time.Microsecond)}
	if got := in.Budget(); got != 96*time.Microsecond {
		t.Errorf("a larger batch's Lane waiter: Budget = %v, want BulkSpin's 96us", got)
	}
	in.Role = Batch
	if got := in.Budget(); got != 96*time.Microsecond {
		t.Errorf("a larger Batch waiter on one lane: Budget = %v, want BulkSpin's 96us", got)
	}
	in.BulkWait = 0 // its tasks on several lanes: no median
	if got := in.Budget(); got != spin {
		t.Errorf("a larger Batch waiter on several lanes: Budget = %v, want the plain spin", got)
	}
	in.Role, in.BulkWait = Reaper, int64(35*time.Microsecond)
	if got := in.Budget(); got != spin {
		t.Errorf("a Reaper: Budget = %v, want the plain spin", got)
	}
}

// TestIsDense pins which batches a waiter enters while it spins besides
// small ones: many tasks of small average size, not a few large ones.
func TestIsDense(t *testing.T) {
	for _, c := range []struct {
		n     int
		bytes uint64
		want  bool
	}{
		{128, 128 * 4 << 10, true}, // 128 writes of 4 KiB
		{DenseTasks, DenseTasks * DenseBytes, true},
		{DenseTasks - 1, 4 << 10, false}, // too few
		{DenseTasks, DenseTasks*DenseBytes + 1, false},
		{1, 64 << 20, false}, // one bulk write
		{4, 4 * 64 << 20, false},
	} {
		if got := IsDense(c.n, c.bytes); got != c.want {
			t.Errorf("IsDense(%d tasks, %d bytes) = %v, want %v", c.n, c.bytes, got, c.want)
		}
	}
}
