package remotes

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/host/metastore"
	"github.com/ferrydev/ferry/host/segment"
)

// newDirectory is a Directory over transports ts, a fresh table and a
// memory metastore (closed when the test ends), whose watch runs until
// the test ends.
func newDirectory(t *testing.T, ts []Transport) (*Directory, metastore.Backend) {
	t.Helper()
	store := metastore.NewMemory()
	log := hclog.NewNullLogger()
	d := NewDirectory(DirectoryConfig{
		Table: New("here", time.Second), Fetch: &Fetcher{Store: store, Log: log, Timeout: time.Second}, Watcher: store,
		Lock: &sync.Mutex{}, Transports: func() []Transport { return ts }, Log: log,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Follow(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		store.Close()
	})
	return d, store
}

func putDesc(t *testing.T, store metastore.Store, d *segment.Descriptor) {
	t.Helper()
	b, err := d.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(context.Background(), segment.Key("", "b"), b); err != nil {
		t.Fatal(err)
	}
}

// TestDirectoryRecheck: a second look at a peer a transfer failed on says
// nothing while its descriptor is the one the handle has, says the peer
// restarted (and retires the handle) when it shows a new incarnation,
// and says the peer looks down when its descriptor is gone or another
// engine's.
func TestDirectoryRecheck(t *testing.T) {
	ctx := context.Background()
	tcp := newTransport("tcp")
	d, store := newDirectory(t, []Transport{tcp})
	if st, ok := d.WatchState(); !ok || st.Name != "segments" {
		t.Fatalf("watch state %+v, %v; want the segments' watch", st, ok)
	}
	putDesc(t, store, desc(7, 0x1000))
	h, err := d.Open(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if note := d.Recheck(ctx, h); note != "" {
		t.Fatalf("recheck of an unchanged peer says %q", note)
	}
	other := desc(7, 0x1000)
	other.Name = "c"
	putDesc(t, store, other)
	if note := d.Recheck(ctx, h); !strings.Contains(note, `now answers for engine "c"`) {
		t.Fatalf("recheck with another engine's descriptor says %q", note)
	}
	putDesc(t, store, desc(8, 0x2000))
	if note := d.Recheck(ctx, h); !strings.Contains(note, "restarted (now incarnation 0x8") {
		t.Fatalf("recheck of a restarted peer says %q", note)
	}
	if r := d.table.Get(h.ID); r.Retired == "" {
		t.Fatalf("the restarted peer's handle %+v is not retired", r)
	}
	if _, ok := tcp.open(h.ID); ok {
		t.Fatal("the retired handle's peer is still open")
	}
	if err := store.Delete(ctx, segment.Key("", "b")); err != nil {
		t.Fatal(err)
	}
	if note := d.Recheck(ctx, h); !strings.HasPrefix(note, "the peer looks down (re-reading its descriptor") {
		t.Fatalf("recheck of a peer gone from the metastore says %q", note)
	}
	if err := d.Close(ctx, h.ID); err != nil {
		t.Fatal(err)
	}
}

// TestDirectoryWithoutMetastore: without a metastore nothing is watched,
// and Follow returns at once.
func TestDirectoryWithoutMetastore(t *testing.T) {
	d := NewDirectory(DirectoryConfig{Table: New("here", time.Second), Fetch: &Fetcher{}, Lock: &sync.Mutex{},
		Transports: func() []Transport { return nil }, Log: hclog.NewNullLogger()})
	if _, ok := d.WatchState(); ok {
		t.Fatal("a watch state without a metastore")
	}
	d.Follow(context.Background())
}
