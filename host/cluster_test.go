package host_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/metastore/metastoretest"
)

// TestClusterMetastores: two engines in two processes find each other
// through a real redis-server and a real etcd, move verified bytes, and a
// SIGKILLed engine's descriptor disappears within its lease TTL, so that
// opening it again fails cleanly instead of reaching a dead peer.
func TestClusterMetastores(t *testing.T) {
	backends := []struct {
		name  string
		start func(t *testing.T) string // returns the HCL metastore block
	}{
		{"redis", func(t *testing.T) string {
			s := metastoretest.NewRedis(t)
			return fmt.Sprintf("kind = \"redis\"\naddress = %q\nttl = \"1s\"", s.Addr)
		}},
		{"etcd", func(t *testing.T) string {
			s := metastoretest.NewEtcd(t)
			return fmt.Sprintf("kind = \"etcd\"\nendpoints = [%q]\nttl = \"1s\"", s.EtcdEndpoint())
		}},
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			block := be.start(t)
			hcl := func(name string) string {
				p := filepath.Join(t.TempDir(), name+".hcl")
				src := fmt.Sprintf("name = %q\nplugin_dir = %q\nmetastore {\n%s\n}\nplugin \"tcp\" {\n  config {\n    listen = [\"127.0.0.1:0\"]\n  }\n}\n", name, binDir, block)
				if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
					t.Fatal(err)
				}
				return p
			}
			cfg, err := config.Load(hcl(be.name + "-a"))
			if err != nil {
				t.Fatal(err)
			}
			a, err := host.New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b := startPeer(t, "--config", hcl(be.name+"-b"), "--expose", "1MiB", "--pattern", "9")
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
