package host_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"sync"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/observe"
	"github.com/ferrydev/ferry/host/observe/observetest"
	"github.com/ferrydev/ferry/sdk/ring"
)

// taskObserver keeps, per task, how many times it ended and every op an
// event named for it.
type taskObserver struct {
	mu    sync.Mutex
	ended map[int]int
	ops   map[ring.Op]int
}

func (o *taskObserver) Observe(ev observe.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ops[ev.Op]++
	if ev.Stage == observe.Ended {
		o.ended[ev.Task]++
	}
}

// TestBlockTasksFailOver: the tasks of a block submission (a task per
// pair) whose plugin crashes under them complete over the next
// transport, in a second attempt, with every byte verified. Their
// records give failover and the observer the whole request: every event
// names the write, and each task ends once.
func TestBlockTasksFailOver(t *testing.T) {
	const span, tasks = 64 << 20, 8
	const part = span / tasks
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := &taskObserver{ended: map[int]int{}, ops: map[ring.Op]int{}}
	a := hclEngine(t, ctx, failoverConfig("bf-a", true, false), "bf-a.hcl", host.WithObserver(obs))
	b, seg := failoverSegment(t, ctx, a, "bf-b", span)
	remote := b.Ready.Buffers[0].Base
	local := randomLocal(t, ctx, a, span)
	layout := host.BlockLayout{BlockSize: part, Blocks: tasks}
	list, err := a.PrepareBlocks(seg.ID, local, layout, remote, layout)
	if err != nil {
		t.Fatal(err)
	}
	id, err := a.AllocateBatch(tasks)
	if err != nil {
		t.Fatal(err)
	}
	defer a.FreeBatch(id)
	got, err := a.SubmitBlockRange(id, list, host.BlockRequest{Op: host.Write, Policy: "prefer-fault", NoMerge: true}, 0, 0, tasks)
	if err != nil || got.Count != tasks {
		t.Fatalf("submit blocks: %+v, %v; want %d tasks", got, err, tasks)
	}
	failedOver := failedOverTasks(t, ctx, a, id, tasks, part)
	if failedOver == 0 {
		t.Fatalf("no block task needed a second attempt: the fault plugin did not crash under them")
	}
	b.holds(t, "the block write", local)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	for k := range tasks {
		if obs.ended[k] != 1 {
			t.Errorf("task %d: observer saw %d ends, want 1", k, obs.ended[k])
		}
	}
	if len(obs.ops) != 1 || obs.ops[ring.OpWrite] == 0 {
		t.Errorf("observer saw ops %v, want writes only", obs.ops)
	}
	t.Logf("%d of %d block tasks failed over", failedOver, tasks)
}

// TestBlockTasksHeldByQoS: block tasks that the qos queue holds back
// (LOW, over their class's rate) are taken on when granted, from their
// records, and write the right bytes; each task's events are
// consistent and it ends once.
func TestBlockTasksHeldByQoS(t *testing.T) {
	const block, tasks = 1 << 20, 4
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec := observetest.New()
	e, src, seg, dst := qosEngine(t, "qos-blocks", `qos {
  class "low" {
    rate  = "2MiB"
    burst = "1MiB"
  }
}`, 2*tasks*block, host.WithObserver(rec))
	rand.Read(src[:tasks*block])
	layout := host.BlockLayout{BlockSize: block, Blocks: tasks}
	list, err := e.PrepareBlocks(seg, src[:tasks*block], layout, dst, layout)
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.AllocateBatch(tasks)
	if err != nil {
		t.Fatal(err)
	}
	defer e.FreeBatch(id)
	if _, err := e.SubmitBlockRange(id, list, host.BlockRequest{Op: host.Write, Priority: host.PriorityLow, Transport: "shm", NoMerge: true}, 0, 0, tasks); err != nil {
		t.Fatal(err)
	}
	// The first block took the burst; the others wait for the rate,
	// half a second each.
	if q := quick(e).QoS; q.Held < 1 {
		t.Errorf("QoS() = %+v after the submission, want block tasks held", q)
	}
	if err := e.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	for k := range tasks {
		if st, err := e.TaskStatus(id, k); err != nil || st.State != host.StateCompleted || st.Bytes != block {
			t.Fatalf("task %d: %+v, %v; want COMPLETED with %d bytes", k, st, err, block)
		}
	}
	back := src[tasks*block:]
	clear(back)
	if err := e.Transfer(ctx, host.Request{Op: host.Read, Local: back, Segment: seg, Remote: dst, Transport: "shm"}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, src[:tasks*block]) {
		t.Fatal("the blocks read back differ from those written")
	}
	_, errs := rec.Check()
	for _, err := range errs {
		t.Error(err)
	}
}
