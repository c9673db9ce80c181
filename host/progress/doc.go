// Package progress owns the transfer path after validation: the host side
// of each plugin lane (submission and completion rings), publishing a
// task's slices as the slicer planned them, reaping completions, and
// folding slice outcomes into per-task and per-batch state with exactly
// one terminal state per task. A Watcher (the engine's observer) is told
// of each attempt's settling and each task's end, with the time a lane's
// poller read once for the run of completions it reaped (Clock), so that
// the engine's metrics read no clock per task; a RunWatcher (the
// engine's meter) counts a run's ends in a tally of the lane's Run and
// publishes it once per run (Tracker.ApplyRun, FlushRun). It holds
// plugins to the completion contract: every completion is checked
// against what was sent (each field of its token, an outstanding
// slice, its bytes), and what breaks the contract is dropped and counted
// per lane (Verdict, Lane.Violations), for the supervisor to judge.
//
// It also keeps "ended" honest: a task canceled or timed out while slices
// of it are out is held, not ended (Batch.Finish), until every slice is
// back or its plugin is gone (FailTransport, Release); the tracker counts
// held tasks (Held, HeldBy) for the supervisor's grace rule and tells the
// engine of each (OnHold) so that the plugin is asked to abort them.
//
// Freed batches keep their task storage for later ones of their size
// class (SizeClass, ClassPools), so that a warm engine's batches pay no
// page faults or zeroing of fresh memory; a run of tasks is reserved with
// one call (Batch.ReserveRun), not one lock and publication per task.
//
// It does not choose transports, validate addresses, size slices or
// decide failover (host/selector, host/validate, host/slicer and
// host/failover do), and it never touches payload bytes. Submission and
// completion allocate nothing per request, watched or not.
package progress
