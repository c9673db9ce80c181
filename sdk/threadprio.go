package sdk

import (
	"runtime"
	"sync"
	"time"
)

// Bulk threads. On a machine whose cores are busy with bulk copies (a
// 64 MiB write's memcpy, or the kernel's copy through a socket for it),
// the short wakeups of latency-critical work (a HIGH 4 KiB read's lane,
// its completion) wait for a core behind them. A transport runs its bulk
// work on goroutines that call LowerThread first: each is locked to an OS
// thread whose niceness is raised, so the kernel's scheduler gives a
// waking normal thread the core at once and the bulk thread what is left.
// On an idle machine a nice thread runs as fast as any other; the cost
// shows only under load from the host's own process or the application,
// where nice 10 gets a bulk thread about a tenth of a core that a nice 0
// thread also wants (nice 19 about 1.5%, SCHED_IDLE nothing guaranteed:
// that is why the default is a niceness, not SCHED_IDLE).
//
// A nice thread brings its own P (the Go runtime's right to run Go code):
// LowerThread raises GOMAXPROCS by one for as long as the thread is nice.
// Without that, two bulk goroutines on a two-core machine hold both Ps
// while the kernel has their threads waiting, and a goroutine of
// latency-critical work that wakes has no P to run on until one of them
// is preempted or leaves a system call: the niceness then helps little.
// Measured with the tcp plugin's BenchmarkHighBesideBulk on two cores (a
// 4 KiB high-priority read beside eight 1 MiB low writes in flight): p99
// 1.4-2.1 ms with nice threads alone, 77-113 µs with more Ps than cores,
// against 40-70 µs for the read alone.

// Scheduler slices. Under EEVDF (Linux 6.6 on) a thread that wakes
// preempts the running one only once that one has run the slice it asked
// for, counted in virtual time: a nice-10 thread's BulkSlice of 20 ms is
// about 2 ms of real time, during which a woken latency-critical thread
// waits for the core. Every plugin thread therefore asks LatencySlice
// (ServeTransport; a plugin may ask it again with RequestSlice for
// threads it starts otherwise), so that the woken ones have the earliest
// deadlines and a running bulk thread is protected for a few
// microseconds only, while the nice threads themselves keep BulkSlice
// (LowerThread sets it): their bursts are not cut into thousands of
// preemptions, and their own wakeups do not preempt. Measured with
// `ferry bench --qos` over tcp alone on two loaded cores (tcp's bulk_nice
// = 10, these slices for every plugin thread against 20 ms, two
// campaigns of 4 and 6 runs interleaved): the HIGH 4 KiB p99 beside the
// bulk, median of the runs, 4.95 -> 1.80 ms and 2.52 -> 1.79 ms, LOW's
// throughput 1.72 -> 1.61 and 1.44 -> 1.48 GB/s. Beside busy processes
// the short slice helps small requests too (serve.go, pluginSlice).

// LatencySlice is the slice every plugin thread asks for
// (ServeTransport; the kernel's smallest is 100 us).
const LatencySlice = 100 * time.Microsecond

// BulkSlice is the slice of a nice thread (LowerThread): its bursts are
// not cut into thousands of preemptions, and its own wakeups do not
// preempt.
const BulkSlice = 20 * time.Millisecond

// RequestSlice asks the kernel for a scheduler slice of d for every
// thread of this process whose policy is SCHED_NORMAL or SCHED_BATCH;
// threads the runtime starts later inherit it. ServeTransport asks
// LatencySlice this way before the plugin starts; a plugin need not call
// it itself. A d of 0 returns the threads to the kernel's default slice
// (the engine's internal/cpuslice gives its threads back so). Kernels
// before 6.12 ignore it; elsewhere than Linux it does nothing. The error
// names the first thread that refused.
func RequestSlice(d time.Duration) error { return requestSlice(d) }

// DefaultBulkNice is the niceness of bulk threads unless a plugin's
// configuration says otherwise (its bulk_nice setting; 0 turns it off).
const DefaultBulkNice = 10

// MaxNice is the largest niceness Linux knows.
const MaxNice = 19

// LowerThread locks the calling goroutine to its OS thread and raises
// that thread's niceness to nice (1 to MaxNice; 0 or below does nothing
// and returns a restore that does nothing). A thread already at nice or
// above is left as it is. The goroutine calls restore (deferred) before
// it returns, and runs only bulk work in between.
//
// restore puts the old niceness back and unlocks the goroutine. Lowering
// a niceness again needs CAP_SYS_NICE (or RLIMIT_NICE); where that is
// refused the goroutine stays locked, so the Go runtime ends the thread
// with the goroutine instead of giving a nice thread to other work.
// Threads the runtime starts while a locked goroutine runs are cloned
// from its template thread, not from the locked one, so they are not nice.
// While the thread is nice, GOMAXPROCS is one more (see above), at most
// runtime.NumCPU() more in all, and on Linux its scheduler slice is
// BulkSlice (see above), put back by restore.
//
// Elsewhere than Linux it locks and unlocks only. The error says why the
// niceness could not be set; the goroutine is locked either way, and
// restore must still be called.
func LowerThread(nice int) (restore func(), err error) {
	if nice <= 0 {
		return func() {}, nil
	}
	return lowerThread(min(nice, MaxNice))
}

// procs counts the threads that brought a P (nice threads and latency
// threads): each adds one to GOMAXPROCS while it lasts.
var procs struct {
	sync.Mutex
	extra int
}

// addProc changes the extra Ps by d (+1 or -1). GOMAXPROCS stops the
// world for a moment: a nice thread starts and ends with a connection or
// a plugin, not per request. The extra Ps are capped at the number of
// CPUs: a plugin with many peers has two nice threads per bulk
// connection, and Ps past twice the cores buy nothing but a larger
// scheduler and GC to run.
//
// It moves GOMAXPROCS by the change in extra Ps from what it is now, so a
// value the program set meanwhile stands (less the Ps given back). Like
// any call to runtime.GOMAXPROCS, the first raise ends the runtime's own
// updates of GOMAXPROCS (Go 1.25 on: from the CPU affinity and the
// cgroup's quota) for the rest of the process.
func addProc(d int) {
	procs.Lock()
	defer procs.Unlock()
	before := min(procs.extra, runtime.NumCPU())
	procs.extra += d
	if after := min(procs.extra, runtime.NumCPU()); after != before {
		runtime.GOMAXPROCS(max(1, runtime.GOMAXPROCS(0)+after-before))
	}
}
