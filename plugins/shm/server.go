package shm

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/ferrydev/ferry/sdk/ring"
	sdkshm "github.com/ferrydev/ferry/sdk/shm"
)

// helloTimeout bounds the connection setup on either side: connect,
// credentials, hello and its answer.
const helloTimeout = 5 * time.Second

// srvConn is a connection a peer plugin dialed to us.
type srvConn struct {
	conn
	// held is what this peer may have mapped: region id -> generation.
	// acks are the revokes sent and not yet acknowledged, by generation.
	// Both under Transport.mu.
	held map[uint32]uint64
	acks map[uint64]chan struct{}
	gone chan struct{} // closed when serve returns
}

func (t *Transport) acceptLoop(ln *net.UnixListener) {
	defer t.base.Goroutines.Done()
	var backoff time.Duration
	var errLog, fullLog rateLog
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if t.base.Stopped() {
				return
			}
			if errors.Is(err, net.ErrClosed) {
				// Closed under us, not by Stop: no peer can connect any
				// more. Say so (Stats, and the fatal hook ends the
				// process so that the host restarts the plugin).
				t.acceptDead(err)
				return
			}
			// Out of descriptors (EMFILE, ENFILE) or memory: a passing
			// condition. Wait a little, more each time, instead of
			// spinning on Accept or giving up on every future peer.
			t.stats.acceptErrors.Add(1)
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			if n, ok := errLog.allow(time.Now()); ok {
				t.log.Warn("accept failed; retrying", "socket", ln.Addr().String(), "error", err, "retry_in", backoff, "failures_since_last_log", n)
			}
			tm := time.NewTimer(backoff)
			select {
			case <-tm.C:
			case <-t.stopping:
				tm.Stop()
				return
			}
			continue
		}
		backoff = 0
		t.mu.Lock()
		if t.base.Stopped() {
			t.mu.Unlock()
			c.Close()
			return
		}
		if len(t.servers) >= t.set.maxConns {
			t.mu.Unlock()
			// Counted before the close, so that whoever sees the close
			// sees the count too.
			t.stats.connsRefused.Add(1)
			c.Close()
			if n, ok := fullLog.allow(time.Now()); ok {
				t.log.Warn("refused a peer plugin's connection: max_conns connections are open; raise max_conns in the shm plugin's config block",
					"max_conns", t.set.maxConns, "refused_since_last_log", n)
			}
			continue
		}
		sc := &srvConn{conn: conn{c: c}, held: map[uint32]uint64{}, acks: map[uint64]chan struct{}{}, gone: make(chan struct{})}
		t.servers[sc] = struct{}{}
		t.base.Goroutines.Add(1)
		t.mu.Unlock()
		t.stats.connsAccepted.Add(1)
		t.stats.connsOpen.Add(1)
		go t.serve(sc)
	}
}

// acceptDead records that the accept loop ended for good with err.
func (t *Transport) acceptDead(err error) {
	t.acceptErr.Store(&err)
	t.log.Error("the accept loop ended: no new peer can connect to this plugin", "error", err)
	if t.fatal != nil {
		t.fatal(fmt.Errorf("shm: accept loop ended: %w", err))
	}
}

// rateLog lets a repeated warning through at most once per
// logEvery, counting the ones it held back.
type rateLog struct {
	last time.Time
	held uint64
}

// lockedRateLog is a rateLog that goroutines share.
type lockedRateLog struct {
	mu sync.Mutex
	r  rateLog
}

func (l *lockedRateLog) allow(now time.Time) (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.allow(now)
}

// logEvery is how often a repeated warning is logged at most.
const logEvery = 10 * time.Second

// allow reports whether to log now, and how many were held back since the
// last one logged.
func (r *rateLog) allow(now time.Time) (uint64, bool) {
	if !r.last.IsZero() && now.Sub(r.last) < logEvery {
		r.held++
		return 0, false
	}
	n := r.held
	r.last, r.held = now, 0
	return n, true
}

// serve checks who dialed and what they want, then answers region queries
// and collects revoke acknowledgements until the connection ends.
func (t *Transport) serve(sc *srvConn) {
	defer t.base.Goroutines.Done()
	defer func() {
		sc.c.Close()
		t.mu.Lock()
		delete(t.servers, sc)
		t.mu.Unlock()
		// A dialer unmaps everything it got on a connection when that
		// connection ends, so its end counts as an acknowledgement.
		close(sc.gone)
		t.stats.connsOpen.Add(-1)
	}()
	// Read the hello first, whatever we answer: closing a unix socket with
	// unread data makes the other end's read fail with ECONNRESET instead
	// of returning our answer.
	rd := newReader()
	sc.c.SetReadDeadline(time.Now().Add(helloTimeout))
	h, fds, herr := rd.read(sc.c)
	closeFDs(fds)
	if herr == nil && (h.typ != msgHello || len(fds) != 0) {
		herr = errMalformed
	}
	sc.c.SetWriteDeadline(time.Now().Add(helloTimeout))
	uid, err := peerUID(sc.c)
	if err != nil || !uidAllowed(uid) {
		t.stats.credRejected.Add(1)
		t.stats.helloRejected.Add(1)
		t.log.Warn("refused a peer plugin: SO_PEERCRED says another user", "uid", uid, "error", err)
		_ = sc.send(msg{typ: msgHelloAck, status: ring.StatusPermission}, -1)
		return
	}
	if herr != nil {
		t.stats.helloRejected.Add(1)
		if !errors.Is(herr, errMalformed) && !errors.Is(herr, errVersion) {
			return // timeout or the dialer went away
		}
		t.stats.malformed.Add(1)
		_ = sc.send(msg{typ: msgHelloAck, status: ring.StatusProtocol}, -1)
		return
	}
	if h.name != t.base.Engine() || h.inc != t.base.Incarnation() {
		// The dialer wants another life of this segment (or another
		// segment that used to listen here).
		t.stats.helloRejected.Add(1)
		_ = sc.send(msg{typ: msgHelloAck, status: ring.StatusStaleIncarnation, inc: t.base.Incarnation()}, -1)
		return
	}
	secret := t.set.secret
	if secret != nil && !h.auth {
		t.stats.helloRejected.Add(1)
		t.stats.authFailed.Add(1)
		if n, ok := t.authLog.allow(time.Now()); ok {
			t.log.Warn("refused a peer plugin: it sent no proof of the cluster secret and this engine has one; set the same cluster_secret in the shm plugin's config block of both engines", "refused_since_last_log", n)
		}
		_ = sc.send(msg{typ: msgHelloAck, status: ring.StatusPermission}, -1)
		return
	}
	ack := msg{typ: msgHelloAck, status: ring.StatusOK, inc: t.base.Incarnation()}
	if secret != nil {
		ack.auth, ack.nonce = true, newNonce()
		ack.mac = proof(secret, "server", h.name, h.inc, &h.nonce, &ack.nonce)
	}
	// A dialer with a secret, when this engine has none, gets an answer
	// without a proof and hangs up.
	if err := sc.send(ack, -1); err != nil {
		return
	}
	if secret != nil {
		a, fds, err := rd.read(sc.c)
		closeFDs(fds)
		if err != nil || a.typ != msgAuth || len(fds) != 0 || !verify(a.mac, secret, "dialer", h.name, h.inc, &ack.nonce, &h.nonce) {
			t.stats.helloRejected.Add(1)
			t.stats.authFailed.Add(1)
			if n, ok := t.authLog.allow(time.Now()); ok {
				t.log.Warn("refused a peer plugin: its proof of the cluster secret does not verify; give both engines the same cluster_secret in the shm plugin's config block", "error", err, "refused_since_last_log", n)
			}
			return
		}
	}
	sc.c.SetReadDeadline(time.Time{})
	sc.c.SetWriteDeadline(time.Time{})
	for {
		m, fds, err := rd.read(sc.c)
		if len(fds) > 0 {
			closeFDs(fds)
			if err == nil {
				err = errMalformed
			}
		}
		if err != nil {
			if errors.Is(err, errMalformed) || errors.Is(err, errVersion) {
				t.stats.malformed.Add(1)
				t.log.Warn("dropping a peer connection: malformed message", "error", err)
			}
			return
		}
		switch m.typ {
		case msgQuery:
			if err := t.answer(sc, m.region); err != nil {
				return
			}
		case msgRevokeAck:
			t.mu.Lock()
			if ch, ok := sc.acks[m.gen]; ok {
				delete(sc.acks, m.gen)
				close(ch)
			}
			t.mu.Unlock()
		default:
			t.stats.malformed.Add(1)
			return
		}
	}
}

// answer replies to a query for region id: its memfd, length and
// permission if peers may use it, or why not. The write lock is held from
// the lookup to the end of the write, so that a revoke of this region
// (UnregisterMemory) goes out after the fd and the fd is still open while
// it is sent.
func (t *Transport) answer(sc *srvConn, id uint32) error {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	reply := msg{typ: msgRegion, region: id}
	fd := -1
	var err error
	unshareable := false
	t.mu.Lock()
	r := t.base.Regions.Lookup(id)
	switch {
	case r == nil:
		reply.status = ring.StatusNotRegistered
	case !r.Perm.AllowsRemoteRead():
		reply.status = ring.StatusPermission // local-only: its fd never leaves
	case r.fd < 0:
		reply.status = ring.StatusUnsupported // the host sent no memfd to share
	case !r.exact:
		// Its memfd holds more than the region (a range that does not
		// start and end on page boundaries of its allocation): handing
		// it over would hand over memory that was not registered.
		reply.status = ring.StatusUnsupported
		unshareable = true
	default:
		fd = r.fd
		if !r.Perm.AllowsRemoteWrite() {
			// A remote-read region goes as a read-only descriptor: the
			// peer cannot map it writable.
			if fd, err = t.readOnlyFD(r); err != nil {
				reply.status = ring.StatusIO
				break
			}
		}
		reply.status, reply.perm, reply.gen = ring.StatusOK, r.Perm, r.gen
		reply.off, reply.length = 0, uint64(len(r.Mem))
		sc.held[id] = r.gen
	}
	t.mu.Unlock()
	if unshareable {
		t.log.Info("a peer asked for a region whose memory is not page-aligned in its allocation: it cannot be shared alone, so it is not shared; "+
			"register buffers that start and end on page boundaries of their allocation (or whole allocations) for shm, or let another transport reach it",
			"region", id)
	} else if err != nil {
		t.log.Warn("cannot open a read-only descriptor of a region for a peer", "region", id, "error", err)
	}
	if reply.status == ring.StatusOK {
		t.stats.queriesServed.Add(1)
	} else {
		t.stats.queriesRefused.Add(1)
	}
	return sc.sendLocked(reply, fd)
}

// readOnlyFD returns r's fd reopened O_RDONLY, opening it on first use;
// t.mu held.
func (t *Transport) readOnlyFD(r *region) (int, error) {
	if r.ro < 0 {
		fd, err := sdkshm.ReadOnly(r.fd)
		if err != nil {
			return -1, err
		}
		r.ro = fd
		t.readOnly[r] = struct{}{}
	}
	return r.ro, nil
}

// revoke tells every peer that may have mapped r that it is gone and waits
// until each has unmapped it (acknowledged, or its connection ended), at
// most revoke_timeout; a peer that does not answer in time loses its
// connection, which makes it unmap as soon as its copies in flight end.
func (t *Transport) revoke(r *region, holders []*srvConn, acks []chan struct{}) {
	for _, sc := range holders {
		if sc.send(msg{typ: msgRevoke, region: r.ID, gen: r.gen}, -1) == nil {
			t.stats.revokesSent.Add(1)
		} else {
			sc.c.Close()
		}
	}
	limit := time.NewTimer(t.set.revokeTimeout)
	defer limit.Stop()
	expired := false
	for i, sc := range holders {
		if !expired {
			select {
			case <-acks[i]:
				continue
			case <-sc.gone:
				continue
			case <-limit.C:
				expired = true
			}
		}
		select {
		case <-acks[i]:
			continue
		case <-sc.gone:
			continue
		default:
		}
		t.stats.revokeTimeouts.Add(1)
		t.log.Warn("peer did not unmap a revoked region in time: closing its connection", "region", r.ID, "timeout", t.set.revokeTimeout)
		t.mu.Lock()
		delete(sc.acks, r.gen)
		t.mu.Unlock()
		sc.c.Close()
	}
}
