package remotes

import (
	"context"
	"testing"
	"time"
)

// TestCounts: opens, retirements (a peer's new incarnation), a handle
// whose descriptor left the metastore, and a close, as metrics read them.
func TestCounts(t *testing.T) {
	ctx := context.Background()
	ts := []Transport{newTransport("tcp")}
	tb := New("here", time.Second)
	if c := tb.Counts(); c != (Counts{}) {
		t.Fatalf("empty table counts %+v", c)
	}
	if _, err := tb.Open(ctx, "b", "segments/b", desc(7, 0x1000), ts); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Open(ctx, "b", "segments/b", desc(7, 0x1000), ts); err != nil { // the same life: no new handle
		t.Fatal(err)
	}
	if _, err := tb.Open(ctx, "b", "segments/b", desc(8, 0x1000), ts); err != nil { // a new life: 1 retired, 2 opened
		t.Fatal(err)
	}
	if _, err := tb.Open(ctx, "c", "segments/c", desc(9, 0x1000), ts); err != nil {
		t.Fatal(err)
	}
	tb.Apply(ctx, "segments/c", Change{Deleted: true}, ts, time.Unix(0, 0))
	want := Counts{Open: 3, Retired: 1, Gone: 1, Opened: 3, Retirements: 1}
	if c := tb.Counts(); c != want {
		t.Fatalf("counts %+v, want %+v", c, want)
	}
	if err := tb.Close(ctx, 1, ts); err != nil {
		t.Fatal(err)
	}
	want.Open, want.Retired = 2, 0
	if c := tb.Counts(); c != want {
		t.Fatalf("after closing the retired handle: counts %+v, want %+v", c, want)
	}
}
