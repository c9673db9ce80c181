package publish

import (
	"bytes"
	"context"
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
