package host_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host"
)

// TestRetryOnAnotherRail: every slice sent on rail 1 of the only
// transport fails (the fault plugin drops them as peer-unreachable).
// Transfer retries the task on the same transport keeping off rail 1, and
// the bytes arrive; the rail monitor counts the errors and pauses rail 1,
// so that a later transfer does not send it anything.
func TestRetryOnAnotherRail(t *testing.T) {
	const span = 32 << 20
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := fmt.Sprintf(`name = "rr-a"
plugin_dir = %q
plugin "fault" {
  config {
    fault "drop" {
      rail   = 1
      status = "peer_unreachable"
    }
    tcp {
      listen = ["127.0.0.1:0", "127.0.0.2:0"]
    }
  }
}
policy "fault-only" {
  transports = ["fault"]
}
`, binDir)
	a := hclEngine(t, ctx, src, "rr-a.hcl")
	b, seg := failoverSegment(t, ctx, a, "rr-b", span)
	remote := b.Ready.Buffers[0].Base
	local := randomLocal(t, ctx, a, span)
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: remote}); err != nil {
		t.Fatalf("write with rail 1 failing every slice: %v", err)
	}
	b.holds(t, "the write", local)
	rails := quick(a).Rails
	if len(rails) != 2 {
		t.Fatalf("rails %+v, want the fault plugin's two", rails)
	}
	r0, r1 := rails[0], rails[1]
	t.Logf("rail 0: %+v; rail 1: %+v", r0, r1)
	if r1.Errors == 0 || r1.Bytes != 0 {
		t.Errorf("rail 1 failed every slice, yet reports %d errors and %d bytes", r1.Errors, r1.Bytes)
	}
	if r0.Bytes < span {
		t.Errorf("rail 0 carried %d bytes, want at least the %d of the retry", r0.Bytes, span)
	}
	if r1.Errors < 3 {
		return // too few slices reached rail 1 to trip the monitor
	}
	if !r1.Paused {
		t.Fatalf("rail 1 failed %d slices in a row and is not paused", r1.Errors)
	}
	// Rail 1 is paused: a second write goes on rail 0 alone, first time.
	rand.Read(local)
	if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: remote}); err != nil {
		t.Fatal(err)
	}
	b.holds(t, "second write", local)
	if after := quick(a).Rails[1]; after.Errors != r1.Errors {
		t.Errorf("the paused rail 1 was sent slices: errors %d -> %d", r1.Errors, after.Errors)
	}
}
