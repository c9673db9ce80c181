package path

import (
	"sync/atomic"
	"testing"

	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/sdk/ring"
)

// newTestLanes makes n lanes with rings of their own, no plugin on them:
// what is put there stays in flight.
func newTestLanes(t *testing.T, n int) []*progress.Lane {
	t.Helper()
	lanes := make([]*progress.Lane, n)
	for k := range lanes {
		l, err := progress.NewLane(uint32(k+1), 64, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close(false) })
		lanes[k] = l
	}
	return lanes
}

// putInFlight puts one 4 KiB write on l and publishes it: l has it in flight.
func putInFlight(t *testing.T, l *progress.Lane) {
	t.Helper()
	l.Begin()
	err := l.Put(&ring.Descriptor{Op: ring.OpWrite, Length: 4096}, nil, 0)
	l.End()
	if err != nil {
		t.Fatal(err)
	}
}

// TestPickLaneTakesTheFirstIdleLane: a request goes on the first lane
// with nothing in flight, so that one caller's requests one at a time
// keep to one lane; with every lane busy they go round in turn.
func TestPickLaneTakesTheFirstIdleLane(t *testing.T) {
	lanes := newTestLanes(t, 3)
	var next atomic.Uint32
	for range 3 {
		if got := pickLane(lanes, &next); got != lanes[0] {
			t.Fatalf("idle lanes: picked lane %d, want lane 1 each time", got.ID)
		}
	}
	putInFlight(t, lanes[0])
	if got := pickLane(lanes, &next); got != lanes[1] {
		t.Fatalf("lane 1 busy: picked lane %d, want lane 2", got.ID)
	}
	putInFlight(t, lanes[1])
	putInFlight(t, lanes[2])
	seen := map[uint32]int{}
	for range 6 {
		seen[pickLane(lanes, &next).ID]++
	}
	for _, l := range lanes {
		if seen[l.ID] != 2 {
			t.Fatalf("every lane busy: picks per lane %v, want each lane twice in six", seen)
		}
	}
}

// TestLaneForKeepsACallOnOneLane: the requests of one call stay on the
// lane its first took while they add up to less than stickBytes, busy
// or not; past that, and in a new call, the lane is picked again.
func TestLaneForKeepsACallOnOneLane(t *testing.T) {
	lanes := newTestLanes(t, 2)
	e := &Executor{}
	ps := &Plugin{}
	run := &pluginRun{lanes: lanes}
	var sc submitCtx
	first := e.laneFor(&sc, run, ps, PriorityNormal, 4096)
	if first != lanes[0] {
		t.Fatalf("first request on lane %d, want lane 1 (idle)", first.ID)
	}
	putInFlight(t, first)
	for i := 1; i < 128; i++ {
		if l := e.laneFor(&sc, run, ps, PriorityNormal, 4096); l != first {
			t.Fatalf("request %d of a call of 4 KiB requests on lane %d, want the call's lane %d", i, l.ID, first.ID)
		}
	}
	if l := e.laneFor(&sc, run, ps, PriorityNormal, stickBytes); l != first {
		t.Fatalf("under stickBytes so far: lane %d, want the call's lane %d", l.ID, first.ID)
	}
	if l := e.laneFor(&sc, run, ps, PriorityNormal, 4096); l != lanes[1] {
		t.Fatalf("past stickBytes with lane 1 busy: lane %d, want lane 2", l.ID)
	}
	var sc2 submitCtx
	if l := e.laneFor(&sc2, run, ps, PriorityNormal, 4096); l != lanes[1] {
		t.Fatalf("a new call with lane 1 busy: lane %d, want lane 2", l.ID)
	}
	other := &pluginRun{lanes: newTestLanes(t, 1)}
	if l := e.laneFor(&sc2, other, ps, PriorityNormal, 4096); l != other.lanes[0] {
		t.Fatalf("a request for another run: lane %d, want that run's", l.ID)
	}
}
