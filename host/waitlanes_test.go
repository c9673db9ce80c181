package host_test

import (
	"context"
	"slices"
	"testing"

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
		id, err := e.AllocateBatch(len(reqs))
		if err != nil {
			t.Fatal(err)
		}
		defer e.FreeBatch(id)
		if err := e.Submit(id, reqs...); err != nil {
			t.Fatal(err)
		}
		if err := e.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
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
