package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"net"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/host"
)

// TestFillPattern: the pattern has no zero word, depends on the seed, is
// the same for the same seed, and reaches the last byte of an odd length.
func TestFillPattern(t *testing.T) {
	a, b, c := make([]byte, 4099), make([]byte, 4099), make([]byte, 4099)
	fillPattern(a, 1)
	fillPattern(b, 1)
	fillPattern(c, 2)
	if !bytes.Equal(a, b) {
		t.Fatal("two fillings with seed 1 differ")
	}
	if bytes.Equal(a, c) {
		t.Fatal("seeds 1 and 2 give the same filling")
	}
	for i := 0; i+8 <= len(a); i += 8 {
		if binary.LittleEndian.Uint64(a[i:]) == 0 {
			t.Fatalf("word at %d is zero", i)
		}
	}
	if bytes.Equal(a[4096:], []byte{0, 0, 0}) {
		t.Fatal("the 3 tail bytes were not written")
	}
	if bytes.Equal(a[:8], a[8:16]) {
		t.Fatal("neighbouring words are equal")
	}
}

// fakeRemote is a remote buffer held in this process; deliver stands in
// for Ferry's transfers.
type fakeRemote struct{ buf []byte }

func (f *fakeRemote) fillSource(seed uint64) error { fillPattern(f.buf, seed); return nil }
func (f *fakeRemote) fillDest(seed uint64) error   { fillPattern(f.buf, seed); return nil }
func (f *fakeRemote) sum() ([sha256.Size]byte, error) {
	return sha256.Sum256(f.buf), nil
}

// TestFerrySideVerify: after fill, the receiving side differs from the
// source until a transfer of that round reaches it, in both directions,
// and a round whose transfers did not happen is caught even though the
// previous one delivered.
func TestFerrySideVerify(t *testing.T) {
	for _, op := range []host.Op{host.Write, host.Read} {
		local, remote := make([]byte, 3*4096), &fakeRemote{buf: make([]byte, 3*4096)}
		f := &ferrySide{lay: ferryLayout{o: benchOpts{transport: "shm", op: op, size: 4096, batch: 3, threads: 1}}, local: local, remote: remote}
		deliver := func() {
			if op == host.Write {
				copy(remote.buf, local)
			} else {
				copy(local, remote.buf)
			}
		}
		if err := f.fill(0); err != nil {
			t.Fatal(err)
		}
		if err := f.verify(0); err == nil || !strings.Contains(err.Error(), "differ") {
			t.Fatalf("%s: verify before any transfer: %v, want a mismatch", opName(op), err)
		}
		deliver()
		if err := f.verify(0); err != nil {
			t.Fatalf("%s: verify after the transfer: %v", opName(op), err)
		}
		if err := f.fill(1); err != nil {
			t.Fatal(err)
		}
		if err := f.verify(1); err == nil {
			t.Fatalf("%s: round 2 moved nothing but verified", opName(op))
		}
		deliver()
		if err := f.verify(1); err != nil {
			t.Fatalf("%s: verify after round 2's transfer: %v", opName(op), err)
		}
	}
}

// TestMemcpyBaselineVerifies: the baseline's buffers hold written data,
// and verify fails until the round's copies ran.
func TestMemcpyBaselineVerifies(t *testing.T) {
	o := benchOpts{transport: "shm", op: host.Write, size: 8192, batch: 4, threads: 2}
	m, err := newMemcpyBaseline(o)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	for round := range 2 {
		if err := m.fill(round); err != nil {
			t.Fatal(err)
		}
		zero := make([]byte, len(m.src[0]))
		for th := range o.threads {
			if bytes.Equal(m.src[th], zero) || bytes.Equal(m.dst[th], zero) {
				t.Fatalf("round %d: stream %d's buffers are not written", round, th)
			}
		}
		if bytes.Equal(m.src[0], m.src[1]) {
			t.Fatal("both streams' sources hold the same bytes")
		}
		if err := m.verify(round); err == nil {
			t.Fatalf("round %d: verify before the copy passed", round)
		}
		for th := range o.threads {
			n, err := m.work(th)
			if err != nil || n != uint64(o.size)*uint64(o.batch) {
				t.Fatalf("work(%d) = %d, %v; want %d bytes", th, n, err, o.size*int64(o.batch))
			}
		}
		if err := m.verify(round); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}

// TestTCPBaselineVerifies runs the raw TCP baseline against an in-process
// peer: both directions move written data, and verify catches a round
// whose bytes did not travel.
func TestTCPBaselineVerifies(t *testing.T) {
	for _, op := range []host.Op{host.Write, host.Read} {
		o := benchOpts{transport: "tcp", op: op, size: 64 << 10, batch: 3, threads: 2}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- servePeer(ln, int(o.size)*o.batch) }()
		p, err := dialTCPBaseline(o, ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		for round := range 2 {
			if err := p.fill(round); err != nil {
				t.Fatal(err)
			}
			if err := p.verify(round); err == nil {
				t.Fatalf("%s round %d: verify before any transfer passed", opName(op), round)
			}
			for th := range o.threads {
				if n, err := p.work(th); err != nil || n != uint64(o.size)*uint64(o.batch) {
					t.Fatalf("%s: work(%d) = %d, %v", opName(op), th, n, err)
				}
			}
			if err := p.verify(round); err != nil {
				t.Fatalf("%s round %d: %v", opName(op), round, err)
			}
		}
		p.close()
		ln.Close()
		if err := <-served; err != nil {
			t.Fatalf("servePeer: %v", err)
		}
	}
}

// TestPeerRefusesOutOfBounds: the peer never reads or writes past its
// buffer, whatever the header says.
func TestPeerRefusesOutOfBounds(t *testing.T) {
	for _, h := range [][3]uint64{{peerWrite, 4096, 1}, {peerRead, 0, 4097}, {peerRead, 1 << 63, 1 << 63}, {9, 0, 0}} {
		a, b := net.Pipe()
		done := make(chan error, 1)
		go func() { done <- servePeerConn(b, 4096) }()
		var hdr [peerHeader]byte
		binary.LittleEndian.PutUint64(hdr[:], h[0])
		binary.LittleEndian.PutUint64(hdr[8:], h[1])
		binary.LittleEndian.PutUint64(hdr[16:], h[2])
		if _, err := a.Write(hdr[:]); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err == nil {
			t.Errorf("header %v: the peer served it", h)
		}
		a.Close()
		b.Close()
	}
}
