package tcp_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/ferrydev/ferry/plugins/tcp"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

// slowPeer is a peer (segment "slow", incarnation 9) that the test
// paces: it answers the hello once helloGo is closed, and then each
// request in turn through answer, which the test sets. It records the
// requests it received.
type slowPeer struct {
	ln      net.Listener
	helloGo chan struct{}
	answer  func(c net.Conn, h tcp.Header) error
	mu      sync.Mutex
	got     []tcp.Header
}

// serveLoopback listens on loopback and runs serve on each connection it
// accepts, on a goroutine of its own; serve may pass more connections to
// track, which reports whether they are still to be used. When the test
// ends it closes the listener and every connection accepted or tracked
// (one accepted or tracked later is closed at once), and waits for the
// serve calls to return.
func serveLoopback(t *testing.T, serve func(c net.Conn, track func(net.Conn) bool)) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		conns  []net.Conn
		closed bool
	)
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			c.Close()
			return false
		}
		conns = append(conns, c)
		return true
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil || !track(c) {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				serve(c, track)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln
}

func newSlowPeer(t *testing.T, answer func(c net.Conn, h tcp.Header) error) *slowPeer {
	t.Helper()
	p := &slowPeer{helloGo: make(chan struct{}), answer: answer}
	p.ln = serveLoopback(t, func(c net.Conn, _ func(net.Conn) bool) { p.serve(c) })
	return p
}

func (p *slowPeer) serve(c net.Conn) {
	var h [tcp.HelloSize + 4]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return
	}
	<-p.helloGo
	var r [tcp.HelloReplySize]byte
	tcp.EncodeHelloReply(r[:], tcp.HelloReply{Version: tcp.ProtocolVersion, Incarnation: 9, MaxFrame: 1 << 20})
	if _, err := c.Write(r[:]); err != nil {
		return
	}
	var b [tcp.RequestSize]byte
	for {
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return
		}
		var hd tcp.Header
		if err := tcp.DecodeHeader(b[:], &hd); err != nil {
			return
		}
		if hd.Op == ring.OpWrite {
			if _, err := io.CopyN(io.Discard, c, int64(hd.Length)); err != nil {
				return
			}
		}
		p.mu.Lock()
		p.got = append(p.got, hd)
		p.mu.Unlock()
		if err := p.answer(c, hd); err != nil {
			return
		}
	}
}

// requests returns the requests received so far.
func (p *slowPeer) requests() []tcp.Header {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]tcp.Header(nil), p.got...)
}

// respond sends h's response: OK, with payload for a read.
func respond(c net.Conn, h tcp.Header, payload []byte) error {
	var b [tcp.ResponseSize]byte
	r := tcp.Response{Seq: h.Seq, Status: ring.StatusOK}
	if h.Op == ring.OpRead {
		r.Length = uint64(len(payload))
	}
	tcp.EncodeResponse(b[:], &r)
	if _, err := c.Write(b[:]); err != nil {
		return err
	}
	if h.Op == ring.OpRead {
		_, err := c.Write(payload)
		return err
	}
	return nil
}

func (p *slowPeer) open(t *testing.T, a *engine) {
	t.Helper()
	ep := sdk.Endpoint(fmt.Sprintf(`{"v":1,"addrs":[%q]}`, p.ln.Addr().String()))
	if err := a.tr.OpenPeer(context.Background(), sdk.Peer{ID: 1, Segment: "slow", Incarnation: 9, Endpoint: ep}); err != nil {
		t.Fatal(err)
	}
}

// A read aborted while its payload is on the wire writes no more of the
// local memory: the rest of the payload goes to scratch, the read
// completes StatusCanceled, and the connection stays in step (the next
// read on it lands whole). So too on a priority connection, whose reader
// waits on its own thread (prio.go).
func TestAbortReadInFlight(t *testing.T) {
	for _, prio := range []sdk.Priority{sdk.PriorityNormal, sdk.PriorityHigh} {
		t.Run(prio.String(), func(t *testing.T) { testAbortReadInFlight(t, prio) })
	}
}

func testAbortReadInFlight(t *testing.T, prio sdk.Priority) {
	const n = 256 << 10
	halfSent, release := make(chan struct{}), make(chan struct{})
	p := newSlowPeer(t, func(c net.Conn, h tcp.Header) error {
		if h.Seq != 1 {
			return respond(c, h, bytes.Repeat([]byte{0xbb}, int(h.Length)))
		}
		var b [tcp.ResponseSize]byte
		tcp.EncodeResponse(b[:], &tcp.Response{Seq: h.Seq, Status: ring.StatusOK, Length: h.Length})
		if _, err := c.Write(b[:]); err != nil {
			return err
		}
		if _, err := c.Write(bytes.Repeat([]byte{0xaa}, n/2)); err != nil {
			return err
		}
		close(halfSent)
		<-release
		_, err := c.Write(bytes.Repeat([]byte{0xaa}, n/2))
		return err
	})
	close(p.helloGo)
	a := startEngine(t, "a", 1, "connections_per_peer = 1") // both reads on one connection
	mem := bytes.Repeat([]byte{0xee}, 2*n)
	a.register(t, 1, mem, sdk.PermLocal)
	p.open(t, a)
	col := plugintest.NewCollector(t)
	a.tr.Submit(&ring.Descriptor{Token: 7, Op: ring.OpRead, Prio: uint8(prio), Peer: 1, LocalRegion: 1, Length: n}, col)
	<-halfSent
	found, err := a.tr.Abort(context.Background(), []uint64{7, 12345})
	if err != nil || found != 1 {
		t.Fatalf("Abort = %d, %v; want the one read in flight", found, err)
	}
	close(release) // the rest of the payload arrives after the abort
	if got := col.Wait(7); got.Status != ring.StatusCanceled || got.N != 0 {
		t.Fatalf("aborted read completed %v with %d bytes, want %v with 0", got.Status, got.N, ring.StatusCanceled)
	}
	// What arrived after the abort is not in the local memory. (What
	// arrived before it may be: the read was in flight.)
	for i, c := range mem[n/2 : n] {
		if c != 0xee {
			t.Fatalf("the aborted read wrote local memory after the abort: byte %d is %#x", n/2+i, c)
		}
	}
	a.tr.Submit(&ring.Descriptor{Token: 8, Op: ring.OpRead, Prio: uint8(prio), Peer: 1, LocalRegion: 1, LocalOffset: n, Length: n}, col)
	if got := col.Wait(8); got.Status != ring.StatusOK || got.N != n || !bytes.Equal(mem[n:], bytes.Repeat([]byte{0xbb}, n)) {
		t.Fatalf("read after the aborted one: %v, %d bytes; want it whole on the same connection", got.Status, got.N)
	}
	if v := a.stat(t, "ops_aborted"); v != 1 {
		t.Fatalf("ops_aborted = %d, want 1", v)
	}
	if v := a.stat(t, "conns_dialed"); v != 1 {
		t.Fatalf("conns_dialed = %d: the abort cost the connection", v)
	}
}

// A descriptor still queued (its connection is being set up) is taken
// back by Abort: it completes StatusCanceled at once and never reaches
// the peer; the others go on.
func TestAbortQueuedNeverLeaves(t *testing.T) {
	p := newSlowPeer(t, func(c net.Conn, h tcp.Header) error { return respond(c, h, nil) })
	a := startEngine(t, "a", 1, "")
	mem := make([]byte, 1<<16)
	a.register(t, 1, mem, sdk.PermLocal)
	p.open(t, a)
	col := plugintest.NewCollector(t)
	// The peer holds its hello answer: the slot dials with the write
	// still on its queue.
	a.tr.Submit(&ring.Descriptor{Token: 9, Op: ring.OpWrite, Peer: 1, LocalRegion: 1, RemoteOffset: 900, Length: 4096}, col)
	found, err := a.tr.Abort(context.Background(), []uint64{9})
	if err != nil || found != 1 {
		t.Fatalf("Abort = %d, %v; want the queued write", found, err)
	}
	if got := col.Wait(9); got.Status != ring.StatusCanceled {
		t.Fatalf("aborted write completed %v, want %v", got.Status, ring.StatusCanceled)
	}
	close(p.helloGo)
	a.tr.Submit(&ring.Descriptor{Token: 10, Op: ring.OpWrite, Peer: 1, LocalRegion: 1, RemoteOffset: 1000, Length: 4096}, col)
	if got := col.Wait(10); got.Status != ring.StatusOK {
		t.Fatalf("write after the abort: %v", got.Status)
	}
	got := p.requests()
	if len(got) != 1 || got[0].Offset != 1000 {
		t.Fatalf("the peer received %+v; want only the second write (offset 1000)", got)
	}
}
