package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestProcCtxSwitchesAllThreads: another process's count is the sum over
// its threads, not its main thread's alone, and never more than what
// getrusage says of the whole process.
func TestProcCtxSwitchesAllThreads(t *testing.T) {
	// Threads of this process that block and wake many times: their
	// switches are on them, not on the main thread.
	var slept, done sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		slept.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for range 100 {
				time.Sleep(50 * time.Microsecond)
			}
			slept.Done()
			<-stop // keep the thread, and its count, alive
		}()
	}
	slept.Wait()
	main, err := taskCtxSwitches(filepath.Join("/proc", "self", "status"))
	if err != nil {
		t.Fatal(err)
	}
	all, err := procCtxSwitches(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	self, err := procCtxSwitches(0)
	close(stop)
	done.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if all <= main {
		t.Errorf("sum over threads %d, main thread %d: want the sum to count the sleeping threads too", all, main)
	}
	if all > self {
		t.Errorf("sum over threads %d, getrusage %d: want the threads' sum at most the process total", all, self)
	}
}

// TestCtxCounterGone: a process that exits between the start and the end
// of a window is left out of the figures instead of giving a bogus one.
func TestCtxCounterGone(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := newCtxCounter([]procRef{{name: "engine"}, {name: "plugin:x", pid: cmd.Process.Pid}})
	c.begin()
	if _, ok := c.start["plugin:x"]; !ok {
		t.Fatalf("begin did not read the running child %d", cmd.Process.Pid)
	}
	cmd.Process.Kill()
	cmd.Wait() // reaped: its /proc entry is gone
	c.end()
	got := c.perRequest(10)
	if _, ok := got["plugin:x"]; ok {
		t.Errorf("per-request figures %v: want the exited process left out", got)
	}
	if _, ok := got["engine"]; !ok {
		t.Errorf("per-request figures %v: want the engine's", got)
	}
}

// TestTaskCtxSwitchesMalformed: a status file without the two counters
// is an error, not a zero.
func TestTaskCtxSwitchesMalformed(t *testing.T) {
	p := filepath.Join(t.TempDir(), "status")
	os.WriteFile(p, []byte("Name:\tx\nvoluntary_ctxt_switches:\t3\n"), 0o600)
	if n, err := taskCtxSwitches(p); err == nil {
		t.Errorf("status without nonvoluntary_ctxt_switches: got %d, want an error", n)
	}
	os.WriteFile(p, []byte("voluntary_ctxt_switches:\t3\nnonvoluntary_ctxt_switches:\t4\n"), 0o600)
	if n, err := taskCtxSwitches(p); err != nil || n != 7 {
		t.Errorf("got %d, %v; want 7", n, err)
	}
}
