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
// The package is pure: plain data in, plain data out. It must not do I/O,
// start goroutines, read clocks or know about plugins, rings, slicing or
// tasks; the engine passes the time of every event and says what was sent
// and what completed. Nothing is safe for concurrent use: the owner (one
// per transport, under the lock that already serialises its submissions
// and completions) serialises calls. Pick, Sent and Done allocate nothing.
package rails
