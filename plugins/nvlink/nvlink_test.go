package nvlink_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/plugins/simdev/simmem"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

var bin string

func TestMain(m *testing.M) {
	os.Exit(plugintest.Main{Binaries: []string{"ferry-plugin-nvlink"}, CheckLeaks: true,
		IgnoreLeaks: nil}.Run(m, func(dir string) { bin = filepath.Join(dir, "ferry-plugin-nvlink") }))
}

// TestConformance runs the SDK's suite on host memory: nvlink moves CPU
// memory between engines too.
func TestConformance(t *testing.T) {
	plugintest.Run(t, plugintest.Config{Binary: bin})
}

var nextAlloc atomic.Uint64

// allocation is a simulated device allocation of size bytes. STAND-IN:
// plugins/simdev (dev-a) is not in this tree yet, so the test process
// plays the simulator: it creates the allocation's memfd with simmem's
// own layout (simmem.Create, simmem.Encode) and holds it; closing the
// returned fd is the allocation's Free. The plugins open the handle with
// simmem.Open, as they will a real simdev's.
func allocation(t *testing.T, size uint64) (fd int, whole sdk.Handle, mem []byte) {
	t.Helper()
	id := uint64(os.Getpid())<<20 | nextAlloc.Add(1)
	fd, err := simmem.Create(id, int64(size))
	if err != nil {
		t.Fatal(err)
	}
	whole = sdk.Handle{Type: sdk.HandleSim, Data: simmem.Encode(simmem.Ref{PID: os.Getpid(), FD: fd, ID: id}), Size: size, Length: size}
	m, err := simmem.Open(whole)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); unix.Close(fd) })
	return fd, whole, m.Bytes()
}

// device registers a simulated allocation of size bytes with in as region
// id and returns its bytes as the test sees them.
func device(t *testing.T, in *plugintest.Instance, id uint32, size uint64, perm sdk.Perm) []byte {
	t.Helper()
	_, h, mem := allocation(t, size)
	if err := in.Process().Client.RegisterDevice(t.Context(), id, perm, sdk.MemoryCUDA, h); err != nil {
		t.Fatalf("register device region %d: %v", id, err)
	}
	return mem
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

var tok atomic.Uint64

func do(t *testing.T, in *plugintest.Instance, d ring.Descriptor) ring.Descriptor {
	t.Helper()
	d.Token = tok.Add(1)
	return in.Do(d)
}

// Two engines, each its own nvlink plugin process, move bytes between
// simulated GPU memory and host memory through imported handles.
func TestDeviceTransfers(t *testing.T) {
	const size = 24 << 20
	a := plugintest.Launch(t, bin, "gpu-a", 1, nil)
	b := plugintest.Launch(t, bin, "gpu-b", 2, []byte(`streams = 3`))
	const (
		aGPU, aCPU             = 1, 2
		bGPU, bRO, bPriv, bCPU = 1, 2, 3, 4
		peer                   = 1
	)
	ag := device(t, a, aGPU, size, sdk.PermLocal)
	ac := a.Region(aCPU, size, sdk.PermLocal)
	bg := device(t, b, bGPU, size, sdk.PermRemoteReadWrite)
	bro := device(t, b, bRO, 1<<20, sdk.PermRemoteRead)
	bpriv := device(t, b, bPriv, 1<<20, sdk.PermLocal)
	bc := b.Region(bCPU, size, sdk.PermRemoteReadWrite)
	a.OpenPeer(peer, b, 2)

	cases := []struct {
		name          string
		op            ring.Op
		local, remote uint32
		lmem, rmem    []byte
		n             int
		loff, roff    uint64
	}{
		{"GPU to GPU write", ring.OpWrite, aGPU, bGPU, ag, bg, 4099, 3, 8191},
		{"GPU to GPU read", ring.OpRead, aGPU, bGPU, ag, bg, 65537, 0, 1},
		{"GPU to CPU write", ring.OpWrite, aGPU, bCPU, ag, bc, 1 << 20, 4096, 0},
		{"CPU to GPU write", ring.OpWrite, aCPU, bGPU, ac, bg, 1<<20 + 5, 0, 12345},
		{"GPU from CPU read", ring.OpRead, aGPU, bCPU, ag, bc, 333, 7, 9},
		{"CPU from GPU read", ring.OpRead, aCPU, bGPU, ac, bg, 2 << 20, 1, 0},
		{"large sliced GPU to GPU", ring.OpWrite, aGPU, bGPU, ag, bg, size, 0, 0},
		{"large sliced GPU from GPU", ring.OpRead, aGPU, bGPU, ag, bg, 20<<20 + 17, 0, 4096},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src, dst := c.lmem[c.loff:c.loff+uint64(c.n)], c.rmem[c.roff:c.roff+uint64(c.n)]
			if c.op == ring.OpRead {
				src, dst = dst, src
			}
			fill(src, uint64(i+1))
			got := do(t, a, ring.Descriptor{Op: c.op, LocalRegion: c.local, LocalOffset: c.loff, Peer: peer, RemoteRegion: c.remote, RemoteOffset: c.roff, Length: uint64(c.n)})
			if got.Status != ring.StatusOK || got.Length != uint64(c.n) {
				t.Fatalf("%v, %d bytes; want ok, %d", got.Status, got.Length, c.n)
			}
			plugintest.MustEqual(t, c.name, dst, src)
		})
	}
	st := a.Stats()
	if st["copies_sliced"] < 2 {
		t.Errorf("copies_sliced = %d after two copies above split_min", st["copies_sliced"])
	}
	// The peer's GPU region was imported once and cached, though used by
	// six descriptors.
	if st["queries"] != 2 || st["imports"] != 2 { // bGPU and (local) aGPU; bCPU is mapped, not imported
		t.Errorf("queries %d imports %d, want 2 and 2 (each region asked for and imported once)", st["queries"], st["imports"])
	}

	t.Run("Rejections", func(t *testing.T) {
		sum := func() [4][]byte {
			return [4][]byte{bytes.Clone(bg), bytes.Clone(bro), bytes.Clone(bpriv), bytes.Clone(ag)}
		}
		before := sum()
		for _, c := range []struct {
			name string
			d    ring.Descriptor
			want ring.Status
		}{
			{"remote out of bounds", ring.Descriptor{Op: ring.OpWrite, LocalRegion: aGPU, Peer: peer, RemoteRegion: bGPU, RemoteOffset: size - 5, Length: 10}, ring.StatusOutOfBounds},
			{"remote read out of bounds", ring.Descriptor{Op: ring.OpRead, LocalRegion: aGPU, Peer: peer, RemoteRegion: bRO, RemoteOffset: 1 << 20, Length: 1}, ring.StatusOutOfBounds},
			{"local out of bounds", ring.Descriptor{Op: ring.OpRead, LocalRegion: aGPU, LocalOffset: size - 1, Peer: peer, RemoteRegion: bGPU, Length: 2}, ring.StatusOutOfBounds},
			{"offset overflow", ring.Descriptor{Op: ring.OpWrite, LocalRegion: aGPU, Peer: peer, RemoteRegion: bGPU, RemoteOffset: ^uint64(0) - 4, Length: 10}, ring.StatusInvalid}, // sdk.Precheck refuses it first
			{"write to read-only GPU", ring.Descriptor{Op: ring.OpWrite, LocalRegion: aGPU, Peer: peer, RemoteRegion: bRO, Length: 100}, ring.StatusPermission},
			{"read local-only GPU", ring.Descriptor{Op: ring.OpRead, LocalRegion: aGPU, Peer: peer, RemoteRegion: bPriv, Length: 100}, ring.StatusPermission},
			{"unknown remote region", ring.Descriptor{Op: ring.OpRead, LocalRegion: aGPU, Peer: peer, RemoteRegion: 77, Length: 100}, ring.StatusNotRegistered},
			{"over MaxSlice", ring.Descriptor{Op: ring.OpRead, LocalRegion: aGPU, Peer: peer, RemoteRegion: bGPU, Length: 2 << 30}, ring.StatusInvalid},
		} {
			if got := do(t, a, c.d); got.Status != c.want {
				t.Errorf("%s: %v, want %v", c.name, got.Status, c.want)
			}
		}
		for i, after := range sum() {
			if !bytes.Equal(after, before[i]) {
				t.Fatalf("a refused request changed memory %d", i)
			}
		}
		// A read of the read-only region still works.
		if got := do(t, a, ring.Descriptor{Op: ring.OpRead, LocalRegion: aGPU, Peer: peer, RemoteRegion: bRO, Length: 100}); got.Status != ring.StatusOK || !bytes.Equal(ag[:100], bro[:100]) {
			t.Fatalf("read of a read-only GPU region: %v", got.Status)
		}
	})

	t.Run("StaleHandle", func(t *testing.T) {
		// A handle whose allocation was freed before registration is
		// refused at RegisterDevice.
		fd, h, _ := allocation(t, 1<<20)
		freed := h
		unix.Close(fd)
		err := b.Process().Client.RegisterDevice(t.Context(), 9, sdk.PermRemoteReadWrite, sdk.MemoryCUDA, freed)
		if !errors.Is(err, sdk.ErrStaleHandle) {
			t.Fatalf("register a freed allocation: %v, want sdk.ErrStaleHandle", err)
		}
		// One freed after b imported it: b's import keeps it alive (as a
		// driver does), but a's import of the handle fails: the
		// descriptor is refused with StatusInvalid, nothing crashes.
		fd2, h2, _ := allocation(t, 1<<20)
		if err := b.Process().Client.RegisterDevice(t.Context(), 10, sdk.PermRemoteReadWrite, sdk.MemoryCUDA, h2); err != nil {
			t.Fatal(err)
		}
		unix.Close(fd2)
		if got := do(t, a, ring.Descriptor{Op: ring.OpRead, LocalRegion: aGPU, Peer: peer, RemoteRegion: 10, Length: 100}); got.Status != ring.StatusInvalid {
			t.Fatalf("read of a freed allocation: %v, want %v", got.Status, ring.StatusInvalid)
		}
		if st := a.Stats(); st["import_failures"] != 1 {
			t.Fatalf("import_failures = %d, want 1", st["import_failures"])
		}
		// The plugins still serve what is alive.
		if got := do(t, a, ring.Descriptor{Op: ring.OpWrite, LocalRegion: aGPU, Peer: peer, RemoteRegion: bGPU, Length: 100}); got.Status != ring.StatusOK {
			t.Fatalf("write after a stale handle: %v", got.Status)
		}
	})

	t.Run("Unregister", func(t *testing.T) {
		// Unregistering a region a peer imported revokes it there before
		// it returns: the peer's next descriptor finds it gone.
		if err := b.Process().Client.UnregisterMemory(context.Background(), bGPU); err != nil {
			t.Fatal(err)
		}
		if got := do(t, a, ring.Descriptor{Op: ring.OpWrite, LocalRegion: aGPU, Peer: peer, RemoteRegion: bGPU, Length: 100}); got.Status != ring.StatusNotRegistered {
			t.Fatalf("write to an unregistered GPU region: %v, want %v", got.Status, ring.StatusNotRegistered)
		}
		if st := b.Stats(); st["revokes_sent"] != 1 {
			t.Fatalf("revokes_sent = %d, want 1", st["revokes_sent"])
		}
	})
}
