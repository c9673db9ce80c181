package host_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host"
)

// stallAfter is how many descriptors the stalling fault plugin carries
// before its lane goroutine blocks for good: with 1 MiB slices, a 16 MiB
// write stalls it half-way and a 1 MiB one fits under it.
const stallAfter = 8

// superviseEngine starts an engine whose only transport is the fault
// plugin with the given fault block, supervised with a stall window of
// stallWindow, a 300ms probe timeout and a look every 50ms, so that the
// tests do not wait for the defaults.
func superviseEngine(t *testing.T, name, fault, stallWindow string) *host.Engine {
	t.Helper()
	return faultEngine(t, name, fault, fmt.Sprintf(`supervise {
  stall_after   = %q
  probe_timeout = "300ms"
  interval      = "50ms"
}`, stallWindow))
}

// TestStallDetectedKilledAndRestarted stalls the fault plugin in the
// middle of a write with a deadline: that task ends TIMEOUT at its
// deadline; the stall is found (work outstanding, no completion, the NOP
// probe unanswered), the plugin is killed and restarted, a task without
// a deadline ends FAILED with the stall as its reason, and a later write
// goes through the new process with its bytes verified by the peer.
func TestStallDetectedKilledAndRestarted(t *testing.T) {
	const span = 16 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := superviseEngine(t, "st-a", fmt.Sprintf("fault \"stall\" {\n      after = %d\n    }", stallAfter), "1s")
	b, seg := failoverSegment(t, ctx, a, "st-b", span)
	remote := b.Ready.Buffers[0].Base
	local := randomLocal(t, ctx, a, span)
	first := pluginStatus(a, "fault")
	if first.State != "running" || first.PID == 0 || first.Stalls != 0 || first.Outstanding != 0 {
		t.Fatalf("before: %+v", first)
	}

	// Two batches go out together, before anything stalls: a write the
	// plugin stalls under, with a deadline, and behind it on the ring a
	// write without one.
	const patience = 700 * time.Millisecond
	withDeadline, err := a.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	without, err := a.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(patience)
	if err := a.Submit(withDeadline, host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: remote, Deadline: deadline}); err != nil {
		t.Fatal(err)
	}
	if err := a.Submit(without, host.Request{Op: host.Write, Local: local[:1<<20], Segment: seg.ID, Remote: remote}); err != nil {
		t.Fatal(err)
	}

	// 1. The write with a deadline ends TIMEOUT at its deadline, whatever
	// the plugin does meanwhile.
	if err := a.Wait(ctx, withDeadline); err != nil {
		t.Fatalf("wait: %v", err)
	}
	ended := time.Now()
	st, _ := a.TaskStatus(withDeadline, 0)
	a.FreeBatch(withDeadline)
	if st.State != host.StateTimeout || !errors.Is(st.Err, host.ErrDeadlineExceeded) {
		t.Fatalf("stalled write with a deadline: %v (%v), want TIMEOUT", st.State, st.Err)
	}
	if ended.Before(deadline) {
		t.Fatalf("TIMEOUT reported %v before the deadline", deadline.Sub(ended))
	}
	t.Logf("TIMEOUT %v after the deadline, %d of %d bytes done", ended.Sub(deadline), st.Bytes, span)

	// 2. The write without a deadline is failed over when the stalled
	// plugin is killed: its second attempt runs on the restarted plugin
	// (1 MiB fits under the new run's stall) and completes.
	if err := a.Wait(ctx, without); err != nil {
		t.Fatalf("wait for the task on the stalled plugin: %v", err)
	}
	st, _ = a.TaskStatus(without, 0)
	a.FreeBatch(without)
	if st.State != host.StateCompleted || st.Attempts != 2 {
		t.Fatalf("task on the stalled plugin: %v after %d attempts (%v), want COMPLETED on the second", st.State, st.Attempts, st.Err)
	}
	b.holds(t, "failed-over write", local[:1<<20])

	// 3. The plugin runs again, in a new process, and says what happened.
	var now host.PluginStatus
	for limit := time.Now().Add(time.Minute); ; {
		now = pluginStatus(a, "fault")
		if now.State == "running" && now.Restarts >= 1 {
			break
		}
		if time.Now().After(limit) {
			t.Fatalf("plugin not back within a minute: %+v", now)
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
	if now.Stalls != 1 || now.PID == first.PID || now.PID == 0 ||
		!strings.HasPrefix(now.LastExit, "stalled: no completion for ") || !strings.Contains(now.LastExit, "descriptors outstanding; liveness probe unanswered (NOP on lane 0") {
		t.Fatalf("after the restart: %+v (first pid %d)", now, first.PID)
	}
	t.Logf("restarted: pid %d -> %d; last exit: %s", first.PID, now.PID, now.LastExit)

	// 4. A write that fits under the new run's stall goes through it.
	small := local[:1<<20]
	rand.Read(small)
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: small, Segment: seg.ID, Remote: remote}); err != nil {
		t.Fatalf("write over the restarted plugin: %v", err)
	}
	b.holds(t, "after the restart", small)
	after := pluginStatus(a, "fault")
	if after.Counters["descriptors"] == 0 || after.Outstanding != 0 || after.Stalls != 1 || after.PID != now.PID {
		t.Fatalf("after the write: %+v", after)
	}
}

// TestSlowPluginIsNotKilled: a plugin that holds its completions back
// longer than the stall window, but still drains its ring and answers
// the probes, is left alone: the write completes and nothing restarts.
func TestSlowPluginIsNotKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := superviseEngine(t, "slow-a", "fault \"delay\" {\n      delay = \"2s\"\n    }", "400ms")
	b, seg := failoverSegment(t, ctx, a, "slow-b", 1<<20)
	local := randomLocal(t, ctx, a, 1<<20)
	pid := pluginStatus(a, "fault").PID
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: b.Ready.Buffers[0].Base}); err != nil {
		t.Fatalf("write through a slow plugin: %v", err)
	}
	b.holds(t, "the write", local)
	st := pluginStatus(a, "fault")
	if st.State != "running" || st.Stalls != 0 || st.Restarts != 0 || st.PID != pid || st.Counters["delayed"] == 0 {
		t.Fatalf("slow plugin: %+v (pid before %d)", st, pid)
	}
}
