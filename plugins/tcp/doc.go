// Package tcp is Ferry's TCP transport: it moves bytes between this engine's
// registered memory and a peer engine's registered memory over plain TCP
// sockets. It owns the wire protocol (wire.go), the connections to peers
// (client.go: dialing, pipelining, completion), the listener that serves
// peers' requests (server.go: every bounds, permission, region and
// incarnation check before memory is touched) and the region table with
// its reference counts (region.go).
//
// It must not copy payload through user-space buffers: a write is sent with
// writev straight from the registered mapping and received with read(2)
// straight into the target mapping; a read comes back the same way. The
// one exception is memory the application allocated itself (a region with
// Foreign set, foreign.go), which is not mapped here: it is staged in a
// bounce buffer with process_vm_readv/writev, one extra copy, under the
// region's reference, and a copy that faults fails the descriptor with
// StatusIO. It must
// not trust a peer: nothing a peer sends can make it touch memory outside a
// region the peer may access, or panic.
//
// The listener's own buffers are bounded (bounds.go): the staging buffers
// of every connection together by max_receive_buffer (a connection that
// needs more waits, leaving the peer's frames in its socket), and the
// responses one connection holds back by max_held_responses. It declares
// Info.TwoSided: the sending host meters its slices with the receiving
// engine's credit.
//
// Abort (abort.go, sdk.Aborter) takes queued descriptors back unsent and
// makes a read in flight stop writing its local memory: the rest of its
// payload is read into the connection's scratch memory, so the stream
// stays in step, and it completes StatusCanceled. A write in flight is
// not called back.
//
// Rails. Local rail i is listen address i (rails.go). The descriptor's Rail
// field names the local rail; Rail 0, what a host that knows nothing of
// rails sends, is the first listen address. Rail i pairs with the peer
// address sharing the longest IP prefix with its listen IP, same family
// first, ties broken by i mod the number of peer addresses (the others are
// tried after it when it cannot be reached), and dials it from its listen
// IP; the source is left to the kernel for a wildcard listen IP, across
// address families and between loopback and other addresses. Probe reports each rail's NUMA node
// and link speed from the sysfs entries of the interface owning its IP.
// Stats has each rail's counters as "rail.<i>.<name>", and what it served
// each dialer (by the engine name its hello carries) per rail: the write
// frames it applied and the reads it answered (kit.Served).
//
// Connections. A peer gets connections_per_peer connections per rail.
// Their writer goroutines start at OpenPeer; each TCP connection is dialed
// lazily, when the first descriptor is queued on it, so a rail that is not
// used opens no connection, and re-dialed when a descriptor arrives after
// it broke (the reader notices a peer closing an idle connection at once).
// A descriptor goes to its rail's first connection while that has less
// than spillLoad (4 MiB) queued or in flight, so that small requests
// share one connection and one reader on each side; past that, to the
// connection with the fewest bytes queued or in flight, ties broken
// round robin. Frames are pipelined:
// the writer sends every queued frame back to back (up to 64 frames per
// writev) while a reader goroutine matches the in-order responses.
//
// Priority (prio.go). A descriptor whose Prio is high goes on a
// connection of its own per peer and rail, beside the
// connections_per_peer bulk ones, dialed when the first such descriptor
// arrives and authenticated and counted in the listener's connection
// limits like any other, so that a 4 KiB high-priority read is neither
// queued nor served behind megabytes of lower-priority frames on a shared
// socket. Normal and low priority share the bulk connections. Nothing is
// dropped, delayed or reordered within a priority (every slice of a
// request has the same Prio). priority_connection = false turns it off;
// ops_priority counts the descriptors it carried. With it on, the bulk
// connections' writer and reader goroutines, and on the listener the
// goroutine serving a connection from its first frame of 1 MiB or more,
// run on threads at niceness bulk_nice (default 0: off, since normal
// priority, every request's default, rides the bulk connections; 10 is
// what docs' isolation figures use;
// sdk.LowerThread): the kernel's copies of bulk frames then leave the
// cores to the priority connection's goroutines when they wake; the
// plugin's other threads have short scheduler slices while the nice ones
// keep long ones (sdk.ServeTransport, sdk.LowerThread). bulk_chunk, off by
// default, goes further (prio.go): it bounds the payload bytes a bulk
// connection moves per read or write system call (a thread yields only
// between them on a kernel without full preemption); it has not yet shown
// a settled gain (docs/qos.md). short_slices is accepted and does nothing
// more: what it asked for is now every plugin's default.
// priority_thread (on by default) has the readers of priority
// connections (the dialer's response reader of each high-priority slot;
// on the listener, the goroutine serving a connection until it is taken
// for a bulk one) wait for input in ppoll(2) on an OS thread of their own
// with a short scheduler slice and a P of their own (sdk.LatencyThread),
// instead of in the runtime's poller, so that a high-priority frame's
// arrival wakes its reader directly while bulk goroutines keep the Ps
// busy; at most 64 readers of a transport wait so at once. Their
// sockets' input is muted in the runtime's poller meanwhile
// (mute_linux.go), so that a frame wakes its reader and no other thread.
// bulk_buffer
// (off by default) sets the bulk connections' kernel send and receive
// buffers, trading bulk throughput for shorter system calls (prio.go).
//
// System calls per frame are what small transfers cost, so both ends batch
// them: the listener reads ahead (ahead.go), receiving a small write's
// payload together with up to 64 KiB of the frames after it in one readv
// and copying the next headers and small payloads out of that buffer (a
// payload over 16 KiB is read straight into its region with only the next
// header beside it); it holds responses back while the next request is
// already there and sends them (with read payloads, straight from their
// regions) in one writev; the dialer reads runs of response headers at
// once, up to the first read's header, whose payload goes straight into
// registered memory together with the headers after it.
//
// Statuses. Checked at Submit: unknown op, zero length or a Rail this
// plugin does not have (counted in ops_bad_rail) -> StatusInvalid;
// Deadline passed -> StatusTimeout (checked again just before sending;
// once on the wire a frame runs to completion); peer not opened ->
// StatusPeerUnknown; local region not registered -> StatusNotRegistered;
// local range outside the region -> StatusOutOfBounds; Length over the
// smaller of this plugin's and the peer's max_frame -> StatusInvalid (the
// host's slice size must not exceed max_frame). From the peer: its check's
// status (StatusNotRegistered, StatusOutOfBounds, StatusPermission,
// StatusStaleIncarnation), or at connection setup StatusStaleIncarnation
// (the peer restarted or another segment listens there), StatusProtocol
// (wire version mismatch) and StatusPermission (cluster secret mismatch,
// see below). A connection that cannot be made or breaks ->
// StatusPeerUnreachable for what it carried. ClosePeer and Stop ->
// StatusShutdown. Every descriptor completes exactly once.
//
// Timeouts. io_timeout bounds the time a busy connection may go without
// moving a byte in either direction, the dial, and the dialer's wait for
// the hello reply; an authenticated idle connection may stay open
// indefinitely. On the listener, handshake_timeout (default 5s) bounds the
// time from accept to the end of the hello and authentication (see
// Connection limits).
// UnregisterMemory waits up to io_timeout for frames in flight on the
// region, then closes the connections that carry them.
//
// Authentication. Without a cluster secret the listener serves anyone who
// can reach it, and Start logs a warning saying so for every listen
// address, loopback ones included: on a shared machine any local user
// can reach those. With cluster_secret (or cluster_secret_file, which
// keeps it out of the config file; at least 16 bytes, the same on every
// engine) every connection is mutually authenticated during the hello:
// each side sends a fresh random nonce and proves it knows the secret with
// an HMAC-SHA256 over both nonces, the direction and the segment names,
// incarnations and max_frame exchanged in the hello (wire.go has the
// exact layout), so a recorded handshake cannot be replayed or reflected.
// The dialer checks the listener's proof before it sends anything else;
// the listener serves no frame, and touches no memory, before the dialer's
// proof verifies. A secret on one side only, or different secrets, fails
// the connection at once with StatusPermission, a log line "cluster
// secret mismatch" on both sides that says what to set, and auth_failures
// counted. The secret authenticates connections; it does not encrypt
// them: payload crosses the network in the clear.
//
// Connection limits. A connection is unauthenticated from its accept
// until the dialer's proof verifies or, without a cluster secret, its
// first request header has arrived; handshake_timeout (default 5s) bounds
// that, and a connection that has not got there in time is closed and
// counted in conns_handshake_timeout (a dialer connects when it has a
// frame to send, so a real one is never idle there). Unauthenticated
// connections have their own budget: max_startups ("start:rate:full",
// default "64:30:256", as OpenSSH's MaxStartups: from start on, each new
// connection sheds one with a probability rising from rate percent to 100
// percent at full) and max_connections_per_host per remote IP address
// (default 64). What is shed is the oldest unauthenticated connection (of
// the host, or overall), counted in conns_shed, never the new one: a real
// peer completes its handshake within a round trip, so a flood of idle or
// dribbling connections, from the peers' own address too, sheds only its
// own. Authenticated connections count against max_connections (default
// 4096) and max_connections_per_peer (default 256), keyed on the engine
// name the dialer gives in its hello (FlagFrom; with a cluster secret the
// proofs cover it) or, for a dialer that gives none, its IP address, so
// that same-host peers, which all come from 127.0.0.1, do not share one
// budget; one over either is closed when it authenticates and counted in
// conns_refused_limit. Each kind of event is logged at most once a second,
// with the number held back, so a flood does not flood the log. The accept
// loop never waits on a client: each handshake runs in its connection's
// own goroutine.
package tcp
