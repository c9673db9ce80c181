// Package failover decides what happens to a task whose attempt failed:
// try it again on another rail of the same transport, on the next
// transport of the plan, wait for a restarting transport to come back,
// or fail it with its cause. It answers "where does failover decide".
//
// The rules. A failed attempt is taken for failover (Take) only while
// the task has attempts left and when another attempt could fix it: its
// plugin died or refused the slices, or a slice came back with a status
// that blames the path (peer unreachable over a network, I/O, a timeout
// in the plugin, a protocol error) or the target as the transport reaches
// it (Classify: a region not registered, a peer not opened or shut down
// under the slice, a same-machine peer unreachable: the target's plugin
// restarting, or this engine re-opening the peer at its new endpoint).
// Then (Decide):
//
//   - a path fault is retried on another rail of the same transport,
//     keeping off every rail that failed the task, while one is left;
//   - a target fault, while the segment's descriptor is the one the
//     attempt was sent against, goes to a transport of the plan not
//     tried yet; pinned, or with none left, it waits for the target's
//     next descriptor (a restarted plugin's engine publishes once the
//     plugin has its registrations back), bounded like any wait, and is
//     then retried on the same transport;
//   - a task pinned by its request to a transport stays on it: it waits
//     for that transport to come back, and is never moved behind the
//     caller's back;
//   - else the task goes to the first transport of the selector's plan
//     (the request's hint left out) that has not carried it yet; when
//     every one has, to the plan's first once none of them is
//     restarting;
//   - a wait lasts until a transport changes state (or, waiting for the
//     target, until its descriptor changes), bounded by MaxWait
//     from the first wait, by the budget and by the task's deadline;
//   - a retry is sent after a backoff (At): Backoff, doubled for each
//     earlier retry, plus a jitter of up to half drawn by the caller, so
//     that the attempts span a short blip rather than all fall inside
//     it; a backoff that would end past the task's deadline fails it now;
//     a retry after the target moved (TargetFault with TargetMoved: the
//     move was the failure, and this engine has followed it) is sent at
//     once;
//   - the budget (from the first failure) bounds backoffs and waits
//     together: once it is spent, the task fails with its cause.
//
// The package is pure: a decision is a function of plain data and the
// time. It must not sleep, poll, start goroutines or touch plugins; the
// engine gathers the facts, acts on the decision and, for a wait, blocks
// on the plugin set's change signal until it asks again.
package failover
