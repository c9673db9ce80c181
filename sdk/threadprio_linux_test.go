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

// niceOf is threadNice for a thread that may have ended: false then.
func niceOf(tid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	n, err := strconv.Atoi(f[19-3])
	return n, err == nil
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

// TestSliceWalkBesideBulkThreads: RequestSlice's walk over the process's
// threads, run again and again while bulk threads start and end, must
// neither put a nice thread back at the process's niceness nor leave a
// thread nice after its restore. sched_setattr sets a thread's niceness
// with its slice, so a walk that read a thread before LowerThread (or its
// restore) changed it and wrote after did both.
func TestSliceWalkBesideBulkThreads(t *testing.T) {
	if !canRenice() {
		t.Skip("putting a nice thread back needs CAP_SYS_NICE: without it restore keeps the thread locked, and the check below cannot run")
	}
	t.Cleanup(func() { _ = RequestSlice(0) })
	const lowers = 300
	var wg sync.WaitGroup
	var mu sync.Mutex
	var wrongNice []string
	stop := make(chan struct{})
	walked := make(chan int)
	go func() { // the walker, until the bulk threads are done
		n := 0
		for {
			select {
			case <-stop:
				walked <- n
				return
			default:
			}
			if err := RequestSlice(LatencySlice); err != nil {
				t.Error(err)
			}
			n++
		}
	}()
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range lowers {
				restore, err := LowerThread(10)
				if err != nil {
					t.Error(err)
					return
				}
				tid := unix.Gettid()
				for range 20 { // look a few times while the walker runs
					if got := threadNice(t, tid); got != 10 {
						mu.Lock()
						wrongNice = append(wrongNice, fmt.Sprintf("bulk thread %d at nice %d while lowered", tid, got))
						mu.Unlock()
						break
					}
				}
				restore()
			}
		}()
	}
	wg.Wait()
	close(stop)
	if n := <-walked; n == 0 {
		t.Fatal("the walker never walked")
	}
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		tid, _ := strconv.Atoi(e.Name())
		// At this test's niceness: another test's locked thread may
		// still be ending at its own.
		if got, ok := niceOf(tid); ok && got == 10 {
			wrongNice = append(wrongNice, fmt.Sprintf("thread %d left at nice %d after every restore", tid, got))
		}
	}
	if len(wrongNice) > 0 {
		t.Errorf("%d wrong niceness(es), first: %s", len(wrongNice), wrongNice[0])
	}
}

// TestProcsKeepWhatTheProgramSet: a GOMAXPROCS the program sets while
// nice threads hold extra Ps stands when they give them back (less those
// Ps), rather than the value before the first nice thread.
func TestProcsKeepWhatTheProgramSet(t *testing.T) {
	base := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(base) })
	held := make(chan struct{})
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		restore := LatencyThread()
		held <- struct{}{}
		<-release
		restore()
	}()
	<-held
	if got := runtime.GOMAXPROCS(0); got != base+1 {
		t.Fatalf("with a latency thread GOMAXPROCS is %d, want %d", got, base+1)
	}
	runtime.GOMAXPROCS(base + 5) // the program's own setting, the extra P within it
	close(release)
	<-done
	if got := runtime.GOMAXPROCS(0); got != base+4 {
		t.Errorf("after the latency thread ended GOMAXPROCS is %d, want %d: what the program set, less the P given back", got, base+4)
	}
}

// TestHeldSliceThroughAWalk: a nice thread keeps BulkSlice through a
// RequestSlice made while it is nice, and its restore gives it what the
// process asked meanwhile, not the slice it had before.
func TestHeldSliceThroughAWalk(t *testing.T) {
	if err := RequestSlice(0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = RequestSlice(0) })
	type seen struct{ afterWalk, after uint64 }
	walk := make(chan struct{})
	walked := make(chan struct{})
	got := make(chan seen)
	go func() {
		restore, err := LowerThread(5)
		if err != nil {
			t.Error(err)
		}
		tid := unix.Gettid()
		walk <- struct{}{}
		<-walked
		s := seen{afterWalk: threadSlice(t, tid)}
		restore()
		s.after = threadSlice(t, tid)
		got <- s
	}()
	<-walk
	if err := RequestSlice(LatencySlice); err != nil {
		t.Error(err)
	}
	close(walked)
	s := <-got
	if s.after != uint64(LatencySlice) && s.afterWalk != uint64(BulkSlice) {
		t.Skipf("the kernel answers slices of %d and %d ns: no custom slices here", s.afterWalk, s.after)
	}
	if s.afterWalk != uint64(BulkSlice) {
		t.Errorf("after a walk the nice thread's slice is %d ns, want its own %v", s.afterWalk, BulkSlice)
	}
	if s.after != uint64(LatencySlice) {
		t.Errorf("after restore the thread's slice is %d ns, want %v, what the process asked meanwhile", s.after, LatencySlice)
	}
}
