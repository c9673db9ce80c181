// Package waiting decides how a goroutine waits for completions: spin on
// the completion rings (and how it gives way between looks), poll them
// again at once, sleep until woken or until a time, or give the wait
// back. It answers "where does a waiter decide to spin, yield or sleep".
//
// Three goroutines wait, each in its role:
//
//   - Lane: a caller waiting for a batch whose tasks are all on one lane
//     (progress.Lane.WaitOn). It reaps the lane itself (Mark Enter: the
//     lane's reaper stands by). A poll that reaped polls again at once;
//     past its bound (the batch's earliest deadline, or HeldPoll after
//     its start once that has passed) it gives the wait back (Return);
//     it spins for its budget from the first empty poll after it last
//     reaped or slept, then sleeps on the lane's completion ring until
//     woken or its bound. Its budget is the lane's spin; for a small
//     batch it is SmallSpin, which follows the lane's median small wait;
//     for a larger one BulkSpin, four times the lane's median larger
//     wait within BulkSpinMax.
//   - Batch: a caller waiting for a batch whose tasks are on several
//     lanes (progress.Tracker.WaitBatch). It spins for its budget from
//     the wait's start (a small batch: the larger of spin and spin_small;
//     a larger one whose tasks are all on one lane: BulkSpin),
//     polling the lanes, and polling again at once after a poll that
//     reaped; then it sleeps on the batch's wake until its next deadline
//     (the batch's earliest; once that has passed, every HeldPoll, so
//     that tasks with later deadlines still expire in time; none: no
//     timer). A small batch, a dense one (many small tasks: IsDense),
//     or a larger one on one lane whose larger waits take at most
//     BulkSpinMax, enters its lanes while it spins (Mark Enter): their
//     reapers stand by rather than poll the same rings beside it. Other
//     batches only tell the plugins that a caller waits (Mark Begin)
//     throughout; a small batch asleep leaves its lanes to their reapers
//     without telling (None).
//   - Reaper: a lane's reaper goroutine (progress.Lane.Reap). It stands by
//     while a waiter is in (Enter), and after the last one left with
//     nothing in flight, until a publication with no waiter wakes it: at
//     once on a lane whose small waits spin, and on one whose small waits
//     sleep only if no waiter enters within a short grace (the submitter
//     of a synchronous call waits next and reaps; progress.Lane.End).
//     After a short run (under ShortRun) that
//     came while it spun after the run before, with nobody waiting, it
//     leaves the ring alone for its pause (Nap); after any other run it
//     polls again. It spins for its budget, giving its CPU away from the
//     first look (it has no caller's latency to win), then sleeps on the
//     ring.
//
// A spinning caller yields to other goroutines at each look (a Lane
// waiter only after its first 20 us: it reaps its lane itself and needs
// no other goroutine of its process meanwhile, and a completion that
// came during a yield waited for it), never to other processes: on
// EEVDF a sched_yield costs the yielder its place on its CPU (YieldCPU).
// A caller whose goroutine is locked to its thread (a call from C) does
// not yield at all (YieldNone), since handing its P away costs two
// thread wakeups per look.
//
// The package is pure: a decision is a function of plain data and the
// time (unix ns) the driver passes in. It must not sleep, spin, poll,
// read the clock, start goroutines or touch rings; the drivers (in
// host/progress) gather the facts, act on the decision and ask again.
// They bound each sleep by intervals of their own (to notice a close or
// a caller's stop), which are theirs, not this package's.
package waiting
