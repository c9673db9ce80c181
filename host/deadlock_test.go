package host_test

import (
	"context"
	"os"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
)

// dropEngine starts an engine with no metastore whose preferred
// transport is the fault plugin dropping every descriptor (StatusIO: a
// path fault, so failover moves the task to tcp), then tcp, with credit
// cr.
func dropEngine(t *testing.T, name string, drop bool, cr config.Credit) *host.Engine {
	t.Helper()
	faults := ""
	if drop {
		faults = "fault \"drop\" {\n    }\n"
	}
	src := faultConfig(name, faults) + `plugin "tcp" {
  config {
    listen = ["127.0.0.1:0"]
  }
}
policy "prefer-fault" {
  transports = ["fault", "tcp"]
}
`
	cfg, err := config.Parse([]byte(src), name+".hcl")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Metastore = config.Metastore{Kind: config.MetastoreNone}
	cfg.QoS.Credit = cr
	e, err := host.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// returnsWithin runs f and fails the test, with every goroutine's stack,
// when it has not returned within bound: a hang, not a slow call.
func returnsWithin(t *testing.T, bound time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(bound):
		pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
		t.Fatalf("%s did not return within %s (stacks above)", what, bound)
	}
}

// TestFailoverCreditWaitDoesNotBlockFreeBatch is the engine-wide
// deadlock found under faults: a failover waits for a receiver's
// credit (the receiver's tcp plugin is stopped, so none comes back)
// while a FreeBatch frees another batch. The failover must hold no lock
// of the tracker across that wait: FreeBatch returns, completions go
// on, and once the receiver runs again every task completes.
func TestFailoverCreditWaitDoesNotBlockFreeBatch(t *testing.T) {
	const n = 4 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := dropEngine(t, "dl-a", true, smallCredit)
	b := dropEngine(t, "dl-b", false, config.Credit{})
	la := localBuffer(t, ctx, a, 3*n)
	copy(la, pattern(3*n, 0, 11))
	lb, rb := remoteBuffer(t, ctx, b, 3*n)
	seg := openByControl(t, a, b)
	// A batch that completes now, to be freed while the failover waits.
	done, err := a.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Submit(done, host.Request{Op: host.Write, Transport: "tcp", Local: la[:4096], Segment: seg.ID, Remote: rb}); err != nil {
		t.Fatal(err)
	}
	if err := a.Wait(ctx, done); err != nil {
		t.Fatal(err)
	}

	resume := stopPlugin(t, b, "tcp")

	// A write that fails on the fault plugin and fails over to tcp, where
	// its first slice takes the receiver's credit (a window below one
	// slice) and the next waits for it in the failover goroutine: the
	// stopped receiver gives none back.
	deadline := time.Now().Add(time.Minute)
	moved, _ := a.AllocateBatch(1)
	if err := a.Submit(moved, host.Request{Op: host.Write, Local: la[n : 2*n], Segment: seg.ID, Remote: rb + n, Deadline: deadline}); err != nil {
		t.Fatal(err)
	}
	waitAttempts(t, a, moved, 2)

	returnsWithin(t, 20*time.Second, "FreeBatch while a failover waits for credit", func() {
		if err := a.FreeBatch(done); err != nil {
			t.Error(err)
		}
	})
	returnsWithin(t, 20*time.Second, "BatchStatus while a failover waits for credit", func() {
		if _, err := a.BatchStatus(moved); err != nil {
			t.Error(err)
		}
	})

	resume()
	returnsWithin(t, time.Minute, "the writes after the receiver resumed", func() {
		if err := a.Wait(ctx, moved); err != nil {
			t.Error(err)
		}
	})
	if ts, _ := a.TaskStatus(moved, 0); ts.State != host.StateCompleted || ts.Attempts < 2 {
		t.Fatalf("the failed-over write: %+v, want COMPLETED on a later attempt", ts)
	}
	a.FreeBatch(moved)
	if string(lb[n:2*n]) != string(la[n:2*n]) {
		t.Fatal("the receiver's bytes differ from what was written")
	}
}

// waitAttempts waits until task 0 of id is on its k-th attempt (a
// failover gave it another), or ended.
func waitAttempts(t *testing.T, a *host.Engine, id host.BatchID, k int) {
	t.Helper()
	until := time.Now().Add(30 * time.Second)
	for {
		ts, err := a.TaskStatus(id, 0)
		if err != nil {
			t.Fatal(err)
		}
		if ts.Attempts >= k {
			return
		}
		if ts.State != host.StatePending || time.Now().After(until) {
			t.Fatalf("task %+v, want a failover to attempt %d", ts, k)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
