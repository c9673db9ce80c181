package nvlink

import (
	"errors"
	"net"
	"time"

	"github.com/ferrydev/ferry/sdk/ring"
	sdkshm "github.com/ferrydev/ferry/sdk/shm"
)

// helloTimeout bounds connection setup on either side.
const helloTimeout = 5 * time.Second

// srvConn is a connection a peer plugin dialed to us. held is what the
// peer may have imported (region -> generation), acks the revokes not
// acknowledged yet; both under Transport.mu.
type srvConn struct {
	conn
	held map[uint32]uint64
	acks map[uint64]chan struct{}
	gone chan struct{}
}

func (t *Transport) acceptLoop(ln *net.UnixListener) {
	defer t.base.Goroutines.Done()
	var backoff time.Duration
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if t.base.Stopped() || errors.Is(err, net.ErrClosed) {
				return
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t.log.Warn("accept failed; retrying", "error", err, "retry_in", backoff)
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
		sc := &srvConn{conn: conn{c: c}, held: map[uint32]uint64{}, acks: map[uint64]chan struct{}{}, gone: make(chan struct{})}
		t.servers[sc] = struct{}{}
		t.base.Goroutines.Add(1)
		t.mu.Unlock()
		go t.serve(sc)
	}
}

// serve checks who dialed (same user, the segment and incarnation we
// serve, the cluster secret) as shm does, then answers region queries and
// collects revoke acknowledgements until the connection ends.
func (t *Transport) serve(sc *srvConn) {
	defer t.base.Goroutines.Done()
	defer func() {
		sc.c.Close()
		t.mu.Lock()
		delete(t.servers, sc)
		t.mu.Unlock()
		close(sc.gone) // a dialer drops what it got on a connection that ends
	}()
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
		if errors.Is(herr, errMalformed) || errors.Is(herr, errVersion) {
			t.stats.malformed.Add(1)
			_ = sc.send(msg{typ: msgHelloAck, status: ring.StatusProtocol}, -1)
		}
		return
	}
	if h.name != t.base.Engine() || h.inc != t.base.Incarnation() {
		t.stats.helloRejected.Add(1)
		_ = sc.send(msg{typ: msgHelloAck, status: ring.StatusStaleIncarnation, inc: t.base.Incarnation()}, -1)
		return
	}
	secret := t.set.secret
	if secret != nil && !h.auth {
		t.stats.helloRejected.Add(1)
		t.stats.authFailed.Add(1)
		_ = sc.send(msg{typ: msgHelloAck, status: ring.StatusPermission}, -1)
		return
	}
	ack := msg{typ: msgHelloAck, status: ring.StatusOK, inc: t.base.Incarnation()}
	if secret != nil {
		ack.auth, ack.nonce = true, newNonce()
		ack.mac = proof(secret, "server", h.name, h.inc, &h.nonce, &ack.nonce)
	}
	if err := sc.send(ack, -1); err != nil {
		return
	}
	if secret != nil {
		a, fds, err := rd.read(sc.c)
		closeFDs(fds)
		if err != nil || a.typ != msgAuth || len(fds) != 0 || !verify(a.mac, secret, "dialer", h.name, h.inc, &ack.nonce, &h.nonce) {
			t.stats.helloRejected.Add(1)
			t.stats.authFailed.Add(1)
			t.log.Warn("refused a peer plugin: its proof of the cluster secret does not verify", "error", err)
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

// answer replies to a query for region id: for device memory its handle
// (exactly the region's range), for host memory its memfd (exactly the
// region; read-only for remote-read), or why not. A local-only region's
// handle or fd never leaves the process. The write lock is held from the
// lookup to the end of the write, so that a revoke goes out after it.
func (t *Transport) answer(sc *srvConn, id uint32) error {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	reply := msg{typ: msgRegion, region: id}
	fd := -1
	t.mu.Lock()
	r := t.base.Regions.Lookup(id)
	switch {
	case r == nil:
		reply.status = ring.StatusNotRegistered
	case !r.perm.AllowsRemoteRead():
		reply.status = ring.StatusPermission
	case r.dev != nil:
		reply.status, reply.perm, reply.gen, reply.length = ring.StatusOK, r.perm, r.gen, r.n
		reply.device, reply.h = true, r.h
		sc.held[id] = r.gen
	case r.fd < 0 || !r.exact:
		reply.status = ring.StatusUnsupported // no memfd of exactly the region to hand over
	default:
		fd = r.fd
		if !r.perm.AllowsRemoteWrite() {
			if r.ro < 0 {
				ro, err := sdkshm.ReadOnly(r.fd)
				if err != nil {
					t.log.Warn("cannot open a read-only descriptor of a region for a peer", "region", id, "error", err)
					reply.status = ring.StatusIO
					fd = -1
					break
				}
				r.ro = ro
				t.readOnly[r] = struct{}{}
			}
			fd = r.ro
		}
		reply.status, reply.perm, reply.gen, reply.length = ring.StatusOK, r.perm, r.gen, r.n
		sc.held[id] = r.gen
	}
	t.mu.Unlock()
	if reply.status == ring.StatusOK {
		t.stats.queriesServed.Add(1)
	} else {
		t.stats.queriesRefused.Add(1)
	}
	return sc.sendLocked(reply, fd)
}

// revoke tells every peer that may hold r that it is gone and waits until
// each has dropped it (acknowledged, or its connection ended), at most
// revoke_timeout; a peer late to answer loses its connection.
func (t *Transport) revoke(r *region, holders []*srvConn, acks []chan struct{}) {
	for _, sc := range holders {
		if sc.send(msg{typ: msgRevoke, region: r.id, gen: r.gen}, -1) == nil {
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
		t.log.Warn("peer did not drop a revoked region in time: closing its connection", "region", r.id, "timeout", t.set.revokeTimeout)
		t.mu.Lock()
		delete(sc.acks, r.gen)
		t.mu.Unlock()
		sc.c.Close()
	}
}
