//go:build linux

package sdk

import (
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRequestSlice: every thread of the process gets the slice, and a
// thread's nice value and policy stay as they were.
func TestRequestSlice(t *testing.T) {
	type result struct {
		attr *unix.SchedAttr
		nice int
		err  error
	}
	res := make(chan result)
	go func() {
		// A thread of its own, with a nice value the request must keep;
		// locked and never unlocked, so it ends with the goroutine.
		runtime.LockOSThread()
		tid := unix.Gettid()
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, 7); err != nil {
			res <- result{err: err}
			return
		}
		if err := requestSlice(20 * time.Millisecond); err != nil {
			res <- result{err: err}
			return
		}
		a, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			res <- result{err: err}
			return
		}
		res <- result{attr: a, nice: int(a.Nice)}
	}()
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.attr.Policy != unix.SCHED_NORMAL || r.nice != 7 {
		t.Fatalf("policy %d nice %d after the request, want SCHED_NORMAL (0) and nice 7", r.attr.Policy, r.nice)
	}
	if r.attr.Runtime == 0 {
		t.Skipf("kernel %s reports no custom slice: EEVDF custom slices came with Linux 6.12", kernelRelease())
	}
	if got := time.Duration(r.attr.Runtime); got != 20*time.Millisecond {
		t.Fatalf("slice %v after asking for 20ms", got)
	}
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		tid, _ := strconv.Atoi(e.Name())
		a, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			continue // the thread ended meanwhile
		}
		if got := time.Duration(a.Runtime); got != 20*time.Millisecond {
			t.Errorf("thread %d: slice %v, want 20ms", tid, got)
		}
	}
}

func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return "?"
	}
	return unix.ByteSliceToString(u.Release[:])
}
