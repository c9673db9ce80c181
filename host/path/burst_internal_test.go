package path

import (
	"testing"

	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/sdk/ring"
)

// TestSubmitBurstPublishes pins when a Submit call's descriptors become
// visible to the plugin (submitCtx.end): a burst at a time while more
// of the call follow, another lane's held ones before a put on a new
// lane, and everything at the call's end (publishHeld). The plugin's
// side is a real consumer attached to the lanes' memfd rings.
func TestSubmitBurstPublishes(t *testing.T) {
	lane := func(id uint32) (*progress.Lane, *ring.Ring) {
		l, err := progress.NewLane(id, 64, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close(false) })
		c, err := ring.Attach(l.SQ.Mem())
		if err != nil {
			t.Fatal(err)
		}
		return l, c
	}
	a, ca := lane(1)
	b, cb := lane(2)
	var sc submitCtx
	token := uint64(0)
	put := func(l *progress.Lane, more bool) {
		t.Helper()
		token++
		sc.more = more
		l.Begin()
		if err := l.Put(&ring.Descriptor{Token: token, Op: ring.OpWrite, Length: 4096}, nil, 0); err != nil {
			t.Fatal(err)
		}
		sc.end(l)
	}
	out := make([]ring.Descriptor, 64)
	seen := func(c *ring.Ring, want int, when string) {
		t.Helper()
		if n := c.Dequeue(out); n != want {
			t.Errorf("%s: the plugin sees %d descriptors, want %d", when, n, want)
		}
	}

	for range publishBurst - 1 {
		put(a, true)
	}
	seen(ca, 0, "a burst not yet full")
	put(a, true)
	seen(ca, publishBurst, "a full burst")

	put(a, true)
	put(a, true)
	seen(ca, 0, "two held")
	put(b, true)
	seen(ca, 2, "a put on another lane")
	seen(cb, 0, "the other lane's first, with more to come")

	put(b, false)
	seen(cb, 2, "the call's last request")

	put(a, true)
	sc.publishHeld()
	seen(ca, 1, "the call's end (publishHeld)")
	if sc.held != nil || sc.nHeld != 0 {
		t.Errorf("after publishHeld the call still holds %d on lane %v", sc.nHeld, sc.held)
	}
	sc.publishHeld() // nothing held: nothing to do
	seen(ca, 0, "publishHeld with nothing held")
}
