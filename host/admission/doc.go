// Package admission decides when a validated request may go on: now,
// later, or never. It owns quality of service: priority classes, fair
// shares between tenants, budgets, deadline promotion and early
// rejection.
//
// Classes have TENT's meaning and numbering: ClassHigh (0), ClassMedium
// (1), ClassLow (2), a lower number more urgent, as the C ABI passes
// them. Ferry's sdk.Priority numbers differ (PriorityNormal is the zero
// value): PriorityHigh (1) is ClassHigh, PriorityNormal (0) is
// ClassMedium, PriorityLow (2) is ClassLow; ClassOf and Class.Priority
// convert.
//
// An Admitter is a pure decider: plain facts of the request and the time
// in, a verdict out. The Queue holds requests held back, in classes and
// tenants, and says which goes next given the time; the engine owns the
// goroutine that asks it and dispatches. Neither blocks, starts
// goroutines, does I/O, reads the clock or allocates per request: the
// time is always passed in, so tests drive it by hand.
//
// The Queue is the engine's to lock, but for its fast path (fast.go):
// Admit lets a request that nothing binds go, and Release gives back
// what a grant held, with atomics only, safe beside each other and the
// locked methods; the in-flight counts are shared by both paths and
// never overrun.
package admission
