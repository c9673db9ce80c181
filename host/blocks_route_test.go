package host_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/observe"
)

// routeObserver keeps the transport of every Routed event, per batch and
// task.
type routeObserver struct {
	mu     sync.Mutex
	routed map[[2]uint64][]string
}

func (o *routeObserver) Observe(ev observe.Event) {
	if ev.Stage != observe.Routed {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	k := [2]uint64{ev.Batch, uint64(ev.Task)}
	o.routed[k] = append(o.routed[k], ev.Transport)
}

func (o *routeObserver) of(batch uint64, task int) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.routed[[2]uint64{batch, uint64(task)}]...)
}

// noFailoverEngine starts engine name with tcp and shm and failover off
// (one attempt a task): a task put on a dead plugin's run fails.
func noFailoverEngine(t *testing.T, ctx context.Context, name string, opts ...host.Option) *host.Engine {
	t.Helper()
	return hclEngine(t, ctx, fmt.Sprintf(`name = %q
plugin_dir = %q
plugin "tcp" {
  config {
    listen = ["127.0.0.1:0"]
  }
}
plugin "shm" {}
transfer {
  attempts = 1
}
`, name, binDir), name+".hcl", opts...)
}

// TestBlockRouteFollowsPlugins: a block list keeps the route of its last
// submission while nothing it was chosen from changed, and only so long.
// Submissions of one list to the engine's own segment go over shm (the
// same-machine transport); shm's process is killed between two of them,
// and the next one, on the same list, must not be put on the dead run:
// it goes over tcp while shm is down (or over shm's next run once it is
// back), in its first attempt, failover being off (a task put on the
// dead run would fail). Once shm runs again the list's submissions go
// back to it. Every block's bytes are checked.
func TestBlockRouteFollowsPlugins(t *testing.T) {
	const bs, blocks = 4 << 10, 16
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := &routeObserver{routed: map[[2]uint64][]string{}}
	e := noFailoverEngine(t, ctx, "blockroute", host.WithObserver(obs))
	src, dst, seg, base := ownSegment(t, e, blocks*bs)
	rand.Read(src)
	layout := host.BlockLayout{BlockSize: bs, Blocks: blocks}
	list, err := e.PrepareBlocks(seg.ID, src, layout, base, layout)
	if err != nil {
		t.Fatal(err)
	}
	next := 0 // the next block to move, round the list
	// submit writes the next block in a batch of its own and waits for
	// it; it returns the task's status and the transports it was routed
	// to, and checks the bytes of a completed block.
	submit := func(what string) (host.TaskStatus, []string) {
		t.Helper()
		k := next
		next = (next + 1) % blocks
		id, err := e.AllocateBatch(1)
		if err != nil {
			t.Fatal(err)
		}
		defer e.FreeBatch(id)
		clear(dst[k*bs : (k+1)*bs])
		if _, err := e.SubmitBlocks(id, list, host.BlockRequest{Op: host.Write}, []host.BlockPair{{Local: uint32(k), Remote: uint32(k)}}); err != nil {
			t.Fatalf("%s: submit blocks: %v", what, err)
		}
		if err := e.Wait(ctx, id); err != nil {
			t.Fatalf("%s: wait: %v", what, err)
		}
		st, err := e.TaskStatus(id, 0)
		if err != nil {
			t.Fatal(err)
		}
		if st.State == host.StateCompleted && !bytes.Equal(dst[k*bs:(k+1)*bs], src[k*bs:(k+1)*bs]) {
			t.Fatalf("%s: block %d: the bytes written differ from the source", what, k)
		}
		return st, obs.of(host.BatchNumber(id), 0)
	}
	// overSHM waits until a submission of the list goes over shm and
	// completes: after a restart the segment's handle is refreshed (shm's
	// endpoint moved), and a submission meanwhile may fail.
	overSHM := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			st, routed := submit(what)
			if st.State == host.StateCompleted && len(routed) == 1 && routed[0] == "shm" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the list's submissions did not go over shm again within 30s: the last one %+v, routed %q", what, st, routed)
			}
		}
	}
	for i := range 3 { // the first chooses the route, the others take it
		if st, routed := submit("before the kill"); st.State != host.StateCompleted || len(routed) != 1 || routed[0] != "shm" {
			t.Fatalf("submission %d: %+v, routed %q; want COMPLETED over shm (same machine)", i, st, routed)
		}
	}
	for try := 1; ; try++ {
		restarts := killSeen(t, e, "shm")
		before := pluginStatus(e, "shm")
		st, routed := submit("after shm's kill")
		after := pluginStatus(e, "shm")
		if before.State != "running" && after.State != "running" && after.Restarts == restarts {
			// shm was down all through the submission: it went over tcp.
			if st.State != host.StateCompleted || st.Attempts != 1 || len(routed) != 1 || routed[0] != "tcp" {
				t.Fatalf("with shm down (%s): %+v, routed %q; want COMPLETED over tcp in one attempt", after.State, st, routed)
			}
			break
		}
		// shm came back before the submission was done: try again.
		t.Logf("try %d: shm was back (%s, %d restarts) before the submission was done", try, after.State, after.Restarts)
		if try == 5 {
			t.Fatal("shm came back before every submission after its kill: the test cannot tell where they went")
		}
		waitBack(t, e, "shm", restarts)
		overSHM("after shm's restart")
	}
	waitBack(t, e, "shm", 0)
	overSHM("after shm's restart")
}
