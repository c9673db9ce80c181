package shm_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Memory the application allocated itself ("foreign") on this side: shm
// copies it with cross-memory attach straight to or from the peer's
// mapped region, no extra copy. Both engines run in this process, so the
// "host" whose memory the plugin reaches is this process, which
// process_vm_readv allows without any grant.

const aForeign = 30 // on A: foreign, local

func foreignRegion(id uint32, mem []byte, perm sdk.Perm) sdk.Region {
	return sdk.Region{ID: id, Perm: perm, Kind: "cpu", FD: -1,
		Foreign: &sdk.Foreign{PID: os.Getpid(), Addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mem)))), Length: uint64(len(mem))}}
}

func (e *engine) registerForeign(t testing.TB, id uint32, mem []byte, perm sdk.Perm) {
	t.Helper()
	if err := e.tr.RegisterMemory(context.Background(), foreignRegion(id, mem, perm)); err != nil {
		t.Fatalf("register foreign %d: %v", id, err)
	}
}

// TestDescribeForeignLocalOnly: shm declares that it takes memory the
// application allocated itself, on this side only.
func TestDescribeForeignLocalOnly(t *testing.T) {
	a := startEngine(t, "a", 1, "")
	info, err := a.tr.Describe(t.Context())
	if err != nil || !info.ForeignMemory || !info.ForeignLocalOnly {
		t.Fatalf("describe: %+v, %v; want ForeignMemory and ForeignLocalOnly", info, err)
	}
}

// TestForeignLocalRoundTrip moves verified bytes between Go heap memory on
// A and B's mapped region, both ways, inline, pooled and split over the
// workers, at unaligned offsets; nothing outside the range changes, and
// every byte is counted as copied by cross-memory attach.
func TestForeignLocalRoundTrip(t *testing.T) {
	const size = 16<<20 + 8192
	a, _, rw := writePair(t, "copy_workers = 2", size)
	heap := make([]byte, size) // the test keeps it alive
	a.registerForeign(t, aForeign, heap, sdk.PermLocal)
	var moved uint64
	for i, n := range []uint64{1, 4097, 1<<20 + 3, 2 << 20, 16<<20 + 1} {
		for _, c := range []struct {
			name     string
			d        ring.Descriptor
			src, dst []byte
			so, do   uint64
		}{
			{"write", ring.Descriptor{Op: ring.OpWrite, LocalRegion: aForeign, LocalOffset: 3, Peer: 1, RemoteRegion: 1, RemoteOffset: 4093, Length: n}, heap, rw, 3, 4093},
			{"read", ring.Descriptor{Op: ring.OpRead, LocalRegion: aForeign, LocalOffset: 4091, Peer: 1, RemoteRegion: 1, RemoteOffset: 7, Length: n}, rw, heap, 7, 4091},
		} {
			t.Run(fmt.Sprintf("%s/%d", c.name, n), func(t *testing.T) {
				win := min(uint64(size), max(c.so, c.do)+n+4096)
				fill(c.src[:win], uint64(100+i))
				fill(c.dst[:win], uint64(200+i))
				before := append([]byte(nil), c.dst[:win]...)
				got := a.do(t, c.d)
				if got.Status != ring.StatusOK || got.N != n {
					t.Fatalf("%s %d: %v, %d bytes", c.name, n, got.Status, got.N)
				}
				plugintest.MustEqual(t, "moved range", c.dst[c.do:c.do+n], c.src[c.so:c.so+n])
				plugintest.MustEqual(t, "bytes before the range", c.dst[:c.do], before[:c.do])
				plugintest.MustEqual(t, "bytes after the range", c.dst[c.do+n:win], before[c.do+n:])
				moved += n
			})
		}
	}
	st := a.stats(t)
	if st["foreign_bytes_copied"] != moved {
		t.Errorf("foreign_bytes_copied %d, want the %d bytes moved", st["foreign_bytes_copied"], moved)
	}
	if st["copies_inline"] == 0 || st["copies_split"] == 0 || st["worker0_chunks"] == 0 || st["worker1_chunks"] == 0 {
		t.Errorf("copies inline %d, split %d, worker chunks %d/%d: want inline, pooled and split copies of app memory",
			st["copies_inline"], st["copies_split"], st["worker0_chunks"], st["worker1_chunks"])
	}
	// Bounds are the foreign length's.
	if got := a.do(t, ring.Descriptor{Op: ring.OpWrite, LocalRegion: aForeign, LocalOffset: size - 10, Peer: 1, RemoteRegion: 1, Length: 11}); got.Status != ring.StatusOutOfBounds {
		t.Errorf("local range past a foreign region: %v, want out of bounds", got.Status)
	}
}

// TestForeignRemoteRefused: a peer cannot reach memory its application
// allocated itself through shm (there is no memfd to hand over): the
// descriptor fails with StatusUnsupported and nothing is mapped.
func TestForeignRemoteRefused(t *testing.T) {
	a := startEngine(t, "a", 1, "")
	b := startEngine(t, "b", 2, "")
	a.region(t, 1, 1<<20, sdk.PermLocal, "a-local")
	heap := make([]byte, 1<<20)
	b.registerForeign(t, 5, heap, sdk.PermRemoteReadWrite)
	a.open(t, 1, b)
	for _, op := range []ring.Op{ring.OpWrite, ring.OpRead} {
		if got := a.do(t, ring.Descriptor{Op: op, LocalRegion: 1, Peer: 1, RemoteRegion: 5, Length: 4096}); got.Status != ring.StatusUnsupported {
			t.Errorf("%v to a peer's app memory: %v, want %v", op, got.Status, ring.StatusUnsupported)
		}
	}
	if m := a.stats(t)["mapped_bytes"]; m != 0 {
		t.Errorf("mapped_bytes %d after refused queries", m)
	}
}

// TestForeignLocalFreed unmaps registered app memory, as an application
// that breaks the contract would: every copy on it fails with StatusIO,
// the peer's memory is untouched, the fault is counted, and the region
// still unregisters.
func TestForeignLocalFreed(t *testing.T) {
	const size = 4 << 20
	a, _, rw := writePair(t, "", size)
	// Everything this test allocates is allocated before the unmap (the
	// Go heap could otherwise grow into the hole and make the memory
	// valid again),
	// and the peer's region is mapped first (a later mapping could land
	// in the hole too).
	if got := a.do(t, ring.Descriptor{Op: ring.OpRead, LocalRegion: 1, Peer: 1, RemoteRegion: 1, Length: 4096}); got.Status != ring.StatusOK {
		t.Fatalf("map the peer's region: %v", got.Status)
	}
	fill(rw, 5)
	before := append([]byte(nil), rw...)
	m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	a.registerForeign(t, aForeign, m, sdk.PermLocal)
	if err := unix.Munmap(m); err != nil {
		t.Fatal(err)
	}
	for _, n := range []uint64{65536, 3 << 20} { // inline and pooled
		for _, op := range []ring.Op{ring.OpWrite, ring.OpRead} {
			if got := a.do(t, ring.Descriptor{Op: op, LocalRegion: aForeign, Peer: 1, RemoteRegion: 1, Length: n}); got.Status != ring.StatusIO {
				t.Errorf("%v of %d bytes on freed app memory: %v, want %v", op, n, got.Status, ring.StatusIO)
			}
		}
	}
	plugintest.MustEqual(t, "the peer's region", rw, before)
	if a.stats(t)["foreign_copy_faults"] == 0 {
		t.Error("foreign_copy_faults not counted")
	}
	if err := a.tr.UnregisterMemory(context.Background(), aForeign); err != nil {
		t.Errorf("unregister the freed region: %v", err)
	}
}
