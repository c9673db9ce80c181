package host_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
)

// TestHandoffSleepsMoveVerifiedBytes: with transfer.handoff_sleeps the
// engine's lanes and its plugins' (the setting crosses AttachLane) hand
// their P over when they sleep between requests; bytes still arrive
// exactly as written, over every transport, one request at a time and
// in a batch, and the engine closes.
func TestHandoffSleepsMoveVerifiedBytes(t *testing.T) {
	ctx := context.Background()
	cfg := config.Default("handoff-sleeps")
	cfg.PluginDir = binDir
	cfg.Transfer.HandoffSleeps = true
	e, err := host.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	const half = 4 << 20
	src, dst, seg, base := ownSegment(t, e, half)
	if len(seg.Transports) < 2 {
		t.Fatalf("segment offers %v, want tcp and shm", seg.Transports)
	}
	for _, tr := range seg.Transports {
		for _, n := range []int{4096, 65536, 1 << 20, half} {
			t.Run(fmt.Sprintf("%s/%d", tr, n), func(t *testing.T) {
				rand.Read(src[:n])
				clear(dst[:n])
				if err := e.Transfer(ctx, host.Request{Op: host.Write, Local: src[:n], Segment: seg.ID, Remote: base, Transport: tr}); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(dst[:n], src[:n]) {
					t.Fatalf("write of %d bytes: the target's bytes differ", n)
				}
				clear(src[:n])
				if err := e.Transfer(ctx, host.Request{Op: host.Read, Local: src[:n], Segment: seg.ID, Remote: base, Transport: tr}); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(src[:n], dst[:n]) {
					t.Fatalf("read of %d bytes: the bytes read differ", n)
				}
			})
		}
		t.Run(tr+"/batch", func(t *testing.T) {
			const each, count = 4096, 64
			rand.Read(src[:each*count])
			clear(dst[:each*count])
			reqs := make([]host.Request, count)
			for i := range reqs {
				reqs[i] = host.Request{Op: host.Write, Local: src[i*each : (i+1)*each], Segment: seg.ID, Remote: base + uint64(i*each), Transport: tr}
			}
			e.FreeBatch(runBatch(t, ctx, e, reqs...))
			if !bytes.Equal(dst[:each*count], src[:each*count]) {
				t.Fatal("a batch of 64 writes: the target's bytes differ")
			}
		})
	}
}
