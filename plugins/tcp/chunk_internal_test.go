package tcp

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/ferrydev/ferry/sdk"
)

// recordConn is a net.Conn whose writes are recorded one by one (a
// net.Buffers written to it goes out one Write per buffer).
type recordConn struct {
	net.Conn // nil: only Write and the deadline setters are called
	out      bytes.Buffer
}

func (c *recordConn) Write(b []byte) (int, error)      { return c.out.Write(b) }
func (c *recordConn) SetWriteDeadline(time.Time) error { return nil }

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// TestWriteSomeBoundsEachCall: with a chunk, each writeSome moves at most
// chunk bytes (a buffer longer than that is split), consumes exactly what
// it wrote, and the calls together write every buffer in order; without
// one, a single call writes everything.
func TestWriteSomeBoundsEachCall(t *testing.T) {
	bufs := [][]byte{pattern(RequestSize, 1), pattern(100<<10, 2), pattern(RequestSize, 3), pattern(40<<10, 4), pattern(0, 5), pattern(7, 6)}
	var want []byte
	for _, b := range bufs {
		want = append(want, b...)
	}
	for _, chunk := range []int{0, 16 << 10, 64 << 10, 1 << 20} {
		c := &recordConn{}
		l := &link{nc: c, chunk: chunk}
		v := net.Buffers(append([][]byte(nil), bufs...))
		calls := 0
		for len(v) > 0 {
			before := c.out.Len()
			n, err := l.writeSome(&v)
			if err != nil {
				t.Fatalf("chunk %d: %v", chunk, err)
			}
			if int(n) != c.out.Len()-before {
				t.Fatalf("chunk %d: writeSome says %d bytes, wrote %d", chunk, n, c.out.Len()-before)
			}
			if chunk > 0 && n > int64(chunk) {
				t.Fatalf("chunk %d: one call wrote %d bytes", chunk, n)
			}
			if calls++; calls > len(want) {
				t.Fatalf("chunk %d: no progress", chunk)
			}
		}
		if !bytes.Equal(c.out.Bytes(), want) {
			t.Errorf("chunk %d: the bytes written differ from the buffers", chunk)
		}
		if wantCalls := 1; chunk == 0 && calls != wantCalls {
			t.Errorf("chunk 0: %d calls, want 1", calls)
		}
		if chunk == 16<<10 && calls < len(want)/(16<<10) {
			t.Errorf("chunk 16KiB: %d calls for %d bytes", calls, len(want))
		}
		if err := (&link{nc: &recordConn{}, chunk: chunk}).writeBuffers(&net.Buffers{}); err != nil {
			t.Errorf("chunk %d: writing nothing: %v", chunk, err)
		}
	}
}

// TestChunkedLinkOverTCP: a payload larger than the chunk, written with
// writeBuffers and received with readFullNext on a real loopback
// connection, both chunked, arrives whole, and the header after it is
// still read together with the payload's last part.
func TestChunkedLinkOverTCP(t *testing.T) {
	dc, ac := tcpPair(t)
	const chunk = 16 << 10
	payload, next := pattern(1<<20+123, 9), pattern(RequestSize, 11)
	w := newLink(dc, 10*time.Second)
	w.chunk = chunk
	werr := make(chan error, 1)
	go func() {
		v := net.Buffers{payload, next}
		werr <- w.writeBuffers(&v)
	}()
	r := newLink(ac, 10*time.Second)
	r.chunk = chunk
	into, hdr := make([]byte, len(payload)), make([]byte, RequestSize)
	n, err := r.readFullNext(into, hdr)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.readFull(hdr[n:]); err != nil {
		t.Fatal(err)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(into, payload) || !bytes.Equal(hdr, next) {
		t.Fatal("the payload or the header after it arrived changed")
	}
}

// TestBulkChunkDefault: bulk_chunk and short_slices are off unless set,
// bulk_nice or not.
func TestBulkChunkDefault(t *testing.T) {
	for _, c := range []struct {
		config string
		chunk  int
		short  bool
	}{
		{``, 0, false},
		{`bulk_nice = 10`, 0, false},
		{"bulk_nice = 10\nbulk_chunk = \"256KiB\"\nshort_slices = true", 256 << 10, true},
		{`bulk_chunk = "32KiB"`, 32 << 10, false},
	} {
		s, err := parse(sdk.StartConfig{Engine: "e", Config: []byte(c.config)})
		if err != nil {
			t.Fatalf("%q: %v", c.config, err)
		}
		if s.bulkChunk != c.chunk || s.shortSlices != c.short {
			t.Errorf("%q: bulk_chunk %d, short_slices %v; want %d, %v", c.config, s.bulkChunk, s.shortSlices, c.chunk, c.short)
		}
	}
}
