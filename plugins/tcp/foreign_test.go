package tcp_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Regions of memory the application allocated itself ("foreign"): the
// plugin reaches them by cross-memory attach. These tests run both ends
// in this process, so the "host" whose memory the plugin copies is this
// process too, which process_vm_readv allows without any grant.

const (
	aForeign = 30 // on A: foreign, local
	bForeign = 31 // on B: foreign, remote read-write
)

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

// TestForeignMemoryRoundTrip moves verified bytes from and to foreign
// memory on either side, the serving side too, at sizes around the bounce
// buffer classes, and counts the extra copy.
func TestForeignMemoryRoundTrip(t *testing.T) {
	const size = 4<<20 + 64
	w := newWorld(t, size, "")
	al, bl := make([]byte, size), make([]byte, size) // Go heap: the test keeps them alive
	w.a.registerForeign(t, aForeign, al, sdk.PermLocal)
	w.b.registerForeign(t, bForeign, bl, sdk.PermRemoteReadWrite)
	for i, n := range []uint64{1, 4095, 4097, 65537, 1<<20 + 3, 4 << 20} {
		for _, c := range []struct {
			name     string
			d        ring.Descriptor
			src, dst []byte
			so, do   uint64
		}{
			{"write/foreign-to-mapped", write(aForeign, 3, bRW, 5, n), al, w.rw, 3, 5},
			{"write/mapped-to-foreign", write(aSrc, 3, bForeign, 5, n), w.src, bl, 3, 5},
			{"write/foreign-to-foreign", write(aForeign, 7, bForeign, 11, n), al, bl, 7, 11},
			{"read/mapped-to-foreign", read(aForeign, 9, bRW, 7, n), w.rw, al, 7, 9},
			{"read/foreign-to-mapped", read(aDst, 9, bForeign, 7, n), bl, w.dst, 7, 9},
			{"read/foreign-to-foreign", read(aForeign, 13, bForeign, 1, n), bl, al, 1, 13},
		} {
			t.Run(fmt.Sprintf("%s/%d", c.name, n), func(t *testing.T) {
				win := min(uint64(size), max(c.so, c.do)+n+4096)
				fill(c.src[:win], uint64(100+i))
				fill(c.dst[:win], uint64(200+i))
				before := snapshot(c.dst[:win])
				got := w.do(t, c.d)
				if got.Status != ring.StatusOK || got.N != n {
					t.Fatalf("%s %d: %v, %d bytes", c.name, n, got.Status, got.N)
				}
				plugintest.MustEqual(t, "moved range", c.dst[c.do:c.do+n], c.src[c.so:c.so+n])
				plugintest.MustEqual(t, "bytes before the range", c.dst[:c.do], before[:c.do])
				plugintest.MustEqual(t, "bytes after the range", c.dst[c.do+n:win], before[c.do+n:])
			})
		}
	}
	if w.a.stat(t, "foreign_bytes_copied") == 0 || w.b.stat(t, "foreign_bytes_copied") == 0 {
		t.Errorf("foreign_bytes_copied: a %d, b %d; want both counting the extra copy",
			w.a.stat(t, "foreign_bytes_copied"), w.b.stat(t, "foreign_bytes_copied"))
	}
	// Bounds are the foreign length's, on both sides.
	if got := w.do(t, write(aForeign, size-10, bRW, 0, 11)); got.Status != ring.StatusOutOfBounds {
		t.Errorf("local range past a foreign region: %v, want out of bounds", got.Status)
	}
	if got := w.do(t, read(aDst, 0, bForeign, size-10, 11)); got.Status != ring.StatusOutOfBounds {
		t.Errorf("remote range past a foreign region: %v, want out of bounds", got.Status)
	}
}

// TestForeignMemoryFreed unmaps registered foreign memory, as an
// application that breaks the contract would: every transfer on it fails
// with StatusIO, the other side's memory is untouched, and the region
// still unregisters.
func TestForeignMemoryFreed(t *testing.T) {
	const size = 1 << 20
	w := newWorld(t, size, "")
	mapped := func() []byte {
		m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	am, bm := mapped(), mapped()
	w.a.registerForeign(t, aForeign, am, sdk.PermLocal)
	w.b.registerForeign(t, bForeign, bm, sdk.PermRemoteReadWrite)
	if err := unix.Munmap(am); err != nil {
		t.Fatal(err)
	}
	if err := unix.Munmap(bm); err != nil {
		t.Fatal(err)
	}
	fill(w.rw, 5)
	fill(w.dst, 6)
	rw, dst := snapshot(w.rw), snapshot(w.dst)
	for _, c := range []struct {
		name string
		d    ring.Descriptor
	}{
		{"write from freed local", write(aForeign, 0, bRW, 0, 65536)},
		{"read into freed local", read(aForeign, 0, bRW, 0, 65536)},
		{"write into freed remote", write(aSrc, 0, bForeign, 0, 65536)},
		{"read from freed remote", read(aDst, 0, bForeign, 0, 65536)},
	} {
		if got := w.do(t, c.d); got.Status != ring.StatusIO {
			t.Errorf("%s: %v, want %v", c.name, got.Status, ring.StatusIO)
		}
	}
	plugintest.MustEqual(t, "b's mapped region", w.rw, rw)
	plugintest.MustEqual(t, "a's mapped region", w.dst, dst)
	if w.a.stat(t, "foreign_copy_faults") == 0 || w.b.stat(t, "foreign_copy_faults") == 0 {
		t.Errorf("foreign_copy_faults not counted")
	}
	// The connection survived: mapped memory still moves.
	if got := w.do(t, write(aSrc, 0, bRW, 0, 4096)); got.Status != ring.StatusOK {
		t.Fatalf("write after the faults: %v", got.Status)
	}
	if err := w.a.tr.UnregisterMemory(context.Background(), aForeign); err != nil {
		t.Errorf("unregister a's freed region: %v", err)
	}
	if err := w.b.tr.UnregisterMemory(context.Background(), bForeign); err != nil {
		t.Errorf("unregister b's freed region: %v", err)
	}
}

// TestUnregisterForeignWaitsForInFlight is TestUnregisterWaitsForInFlight
// for foreign regions: the region's reference covers the copies through
// the bounce buffer, so nothing writes the memory after UnregisterMemory
// returned.
func TestUnregisterForeignWaitsForInFlight(t *testing.T) {
	const size = 64 << 20
	t.Run("target", func(t *testing.T) {
		w := newWorld(t, size, "")
		bl := make([]byte, size)
		w.b.registerForeign(t, bForeign, bl, sdk.PermRemoteReadWrite)
		fill(w.src, 3)
		tok := w.submit(write(aSrc, 0, bForeign, 0, size))
		// Unregister once B has the frame's header (its payload, 64 MiB,
		// is then still arriving, and its copy into bl follows): a
		// condition waited for, bounded by waitLimit, not a pause.
		for deadline := time.Now().Add(waitLimit); w.b.stat(t, "frames_in") == 0; time.Sleep(100 * time.Microsecond) {
			if time.Now().After(deadline) {
				t.Fatal("the write never reached B")
			}
		}
		if err := w.b.tr.UnregisterMemory(context.Background(), bForeign); err != nil {
			t.Fatal(err)
		}
		after := snapshot(bl)
		got := w.col.Wait(tok)
		if got.Status != ring.StatusOK && got.Status != ring.StatusNotRegistered {
			t.Fatalf("write: %v", got.Status)
		}
		plugintest.MustEqual(t, "memory after unregister", bl, after)
		if got := w.do(t, write(aSrc, 0, bForeign, 0, 10)); got.Status != ring.StatusNotRegistered {
			t.Fatalf("write after unregister: %v", got.Status)
		}
	})
	t.Run("initiator", func(t *testing.T) {
		w := newWorld(t, size, "")
		al := make([]byte, size)
		w.a.registerForeign(t, aForeign, al, sdk.PermLocal)
		fill(w.rw, 4)
		tok1 := w.submit(read(aForeign, 0, bRW, 0, size/2))
		tok2 := w.submit(read(aForeign, size/2, bRW, 0, size/2))
		if err := w.a.tr.UnregisterMemory(context.Background(), aForeign); err != nil {
			t.Fatal(err)
		}
		after := snapshot(al)
		for _, tok := range []uint64{tok1, tok2} {
			if got := w.col.Wait(tok); got.Status != ring.StatusOK && got.Status != ring.StatusNotRegistered {
				t.Fatalf("read: %v", got.Status)
			}
		}
		plugintest.MustEqual(t, "memory after unregister", al, after)
	})
}
