package shm_test

import (
	"fmt"
	"testing"

	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

// TestCopySizes: writes and reads around the sizes where the copy changes
// its way (memmove's 1 MiB non-temporal threshold, sdk/memcpy's pieces
// just under it, the pool, the split over workers, memcpy's 32 MiB cache
// bound), at unaligned offsets on both sides, land exactly: the bytes of
// the range and not one byte beside it.
func TestCopySizes(t *testing.T) {
	const size = 48 << 20
	a, local, rw := writePair(t, "copy_workers = 2", size)
	for i, c := range []struct{ n, loff, roff uint64 }{
		{1<<20 - 1, 3, 5},    // inline, under the threshold
		{1 << 20, 0, 1},      // inline, at it: pieces
		{1<<20 + 1, 7, 0},    // pooled, one worker
		{3<<20 + 5, 1, 4099}, // pooled, one worker, several pieces
		{9<<20 + 7, 5, 3},    // split over both workers, in cache
		{40<<20 + 3, 1, 9},   // split, above memcpy's cache bound
	} {
		for _, op := range []ring.Op{ring.OpWrite, ring.OpRead} {
			fill(local, uint64(2*i+1))
			fill(rw, uint64(2*i+2))
			dst, src := rw, local
			doff, soff := c.roff, c.loff
			if op == ring.OpRead {
				dst, src, doff, soff = local, rw, c.loff, c.roff
			}
			before := append([]byte(nil), dst...)
			got := a.do(t, ring.Descriptor{Op: op, LocalRegion: 1, LocalOffset: c.loff, Peer: 1, RemoteRegion: 1, RemoteOffset: c.roff, Length: c.n})
			if got.Status != ring.StatusOK || got.N != c.n {
				t.Fatalf("%v of %d bytes (local+%d, remote+%d): %v, %d bytes", op, c.n, c.loff, c.roff, got.Status, got.N)
			}
			what := fmt.Sprintf("%v of %d bytes (local+%d, remote+%d)", op, c.n, c.loff, c.roff)
			plugintest.MustEqual(t, what+": the copied range", dst[doff:doff+c.n], src[soff:soff+c.n])
			plugintest.MustEqual(t, what+": the bytes before the range", dst[:doff], before[:doff])
			plugintest.MustEqual(t, what+": the bytes after the range", dst[doff+c.n:], before[doff+c.n:])
		}
	}
	if s := a.stats(t); s["copies_split"] != 4 || s["copies_inline"] != 4 {
		t.Errorf("copies_split %d, copies_inline %d: want 4 and 4 (the cases did not take the paths they name)", s["copies_split"], s["copies_inline"])
	}
}
