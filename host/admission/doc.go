// Package admission decides when a validated request may go on: now,
// later, or never. It is the seam that quality of service (priorities,
// deadline promotion, per-tenant budgets, receiver credit) fills; today
// only the pass-through Now is built, and the engine asks it for every
// request.
//
// An Admitter is a pure decider: plain facts of the request and the time
// in, a verdict out. It must not block, start goroutines, do I/O or
// allocate per request; queuing a deferred request is the engine's work
// once Later is acted on.
package admission
