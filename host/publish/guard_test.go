package publish

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host/metastore"
	"github.com/ferrydev/ferry/host/segment"
)

// TestGuardRepairsOnlyOthersWrites: the engine's own publishes (one per
// registration) are never taken for someone else's, and one foreign write
// is repaired exactly once, with the newest descriptor.
func TestGuardRepairsOnlyOthersWrites(t *testing.T) {
	ctx := context.Background()
	store := metastore.NewMemory()
	defer store.Close()
	var bufs []segment.Buffer
	p := publisher(store.(Store), 7, &bufs)
	for i := 0; i < 20; i++ {
		bufs = append(bufs, segment.Buffer{Region: uint32(i + 1), Base: uint64(i+1) << 20, Length: 4096, Perm: segment.PermRemoteRead, Location: "cpu"})
		if err := p.Publish(ctx); err != nil {
			t.Fatal(err)
		}
	}
	key := segment.Key("ferry", "a")
	if err := store.Put(ctx, key, []byte("someone else's")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := store.Get(ctx, key)
		if err == nil && !bytes.Equal(v, []byte("someone else's")) && p.Repaired() > 0 {
			d, err := segment.Decode(key, v)
			if err != nil || len(d.Buffers) != 20 {
				t.Fatalf("repaired with %q (%v); want the newest descriptor", v, err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not repaired within 10s: Repaired %d", p.Repaired())
		}
		time.Sleep(10 * time.Millisecond) // polling observable state
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := p.Repaired(); n != 1 {
		t.Fatalf("Repaired = %d after 20 own publishes and one foreign write; want 1", n)
	}
	// Close deleted the key, and the guard did not put it back.
	if _, err := store.Get(ctx, key); err == nil {
		t.Fatal("the key is back after Close")
	}
}

// waitRepaired waits until the store holds, under the engine's key, a
// descriptor with want buffers after at least one repair.
func waitRepaired(t *testing.T, store metastore.Store, p *Publisher, want int) {
	t.Helper()
	ctx := context.Background()
	key := segment.Key("ferry", "a")
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := store.Get(ctx, key)
		if err == nil && p.Repaired() > 0 {
			if d, err := segment.Decode(key, v); err == nil && len(d.Buffers) == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not repaired within 10s: Repaired %d, the key holds %.80q (%v)", p.Repaired(), v, err)
		}
		time.Sleep(10 * time.Millisecond) // polling observable state
	}
}

// TestGuardRepairsAReplay: a metastore writer without the secret
// replays the engine's own older signed descriptor (one buffer fewer).
// It verifies, and it is of this incarnation, but it is not the newest:
// peers that read it would lose the buffer registered since. The guard
// writes the newest back.
func TestGuardRepairsAReplay(t *testing.T) {
	ctx := context.Background()
	mem := metastore.NewMemory()
	defer mem.Close()
	// The test tells the guard of the replay itself: a polling watch
	// that lists only after the replay would see the value it listed
	// before, and report nothing (the lease's next refresh repairs that).
	store := &feedStore{Backend: mem, events: make(chan metastore.Event, 1)}
	s, err := segment.NewSigner([]byte("0123456789abcdef-cluster"))
	if err != nil {
		t.Fatal(err)
	}
	var bufs []segment.Buffer
	p := publisher(store, 7, &bufs)
	p.signer = s
	key := segment.Key("ferry", "a")
	var old []byte
	for i := 0; i < 2; i++ {
		bufs = append(bufs, segment.Buffer{Region: uint32(i + 1), Base: uint64(i+1) << 20, Length: 4096, Perm: segment.PermRemoteRead, Location: "cpu"})
		if err := p.Publish(ctx); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if old, err = store.Get(ctx, key); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := s.Decode(key, old); err != nil {
		t.Fatalf("test setup: the replayed descriptor does not verify: %v", err)
	}
	if err := store.Put(ctx, key, old); err != nil {
		t.Fatal(err)
	}
	store.events <- metastore.Event{Kind: metastore.Put, Key: key, Value: old}
	waitRepaired(t, store, p, 2)
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// feedStore is a store whose watches report what the test sends.
type feedStore struct {
	metastore.Backend
	events chan metastore.Event
}

func (f *feedStore) Watch(context.Context, string) (<-chan metastore.Event, error) {
	return f.events, nil
}

// downAtFirstStore is a store whose watches fail until up is closed.
type downAtFirstStore struct {
	metastore.Backend
	up     chan struct{}
	failed chan struct{} // a token per failed watch, while there is room
}

func (d *downAtFirstStore) Watch(ctx context.Context, prefix string) (<-chan metastore.Event, error) {
	select {
	case <-d.up:
		return d.Backend.Watch(ctx, prefix)
	default:
		select {
		case d.failed <- struct{}{}:
		default:
		}
		return nil, errors.New("metastore busy: every listing slot held")
	}
}

// TestGuardWatchRetried: the watch of the engine's own key fails when
// the engine starts (the attack held every listing slot). It used to be
// tried once, leaving the key unguarded for the engine's life; now it is
// retried, and a replacement after it comes up is repaired.
func TestGuardWatchRetried(t *testing.T) {
	ctx := context.Background()
	mem := metastore.NewMemory()
	defer mem.Close()
	store := &downAtFirstStore{Backend: mem, up: make(chan struct{}), failed: make(chan struct{}, 1)}
	var bufs []segment.Buffer
	bufs = append(bufs, segment.Buffer{Region: 1, Base: 1 << 20, Length: 4096, Perm: segment.PermRemoteRead, Location: "cpu"})
	p := publisher(store, 7, &bufs)
	if err := p.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	<-store.failed // the guard's watch failed to start
	close(store.up)
	key := segment.Key("ferry", "a")
	// Replace the key until the guard repairs it: a write before its
	// watch is up is seen only by the lease's refresh.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; p.Repaired() == 0; i++ {
		if err := store.Put(ctx, key, fmt.Appendf(nil, "someone else's %d", i)); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("a replacement was not repaired within 10s of the metastore's watch coming up")
		}
		time.Sleep(20 * time.Millisecond) // polling observable state
	}
	waitRepaired(t, store, p, 1)
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestGoneSaysWhy: a key that went is called expired when the store says
// its TTL ran out, deleted by someone else when the store says a client
// deleted it, and either when the store does not say: a lease that merely
// expired under load is not reported as someone else's deletion.
func TestGoneSaysWhy(t *testing.T) {
	for _, c := range []struct {
		ev        metastore.Event
		want, not string
	}{
		{metastore.Event{Kind: metastore.Delete, Cause: metastore.CauseExpired}, "expired: its lease was not refreshed within the metastore's ttl (15s", "someone else"},
		{metastore.Event{Kind: metastore.Delete, Cause: metastore.CauseDeleted}, "was deleted by someone else. Anyone who can write", "expired"},
		{metastore.Event{Kind: metastore.Delete}, "expired (its lease was not refreshed within the metastore's ttl, 15s, e.g. under load) or was deleted by someone else", ""},
		{metastore.Event{Kind: metastore.Resync}, "expired (its lease", ""},
	} {
		got := gone(c.ev, 15*time.Second)
		if !strings.Contains(got, c.want) || (c.not != "" && strings.Contains(got, c.not)) {
			t.Errorf("cause %d: %q; want it to say %q and not %q", c.ev.Cause, got, c.want, c.not)
		}
	}
}
