package metastore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host/metastore/metastoretest"
)

// A Redis string may hold 512 MiB; a value over MaxValueSize, written by
// someone else, is refused by Get without being read whole, is ignored by
// the notifying watch and left out of the polling one's listing, and the
// other keys read as before. A user whose ACL predates GETRANGE is still
// served (through GET).
func TestRedisValueCapped(t *testing.T) {
	if !available(t, "redis-server", "redis-server") {
		t.Skip("no redis-server")
	}
	srv := metastoretest.NewRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := NewRedis(ctx, RedisOptions{Addr: srv.Addr, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	big := strings.Repeat("x", MaxValueSize+1)
	must(t, r.client.Set(ctx, "ferry/segments/big", big, 0).Err())
	must(t, r.Put(ctx, "ferry/segments/at", []byte(big[:MaxValueSize])))
	must(t, r.Put(ctx, "ferry/segments/empty", []byte{}))

	_, err = r.Get(ctx, "ferry/segments/big")
	if !errors.Is(err, errTooLarge) || !strings.Contains(err.Error(), `"ferry/segments/big"`) || len(err.Error()) > 512 {
		t.Fatalf("Get of a value over the cap: %v", err)
	}
	if v, err := r.Get(ctx, "ferry/segments/at"); err != nil || len(v) != MaxValueSize {
		t.Fatalf("Get of a value at the cap: %d bytes, %v", len(v), err)
	}
	if v, err := r.Get(ctx, "ferry/segments/empty"); err != nil || v == nil || len(v) != 0 {
		t.Fatalf("Get of an empty value: %q, %v", v, err)
	}
	if _, err := r.Get(ctx, "ferry/segments/none"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of an absent key: %v", err)
	}

	got, err := r.list(ctx, "ferry/segments/")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got["ferry/segments/big"]; ok || len(got["ferry/segments/at"]) != MaxValueSize || got["ferry/segments/empty"] == nil || len(got) != 2 {
		t.Fatalf("the polling watch's listing holds %d keys (big: %v); want at and empty", len(got), got["ferry/segments/big"] != nil)
	}
	if e, ok := r.event(ctx, "ferry/segments/big", "set"); ok {
		t.Fatalf("a notification for the oversized key gave event %v", e.Kind)
	}

	// An ACL from before GETRANGE: GET still reads.
	must(t, r.client.Do(ctx, "ACL", "SETUSER", "old", "on", ">pw", "~*", "&*", "+@all", "-getrange").Err())
	old, err := NewRedis(ctx, RedisOptions{Addr: srv.Addr, Username: "old", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if v, err := old.Get(ctx, "ferry/segments/at"); err != nil || len(v) != MaxValueSize {
		t.Fatalf("Get without +getrange: %d bytes, %v", len(v), err)
	}
	if got, err := old.list(ctx, "ferry/segments/"); err != nil || len(got) != 3 {
		t.Fatalf("listing without +getrange: %d keys, %v; want all 3 (MGET)", len(got), err)
	}
}
