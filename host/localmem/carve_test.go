package localmem

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
)

var page = os.Getpagesize()

// fileSize returns fd's size.
func fileSize(t *testing.T, fd int) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	return st.Size
}

// mapFile maps n bytes of fd shared and read-write, as a plugin would.
func mapFile(t *testing.T, fd int, off int64, n int) []byte {
	t.Helper()
	m, err := unix.Mmap(fd, off, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return m
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
}

// filledTable is allocTable's table and memory, with the memory filled
// by fill with seed and a copy of those bytes in want.
func filledTable(t *testing.T, owner string, size int, seed byte) (tb *Table, mem, want []byte) {
	t.Helper()
	tb, mem = allocTable(t, owner, size)
	fill(mem, seed)
	return tb, mem, bytes.Clone(mem)
}

// TestCarveSharesExactlyTheRegion registers a page-aligned remote-read
// sub-range of an allocation: the plugin gets a memfd of exactly the
// region's bytes at offset 0, the application's slice keeps its address
// and bytes and is shared with that memfd both ways, and the allocation's
// memfd no longer holds the range.
func TestCarveSharesExactlyTheRegion(t *testing.T) {
	ctx := context.Background()
	tb, mem, want := filledTable(t, "carve", 4*page, 1)
	p := Addr(mem)
	allocFD := tb.allocs[p].region.FD()
	pl := newFake("shm")
	if err := tb.Register(ctx, p+uintptr(page), uintptr(2*page), sdk.PermRemoteRead, []Plugin{pl}); err != nil {
		t.Fatal(err)
	}
	fd, off := pl.fds[1], pl.regions[1]
	if fd == allocFD || off != 0 {
		t.Fatalf("plugin got fd %d offset %d; want a memfd of its own (the allocation's is %d) at 0", fd, off, allocFD)
	}
	if got := fileSize(t, fd); got != int64(2*page) {
		t.Fatalf("region memfd is %d bytes, want exactly the region's %d", got, 2*page)
	}
	if Addr(mem) != p || !bytes.Equal(mem, want) {
		t.Fatal("carving moved or changed the application's bytes")
	}
	view := mapFile(t, fd, 0, 2*page)
	if !bytes.Equal(view, want[page:3*page]) {
		t.Fatal("the region memfd does not hold the region's bytes")
	}
	mem[page+5] ^= 0xff
	if view[5] != mem[page+5] {
		t.Fatal("a write through the application's slice is not seen in the region memfd")
	}
	view[7] ^= 0xff
	if mem[page+7] != view[7] {
		t.Fatal("a write through the region memfd is not seen in the application's slice")
	}
	// The allocation's memfd has a hole where the region was: the region's
	// bytes are not reachable through it any more.
	hole := make([]byte, 2*page)
	if _, err := unix.Pread(allocFD, hole, int64(page)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(hole, make([]byte, 2*page)) {
		t.Fatal("the allocation's memfd still holds the carved range")
	}
	// The bytes outside the region are untouched, and still in the
	// allocation's memfd.
	out := make([]byte, page)
	if _, err := unix.Pread(allocFD, out, 0); err != nil || !bytes.Equal(out, want[:page]) {
		t.Fatalf("the allocation's memfd lost the bytes before the region (%v)", err)
	}

	// Unregister puts the bytes back: the slice keeps them (with the writes
	// made meanwhile), the allocation's memfd holds them again, and the
	// carved memfd no longer aliases the application's memory.
	cur := bytes.Clone(mem)
	held := mapFile(t, fd, 0, 2*page) // a peer that did not let go
	b, err := tb.Remove(uint64(p) + uint64(page))
	if err != nil {
		t.Fatal(err)
	}
	tb.Unregister(ctx, b.Region, []Plugin{pl}, func(p Plugin, err error) { t.Errorf("%s: %v", p.Name(), err) })
	if !bytes.Equal(mem, cur) || Addr(mem) != p {
		t.Fatal("uncarving changed the application's bytes")
	}
	if _, err := unix.Pread(allocFD, hole, int64(page)); err != nil || !bytes.Equal(hole, cur[page:3*page]) {
		t.Fatalf("the allocation's memfd did not get the region's bytes back (%v)", err)
	}
	mem[page] ^= 0x55
	if held[0] == mem[page] {
		t.Fatal("after Unregister a mapping of the carved memfd still sees the application's writes")
	}
	if len(tb.carves) != 0 {
		t.Fatalf("%d carves left after Unregister", len(tb.carves))
	}
}

// TestCarveRules: which registrations are carved, and what the plugin gets
// for each.
func TestCarveRules(t *testing.T) {
	ctx := context.Background()
	pg := uintptr(page)
	cases := []struct {
		name    string
		alloc   int
		off, n  uintptr
		perm    sdk.Perm
		carved  bool
		fileLen int64 // the size of the file the plugin gets
	}{
		{"whole allocation of whole pages", 4 * page, 0, 4 * pg, sdk.PermRemoteReadWrite, false, int64(4 * page)},
		{"whole allocation of an odd size", 5000, 0, 5000, sdk.PermRemoteRead, true, 5000},
		{"page-aligned sub-range", 4 * page, pg, pg, sdk.PermRemoteReadWrite, true, int64(page)},
		{"aligned start, ends at the allocation's odd end", 2*page + 100, pg, pg + 100, sdk.PermRemoteRead, true, int64(page + 100)},
		{"unaligned start", 4 * page, 100, pg, sdk.PermRemoteRead, false, int64(4 * page)},
		{"aligned start, unaligned end inside", 4 * page, 0, pg + 1, sdk.PermRemoteRead, false, int64(4 * page)},
		{"local-only sub-range", 4 * page, pg, pg, sdk.PermLocal, false, int64(4 * page)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb, mem, want := filledTable(t, "rules", c.alloc, 3)
			p := Addr(mem)
			pl := newFake("shm")
			if err := tb.Register(ctx, p+c.off, c.n, c.perm, []Plugin{pl}); err != nil {
				t.Fatal(err)
			}
			carved := pl.fds[1] != tb.allocs[p].region.FD()
			if carved != c.carved || fileSize(t, pl.fds[1]) != c.fileLen {
				t.Fatalf("carved %v, file %d bytes; want carved %v, file %d bytes", carved, fileSize(t, pl.fds[1]), c.carved, c.fileLen)
			}
			if wantOff := uint64(c.off); !carved && pl.regions[1] != wantOff || carved && pl.regions[1] != 0 {
				t.Fatalf("offset %d in the file", pl.regions[1])
			}
			if !bytes.Equal(mem, want) {
				t.Fatal("registering changed the application's bytes")
			}
		})
	}
}

// TestCarveUndoneWhenAPluginRefuses: a registration that a plugin refuses
// leaves the memory as it was, in the allocation's memfd.
func TestCarveUndoneWhenAPluginRefuses(t *testing.T) {
	ctx := context.Background()
	tb, mem, want := filledTable(t, "refuse", 2*page, 9)
	p := Addr(mem)
	bad := newFake("bad")
	bad.refuse = true
	if err := tb.Register(ctx, p, uintptr(page), sdk.PermRemoteRead, []Plugin{newFake("ok"), bad}); err == nil {
		t.Fatal("refused registration succeeded")
	}
	got := make([]byte, page)
	if _, err := unix.Pread(tb.allocs[p].region.FD(), got, 0); err != nil || !bytes.Equal(got, want[:page]) || !bytes.Equal(mem, want) {
		t.Fatalf("after a refused registration the bytes are not back in the allocation (%v)", err)
	}
	if len(tb.carves) != 0 {
		t.Fatalf("%d carves kept for a refused registration", len(tb.carves))
	}
	// And it can be registered again.
	if err := tb.Register(ctx, p, uintptr(page), sdk.PermRemoteRead, []Plugin{newFake("ok")}); err != nil {
		t.Fatal(err)
	}
}

// TestCarveManyBlocks carves 10,000 page-aligned 64 KiB blocks of one
// allocation (a KV pool cut into blocks) and frees it.
func TestCarveManyBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 carves")
	}
	ctx := context.Background()
	tb := New("many", time.Minute)
	defer tb.Close()
	const blocks, block = 10000, 64 << 10
	mem, err := tb.Allocate(blocks * block)
	if err != nil {
		t.Fatal(err)
	}
	p := Addr(mem)
	for i := range blocks {
		mem[i*block] = byte(i)
	}
	pl := newFake("shm")
	for i := range blocks {
		if err := tb.Register(ctx, p+uintptr(i*block), block, sdk.PermRemoteReadWrite, []Plugin{pl}); err != nil {
			t.Fatalf("block %d: %v", i, err)
		}
	}
	if len(tb.carves) != blocks {
		t.Fatalf("%d carves, want %d", len(tb.carves), blocks)
	}
	for i := range blocks {
		if mem[i*block] != byte(i) {
			t.Fatalf("block %d lost its bytes", i)
		}
	}
	if err := tb.Release(p); err != nil {
		t.Fatal(err)
	}
	if len(tb.carves) != 0 {
		t.Fatalf("%d carves left after Release", len(tb.carves))
	}
}

// BenchmarkCarve measures what carving costs at Register: 64 KiB blocks of
// one allocation registered remote-read-write, against local-only ones
// (not carved).
func BenchmarkCarve(b *testing.B) {
	for _, perm := range []sdk.Perm{sdk.PermLocal, sdk.PermRemoteReadWrite} {
		b.Run(fmt.Sprint(perm), func(b *testing.B) {
			ctx := context.Background()
			tb := New("bench", time.Minute)
			defer tb.Close()
			const block = 64 << 10
			mem, err := tb.Allocate(b.N * block)
			if err != nil {
				b.Fatal(err)
			}
			p := Addr(mem)
			b.SetBytes(block)
			b.ResetTimer()
			for i := range b.N {
				if err := tb.Register(ctx, p+uintptr(i*block), block, perm, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
