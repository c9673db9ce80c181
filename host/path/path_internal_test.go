package path

import (
	"testing"

	"github.com/ferrydev/ferry/host/metrics"
	"github.com/ferrydev/ferry/host/observe"
	"github.com/ferrydev/ferry/host/slicer"
	"github.com/ferrydev/ferry/sdk"
)

// TestCapsOf pins how declared capabilities reach the slicer: tcp
// declares its max_frame as MaxSlice, shm prefers 64 MiB, and a protocol-1
// plugin declares nothing.
func TestCapsOf(t *testing.T) {
	tcp := sdk.Info{Name: "tcp", MaxSlice: 64 << 20}
	shm := sdk.Info{Name: "shm", SameMachineOnly: true, PreferredSlice: 64 << 20}
	if c := capsOf(tcp); c != (slicer.Caps{MaxSlice: 64 << 20}) {
		t.Errorf("tcp caps %+v, want max 64 MiB", c)
	}
	if c := capsOf(shm); c != (slicer.Caps{PreferredSlice: 64 << 20}) {
		t.Errorf("shm caps %+v, want preferred 64 MiB", c)
	}
	if c := capsOf(sdk.Info{Name: "old"}); c != (slicer.Caps{}) {
		t.Errorf("protocol-1 caps %+v, want none", c)
	}
	// With the default 1 MiB slice: tcp cuts 64 MiB into 64, shm into 1.
	if p := slicer.Cut(slicer.Input{Length: 64 << 20, Configured: 1 << 20, Caps: capsOf(tcp)}); p.Slices != 64 {
		t.Errorf("tcp: %d slices of 64 MiB, want 64", p.Slices)
	}
	if p := slicer.Cut(slicer.Input{Length: 64 << 20, Configured: 1 << 20, Caps: capsOf(shm)}); p.Slices != 1 {
		t.Errorf("shm: %d slices of 64 MiB, want 1", p.Slices)
	}
	// A slice_size above tcp's max_frame is clamped to it.
	if p := slicer.Cut(slicer.Input{Length: 256 << 20, Configured: 128 << 20, Caps: capsOf(tcp)}); p.Slice != 64<<20 {
		t.Errorf("tcp with slice_size 128 MiB: slice %d, want 64 MiB", p.Slice)
	}
}

// TestQoSWatcherBatchesTheMeter: with a qos block that keeps grants and
// metrics on (no observer), the tracker's hooks are the qos hook, told
// of ends alone and without the task's hold, and the meter's, which
// counts a lane's run of ends in its tally and publishes it once per run
// (RunEnded, Flush), as without a qos block; with an observer the path's
// hook is the held one the observer needs.
func TestQoSWatcherBatchesTheMeter(t *testing.T) {
	e := &Executor{}
	e.path.meter = &metrics.Meter{}
	q := e.qosHook()
	if !q.Unordered || q.Ended == nil || q.Settled != nil || q.RunEnded != nil || q.Flush != nil {
		t.Fatalf("qos hook %+v: want Unordered, told of ends alone", q)
	}
	m := pathWatcher{e}.hook()
	if !m.Unordered || m.RunEnded == nil || m.Flush == nil || m.Ended == nil {
		t.Fatalf("meter's hook %+v: want Unordered, counting runs (RunEnded, Flush)", m)
	}
	e.path.obs = dropEvents{}
	if (pathWatcher{e}).hook().Unordered {
		t.Fatal("with an observer the path's hook is Unordered; the observer needs the task's hold")
	}
}

// dropEvents is an observer that drops what it is shown.
type dropEvents struct{}

func (dropEvents) Observe(observe.Event) {}

// TestRouteMemoTakesOnlyTheSameFacts: a request of the same call takes
// the previous one's route only when every fact the selector reads of it
// is the same; any one differing asks the selector again.
func TestRouteMemoTakesOnlyTheSameFacts(t *testing.T) {
	remA, remB := &remote{Name: "a"}, &remote{Name: "b"}
	shm, tcp := &Plugin{name: "shm"}, &Plugin{name: "tcp"}
	first := func() *task {
		return &task{rem: remA, rec: &taskRecord{req: Request{Op: Write, Local: make([]byte, 4096), Priority: PriorityNormal}},
			rt: routed{lreg: 1, rreg: 7}}
	}
	var m routeMemo
	take := func(x *task) bool { return m.take(&x.rec.req, x.rem, &x.rt) }
	keep := func(x *task) { m.keep(&x.rec.req, x.rem, &x.rt) }
	if take(first()) {
		t.Fatal("an empty memo gave a route")
	}
	t0 := first()
	t0.rt.ps, t0.rt.policy = shm, 2
	keep(t0)
	if same := first(); !take(same) || same.rt.ps != shm || same.rt.policy != 2 {
		t.Fatalf("the same facts: route %+v, want shm under policy 2", same.rt)
	}
	for name, change := range map[string]func(*task){
		"segment":  func(x *task) { x.rem = remB },
		"op":       func(x *task) { x.rec.req.Op = Read },
		"size":     func(x *task) { x.rec.req.Local = make([]byte, 8192) },
		"priority": func(x *task) { x.rec.req.Priority = PriorityHigh },
		"intent":   func(x *task) { x.rec.req.Intent = "kv" },
		"policy":   func(x *task) { x.rec.req.Policy = "bulk" },
		"hint":     func(x *task) { x.rec.req.Transport = "tcp" },
		"local":    func(x *task) { x.rt.lreg = 2 },
		"remote":   func(x *task) { x.rt.rreg = 8 },
	} {
		x := first()
		change(x)
		if take(x) {
			t.Errorf("a request whose %s differs took the remembered route", name)
		}
		if x.rt.ps != nil {
			t.Errorf("a request whose %s differs: route set to %q", name, x.rt.ps.name)
		}
	}
	t1 := first()
	t1.rec.req.Transport, t1.rt.ps = "tcp", tcp
	keep(t1)
	if x := first(); take(x) {
		t.Error("the memo kept the first route after a second was kept")
	}
}
