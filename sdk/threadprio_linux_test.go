//go:build linux

package sdk

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// threadNice reads thread tid's niceness from /proc (field 19 of stat).
func threadNice(t *testing.T, tid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if err != nil {
		t.Fatal(err)
	}
	// The command name (field 2) may hold spaces: count after its ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	n, err := strconv.Atoi(f[19-3])
	if err != nil {
		t.Fatalf("stat of thread %d: %v", tid, err)
	}
	return n
}

func TestLowerThread(t *testing.T) {
	type seen struct{ tid, during, after, other int }
	got := make(chan seen)
	go func() {
		restore, err := LowerThread(7)
		if err != nil {
			t.Error(err)
		}
		s := seen{tid: unix.Gettid()}
		s.during = threadNice(t, s.tid)
		// Another goroutine meanwhile runs on another thread, at the
		// process's niceness.
		other := make(chan int)
		go func() { other <- threadNice(t, unix.Gettid()) }()
		s.other = <-other
		restore()
		s.after = threadNice(t, s.tid)
		got <- s
	}()
	s := <-got
	if s.during != 7 {
		t.Errorf("the bulk thread's niceness is %d, want 7", s.during)
	}
	if s.other != 0 {
		t.Errorf("another goroutine's thread has niceness %d while the bulk thread runs, want 0", s.other)
	}
	// Lowering it again needs CAP_SYS_NICE; without it the thread stays
	// locked and ends with the goroutine, so nothing else runs on it.
	if caps := canRenice(); caps && s.after != 0 {
		t.Errorf("after restore the thread's niceness is %d, want 0", s.after)
	}
}

func TestLowerThreadOffAndAlreadyNice(t *testing.T) {
	restore, err := LowerThread(0)
	if err != nil {
		t.Fatal(err)
	}
	restore()
	done := make(chan int)
	go func() {
		first, err := LowerThread(12)
		if err != nil {
			t.Error(err)
		}
		second, err := LowerThread(5) // already nicer: left at 12
		if err != nil {
			t.Error(err)
		}
		n := threadNice(t, unix.Gettid())
		second()
		first()
		done <- n
	}()
	if n := <-done; n != 12 {
		t.Errorf("a thread at 12 asked for 5 is at %d, want 12", n)
	}
}

// canRenice reports whether this process may lower a niceness it raised.
func canRenice() bool {
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NICE, &lim) == nil && lim.Cur >= 20 {
		return true
	}
	return os.Geteuid() == 0
}

// TestNiceThreadsCapTheirPs: each nice thread adds a P, but never more
// than runtime.NumCPU() in all, and the Ps are given back as the threads
// are restored.
func TestNiceThreadsCapTheirPs(t *testing.T) {
	base := runtime.GOMAXPROCS(0)
	n := runtime.NumCPU() + 3
	lowered := make(chan struct{})
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			restore, err := LowerThread(3)
			if err != nil {
				t.Error(err)
			}
			lowered <- struct{}{}
			<-release
			restore()
		}()
	}
	for range n {
		<-lowered
	}
	if got, most := runtime.GOMAXPROCS(0), base+runtime.NumCPU(); got != most {
		t.Errorf("with %d nice threads GOMAXPROCS is %d, want %d (base %d plus one per CPU at most)", n, got, most, base)
	}
	close(release)
	wg.Wait()
	if got := runtime.GOMAXPROCS(0); got != base {
		t.Errorf("after every nice thread was restored GOMAXPROCS is %d, want %d", got, base)
	}
}

// threadSlice reads thread tid's scheduler slice (sched_attr's runtime).
func threadSlice(t *testing.T, tid int) uint64 {
	t.Helper()
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		t.Fatal(err)
	}
	return a.Runtime
}

// TestLowerThreadSlice: after RequestSlice(LatencySlice), a thread that
// LowerThread makes nice has BulkSlice while it is nice and LatencySlice
// again after restore. A kernel without custom slices (before 6.12)
// answers the slice it always has, which the test cannot tell apart.
func TestLowerThreadSlice(t *testing.T) {
	if err := RequestSlice(LatencySlice); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = RequestSlice(0) })
	runtime.LockOSThread()
	probe := threadSlice(t, unix.Gettid())
	runtime.UnlockOSThread()
	if probe != uint64(LatencySlice) {
		t.Skipf("the kernel answers a slice of %d ns after asking %v: no custom slices here", probe, LatencySlice)
	}
	type seen struct {
		tid           int
		during, after uint64
	}
	got := make(chan seen)
	go func() {
		restore, err := LowerThread(5)
		if err != nil {
			t.Error(err)
		}
		s := seen{tid: unix.Gettid()}
		s.during = threadSlice(t, s.tid)
		restore()
		s.after = threadSlice(t, s.tid)
		got <- s
	}()
	s := <-got
	if s.during != uint64(BulkSlice) {
		t.Errorf("the nice thread's slice is %d ns, want %v", s.during, BulkSlice)
	}
	if s.after != uint64(LatencySlice) {
		t.Errorf("after restore the thread's slice is %d ns, want %v", s.after, LatencySlice)
	}
}

// TestLatencyThread: a latency thread keeps its niceness, has
// LatencySlice (where the kernel has custom slices) and one more P while
// it lasts, and its old slice and GOMAXPROCS again after restore.
func TestLatencyThread(t *testing.T) {
	base := runtime.GOMAXPROCS(0)
	type seen struct {
		tid, nice     int
		procs         int
		before        uint64
		during, after uint64
	}
	got := make(chan seen)
	go func() {
		runtime.LockOSThread() // read the slice before, on the same thread
		s := seen{tid: unix.Gettid()}
		s.before = threadSlice(t, s.tid)
		restore := LatencyThread()
		s.nice = threadNice(t, s.tid)
		s.procs = runtime.GOMAXPROCS(0)
		s.during = threadSlice(t, s.tid)
		restore()
		s.after = threadSlice(t, s.tid)
		runtime.UnlockOSThread()
		got <- s
	}()
	s := <-got
	if s.nice != 0 {
		t.Errorf("the latency thread's niceness is %d, want 0 (the process's)", s.nice)
	}
	if s.procs != base+1 {
		t.Errorf("with a latency thread GOMAXPROCS is %d, want %d", s.procs, base+1)
	}
	if got := runtime.GOMAXPROCS(0); got != base {
		t.Errorf("after restore GOMAXPROCS is %d, want %d", got, base)
	}
	if s.after != s.before {
		t.Errorf("after restore the thread's slice is %d ns, want its old %d", s.after, s.before)
	}
	if s.during != uint64(LatencySlice) && s.during == s.before {
		t.Skipf("the kernel kept a slice of %d ns after asking %v: no custom slices here", s.during, LatencySlice)
	}
	if s.during != uint64(LatencySlice) {
		t.Errorf("the latency thread's slice is %d ns, want %v", s.during, LatencySlice)
	}
}
