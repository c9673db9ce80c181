package progress

import (
	"sync/atomic"
	"time"
)

// The process's sense of whether its cores are oversubscribed, from its
// own spins: a waiter's spin looks at the clock every spinLooks looks at
// its ring (well under a microsecond apart), so two looks preemptGap or
// more apart, with no yield of its own between them, mean its thread
// lost the CPU for a slice (to another process's thread, or to the
// hypervisor). For busyFor after that, Busy says so, and a small batch's
// waiter on a lane slower than waiting.SpinWorthBusy sleeps rather than
// spin (waiting.SmallSpin): on idle cores a spin through a tcp round trip
// saves the wakeups that made most of it, and on busy ones the wakeup
// places the waiter where a spin would have it wait behind the threads
// it competes with. Only a Lane waiter's spins tell (Lane.spinUntil,
// Lane.WaitOn); a reaper's spins give their CPU away at each look.

// preemptedAt is when (unix ns) a spin last lost its CPU; 0 once that is
// busyFor past (Busy clears it, so that an idle process reads no clock
// for it).
var preemptedAt atomic.Int64

const (
	// preemptGap is the interval between two looks of a spin that says
	// its thread was not running between them for a scheduler's slice:
	// another process's. The few to tens of microseconds a thread of the
	// same transfer takes (the plugin's, the kernel's softirq on two
	// cores) are no sign of it: a 50 us gap marked a 2-vCPU machine busy
	// with nothing but the bench's own processes, and put tcp's waiters
	// back to sleep (4 KiB writes one at a time: p50 80 us, against 12).
	preemptGap = time.Millisecond
	// busyFor is how long a lost CPU counts (Busy).
	busyFor = 100 * time.Millisecond
)

// notePreempted records that a spin lost its CPU before now, if its
// look at the clock at last (0: none to tell from) is preemptGap or more
// before now.
func notePreempted(last, now int64) {
	if last != 0 && now-last >= int64(preemptGap) {
		preemptedAt.Store(now)
	}
}

// Busy reports whether a spin of this process lost its CPU within the
// last busyFor. It reads the clock only while one did.
func Busy() bool {
	at := preemptedAt.Load()
	if at == 0 {
		return false
	}
	if Now()-at < int64(busyFor) {
		return true
	}
	preemptedAt.CompareAndSwap(at, 0)
	return false
}
