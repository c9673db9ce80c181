package ring

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// blockAtOnce has handed-off sleeps enter the blocking call at once, so
// that the tests put every sleep there.
func blockAtOnce(t *testing.T) {
	old := handoffAfter
	handoffAfter = 0
	t.Cleanup(func() { handoffAfter = old })
}

// TestHandoffSleepsWake: with SetSleepHandoff, sleeps in the blocking
// call end as before: on a publish (Wait, SleepIdle), at their bound
// (Wait), and on Wake.
func TestHandoffSleepsWake(t *testing.T) {
	blockAtOnce(t)
	prod, cons, _ := newPair(t, 8)
	cons.SetSleepHandoff(true)
	for i := range 20 {
		// A publish after the sleeper is past its first 50 us.
		res := make(chan bool)
		go func() { res <- cons.SleepIdle(func() bool { return false }) }()
		untilSet(cons.consSleeping)
		d := request(uint64(i))
		prod.Push(&d)
		select {
		case ok := <-res:
			if !ok {
				t.Fatalf("round %d: SleepIdle did not report the descriptor published", i)
			}
		case <-time.After(wakeLimit):
			t.Fatalf("round %d: a publish did not end a handed-off idle sleep within %v", i, wakeLimit)
		}
		var out [1]Descriptor
		if n := cons.Dequeue(out[:]); n != 1 || out[0].Token != uint64(i) {
			t.Fatalf("round %d: took %d descriptors, token %d", i, n, out[0].Token)
		}
	}
	// A bounded wait returns at its bound, not before, having slept
	// through it: a blocking call that returned at once would have the
	// wait go round its sleep loop again and again.
	start, before := time.Now(), cons.consSleeps.Load()
	if cons.Wait(0, 2*time.Millisecond) {
		t.Fatal("Wait reported a descriptor on an empty ring")
	}
	if took := time.Since(start); took < 2*time.Millisecond {
		t.Fatalf("a 2ms wait returned after %v", took)
	}
	if n := cons.consSleeps.Load() - before; n > 3 {
		t.Fatalf("a 2ms wait went to sleep %d times: the blocking call does not sleep", n)
	}
	// Wake ends a handed-off sleep.
	done := make(chan struct{})
	go func() {
		defer close(done)
		cons.Wait(0, Forever)
	}()
	untilSet(cons.consSleeping)
	cons.Wake()
	select {
	case <-done:
	case <-time.After(wakeLimit):
		t.Fatalf("Wake did not end a handed-off sleep within %v", wakeLimit)
	}
}

// TestHandoffSleepsBesideGC: goroutines asleep in the blocking call have
// their stacks scanned (and the world stopped) by collections meanwhile;
// the frame the call leaves for the runtime must unwind. A bad one
// crashes the process ("unexpected return pc"), so this fails by dying.
// The sleepers then wake and find their own stack values intact.
func TestHandoffSleepsBesideGC(t *testing.T) {
	blockAtOnce(t)
	const sleepers = 8
	var wg sync.WaitGroup
	rings := make([]*Ring, sleepers)
	prods := make([]*Ring, sleepers)
	for i := range rings {
		prods[i], rings[i], _ = newPair(t, 8)
		rings[i].SetSleepHandoff(true)
	}
	var bad atomic.Int32
	for i := range sleepers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := [4]uint64{uint64(i), uint64(i) * 3, uint64(i) * 7, uint64(i) * 11}
			keep := &mine // on the stack across the sleep
			for !rings[i].SleepIdle(func() bool { return false }) {
			}
			if keep[0] != uint64(i) || keep[3] != uint64(i)*11 {
				bad.Add(1)
			}
		}()
	}
	for i := range rings {
		untilSet(rings[i].consSleeping)
	}
	var junk [][]byte
	for range 20 {
		for range 100 {
			junk = append(junk, make([]byte, 4096))
		}
		runtime.GC()
		junk = junk[:0]
	}
	for i := range prods {
		d := request(uint64(i))
		prods[i].Push(&d)
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d sleepers found their stack values changed", bad.Load())
	}
}

// TestBlockingSyscallResults: the blocking call returns what the kernel
// returned, a result in r1 and no errno, or -1 and the errno: its
// assembly reads the arguments and writes the results at the offsets
// its Go declaration has, on each architecture that has one (elsewhere
// it is unix.Syscall6, and this checks that).
func TestBlockingSyscallResults(t *testing.T) {
	r1, _, errno := blockingSyscall6(unix.SYS_GETPID, 0, 0, 0, 0, 0, 0)
	if errno != 0 || int(r1) != os.Getpid() {
		t.Fatalf("getpid: r1 %d, errno %d; want %d, 0", r1, errno, os.Getpid())
	}
	// Six arguments: a futex wait on a word that does not hold the value
	// fails at once with EAGAIN (the timeout, a4, is never reached).
	var word atomic.Uint32
	word.Store(1)
	ts := unix.NsecToTimespec(int64(time.Second))
	r1, _, errno = blockingSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&word)), futexWaitOp, 2, uintptr(unsafe.Pointer(&ts)), 0, 0)
	if unix.Errno(errno) != unix.EAGAIN || r1 != ^uintptr(0) {
		t.Fatalf("futex wait on a changed word: r1 %#x, errno %v; want -1, EAGAIN", r1, unix.Errno(errno))
	}
	// An error from the last argument's call: close of no descriptor.
	r1, _, errno = blockingSyscall6(unix.SYS_CLOSE, ^uintptr(0), 0, 0, 0, 0, 0)
	if unix.Errno(errno) != unix.EBADF || r1 != ^uintptr(0) {
		t.Fatalf("close(-1): r1 %#x, errno %v; want -1, EBADF", r1, unix.Errno(errno))
	}
}
