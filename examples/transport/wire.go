package example

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// The wire, little-endian. A connection starts with a hello:
//
//	magic u32 | target incarnation u64 | run u64 | epoch u64 | name length u16 | engine name
//
// then carries frames, each answered before the next is sent:
//
//	request: op u32 | region u32 | offset u64 | length u64, then a write's payload
//	reply:   status u32 | 0 u32 | length u64, then a successful read's payload
const (
	magic    = 0x46455831 // "FEX1"
	helloLen = 30
	frameLen = 24
)

type stat = atomic.Uint64

// op is one accepted descriptor on its way to the peer's worker.
type op struct {
	d   ring.Descriptor
	r   *region
	mem []byte // the local bytes d names
	c   sdk.Completer
}

// peer is an open peer: a queue and the worker that carries it over one
// connection, dialed on first use and again after an error.
type peer struct {
	t    *Transport
	p    sdk.Peer
	work chan op
	done chan struct{}

	sendMu sync.Mutex // held by enqueue's send; Close closes work under it
	connMu sync.Mutex // guards conn and closed against Close
	conn   net.Conn
	closed bool
	epoch  uint64 // connections dialed, for the hello
}

func newPeer(t *Transport, p sdk.Peer) *peer {
	return &peer{t: t, p: p, work: make(chan op, t.set.depth), done: make(chan struct{})}
}

func (p *peer) enqueue(o op) {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	if p.isClosed() {
		p.t.finish(o, ring.StatusShutdown, 0)
		return
	}
	p.work <- o // the worker drains even while Close waits for sendMu
}

func (p *peer) isClosed() bool {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	return p.closed
}

// Close shuts the connection first, so that a worker blocked on the
// socket fails fast, then ends the queue and waits for the worker.
func (p *peer) Close() {
	p.connMu.Lock()
	first := !p.closed
	p.closed = true
	if p.conn != nil {
		p.conn.Close()
	}
	p.connMu.Unlock()
	if first {
		p.sendMu.Lock()
		close(p.work)
		p.sendMu.Unlock()
	}
	<-p.done
}

// serve is the peer's worker: every queued op completes exactly once.
func (p *peer) serve() {
	defer p.t.base.Goroutines.Done()
	defer close(p.done)
	var rw *bufio.ReadWriter
	for o := range p.work {
		if rw == nil {
			rw = p.dial()
		}
		if rw == nil {
			p.t.finish(o, p.failure(), 0)
			continue
		}
		st, n, err := p.carry(rw, &o)
		if err != nil { // the stream is out of step: drop it, redial next time
			p.connMu.Lock()
			p.conn.Close()
			p.conn, rw = nil, nil
			p.connMu.Unlock()
			st, n = p.failure(), 0
		}
		p.t.finish(o, st, n)
	}
	p.connMu.Lock()
	if p.conn != nil {
		p.conn.Close()
	}
	p.connMu.Unlock()
}

func (p *peer) failure() ring.Status {
	if p.isClosed() {
		return ring.StatusShutdown
	}
	return ring.StatusPeerUnreachable
}

func (p *peer) dial() *bufio.ReadWriter {
	c, err := net.Dial("unix", string(p.p.Endpoint))
	if err != nil {
		p.t.log.Warn("dial failed", "peer", p.p.Segment, "error", err)
		return nil
	}
	p.connMu.Lock()
	defer p.connMu.Unlock()
	if p.closed {
		c.Close()
		return nil
	}
	p.conn = c
	p.epoch++
	engine := p.t.base.Engine()
	h := make([]byte, helloLen, helloLen+len(engine))
	binary.LittleEndian.PutUint32(h[0:], magic)
	binary.LittleEndian.PutUint64(h[4:], p.p.Incarnation)
	binary.LittleEndian.PutUint64(h[12:], p.t.run)
	binary.LittleEndian.PutUint64(h[20:], p.epoch)
	binary.LittleEndian.PutUint16(h[28:], uint16(len(engine)))
	rw := bufio.NewReadWriter(bufio.NewReader(c), bufio.NewWriter(c))
	rw.Write(append(h, engine...)) // flushed with the first frame
	return rw
}

// carry sends o's frame and reads the answer. An error means the
// connection is unusable; a status is the target's verdict.
func (p *peer) carry(rw *bufio.ReadWriter, o *op) (ring.Status, uint64, error) {
	var b [frameLen]byte
	binary.LittleEndian.PutUint32(b[0:], uint32(o.d.Op))
	binary.LittleEndian.PutUint32(b[4:], o.d.RemoteRegion)
	binary.LittleEndian.PutUint64(b[8:], o.d.RemoteOffset)
	binary.LittleEndian.PutUint64(b[16:], o.d.Length)
	rw.Write(b[:])
	if o.d.Op == ring.OpWrite {
		rw.Write(o.mem)
	}
	if err := rw.Flush(); err != nil {
		return 0, 0, err
	}
	if _, err := io.ReadFull(rw, b[:16]); err != nil {
		return 0, 0, err
	}
	st := ring.Status(binary.LittleEndian.Uint32(b[0:]))
	n := binary.LittleEndian.Uint64(b[8:])
	if st != ring.StatusOK {
		return st, 0, nil
	}
	if n != o.d.Length { // the target must answer all or nothing
		return 0, 0, fmt.Errorf("reply of %d bytes to a frame of %d", n, o.d.Length)
	}
	if o.d.Op == ring.OpRead {
		if _, err := io.ReadFull(rw, o.mem); err != nil {
			return 0, 0, err
		}
		p.t.received.Add(n)
	} else {
		p.t.sent.Add(n)
	}
	return ring.StatusOK, n, nil
}

// accept serves each connection on a goroutine of its own.
func (t *Transport) accept() {
	defer t.base.Goroutines.Done()
	for {
		c, err := t.ln.Accept()
		if err != nil {
			return // closed by Stop
		}
		t.mu.Lock()
		if t.base.Stopped() { // Stop's sweep ran or runs after us
			t.mu.Unlock()
			c.Close()
			continue
		}
		t.conn[c] = struct{}{}
		t.base.Goroutines.Add(1)
		t.mu.Unlock()
		go t.serveConn(c)
	}
}

var errFenced = errors.New("the dialer's run is fenced")

// serveConn applies a peer's frames to this engine's memory. The target
// checks everything: the incarnation, the region, its permission and the
// bounds; the initiator's word is never trusted.
func (t *Transport) serveConn(c net.Conn) {
	defer t.base.Goroutines.Done()
	defer func() {
		t.mu.Lock()
		delete(t.conn, c)
		t.mu.Unlock()
		c.Close()
	}()
	rw := bufio.NewReadWriter(bufio.NewReader(c), bufio.NewWriter(c))
	var h [helloLen]byte
	if _, err := io.ReadFull(rw, h[:]); err != nil || binary.LittleEndian.Uint32(h[0:]) != magic {
		return
	}
	stale := binary.LittleEndian.Uint64(h[4:]) != t.base.Incarnation()
	from := make([]byte, binary.LittleEndian.Uint16(h[28:]))
	if _, err := io.ReadFull(rw, from); err != nil {
		return
	}
	fc, ok := t.fences.Open(string(from), binary.LittleEndian.Uint64(h[12:]), binary.LittleEndian.Uint64(h[20:]), func() { c.Close() })
	if !ok {
		return // a fenced run may open nothing new
	}
	defer fc.Close()
	for {
		var b [frameLen]byte
		if _, err := io.ReadFull(rw, b[:]); err != nil {
			return
		}
		o := ring.Op(binary.LittleEndian.Uint32(b[0:]))
		off, n := binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])
		st, r := t.check(o, binary.LittleEndian.Uint32(b[4:]), off, n, stale)
		var err error
		switch {
		case o == ring.OpWrite && st == ring.StatusOK:
			if !fc.Begin() {
				r.Release()
				err = errFenced
				break
			}
			_, err = io.ReadFull(rw, r.Mem[off:off+n])
			fc.End()
			r.Release()
		case o == ring.OpWrite: // refused: the payload follows all the same
			_, err = io.CopyN(io.Discard, rw, int64(n))
		}
		if err != nil {
			return
		}
		if st != ring.StatusOK {
			n = 0
		}
		binary.LittleEndian.PutUint32(b[0:], uint32(st))
		binary.LittleEndian.PutUint32(b[4:], 0)
		binary.LittleEndian.PutUint64(b[8:], n)
		rw.Write(b[:16])
		if o == ring.OpRead && st == ring.StatusOK {
			rw.Write(r.Mem[off : off+n])
			r.Release()
		}
		if rw.Flush() != nil {
			return
		}
	}
}

// check decides a frame; with StatusOK it returns the region with a
// reference held, which the caller releases once done with its bytes.
func (t *Transport) check(o ring.Op, id uint32, off, n uint64, stale bool) (ring.Status, *region) {
	if o != ring.OpWrite && o != ring.OpRead || n == 0 || n > MaxSlice {
		return ring.StatusInvalid, nil
	}
	if stale {
		return ring.StatusStaleIncarnation, nil
	}
	r := t.base.Regions.Acquire(id)
	switch {
	case r == nil:
		return ring.StatusNotRegistered, nil
	case r.Perm == sdk.PermLocal, o == ring.OpWrite && r.Perm != sdk.PermRemoteReadWrite:
		r.Release()
		return ring.StatusPermission, nil
	case off+n < off || off+n > uint64(len(r.Mem)):
		r.Release()
		return ring.StatusOutOfBounds, nil
	}
	return ring.StatusOK, r
}
