// Package observetest is an observe.Observer for tests: it records every
// event and checks the invariants every run must keep (each task ends
// exactly once, stages in order, each at most once per attempt).
//
// It is for tests only: it keeps every event in memory and takes a lock
// per event.
package observetest
