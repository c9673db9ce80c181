package plugintest

import (
	"bytes"
	"crypto/sha256"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Config says which plugin to test and how to configure its two instances.
type Config struct {
	// Binary is the plugin executable.
	Binary string
	// ConfigA and ConfigB are the HCL config bodies of the initiator and
	// the target instance (for TCP: listen addresses).
	ConfigA, ConfigB []byte
	// RegionSize is the size of each test region; default 8 MiB.
	RegionSize int
}

// Region ids and incarnations the suite uses.
const (
	incA, incB  = 0x1111, 0x2222
	regLocal    = 1 // on A: the initiator's memory
	regRW       = 1 // on B: remote read-write
	regRO       = 2 // on B: remote read-only
	regPriv     = 3 // on B: local only
	peerB       = 1 // B as A sees it
	peerBStale  = 2 // B under an incarnation it no longer has
	peerUnknown = 99
)

var tokens atomic.Uint64

func token() uint64 { return tokens.Add(1) }

// Run runs the conformance suite against c.Binary.
func Run(t *testing.T, c Config) {
	size := c.RegionSize
	if size == 0 {
		size = 8 << 20
	}
	a := Launch(t, c.Binary, "conformance-a", incA, c.ConfigA)
	b := Launch(t, c.Binary, "conformance-b", incB, c.ConfigB)
	local := a.Region(regLocal, size, sdk.PermLocal)
	rw := b.Region(regRW, size, sdk.PermRemoteReadWrite)
	ro := b.Region(regRO, 1<<16, sdk.PermRemoteRead)
	priv := b.Region(regPriv, 1<<16, sdk.PermLocal)
	fill(rw, 1)
	fill(ro, 2)
	fill(priv, 3)
	open := func(id uint32, inc uint64) {
		if err := a.proc.Client.OpenPeer(t.Context(), sdk.Peer{ID: id, Segment: "conformance-b", Incarnation: inc, MachineID: "plugintest", Endpoint: b.endpoint}); err != nil {
			t.Fatalf("open peer: %v", err)
		}
	}
	open(peerB, incB)
	open(peerBStale, incB+1)

	t.Run("RoundTrips", func(t *testing.T) { roundTrips(t, a, local, rw) })
	t.Run("Concurrent", func(t *testing.T) { concurrent(t, a, local, rw) })
	t.Run("Rejections", func(t *testing.T) { rejections(t, a, local, rw, ro, priv) })
	t.Run("Nop", func(t *testing.T) {
		if c := a.Do(ring.Descriptor{Token: token(), Op: ring.OpNop}); c.Status != ring.StatusOK {
			t.Fatalf("nop completed %v", c.Status)
		}
	})
	t.Run("BatchRegistration", func(t *testing.T) { batchRegistration(t, a, b, local) })
	t.Run("Unregister", func(t *testing.T) {
		if err := b.proc.Client.UnregisterMemory(t.Context(), regPriv); err != nil {
			t.Fatal(err)
		}
		c := a.Do(ring.Descriptor{Token: token(), Op: ring.OpRead, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regPriv, Length: 10})
		if c.Status != ring.StatusNotRegistered {
			t.Fatalf("read of an unregistered remote region: %v, want %v", c.Status, ring.StatusNotRegistered)
		}
		if err := b.proc.Client.UnregisterMemory(t.Context(), regPriv); err == nil {
			t.Fatal("unregistering twice succeeded")
		}
	})
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed))
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
}

func roundTrips(t *testing.T, a *Instance, local, rw []byte) {
	sizes := []int{1, 3, 63, 4096, 4099, 65537, 1<<20 + 3, 4 << 20}
	offsets := []int{0, 1, 4095}
	for _, n := range sizes {
		for _, off := range offsets {
			if off+n > len(rw) || off+n > len(local) {
				continue
			}
			loff := (off * 7) % 8192
			if loff+n > len(local) {
				loff = 0
			}
			fill(local[loff:loff+n], uint64(n+off))
			c := a.Do(ring.Descriptor{Token: token(), Op: ring.OpWrite, LocalRegion: regLocal, LocalOffset: uint64(loff), Peer: peerB, RemoteRegion: regRW, RemoteOffset: uint64(off), Length: uint64(n)})
			if c.Status != ring.StatusOK || c.Length != uint64(n) {
				t.Fatalf("write %d bytes at %d: %v, %d bytes", n, off, c.Status, c.Length)
			}
			if !bytes.Equal(rw[off:off+n], local[loff:loff+n]) {
				t.Fatalf("write %d bytes at %d: target bytes differ", n, off)
			}
			fill(rw[off:off+n], uint64(3*n+off))
			c = a.Do(ring.Descriptor{Token: token(), Op: ring.OpRead, LocalRegion: regLocal, LocalOffset: uint64(loff), Peer: peerB, RemoteRegion: regRW, RemoteOffset: uint64(off), Length: uint64(n)})
			if c.Status != ring.StatusOK || c.Length != uint64(n) {
				t.Fatalf("read %d bytes at %d: %v, %d bytes", n, off, c.Status, c.Length)
			}
			if !bytes.Equal(rw[off:off+n], local[loff:loff+n]) {
				t.Fatalf("read %d bytes at %d: local bytes differ", n, off)
			}
		}
	}
}

func concurrent(t *testing.T, a *Instance, local, rw []byte) {
	const n, size = 512, 4099
	if n*size > len(rw) {
		t.Skip("region too small")
	}
	fill(local[:n*size], 99)
	var ds []ring.Descriptor
	for i := range n {
		op := ring.OpWrite
		if i%2 == 1 {
			op = ring.OpRead
		}
		off := uint64(i * size)
		ds = append(ds, ring.Descriptor{Token: token(), Op: op, LocalRegion: regLocal, LocalOffset: off, Peer: peerB, RemoteRegion: regRW, RemoteOffset: off, Length: size})
	}
	chs := a.Submit(ds...)
	for i, ch := range chs {
		c := a.Wait(ch, ds[i].Token)
		if c.Status != ring.StatusOK || c.Length != size {
			t.Fatalf("descriptor %d: %v, %d bytes", i, c.Status, c.Length)
		}
	}
	for i := range n {
		off := i * size
		if !bytes.Equal(local[off:off+size], rw[off:off+size]) {
			t.Fatalf("descriptor %d: bytes differ between the two sides", i)
		}
	}
}

func rejections(t *testing.T, a *Instance, local, rw, ro, priv []byte) {
	big := uint64(len(rw))
	cases := []struct {
		name string
		d    ring.Descriptor
		want []ring.Status
	}{
		{"unknown remote region", ring.Descriptor{Op: ring.OpWrite, LocalRegion: regLocal, Peer: peerB, RemoteRegion: 77, Length: 10}, []ring.Status{ring.StatusNotRegistered}},
		{"remote out of bounds", ring.Descriptor{Op: ring.OpWrite, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRW, RemoteOffset: big - 5, Length: 10}, []ring.Status{ring.StatusOutOfBounds}},
		{"remote read out of bounds", ring.Descriptor{Op: ring.OpRead, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRW, RemoteOffset: big, Length: 1}, []ring.Status{ring.StatusOutOfBounds}},
		{"remote overflow", ring.Descriptor{Op: ring.OpWrite, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRW, RemoteOffset: ^uint64(0) - 4, Length: 10}, []ring.Status{ring.StatusInvalid, ring.StatusOutOfBounds}},
		{"write to read-only", ring.Descriptor{Op: ring.OpWrite, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRO, Length: 100}, []ring.Status{ring.StatusPermission}},
		{"read local-only", ring.Descriptor{Op: ring.OpRead, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regPriv, Length: 100}, []ring.Status{ring.StatusPermission}},
		{"write local-only", ring.Descriptor{Op: ring.OpWrite, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regPriv, Length: 100}, []ring.Status{ring.StatusPermission}},
		{"stale incarnation", ring.Descriptor{Op: ring.OpWrite, LocalRegion: regLocal, Peer: peerBStale, RemoteRegion: regRW, Length: 100}, []ring.Status{ring.StatusStaleIncarnation}},
		{"unknown peer", ring.Descriptor{Op: ring.OpWrite, LocalRegion: regLocal, Peer: peerUnknown, RemoteRegion: regRW, Length: 100}, []ring.Status{ring.StatusPeerUnknown}},
		{"local not registered", ring.Descriptor{Op: ring.OpWrite, LocalRegion: 55, Peer: peerB, RemoteRegion: regRW, Length: 100}, []ring.Status{ring.StatusNotRegistered}},
		{"local out of bounds", ring.Descriptor{Op: ring.OpRead, LocalRegion: regLocal, LocalOffset: uint64(len(local)) - 1, Peer: peerB, RemoteRegion: regRW, Length: 100}, []ring.Status{ring.StatusOutOfBounds}},
		{"zero length", ring.Descriptor{Op: ring.OpWrite, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRW}, []ring.Status{ring.StatusInvalid}},
		{"unknown op", ring.Descriptor{Op: 42, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRW, Length: 10}, []ring.Status{ring.StatusInvalid}},
	}
	sums := func() [3][32]byte {
		return [3][32]byte{sha256.Sum256(rw), sha256.Sum256(ro), sha256.Sum256(priv)}
	}
	before := sums()
	localBefore := sha256.Sum256(local)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.d.Token = token()
			got := a.Do(c.d)
			ok := false
			for _, w := range c.want {
				ok = ok || got.Status == w
			}
			if !ok {
				t.Fatalf("status %v, want one of %v", got.Status, c.want)
			}
			if got.Token != c.d.Token {
				t.Fatalf("completion token %#x, want %#x", got.Token, c.d.Token)
			}
		})
	}
	if sums() != before {
		t.Fatal("a rejected request changed the target's memory")
	}
	if sha256.Sum256(local) != localBefore {
		t.Fatal("a rejected request changed the initiator's memory")
	}
	// The plugin still serves good requests after all that.
	c := a.Do(ring.Descriptor{Token: token(), Op: ring.OpRead, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRO, Length: 100})
	if c.Status != ring.StatusOK || !bytes.Equal(local[:100], ro[:100]) {
		t.Fatalf("read after rejections: %v", c.Status)
	}
}
