package host_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host"
)

// The tests of "ended" (issue 11, item 4): a task reported TIMEOUT or
// CANCELED is one no plugin still touches. The initiator's only
// transport is the fault plugin holding every descriptor for a while
// before TCP carries it: a slow path, like a slowed peer, whose memory
// is touched late. Each test ends tasks while their slices are held,
// reuses their buffers as an application does, and checks that nothing
// changes them afterwards: it waits until the plugin says every held
// descriptor completed (counter held_done), then compares.

// endedEngine starts an initiator whose fault plugin holds each
// descriptor for hold (abortable says whether Abort takes a held one
// back), supervised with end_grace grace and a look every 50ms, and a
// peer exposing span bytes (zeros) over tcp; it returns them, the
// peer's segment and span bytes of the initiator's memory registered
// local-only.
func endedEngine(t *testing.T, ctx context.Context, name, hold string, abortable bool, grace string, span int) (*host.Engine, *peer, host.Segment, []byte) {
	t.Helper()
	a := faultEngine(t, name+"-a", fmt.Sprintf("fault \"hold\" {\n      delay = %q\n      abort = %v\n    }", hold, abortable),
		fmt.Sprintf("supervise {\n  end_grace = %q\n  interval  = \"50ms\"\n}", grace))
	b, seg := failoverSegment(t, ctx, a, name+"-b", span)
	return a, b, seg, localBuffer(t, ctx, a, span)
}

// waitHeldDone waits until every descriptor the fault plugin held has
// completed (carried late, or aborted): from then on nothing of them
// touches memory, here or at the peer.
func waitHeldDone(t *testing.T, a *host.Engine) host.PluginStatus {
	t.Helper()
	for limit := time.Now().Add(time.Minute); ; {
		st := pluginStatus(a, "fault")
		if st.Counters["held"] > 0 && st.Counters["held_done"] == st.Counters["held"] {
			return st
		}
		if time.Now().After(limit) {
			t.Fatalf("the plugin's held descriptors did not all complete within a minute: %+v", st.Counters)
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
}

// submitOne submits r alone in a batch of one and returns the batch.
func submitOne(t *testing.T, a *host.Engine, r host.Request) host.BatchID {
	t.Helper()
	id, err := a.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Submit(id, r); err != nil {
		t.Fatal(err)
	}
	return id
}

// timesOut runs r by a Transfer whose context ends after 50ms and fails
// the test, naming r as what, unless it ended TIMEOUT.
func timesOut(t *testing.T, ctx context.Context, a *host.Engine, r host.Request, what string) {
	t.Helper()
	tctx, tcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err := a.Transfer(tctx, r)
	tcancel()
	var te *host.TransferError
	if !errors.As(err, &te) || te.State != host.StateTimeout {
		t.Fatalf("%s: %v", what, err)
	}
}

// submitCanceled submits r alone in a batch of one, cancels the batch
// and returns it.
func submitCanceled(t *testing.T, a *host.Engine, r host.Request) host.BatchID {
	t.Helper()
	id := submitOne(t, a, r)
	if err := a.Cancel(id); err != nil {
		t.Fatal(err)
	}
	return id
}

// reuse overwrites buf with the application's own bytes and returns a
// copy of them.
func reuse(buf []byte) []byte {
	rand.Read(buf)
	return bytes.Clone(buf)
}

// TestBufferReuseAfterEndWithAbort: held slices are aborted (the plugin
// implements sdk.Aborter): a read CANCELED, a read TIMEOUT (its Transfer's
// context), a write TIMEOUT and a CancelTask'ed read end without their
// slices ever being carried; the reused buffers never change, the write
// never lands, and the batch's other task completes with its bytes. The
// hold outlasts the test, so only the abort can end these tasks before
// the grace period, which outlasts it too: nothing is killed.
func TestBufferReuseAfterEndWithAbort(t *testing.T) {
	const n = 256 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b, seg, local := endedEngine(t, ctx, "end-abort", "10m", true, "10m", 4*n)
	remote := b.Ready.Buffers[0].Base

	// A read canceled through the batch API.
	id := submitCanceled(t, a, host.Request{Op: host.Read, Local: local[:n], Segment: seg.ID, Remote: remote})
	if err := a.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	if st, _ := a.TaskStatus(id, 0); st.State != host.StateCanceled || !errors.Is(st.Err, host.ErrCanceled) {
		t.Fatalf("canceled read: %+v", st)
	}
	kept := map[string][]byte{"canceled read": reuse(local[:n])}

	// A read whose Transfer's context times out.
	timesOut(t, ctx, a, host.Request{Op: host.Read, Local: local[n : 2*n], Segment: seg.ID, Remote: remote + n}, "timed-out read")
	kept["timed-out read"] = reuse(local[n : 2*n])

	// A write whose Transfer's context times out: it never lands.
	rand.Read(local[2*n : 3*n])
	timesOut(t, ctx, a, host.Request{Op: host.Write, Local: local[2*n : 3*n], Segment: seg.ID, Remote: remote + 2*n}, "timed-out write")
	kept["timed-out write's source"] = reuse(local[2*n : 3*n])

	st := waitHeldDone(t, a)
	if st.Counters["held_aborted"] != st.Counters["held"] || st.Stalls != 0 || st.Restarts != 0 {
		t.Fatalf("want every held descriptor aborted and nothing killed: %+v", st)
	}
	for what, want := range kept {
		off := map[string]int{"canceled read": 0, "timed-out read": n, "timed-out write's source": 2 * n}[what]
		if !bytes.Equal(local[off:off+n], want) {
			t.Errorf("%s: its buffer changed after the task ended and the application reused it", what)
		}
	}
	if got, want := b.ask(t, "sha256 %d %d", 2*n, n), sum(make([]byte, n)); got != want {
		t.Errorf("the write reported TIMEOUT landed at the peer (sha256 %s, want the zeros' %s)", got, want)
	}
}

// TestBufferReuseAfterEndWithoutAbort: where the plugin cannot abort
// (abort = false), the host waits for the held slice: the task reads
// PENDING until the plugin completed it, then CANCELED or TIMEOUT; by
// then nothing touches its buffer, and a write "reported TIMEOUT" has
// landed whole (the documented "it may have landed").
func TestBufferReuseAfterEndWithoutAbort(t *testing.T) {
	const n = 256 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b, seg, local := endedEngine(t, ctx, "end-wait", "300ms", false, "1m", 2*n)
	remote := b.Ready.Buffers[0].Base

	id := submitCanceled(t, a, host.Request{Op: host.Read, Local: local[:n], Segment: seg.ID, Remote: remote})
	if st, _ := a.TaskStatus(id, 0); st.State != host.StatePending && st.State != host.StateCanceled {
		t.Fatalf("canceled read with its slice held: %v", st.State)
	}
	if err := a.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	st, _ := a.TaskStatus(id, 0)
	if c := pluginStatus(a, "fault").Counters; st.State != host.StateCanceled || c["held_done"] != c["held"] {
		t.Fatalf("read reported %v while the plugin had completed %d of its %d held descriptors", st.State, c["held_done"], c["held"])
	}
	read := reuse(local[:n])

	rand.Read(local[n:])
	sent := bytes.Clone(local[n:])
	timesOut(t, ctx, a, host.Request{Op: host.Write, Local: local[n:], Segment: seg.ID, Remote: remote + n}, "timed-out write")
	if c := pluginStatus(a, "fault").Counters; c["held_done"] != c["held"] {
		t.Fatalf("write reported TIMEOUT while the plugin had completed %d of its %d held descriptors", c["held_done"], c["held"])
	}
	written := reuse(local[n:])

	if s := waitHeldDone(t, a); s.Counters["held_aborted"] != 0 || s.Stalls != 0 {
		t.Fatalf("abort = false: %+v", s)
	}
	if !bytes.Equal(local[:n], read) || !bytes.Equal(local[n:], written) {
		t.Fatal("a buffer changed after its task ended and the application reused it")
	}
	if got, want := b.ask(t, "sha256 %d %d", n, n), sum(sent); got != want {
		t.Fatalf("the write that ended TIMEOUT after its slice completed: peer has %s, sent %s", got, want)
	}
}

// TestHeldPastGraceKillsPlugin: a plugin that neither aborts nor
// completes an ended task's slice is killed once it has held it for
// supervise.end_grace; the task then ends CANCELED (nothing touches its
// buffer: the process is gone), Wait returns, and the plugin restarts.
func TestHeldPastGraceKillsPlugin(t *testing.T) {
	const n = 64 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b, seg, local := endedEngine(t, ctx, "end-kill", "10m", false, "300ms", n)
	before := pluginStatus(a, "fault")
	id := submitOne(t, a, host.Request{Op: host.Read, Local: local, Segment: seg.ID, Remote: b.Ready.Buffers[0].Base})
	st, _ := a.TaskStatus(id, 0)
	if st.State != host.StatePending {
		t.Fatalf("read: %+v before it was canceled", st)
	}
	if err := a.CancelTask(id, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	if st, _ := a.TaskStatus(id, 0); st.State != host.StateCanceled {
		t.Fatalf("canceled read held past the grace: %+v", st)
	}
	after := pluginStatus(a, "fault")
	if after.Stalls != before.Stalls+1 || !strings.Contains(after.Reason+after.LastExit, "end_grace") {
		t.Fatalf("the plugin holding the slice was not killed for it: %+v", after)
	}
	waitBack(t, a, "fault", before.Restarts)
}

// TestCancelTask: CancelTask ends the one task CANCELED and leaves the
// batch's others alone (they complete with their bytes); a second cancel,
// or one of a task that completed, changes nothing; unknown tasks and
// freed batches are clear errors.
func TestCancelTask(t *testing.T) {
	const n = 64 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b, seg, local := endedEngine(t, ctx, "end-one", "200ms", true, "1m", 3*n)
	remote := b.Ready.Buffers[0].Base
	rand.Read(local)
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: remote}); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(local)
	clear(local)

	id, err := a.AllocateBatch(3)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := a.Submit(id, host.Request{Op: host.Read, Local: local[i*n : (i+1)*n], Segment: seg.ID, Remote: remote + uint64(i*n)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.CancelTask(id, 1); err != nil {
		t.Fatal(err)
	}
	if err := a.CancelTask(id, 1); err != nil {
		t.Fatalf("second cancel of a task: %v", err)
	}
	if err := a.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	out := make([]host.TaskStatus, 5)
	k, err := a.TaskStatusList(id, 0, out)
	if err != nil || k != 3 {
		t.Fatalf("TaskStatusList = %d, %v; want 3", k, err)
	}
	for i, st := range out[:k] {
		switch {
		case i == 1 && st.State != host.StateCanceled && st.State != host.StateCompleted:
			t.Fatalf("canceled task: %+v", st)
		case i != 1 && st.State != host.StateCompleted:
			t.Fatalf("task %d, not canceled: %+v", i, st)
		case i != 1 && !bytes.Equal(local[i*n:(i+1)*n], want[i*n:(i+1)*n]):
			t.Fatalf("task %d, not canceled: its bytes differ from the peer's", i)
		}
	}
	if out[1].State != host.StateCanceled {
		t.Logf("task 1 completed before its cancel took")
	}
	if err := a.CancelTask(id, 0); err != nil {
		t.Fatalf("cancel of a completed task: %v", err)
	}
	if st, _ := a.TaskStatus(id, 0); st.State != host.StateCompleted {
		t.Fatalf("a cancel changed a completed task to %v", st.State)
	}
	if k, err := a.TaskStatusList(id, 2, out); err != nil || k != 1 || out[0].State != host.StateCompleted {
		t.Fatalf("TaskStatusList from 2 = %d, %v, %+v", k, err, out[0])
	}

	for _, bad := range []struct {
		i    int
		want string
	}{{-1, "no such task"}, {3, "no such task; the batch holds 3"}} {
		if err := a.CancelTask(id, bad.i); !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("CancelTask(%d) = %v, want ErrInvalid saying %q", bad.i, err, bad.want)
		}
	}
	if _, err := a.TaskStatusList(id, 4, out); !errors.Is(err, host.ErrInvalid) {
		t.Errorf("TaskStatusList from 4 of 3: %v, want ErrInvalid", err)
	}
	if err := a.CancelTask(host.BatchID{}, 0); !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), "zero BatchID") {
		t.Errorf("CancelTask of a zero BatchID: %v", err)
	}
	if err := a.FreeBatch(id); err != nil {
		t.Fatal(err)
	}
	if err := a.CancelTask(id, 0); !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), "freed") {
		t.Errorf("CancelTask of a freed batch: %v, want ErrInvalid saying it was freed", err)
	}
	// The freed batch's record comes back in a new batch: the old ID
	// still names the freed one.
	id2, err := a.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	defer a.FreeBatch(id2)
	if err := a.CancelTask(id, 0); !errors.Is(err, host.ErrInvalid) {
		t.Errorf("CancelTask through a freed ID after reallocation: %v", err)
	}
	if _, err := a.TaskStatus(id, 0); !errors.Is(err, host.ErrInvalid) {
		t.Errorf("TaskStatus of a freed batch: %v", err)
	}
}

// TaskStatusList allocates nothing for pending and completed tasks.
func TestTaskStatusListAllocatesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b, seg, local := endedEngine(t, ctx, "end-list", "1ms", true, "1m", 1<<16)
	id, err := a.AllocateBatch(64)
	if err != nil {
		t.Fatal(err)
	}
	defer a.FreeBatch(id)
	for i := range 64 {
		if err := a.Submit(id, host.Request{Op: host.Read, Local: local[i<<10 : (i+1)<<10], Segment: seg.ID, Remote: b.Ready.Buffers[0].Base}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	out := make([]host.TaskStatus, 64)
	if allocs := testing.AllocsPerRun(100, func() {
		if k, err := a.TaskStatusList(id, 0, out); k != 64 || err != nil {
			panic(fmt.Sprint(k, err))
		}
	}); allocs != 0 {
		t.Fatalf("TaskStatusList of 64 completed tasks allocates %v times", allocs)
	}
	for i, st := range out {
		if st.State != host.StateCompleted {
			t.Fatalf("task %d: %+v", i, st)
		}
	}
}
