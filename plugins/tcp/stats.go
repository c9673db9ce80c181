package tcp

import (
	"strconv"
	"sync/atomic"
)

// counters are the plugin's statistics, exported through Stats with the
// outcome counters of kit.Base. All are monotonic except conns_open and
// each rail's connections.
type counters struct {
	bytesSent     atomic.Uint64 // payload bytes written to sockets (writes we initiate, reads we serve)
	bytesReceived atomic.Uint64 // payload bytes read from sockets into registered memory
	framesOut     atomic.Uint64 // request and response frames written
	framesIn      atomic.Uint64 // request and response frames read
	// framesRejected counts requests this plugin answered with an error
	// status (bounds, permission, region, incarnation).
	framesRejected atomic.Uint64
	// connsDroppedMalformed counts connections dropped because a peer sent
	// bytes that cannot be framed: bad magic, version, checksum, op, flags,
	// a length over max_frame, a frame before the hello.
	connsDroppedMalformed atomic.Uint64
	// connsDroppedTruncated counts connections that ended inside a frame.
	connsDroppedTruncated atomic.Uint64
	// fences counts Fence calls answered; fencedFrames the write frames
	// of fenced runs dropped unapplied; fencedRefused the connections of
	// fenced runs refused after their hello (fence.go).
	fences, fencedFrames, fencedRefused atomic.Uint64
	// connsFenced counts connections this side gave up with writes
	// unanswered whose fence the peer confirmed before they completed.
	connsFenced   atomic.Uint64
	connsOpen     atomic.Int64
	connsAccepted atomic.Uint64
	connsDialed   atomic.Uint64
	// opsAborted counts descriptors given back early by Abort: queued
	// ones never sent, and reads in flight whose payload went to scratch.
	opsAborted    atomic.Uint64
	dialFailures  atomic.Uint64
	helloRejected atomic.Uint64 // hellos we refused (as listener) or that were refused (as dialer)
	errors        atomic.Uint64 // socket errors and stalls on established connections
	opsBadRail    atomic.Uint64 // descriptors naming a rail this plugin does not have (StatusInvalid)
	// opsPriority counts descriptors sent on a high-priority connection
	// (prio.go).
	opsPriority atomic.Uint64
	// authFailures counts handshakes that failed authentication: a cluster
	// secret on one side only, different secrets, a proof that does not
	// verify (as listener or dialer).
	authFailures atomic.Uint64
	// connsRefusedLimit counts connections closed at once when they
	// authenticated because max_connections was reached.
	connsRefusedLimit atomic.Uint64
	// connsShed counts unauthenticated connections closed to make room
	// for a new one: max_startups or max_connections_per_host reached.
	connsShed atomic.Uint64
	// connsHandshakeTimeout counts accepted connections dropped because
	// they did not finish hello and authentication within
	// handshake_timeout (or, without a cluster secret, sent no request by
	// then).
	connsHandshakeTimeout atomic.Uint64
	// foreignCopied counts bytes copied between a bounce buffer and
	// memory the application allocated itself (the one extra copy);
	// foreignFaults the copies that failed (memory freed while registered).
	foreignCopied atomic.Uint64
	foreignFaults atomic.Uint64
}

func (c *counters) snapshot() map[string]uint64 {
	open := c.connsOpen.Load()
	if open < 0 {
		open = 0
	}
	m := map[string]uint64{
		"bytes_sent":              c.bytesSent.Load(),
		"bytes_received":          c.bytesReceived.Load(),
		"frames_out":              c.framesOut.Load(),
		"frames_in":               c.framesIn.Load(),
		"frames_rejected":         c.framesRejected.Load(),
		"conns_dropped_malformed": c.connsDroppedMalformed.Load(),
		"conns_dropped_truncated": c.connsDroppedTruncated.Load(),
		"conns_open":              uint64(open),
		"fences":                  c.fences.Load(),
		"fenced_frames":           c.fencedFrames.Load(),
		"fenced_refused":          c.fencedRefused.Load(),
		"conns_fenced":            c.connsFenced.Load(),
		"conns_accepted":          c.connsAccepted.Load(),
		"conns_dialed":            c.connsDialed.Load(),
		"ops_aborted":             c.opsAborted.Load(),
		"dial_failures":           c.dialFailures.Load(),
		"hello_rejected":          c.helloRejected.Load(),
		"errors":                  c.errors.Load(),
		"ops_bad_rail":            c.opsBadRail.Load(),
		"ops_priority":            c.opsPriority.Load(),
		"foreign_bytes_copied":    c.foreignCopied.Load(),
		"foreign_copy_faults":     c.foreignFaults.Load(),
		"auth_failures":           c.authFailures.Load(),
		"conns_refused_limit":     c.connsRefusedLimit.Load(),
		"conns_shed":              c.connsShed.Load(),
		"conns_handshake_timeout": c.connsHandshakeTimeout.Load(),
	}
	return m
}

// railCounters are one rail's share of the counters, exported as
// "rail.<i>.<name>". A rail's connections are those its dialer made and
// those its listen address accepted; bytes count payload on them in both
// roles, as bytes_sent and bytes_received do.
type railCounters struct {
	bytesSent     atomic.Uint64 // payload written: writes we initiate, reads we serve
	bytesReceived atomic.Uint64 // payload read: answers to our reads, writes we serve
	requests      atomic.Uint64 // descriptors queued on the rail
	// errors counts what speaks about the path: failed dials, socket
	// errors and stalls on the rail's connections.
	errors        atomic.Uint64
	connsOpen     atomic.Int64
	connsDialed   atomic.Uint64
	connsAccepted atomic.Uint64
}

func (c *railCounters) addTo(m map[string]uint64, idx int) {
	p := "rail." + strconv.Itoa(idx) + "."
	m[p+"bytes_sent"] = c.bytesSent.Load()
	m[p+"bytes_received"] = c.bytesReceived.Load()
	m[p+"requests"] = c.requests.Load()
	m[p+"errors"] = c.errors.Load()
	m[p+"connections"] = uint64(max(c.connsOpen.Load(), 0))
	m[p+"conns_dialed"] = c.connsDialed.Load()
	m[p+"conns_accepted"] = c.connsAccepted.Load()
}
