package host

// WithLockedCallers says that the goroutines calling the engine's
// blocking calls (Transfer, Wait) are locked to their OS threads, as
// every call from C into Go is (the C ABI, and through it Python). A
// waiter then spins without runtime.Gosched, which on a locked thread
// hands the thread's P away and back on every look and made a 4 KiB
// transfer cost several context switches; its spin is bounded by the
// waiting budgets, like any other. Go callers leave it off: for them
// Gosched lets the engine's own goroutines run.
func WithLockedCallers() Option { return func(o *options) { o.locked = true } }
