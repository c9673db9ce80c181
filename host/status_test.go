package host_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host"
)

// TestStatusShowsSegmentsAndFailures: after a write that failed over from
// a crashing plugin, the engine's status lists the open segment with its
// transports and the failed attempt, retried, with its segment, op and
// transport.
func TestStatusShowsSegmentsAndFailures(t *testing.T) {
	const span = 32 << 20 // 32 slices: past crashAfter
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b, seg := failoverPair(t, ctx, "st-a", "st-b", false, span)
	if st := a.Status(ctx); st.FailuresSeen != 0 || len(st.Failures) != 0 {
		t.Fatalf("failures before any transfer: %+v", st.Failures)
	}
	local := randomLocal(t, ctx, a, span)
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: b.Ready.Buffers[0].Base}); err != nil {
		t.Fatalf("write through a crashing plugin: %v", err)
	}
	st := a.Status(ctx)
	// A full status asked the running plugins for their counters; a
	// quick one asked none.
	if i := slices.IndexFunc(st.Plugins, func(p host.PluginStatus) bool { return p.Counters != nil }); i < 0 {
		t.Errorf("no plugin's counters in the status: %+v", st.Plugins)
	}
	for _, p := range quick(a).Plugins {
		if p.Counters != nil || p.Name == "" || p.State == "" {
			t.Errorf("quick status of plugin %+v: want its name and state, no counters", p)
		}
	}
	if st.Format != host.StatusFormat || st.Name != "st-a" || st.Control != a.ControlAddr() || st.Admission != "pass-through" {
		t.Errorf("status header %+v", st)
	}
	// The metastore watches say what they do: the segments' and the
	// own descriptor's guard, both running here.
	if w := st.MetastoreWatches; len(w) != 2 || !strings.HasPrefix(w[0], "segments: watching since") || !strings.HasPrefix(w[1], "own descriptor: watching since") {
		t.Errorf("metastore watches %q; want the segments' and the own descriptor's, watching", w)
	}
	if len(st.Segments) != 1 || st.Segments[0].Name != "st-b" || !st.Segments[0].SameMachine || len(st.Segments[0].Transports) != 2 || st.Segments[0].Buffers != 1 {
		t.Errorf("segments %+v: want st-b, same machine, fault and tcp open, one buffer", st.Segments)
	}
	if st.FailuresSeen == 0 || len(st.Failures) == 0 {
		t.Fatal("no failure recorded although the plugin crashed under the write")
	}
	f := st.Failures[0]
	if f.Segment != "st-b" || f.Op != "write" || f.Transport != "fault" || !f.Retried || f.Status == "" || f.Time.IsZero() {
		t.Errorf("latest failure %+v: want a retried write to st-b over fault", f)
	}
}

// quick is e's status as a test polls it: without asking the plugins
// for their counters (host.SkipPluginCounters).
func quick(e *host.Engine) host.EngineStatus {
	return e.Status(context.Background(), host.SkipPluginCounters())
}
