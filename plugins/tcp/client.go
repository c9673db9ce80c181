package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit"
	"github.com/ferrydev/ferry/sdk/ring"
	"github.com/ferrydev/ferry/sdk/wallclock"
)

// The initiator side. A peer has connections_per_peer slots per local rail;
// a slot is one connection's queue and its writer goroutine, started at
// OpenPeer. The TCP connection itself is dialed lazily, when the first
// descriptor reaches the slot, and re-dialed on the next descriptor after
// it breaks; it leaves from the rail's IP towards the peer address paired
// with the rail (see dialPlan). Descriptors go to the least loaded slot of
// their rail (bytes queued or in flight), ties broken round robin.
//
// Per connection, the sender encodes headers into the op records and sends
// every queued frame with writev straight from the registered memory; the
// reader goroutine matches responses to the FIFO of frames in flight and,
// for reads, receives the payload straight into the registered memory.
//
// The sender is whoever holds the slot's send lock. Usually that is Submit
// itself: when the connection is up, nobody else is sending and the frames
// are small, the submitting goroutine sends them with one non-waiting
// writev. Handing every frame to the writer goroutine would cost a thread
// wakeup per descriptor, which on a small VM is most of a small transfer's
// latency. The writer goroutine does everything that may wait: dialing,
// large frames, the rest of a writev the socket did not take at once, and
// whatever was queued while someone else held the lock.
//
// Ownership keeps completion exactly-once: an op is completed by whoever
// holds it. Submit holds it until it is queued; the sender holds it from the
// queue until it is pushed onto the connection's FIFO; the reader holds the
// FIFO, and when the connection ends the writer takes what is left in the
// FIFO only after the reader has exited and under the send lock (never while
// a writev is in progress), so neither side touches memory of an op that
// was completed.

// maxBatch bounds the frames sent by one writev, batchBytes the payload.
const (
	maxBatch   = 64
	batchBytes = 4 << 20
	// frameCost is what a frame adds to a slot's load beyond its payload.
	frameCost = 4096
	// inlineBytes bounds the payload Submit sends itself in one writev;
	// larger frames, which would keep the submitting goroutine copying,
	// go to the writer goroutine.
	inlineBytes = 256 << 10
	// spillLoad is the load of a rail's first connection below which
	// pick keeps to it: small requests share one connection, so one
	// reader wakes on each side for them and the writer's batches are
	// larger; a large transfer, or a receiver falling behind, spreads
	// over the others. On a 2-vCPU guest, 4 KiB writes in batches of
	// 128 ran 35-45% faster on one connection than on two taken in turn
	// (ferry bench, connections_per_peer = 1 against 2), and 64 MiB
	// writes no slower.
	spillLoad = 4 << 20
)

// op is one descriptor on its way. Records are pooled.
type op struct {
	next     *op
	token    uint64
	kind     ring.Op
	local    *region
	mem      []byte      // local memory: the payload of a write, the target of a read
	bounce   *kit.Bounce // foreign local memory: mem is its bytes (foreign.go)
	lOffset  uint64      // with bounce: the local region offset to copy back to
	rRegion  uint32
	rOffset  uint64
	deadline int64
	// aborted is set by Abort on a read in flight: what is left of its
	// payload goes to scratch memory, and it completes StatusCanceled.
	aborted atomic.Bool
	c       sdk.Completer
	s       *slot
	seq     uint64
	hdr     [RequestSize]byte
}

type peer struct {
	t           *Transport
	id          uint32
	segment     string
	incarnation uint64
	maxFrame    uint64  // largest payload we send this peer in one frame
	from        string  // this engine's name, sent in the hello (FlagFrom); "" for a listener that does not read it
	conns       int     // bulk slots per rail
	nrails      int     // local rails
	prio        bool    // slots[nrails*conns+r] is rail r's high-priority slot (prio.go)
	slots       []*slot // rail r's bulk slots are slots[r*conns : (r+1)*conns]
	rr          atomic.Uint32
	ctx         context.Context // canceled by ClosePeer and Stop
	cancel      context.CancelFunc
	wg          sync.WaitGroup // the peer's writers and readers
}

// rails is the number of local rails the peer has slots for.
func (p *peer) rails() int { return p.nrails }

// pick chooses the slot of rail r for the next descriptor: the rail's
// first slot while its load is under spillLoad, else the least loaded.
func (p *peer) pick(r int) *slot {
	slots := p.slots[r*p.conns : (r+1)*p.conns]
	n := len(slots)
	if n == 1 || slots[0].load.Load() < spillLoad {
		return slots[0]
	}
	start := int(p.rr.Add(1) % uint32(n))
	best := slots[start]
	bl := best.load.Load()
	for i := 1; i < n && bl > 0; i++ {
		s := slots[(start+i)%n]
		if l := s.load.Load(); l < bl {
			best, bl = s, l
		}
	}
	return best
}

// close stops the peer's goroutines; their descriptors complete with
// StatusShutdown.
func (p *peer) Close() {
	for _, s := range p.slots {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
	}
	p.cancel()
	p.wg.Wait()
}

type slot struct {
	t    *Transport
	p    *peer
	rail *rail
	plan []dialTarget // the peer addresses to dial, paired first; shared by the rail's slots
	load atomic.Int64 // bytes (plus frameCost per frame) queued or in flight
	wake chan struct{}
	prio bool // the peer's high-priority slot for its rail (prio.go)

	// sendMu is held by whoever sends on the current connection (the writer
	// goroutine or an inline Submit): it orders frames on the wire and owns
	// the connection's sender state.
	sendMu sync.Mutex

	mu         sync.Mutex
	head, tail *op // queued, not yet sent
	closed     bool
	cur        *clientConn
}

// enqueue queues o and sends it at once if that needs no waiting, or else
// wakes the slot's writer; it never blocks on the network.
func (s *slot) enqueue(o *op) {
	o.s = s
	small := len(o.mem) <= inlineBytes // o is not ours to read once queued
	s.load.Add(int64(len(o.mem)) + frameCost)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.t.complete(o, ring.StatusShutdown, 0)
		return
	}
	if s.tail == nil {
		s.head = o
	} else {
		s.tail.next = o
	}
	s.tail = o
	up := s.cur != nil
	s.mu.Unlock()
	if up && small && s.trySend() {
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// trySend sends queued frames from the calling goroutine, if it can do so
// without waiting: the connection is up, nobody else is sending, the first
// frames are small and the socket has room. It reports whether it left
// nothing for the writer to do.
func (s *slot) trySend() bool {
	if !s.sendMu.TryLock() {
		return false
	}
	defer s.sendMu.Unlock()
	s.mu.Lock()
	cc := s.cur
	s.mu.Unlock()
	if cc == nil || cc.unsent || cc.link.rw == nil || !cc.idle() || cc.isClosed() {
		// With frames in flight the writer's batching (many frames per
		// writev) is worth more than the wakeup it costs. A connection
		// already closed (an earlier send failed) is the writer's to tear
		// down and redial; sending on it would only fail again.
		return false
	}
	batch, more := s.popBatch(inlineBytes, inlineBytes)
	if batch == nil {
		return !more
	}
	if !s.send(cc, batch, true) {
		return false // the writer tears the connection down
	}
	return !more && !cc.unsent
}

// popBatch takes up to maxBatch queued ops and maxBytes of payload (the
// first op alone may have more), or nothing if the first op's payload is
// over maxFirst. It reports whether ops are left in the queue.
func (s *slot) popBatch(maxFirst, maxBytes int) (*op, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := s.head
	if first == nil {
		return nil, false
	}
	if len(first.mem) > maxFirst {
		return nil, true
	}
	last, n, bytes := first, 1, len(first.mem)
	for last.next != nil && n < maxBatch && bytes+len(last.next.mem) <= maxBytes {
		last = last.next
		n++
		bytes += len(last.mem)
	}
	s.head = last.next
	if s.head == nil {
		s.tail = nil
	}
	last.next = nil
	return first, s.head != nil
}

func (s *slot) empty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.head == nil
}

func (s *slot) takeAll() *op {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := s.head
	s.head, s.tail = nil, nil
	return first
}

// purge completes the queued ops that use region r.
func (s *slot) purge(r *region) {
	out, _ := s.takeIf(func(o *op) bool { return o.local == r })
	s.t.completeList(out, ring.StatusNotRegistered)
}

// takeIf takes the queued ops that match out of the queue, keeping the
// others in order, and returns them as a list (in reverse) and how many.
func (s *slot) takeIf(match func(*op) bool) (out *op, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var prev *op
	for o := s.head; o != nil; {
		next := o.next
		if match(o) {
			if prev == nil {
				s.head = next
			} else {
				prev.next = next
			}
			if s.tail == o {
				s.tail = prev
			}
			o.next = out
			out = o
			n++
		} else {
			prev = o
		}
		o = next
	}
	return out, n
}

// usesRegion reports whether a frame in flight on the slot's connection
// touches r; if so it closes the connection.
func (s *slot) abortIfUsing(r *region) {
	s.mu.Lock()
	cc := s.cur
	s.mu.Unlock()
	if cc == nil {
		return
	}
	cc.mu.Lock()
	using := false
	for o := cc.head; o != nil; o = o.next {
		if o.local == r {
			using = true
			break
		}
	}
	cc.mu.Unlock()
	if using {
		cc.close()
	}
}

// brokenStatus is what in-flight work gets when its connection ends.
func (s *slot) brokenStatus() ring.Status {
	if s.p.ctx.Err() != nil {
		return ring.StatusShutdown
	}
	return ring.StatusPeerUnreachable
}

// run is the slot's writer goroutine.
func (s *slot) run() {
	defer s.t.base.Goroutines.Done()
	defer s.p.wg.Done()
	if n := s.bulkNice(); n > 0 {
		defer s.t.lowerThread(n)()
	}
	var cc *clientConn
	for {
		var broken <-chan struct{}
		if cc != nil {
			broken = cc.readerDone
		}
		select {
		case <-s.p.ctx.Done():
			s.mu.Lock()
			s.closed = true
			s.mu.Unlock()
			if cc != nil {
				s.teardown(cc, ring.StatusShutdown)
			}
			s.t.completeList(s.takeAll(), ring.StatusShutdown)
			return
		case <-broken:
			s.teardown(cc, s.brokenStatus())
			cc = nil
		case <-s.wake:
		}
		cc = s.pump(cc)
	}
}

// pump sends everything queued, dialing first if needed.
func (s *slot) pump(cc *clientConn) *clientConn {
	for s.p.ctx.Err() == nil {
		if cc == nil {
			if s.empty() {
				return nil
			}
			// Dial with the work still queued, where UnregisterMemory can
			// take it back.
			var st ring.Status
			cc, st = s.connect()
			if cc == nil {
				s.t.completeList(s.takeAll(), st)
				return nil
			}
		}
		s.sendMu.Lock()
		ok := true
		if cc.unsent {
			// An inline send left the rest of its writev to us.
			ok = s.write(cc, false)
		}
		var batch *op
		if ok {
			batch, _ = s.popBatch(maxFrameAny, batchBytes)
			if batch != nil {
				ok = s.send(cc, batch, false)
			}
		}
		s.sendMu.Unlock()
		if !ok {
			s.teardown(cc, s.brokenStatus())
			cc = nil
			continue
		}
		if batch == nil {
			return cc
		}
	}
	return cc
}

// maxFrameAny lets popBatch take a first frame of any size.
const maxFrameAny = int(^uint(0) >> 1)

// send writes a batch of frames on cc; the caller holds sendMu. Inline, it
// writes what the socket takes at once and leaves the rest to the writer
// (cc.unsent). It reports false when the connection is broken; the frames
// it pushed are then the reader's (and after it the teardown's) to
// complete.
func (s *slot) send(cc *clientConn, batch *op, inline bool) bool {
	t := s.t
	now := wallclock.Now()
	cc.nb = cc.iov[:0]
	var first, last *op
	frames, bytes := 0, uint64(0)
	for o := batch; o != nil; {
		next := o.next
		o.next = nil
		switch {
		case o.deadline != 0 && now >= o.deadline:
			t.complete(o, ring.StatusTimeout, 0)
		case o.local.dead():
			t.complete(o, ring.StatusNotRegistered, 0)
		case uint64(len(o.mem)) > cc.maxFrame:
			t.complete(o, ring.StatusInvalid, 0)
		default:
			cc.seq++
			o.seq = cc.seq
			h := Header{Op: o.kind, Seq: o.seq, Incarnation: s.p.incarnation,
				Region: o.rRegion, Offset: o.rOffset, Length: uint64(len(o.mem))}
			EncodeHeader(o.hdr[:], &h)
			cc.nb = append(cc.nb, o.hdr[:])
			if o.kind == ring.OpWrite {
				cc.nb = append(cc.nb, o.mem)
				bytes += uint64(len(o.mem))
			}
			frames++
			if last == nil {
				first = o
			} else {
				last.next = o
			}
			last = o
		}
		o = next
	}
	if first == nil {
		return true
	}
	// From here on the ops belong to the FIFO: do not read them again.
	if !cc.push(first, last) {
		t.completeList(first, s.brokenStatus())
		return false
	}
	t.stats.framesOut.Add(uint64(frames))
	t.stats.bytesSent.Add(bytes)
	s.rail.bytesSent.Add(bytes)
	return s.write(cc, inline)
}

// write sends cc.nb; the caller holds sendMu. Inline, it sends what the
// socket takes at once and marks the rest unsent, for the writer.
func (s *slot) write(cc *clientConn, inline bool) bool {
	var err error
	if inline {
		var all bool
		if all, err = cc.link.tryWriteBuffers(&cc.nb); err == nil && !all {
			cc.unsent = true
			return true
		}
	} else {
		err = cc.link.writeBuffers(&cc.nb)
	}
	cc.unsent = false
	clear(cc.iov[:])
	if err != nil {
		t := s.t
		t.stats.errors.Add(1)
		s.rail.errors.Add(1)
		if s.p.ctx.Err() == nil {
			t.log.Debug("write to peer failed", "peer", s.p.segment, "addr", cc.addr, "error", err)
		}
		cc.cause.CompareAndSwap(nil, &err)
		cc.close()
		return false
	}
	return true
}

// teardown ends cc: it closes the socket, waits for the reader to exit and
// completes what was still in flight with st.
func (s *slot) teardown(cc *clientConn, st ring.Status) {
	cc.close()
	<-cc.readerDone
	cc.stopAfter()
	// An inline send may be in its writev on the closed socket: the FIFO's
	// memory is in use until it returns.
	s.sendMu.Lock()
	cc.mu.Lock()
	list := cc.head
	cc.head, cc.tail = nil, nil
	cc.dead = true
	cc.mu.Unlock()
	s.mu.Lock()
	s.cur = nil
	s.mu.Unlock()
	cc.unsent = false
	cc.nb = nil
	clear(cc.iov[:])
	s.sendMu.Unlock()
	s.t.stats.connsOpen.Add(-1)
	s.rail.connsOpen.Add(-1)
	if st != ring.StatusShutdown && s.t.run != 0 && s.p.from != "" && hasWrite(list) && !peerClosed(cc.cause.Load()) {
		// This side gave the connection up (a stall, a bad answer) while
		// writes were unanswered: the peer may still apply them, after a
		// newer write to the same range that another connection carries.
		// They complete once the peer fenced the connection (fence.go).
		s.p.wg.Add(1)
		s.t.base.Goroutines.Add(1)
		go s.fenceThenComplete(cc, list, st)
		return
	}
	s.t.completeList(list, st)
}

// connect dials the peer from the slot's rail (trying the peer's addresses
// in the order of the rail's plan, the paired one first) and says hello.
func (s *slot) connect() (*clientConn, ring.Status) {
	p, t := s.p, s.t
	st := ring.StatusPeerUnreachable
	var lastErr error
	for _, dt := range s.plan {
		addr := dt.addr
		d := net.Dialer{Timeout: t.set.ioTimeout}
		if dt.local != nil {
			d.LocalAddr = dt.local
		}
		nc, err := d.DialContext(p.ctx, "tcp", addr)
		if err != nil {
			if p.ctx.Err() != nil {
				return nil, ring.StatusShutdown
			}
			lastErr = err
			continue
		}
		epoch := t.epochs.Add(1)
		maxFrame, hst, err := s.hello(nc, epoch, false)
		if hst != ring.StatusOK {
			_ = nc.Close()
			if p.ctx.Err() != nil {
				return nil, ring.StatusShutdown
			}
			lastErr = err
			if hst == ring.StatusPeerUnreachable {
				continue
			}
			// The peer answered and refused: every address would say the same.
			t.stats.helloRejected.Add(1)
			t.log.Warn("peer refused connection", "peer", p.segment, "rail", s.rail.idx, "addr", addr, "status", hst.String(), "error", err)
			return nil, hst
		}
		cc := newClientConn(s, nc, addr, min(p.maxFrame, maxFrame))
		cc.epoch = epoch
		s.mu.Lock()
		s.cur = cc
		s.mu.Unlock()
		t.stats.connsDialed.Add(1)
		t.stats.connsOpen.Add(1)
		s.rail.connsDialed.Add(1)
		s.rail.connsOpen.Add(1)
		p.wg.Add(1)
		t.base.Goroutines.Add(1)
		go cc.readLoop()
		return cc, ring.StatusOK
	}
	t.stats.dialFailures.Add(1)
	s.rail.errors.Add(1)
	t.log.Debug("cannot reach peer", "peer", p.segment, "rail", s.rail.idx, "error", lastErr)
	return nil, st
}

// hello runs the connection handshake. A refusal comes back as the peer's
// status; a peer that does not answer properly is unreachable (or, if it
// speaks something else, StatusProtocol). With a cluster secret, the peer
// must prove it knows it before anything is sent to it, and this side
// proves it in turn; a mismatch is StatusPermission.
func (s *slot) hello(nc net.Conn, epoch uint64, fence bool) (uint64, ring.Status, error) {
	p, t := s.p, s.t
	stop := context.AfterFunc(p.ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	_ = nc.SetDeadline(time.Now().Add(t.set.ioTimeout))
	secret := t.set.Secret
	h := Hello{Version: ProtocolVersion, Incarnation: p.incarnation, Segment: p.segment}
	if secret != nil {
		h.Flags, h.Nonce = FlagAuth, newNonce()
	}
	if p.from != "" {
		h.Flags, h.From = h.Flags|FlagFrom, p.from
	}
	if t.run != 0 {
		h.Flags, h.Run, h.Epoch = h.Flags|FlagRun, t.run, epoch
		if fence {
			h.Flags |= FlagFence | FlagFrom
		}
	}
	if _, err := nc.Write(AppendHello(nil, h)); err != nil {
		return 0, ring.StatusPeerUnreachable, err
	}
	var b [HelloReplySize + ProofSize]byte
	if _, err := io.ReadFull(nc, b[:HelloReplySize]); err != nil {
		return 0, ring.StatusPeerUnreachable, err
	}
	rep, err := DecodeHelloReply(b[:HelloReplySize])
	if err != nil {
		return 0, ring.StatusProtocol, err
	}
	if rep.Version != ProtocolVersion {
		return 0, ring.StatusProtocol, fmt.Errorf("peer speaks tcp wire protocol version %d, this plugin speaks %d", rep.Version, ProtocolVersion)
	}
	theirAuth := rep.Flags&FlagAuth != 0
	if theirAuth != (secret != nil) && (rep.Status == ring.StatusPermission || rep.Status == ring.StatusOK) {
		t.stats.authFailures.Add(1)
		if secret == nil {
			return 0, ring.StatusPermission, errors.New("cluster secret mismatch: the peer requires a cluster secret and this engine has none; set the same cluster_secret in the tcp plugin's config block of both engines")
		}
		return 0, ring.StatusPermission, errors.New("cluster secret mismatch: this engine has a cluster secret and the peer has none; set the same cluster_secret in the tcp plugin's config block of both engines, or remove it from this one")
	}
	if rep.Status != ring.StatusOK {
		return 0, rep.Status, fmt.Errorf("peer refused hello: %s", rep.Status)
	}
	if rep.Incarnation != p.incarnation {
		return 0, ring.StatusStaleIncarnation, fmt.Errorf("peer accepted incarnation %d but is %d", p.incarnation, rep.Incarnation)
	}
	if rep.MaxFrame == 0 {
		return 0, ring.StatusProtocol, errors.New("peer announced max_frame 0")
	}
	if secret != nil {
		if _, err := io.ReadFull(nc, b[HelloReplySize:]); err != nil {
			return 0, ring.StatusPeerUnreachable, err
		}
		var theirs Proof
		if err := DecodeProof(b[HelloReplySize:], &theirs); err != nil {
			return 0, ring.StatusProtocol, err
		}
		tr := transcript{version: ProtocolVersion, dialerNonce: h.Nonce, listenNonce: theirs.Nonce,
			segment: h.Segment, from: h.From, incarnation: h.Incarnation, run: h.Run, epoch: h.Epoch, fence: fence,
			listenerInc: rep.Incarnation, maxFrame: rep.MaxFrame, listenerFlag: rep.Flags}
		ours := Proof{MAC: authMAC(secret, proofByDialer, &tr)}
		ok := theirs.Status == ring.StatusOK && verifyMAC(secret, proofByListener, &tr, theirs.MAC)
		if !ok {
			// Tell the listener why this side hangs up, and send it
			// nothing made with the secret.
			ours = Proof{Status: ring.StatusPermission}
		}
		EncodeProof(b[HelloReplySize:], &ours)
		_, werr := nc.Write(b[HelloReplySize:])
		if !ok {
			t.stats.authFailures.Add(1)
			return 0, ring.StatusPermission, errors.New("cluster secret mismatch: the peer's proof does not verify with this engine's cluster secret; give both engines the same cluster_secret")
		}
		if werr != nil {
			return 0, ring.StatusPeerUnreachable, werr
		}
	}
	_ = nc.SetDeadline(time.Time{})
	return rep.MaxFrame, ring.StatusOK, nil
}

// clientConn is one established connection of a slot.
type clientConn struct {
	s        *slot
	addr     string
	link     *link
	maxFrame uint64

	closeOnce  sync.Once
	closing    chan struct{}
	readerDone chan struct{}
	stopAfter  func() bool

	epoch uint64                // its number in this run, in its hello (FlagRun)
	cause atomic.Pointer[error] // why it broke, when an error broke it

	mu         sync.Mutex
	head, tail *op // in flight, in wire order
	dead       bool

	// sender-owned (under slot.sendMu)
	seq    uint64
	iov    [2 * maxBatch][]byte
	nb     net.Buffers // the frames being written
	unsent bool        // nb holds the rest of an inline writev, for the writer

	// reader-owned: response headers read ahead, rbuf[rpos:rend] not yet used
	rbuf       [maxBatch * ResponseSize]byte
	rpos, rend int
	scratch    []byte // where an aborted read's payload goes; see Abort
}

func newClientConn(s *slot, nc net.Conn, addr string, maxFrame uint64) *clientConn {
	cc := &clientConn{
		s: s, addr: addr, link: newLink(nc, s.t.set.ioTimeout), maxFrame: maxFrame,
		closing: make(chan struct{}), readerDone: make(chan struct{}),
	}
	cc.link.rw = newRawWriter(nc)
	cc.link.chunk = s.bulkChunk()
	if s.p.prio && !s.prio {
		s.t.setBulkBuffer(nc)
	}
	cc.stopAfter = context.AfterFunc(s.p.ctx, cc.close)
	return cc
}

func (cc *clientConn) close() {
	cc.closeOnce.Do(func() {
		close(cc.closing)
		_ = cc.link.close()
	})
}

// isClosed reports whether close was called.
func (cc *clientConn) isClosed() bool {
	select {
	case <-cc.closing:
		return true
	default:
		return false
	}
}

func (cc *clientConn) push(first, last *op) bool {
	cc.mu.Lock()
	if cc.dead {
		cc.mu.Unlock()
		return false
	}
	if cc.tail == nil {
		cc.head = first
	} else {
		cc.tail.next = first
	}
	cc.tail = last
	cc.mu.Unlock()
	return true
}

func (cc *clientConn) readLoop() {
	t := cc.s.t
	defer t.base.Goroutines.Done()
	defer cc.s.p.wg.Done()
	defer close(cc.readerDone)
	if n := cc.s.bulkNice(); n > 0 {
		defer t.lowerThread(n)()
	}
	if cc.s.prio {
		defer t.priorityReader(cc.link)()
	}
	err := cc.readResponses()
	cc.mu.Lock()
	cc.dead = true
	cc.mu.Unlock()
	select {
	case <-cc.closing: // we were told to stop; not an error
	default:
		cc.cause.CompareAndSwap(nil, &err)
		t.stats.errors.Add(1)
		cc.s.rail.errors.Add(1)
		t.log.Debug("connection to peer lost", "peer", cc.s.p.segment, "rail", cc.s.rail.idx, "addr", cc.addr, "error", err)
	}
	cc.close()
}

var errMalformedResponse = errors.New("tcp: malformed response")

func (cc *clientConn) readResponses() error {
	t := cc.s.t
	var r Response
	for {
		if cc.rpos == cc.rend {
			if err := cc.fillHeaders(); err != nil {
				return err
			}
		}
		hdr := cc.rbuf[cc.rpos : cc.rpos+ResponseSize]
		cc.rpos += ResponseSize
		cc.mu.Lock()
		o := cc.head
		cc.mu.Unlock()
		if o == nil {
			t.stats.connsDroppedMalformed.Add(1)
			return fmt.Errorf("%w: bytes with no request in flight", errMalformedResponse)
		}
		if err := DecodeResponse(hdr, &r); err != nil {
			t.stats.connsDroppedMalformed.Add(1)
			return fmt.Errorf("%w: %w", errMalformedResponse, err)
		}
		if r.Seq != o.seq {
			t.stats.connsDroppedMalformed.Add(1)
			return fmt.Errorf("%w: sequence %d, expected %d", errMalformedResponse, r.Seq, o.seq)
		}
		t.stats.framesIn.Add(1)
		var done uint64
		switch {
		case r.Status == ring.StatusOK && o.kind == ring.OpRead:
			if r.Length != uint64(len(o.mem)) || cc.rpos != cc.rend {
				t.stats.connsDroppedMalformed.Add(1)
				return fmt.Errorf("%w: read answered with %d bytes, asked %d", errMalformedResponse, r.Length, len(o.mem))
			}
			aborted, err := cc.readPayload(o)
			if err != nil {
				return err
			}
			done = r.Length
			if aborted {
				r.Status, done = ring.StatusCanceled, 0
			}
			t.stats.bytesReceived.Add(done)
			cc.s.rail.bytesReceived.Add(done)
		case r.Length != 0:
			t.stats.connsDroppedMalformed.Add(1)
			return fmt.Errorf("%w: %d payload bytes with status %s", errMalformedResponse, r.Length, r.Status)
		case r.Status == ring.StatusOK:
			done = uint64(len(o.mem))
		}
		cc.mu.Lock()
		cc.head = o.next
		if cc.head == nil {
			cc.tail = nil
		}
		cc.mu.Unlock()
		o.next = nil
		c := o.c
		t.complete(o, r.Status, done)
		if cc.rpos == cc.rend && cc.idle() {
			// Nothing more to read here for now: stand in for the lane
			// while the host decides on its next request (see
			// sdk.Assister). Nothing of ours is locked.
			if a, ok := c.(sdk.Assister); ok {
				a.Assist()
			}
		}
	}
}

// fillHeaders reads response headers into rbuf: as many as are there, but
// never past the header of the first read in flight, whose payload follows
// it on the wire and goes straight into registered memory. The reader sits
// in read(2) even while nothing is in flight, so a peer that closes an idle
// connection is noticed at once and the next descriptor dials afresh
// instead of failing on a dead socket.
func (cc *clientConn) fillHeaders() error {
	cc.mu.Lock()
	k := headerBudget(cc.head)
	cc.mu.Unlock()
	n, err := cc.link.readSome(cc.rbuf[:max(k, 1)*ResponseSize], cc.idle)
	if err != nil {
		return err
	}
	return cc.completeHeaders(n)
}

// readPayload receives the payload of read o (whose header was the last in
// rbuf) into its memory and, in the same system calls, the headers that
// follow it, as far as fillHeaders would. Once o is aborted (Abort) it
// writes no more of o's memory: the rest of the payload is read into
// scratch memory, and it reports aborted.
func (cc *clientConn) readPayload(o *op) (aborted bool, err error) {
	cc.mu.Lock()
	k := headerBudget(o.next)
	cc.mu.Unlock()
	next := cc.rbuf[:k*ResponseSize]
	got, n, err := cc.link.readFullNextUnless(o.mem, next, &o.aborted)
	if err != nil {
		return false, err
	}
	if got < len(o.mem) {
		if n, err = cc.discard(len(o.mem)-got, next); err != nil {
			return true, err
		}
		cc.s.t.stats.opsAborted.Add(1)
		aborted = true
	}
	return aborted, cc.completeHeaders(n)
}

// headerBudget counts the responses, from o on, whose headers may be read
// ahead: the answers to writes and the first answer to a read.
func headerBudget(o *op) int {
	k := 0
	for o != nil && o.kind == ring.OpWrite && k < maxBatch {
		o, k = o.next, k+1
	}
	if o != nil && k < maxBatch {
		k++
	}
	return k
}

// completeHeaders finishes a header of which only part of the n bytes in
// rbuf arrived, and makes rbuf[:n rounded up] the headers to use.
func (cc *clientConn) completeHeaders(n int) error {
	whole := (n + ResponseSize - 1) / ResponseSize * ResponseSize
	if whole > n {
		if err := cc.link.readFull(cc.rbuf[n:whole]); err != nil {
			return err
		}
	}
	cc.rpos, cc.rend = 0, whole
	return nil
}

// idle reports whether nothing is in flight.
func (cc *clientConn) idle() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.head == nil
}
