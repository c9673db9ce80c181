package host_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host"
)

// contractEngine starts an engine whose only transport is the fault
// plugin breaking the completion contract as fault says, watched every
// 50ms, with the contract rule given (violations within 10s; 0 only
// counts) and attempts tries per task.
func contractEngine(t *testing.T, name, fault string, violations, attempts int) *host.Engine {
	t.Helper()
	return faultEngine(t, name, fault, fmt.Sprintf(`transfer {
  attempts = %d
}
supervise {
  interval            = "50ms"
  contract_violations = %d
  contract_window     = "10s"
}`, attempts, violations))
}

// writeOnce writes local to the peer in one batch of one task and waits
// for it, within ctx: a task left waiting fails the test when ctx ends.
func writeOnce(t *testing.T, ctx context.Context, a *host.Engine, seg host.SegmentID, remote uint64, local []byte) host.TaskStatus {
	t.Helper()
	b, st := writeKept(t, ctx, a, seg, remote, local)
	a.FreeBatch(b)
	return st
}

// writeKept is writeOnce leaving the batch to the caller to free.
func writeKept(t *testing.T, ctx context.Context, a *host.Engine, seg host.SegmentID, remote uint64, local []byte) (host.BatchID, host.TaskStatus) {
	t.Helper()
	b, err := a.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Submit(b, host.Request{Op: host.Write, Local: local, Segment: seg, Remote: remote}); err != nil {
		t.Fatal(err)
	}
	if err := a.Wait(ctx, b); err != nil {
		st, _ := a.TaskStatus(b, 0)
		t.Fatalf("the task waits silently: %v (state %v, %d bytes, plugin %+v)", err, st.State, st.Bytes, pluginStatus(a, "fault"))
	}
	st, _ := a.TaskStatus(b, 0)
	return b, st
}

// TestCompletionContractTokenFlips is the vendor trial's attack: a plugin
// completes each descriptor with a bit of its token flipped (0: the task
// index, 40: the rail, 63: the batch slot). No such completion may end
// the task COMPLETED, and the task must not wait silently: a flip of the
// rail fails the slice at once, and every flip is counted and makes the
// plugin faulty (the rule here is one violation), so that it is killed,
// restarted and the attempt failed over, until the attempts run out.
// Tasks have no deadline: only the host's handling bounds them.
func TestCompletionContractTokenFlips(t *testing.T) {
	for _, bit := range []int{0, 40, 63} {
		t.Run(fmt.Sprintf("bit%d", bit), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			name := fmt.Sprintf("flip%d", bit)
			a := contractEngine(t, name+"-a", fmt.Sprintf("fault \"flip\" {\n      bit = %d\n    }", bit), 1, 2)
			b, seg := failoverSegment(t, ctx, a, name+"-b", 1<<20)
			local := randomLocal(t, ctx, a, 64<<10)
			st := writeOnce(t, ctx, a, seg.ID, b.Ready.Buffers[0].Base, local)
			if st.State != host.StateFailed || st.Err == nil {
				t.Fatalf("write whose completions carry bit %d flipped: %v (%v), want FAILED", bit, st.State, st.Err)
			}
			t.Logf("bit %d: %v after %d attempts: %v", bit, st.State, st.Attempts, st.Err)
			var ps host.PluginStatus
			for limit := time.Now().Add(30 * time.Second); ; {
				ps = pluginStatus(a, "fault")
				if ps.Faulty >= 1 && strings.HasPrefix(ps.LastExit, "faulty: ") {
					break
				}
				if time.Now().After(limit) {
					t.Fatalf("plugin never found faulty: %+v", ps)
				}
				time.Sleep(20 * time.Millisecond) // poll interval
			}
			if ps.UnknownCompletions < 1 || ps.DuplicateCompletions != 0 || ps.OverlongCompletions != 0 {
				t.Fatalf("counters %+v, want unknown completions only", ps)
			}
		})
	}
}

// TestCompletionContractDuplicate: every completion is delivered twice.
// The first is the descriptor's, and the write completes with its bytes
// at the peer; each second one is dropped and counted, and with the rule
// at 0 the plugin keeps running. The batches are kept until the count is
// read: a duplicate that comes after its batch was freed cannot be told
// from a late completion, and is dropped as one, uncounted.
func TestCompletionContractDuplicate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := contractEngine(t, "dup-a", "fault \"duplicate\" {}", 0, 1)
	b, seg := failoverSegment(t, ctx, a, "dup-b", 1<<20)
	const writes = 5
	local := randomLocal(t, ctx, a, 64<<10)
	for range writes {
		bt, st := writeKept(t, ctx, a, seg.ID, b.Ready.Buffers[0].Base, local)
		defer a.FreeBatch(bt)
		if st.State != host.StateCompleted || st.Bytes != uint64(len(local)) {
			t.Fatalf("write completed twice: %v with %d bytes (%v), want COMPLETED with %d", st.State, st.Bytes, st.Err, len(local))
		}
	}
	b.holds(t, "the write", local)
	// The duplicates are reaped after their originals; the count catches
	// up within a look or two.
	var ps host.PluginStatus
	for limit := time.Now().Add(30 * time.Second); ; {
		if ps = pluginStatus(a, "fault"); ps.DuplicateCompletions >= writes || time.Now().After(limit) {
			break
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
	if ps.DuplicateCompletions != writes || ps.UnknownCompletions != 0 || ps.OverlongCompletions != 0 || ps.Faulty != 0 || ps.State != "running" || ps.Outstanding != 0 {
		t.Fatalf("plugin %+v, want %d duplicates counted and still running", ps, writes)
	}
}

// TestCompletionContractOverreport: every completion reports one byte
// more than its slice. The task must not complete on it: each attempt's
// slice fails with a protocol error, and the task ends FAILED when its
// attempts run out, each over-long completion counted.
func TestCompletionContractOverreport(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const attempts = 3
	a := contractEngine(t, "over-a", "fault \"overreport\" {}", 0, attempts)
	b, seg := failoverSegment(t, ctx, a, "over-b", 1<<20)
	local := randomLocal(t, ctx, a, 64<<10)
	st := writeOnce(t, ctx, a, seg.ID, b.Ready.Buffers[0].Base, local)
	if st.State != host.StateFailed || !errors.Is(st.Err, host.ErrPluginFailed) && !strings.Contains(st.Err.Error(), "protocol") {
		t.Fatalf("over-reported write: %v (%v), want FAILED with a protocol error", st.State, st.Err)
	}
	if st.Attempts != attempts {
		t.Fatalf("over-reported write took %d attempts, want %d", st.Attempts, attempts)
	}
	t.Logf("over-reported write: %v after %d attempts: %v", st.State, st.Attempts, st.Err)
	if ps := pluginStatus(a, "fault"); ps.OverlongCompletions != attempts || ps.UnknownCompletions != 0 || ps.DuplicateCompletions != 0 || ps.Faulty != 0 {
		t.Fatalf("plugin %+v, want %d over-long completions", ps, attempts)
	}
}

// TestBrokenRingKillsTheRun: a plugin that writes an impossible tail into
// its completion ring (a real write into the shared memory, from the
// plugin's process). The engine must not spin on the ring or wait on it:
// the task ends (FAILED, its one attempt's run gone), the run is killed
// as faulty, and the plugin's status says the ring was corrupt.
func TestBrokenRingKillsTheRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := contractEngine(t, "ring-a", "fault \"break_ring\" {}", 0, 1)
	b, seg := failoverSegment(t, ctx, a, "ring-b", 1<<20)
	local := randomLocal(t, ctx, a, 64<<10)
	st := writeOnce(t, ctx, a, seg.ID, b.Ready.Buffers[0].Base, local)
	if st.State != host.StateFailed {
		t.Fatalf("a write whose plugin broke its ring: %v (%v), want FAILED", st.State, st.Err)
	}
	t.Logf("the write: %v: %v", st.State, st.Err)
	var ps host.PluginStatus
	for limit := time.Now().Add(30 * time.Second); ; {
		if ps = pluginStatus(a, "fault"); ps.Faulty > 0 && ps.LastExit != "" || time.Now().After(limit) {
			break
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
	if ps.Faulty == 0 || !strings.Contains(ps.LastExit, "ring") || !strings.Contains(ps.LastExit, "corrupt") {
		t.Fatalf("plugin %+v, want a faulty run killed for its corrupt ring", ps)
	}
	t.Logf("the run ended: %s", ps.LastExit)
}
