package sdk

// Latency threads. Beside bulk work on nice threads (LowerThread), the
// goroutine that waits for latency-critical input (a transport's reader
// of its high-priority connection) may wait in a blocking system call on
// an OS thread of its own instead of in the Go runtime's poller. Through
// the poller, the arrival of a small frame first wakes whichever thread
// polls (or none: with every P busy, only the scheduler's next look or
// sysmon sees it), which readies the goroutine, which then waits for a P
// and a thread that bulk goroutines hold. A thread blocked in the kernel
// on the socket itself is woken by the arrival directly; it still needs a
// P to run Go code on return, so a latency thread brings one, like a nice
// thread does (GOMAXPROCS one more while it lasts, under the same cap),
// and asks the kernel for a short scheduler slice (LatencySlice) so that
// its wakeup preempts a running thread with a longer one.

// LatencyThread locks the calling goroutine to its OS thread, asks a
// scheduler slice of LatencySlice for that thread (Linux 6.12 on; the
// thread's niceness is left as it is) and raises GOMAXPROCS by one (at
// most runtime.NumCPU() more in all, counted with the nice threads). The
// goroutine calls restore (deferred) before it returns: it puts the old
// slice and GOMAXPROCS back and unlocks the goroutine. Elsewhere than
// Linux it locks and adds the P only.
func LatencyThread() (restore func()) { return latencyThread() }
