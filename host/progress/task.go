package progress

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ferrydev/ferry/internal/atomicx"
	"github.com/ferrydev/ferry/internal/enum"
	"github.com/ferrydev/ferry/sdk/ring"
)

// State is where a task stands. Every task reaches exactly one terminal
// state (anything but Pending) and never leaves it.
type State uint32

const (
	Pending State = iota
	Completed
	Failed
	Canceled
	Timeout
	Invalid
)

var stateNames = [...]string{"PENDING", "COMPLETED", "FAILED", "CANCELED", "TIMEOUT", "INVALID"}

func (s State) String() string { return enum.String(s, stateNames[:], "STATE") }

// Terminal reports whether s is final.
func (s State) Terminal() bool { return s != Pending }

// Task is one request's progress. Its fields are written by the submitter
// before its slices are published and by completions after.
type Task struct {
	state   atomic.Uint32
	pending atomic.Int64  // slices not yet completed
	bytes   atomic.Uint64 // bytes reported by completed slices
	status  atomic.Int32  // first failing ring.Status, 0 if none
	// failRail is the rail of the first failing slice, plus one; 0 if
	// none failed.
	failRail atomic.Int32
	// attempt numbers the task's attempts from 0; tokens carry its low
	// bits, so that a completion of an earlier attempt is dropped.
	attempt atomic.Uint32
	// unclaimed counts the attempt's slices no completion has claimed
	// yet: a completion claims one before it changes the task and
	// decrements pending after, so that a completion beyond the slices
	// sent is a duplicate, refused before it changes anything.
	unclaimed atomic.Int64
	// rails is the set of rails the attempt's slices were put on, and
	// slice the length of its first (and largest) slice; 0: none put
	// through a lane (see Batch.sent). A completion must name one of
	// those rails and report at most slice bytes.
	rails atomic.Uint64
	slice atomic.Uint64
	// cut is set once the submitter has published (or given up) every
	// slice of the current attempt; failing is set by the first report
	// of the attempt's failure, so that one failure starts one retry.
	cut     atomic.Uint32 // 1: cut (see CutRun)
	failing atomic.Bool
	// ending is the terminal state (Canceled or Timeout) decided for the
	// task while a plugin still held slices of it, 0 if none: the task
	// stays pending, and takes that state only when no plugin can touch
	// its memory any more (every slice came back, or its plugin is gone;
	// see Batch.Finish). endAt is when it was decided (unix ns), and held
	// says the tracker counts the task among its held ones (Tracker.Held).
	ending atomic.Uint32
	endAt  atomic.Int64
	held   atomic.Bool
	// noting orders what the hooks are told of the task: Ended is
	// reported under it, and so is every other event, only while the
	// task is pending, so that nothing is reported after Ended. Taken
	// only when a hook needs it (not Hook.Unordered).
	noting sync.Mutex

	Length   uint64
	Deadline int64 // unix ns, 0 = none
	// transport is the index of the plugin carrying it plus one, 0
	// before routing (so that a task's reset leaves it unrouted with no
	// atomic store); atomic, since a plugin's hooks read it while a
	// submitter routes.
	transport atomic.Int32
	// detached: the plugin run that carried it ended, and its end waits
	// for something else (a fence): no run of that plugin holds or fails
	// it (Detach, FailToken).
	detached atomic.Bool
	// lane is the ID (its index in its plugin's run) of the lane the
	// attempt's slices were put on, plus one, in the low 32 bits, and
	// that lane's run (Lane.Run) in the high ones; 0 before the first is
	// put. A waiter looks only at the lanes that carry its batch; a
	// retired run (a live upgrade) fails only its own tasks (FailRun).
	lane atomic.Int64
	// err explains an INVALID or submit-time failure: the first error a
	// Finish call gave, kept whoever ends the task. Set before the task
	// turns terminal, read after (Err).
	err atomic.Pointer[error]
}

// Err explains an INVALID or submit-time failure (or a plugin's death);
// nil when the task ended for what its slices reported, or not at all.
func (t *Task) Err() error {
	if p := t.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Blame records err as what task i waits for, so that it is the
// task's error should it end meanwhile without another (its deadline
// passing); unblame takes it back once the wait is over. A task that
// already has an error keeps it.
func (b *Batch) Blame(i int, err error) (unblame func()) {
	t := &b.tasks[i]
	p := &err
	if !t.err.CompareAndSwap(nil, p) {
		return func() {}
	}
	return func() { t.err.CompareAndSwap(p, nil) }
}

// Cutting reports whether task i's current attempt is still being cut:
// its submitter, not its plugin's end, decides what a failure does.
func (b *Batch) Cutting(i int) bool { return b.tasks[i].cut.Load() == 0 }

// Detach takes task i off the transport that carried it: a task whose
// plugin died and whose end waits for something else (a fence) is no
// longer that plugin's to hold, nor its next run's to fail
// (FailTransport, HeldBy); FailToken ends it.
func (b *Batch) Detach(i int) { b.tasks[i].detached.Store(true) }

// State returns the task's state as last recorded; Batch.State also
// expires a task whose deadline passed.
func (t *Task) State() State { return State(t.state.Load()) }

// Bytes returns how many bytes completed slices reported.
func (t *Task) Bytes() uint64 { return t.bytes.Load() }

// AddBytes counts n bytes moved for a task whose bytes move outside
// slices of its own (a staged task's hops: host/path/staged.go).
func (t *Task) AddBytes(n uint64) { t.bytes.Add(n) }

// SliceStatus returns the first failing slice status, or StatusOK.
func (t *Task) SliceStatus() ring.Status { return ring.Status(t.status.Load()) }

// finish moves a pending task to s; it reports whether this call did it.
// owner is set by the batch that holds the task.
func (t *Task) finish(s State) bool {
	return t.state.CompareAndSwap(uint32(Pending), uint32(s))
}

// Batch is a group of tasks submitted together and waited on together.
type Batch struct {
	slot uint32
	gen  uint32

	mu    sync.Mutex // serialises Add against itself
	tasks []Task
	n     atomic.Int32 // tasks added
	// done is written by the completion side, task by task: on a cache
	// line of its own, away from what the submitter writes (mu, n, total).
	_    [64]byte
	done atomic.Int32 // tasks terminal
	_    [60]byte

	minDeadline atomic.Int64 // earliest task deadline, 0 = none
	total       uint64       // bytes of every task added; under mu
	notify      chan struct{}

	// hooks is the tracker's chain (see Hook), nil when it has none.
	hooks *hooks
	// tracker is the batch's owner: its held count.
	tracker *Tracker
	// pins counts the goroutines working on a task of the batch outside
	// a caller's call (a failover, a QoS resume: Tracker.Pin), plus
	// pinFreed once Free took the batch out of its slot. The batch goes
	// back to the pool when both are done: at Free with no pin, else at
	// the last Unpin. So nobody holds the tracker's lock while it works
	// on a task, and a freed batch is never handed to a new owner under
	// it.
	pins atomic.Int64
}

// pinFreed is the bit of Batch.pins that Free sets.
const pinFreed = 1 << 40

// ID names the batch among every batch its tracker ever handed out (its
// slot and the slot's generation): an observer's key for its tasks.
func (b *Batch) ID() uint64 { return uint64(b.slot)<<32 | uint64(b.gen) }

// Slot returns the batch's slot in its tracker, below Tracker.Slots: an
// owner's index for what it keeps beside the batch. It is the batch's
// until Free.
func (b *Batch) Slot() int { return int(b.slot) }

// Noting holds task i's reporting and reports whether the task is still
// pending; the caller reports an event of the task only when it is, then
// calls Noted. Held this way, no event is reported after the task's
// Ended, which is reported under the same hold.
func (b *Batch) Noting(i int) bool {
	t := &b.tasks[i]
	t.noting.Lock()
	return !State(t.state.Load()).Terminal()
}

// Noted releases what Noting held.
func (b *Batch) Noted(i int) { b.tasks[i].noting.Unlock() }

// Len returns how many tasks were added.
func (b *Batch) Len() int { return int(b.n.Load()) }

// Cap returns how many tasks the batch can hold.
func (b *Batch) Cap() int { return len(b.tasks) }

// Task returns task i.
func (b *Batch) Task(i int) *Task { return &b.tasks[i] }

// Token returns the ring token for task i of this batch, naming rail 0;
// WithRail names another.
//
// A token is, from the top bit: the batch's slot (18 bits), the rail the
// slice was sent on (6 bits), the slot's generation (16 bits), the task's
// attempt (4 bits) and the task's index (20 bits). Plugins echo it unchanged, so a completion says
// which rail carried its slice without the host keeping a record per
// slice.
//
// The tracker checks every field of a completion's token (Tracker.Apply):
// the slot must be one the tracker has, the generation the slot's (an
// older one is Late), the index a task added, the attempt the task's (an
// older one is Late), and the rail one the attempt's slices were put on;
// a task must have a slice outstanding and the bytes must fit it. What
// the layout cannot tell apart is two slices of one task and attempt on
// one rail: they share a token, so a plugin that completes one of them
// twice and the other never is caught only at the second (a Duplicate,
// or Overlong once the bytes exceed the task's length).
func (b *Batch) Token(i int) uint64 {
	a := b.tasks[i].attempt.Load() & (1<<tokenAttemptBits - 1)
	return uint64(b.slot)<<tokenSlotShift | uint64(b.gen&0xffff)<<24 | uint64(a)<<tokenAttemptShift | uint64(i)
}

// Token layout; see Batch.Token.
const (
	tokenSlotShift    = 46
	tokenRailShift    = 40
	tokenAttemptShift = 20
	tokenAttemptBits  = 4
	// MaxRails is how many rails a token can name.
	MaxRails = 1 << 6
	// maxSlots is how many batches a token can name.
	maxSlots = 1 << 18
)

// WithRail returns token naming rail (0 <= rail < MaxRails) instead.
func WithRail(token uint64, rail int) uint64 {
	return token&^(uint64(MaxRails-1)<<tokenRailShift) | uint64(rail&(MaxRails-1))<<tokenRailShift
}

// TokenRail returns the rail a token names.
func TokenRail(token uint64) int { return int(token>>tokenRailShift) & (MaxRails - 1) }

// TokenTask returns the batch slot (Batch.Slot) and task index a token
// names, unchecked: the tracker checks the rest (Tracker.Apply).
func TokenTask(token uint64) (slot, i int) {
	return int(token >> tokenSlotShift), int(token & (MaxTasks - 1))
}

// reservedSlot is a batch slot no tracker has (NewTracker keeps below
// it): tokens naming it are the lanes' own descriptors, never a task's.
// Whatever the token layout becomes, ProbeToken must stay outside the
// tokens Batch.Token hands out.
const reservedSlot = maxSlots - 1

// probeSeqMask keeps the bits below the slot: a probe's number.
const probeSeqMask = 1<<tokenSlotShift - 1

// ProbeToken returns the token of a lane's liveness probe number seq
// (the low 46 bits of it). Lane.Poll takes its completion; the tracker
// never sees it.
func ProbeToken(seq uint64) uint64 { return reservedSlot<<tokenSlotShift | seq&probeSeqMask }

// probeSeq returns the probe number of a probe token.
func probeSeq(token uint64) (uint64, bool) {
	if token>>tokenSlotShift != reservedSlot {
		return 0, false
	}
	return token & probeSeqMask, true
}

// State returns task i's state, first ending it TIMEOUT if its deadline
// is at or before now.
//
// A task whose end was decided while a plugin still held slices of it
// (canceled, or its deadline passed) is still Pending here: it is not
// over until no plugin can touch its memory. Stopping tells it apart.
func (b *Batch) State(i int, now int64) State {
	t := &b.tasks[i]
	if s := t.State(); s != Pending || t.Deadline == 0 || now < t.Deadline || t.ending.Load() != 0 {
		return s
	}
	b.Finish(i, Timeout, nil)
	return t.State()
}

// Stopping reports whether task i has ended or its end was decided
// (expiring it first, as State does): a submitter sends no more slices of
// it.
func (b *Batch) Stopping(i int, now int64) bool {
	return b.State(i, now).Terminal() || b.tasks[i].ending.Load() != 0
}

// Ending returns the terminal state decided for task i while a plugin
// holds slices of it, and since when (unix ns); Pending when there is
// none (the task is running, or over).
func (b *Batch) Ending(i int) (State, int64) {
	t := &b.tasks[i]
	if State(t.state.Load()).Terminal() {
		return Pending, 0
	}
	return State(t.ending.Load()), t.endAt.Load()
}

// Reserve adds a task and returns its index, or -1 when the batch is full.
func (b *Batch) Reserve(length uint64, deadline int64) int {
	l := [1]uint64{length}
	i, n := b.ReserveRun(l[:], deadline)
	if n == 0 {
		return -1
	}
	return i
}

// ReserveRun adds a task for each of lengths, all with one deadline, at
// consecutive indices from first; n is how many it added, fewer than
// len(lengths) (0 included) when the batch fills. It costs one lock, one
// publication and one add to the batch's totals for the run, not one per
// task: the submitter's atomics are full fences on amd64, and the
// batch's counters share cache lines with the completion side.
func (b *Batch) ReserveRun(lengths []uint64, deadline int64) (first, n int) {
	return b.reserve(lengths, deadline, nil, nil)
}

// ReserveRouted is ReserveRun for tasks whose route and cut are known
// before they are added: the tasks of a block submission that nothing
// can stop before their slices are put (no admission, no qos queue, the
// local side registered whole). Each task is set as r says, what
// SetTransport, SetSlices and the first Lane.Put would set right after,
// with plain writes before the batch counts the tasks rather than with
// fenced stores each after it: until n counts a task nobody reads it. The
// submitter then puts its slices (Lane.Put) and cuts it (Cut) as usual.
//
// fill is called with the tasks' first index and count, under the
// batch's lock, before the batch counts them: what the caller keeps of
// each task (its request) must be written there. Whoever sees a task
// (a completion's reaper, a status call) sees it through the count, and
// so sees what fill wrote; a write after ReserveRouted would be ordered
// before them by nothing of this process's (the task's atomics were set
// here, before it, and the descriptor that follows goes through the
// plugin's process).
func (b *Batch) ReserveRouted(lengths []uint64, deadline int64, r *Route, fill func(first, n int)) (first, n int) {
	return b.reserve(lengths, deadline, r, fill)
}

// Route is what ReserveRouted sets of the tasks it adds.
type Route struct {
	// Transport is the index of the plugin carrying them.
	Transport int32
	// Slices[k] is how many slices task k is cut into, and Slice[k] the
	// length of its first (and largest) one.
	Slices []int64
	Slice  []uint64
	// Rails is the set of rails every slice of the tasks goes on, when it
	// is known before they are put (a plugin of one rail); 0: Lane.Put
	// records each slice's rail as it is put.
	Rails uint64
	// Lane is the ID of the lane their slices are put on, and Run that
	// lane's Run.
	Lane, Run uint32
}

// laneWord is what a task's lane field holds for lane id of run.
func laneWord(id, run uint32) int64 { return int64(run)<<32 | int64(id+1) }

// plainStore32 and plainStore64 write an atomic word of a task nobody
// reads yet (ReserveRouted): a plain store, ordered before the readers'
// atomic loads by the store of the batch's count that publishes the
// task. The atomic types are their word alone.
func plainStore32(p *atomic.Int32, v int32)    { *(*int32)(unsafe.Pointer(p)) = v }
func plainStore64(p *atomic.Int64, v int64)    { *(*int64)(unsafe.Pointer(p)) = v }
func plainStoreU64(p *atomic.Uint64, v uint64) { *(*uint64)(unsafe.Pointer(p)) = v }

// reserve is ReserveRun, and ReserveRouted when r is not nil.
func (b *Batch) reserve(lengths []uint64, deadline int64, r *Route, fill func(first, n int)) (first, n int) {
	b.mu.Lock()
	first = int(b.n.Load())
	n = min(len(lengths), len(b.tasks)-first)
	if n <= 0 {
		b.mu.Unlock()
		return first, 0
	}
	for k, length := range lengths[:n] {
		t := &b.tasks[first+k]
		if t.held.Load() && t.held.Swap(false) && b.tracker != nil {
			b.tracker.held.Add(-1) // a task of the batch's previous life, freed held
		}
		// Nobody reads a task before n counts it (the tracker, the status
		// calls and the hooks all look below n), and the store of n
		// publishes it: plain writes reset it (unrouted, transport 0), a
		// fraction of the cost of an atomic store per field on the submit
		// path.
		*t = Task{Length: length, Deadline: deadline}
		if r != nil {
			plainStore32(&t.transport, r.Transport+1)
			plainStore64(&t.unclaimed, r.Slices[k])
			plainStore64(&t.pending, r.Slices[k])
			plainStoreU64(&t.slice, r.Slice[k])
			plainStoreU64(&t.rails, r.Rails)
			plainStore64(&t.lane, laneWord(r.Lane, r.Run))
		}
		b.total += length // under mu: no fenced add on the submit path
	}
	if fill != nil {
		fill(first, n)
	}
	b.n.Store(int32(first + n))
	b.mu.Unlock()
	if deadline != 0 {
		for {
			m := b.minDeadline.Load()
			if (m != 0 && m <= deadline) || b.minDeadline.CompareAndSwap(m, deadline) {
				break
			}
		}
	}
	return first, n
}

// TotalBytes returns the bytes of every task added.
func (b *Batch) TotalBytes() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// MinDeadline returns the earliest deadline of any task, 0 if none.
func (b *Batch) MinDeadline() int64 { return b.minDeadline.Load() }

// Finish ends task i in state s unless it already ended; reports whether
// this call ended it (or, for Canceled and Timeout, decided its end).
//
// "Ended" means no plugin still touches the task's memory. So a task
// canceled or timed out while slices of it are out (published, or being
// cut) is not ended at once: its end is decided (the first of Canceled
// and Timeout wins), the tracker counts it held and its Held hooks are told
// (to abort the slices where the plugin can), and it takes that state
// when its last slice comes back, or when its plugin is gone
// (FailTransport, Release). Until then State reports it Pending, and a
// Finish with another state changes nothing.
func (b *Batch) Finish(i int, s State, err error) bool {
	t := &b.tasks[i]
	if State(t.state.Load()).Terminal() {
		return false
	}
	if err != nil {
		e := err // declared here so that only a call with an error allocates
		t.err.CompareAndSwap(nil, &e)
	}
	if (s == Canceled || s == Timeout) && t.ending.CompareAndSwap(0, uint32(s)) {
		// Decided before pending is read: a slice completing now either
		// is seen in pending here or sees ending in settle (and a
		// submitter that sets pending after this sees ending before it
		// sends anything).
		t.endAt.Store(Now())
		if t.pending.Load() > 0 {
			b.hold(i)
			return true
		}
	}
	if e := State(t.ending.Load()); e != 0 {
		if t.pending.Load() > 0 {
			return false // its last slice, or its plugin's end, ends it
		}
		s = e
	}
	return b.end(i, s, 0, nil)
}

// Release ends task i in the state decided for it (see Finish) although
// slices of it are still out: their plugin is gone (killed or exited), so
// nothing touches the task's memory any more. It reports whether it
// ended the task; false when no end was decided.
func (b *Batch) Release(i int) bool {
	e := State(b.tasks[i].ending.Load())
	if e == 0 {
		return false
	}
	return b.end(i, e, 0, nil)
}

// end moves task i to s unless it ended already, and reports whether this
// call did it; at is the hooks' (see Hook), r its run (nil: none).
func (b *Batch) end(i int, s State, at int64, r *Run) bool {
	if !b.tasks[i].finish(s) {
		return false
	}
	b.ended(i, s, at, r, false)
	return true
}

// hold counts task i among the tracker's held tasks (its end decided, a
// plugin still holding slices) and tells the Held hooks. The count is
// raised before the task's state is looked at again, so that an end that
// raced with it (ended, which lowers it) is never missed.
func (b *Batch) hold(i int) {
	tr := b.tracker
	if tr == nil {
		return
	}
	t := &b.tasks[i]
	t.held.Store(true)
	tr.held.Add(1)
	if State(t.state.Load()).Terminal() {
		if t.held.CompareAndSwap(true, false) {
			tr.held.Add(-1)
		}
		return
	}
	if h := b.hooks; h != nil {
		for _, f := range h.held {
			f(b, i)
		}
	}
}

// SetSlices records how many slices task i was cut into; call before any
// slice is published.
func (b *Batch) SetSlices(i int, n int64) {
	t := &b.tasks[i]
	t.unclaimed.Store(n)
	t.pending.Store(n)
}

// sent records that a slice of task i of length bytes goes out on rail,
// before it is published: Lane.Put calls it.
func (b *Batch) sent(i, rail int, length uint64, lane, run uint32) {
	t := &b.tasks[i]
	if l := laneWord(lane, run); t.lane.Load() != l {
		t.lane.Store(l)
	}
	if bit := uint64(1) << (rail & (MaxRails - 1)); t.rails.Load()&bit == 0 {
		t.rails.Or(bit)
	}
	if t.slice.Load() == 0 {
		t.slice.Store(length) // the first slice is the largest
	}
}

// Unsent tells task i that n of its slices will never be published (the
// task was canceled or failed while it was being cut).
func (b *Batch) Unsent(i int, n int64) {
	t := &b.tasks[i]
	t.unclaimed.Add(-n)
	if t.pending.Add(-n) == 0 {
		b.settle(i, 0, nil)
	}
}

// complete folds one completion into task i, after checking it against
// what was sent: a slice must be outstanding (else Duplicate, nothing
// changes) and its bytes must fit the slice and what is left of the task
// (else Overlong: the slice counts as failed with StatusProtocol and 0
// bytes, so that its attempt fails over rather than completing on a lie).
// at is when it was reaped (see Hook), in run r (nil: none; see
// Hook.RunEnded).
func (b *Batch) complete(i int, st ring.Status, bytes uint64, rail int, at int64, r *Run) Verdict {
	t := &b.tasks[i]
	for {
		u := t.unclaimed.Load()
		if u <= 0 {
			return Duplicate
		}
		if t.unclaimed.CompareAndSwap(u, u-1) {
			break
		}
	}
	v := Applied
	if s := t.slice.Load(); bytes > t.Length || (s != 0 && bytes > s) {
		v = Overlong
	} else {
		for {
			old := t.bytes.Load()
			if old+bytes > t.Length {
				v = Overlong
				break
			}
			if t.bytes.CompareAndSwap(old, old+bytes) {
				break
			}
		}
	}
	if v == Overlong {
		st, bytes = ring.StatusProtocol, 0
	}
	if st != ring.StatusOK && t.status.CompareAndSwap(0, int32(st)) {
		t.failRail.Store(int32(rail) + 1)
	}
	if t.pending.Add(-1) == 0 {
		b.settle(i, at, r)
	}
	return v
}

// settle ends a task whose slices all came back: COMPLETED, or FAILED
// with its first failing status, except that a slice the plugin did not
// carry because its deadline had passed ends the task TIMEOUT, as the
// deadline would have had the host seen it first.
//
// An attempt already handed to a Failed hook (its submitter failed it,
// then gave up its unsent slices) is the hook's: settling it here would
// end it COMPLETED with the bytes of the slices that were sent. at is
// the hooks' (see Hook), for the settling and the end it makes, in run
// r (nil: none; see Hook.RunEnded).
func (b *Batch) settle(i int, at int64, r *Run) {
	t := &b.tasks[i]
	if e := State(t.ending.Load()); e != 0 {
		b.end(i, e, at, r) // its end was decided while the slices were out
		return
	}
	if t.failing.Load() {
		return
	}
	s := Completed
	switch ring.Status(t.status.Load()) {
	case ring.StatusOK:
	case ring.StatusTimeout:
		s = Timeout
	default:
		s = Failed
	}
	// In a run, an attempt that settles without failing ends its task:
	// a hook with RunEnded hears of both with one call. The hooks are
	// told only while the task is pending, and under its hold (Noting)
	// when one of them needs it.
	settled := r != nil && s != Failed
	if h := b.hooks; h != nil {
		fs, held := h.settled, h.settledHeld
		if settled {
			fs, held = h.settledRun, h.settledRunHeld
		}
		if len(fs) > 0 {
			if held {
				t.noting.Lock()
			}
			if !State(t.state.Load()).Terminal() {
				st := ring.Status(t.status.Load())
				for _, f := range fs {
					f(b, i, st, at)
				}
			}
			if held {
				t.noting.Unlock()
			}
		}
	}
	if s == Failed && b.offer(i, nil) {
		return
	}
	if t.finish(s) {
		b.ended(i, s, at, r, settled)
	}
}

// ended counts task i, which this caller moved to s, as done and tells
// the hooks, with at, under the task's hold when one of them needs it;
// in run r, those with RunEnded with it (settled: see Hook.RunEnded),
// and then, when it is the batch's last end, the Flush hooks.
func (b *Batch) ended(i int, s State, at int64, r *Run, settled bool) {
	t := &b.tasks[i]
	if t.held.Load() && t.held.CompareAndSwap(true, false) {
		b.tracker.held.Add(-1)
	}
	if h := b.hooks; h != nil && h.ends {
		held := h.endedHeld
		if r != nil {
			held = h.endedRunHeld
		}
		if held {
			t.noting.Lock()
		}
		if r == nil {
			for _, f := range h.ended {
				f(b, i, s, at)
			}
		} else {
			for k := range h.endedRun {
				if e := &h.endedRun[k]; e.run != nil {
					e.run(r, b, i, s, settled)
				} else {
					e.end(b, i, s, at)
				}
			}
		}
		if held {
			t.noting.Unlock()
		}
		if r != nil && len(h.flush) > 0 && b.done.Load()+1 >= b.n.Load() { // the batch's last end: flushed before its waiter sees it done
			for _, f := range h.flush {
				f(r)
			}
		}
	}
	b.taskDone()
}

// offer hands a failed attempt of task i to the Failed hooks, once per
// attempt, until one takes it; it reports whether one did (the task
// stays pending and the taker resubmits or ends it).
func (b *Batch) offer(i int, err error) bool {
	t := &b.tasks[i]
	if b.hooks == nil || len(b.hooks.failed) == 0 || State(t.state.Load()).Terminal() || t.ending.Load() != 0 || !t.failing.CompareAndSwap(false, true) {
		return false
	}
	for _, f := range b.hooks.failed {
		if f(b, i, err) {
			return true
		}
	}
	t.failing.Store(false)
	return false
}

// Failing reports whether a failed attempt of task i was handed to a
// Failed hook (failover) and no new attempt started since. With slices
// of it still out, that attempt's lane went down under them (Lane.Put
// fails only so): they will never come back, so a task whose end is
// decided meanwhile is released by the engine (Release), not by its
// last slice.
func (b *Batch) Failing(i int) bool { return b.tasks[i].failing.Load() }

// Fail ends task i FAILED with err, unless a Failed hook takes it for
// another attempt. For the submitter, whose attempt could not be sent.
func (b *Batch) Fail(i int, err error) {
	if !b.offer(i, err) {
		b.Finish(i, Failed, err)
	}
}

// Cut records that every slice of task i's current attempt was published
// (or given up): from now on, its plugin's death fails it over.
func (b *Batch) Cut(i int) { b.tasks[i].cut.Store(1) }

// CutRun is Cut for the tasks of a run, is, with one full barrier after
// them all rather than one each: a submitter marks its tasks cut and
// then looks whether their lane went down (Lane.Down), while the lane's
// watcher marks the lane down and then looks at the tasks (failTask).
// Either the submitter sees the lane down or the watcher sees the tasks
// cut, since each side's store is ordered before its load: release
// stores and one barrier on this side, a sequentially consistent store
// on the other. A barrier waits for the stores before it: on far-apart
// vCPUs most likely the ring slot the task had just written, whose line
// the plugin read last (this guest has no counters to show it). 4 KiB
// shm writes in batches of 128 spent 1.1-1.6 us less a batch in Submit
// with this and the single rail's counting once a publication
// (rails.Picked): 19.4-20.5 to 18.2-18.8 us (ferry bench, 8 interleaved
// rounds).
func (b *Batch) CutRun(is []int32) {
	for _, i := range is {
		atomicx.StoreRelease32(&b.tasks[i].cut, 1)
	}
	atomicx.Fence()
}

// Retry starts attempt+1 of task i: completions of earlier attempts are
// dropped from now on; the caller cuts it again (SetSlices, Put, Cut). It
// reports false when the task ended meanwhile (canceled, timed out) or has
// used every attempt the token can tell apart.
func (b *Batch) Retry(i int) bool {
	t := &b.tasks[i]
	if State(t.state.Load()).Terminal() || t.ending.Load() != 0 || t.attempt.Load() >= 1<<tokenAttemptBits-1 {
		return false
	}
	t.attempt.Add(1)
	t.rails.Store(0)
	t.lane.Store(0)
	t.slice.Store(0)
	t.cut.Store(0)
	t.status.Store(0)
	t.failRail.Store(0)
	t.bytes.Store(0)
	t.failing.Store(false)
	return !State(t.state.Load()).Terminal() && t.ending.Load() == 0
}

// Attempt returns which attempt of task i runs, 0 for the first.
func (b *Batch) Attempt(i int) int { return int(b.tasks[i].attempt.Load()) }

func (b *Batch) taskDone() {
	if b.done.Add(1) == b.n.Load() {
		select {
		case b.notify <- struct{}{}:
		default:
		}
	}
}

// Done reports whether every added task is terminal, expiring tasks whose
// deadline passed.
func (b *Batch) Done(now int64) bool {
	n := b.n.Load()
	if b.done.Load() == n {
		return true
	}
	if md := b.minDeadline.Load(); md != 0 && now >= md {
		for i := range int(n) {
			b.State(i, now)
		}
	}
	return b.done.Load() == n
}

// Wake returns a channel that receives when the last task ends. Waiters
// must re-check Done after a receive or a timeout.
func (b *Batch) Wake() <-chan struct{} { return b.notify }

// Cancel ends every pending task CANCELED, each as Finish does: a task
// whose slices are still out is ended when they come back (or their
// plugin is gone); their results no longer change its state.
func (b *Batch) Cancel() int {
	n, c := int(b.n.Load()), 0
	for i := range n {
		if b.Finish(i, Canceled, nil) {
			c++
		}
	}
	return c
}

// ErrTooManyBatches is returned when every batch slot is in use.
var ErrTooManyBatches = errors.New("too many batches allocated; free batches when done with them")

// MaxTasks is the most tasks one batch may hold (the token has 20 bits).
const MaxTasks = 1 << tokenAttemptShift

// Tracker owns the batch table and routes completions to tasks.
type Tracker struct {
	slots []atomic.Pointer[Batch]
	// live is read-held while a completion is applied and write-held while
	// a batch is freed, so a batch is never reused under a late completion.
	live sync.RWMutex

	// chain is the hooks in the order registered (Hook); hooks is what
	// each event calls of them, copied into every batch.
	chain []Hook
	hooks *hooks
	// held counts the tasks whose end was decided while a plugin still
	// held slices of them (see Batch.Finish); the Held hooks are told of
	// each.
	held atomic.Int64

	mu sync.Mutex
	// free is a queue of free slots: a ring of len(slots) entries, the
	// oldest at freeHead, freeN of them.
	free     []uint32
	freeHead int
	freeN    int
	gens     []uint32
	// used counts the slots ever handed out: the free queue starts in
	// slot order and is first in, first out, so they are [0, used).
	used atomic.Uint32
}

// Held returns how many tasks are held: their end decided, a plugin still
// holding slices of them.
func (t *Tracker) Held() int64 { return t.held.Load() }

// HeldBy returns how many held tasks transport idx carries, and the
// earliest time (unix ns) one of their ends was decided. It costs one
// load when no task is held, and a walk of the live batches otherwise.
func (t *Tracker) HeldBy(idx int32) (n int, since int64) {
	if t.held.Load() == 0 {
		return 0, 0
	}
	t.Each(func(b *Batch) {
		for i := range int(b.n.Load()) {
			tk := &b.tasks[i]
			if !tk.held.Load() || tk.transport.Load() != idx+1 || tk.detached.Load() || State(tk.state.Load()).Terminal() {
				continue
			}
			n++
			if at := tk.endAt.Load(); since == 0 || at < since {
				since = at
			}
		}
	})
	return n, since
}

// Live reports whether b is a batch the tracker holds now (allocated and
// not freed).
func (t *Tracker) Live(b *Batch) bool {
	return b != nil && int(b.slot) < len(t.slots) && t.slots[b.slot].Load() == b
}

// Slots returns how many batches the tracker can hold at once: every
// Batch.Slot is below it.
func (t *Tracker) Slots() int { return len(t.slots) }

// NewTracker returns a tracker with room for maxBatches live batches.
func NewTracker(maxBatches int) *Tracker {
	if maxBatches <= 0 || maxBatches > reservedSlot {
		maxBatches = 1 << 16
	}
	t := &Tracker{slots: make([]atomic.Pointer[Batch], maxBatches), gens: make([]uint32, maxBatches)}
	t.free = make([]uint32, maxBatches)
	for i := range t.free {
		t.free[i] = uint32(i)
	}
	t.freeN = maxBatches
	return t
}

// Allocate returns an empty batch for up to capacity tasks.
func (t *Tracker) Allocate(capacity int) (*Batch, error) {
	if capacity <= 0 || capacity > MaxTasks {
		return nil, fmt.Errorf("batch capacity %d out of range 1..%d", capacity, MaxTasks)
	}
	t.mu.Lock()
	if t.freeN == 0 {
		t.mu.Unlock()
		return nil, ErrTooManyBatches
	}
	// Oldest freed first: a slot comes back as late as possible, so that a
	// token's 16-bit generation wraps only after a slot was reused 65536
	// times, not the same slot over and over.
	slot := t.free[t.freeHead]
	t.freeHead = (t.freeHead + 1) % len(t.free)
	t.freeN--
	t.gens[slot]++
	gen := t.gens[slot]
	if slot >= t.used.Load() {
		t.used.Store(slot + 1)
	}
	t.mu.Unlock()

	var b *Batch
	if v := batchPools.Get(capacity); v != nil {
		b = v.(*Batch)
	}
	if b == nil || cap(b.tasks) < capacity {
		_, size := SizeClass(capacity)
		b = &Batch{notify: make(chan struct{}, 1), tasks: make([]Task, capacity, size)}
	} else {
		b.tasks = b.tasks[:capacity]
		select {
		case <-b.notify:
		default:
		}
	}
	b.slot, b.gen = slot, gen
	b.hooks = t.hooks
	b.tracker = t
	b.n.Store(0)
	b.done.Store(0)
	b.total = 0
	b.minDeadline.Store(0)
	b.pins.Store(0)
	t.slots[slot].Store(b)
	return b, nil
}

// Verdict is what the tracker made of one completion.
type Verdict uint8

const (
	// Applied: folded into its task.
	Applied Verdict = iota
	// Late: the completion of a freed batch, an earlier generation of its
	// slot or an earlier attempt of its task; dropped, as the contract
	// allows (the slice was sent, its task moved on).
	Late
	// Unknown: the token names no slice the host sent (a slot it does
	// not have, a newer generation or attempt, a task never added, a rail
	// the attempt did not use: see Misrouted); dropped. A contract
	// violation.
	Unknown
	// Duplicate: the token names a task none of whose slices is
	// outstanding; dropped. A contract violation.
	Duplicate
	// Overlong: more bytes than the slice carries, or than are left of
	// the task; the slice counts as failed (StatusProtocol, 0 bytes). A
	// contract violation.
	Overlong
	// Misrouted: the token names a task exactly but a rail its attempt
	// put nothing on: one of its slices, mangled. That slice fails
	// (StatusProtocol), so that the attempt fails over rather than
	// waiting for a completion that will not come. Lanes count it with
	// Unknown. A contract violation.
	Misrouted
)

var verdictNames = [...]string{"applied", "late", "unknown", "duplicate", "overlong", "misrouted"}

func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// Violation reports whether v breaks the completion contract.
func (v Verdict) Violation() bool { return v >= Unknown }

// lookup returns the live batch and task index a token names, or nil and
// why not (Late or Unknown). t.live is held.
func (t *Tracker) lookup(token uint64) (*Batch, int, Verdict) {
	slot := uint32(token >> tokenSlotShift)
	if int(slot) >= len(t.slots) {
		return nil, 0, Unknown
	}
	b := t.slots[slot].Load()
	if b == nil {
		if slot >= t.used.Load() {
			return nil, 0, Unknown // a slot never handed out
		}
		return nil, 0, Late // freed: its tasks ended
	}
	if g, want := uint16(token>>24), uint16(b.gen); g != want {
		// An earlier batch of the slot is one whose generation existed:
		// fewer generations back than the slot has had.
		if back := uint32(want - g); back < b.gen {
			return nil, 0, Late
		}
		return nil, 0, Unknown
	}
	i := int(token & (MaxTasks - 1))
	if i >= int(b.n.Load()) {
		return nil, 0, Unknown
	}
	tk := &b.tasks[i]
	a, ta := tk.attempt.Load()&(1<<tokenAttemptBits-1), uint32(token>>tokenAttemptShift)&(1<<tokenAttemptBits-1)
	if a != ta {
		if ta < a {
			return nil, 0, Late // a slice of an earlier attempt
		}
		return nil, 0, Unknown
	}
	return b, i, Applied
}

// Complete folds one slice completion into its task and reports whether
// it did; see Apply.
func (t *Tracker) Complete(token uint64, st ring.Status, bytes uint64) bool {
	return t.Apply(token, st, bytes) == Applied
}

// Apply checks one slice completion against what the host sent and folds
// it into its task; the Verdict says what became of it. A token of a
// freed or reused batch, or of an earlier attempt, is Late: that
// completion belongs to a task that already ended or moved on.
func (t *Tracker) Apply(token uint64, st ring.Status, bytes uint64) Verdict {
	return t.ApplyAt(token, st, bytes, 0)
}

// ApplyAt is Apply for a completion reaped at at, a Clock time that the
// hooks are handed (0: none read; see Hook).
func (t *Tracker) ApplyAt(token uint64, st ring.Status, bytes uint64, at int64) Verdict {
	return t.apply(token, st, bytes, at, nil)
}

// ApplyRun is Apply for a completion of poller's run r, reaped at r.At:
// a hook with RunEnded counts the ends it makes in r's tally, which the
// poller has it publish with FlushRun at the run's end. A lane's poller
// applies a run's completions together (ApplyEach).
func (t *Tracker) ApplyRun(token uint64, st ring.Status, bytes uint64, r *Run) Verdict {
	return t.apply(token, st, bytes, r.At, r)
}

// Verdicts counts the completions of a run ApplyEach did not apply as
// they came (Applied): by verdict.
type Verdicts struct {
	Unknown, Duplicate, Misrouted, Overlong int
}

// Broke reports whether a completion of the run broke the contract.
func (v Verdicts) Broke() bool { return v != Verdicts{} }

// ApplyEach applies the completions ds of poller's run r, reaped at
// r.At, as ApplyRun does each, with the batch table read-held once for
// the run rather than once a completion; a status that is not one
// becomes StatusProtocol. The poller ends the run with FlushRun.
func (t *Tracker) ApplyEach(ds []ring.Descriptor, r *Run) (v Verdicts) {
	t.live.RLock()
	defer t.live.RUnlock()
	for i := range ds {
		d := &ds[i]
		st := d.Status
		if !st.Valid() {
			st = ring.StatusProtocol
		}
		switch t.applyLocked(d.Token, st, d.Length, r.At, r) {
		case Unknown:
			v.Unknown++
		case Duplicate:
			v.Duplicate++
		case Misrouted:
			v.Misrouted++
		case Overlong:
			v.Overlong++
		}
	}
	return v
}

// FlushRun ends run r: the Flush hooks publish what they counted in it.
// A poller calls it after the run's last ApplyEach (or ApplyRun), before it looks for
// more or sleeps.
func (t *Tracker) FlushRun(r *Run) {
	if h := t.hooks; h != nil {
		for _, f := range h.flush {
			f(r)
		}
	}
}

func (t *Tracker) apply(token uint64, st ring.Status, bytes uint64, at int64, r *Run) Verdict {
	t.live.RLock()
	defer t.live.RUnlock()
	return t.applyLocked(token, st, bytes, at, r)
}

// applyLocked is apply with t.live read-held.
func (t *Tracker) applyLocked(token uint64, st ring.Status, bytes uint64, at int64, r *Run) Verdict {
	b, i, v := t.lookup(token)
	if b == nil {
		return v
	}
	if m := b.tasks[i].rails.Load(); m != 0 && m&(1<<TokenRail(token)) == 0 {
		// A rail the attempt put nothing on, in a token that names the
		// task exactly otherwise: the completion of one of its slices,
		// mangled. The slice fails (its real completion will not come),
		// so that the attempt fails over instead of waiting for it.
		if b.complete(i, ring.StatusProtocol, 0, TokenRail(token), at, r) == Duplicate {
			return Duplicate
		}
		return Misrouted
	}
	return b.complete(i, st, bytes, TokenRail(token), at, r)
}

// Free releases a batch. Late completions for its tasks are dropped. It
// reports whether it freed the batch (false: it was freed already). A
// pinned batch (Pin) leaves its slot at once, so that no completion and
// no new pin reaches it, and goes back to the pool at its last Unpin.
func (t *Tracker) Free(b *Batch) bool {
	t.live.Lock()
	ok := t.slots[b.slot].CompareAndSwap(b, nil)
	t.live.Unlock()
	if !ok {
		return false
	}
	if t.held.Load() > 0 {
		// Held tasks of a batch freed anyway (its owner gave up waiting)
		// are no longer the tracker's to count.
		for i := range int(b.n.Load()) {
			if tk := &b.tasks[i]; tk.held.Load() && tk.held.CompareAndSwap(true, false) {
				t.held.Add(-1)
			}
		}
	}
	if b.pins.Add(pinFreed) == pinFreed {
		t.recycle(b)
	}
	return true
}

// recycle gives a freed batch's slot and memory back, once nobody works
// on it.
func (t *Tracker) recycle(b *Batch) {
	t.mu.Lock()
	t.free[(t.freeHead+t.freeN)%len(t.free)] = b.slot
	t.freeN++
	t.mu.Unlock()
	batchPools.Put(cap(b.tasks), b)
}

// Pin returns the live batch and task a token names, pinned: until
// Unpin, a Free of the batch does not hand it (or its slot) to a new
// owner. Nil when the batch was freed or the task moved to another
// attempt. Unlike holding the tracker's lock, a pin may be kept across a
// wait (a credit wait, a full ring): the lock is only taken to look the
// token up.
func (t *Tracker) Pin(token uint64) (b *Batch, i int) {
	t.live.RLock()
	defer t.live.RUnlock()
	if b, i, _ = t.lookup(token); b == nil {
		return nil, 0
	}
	b.pins.Add(1)
	return b, i
}

// PinBatch pins b (see Pin) when it is still live with id (Batch.ID),
// and reports whether it did.
func (t *Tracker) PinBatch(b *Batch, id uint64) bool {
	t.live.RLock()
	defer t.live.RUnlock()
	if !t.Live(b) || b.ID() != id {
		return false
	}
	b.pins.Add(1)
	return true
}

// Unpin ends a Pin or PinBatch of b.
func (t *Tracker) Unpin(b *Batch) {
	if b.pins.Add(-1) == pinFreed {
		t.recycle(b)
	}
}

// Pinned reports whether a goroutine works on b (Pin).
func (t *Tracker) Pinned(b *Batch) bool { return b.pins.Load()&(pinFreed-1) != 0 }

// AwaitUnpinned waits, up to bound, until no goroutine works on a task
// of b (Pin). b's tasks have ended (its owner frees it), so such a
// goroutine sees that at its next look (a credit wait's poll, a full
// ring's) and lets go. Past the bound, Free hands b back to the pool at
// the last Unpin instead.
func (t *Tracker) AwaitUnpinned(b *Batch, bound time.Duration) {
	if !t.Pinned(b) {
		return
	}
	deadline := time.Now().Add(bound)
	for t.Pinned(b) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// Each calls f for every live batch. It holds live for reading, as a
// completion does: no batch is freed (and handed to a new owner by the
// pool) while f looks at it. f must not call Free.
func (t *Tracker) Each(f func(*Batch)) {
	t.live.RLock()
	defer t.live.RUnlock()
	for i := range t.slots {
		if b := t.slots[i].Load(); b != nil {
			f(b)
		}
	}
}

// FailTransport ends FAILED every pending task routed to transport idx
// (its plugin died), or TIMEOUT one whose deadline has passed: nobody
// looked at it since, but it missed its deadline before the plugin
// failed it. Returns how many tasks it ended.
func (t *Tracker) FailTransport(idx int32, err error) int {
	return t.FailTransportExcept(idx, err, nil)
}

// FailTransportExcept is FailTransport, leaving alone the tasks for
// which keep (called with the tracker read-held: it must not block)
// returns true: keep detaches them (Detach), and the engine ends them
// later with FailToken, once the bytes they may still carry can no
// longer land (host/fence). keep sees tasks still being cut too (Cut
// not yet called): their submitter fails them over itself, so keep
// should not detach those.
func (t *Tracker) FailTransportExcept(idx int32, err error, keep func(b *Batch, i int) bool) int {
	return t.FailRunExcept(idx, 0, err, keep)
}

// FailRunExcept is FailTransportExcept for the tasks of one run of
// transport idx: those whose current attempt was put on a lane of Run
// run (Lane.Run), and, unless only is set, those not put on any lane yet.
// A run of 0 is every task of the transport. A run retired by a live
// upgrade ends so (only: the tasks not yet on a lane are the new run's),
// and a run that dies leaves the retiring run's tasks to it.
func (t *Tracker) FailRunExcept(idx int32, run uint32, err error, keep func(b *Batch, i int) bool) int {
	return t.failRun(idx, run, false, err, keep)
}

// FailRetired is FailRunExcept for a retired run: only the tasks put on
// its lanes.
func (t *Tracker) FailRetired(idx int32, run uint32, err error, keep func(b *Batch, i int) bool) int {
	return t.failRun(idx, run, true, err, keep)
}

func (t *Tracker) failRun(idx int32, run uint32, only bool, err error, keep func(b *Batch, i int) bool) int {
	n := 0
	now := Now()
	t.Each(func(b *Batch) {
		for i := range int(b.n.Load()) {
			tk := &b.tasks[i]
			if tk.transport.Load() != idx+1 || tk.detached.Load() {
				continue
			}
			if run != 0 {
				if r := uint32(tk.lane.Load() >> 32); r != run && (only || r != 0) {
					continue
				}
			}
			if keep != nil && !State(tk.state.Load()).Terminal() && keep(b, i) {
				continue
			}
			if b.failTask(i, err, now) {
				n++
			}
		}
	})
	return n
}

// FailToken does for the task a token names what FailTransport does for
// every task of a transport whose plugin died, if that task is still
// detached from it (Detach) and on that attempt; it reports whether it
// ended the task or handed it to failover.
func (t *Tracker) FailToken(token uint64, err error) bool {
	t.live.RLock()
	defer t.live.RUnlock()
	b, i, _ := t.lookup(token)
	if b == nil || !b.tasks[i].detached.CompareAndSwap(true, false) {
		return false // it moved on: not detached (Detach), or another attempt
	}
	if b.tasks[i].failing.Load() && b.tasks[i].ending.Load() == 0 {
		// Its submitter saw the plugin gone and handed it to failover,
		// which resubmits or ends it. One whose end was decided since
		// (canceled, timed out) is failover's no more: released below.
		return false
	}
	return b.failTask(i, err, Now())
}

// failTask is what a plugin's death does to task i, which it carried.
func (b *Batch) failTask(i int, err error, now int64) bool {
	tk := &b.tasks[i]
	switch {
	case tk.ending.Load() != 0:
		// Its end was decided while the plugin held slices of
		// it: the plugin is gone, so nothing touches them now.
		return b.Release(i)
	case tk.Deadline != 0 && now >= tk.Deadline:
		// Decided TIMEOUT, and released at once if slices were
		// out: the plugin that held them is gone.
		return b.Finish(i, Timeout, nil) && (State(tk.state.Load()).Terminal() || b.Release(i))
	case tk.cut.Load() == 0:
		// Its submitter is still cutting it: it sees the lane
		// down and fails it over itself.
		return false
	case b.offer(i, err):
		return true
	default:
		return b.Finish(i, Failed, err)
	}
}

// Rails returns the set of rails (bit r for rail r) the current attempt
// put slices on: with Batch.Token and WithRail, the tokens its slices
// carry.
func (t *Task) Rails() uint64 { return t.rails.Load() }

// FailedRail returns the rail of the task's first failing slice, -1 if
// none failed.
func (t *Task) FailedRail() int { return int(t.failRail.Load()) - 1 }

// SetTransport records the plugin (its index) that carries the task.
func (t *Task) SetTransport(idx int32) { t.transport.Store(idx + 1) }

// Transport returns the index of the plugin carrying the task, -1 before
// routing.
func (t *Task) Transport() int32 { return t.transport.Load() - 1 }

// Lane returns the ID of the lane the task's current attempt was put on,
// -1 before its first slice was.
func (t *Task) Lane() int32 { return int32(uint32(t.lane.Load())) - 1 }

// Run returns the Run of the lane the task's current attempt was put
// on, 0 before its first slice was.
func (t *Task) Run() uint32 { return uint32(t.lane.Load() >> 32) }
