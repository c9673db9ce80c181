package tcp_test

import (
	"fmt"
	"testing"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

// TestBulkNice: with priority connections, the bulk connection's writer
// and reader run on threads at bulk_nice from the start, and the peer's
// goroutine serving it from its first bulk-sized frame; the priority
// connection's goroutines do not, nor does anything without priority
// connections (a bulk slot then carries high-priority work too). Once
// the engines stop, no thread stays nice.
func TestBulkNice(t *testing.T) {
	nice := plugintest.BulkNice(t)
	for _, c := range []struct {
		name, cfg  string
		afterWrite int
	}{
		{"priority_connection", fmt.Sprintf("bulk_nice = %d", nice), 3},
		{"priority_connection=false", fmt.Sprintf("bulk_nice = %d\npriority_connection = false", nice), 0},
		{"bulk_nice=0", "bulk_nice = 0", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Cleanup(func() { // after both engines stopped
				if got := plugintest.NiceThreads(nice); got != 0 {
					t.Errorf("after Stop %d threads stay at niceness %d", got, nice)
				}
			})
			w := newWorld(t, 4<<20, "connections_per_peer = 1\n"+c.cfg)
			fill(w.src, 5)
			d := write(aSrc, 0, bRW, 0, 2<<20)
			d.Prio = uint8(sdk.PriorityLow)
			if got := w.do(t, d); got.Status != ring.StatusOK {
				t.Fatalf("low write: %v", got.Status)
			}
			plugintest.MustEqual(t, "low write", w.rw[:2<<20], w.src[:2<<20])
			h := read(aDst, 0, bRO, 0, 4096)
			h.Prio = uint8(sdk.PriorityHigh)
			if got := w.do(t, h); got.Status != ring.StatusOK {
				t.Fatalf("high read: %v", got.Status)
			}
			plugintest.MustEqual(t, "high read", w.dst[:4096], w.ro[:4096])
			if got := plugintest.NiceThreads(nice); got != c.afterWrite {
				t.Errorf("after a 2 MiB low write and a high read: %d threads at niceness %d, want %d (writer, reader, the peer's server)", got, nice, c.afterWrite)
			}
		})
	}
}

// TestBulkChunk: with bulk_chunk far below the frame size, a bulk
// connection's low write and its low read back move their bytes whole (the
// sender's writev, the listener's readv of the payload and its writev of
// a read's answer, the dialer's readv of it, all in many calls), and the
// priority connection, which is not chunked, still serves a high read.
func TestBulkChunk(t *testing.T) {
	w := newWorld(t, 4<<20, "connections_per_peer = 1\nbulk_nice = 0\nbulk_chunk = \"16KiB\"")
	fill(w.src, 7)
	fill(w.ro, 8)
	const n = 2<<20 + 4096
	d := write(aSrc, 0, bRW, 0, n)
	d.Prio = uint8(sdk.PriorityLow)
	if got := w.do(t, d); got.Status != ring.StatusOK {
		t.Fatalf("low write: %v", got.Status)
	}
	plugintest.MustEqual(t, "low write", w.rw[:n], w.src[:n])
	r := read(aDst, 0, bRW, 0, n)
	r.Prio = uint8(sdk.PriorityLow)
	if got := w.do(t, r); got.Status != ring.StatusOK {
		t.Fatalf("low read: %v", got.Status)
	}
	plugintest.MustEqual(t, "low read", w.dst[:n], w.src[:n])
	h := read(aDst, n, bRO, 4096, 4096)
	h.Prio = uint8(sdk.PriorityHigh)
	if got := w.do(t, h); got.Status != ring.StatusOK {
		t.Fatalf("high read: %v", got.Status)
	}
	plugintest.MustEqual(t, "high read", w.dst[n:n+4096], w.ro[4096:8192])
}
