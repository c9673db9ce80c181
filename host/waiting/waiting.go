package waiting

import (
	"time"

	"github.com/ferrydev/ferry/internal/enum"
)

// Role says whose wait a decision is for; see the package documentation.
type Role uint8

const (
	// Lane: a caller waiting on one lane, which it reaps itself.
	Lane Role = iota
	// Batch: a caller waiting for a batch whose tasks are on several
	// lanes.
	Batch
	// Reaper: a lane's reaper goroutine.
	Reaper
)

var roleNames = [...]string{Lane: "lane", Batch: "batch", Reaper: "reaper"}

// String names r as the package documentation does.
func (r Role) String() string { return enum.String(r, roleNames[:], "role") }

// Act is what a waiter does next.
type Act uint8

const (
	// Poll: poll the rings again at once.
	Poll Act = iota
	// Spin: look at the rings until Until without sleeping, giving way
	// between looks as Yield says; ask again as soon as something
	// arrived, or once Until passed. A Lane waiter or a Reaper peeks at
	// its ring's indices between looks; a Batch waiter polls its lanes
	// at each look.
	Spin
	// Sleep: sleep until woken (a completion on the lane's ring, the
	// batch's wake) or until Until; 0: until woken.
	Sleep
	// Return: a Lane waiter's bound passed: it gives the wait back to
	// its caller, which looks at its deadlines, its context and its
	// plugin, and waits again.
	Return
	// Standby: a Reaper stands by while a waiter reaps its lane.
	Standby
	// Nap: a Reaper leaves its ring alone for its Pause, not marked
	// asleep: what is posted meanwhile is reaped together after it.
	Nap
)

var actNames = [...]string{Poll: "poll", Spin: "spin", Sleep: "sleep", Return: "return", Standby: "standby", Nap: "nap"}

// String names a in lower case: "poll", "spin", ...
func (a Act) String() string { return enum.String(a, actNames[:], "act") }

// Yield is how a spinner gives way between looks.
type Yield uint8

const (
	// YieldSpun: runtime.Gosched at each look (a Lane waiter's only
	// after its first goschedAfter), so that the process's other
	// goroutines run. A waiter's spin never yields its thread to other
	// processes: see YieldCPU.
	YieldSpun Yield = iota
	// YieldNone: nothing between looks, for a goroutine locked to its
	// thread (a call from C): runtime.Gosched there hands the thread's P
	// to another thread and waits for it back, two futex wakes a look.
	YieldNone
	// YieldCPU: ring.Yield(ring.YieldAfter), runtime.Gosched and
	// sched_yield, from the first look, for a spinner with no caller's
	// latency to win (a Reaper): on a small machine the thread it would
	// hold the CPU from is the application's own. Only it yields to
	// other processes: on Linux's EEVDF scheduler (6.6 and later)
	// sched_yield moves the yielding thread's deadline back a slice, so
	// a waiter that yielded at each look past 150 us, as waiters did,
	// fell behind every runnable thread on its CPU and, when its
	// completion came, waited out their slices. Beside one busy loop
	// per core, 4 KiB shm writes one at a time ran at 0.55 GB/s with
	// the yield and 1.15 without, 128 at a time 0.35 (p99 20 ms) and
	// 1.2-3.8 (p99 4-5 ms); the QoS isolation check's HIGH p99 over shm,
	// beside the bulk, went from 2.8x its unloaded figure to 1.4x
	// (docs/qos.md). A
	// waiter's spin is bounded by its budget (Spin, SpinSmall,
	// BulkSpin), then it sleeps on the ring, so it holds its CPU from a
	// peer at most that long.
	YieldCPU
)

var yieldNames = [...]string{YieldSpun: "yield", YieldNone: "yield-none", YieldCPU: "yield-cpu"}

// String names y: "yield", "yield-none" or "yield-cpu".
func (y Yield) String() string { return enum.String(y, yieldNames[:], "yield") }

// Mark is how a waiter holds the lanes it waits on.
type Mark uint8

const (
	// None: not at all; their reapers reap them.
	None Mark = iota
	// Begin: it tells their plugins that a caller waits
	// (progress.Lane.WaitBegin): they do not pause on their submission
	// rings after short runs.
	Begin
	// Enter: it reaps them itself and their reapers stand by
	// (progress.Lane.Enter, which includes Begin), so that a completion
	// wakes the goroutine that wants it and nobody hands it over.
	Enter
)

var markNames = [...]string{None: "none", Begin: "begin", Enter: "enter"}

// String names m: "none", "begin" or "enter".
func (m Mark) String() string { return enum.String(m, markNames[:], "mark") }

const (
	// HeldPoll is how often a waiter looks at the deadlines of a batch
	// whose earliest deadline has passed: its task may be held (ended,
	// its slices still out), and tasks with later deadlines must still
	// expire in time.
	HeldPoll = 10 * time.Millisecond
	// SpinWorth is the longest median wait a small batch's Lane waiter
	// spins through while its cores are not busy (Input.Busy): beyond
	// it, sleeping on the completion ring and being woken costs less
	// than the spin takes from the cores. A tcp round trip through two
	// plugins fits: a waiter that slept through one (a 4 KiB write, p50
	// 80 us on a 2-vCPU KVM guest) let its vCPU idle and paid for each
	// wakeup along the way; spinning, the round trip took 12 us.
	SpinWorth = 500 * time.Microsecond
	// SpinWorthBusy is SpinWorth while a spin of the process lost its
	// CPU lately (Input.Busy): there a waiter that spins through a slow
	// round trip waits behind the threads it competes with when its
	// completion comes, and the plugin's wakeup places a sleeping one at
	// once (docs/qos.md). shm's round trip (a few us) is spun through.
	SpinWorthBusy = 50 * time.Microsecond
	// FastLane is the longest median small wait of a lane whose
	// publications wake a standing reaper at once (progress.Lane.End):
	// its waiters spin whether or not the cores are busy.
	FastLane = SpinWorthBusy
	// BulkSpinMax is the longest a larger batch's Lane waiter spins
	// (BulkSpin): the round trip of a medium request over a fast lane
	// (shm's 1 MiB copy, about 35 us) fits, and a wait beyond it sleeps
	// after the plain spin, as before.
	BulkSpinMax = 200 * time.Microsecond
	// ShortRun is the most completions a Reaper's run may hold for it to
	// nap after it.
	ShortRun = 16
	// probeEvery: one in this many small waits on a lane whose waiters
	// sleep spins, to measure the round trip.
	probeEvery = 16
	// medianStep is the most one wait moves a lane's median small wait.
	medianStep = 4 * time.Microsecond
)

// Input is what a decision is made from. Times are unix ns. Each role
// reads the fields its doc names; the others are ignored.
type Input struct {
	Role Role
	// Now is the time of the decision. A Lane waiter or a Reaper whose
	// last poll reaped, and a Reaper with a waiter in, need not read the
	// clock for it: their next step does not depend on it.
	Now int64
	// Start is when the wait began. Lane: its bound counts from it once
	// the batch's deadline has passed. Batch: its spin counts from it.
	Start int64
	// SpinFrom is when a Lane waiter's or a Reaper's current spin began:
	// its first empty poll since it last reaped, slept or stood by.
	SpinFrom int64
	// Spin is the spin budget (transfer.spin); SpinSmall a small batch's
	// (transfer.spin_small). See Budget.
	Spin, SpinSmall time.Duration
	// Small says the batch waited for is small (at most
	// config.SmallBatch bytes): its caller waits for latency. Lane and
	// Batch.
	Small bool
	// Dense says the batch is many small tasks, whose completions come
	// close together: at least DenseTasks, of at most DenseBytes each
	// on average (IsDense). Batch.
	Dense bool
	// SmallWait is the median time (ns) the lane's small batches waited
	// (Median), and SmallWaits this wait's number among them (1, 2, ...).
	// Lane, small batch.
	SmallWait  int64
	SmallWaits uint32
	// Busy says a spin of the waiter's process lost its CPU lately
	// (progress.Busy): its cores are oversubscribed. Lane, small batch.
	Busy bool
	// BulkWait is the median time (ns) the lane's larger batches waited
	// (Median): Lane, and Batch when all of its tasks are on one lane;
	// a batch that is not small. 0: unknown.
	BulkWait int64
	// Deadline is the batch's earliest task deadline, 0 for none. Lane
	// and Batch.
	Deadline int64
	// Reaped is how many completions the last poll took.
	Reaped int
	// Locked says the caller's goroutine is locked to its OS thread (a
	// call from C). Lane and Batch.
	Locked bool
	// Waiters says a waiter is in the lane (progress.Lane.Enter). Reaper.
	Waiters bool
	// Hot says the last run came while the Reaper spun after the one
	// before (it did not sleep or stand by between): completions stream
	// in.
	Hot bool
	// Waited says a caller waits for what the lane carries
	// (progress.Lane.WaitBegin), as its plugin sees it. Reaper.
	Waited bool
	// Pause is how long a Reaper naps after a short run in a stream
	// (progress.Lane.SetReapPause); 0: never.
	Pause time.Duration
}

// Decision is what a waiter does next.
type Decision struct {
	Act Act
	// Until ends a Spin and bounds a Sleep (unix ns; 0: a sleep until
	// woken).
	Until int64
	// Yield is how a Spin gives way between looks.
	Yield Yield
	// Mark is how the waiter holds its lanes while it does Act: a Lane
	// waiter is always entered, a Reaper holds none.
	Mark Mark
}

// DenseTasks and DenseBytes bound a dense batch (Input.Dense): at least
// DenseTasks tasks of at most DenseBytes each on average.
const (
	DenseTasks = 16
	DenseBytes = 64 << 10
)

// IsDense reports whether a batch of n tasks and bytes in all is dense
// (Input.Dense).
func IsDense(n int, bytes uint64) bool {
	return n >= DenseTasks && bytes <= uint64(n)*DenseBytes
}

// Decide returns what the waiter of in does next; see the package
// documentation for the rules of each role.
func Decide(in Input) Decision {
	switch in.Role {
	case Batch:
		return batch(in)
	case Reaper:
		return reaper(in)
	}
	return lane(in)
}

// Budget returns how long the waiter of in spins: for a small batch's
// Lane waiter, SmallSpin; for a small Batch, the larger of Spin and
// SpinSmall; for a larger batch's Lane or Batch waiter, BulkSpin; else
// Spin.
func (in *Input) Budget() time.Duration {
	if !in.Small {
		if in.Role == Lane || in.Role == Batch {
			return BulkSpin(in.Spin, in.BulkWait)
		}
		return in.Spin
	}
	switch in.Role {
	case Lane:
		return SmallSpin(in.Spin, in.SpinSmall, in.SmallWait, in.SmallWaits, in.Busy)
	case Batch:
		return max(in.Spin, in.SpinSmall)
	}
	return in.Spin
}

func lane(in Input) Decision {
	d := Decision{Mark: Enter}
	if in.Reaped > 0 {
		d.Act = Poll
		return d
	}
	bound := next(in.Start, in.Deadline)
	if bound != 0 && in.Now >= bound {
		d.Act = Return
		return d
	}
	if end := in.SpinFrom + int64(in.Budget()); in.Now < end {
		if bound != 0 {
			end = min(end, bound)
		}
		d.Act, d.Until, d.Yield = Spin, end, spinYield(in.Locked)
		return d
	}
	d.Act, d.Until = Sleep, bound
	return d
}

func batch(in Input) Decision {
	end := in.Start + int64(in.Budget())
	spinning := in.Now < end
	// A small or dense batch's waiter enters its lanes while it spins:
	// their reapers stand by rather than poll the same rings beside it.
	// A dense batch's completions come close together, and two consumers
	// of one completion ring on a small machine share a core with the
	// plugin that fills it and trade the ring's lines: 4 KiB shm writes
	// in batches of 128 ran 15% slower with the reaper polling too. For
	// a few large tasks the hand-over costs more than it saves (two
	// thread wakeups a wait: 64 MiB bulk writes beside 4 KiB reads
	// doubled the reads' p99 on shm), so such a waiter only tells the
	// plugins that a caller waits (Begin), throughout. A larger batch
	// on one lane whose spin covers the lane's usual wait (BulkWait
	// within BulkSpinMax: shm's medium copies) enters too: beside it the
	// reaper polled the ring and the waiter the batch, two spinning
	// threads and the plugin's copy on two cores, and the copies slowed.
	// 1 MiB shm writes one at a time (ferry bench, 4 interleaved runs):
	// p99 94-121 us to 72-85, 41.5 to 43.3 GB/s at the median; 512 KiB
	// p99 62-77 to 50-57 us. Asleep, a small batch's waiter leaves its
	// lanes to their reapers, not even telling (None): telling costs the
	// plugin a look at a shared word per run.
	d := Decision{Mark: Begin}
	medium := in.BulkWait > 0 && in.BulkWait <= int64(BulkSpinMax)
	switch {
	case spinning && (in.Small || in.Dense || medium):
		d.Mark = Enter
	case in.Small:
		d.Mark = None
	}
	switch {
	case !spinning:
		d.Act, d.Until = Sleep, next(in.Now, in.Deadline)
	case in.Reaped > 0:
		d.Act = Poll
	default:
		d.Act, d.Until, d.Yield = Spin, end, spinYield(in.Locked)
	}
	return d
}

func reaper(in Input) Decision {
	var d Decision
	switch {
	case in.Waiters:
		d.Act = Standby
	case in.Reaped > 0:
		d.Act = Poll
		if in.Hot && in.Reaped < ShortRun && in.Pause > 0 && !in.Waited {
			d.Act = Nap
		}
	case in.Now < in.SpinFrom+int64(in.Spin):
		d.Act, d.Until, d.Yield = Spin, in.SpinFrom+int64(in.Spin), YieldCPU
	default:
		d.Act = Sleep
	}
	return d
}

func spinYield(locked bool) Yield {
	if locked {
		return YieldNone
	}
	return YieldSpun
}

// next is when a waiter next has a deadline to look at, from the time
// from: the batch's earliest deadline while it is ahead, else HeldPoll
// after from; 0 when the batch has none.
func next(from, deadline int64) int64 {
	switch {
	case deadline == 0:
		return 0
	case deadline > from:
		return deadline
	}
	return from + int64(HeldPoll)
}

// SmallSpin is how long a waiter for a small batch spins on a lane
// before it sleeps on the completion ring, from the lane's budgets, the
// median wait of its small batches, this wait's number n among them and
// whether the process's cores are busy: the larger budget where the
// median is at most SpinWorth (SpinWorthBusy when busy); else nothing,
// except for every probeEvery-th wait, which spins up to twice that so
// that the median still follows the round trip (a wait that slept would
// count the wakeup too, and a lane once slow would sleep on). A wait
// that does not spin is not counted in the median.
//
// Why busy changes it: on two cores saturated by bulk copies, a HIGH 4
// KiB read over tcp took 100-200 us; its waiter spun, then yielded
// (sched_yield), and the scheduler, which moves a yielding thread's
// deadline back a slice at each yield, had it wait behind the bulk
// threads when its completion came: the last hop, from the plugin's
// completion to Wait returning, made most of the loaded p99
// (docs/qos.md). Asleep on the ring, the plugin's wakeup places it at
// once. On idle cores the same sleep cost a 4 KiB tcp write most of its
// round trip (SpinWorth). Over shm the round trip is a few microseconds,
// and spinning through it is what keeps its p99 low, busy or not.
func SmallSpin(spin, spinSmall time.Duration, median int64, n uint32, busy bool) time.Duration {
	s, worth := max(spin, spinSmall), SpinWorth
	if busy {
		worth = SpinWorthBusy
	}
	if median <= int64(worth) {
		return s
	}
	if n%probeEvery == 0 {
		return min(s, 2*worth)
	}
	return 0
}

// BulkSpin is how long a waiter for a batch that is not small spins on a
// lane before it sleeps on the completion ring, from the lane's spin and
// the median wait of its larger batches: BulkSpinFactor times the median,
// at least spin, while the median is at most BulkSpinMax (bounded by
// it); spin alone beyond. A wait is counted whether it spun or slept, so
// the median follows the lane: from spin alone, the slept waits pull it
// up until a spin outlasts the round trip, which it then measures.
//
// Why: the host's waiter spun 20 us, and a shm write of 1 MiB takes
// about 35 us: every request slept on the ring, was woken by the plugin,
// and the plugin, whose next descriptor came only after that wakeup,
// slept too: 5.3 context switches a request, 9.9 GB/s against TENT's
// 29.2, which copies in the caller's thread. With transfer.spin = 200us
// the same bench ran at 25.3 GB/s with 0.5 switches a request. Waits
// too long to be worth a spin (a 64 MiB copy, tcp's 1 MiB round trip)
// sleep after the plain spin, as before.
//
// Why four times the median, not two: about one 1 MiB shm copy in
// twenty runs at half speed (docs/performance.md), 45-55 us against a
// median of 24; at twice the median its waiter slept just before the
// completion came, and the wakeup chain that followed (the plugin wakes
// the reaper, the reaper the waiter, the next publication the plugin's
// lane, which had gone to sleep meanwhile) made that request's time
// 100-170 us. Four times spins through the slow copies: `ferry bench
// --transport shm --size 1MiB`, 5 interleaved rounds on a 2-vCPU PVM
// guest (2026-12-06), 32.4 [31.5-35.0] GB/s -> 34.0 [33.3-35.7], p99
// 121-167 us -> 94-128, context switches a request 0.28-0.35 -> 0.15-0.19.
func BulkSpin(spin time.Duration, median int64) time.Duration {
	if median <= 0 || median > int64(BulkSpinMax) {
		return spin
	}
	return max(spin, min(BulkSpinFactor*time.Duration(median), BulkSpinMax))
}

// BulkSpinFactor is how many times a lane's median larger wait its
// larger batches' waiters spin (BulkSpin).
const BulkSpinFactor = 4

// Median moves a lane's median small wait m towards a wait of d ns, by at
// most medianStep: a median, so that a loaded machine's tail of slow
// waits does not turn a fast lane's waiters to sleeping.
func Median(m, d int64) int64 {
	switch {
	case d > m:
		m += min(d-m, int64(medianStep))
	case d < m:
		m -= min(m-d, int64(medianStep))
	}
	return m
}
