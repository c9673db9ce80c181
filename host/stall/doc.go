// Package stall decides when a plugin process is stalled: it still runs,
// so no exit is seen, but it has stopped doing the work on its lanes.
//
// A Detector is a pure state machine in the manner of etcd's raft: the
// engine's supervisor feeds it what it sees of the plugin's lanes and the
// answers of its probes, with the time, and acts on the Decision it gets
// back (send a NOP, call the control connection, kill the process). The
// package starts nothing, reads no clock and touches no ring, so every
// rule is tested with a simulated clock.
//
// The rule: a lane with descriptors outstanding and no completion for
// Config.After is suspect; it is then probed (a NOP on the lane, which
// the SDK answers from the goroutine that drains the ring, and a cheap
// call on the plugin's control connection). The plugin is stalled when
// either probe is not answered within Config.ProbeTimeout. A slow plugin
// that answers both is left alone, and suspected again only after another
// Config.After without a completion.
//
// Overdue is the bound on "ended": a task canceled or timed out while a
// plugin held slices of it is reported ended only once the slices are
// back or the plugin is gone, and a run that holds such slices for the
// grace period (supervise.end_grace) is killed like a stalled one.
package stall
