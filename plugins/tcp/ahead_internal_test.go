package tcp

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"
)

// tcpPair returns the two ends of a real loopback TCP connection.
func tcpPair(t *testing.T) (dialer, accepted net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type acc struct {
		c   net.Conn
		err error
	}
	got := make(chan acc, 1)
	go func() {
		c, err := ln.Accept()
		got <- acc{c, err}
	}()
	dc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.err != nil {
		dc.Close()
		t.Fatal(a.err)
	}
	t.Cleanup(func() { dc.Close(); a.c.Close() })
	return dc, a.c
}

// TestReadAheadKeepsTheStream: whatever the sizes the peer writes in and
// the reader asks for (headers, small payloads read ahead, payloads over
// aheadSmall read straight into place, looks without waiting, idle waits
// that give the buffer back), the bytes come out of recv exactly as they
// were sent, in order, on a real loopback connection; with a chunk too.
func TestReadAheadKeepsTheStream(t *testing.T) {
	for _, chunk := range []int{0, 16 << 10} {
		for seed := uint64(1); seed <= 4; seed++ {
			dc, ac := tcpPair(t)
			rng := rand.New(rand.NewPCG(seed, uint64(chunk)))
			stream := pattern(6<<20+int(seed)*977, byte(seed))
			werr := make(chan error, 1)
			go func() {
				// Pieces from 1 byte to 200 KiB, so that the reader finds
				// partial headers, partial payloads and many frames at once.
				wr := rand.New(rand.NewPCG(seed, 99))
				rest := stream
				for len(rest) > 0 {
					n := min(len(rest), 1+wr.IntN([]int{7, 300, 5000, 200 << 10}[wr.IntN(4)]))
					if _, err := dc.Write(rest[:n]); err != nil {
						werr <- err
						return
					}
					rest = rest[n:]
				}
				werr <- nil
			}()
			sc := &serverConn{link: newLink(ac, 10*time.Second)}
			sc.link.chunk = chunk
			var got []byte
			for len(got) < len(stream) {
				if sc.in.len() == 0 && rng.IntN(3) == 0 {
					if err := sc.waitIdle(); err != nil {
						t.Fatalf("chunk %d seed %d: waitIdle: %v", chunk, seed, err)
					}
				}
				if rng.IntN(4) == 0 {
					if err := sc.fill(); err != nil {
						t.Fatalf("chunk %d seed %d: fill: %v", chunk, seed, err)
					}
				}
				size := []int{RequestSize, 1 + rng.IntN(aheadSmall), aheadSmall + 1 + rng.IntN(300<<10)}[rng.IntN(3)]
				size = min(size, len(stream)-len(got))
				dst := make([]byte, size)
				if err := sc.recv(dst); err != nil {
					t.Fatalf("chunk %d seed %d: recv %d bytes at %d: %v", chunk, seed, size, len(got), err)
				}
				got = append(got, dst...)
			}
			if err := <-werr; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, stream) {
				i := 0
				for i < len(got) && got[i] == stream[i] {
					i++
				}
				t.Fatalf("chunk %d seed %d: the stream read differs from the one sent from byte %d", chunk, seed, i)
			}
			if sc.in.len() != 0 {
				t.Fatalf("chunk %d seed %d: %d bytes buffered past the end of the stream", chunk, seed, sc.in.len())
			}
			// The peer closes: an idle wait sees the end, and the buffer
			// goes back to the pool.
			dc.Close()
			if err := sc.waitIdle(); err != io.EOF {
				t.Fatalf("chunk %d seed %d: waitIdle after the close: %v, want EOF", chunk, seed, err)
			}
			if sc.in.buf != nil {
				t.Fatalf("chunk %d seed %d: an idle connection holds its read-ahead buffer", chunk, seed)
			}
		}
	}
}

// TestReadAheadBounds: a payload over aheadSmall takes only the next
// header beside it, so a bulk frame is not copied through the buffer; a
// small one takes what follows, up to the buffer.
func TestReadAheadBounds(t *testing.T) {
	dc, ac := tcpPair(t)
	big, small := aheadSmall+1, 1000
	after := 3 * aheadSize // more than the buffer holds
	stream := pattern(big+small+after, 5)
	if _, err := dc.Write(stream); err != nil {
		t.Fatal(err)
	}
	sc := &serverConn{link: newLink(ac, 10*time.Second)}
	dst := make([]byte, big)
	if err := sc.recv(dst); err != nil {
		t.Fatal(err)
	}
	if sc.in.len() > RequestSize {
		t.Fatalf("a %d-byte payload read %d bytes ahead, want at most a header (%d)", big, sc.in.len(), RequestSize)
	}
	dst = make([]byte, small)
	for i := 0; sc.in.len() < RequestSize+1 && i < 1000; i++ {
		// The stream is all on the socket already; a small read's
		// read-ahead takes more than a header at once. (It may find less
		// than all of it there, hence the loop's bound, not a sleep.)
		if err := sc.recv(dst[:1]); err != nil {
			t.Fatal(err)
		}
	}
	if sc.in.len() <= RequestSize || sc.in.len() > aheadSize {
		t.Fatalf("small reads buffered %d bytes, want more than a header and at most %d", sc.in.len(), aheadSize)
	}
}

// TestReadAheadNotServedAfterClose: once the link is closed (as
// abortServersUsing closes it), frames already read ahead are not served:
// recv fails and leaves its destination alone, so nothing read before the
// close lands after it.
func TestReadAheadNotServedAfterClose(t *testing.T) {
	dc, ac := tcpPair(t)
	stream := pattern(3*RequestSize+100, 3)
	if _, err := dc.Write(stream); err != nil {
		t.Fatal(err)
	}
	sc := &serverConn{link: newLink(ac, 10*time.Second)}
	first := make([]byte, 1)
	for sc.in.len() < RequestSize {
		// The small read takes what follows along (it may find only part
		// of the stream there at first, hence the loop).
		if err := sc.recv(first); err != nil {
			t.Fatal(err)
		}
	}
	_ = sc.link.close()
	dst := make([]byte, RequestSize)
	if err := sc.recv(dst); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("recv after the close: %v, want %v", err, net.ErrClosed)
	}
	if !bytes.Equal(dst, make([]byte, RequestSize)) {
		t.Fatal("recv after the close wrote buffered bytes into its destination")
	}
}

// TestReadAheadWithinItsBudget: a connection takes its read-ahead buffer
// from the budget and gives it back when it goes idle; one that finds
// the budget full does not wait, it reads with only a header's room
// ahead, and the stream still comes out whole.
func TestReadAheadWithinItsBudget(t *testing.T) {
	var b budget
	b.init(aheadSize)
	dc, ac := tcpPair(t)
	stream := pattern(256<<10, 7)
	go func() { _, _ = dc.Write(stream) }()

	held := &serverConn{link: newLink(ac, 10*time.Second), in: ahead{budget: &b}}
	got := make([]byte, 1000)
	if err := held.recv(got); err != nil {
		t.Fatal(err)
	}
	if b.held() != aheadSize {
		t.Fatalf("budget holds %d bytes with one connection reading ahead, want %d", b.held(), aheadSize)
	}
	// A second connection finds the budget full.
	dc2, ac2 := tcpPair(t)
	go func() { _, _ = dc2.Write(stream) }()
	full := &serverConn{link: newLink(ac2, 10*time.Second), in: ahead{budget: &b}}
	var out []byte
	for len(out) < len(stream) {
		dst := make([]byte, min(4096, len(stream)-len(out)))
		if err := full.recv(dst); err != nil {
			t.Fatal(err)
		}
		if full.in.buf != nil || full.in.len() > RequestSize {
			t.Fatalf("a connection past the budget buffered %d bytes ahead (buffer %v)", full.in.len(), full.in.buf != nil)
		}
		out = append(out, dst...)
	}
	if !bytes.Equal(out, stream) {
		t.Fatal("the stream read without a read-ahead buffer differs from the one sent")
	}
	// The first goes idle: its buffer goes back to the budget.
	rest := make([]byte, len(stream)-len(got))
	if err := held.recv(rest); err != nil {
		t.Fatal(err)
	}
	dc.Close()
	if err := held.waitIdle(); err != io.EOF {
		t.Fatalf("waitIdle: %v, want EOF", err)
	}
	if b.held() != 0 {
		t.Fatalf("budget holds %d bytes after the connection went idle, want 0", b.held())
	}
}
