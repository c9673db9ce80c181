package tcp

import (
	"net"
	"net/netip"
	"sync/atomic"
	"time"
)

// Defences of the accept path against peers that open connections and do
// nothing useful with them: max_connections and max_connections_per_host
// cap what the listener holds, handshake_timeout bounds how long a
// connection may take to say hello and authenticate. Everything here is
// decided at once in the accept loop or in the connection's own goroutine;
// the accept loop never waits on a client.

// guard is the listener side's bookkeeping, under Transport.mu.
type guard struct {
	perHost map[netip.Addr]int // accepted connections per remote IP address

	// At most one log line a second per kind of event, however many
	// connections a flood brings.
	refusedLog, timeoutLog, authLog every
}

func (g *guard) init() {
	g.perHost = make(map[netip.Addr]int)
	g.refusedLog.interval = time.Second
	g.timeoutLog.interval = time.Second
	g.authLog.interval = time.Second
}

// admit counts sc in if the limits allow it; the caller holds t.mu.
func (t *Transport) admit(sc *serverConn) bool {
	if len(t.servers) >= t.set.maxConns || t.guard.perHost[sc.host] >= t.set.maxConnsPerHost {
		return false
	}
	t.guard.perHost[sc.host]++
	return true
}

// release counts sc out; the caller holds t.mu.
func (t *Transport) release(sc *serverConn) {
	if n := t.guard.perHost[sc.host]; n > 1 {
		t.guard.perHost[sc.host] = n - 1
	} else {
		delete(t.guard.perHost, sc.host)
	}
}

// refuse closes a connection over a limit (counted first, so that the
// count is there when the dialer sees the close).
func (t *Transport) refuse(nc net.Conn) {
	t.stats.connsRefusedLimit.Add(1)
	_ = nc.Close()
	if ok, held := t.guard.refusedLog.allow(time.Now()); ok {
		t.log.Warn("refusing connections over max_connections or max_connections_per_host",
			"remote", nc.RemoteAddr().String(), "max_connections", t.set.maxConns,
			"max_connections_per_host", t.set.maxConnsPerHost, "also_refused_since_last_report", held)
	}
}

// handshakeTimedOut counts a connection that did not finish its handshake
// within handshake_timeout.
func (t *Transport) handshakeTimedOut(nc net.Conn) {
	t.stats.connsHandshakeTimeout.Add(1)
	if ok, held := t.guard.timeoutLog.allow(time.Now()); ok {
		t.log.Info("dropping connections that did not finish their hello within handshake_timeout",
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
