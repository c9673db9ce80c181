// Package progress owns the transfer path after validation: the host side
// of each plugin lane (submission and completion rings), publishing a
// task's slices as the slicer planned them, reaping completions, and
// folding slice outcomes into per-task and per-batch state with exactly
// one terminal state per task. It tells the rest of the engine what
// becomes of tasks through one ordered chain of hooks (Hook,
// Tracker.Hook): a failed attempt, offered to failover; a task held, for
// its aborts; each attempt's settling and each task's end, with the time
// a lane's poller read once for the run of completions it reaped
// (Clock), so that the engine's metrics read no clock per task, and, for
// the meter, a run's ends counted in a tally of the lane's Run and
// published once per run (Tracker.ApplyEach, FlushRun); and each run of
// completions a lane reaps, for the rail set and credit of its owner
// (Lane.Owner). It holds
// plugins to the completion contract: every completion is checked
// against what was sent (each field of its token, an outstanding
// slice, its bytes), and what breaks the contract is dropped and counted
// per lane (Verdict, Lane.Violations), for the supervisor to judge.
//
// It also keeps "ended" honest: a task canceled or timed out while slices
// of it are out is held, not ended (Batch.Finish), until every slice is
// back or its plugin is gone (FailTransport, Release); the tracker counts
// held tasks (Held, HeldBy) for the supervisor's grace rule and tells the
// engine of each (Hook.Held) so that the plugin is asked to abort them.
//
// Freed batches keep their task storage for later ones of their size
// class (SizeClass, ClassPools), so that a warm engine's batches pay no
// page faults or zeroing of fresh memory; a run of tasks is reserved with
// one call (Batch.ReserveRun), not one lock and publication per task.
//
// Locks, and their order. A goroutine may take a later lock of this list
// while holding an earlier one, never the reverse, and holds none of
// them across a wait (a credit wait, a full ring, a sleep), a plugin
// call or a stage of the request path:
//
//  1. Lane.mu, the producer side (Begin..End): held while one request's
//     slices are put; a Put that finds the ring full waits for room
//     with it held, bounded by the task's end and the lane's (Put's
//     loop looks at both), and a credit wait gives it back first
//     (the engine's creditState.take).
//  2. Batch.mu: Add against itself.
//  3. Tracker.live: read-held while one completion is applied (Poll,
//     Apply) or a walk looks at the live batches (Each, Pin's lookup),
//     write-held by Free alone. Its read side is taken again by a lane
//     poll inside a credit wait, so nobody may keep it across a stage:
//     a goroutine that works on a task outside a caller's call (a
//     failover, a QoS resume) pins the batch instead (Tracker.Pin,
//     PinBatch, Unpin), and Free hands a pinned batch back to the pool
//     at its last Unpin.
//  4. Task.noting (a task's reporting), Lane.reapMu and Lane.wmu, each
//     taken alone and briefly; Tracker.mu, the free-slot queue, last.
//
// The engine's own locks (host: admission's queue lock, the engine's
// registration lock) come before all of these; none is held across a
// dispatch.
//
// A Lane closes with its plugin's run (Lane.Close): a submitter or a
// waiter that took it from the run before then finds it closed (Put
// fails with ErrLaneDown, Poll and WaitOn find nothing) and never
// touches its unmapped rings.
//
// It does not choose transports, validate addresses, size slices or
// decide failover (host/selector, host/validate, host/slicer and
// host/failover do), and it never touches payload bytes. Submission and
// completion allocate nothing per request, watched or not.
package progress
