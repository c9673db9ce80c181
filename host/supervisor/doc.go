// Package supervisor owns the lives of the engine's plugin processes: it
// launches a run of each plugin (loader.Start, Probe, Start, lanes
// attached and stamped with the run's generation), watches the process
// for exit and its lanes for a stall (deciding with host/stall, killing a
// stalled run, and one that holds slices of ended tasks past EndGrace,
// as host/stall's Overdue says) and for completions that break the
// contract (Contract: logging them, killing a faulty run) and for a ring
// the plugin broke (an impossible index: killed at once as faulty),
// restarts a plugin that went down with backoff, and keeps
// each plugin's status (state, restarts, stalls, faulty runs, contract
// violations, last exit, last error) for Engine.Status (Peek: without
// asking the plugin). Set.Changed tells a waiter that some plugin went up
// or down without polling. A run's resources end with it: once its
// process is down the watcher releases the process (client, pidfd, fd
// socket) and closes its lanes (reapers stopped, rings unmapped, memfds
// closed), so that restarts leave no descriptor or goroutine behind.
// Upgrade replaces a running plugin's binary live: a new run beside the
// current one, replayed and committed, then the old run drained and
// stopped as a retired run (upgrade.go has who does what).
//
// What the engine does around a run (build the lanes' observer, fail the
// dead run's tasks, re-register memory and re-open peers, republish its
// descriptor) reaches it through Hooks; this package must not know about
// tasks, rails, segments or descriptors. The decisions (Backoff, Next)
// and the Contract's window are pure and tested on plain data and a simulated clock; processes are
// only touched at the edges (launch, watch, supervise).
package supervisor
