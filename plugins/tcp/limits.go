package tcp

import (
	"container/list"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync/atomic"
	"time"
)

// Defences of the accept path against peers that open connections and do
// nothing useful with them. A connection is unauthenticated (pending) from
// its accept until its proof verifies or, without a cluster secret, its
// first request header arrives; handshake_timeout bounds that time.
// Pending connections have their own budget (max_startups, and
// max_connections_per_host per remote IP address), kept by shedding the
// oldest pending connection, so that however many a flood opens, a peer
// that completes its handshake at once gets in. Authenticated connections
// count against max_connections. Everything here is decided at once in
// the accept loop or in the connection's own goroutine; the accept loop
// never waits on a client.

// startups is max_startups: from start pending connections on, a new one
// sheds the oldest with a probability rising linearly from rate percent
// to 100 percent at full.
type startups struct{ start, rate, full int }

// shed reports whether a connection arriving while n are pending sheds
// the oldest of them; roll is uniform in [0, 100).
func (s startups) shed(n, roll int) bool {
	switch {
	case n < s.start:
		return false
	case n >= s.full:
		return true
	}
	p := s.rate + (100-s.rate)*(n-s.start)/(s.full-s.start)
	return roll < p
}

func (s startups) String() string { return fmt.Sprintf("%d:%d:%d", s.start, s.rate, s.full) }

// connState is where a server connection stands in the guard's books.
type connState uint8

const (
	connPending connState = iota // unauthenticated, in the pending lists
	connAuthed                   // authenticated, counted in guard.authed
	connGone                     // shed or refused: counted out already
)

// guard is the listener side's bookkeeping, under Transport.mu.
type guard struct {
	pending list.List                 // pending connections, oldest first
	perHost map[netip.Addr]*list.List // pending connections per remote IP address, oldest first
	authed  int                       // authenticated connections
	perPeer map[peerKey]int           // authenticated connections per peer

	// At most one log line a second per kind of event, however many
	// connections a flood brings.
	refusedLog, shedLog, timeoutLog, authLog every
}

func (g *guard) init() {
	g.pending.Init()
	g.perHost = make(map[netip.Addr]*list.List)
	g.perPeer = make(map[peerKey]int)
	g.refusedLog.interval = time.Second
	g.shedLog.interval = time.Second
	g.timeoutLog.interval = time.Second
	g.authLog.interval = time.Second
}

// admit books sc in as pending, shedding the pending connections its
// arrival pushes out (at most one of its own host's and one overall); the
// caller holds t.mu.
func (t *Transport) admit(sc *serverConn) {
	g := &t.guard
	if hl := g.perHost[sc.host]; hl != nil && hl.Len() >= t.set.maxConnsPerHost {
		t.shed(hl.Front().Value.(*serverConn), "max_connections_per_host")
	}
	if g.pending.Len() > 0 && t.set.startups.shed(g.pending.Len(), rand.IntN(100)) {
		t.shed(g.pending.Front().Value.(*serverConn), "max_startups")
	}
	hl := g.perHost[sc.host] // after the shedding, which may have emptied it
	if hl == nil {
		hl = list.New()
		g.perHost[sc.host] = hl
	}
	sc.state = connPending
	sc.pendingAt = g.pending.PushBack(sc)
	sc.hostAt = hl.PushBack(sc)
}

// unpend takes sc out of the pending lists; the caller holds t.mu.
func (t *Transport) unpend(sc *serverConn) {
	g := &t.guard
	g.pending.Remove(sc.pendingAt)
	if hl := g.perHost[sc.host]; hl != nil {
		hl.Remove(sc.hostAt)
		if hl.Len() == 0 {
			delete(g.perHost, sc.host)
		}
	}
	sc.pendingAt, sc.hostAt = nil, nil
}

// shed closes a pending connection to make room; its goroutine sees the
// close and leaves. The caller holds t.mu.
func (t *Transport) shed(sc *serverConn, limit string) {
	t.unpend(sc)
	sc.state = connGone
	_ = sc.link.nc.Close()
	t.countOpen(sc, -1) // closed now, whenever its goroutine leaves
	t.stats.connsShed.Add(1)
	if ok, held := t.guard.shedLog.allow(time.Now()); ok {
		t.log.Warn("shedding the oldest unauthenticated connection to make room: "+limit+" reached (a flood of connections that do not authenticate?)",
			"remote", sc.link.nc.RemoteAddr().String(), "max_startups", t.set.startups.String(),
			"max_connections_per_host", t.set.maxConnsPerHost, "also_shed_since_last_report", held)
	}
}

// authenticated moves sc from the pending budget to max_connections. It
// reports false, and sc must be closed, when sc was shed meanwhile or
// max_connections is reached (then counted and logged).
func (t *Transport) authenticated(sc *serverConn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if sc.state != connPending {
		return false
	}
	t.unpend(sc)
	if t.guard.authed >= t.set.maxConns || t.guard.perPeer[sc.peer] >= t.set.maxConnsPerPeer {
		sc.state = connGone
		t.refuse(sc)
		return false
	}
	t.guard.authed++
	t.guard.perPeer[sc.peer]++
	sc.state = connAuthed
	return true
}

// peerKey is whom max_connections_per_peer counts a connection against:
// the engine name the dialer gave in its hello (bound to its proof with a
// cluster secret) or, from a dialer that gave none, its IP address.
type peerKey struct {
	name string
	addr netip.Addr
}

func (k peerKey) String() string {
	if k.name != "" {
		return "engine " + k.name
	}
	return "address " + k.addr.String()
}

// leavePending counts sc out of the pending budget as it fails its
// handshake. It reports false when sc was shed first.
func (t *Transport) leavePending(sc *serverConn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if sc.state != connPending {
		return false
	}
	t.unpend(sc)
	sc.state = connGone
	return true
}

// countOpen counts sc in (+1) or out (-1) of conns_open, once each way;
// the caller holds t.mu.
func (t *Transport) countOpen(sc *serverConn, d int64) {
	if sc.open == (d > 0) {
		return
	}
	sc.open = d > 0
	t.stats.connsOpen.Add(d)
	sc.rail.connsOpen.Add(d)
}

// release counts sc out; the caller holds t.mu.
func (t *Transport) release(sc *serverConn) {
	switch sc.state {
	case connPending:
		t.unpend(sc)
	case connAuthed:
		t.guard.authed--
		if n := t.guard.perPeer[sc.peer]; n > 1 {
			t.guard.perPeer[sc.peer] = n - 1
		} else {
			delete(t.guard.perPeer, sc.peer)
		}
	}
	sc.state = connGone
}

// refuse closes an authenticated connection over max_connections or
// max_connections_per_peer (counted first, so that the count is there
// when the dialer sees the close); the caller holds t.mu.
func (t *Transport) refuse(sc *serverConn) {
	nc := sc.link.nc
	t.stats.connsRefusedLimit.Add(1)
	_ = nc.Close()
	t.countOpen(sc, -1)
	if ok, held := t.guard.refusedLog.allow(time.Now()); ok {
		t.log.Warn("refusing authenticated connections over max_connections or max_connections_per_peer",
			"remote", nc.RemoteAddr().String(), "peer", sc.peer.String(), "max_connections", t.set.maxConns,
			"max_connections_per_peer", t.set.maxConnsPerPeer, "also_refused_since_last_report", held)
	}
}

// handshakeTimedOut counts a connection that did not finish its handshake
// within handshake_timeout.
func (t *Transport) handshakeTimedOut(nc net.Conn) {
	t.stats.connsHandshakeTimeout.Add(1)
	if ok, held := t.guard.timeoutLog.allow(time.Now()); ok {
		t.log.Info("dropping connections that did not finish their hello within handshake_timeout (hello, authentication and, without a cluster secret, the first request)",
			"remote", nc.RemoteAddr().String(), "handshake_timeout", t.set.handshakeTimeout,
			"also_dropped_since_last_report", held)
	}
}

// authFailed counts a connection that failed authentication; the caller
// closes it.
func (t *Transport) authFailed(nc net.Conn, what string) {
	t.stats.authFailures.Add(1)
	if ok, held := t.guard.authLog.allow(time.Now()); ok {
		t.log.Warn("cluster secret mismatch: dropping connection: "+what,
			"remote", nc.RemoteAddr().String(), "also_failed_since_last_report", held)
	}
}

// remoteHost is the IP address a connection comes from.
func remoteHost(nc net.Conn) netip.Addr {
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// every lets an event through at most once per interval and counts the
// ones it holds back, so that a flood of refused connections costs one log
// line a second. Time is passed in.
type every struct {
	interval time.Duration
	next     atomic.Int64 // mono time before which events are held back
	held     atomic.Uint64
}

// allow reports whether the event at now may be logged and, if so, how
// many were held back since the last one that was.
func (e *every) allow(now time.Time) (ok bool, held uint64) {
	t := mono(now)
	for {
		next := e.next.Load()
		if t < next {
			e.held.Add(1)
			return false, 0
		}
		if e.next.CompareAndSwap(next, t+int64(e.interval)) {
			return true, e.held.Swap(0)
		}
	}
}
