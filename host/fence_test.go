package host_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
)

// TestEndedWriteNeverLandsAfterANewerOne is the stale write found under
// faults: a write stuck in a stopped target plugin's socket times out,
// the initiator kills its own tcp plugin at end_grace and reports the
// write ended; a newer write to the same range then completes over the
// restarted plugin's new connection; and when the target plugin runs
// again it must not apply the old connection's bytes over the newer
// write. The initiator fences the old run at the target before the newer
// write goes (it waits, and says why while the target cannot answer).
func TestEndedWriteNeverLandsAfterANewerOne(t *testing.T) {
	const n = 8 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Each engine's supervisor kills a plugin that holds an ended task's
	// slices after its end_grace.
	a := loopEngine(t, "fw-a", func(c *config.Config) { c.Supervise.EndGrace = 300 * time.Millisecond })
	b := loopEngine(t, "fw-b", func(c *config.Config) { c.Supervise.EndGrace = 0 })
	la := localBuffer(t, ctx, a, n)
	lb, rb := remoteBuffer(t, ctx, b, n)
	seg := openByControl(t, a, b)
	write := func(seed uint64, deadline time.Duration) (host.BatchID, error) {
		copy(la, pattern(n, 0, seed))
		id, err := a.AllocateBatch(1)
		if err != nil {
			t.Fatal(err)
		}
		err = a.Submit(id, host.Request{Op: host.Write, Transport: "tcp", Local: la, Segment: seg.ID, Remote: rb, Deadline: time.Now().Add(deadline)})
		return id, err
	}
	if id, err := write(1, time.Minute); err != nil || a.Wait(ctx, id) != nil {
		t.Fatalf("first write: %v", err)
	}
	runBefore := pluginStatus(a, "tcp").PID

	resume := stopPlugin(t, b, "tcp")

	// The old write: its bytes wait in the stopped plugin's socket; it
	// times out, its plugin is killed at end_grace and it ends.
	old, err := write(2, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	returnsWithin(t, time.Minute, "the old write's end", func() { a.Wait(ctx, old) })
	if ts, _ := a.TaskStatus(old, 0); ts.State == host.StateCompleted {
		t.Fatalf("the old write completed with its target stopped: %+v", ts)
	}
	if st := pluginStatus(a, "tcp"); st.PID == runBefore {
		t.Fatalf("the initiator's tcp plugin was not killed at end_grace: %+v", st)
	}
	waitRunning(t, a, "tcp")

	// While the target cannot confirm the fence, a newer write waits and
	// says why when its deadline passes.
	early, err := write(3, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	a.Wait(ctx, early)
	ts, _ := a.TaskStatus(early, 0)
	if ts.State != host.StateTimeout || !errors.Is(ts.Err, host.ErrDeadlineExceeded) || !strings.Contains(ts.Err.Error(), "confirm the fence") {
		t.Fatalf("a write while the fence is unconfirmed: %+v, want TIMEOUT saying it waits for the fence", ts)
	}

	// The newest write is submitted while the target is still stopped,
	// and completes once it runs again: after the fence, so that the old
	// connection's bytes, still unread, are never applied over it.
	// (Submit waits at the gate, as it waits for credit: in a goroutine.)
	submitted := make(chan host.BatchID, 1)
	go func() {
		id, err := write(4, time.Minute)
		if err != nil {
			t.Error(err)
		}
		submitted <- id
	}()
	resume()
	var newest host.BatchID
	returnsWithin(t, time.Minute, "the newest write", func() {
		newest = <-submitted
		if err := a.Wait(ctx, newest); err != nil {
			t.Errorf("the newest write: %v", err)
		}
	})
	if ts, _ := a.TaskStatus(newest, 0); ts.State != host.StateCompleted {
		t.Fatalf("the newest write: %+v", ts)
	}
	if got := pluginCounter(t, b, "tcp", "fences"); got == 0 {
		t.Errorf("the target's tcp plugin answered no fence: %v", pluginStatus(b, "tcp").Counters)
	}
	// Whatever the target plugin still had of the old connection is
	// dropped, not applied: read the range back through a fresh
	// connection, after every frame that target had received.
	want := pattern(n, 0, 4)
	for k := 0; k < 3; k++ {
		if !bytes.Equal(lb, want) {
			i := 0
			for i < n && lb[i] == want[i] {
				i++
			}
			t.Fatalf("the target's range holds other bytes than the newest completed write's, from byte %d (the old write's: %v)",
				i, bytes.Equal(lb[i:i+16], pattern(n, 0, 2)[i:i+16]))
		}
		// A read of one byte round-trips through the target plugin, after
		// anything it read before it.
		id, _ := a.AllocateBatch(1)
		if err := a.Submit(id, host.Request{Op: host.Read, Transport: "tcp", Local: la[:1], Segment: seg.ID, Remote: rb}); err != nil {
			t.Fatal(err)
		}
		if err := a.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}
