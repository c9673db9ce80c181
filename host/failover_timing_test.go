package host_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host"
)

// faultEngine starts an engine whose only transport is the fault plugin
// (wrapping tcp) with the given fault blocks (faultConfig), and with the
// given extra top-level HCL (a transfer or supervise block).
func faultEngine(t *testing.T, name, faults, extra string) *host.Engine {
	t.Helper()
	return hclEngine(t, context.Background(), faultConfig(name, faults)+extra+"\n", name+".hcl")
}

// noDeadline is a context without a deadline, as `ferry bench` submits
// with, canceled after 30 s so that a task that waits for ever fails the
// test as CANCELED instead of hanging it.
func noDeadline(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stop := time.AfterFunc(30*time.Second, cancel)
	t.Cleanup(func() { stop.Stop(); cancel() })
	return ctx
}

// TestDefaultDeadlineEndsAStalledTask: a request without a deadline on a
// plugin that stalls (stall detection off, so nothing else ends it) ends
// TIMEOUT at transfer.default_deadline, and its error names that setting.
// Before default_deadline it waited until the caller gave up.
func TestDefaultDeadlineEndsAStalledTask(t *testing.T) {
	const span = 4 << 20
	ctx := noDeadline(t)
	a := faultEngine(t, "dd-a", "fault \"stall\" {}", `transfer {
  default_deadline = "1s"
}
supervise {
  stall_after = "0s"
}`)
	b, seg := failoverSegment(t, ctx, a, "dd-b", span)
	local := randomLocal(t, ctx, a, span)
	err := a.Transfer(ctx, host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: b.Ready.Buffers[0].Base, Transport: "fault"})
	var te *host.TransferError
	if !errors.Is(err, host.ErrDeadlineExceeded) || !errors.As(err, &te) || te.State != host.StateTimeout {
		t.Fatalf("write on a stalled plugin with no deadline: %v; want TIMEOUT from the default deadline", err)
	}
	if !strings.Contains(err.Error(), "default_deadline") {
		t.Fatalf("error %q does not name transfer.default_deadline", err)
	}
	t.Logf("ended as expected: %v", err)
}

// TestPinnedTransportWaitsForRestart kills the plugin a request pins and
// submits the request while the plugin is being restarted: the task waits
// for the new run (within the retry budget) and completes over it, with
// every byte verified by the peer, in its second attempt. Before, it ended
// INVALID ("transport unavailable") at once.
func TestPinnedTransportWaitsForRestart(t *testing.T) {
	const span = 4 << 20
	ctx := noDeadline(t)
	a := faultEngine(t, "pin-a", "", "")
	b, seg := failoverSegment(t, ctx, a, "pin-b", span)
	local := randomLocal(t, ctx, a, span)
	id, err := a.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	defer a.FreeBatch(id)

	pid := host.PluginPID(a, "fault")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the fault plugin (pid %d): %v", pid, err)
	}
	// The engine sees the exit, then restarts the plugin after its
	// restart backoff (100 ms at least): submit inside that window.
	bound := time.Now().Add(10 * time.Second)
	for pluginStatus(a, "fault").State == "running" {
		if time.Now().After(bound) {
			t.Fatalf("the engine did not see the fault plugin's death within 10s: %+v", pluginStatus(a, "fault"))
		}
		time.Sleep(time.Millisecond)
	}
	if err := a.Submit(id, host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: b.Ready.Buffers[0].Base, Transport: "fault"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	st, err := a.TaskStatus(id, 0)
	if err != nil || st.State != host.StateCompleted || st.Bytes != span {
		t.Fatalf("write pinned to a restarting plugin: %+v, %v; want COMPLETED with %d bytes", st, err, span)
	}
	if st.Attempts != 2 {
		t.Fatalf("write pinned to a restarting plugin took %d attempts, want 2 (the wait, then the new run)", st.Attempts)
	}
	b.holds(t, "the write", local)
	if r := pluginStatus(a, "fault").Restarts; r < 1 {
		t.Fatalf("fault plugin restarts %d, want at least 1", r)
	}
}

// TestRetriesBackOff: on a transport that drops every descriptor as peer
// unreachable, a task's three attempts are paced by transfer.retry_backoff
// (200 ms, then 400 ms, plus jitter), so that they span a blip shorter
// than that instead of all falling inside it; the task ends FAILED with
// the drop's cause once its attempts are used. Before, the attempts ran
// back to back, within milliseconds.
func TestRetriesBackOff(t *testing.T) {
	const span = 64 << 10 // one slice: one descriptor per attempt
	ctx := noDeadline(t)
	a := faultEngine(t, "bo-a", "fault \"drop\" {\n      status = \"peer_unreachable\"\n    }", `transfer {
  retry_backoff = "200ms"
}`)
	b, seg := failoverSegment(t, ctx, a, "bo-b", span)
	local := randomLocal(t, ctx, a, span)
	start := time.Now()
	err := a.Transfer(ctx, host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: b.Ready.Buffers[0].Base})
	took := time.Since(start)
	var te *host.TransferError
	if !errors.Is(err, host.ErrTransportUnavailable) || !errors.As(err, &te) || te.State != host.StateFailed || !strings.Contains(err.Error(), "after 3 attempts") {
		t.Fatalf("write on a transport that drops everything: %v; want FAILED, peer unreachable, after 3 attempts", err)
	}
	if least := 600 * time.Millisecond; took < least {
		t.Fatalf("three attempts took %v: the backoffs (200 ms, then 400 ms) were not waited", took)
	}
	if d := pluginStatus(a, "fault").Counters["dropped"]; d != 3 {
		t.Fatalf("fault plugin dropped %d descriptors, want 3 (one per attempt)", d)
	}
	t.Logf("three paced attempts took %v: %v", took, err)
}
