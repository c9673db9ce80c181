//go:build linux

package progress

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// threadVoluntarySwitches reads the calling thread's voluntary context
// switches (the times it slept) from /proc.
func threadVoluntarySwitches(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no voluntary_ctxt_switches in /proc/thread-self/status")
	return 0
}

// TestWaitOnLockedCallerKeepsItsThread: a waiter whose goroutine is
// locked to its thread (a call from C) spins without runtime.Gosched,
// which on a locked thread hands the P away and sleeps until it comes
// back, on every look. Its thread sleeps only where the wait does (the
// ring's sleep after the spin), a handful of times, not once per look:
// with Gosched the same wait slept 128-148 times here, the fix 1 time.
func TestWaitOnLockedCallerKeepsItsThread(t *testing.T) {
	r := newRig(t)
	r.l.SetSpinSmall(3 * time.Millisecond)
	b, _ := r.t.Allocate(1)
	i := b.Reserve(10, 0)
	b.SetSlices(i, 1) // never sent: the wait spins its whole budget
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := threadVoluntarySwitches(t)
	until := time.Now().Add(4 * time.Millisecond).UnixNano()
	if r.l.WaitOn(r.t, func(int64) bool { return b.Done(Now()) }, nil, until, true, true) {
		t.Fatal("WaitOn reported an unfinished batch done")
	}
	if n := threadVoluntarySwitches(t) - before; n > 20 {
		t.Errorf("the locked waiter's thread slept %d times in a 3 ms spin and a 1 ms wait, want a handful", n)
	}
}
