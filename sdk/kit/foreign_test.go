package kit_test

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit"
	"github.com/ferrydev/ferry/sdk/ring"
)

func foreign(mem []byte) *sdk.Foreign {
	return &sdk.Foreign{PID: os.Getpid(), Addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mem)))), Length: uint64(len(mem))}
}

// TestForeignRegions: a transport takes foreign memory only when it opted
// in; Local then checks the range against the foreign length and hands
// back no bytes, and CopyIn/CopyOut move them within the region only.
func TestForeignRegions(t *testing.T) {
	mem := bytes.Repeat([]byte{7}, 100)
	r := sdk.Region{ID: 3, Perm: sdk.PermLocal, FD: -1, Foreign: foreign(mem)}

	plain := started(t)
	err := plain.RegisterMemory(r, newRegion)
	if err == nil || !strings.Contains(err.Error(), "allocated itself is not supported") || !strings.Contains(err.Error(), "allocate it through the engine") {
		t.Fatalf("foreign region on a transport that did not opt in: %v", err)
	}
	if plain.Regions.Len() != 0 {
		t.Fatal("a refused foreign region was added")
	}

	b := started(t)
	b.ForeignMemory = true
	if err := b.RegisterMemory(r, newRegion); err != nil {
		t.Fatal(err)
	}
	if err := b.AddPeer(1, &peer{id: 1}, nil); err != nil {
		t.Fatal(err)
	}
	var c completions
	d := ring.Descriptor{Token: 1, Op: ring.OpWrite, Peer: 1, LocalRegion: 3, LocalOffset: 10, Length: 20}
	g, got, ok := b.Local(&d, &c)
	if !ok || got != nil || g.Foreign == nil || g.Len() != 100 {
		t.Fatalf("Local on a foreign region: ok %v, bytes %v, region %+v", ok, got, g)
	}
	dst := make([]byte, 20)
	if err := kit.CopyIn(g.Foreign, 10, dst); err != nil || !bytes.Equal(dst, mem[10:30]) {
		t.Fatalf("CopyIn: %v, %v", err, dst)
	}
	if err := kit.CopyOut(g.Foreign, 90, []byte("0123456789")); err != nil || string(mem[90:]) != "0123456789" {
		t.Fatalf("CopyOut: %v, %q", err, mem[90:])
	}
	if err := kit.CopyOut(g.Foreign, 91, []byte("0123456789")); err == nil {
		t.Fatal("CopyOut past the region's end succeeded")
	}
	if err := kit.CopyIn(g.Foreign, 95, dst); err == nil {
		t.Fatal("CopyIn past the region's end succeeded")
	}
	g.Release()
	d.Token, d.LocalOffset = 2, 90
	if _, _, ok := b.Local(&d, &c); ok || c.status(t, 2) != ring.StatusOutOfBounds {
		t.Fatalf("range past a foreign region's end: ok %v, %v", ok, c.status(t, 2))
	}
}

// TestBounce: a bounce buffer has the length asked for and comes back
// from its pool without an allocation.
func TestBounce(t *testing.T) {
	for _, n := range []int{1, 4096, 4097, 1 << 20, 64 << 20, 64<<20 + 1} {
		b := kit.GetBounce(n)
		if len(b.B) != n {
			t.Fatalf("GetBounce(%d) has %d bytes", n, len(b.B))
		}
		b.Put()
	}
	kit.GetBounce(65536).Put()
	if n := testing.AllocsPerRun(100, func() { kit.GetBounce(65536).Put() }); n != 0 {
		t.Errorf("a pooled bounce buffer costs %v allocations", n)
	}
}
