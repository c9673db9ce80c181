package host_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host"
)

// TestClusterMetastores: two engines in two processes find each other
// through a real redis-server and a real etcd, move verified bytes, and a
// SIGKILLed engine's descriptor disappears within its lease TTL, so that
// opening it again fails cleanly instead of reaching a dead peer.
func TestClusterMetastores(t *testing.T) {
	for _, be := range metastoreBackends {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			block := be.start(t)
			a := engineFrom(t, engineHCL(t, be.name+"-a", block, "127.0.0.1:0"))
			b := startPeer(t, "--config", engineHCL(t, be.name+"-b", block, "127.0.0.1:0"), "--expose", "1MiB", "--pattern", "9")
			seg, err := a.OpenSegment(ctx, be.name+"-b")
			if err != nil {
				t.Fatal(err)
			}
			local, _ := a.Allocate(1 << 20)
			a.Register(ctx, local, host.LocalOnly)
			if err := a.Transfer(ctx, host.Request{Op: host.Read, Local: local, Segment: seg.ID, Remote: b.Ready.Buffers[0].Base}); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(local, pattern(1<<20, 0, 9)) {
				t.Fatal("bytes read through a " + be.name + "-discovered peer differ from its pattern")
			}

			// Kill the peer: its descriptor must expire within the TTL.
			b.kill()
			deadline := time.Now().Add(10 * time.Second)
			for {
				_, err := a.OpenSegment(ctx, be.name+"-b")
				if errors.Is(err, host.ErrSegmentNotFound) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("descriptor of the killed engine still there after 10s (ttl 1s): %v", err)
				}
				time.Sleep(100 * time.Millisecond) // polling the metastore for the expiry
			}
		})
	}
}
