package host_test

import (
	"context"
	"runtime"
	"slices"
	"testing"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
)

// TestWaiterPollsOnlyItsBatchsLanes: a waiter polls (and takes from
// their reapers) the lanes of the plugins that carry its batch's tasks,
// not every lane: a 4 KiB write over shm in an engine with tcp and shm
// waits on shm's lane alone, one over tcp on tcp's. A batch on both, or
// one too large to look through, gets every lane.
func TestWaiterPollsOnlyItsBatchsLanes(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, "waitlanes")
	src, _, seg, base := ownSegment(t, e, 4<<10)
	write := func(transport string) host.Request {
		return host.Request{Op: host.Write, Local: src, Segment: seg.ID, Remote: base, Transport: transport}
	}
	lanes := func(reqs ...host.Request) []string {
		t.Helper()
		id := runBatch(t, ctx, e, reqs...)
		defer e.FreeBatch(id)
		got := host.WaitLanes(e, id)
		slices.Sort(got)
		return got
	}
	for _, c := range []struct {
		name string
		reqs []host.Request
		want []string
	}{
		{"shm", []host.Request{write("shm")}, []string{"shm"}},
		{"tcp", []host.Request{write("tcp")}, []string{"tcp"}},
		{"both", []host.Request{write("shm"), write("tcp")}, []string{"shm", "tcp"}},
		{"65 tasks", slices.Repeat([]host.Request{write("shm")}, 65), []string{"shm", "tcp"}},
	} {
		if got := lanes(c.reqs...); !slices.Equal(got, c.want) {
			t.Errorf("%s: the waiter polls the lanes of %v, want %v", c.name, got, c.want)
		}
	}
}

// TestWaiterStopsThePluginsPause: while a caller waits on a batch, the
// plugins that carry it see a caller waiting (and so do not pause on
// their submission rings: ring.NapUnlessWaited), also for a batch too
// large for the waiter to take over the reaping (over 256 KiB), and no
// longer once Wait returned. The fault plugin holds every completion back
// for two seconds, the window in which the test looks.
func TestWaiterStopsThePluginsPause(t *testing.T) {
	ctx := context.Background()
	// A second plugin, so that Wait does not take the sole-lane path
	// (Lane.WaitOn), which enters the lane whatever the batch's size.
	cfg := faultConfig("waitpause", `fault "delay" {
      rate  = 1
      delay = "2s"
    }`) + `plugin "tcp" {
  config {
    listen = ["127.0.0.1:0"]
  }
}
`
	e := hclEngine(t, ctx, cfg, "waitpause.hcl")
	src, _, seg, base := ownSegment(t, e, 1<<20)
	for _, size := range []int{4 << 10, 1 << 20} {
		id, err := e.AllocateBatch(1)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Submit(id, host.Request{Op: host.Write, Local: src[:size], Segment: seg.ID, Remote: base, Transport: "fault"}); err != nil {
			t.Fatal(err)
		}
		if w := host.LanesWaited(e, "fault"); slices.Contains(w, true) {
			t.Fatalf("%d bytes: before Wait the plugin sees a waiter: %v", size, w)
		}
		waited := make(chan error, 1)
		go func() { waited <- e.Wait(ctx, id) }()
		seen := false
		for !seen {
			select {
			case err := <-waited:
				t.Fatalf("%d bytes: Wait returned (%v) before the plugin was seen to see the waiter", size, err)
			default:
			}
			seen = slices.Contains(host.LanesWaited(e, "fault"), true)
			runtime.Gosched()
		}
		if err := <-waited; err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		if w := host.LanesWaited(e, "fault"); slices.Contains(w, true) {
			t.Fatalf("%d bytes: after Wait the plugin still sees a waiter: %v", size, w)
		}
		e.FreeBatch(id)
	}
}

// TestWaiterPollsOnlyItsBatchsLane: with three lanes per plugin and the
// high class on a lane of its own (qos lanes = "per_class"), a waiter
// on a HIGH request polls that one lane, not its plugin's bulk lanes
// too (whose reapers it would otherwise send to stand by and wake again
// after every request, and whose completions it would reap); a batch on
// two lanes polls both.
func TestWaiterPollsOnlyItsBatchsLane(t *testing.T) {
	ctx := context.Background()
	cfg := config.Default("waitlane")
	cfg.PluginDir = binDir
	cfg.Transfer.Lanes = 3
	qosOn(cfg)
	cfg.QoS.Lanes = config.QoSLanesPerClass
	e, err := host.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	src, _, seg, base := ownSegment(t, e, 4<<10)
	write := func(p host.Priority) host.Request {
		return host.Request{Op: host.Write, Local: src, Segment: seg.ID, Remote: base, Transport: "shm", Priority: p}
	}
	for _, c := range []struct {
		name string
		reqs []host.Request
		want int
	}{
		{"high", []host.Request{write(host.PriorityHigh)}, 1},
		{"high and low", []host.Request{write(host.PriorityHigh), write(host.PriorityLow)}, 2},
	} {
		id, err := e.AllocateBatch(len(c.reqs))
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Submit(id, c.reqs...); err != nil {
			t.Fatal(err)
		}
		if err := e.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
		if got := host.WaitLanes(e, id); len(got) != c.want {
			t.Errorf("%s: the waiter polls %d lanes (%v), want %d", c.name, len(got), got, c.want)
		}
		e.FreeBatch(id)
	}
}
