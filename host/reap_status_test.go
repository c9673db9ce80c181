package host_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
)

// TestStatusCallsDriveCompletion: a caller that polls a task's status
// (TaskStatus, TaskStatusList, BatchStatus) reaps the completion rings of
// the plugin that carries it, so its transfers complete while the lanes'
// reapers pause. The reapers pause an hour here, after a short run that
// came while they spun after the one before: from the second completion
// a reaper reaps on, only the status calls can reap the later ones, each
// awaited for 10 s at most and completed by its first attempt.
func TestStatusCallsDriveCompletion(t *testing.T) {
	cfg := config.Default("status-reap")
	cfg.PluginDir = binDir
	// Reapers spin 10 ms after each run: the rounds' completions, a few
	// hundred microseconds apart, then come as a stream, and a reaper
	// that reaped one pauses from the next one it reaps on.
	cfg.Transfer.Spin = config.MaxSpin
	e, err := host.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	host.PauseReapers(e, time.Hour)
	const size = 4096
	src, dst, seg, base := ownSegment(t, e, 8*size)
	polls := []struct {
		name string
		done func(id host.BatchID) bool
	}{
		{"TaskStatus", func(id host.BatchID) bool {
			st, err := e.TaskStatus(id, 0)
			if err != nil {
				t.Fatal(err)
			}
			return st.State != host.StatePending
		}},
		{"TaskStatusList", func(id host.BatchID) bool {
			var out [1]host.TaskStatus
			if _, err := e.TaskStatusList(id, 0, out[:]); err != nil {
				t.Fatal(err)
			}
			return out[0].State != host.StatePending
		}},
		{"BatchStatus", func(id host.BatchID) bool {
			bs, err := e.BatchStatus(id)
			if err != nil {
				t.Fatal(err)
			}
			return bs.Pending == 0
		}},
	}
	for round := range 6 {
		p := polls[round%len(polls)]
		off := round * size
		for k := range size {
			src[off+k] = byte(round*31 + k)
		}
		id, err := e.AllocateBatch(1)
		if err != nil {
			t.Fatal(err)
		}
		req := host.Request{Op: host.Write, Local: src[off : off+size], Segment: seg.ID, Remote: base + uint64(off), Transport: "shm"}
		if err := e.Submit(id, req); err != nil {
			t.Fatal(err)
		}
		give := time.Now().Add(10 * time.Second)
		for !p.done(id) {
			if time.Now().After(give) {
				t.Fatalf("round %d: 10 s of %s polls and the task is still pending", round, p.name)
			}
		}
		// One attempt: a task the status calls left on the ring would
		// complete only after the stall supervisor killed the plugin (its
		// probe goes unanswered too) and the retry ran on a new one.
		if st, _ := e.TaskStatus(id, 0); st.State != host.StateCompleted || st.Attempts != 1 {
			t.Fatalf("round %d: task %v (%v) after %d attempts, want COMPLETED after 1", round, st.State, st.Err, st.Attempts)
		}
		if !bytes.Equal(dst[off:off+size], src[off:off+size]) {
			t.Fatalf("round %d: the bytes at the destination differ", round)
		}
		e.FreeBatch(id)
	}
}
