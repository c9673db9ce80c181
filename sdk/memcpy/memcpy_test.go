package memcpy

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
)

// fill writes a pattern that differs at every byte and with seed.
func fill(b []byte, seed uint64) {
	x := seed | 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
}

// checkCopy copies n bytes from src at soff to dst at doff with do, and
// fails unless the n bytes arrived exactly, nothing around them in dst
// changed, and do returned n.
func checkCopy(t *testing.T, name string, n, soff, doff int, do func(dst, src []byte) int) {
	t.Helper()
	const guard = 64
	src := make([]byte, soff+n+guard)
	dst := make([]byte, doff+n+guard)
	fill(src, uint64(n)*31+uint64(soff))
	fill(dst, uint64(n)*17+uint64(doff)+1)
	want := bytes.Clone(dst)
	copy(want[doff:doff+n], src[soff:soff+n])
	if got := do(dst[doff:doff+n], src[soff:soff+n]); got != n {
		t.Fatalf("%s: copying %d bytes (src+%d, dst+%d) returned %d", name, n, soff, doff, got)
	}
	if !bytes.Equal(dst, want) {
		i := 0
		for dst[i] == want[i] {
			i++
		}
		t.Fatalf("%s: copying %d bytes (src+%d, dst+%d): first wrong byte at dst offset %d (of the copy: %d)", name, n, soff, doff, i, i-doff)
	}
}

// TestSmallSizes: every size up to 300 at unaligned offsets, through Copy
// and through the chunked loop with pieces small enough that these sizes
// cross several piece boundaries.
func TestSmallSizes(t *testing.T) {
	for n := 0; n <= 300; n++ {
		for _, off := range [][2]int{{0, 0}, {1, 0}, {0, 3}, {5, 7}, {13, 64}} {
			checkCopy(t, "Copy", n, off[0], off[1], Copy)
			for _, size := range []int{1, 7, 64, 256} {
				checkCopy(t, fmt.Sprintf("chunked by %d", size), n, off[0], off[1], func(d, s []byte) int { return chunked(d, s, size) })
			}
		}
	}
}

// bothPaths runs f twice, with cached copies from repFrom on memmove and
// on REP MOVSB, whatever the CPU, and restores useRep.
func bothPaths(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	defer func(was bool) { useRep = was }(useRep)
	for _, on := range []bool{false, true} {
		useRep = on
		t.Run(fmt.Sprintf("rep=%v", on), f)
	}
}

// TestPieceBoundaries: sizes around REP MOVSB's threshold, memmove's
// non-temporal threshold and Copy's pieces, both through the cached path
// (a cache bound above them all) and through plain copy (a bound below
// them), with REP MOVSB and without.
func TestPieceBoundaries(t *testing.T) {
	var sizes []int
	for _, base := range []int{repFrom, 64 << 10, ntFrom, piece, 2 * piece, 3 * piece} {
		sizes = append(sizes, base-1, base, base+1)
	}
	sizes = append(sizes, 3*piece+4095)
	bothPaths(t, func(t *testing.T) {
		for _, n := range sizes {
			for _, off := range [][2]int{{0, 0}, {1, 0}, {0, 1}, {7, 13}, {4096, 8}} {
				checkCopy(t, "cached", n, off[0], off[1], func(d, s []byte) int { return copyIn(d, s, n, 1<<40) })
				checkCopy(t, "uncached", n, off[0], off[1], func(d, s []byte) int { return copyIn(d, s, n, 0) })
				checkCopy(t, "Piece", n, off[0], off[1], func(d, s []byte) int { return Piece(d, s, n) })
				checkCopy(t, "Copy", n, off[0], off[1], Copy)
			}
		}
	})
}

// TestRepCopy: REP MOVSB itself (where the CPU has it: amd64) at every
// size up to 300 and at sizes around its threshold, at unaligned offsets.
func TestRepCopy(t *testing.T) {
	do := func(d, s []byte) int { repCopy(d, s); return len(d) }
	for n := 0; n <= 300; n++ {
		for _, off := range [][2]int{{0, 0}, {1, 0}, {0, 3}, {5, 7}, {13, 64}} {
			checkCopy(t, "repCopy", n, off[0], off[1], do)
		}
	}
	for _, n := range []int{repFrom - 1, repFrom, repFrom + 1, 1<<20 + 7} {
		for _, off := range [][2]int{{0, 0}, {1, 0}, {0, 63}, {4095, 1}} {
			checkCopy(t, "repCopy", n, off[0], off[1], do)
		}
	}
}

// TestLengths: like copy, Copy moves the shorter of the two.
func TestLengths(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		for _, c := range []struct{ dst, src int }{{0, 5}, {5, 0}, {3 << 20, 2 << 20}, {2 << 20, 3 << 20}, {ntFrom, ntFrom + 1}, {repFrom + 9, repFrom + 1}} {
			src := make([]byte, c.src)
			fill(src, 9)
			dst := make([]byte, c.dst)
			want := make([]byte, c.dst)
			wn := copy(want, src)
			if n := copyIn(dst, src, min(c.dst, c.src), 1<<40); n != wn || !bytes.Equal(dst, want) {
				t.Fatalf("dst %d bytes, src %d: copied %d bytes (want %d) or the wrong ones", c.dst, c.src, n, wn)
			}
		}
	})
}

// TestOverlap: overlapping ranges in either direction come out as copy
// makes them, though the chunked path copies forward only.
func TestOverlap(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		for _, n := range []int{3 << 20, repFrom + 5} {
			for _, shift := range []int{-4096 - 1, -1, 1, 4096 + 1, piece, -piece} {
				buf := make([]byte, n+2*piece+8192)
				fill(buf, 5)
				want := bytes.Clone(buf)
				base := piece + 4096
				copy(want[base+shift:base+shift+n], want[base:base+n])
				if got := copyIn(buf[base+shift:base+shift+n], buf[base:base+n], n, 1<<40); got != n || !bytes.Equal(buf, want) {
					t.Fatalf("overlapping copy of %d bytes shifted by %d: returned %d, or bytes differ from copy's", n, shift, got)
				}
			}
		}
	})
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{"491520K": 491520 << 10, "32M": 32 << 20, "1G": 1 << 30, "12345": 12345, "": 0, "K": 0, "-4K": 0, "x": 0} {
		if got := parseSize(in); got != want {
			t.Errorf("parseSize(%q) = %d, want %d", in, got, want)
		}
	}
}

// TestCachedMax: half the last-level cache this machine reports (or the
// assumed one where it reports none), at most maxCached.
func TestCachedMax(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		if CachedMax() != 0 {
			t.Fatalf("CachedMax() = %d on %s, want 0: Copy is copy there", CachedMax(), runtime.GOARCH)
		}
		return
	}
	llc := lastLevelCache()
	want := min(llc/2, maxCached)
	if llc <= 0 {
		want = defaultLLC / 2
	}
	if got := CachedMax(); got != want || got < ntFrom {
		t.Fatalf("CachedMax() = %d, want %d (last-level cache %d bytes)", got, want, llc)
	}
	t.Logf("last-level cache %d bytes (0: unknown), CachedMax %d", llc, CachedMax())
}
