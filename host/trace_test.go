package host_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host"
)

// TestTraceTellsTheStory: with a trace block, a request that asks for its
// trace gets its story: routed to the fault plugin with the selector's
// reasons, the crash (a retried step naming fault and the cause), the
// route to tcp, and the end, each timed; a request that does not ask gets
// none.
func TestTraceTellsTheStory(t *testing.T) {
	const span = 32 << 20 // past crashAfter slices
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := hclEngine(t, ctx, failoverConfig("tr-a", true, false)+"trace {\n  keep = 4\n}\n", "tr-a.hcl")
	b, seg := failoverSegment(t, ctx, a, "tr-b", span)
	local := randomLocal(t, ctx, a, span)
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: local[:4096], Segment: seg.ID, Remote: b.Ready.Buffers[0].Base}); err != nil {
		t.Fatal(err)
	}
	if tr := quick(a).Traces; len(tr) != 0 {
		t.Fatalf("a request that did not ask was traced: %+v", tr)
	}
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: b.Ready.Buffers[0].Base, Trace: true}); err != nil {
		t.Fatalf("write through a crashing plugin: %v", err)
	}
	tr := quick(a).Traces
	if len(tr) != 1 || !tr[0].Done || tr[0].Op != "write" || tr[0].Length != span || tr[0].Took <= 0 {
		t.Fatalf("traces %+v: want one finished story of the 32 MiB write", tr)
	}
	var stages []string
	var routedFault, retried, routedTCP bool
	last := -1.0
	for _, s := range tr[0].Steps {
		stages = append(stages, s.Stage)
		if s.At < last {
			t.Errorf("step %s at %.1f µs comes before the one before it (%.1f µs)", s.Stage, s.At, last)
		}
		last = s.At
		switch {
		case s.Stage == "routed" && s.Transport == "fault" && strings.Contains(s.Reasons, "fault: taken"):
			routedFault = true
		case s.Stage == "retried" && s.From == "fault" && s.Cause != "":
			retried = true
		case s.Stage == "routed" && s.Transport == "tcp" && routedFault && retried:
			routedTCP = true
		}
	}
	end := tr[0].Steps[len(tr[0].Steps)-1]
	if !routedFault || !retried || !routedTCP || stages[0] != "queued" || end.Stage != "ended" || end.State != "COMPLETED" {
		t.Errorf("story %v (%+v): want queued, routed to fault with reasons, retried from fault with a cause, routed to tcp, ended COMPLETED", stages, tr[0].Steps)
	}
	if st := a.Status(ctx); len(st.Traces) != 1 {
		t.Errorf("status carries %d traces, want 1", len(st.Traces))
	}
}
