package host_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/metastore/metastoretest"
	"github.com/ferrydev/ferry/host/segment"
)

// mooncakeEngine starts an engine named name whose metastore is the
// Mooncake HTTP metadata server at url.
func mooncakeEngine(t *testing.T, name, url string) *host.Engine {
	t.Helper()
	cfg := joinConfig(name, url)
	cfg.Metastore.TTL = config.MinMetastoreTTL // a heartbeat every third of it
	e, err := host.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("engine %s on a Mooncake metadata server: %v", name, err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// incarnationAt decodes the descriptor the server holds under key.
func incarnationAt(t *testing.T, m *metastoretest.Mooncake, key string) uint64 {
	t.Helper()
	raw, ok := m.Value(key)
	if !ok {
		t.Fatalf("no descriptor at %q", key)
	}
	d, err := segment.Decode(key, raw)
	if err != nil {
		t.Fatal(err)
	}
	return d.Incarnation
}

// TestEnginesOnMooncakeMetadataServer: engines whose metastore is a
// Mooncake HTTP metadata server (the stand-in, both flavours) start,
// publish, find each other by name and move verified bytes; each keeps
// its key by PUTting it again on a heartbeat and deletes it on Close.
// A key that a crashed engine left behind stays: readers open the dead
// incarnation and their transfers fail with ErrTransportUnavailable, until
// the next engine of that name takes the key over at start, and its peers
// open the new incarnation.
// (Such an engine used to fail at start: its lease needed Ferry's ttl_ms.)
func TestEnginesOnMooncakeMetadataServer(t *testing.T) {
	for _, f := range []metastoretest.MooncakeFlavor{metastoretest.MooncakeGo, metastoretest.MooncakePython} {
		t.Run(f.String(), func(t *testing.T) {
			const n = 64<<10 + 3
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			moon := metastoretest.StartMooncake(t, f)
			keyA, keyB := segment.Key("ferry/", "moon-a"), segment.Key("ferry/", "moon-b")
			a := mooncakeEngine(t, "moon-a", moon.URL)
			b := mooncakeEngine(t, "moon-b", moon.URL)
			if got := incarnationAt(t, moon, keyA); got != a.Incarnation() {
				t.Fatalf("%s holds incarnation %#x, engine a is %#x", keyA, got, a.Incarnation())
			}
			la, _ := a.Allocate(n)
			if _, err := a.Register(ctx, la, host.LocalOnly); err != nil {
				t.Fatal(err)
			}
			moved := func(b *host.Engine, seed uint64) {
				t.Helper()
				lb, rb := remoteBuffer(t, ctx, b, n)
				seg, err := a.OpenSegment(ctx, "moon-b")
				if err != nil {
					t.Fatal(err)
				}
				if seg.Incarnation != b.Incarnation() {
					t.Fatalf("opened incarnation %#x of moon-b, it runs %#x", seg.Incarnation, b.Incarnation())
				}
				copy(la, pattern(n, 0, seed))
				if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: la, Segment: seg.ID, Remote: rb}); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(lb, la) {
					t.Fatal("write: the peer's bytes differ")
				}
				clear(la)
				if err := a.Transfer(ctx, host.Request{Op: host.Read, Local: la[5:], Segment: seg.ID, Remote: rb + 5}); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(la[5:], lb[5:]) {
					t.Fatal("read: the bytes differ from the peer's")
				}
			}
			moved(b, 1)

			puts := moon.Puts(keyB)
			moon.Until(t, "two heartbeats of moon-b", func() bool { return moon.Puts(keyB) >= puts+2 })

			// moon-b crashes: its key stays, as nothing expires it.
			stale, _ := moon.Value(keyB)
			dead := b.Incarnation()
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if _, ok := moon.Value(keyB); ok || moon.Deletes(keyB) == 0 {
				t.Fatal("Close did not delete moon-b's key")
			}
			moon.Set(keyB, stale)
			// Until an engine of its name starts again, readers get the dead
			// incarnation's descriptor, and transfers to it fail fast.
			seg, err := a.OpenSegment(ctx, "moon-b")
			if err != nil || seg.Incarnation != dead {
				t.Fatalf("opening the crashed moon-b: %+v, %v; want its last descriptor (incarnation %#x)", seg, err, dead)
			}
			err = a.Transfer(ctx, host.Request{Op: host.Write, Local: la, Segment: seg.ID, Remote: seg.Buffers[0].Base})
			if !errors.Is(err, host.ErrTransportUnavailable) {
				t.Fatalf("a write to the crashed moon-b: %v, want ErrTransportUnavailable", err)
			}
			b2 := mooncakeEngine(t, "moon-b", moon.URL)
			if got := incarnationAt(t, moon, keyB); got != b2.Incarnation() {
				t.Fatalf("after the restart %s holds incarnation %#x, the new engine is %#x", keyB, got, b2.Incarnation())
			}
			moved(b2, 2)

			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if _, ok := moon.Value(keyA); ok {
				t.Fatal("Close did not delete moon-a's key")
			}
		})
	}
}
