package tcp

import (
	"container/list"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/sdk/kit"
	"github.com/ferrydev/ferry/sdk/ring"
)

// The listener side: an accept loop per listen address (per rail) and a
// goroutine per accepted connection that reads requests, checks them
// against the region table and answers in order.

// acceptLoop accepts connections on rail r's listener until it is closed.
func (t *Transport) acceptLoop(ln net.Listener, r *rail) {
	defer t.base.Goroutines.Done()
	backoff := time.Duration(0)
	for {
		nc, err := ln.Accept()
		if err != nil {
			if t.base.Stopped() || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors or a similar passing condition: wait a
			// little, more each time, instead of spinning on Accept.
			t.stats.errors.Add(1)
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t.log.Warn("accept failed", "addr", ln.Addr().String(), "error", err, "retry_in", backoff)
			tm := time.NewTimer(backoff)
			select {
			case <-tm.C:
			case <-t.ctx.Done():
				tm.Stop()
				return
			}
			continue
		}
		backoff = 0
		sc := &serverConn{t: t, rail: r, link: newLink(nc, t.set.ioTimeout), run: -1,
			host: remoteHost(nc), deadline: time.Now().Add(t.set.handshakeTimeout), in: ahead{budget: &t.ahead}}
		t.mu.Lock()
		if t.base.Stopped() {
			t.mu.Unlock()
			_ = nc.Close()
			return
		}
		t.admit(sc)
		t.servers[sc] = struct{}{}
		t.base.Goroutines.Add(1)
		t.stats.connsAccepted.Add(1)
		r.connsAccepted.Add(1)
		t.countOpen(sc, 1)
		t.mu.Unlock()
		go sc.serve()
	}
}

type serverConn struct {
	t        *Transport
	rail     *rail // whose listener accepted the connection
	link     *link
	host     netip.Addr             // the remote IP address, for max_connections_per_host
	deadline time.Time              // hello, authentication and the first request must be done by then
	cur      atomic.Pointer[region] // the region whose memory the connection is using now

	// The guard's books (limits.go), under Transport.mu.
	state             connState
	pendingAt, hostAt *list.Element
	first             bool // no byte of the handshake read yet
	open              bool // counted in conns_open (until closed)
	peer              peerKey
	served            *kit.ServedCell // the dialer's traffic served on this rail, once authenticated

	dialerRun   uint64         // the dialer's plugin run, from its hello (0: it sent none)
	dialerEpoch uint64         // the connection's epoch in that run
	fenceAsk    bool           // the hello asks to fence the dialer's connection dialerEpoch (FlagFence)
	fence       *kit.FenceConn // its place in Transport.fences, once authenticated

	hdr     [RequestSize]byte
	in      ahead  // what was read past the current frame (ahead.go)
	scratch []byte // where a rejected write's payload is discarded
	unblock func() // ends the reader's waits on its own thread (prio.go); set by serve

	// Responses held back (see serveFrames): their headers, the iovecs
	// that send them (runs of headers, each read's payload straight from
	// its region) and the references that keep those regions.
	pendHdr    [maxPending * ResponseSize]byte
	npend      int
	pendIov    [2 * maxPending][]byte
	niov       int
	run        int // index in pendHdr where the last iovec's run of headers starts; -1 after a payload
	held       [maxPending]*region
	heldBounce [maxPending]*kit.Bounce // the staging buffers of held foreign reads
	nheld      int
	heldBytes  uint64
	nb         net.Buffers
}

// flushing marks, in serverConn.cur, a connection sending held payloads
// (of possibly several regions).
var flushing = new(region)

func (sc *serverConn) serve() {
	t := sc.t
	defer func() {
		// Give the connection's place back before closing it, so that a
		// dialer that sees it closed can connect again at once.
		t.mu.Lock()
		delete(t.servers, sc)
		t.release(sc)
		t.countOpen(sc, -1)
		t.mu.Unlock()
		_ = sc.link.nc.Close()
		t.base.Goroutines.Done()
	}()
	if !sc.hello() {
		return
	}
	if sc.fenceAsk {
		// A fence asks for one answer and carries no frame: it is served
		// here, its dialer proven by the hello's proof where there is a
		// cluster secret (as every connection is).
		sc.serveFence()
		return
	}
	have := 0
	if t.set.Secret == nil {
		// Without a secret, a connection proves nothing by its hello; it
		// stays unauthenticated until its first request header is there.
		// A close before it is at a frame boundary: clean.
		sc.first = true
		if !sc.handshakeRead(sc.hdr[:]) {
			return
		}
		have = RequestSize
	}
	if !t.authenticated(sc) {
		return
	}
	fc, ok := t.fences.Open(sc.peer.name, sc.dialerRun, sc.dialerEpoch, func() { shutdown(sc.link.nc) })
	if !ok {
		t.stats.fencedRefused.Add(1)
		t.log.Debug("refusing a connection of a fenced run", "remote", sc.link.nc.RemoteAddr().String(), "from", sc.peer.name, "run", sc.dialerRun)
		return
	}
	sc.fence = fc
	defer fc.Close()
	_ = sc.link.nc.SetDeadline(time.Time{})
	// Until it is taken for a bulk one, the connection may be a dialer's
	// priority connection (prio.go).
	if t.set.prioConn {
		sc.unblock = t.priorityReader(sc.link)
		defer func() { sc.unblock() }()
	}
	sc.served = t.served.Cell(sc.peer.name, sc.rail.idx)
	err := sc.serveFrames(have)
	switch {
	case err == nil, t.base.Stopped():
	case errors.Is(err, errMalformed):
		t.stats.connsDroppedMalformed.Add(1)
		t.log.Debug("dropping connection: malformed frame", "remote", sc.link.nc.RemoteAddr().String(), "error", err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		t.stats.connsDroppedTruncated.Add(1)
	case errors.Is(err, errFenced), sc.fence != nil && sc.fence.Fenced():
		// Cut by a fence: counted in fenced_frames / fences.
	default:
		t.stats.errors.Add(1)
		sc.rail.errors.Add(1)
	}
}

var errMalformed = errors.New("tcp: malformed frame")

// errFenced ends a connection whose dialer's run was fenced.
var errFenced = errors.New("tcp: the dialer's run is fenced")

// handshakeRead reads the next part of the handshake by sc.deadline,
// counting why it failed. Only a connection closed before its first byte
// ends cleanly; one shed meanwhile (closed under it) is counted where it
// was shed.
func (sc *serverConn) handshakeRead(b []byte) bool {
	t, nc := sc.t, sc.link.nc
	_, err := io.ReadFull(nc, b)
	switch {
	case err == nil:
		sc.first = false
		return true
	case errors.Is(err, net.ErrClosed):
	case isTimeout(err):
		if t.leavePending(sc) { // else shed as its deadline passed: counted there
			t.handshakeTimedOut(nc)
		}
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF) && !sc.first:
		t.stats.connsDroppedTruncated.Add(1)
	}
	return false
}

// hello reads the dialer's hello, answers it and, with a cluster secret,
// authenticates the dialer. It reports whether the connection goes on; it
// returns by sc.deadline (handshake_timeout after the accept) either way.
// Before the dialer has authenticated, the reply reveals nothing of this
// engine but its wire version, whether it has a cluster secret and, to a
// dialer that already named its segment and incarnation, its max_frame: a
// refusal carries no incarnation.
func (sc *serverConn) hello() bool {
	t := sc.t
	nc := sc.link.nc
	_ = nc.SetDeadline(sc.deadline)
	sc.first = true
	read := sc.handshakeRead
	malformed := func(what string, err error) bool {
		t.stats.connsDroppedMalformed.Add(1)
		t.log.Debug("dropping connection: bad "+what, "remote", nc.RemoteAddr().String(), "error", err)
		return false
	}
	var b [HelloSize + MaxNameLen + NonceSize]byte
	if !read(b[:HelloSize]) {
		return false
	}
	n, err := HelloRestLen(b[:HelloSize])
	if err != nil {
		return malformed("hello", err)
	}
	if !read(b[HelloSize : HelloSize+n]) {
		return false
	}
	h, err := DecodeHello(b[:HelloSize+n])
	if err != nil {
		return malformed("hello", err)
	}
	secret := t.set.Secret
	theirAuth, ourAuth := h.Flags&FlagAuth != 0, secret != nil
	sc.peer = peerKey{name: h.From}
	sc.dialerRun, sc.dialerEpoch, sc.fenceAsk = h.Run, h.Epoch, h.Flags&FlagFence != 0
	if h.From == "" {
		sc.peer.addr = sc.host
	}
	st := ring.StatusOK
	switch {
	case h.Version != ProtocolVersion:
		st = ring.StatusProtocol
	case theirAuth != ourAuth:
		st = ring.StatusPermission
	case h.Segment != t.base.Engine() || h.Incarnation != t.base.Incarnation():
		// A dialer with an old descriptor of this segment, or of whatever
		// segment used to listen here: either way it must refetch.
		st = ring.StatusStaleIncarnation
	case t.base.Stopped():
		st = ring.StatusShutdown
	}
	rep := HelloReply{Version: ProtocolVersion, Status: st}
	if st == ring.StatusOK {
		rep.Incarnation, rep.MaxFrame = t.base.Incarnation(), t.set.maxFrame
	}
	if ourAuth {
		rep.Flags = FlagAuth
	}
	var msg [HelloReplySize + ProofSize]byte
	EncodeHelloReply(msg[:], rep)
	out := msg[:HelloReplySize]
	var tr transcript
	if st == ring.StatusOK && ourAuth {
		tr = transcript{version: ProtocolVersion, dialerNonce: h.Nonce, listenNonce: newNonce(),
			segment: h.Segment, from: h.From, incarnation: h.Incarnation, run: h.Run, epoch: h.Epoch, fence: h.Flags&FlagFence != 0,
			listenerInc: rep.Incarnation, maxFrame: rep.MaxFrame, listenerFlag: rep.Flags}
		EncodeProof(msg[HelloReplySize:], &Proof{Nonce: tr.listenNonce, MAC: authMAC(secret, proofByListener, &tr)})
		out = msg[:]
	}
	if _, err := nc.Write(out); err != nil {
		if isTimeout(err) {
			t.handshakeTimedOut(nc)
		}
		return false
	}
	if st != ring.StatusOK {
		t.stats.helloRejected.Add(1)
		if st == ring.StatusPermission {
			if ourAuth {
				t.authFailed(nc, "the dialer has no cluster secret and this engine has one; set the same cluster_secret in the tcp plugin's config block of both engines")
			} else {
				t.authFailed(nc, "the dialer has a cluster secret and this engine has none; set the same cluster_secret in the tcp plugin's config block of both engines, or remove it from the dialer's")
			}
		}
		t.log.Debug("refused hello", "remote", nc.RemoteAddr().String(), "status", st.String(),
			"their_version", h.Version, "segment", h.Segment, "incarnation", h.Incarnation)
		return false
	}
	if ourAuth {
		var pb [ProofSize]byte
		if !read(pb[:]) {
			return false
		}
		var p Proof
		if err := DecodeProof(pb[:], &p); err != nil {
			return malformed("proof", err)
		}
		switch {
		case p.Status != ring.StatusOK:
			t.authFailed(nc, "the dialer could not verify this engine's proof; give both engines the same cluster_secret")
			return false
		case !verifyMAC(secret, proofByDialer, &tr, p.MAC):
			t.authFailed(nc, "the dialer's proof does not verify; give both engines the same cluster_secret")
			return false
		}
	}
	return true
}

// serveFrames answers requests until the connection ends. It returns nil on
// a clean close at a frame boundary.
//
// Requests are read ahead (ahead.go): a small frame's payload is read
// with what follows it, and the next frames come out of that buffer.
// Responses are held back while the next request is already there, and go
// out together (one write or writev for up to maxPending responses) before
// the connection would wait for the dialer. A read's payload is sent
// straight from its region with the region's reference held until then;
// so that no reference waits on the dialer, held responses are also sent
// before a write's payload is read when they hold references or the
// payload is large.
//
// have is how many bytes of the first header are already in sc.hdr.
func (sc *serverConn) serveFrames(have int) error {
	t := sc.t
	defer sc.releaseHeld()
	defer func() {
		sc.in.r = sc.in.w // what is left unread is dropped with the connection
		sc.in.release()
	}()
	sc.in.put(sc.hdr[:have])
	var h Header
	bulk := false // the goroutine runs on a nice thread (prio.go)
	for {
		if sc.in.len() < RequestSize && sc.npend > 0 {
			if !sc.in.drained {
				// A small request-response exchange pays per system call;
				// skip this one when the last read already found nothing
				// more.
				if err := sc.fill(); err != nil && !errors.Is(err, io.EOF) {
					return err
				}
			}
			if sc.in.len() < RequestSize {
				if err := sc.flush(); err != nil {
					return err
				}
			}
		}
		if sc.in.len() == 0 {
			if err := sc.waitIdle(); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
		}
		if err := sc.recv(sc.hdr[:]); err != nil {
			return eofIsTruncation(err)
		}
		if err := DecodeHeader(sc.hdr[:], &h); err != nil {
			return errors.Join(errMalformed, err)
		}
		if h.Length > t.set.maxFrame {
			return errors.Join(errMalformed, errors.New("length over max_frame"))
		}
		t.stats.framesIn.Add(1)
		if !bulk && h.Length >= bulkFrame && t.set.prioConn {
			bulk = true // from here on a bulk connection (prio.go)
			if sc.unblock != nil {
				sc.unblock()
				sc.unblock = func() {}
			}
			sc.link.chunk = t.set.bulkChunk
			t.setBulkBuffer(sc.link.nc)
			if t.set.bulkNice > 0 {
				defer t.lowerThread(t.set.bulkNice)()
			}
		}
		st, r := t.check(&h)
		switch h.Op {
		case ring.OpWrite:
			if sc.nheld > 0 || h.Length > flushBefore {
				if err := sc.flush(); err != nil {
					if r != nil {
						r.Release()
					}
					return err
				}
			}
			if st == ring.StatusOK && !sc.fence.Begin() {
				// The dialer's run is fenced: its host ended it, and what
				// it still sends must not land (fence.go).
				r.Release()
				t.stats.fencedFrames.Add(1)
				return errFenced
			}
			if st == ring.StatusOK {
				sc.cur.Store(r)
				var err error
				if r.Foreign != nil {
					st, err = sc.serveForeignWrite(r, &h)
				} else {
					err = sc.recv(r.Mem[h.Offset : h.Offset+h.Length])
				}
				sc.cur.Store(nil)
				sc.fence.End()
				r.Release()
				if err != nil {
					return eofIsTruncation(err)
				}
				t.stats.bytesReceived.Add(h.Length)
				sc.rail.bytesReceived.Add(h.Length)
				sc.served.Add(ring.OpWrite, 1, h.Length)
			} else if err := sc.discard(h.Length); err != nil {
				return eofIsTruncation(err)
			}
			if err := sc.queue(h.Seq, st, nil, nil); err != nil {
				return err
			}
		case ring.OpRead:
			var payload []byte
			var b *kit.Bounce
			switch {
			case st == ring.StatusOK && r.Foreign != nil && len(r.Mem) == 0:
				// Foreign memory: staged. A sealed region is read in
				// place below, from its read-only mapping.
				var err error
				if b, err = sc.foreignPayload(r, &h); err != nil {
					r.Release()
					return err
				} else if b == nil {
					r.Release()
					st, r = ring.StatusIO, nil
				} else {
					payload = b.B
				}
			case st == ring.StatusOK:
				payload = r.Mem[h.Offset : h.Offset+h.Length]
			}
			if err := sc.queueBounce(h.Seq, st, payload, r, b); err != nil {
				return err
			}
		}
	}
}

const (
	maxPending  = 64
	flushBefore = 256 << 10
)

// queue holds a response back; for a read that passed the checks, with its
// payload and the reference on its region r.
func (sc *serverConn) queue(seq uint64, st ring.Status, payload []byte, r *region) error {
	return sc.queueBounce(seq, st, payload, r, nil)
}

// queueBounce is queue for a payload staged in b (foreign memory), which
// is given back with the reference.
func (sc *serverConn) queueBounce(seq uint64, st ring.Status, payload []byte, r *region, b *kit.Bounce) error {
	if st != ring.StatusOK {
		sc.t.stats.framesRejected.Add(1)
	}
	i := sc.npend
	EncodeResponse(sc.pendHdr[i*ResponseSize:], &Response{Seq: seq, Status: st, Length: uint64(len(payload))})
	sc.npend++
	if sc.run >= 0 {
		sc.pendIov[sc.niov-1] = sc.pendHdr[sc.run*ResponseSize : sc.npend*ResponseSize]
	} else {
		sc.pendIov[sc.niov] = sc.pendHdr[i*ResponseSize : sc.npend*ResponseSize]
		sc.niov++
		sc.run = i
	}
	if r != nil {
		sc.pendIov[sc.niov] = payload
		sc.niov++
		sc.run = -1
		sc.held[sc.nheld] = r
		sc.heldBounce[sc.nheld] = b
		sc.nheld++
		sc.heldBytes += uint64(len(payload))
	}
	if sc.npend >= sc.t.set.maxHeld || sc.heldBytes >= flushBefore {
		return sc.flush()
	}
	return nil
}

// flush sends the responses held back and gives back their references.
func (sc *serverConn) flush() error {
	if sc.npend == 0 {
		return nil
	}
	var err error
	if sc.niov == 1 {
		err = sc.link.write(sc.pendIov[0])
	} else {
		if sc.nheld > 0 {
			sc.cur.Store(flushing)
		}
		sc.nb = sc.pendIov[:sc.niov]
		err = sc.link.writeBuffers(&sc.nb)
		sc.cur.Store(nil)
	}
	if err == nil {
		sc.t.stats.framesOut.Add(uint64(sc.npend))
		sc.t.stats.bytesSent.Add(sc.heldBytes)
		sc.rail.bytesSent.Add(sc.heldBytes)
		if sc.nheld > 0 {
			sc.served.Add(ring.OpRead, uint64(sc.nheld), sc.heldBytes)
		}
	}
	sc.releaseHeld()
	return err
}

// releaseHeld forgets the held responses and gives back their references.
func (sc *serverConn) releaseHeld() {
	for i := range sc.nheld {
		sc.held[i].Release()
		sc.held[i] = nil
		if b := sc.heldBounce[i]; b != nil { // nil for mapped memory
			sc.t.recv.release(uint64(len(b.B)))
			b.Put()
		}
		sc.heldBounce[i] = nil
	}
	clear(sc.pendIov[:sc.niov])
	sc.npend, sc.niov, sc.nheld, sc.run, sc.heldBytes = 0, 0, 0, -1, 0
}

// check decides whether a request may touch memory. On StatusOK it returns
// the region with a reference held.
func (t *Transport) check(h *Header) (ring.Status, *region) {
	if h.Length == 0 {
		return ring.StatusInvalid, nil
	}
	if h.Incarnation != t.base.Incarnation() {
		return ring.StatusStaleIncarnation, nil
	}
	r := t.base.Regions.Acquire(h.Region)
	if r == nil {
		return ring.StatusNotRegistered, nil
	}
	allowed := r.Perm.AllowsRemoteRead()
	if h.Op == ring.OpWrite {
		allowed = r.Perm.AllowsRemoteWrite()
	}
	if !allowed {
		r.Release()
		return ring.StatusPermission, nil
	}
	end := h.Offset + h.Length
	if end < h.Offset || end > r.Len() {
		r.Release()
		return ring.StatusOutOfBounds, nil
	}
	return ring.StatusOK, r
}

// discard reads and drops n payload bytes of a rejected write, so the next
// header is where the dialer put it. The region is never touched.
func (sc *serverConn) discard(n uint64) error {
	if sc.scratch == nil {
		sc.scratch = make([]byte, 64<<10)
	}
	for n > 0 {
		c := min(n, uint64(len(sc.scratch)))
		if err := sc.recv(sc.scratch[:c]); err != nil {
			return err
		}
		n -= c
	}
	return nil
}

func eofIsTruncation(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// abortUsing closes server connections whose current frame uses r.
func (t *Transport) abortServersUsing(r *region) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for sc := range t.servers {
		if cur := sc.cur.Load(); cur == r || cur == flushing {
			_ = sc.link.close()
		}
	}
}
