// Package rails decides which rail carries each slice of a transfer and
// keeps each rail's health.
//
// It owns two state machines. The Sprayer sends each slice to the rail with
// the lowest expected finish time, (bytes in flight on the rail + slice) /
// the rail's learnt bandwidth, times a penalty when the rail sits on another
// NUMA node than the request's memory; a small deterministic share of picks
// probes rails that have been idle so that a recovered rail is noticed. It
// learns each rail's bandwidth from completions (an exponentially weighted
// moving average of bytes over busy time, each sample weighed by the busy
// time it spans, so that parallel connections and jittered reaps cutting
// the same time into short samples do not make it swing) and keeps
// per-rail statistics.
// The Monitor pauses a rail that fails too often within a window, for a
// cooldown that doubles on each new trip up to a cap, and restores it when
// the cooldown ends or a probe succeeds.
//
// The Sprayer and Monitor are pure: plain data in, plain data out. They
// do no I/O, read no clock and know nothing of plugins, rings, slicing or
// tasks; the caller passes the time of every event and says what was sent
// and what completed, and serialises calls. Pick, Sent and Done allocate
// nothing.
//
// The Set is what the engine holds, one per transport: the rails built
// from the plugin's probe, the configuration's rail blocks and the
// policies' rail lists, with a Sprayer behind a lock, each rail's queue of
// send times (completions carry none), a lock-free path for a transport of
// one rail, and Reaped, which feeds completions back (through the
// engine's progress.Hook, for the lanes its plugin run owns). It is safe
// for concurrent use; its clock is the caller's on the pick path and
// time.Now when completions are reaped. Pick and Reaped allocate nothing
// once a rail's queue has grown. It must not start goroutines, do I/O or
// import package host.
package rails
