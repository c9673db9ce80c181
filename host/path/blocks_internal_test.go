package path

import (
	"testing"
	"time"
)

// TestWallClock: a wallClock tells the wall time from a reading less
// than wallRefresh old plus the monotonic time since, and takes a new
// reading once its reading is older. A reading whose wall time is set an
// hour off shows which one it used.
func TestWallClock(t *testing.T) {
	const slack = int64(time.Millisecond)
	var c wallClock
	before := time.Now().UnixNano()
	got := c.now()
	after := time.Now().UnixNano()
	if got < before-slack || got > after+slack {
		t.Fatalf("first now() = %d, want within [%d, %d]", got, before, after)
	}
	// A fresh reading is used: its wall time, plus the time since.
	r := time.Now()
	c.base.Store(&wallReading{t: r, unix: r.UnixNano() + int64(time.Hour)})
	before = time.Now().UnixNano() + int64(time.Hour)
	got = c.now()
	after = time.Now().UnixNano() + int64(time.Hour)
	if got < before-slack || got > after+slack {
		t.Fatalf("now() from a fresh reading an hour ahead = %d, want within [%d, %d]", got, before, after)
	}
	// A reading older than wallRefresh is replaced.
	old := r.Add(-2 * wallRefresh)
	c.base.Store(&wallReading{t: old, unix: old.UnixNano() + int64(time.Hour)})
	before = time.Now().UnixNano()
	got = c.now()
	after = time.Now().UnixNano()
	if got < before-slack || got > after+slack {
		t.Fatalf("now() from a stale reading = %d, want a new reading within [%d, %d]", got, before, after)
	}
	if b := c.base.Load(); b.unix < before-slack || b.unix > after+slack {
		t.Fatalf("the stale reading was not replaced: %+v", b)
	}
}
