package tcp

import (
	"net"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Priority connections. A descriptor whose Prio is high goes on a slot of
// its own, one per peer and local rail, beside the rail's
// connections_per_peer bulk slots: a 4 KiB high-priority read does not
// wait in a bulk slot's queue, nor on its socket, behind megabytes of
// lower-priority frames, and on the peer it is served by that
// connection's own goroutine instead of after the bulk frames ahead of it
// on a shared connection. The slot is a slot like the others (the same
// writer, reader, dial plan, hello and authentication); its connection is
// dialed when the first high-priority descriptor reaches it, so a peer
// that never sees one never gets the extra connection. On the listener it
// is one more authenticated connection of the peer, counted in
// max_connections and max_connections_per_peer like the rest.
//
// This follows what a transport may do with Prio (sdk/ring.Descriptor):
// nothing is dropped, delayed or reordered within a class; every
// descriptor of one request carries the same Prio, so a request's slices
// stay on one slot, in the order the engine put them. Normal and low
// priority share the bulk slots as before. priority_connection = false
// sends every descriptor to the bulk slots.

// addPrioritySlots appends one high-priority slot per local rail to
// p.slots (after the bulk slots), sharing its rail's dial plan.
func (p *peer) addPrioritySlots(rails []*rail) {
	for _, rl := range rails {
		plan := p.slots[rl.idx*p.conns].plan
		p.slots = append(p.slots, &slot{t: p.t, p: p, rail: rl, plan: plan, wake: make(chan struct{}, 1), prio: true})
	}
}

// slotFor chooses the slot for d, whose rail was checked: rail d.Rail's
// high-priority slot for a high-priority descriptor (when the peer has
// them), else the least loaded of the rail's bulk slots.
func (p *peer) slotFor(d *ring.Descriptor) *slot {
	r := int(d.Rail)
	if p.prio && d.Prio == uint8(sdk.PriorityHigh) {
		p.t.stats.opsPriority.Add(1)
		return p.slots[p.nrails*p.conns+r]
	}
	return p.pick(r)
}

// Bulk threads (bulk_nice, sdk.LowerThread). With priority connections,
// what the bulk slots carry is normal and low priority only, so their
// writer and reader goroutines run on nice threads: the kernel's copy of
// a 64 MiB frame into and out of the socket, which is most of the CPU
// a bulk transfer costs, then leaves the cores to the high-priority
// connection's goroutines (and everything else at the normal niceness)
// whenever they wake. On the listener, a connection is taken for a bulk
// one from its first frame of bulkFrame bytes or more: the wire does not
// say which connection is the dialer's priority one, and high-priority
// work is small (a frame that large on it runs nice too, and completes).
// Without priority connections nothing runs nice: a bulk connection
// would carry high-priority descriptors too. The listener goes by its own
// priority_connection, taking its dialers to be configured alike.
//
// Niceness alone is not enough: a thread gives up its core to a waking
// one only at a scheduling point, and a kernel built without full
// preemption (PREEMPT_NONE, common on servers and VMs) has none inside
// one read or write system call. A writev of a 4 MiB batch through the
// loopback, or a readv of a 1 MiB payload, then keeps the core for as
// long as the kernel copies, whatever the thread's niceness, and the
// high-priority goroutines' wakeups wait for it. bulk_chunk (0, off, by
// default) bounds the payload bytes a bulk connection moves per system
// call, so that the nice thread comes back to user space, where it can
// be preempted, every few tens of microseconds. Measured with a scratch
// recorder of the per-hop times of high-priority reads in `ferry bench
// --qos` over tcp (two loaded cores): the time from the initiator's send
// to the peer's goroutine reading the request grew from a p50 of 9 us
// alone to a p99 of 2-3 ms beside the bulk, the answer's way back
// likewise; with bulk_chunk 256KiB about 1 ms each in one run, but over
// campaigns of 7 to 12 runs the bench's leakage did not settle below
// what it was without (docs/qos.md), and LOW lost a quarter of its
// throughput. It stays off until a quiet machine says otherwise.

// bulkFrame is the frame length from which a served connection runs on a
// nice thread.
const bulkFrame = 1 << 20

// bulkNice is the niceness of s's goroutines: bulk_nice for a bulk slot
// of a peer with priority slots, else 0 (none).
func (s *slot) bulkNice() int {
	if s.p.prio && !s.prio {
		return s.t.set.bulkNice
	}
	return 0
}

// bulkChunk bounds the payload bytes one system call of s's connection
// moves: bulk_chunk for a bulk slot of a peer with priority slots, else 0
// (no bound).
func (s *slot) bulkChunk() int {
	if s.p.prio && !s.prio {
		return s.t.set.bulkChunk
	}
	return 0
}

// lowerThread runs the calling goroutine on a thread of niceness nice
// until it calls the restore it returns (sdk.LowerThread); it warns once
// when the kernel refuses.
func (t *Transport) lowerThread(nice int) (restore func()) {
	restore, err := sdk.LowerThread(nice)
	if err != nil {
		t.niceLog.Do(func() {
			t.log.Warn("bulk connections run at the normal niceness; high-priority latency may suffer under bulk load", "bulk_nice", nice, "error", err)
		})
	}
	return restore
}

// Priority readers (priority_thread, on by default). Through the Go
// runtime's poller, a high-priority frame's arrival wakes whichever thread
// polls (or none: with every P busy, only the scheduler's next look or
// sysmon sees it), which readies the reading goroutine, which then waits
// for a P and a thread; beside a saturating bulk load on few cores the
// bulk connections' goroutines hold both, and that wait was where a
// high-priority read's p99 grew (docs/qos.md). With priority_thread the
// reader of a priority connection instead runs on an OS thread of its
// own (sdk.LatencyThread: a short scheduler slice and a P of its own) and
// waits for input in ppoll(2) on that thread, so that the arrival wakes
// it directly, and only it (its input is muted in the runtime's poller:
// mute_linux.go), and it answers (the listener) or completes and takes
// the host's next request (the dialer, sdk.Assister) on that thread too. On
// the dialer that is the response reader of each high-priority slot; on
// the listener, which cannot tell a dialer's priority connection from
// its bulk ones, the goroutine serving a connection until it is taken for
// a bulk one (bulkFrame). At most maxPriorityThreads readers of a
// transport wait so at once; the others use the poller. Each costs an OS
// thread for as long as its connection is open (no wakeup while idle:
// link.close shuts the socket down to end the wait), and a P (capped
// with the nice threads' at the CPU count).

// maxPriorityThreads bounds a transport's readers on threads of their own.
const maxPriorityThreads = 64

// priorityReader has the calling goroutine, the reader of l, wait on its
// own thread where priority_thread is set and fewer than
// maxPriorityThreads readers do; the caller defers the restore it
// returns, or calls it when the connection turns out to be a bulk one.
func (t *Transport) priorityReader(l *link) (restore func()) {
	if !t.set.prioThread || l.raw == nil {
		return func() {}
	}
	if t.prioThreads.Add(1) > maxPriorityThreads {
		t.prioThreads.Add(-1)
		return func() {}
	}
	unlock := sdk.LatencyThread()
	l.setBlock(true)
	unmute := muteInput(l.nc) // its input wakes this thread alone (mute_linux.go)
	return func() {
		unmute()
		l.setBlock(false)
		unlock()
		t.prioThreads.Add(-1)
	}
}

// Bulk socket buffers (bulk_buffer, 0: off by default). The kernel sizes
// a loopback or LAN connection's buffers up to megabytes, so that a bulk
// writer's system call copies as much as the socket takes and its peer's
// reader finds that much to copy back, each holding a core that long.
// bulk_buffer sets SO_SNDBUF and SO_RCVBUF of the bulk connections
// (where bulk_nice and bulk_chunk apply: a dialer's bulk slots with
// priority slots beside them, and a served connection from its first
// bulk frame on), which also turns the kernel's autotuning off for them:
// the bulk then moves in smaller steps and the high-priority readers wait
// less for a core, at a cost to the bulk's throughput (docs/qos.md).

// setBulkBuffer sizes nc's kernel buffers to bulk_buffer, if set.
func (t *Transport) setBulkBuffer(nc net.Conn) {
	tc, ok := nc.(*net.TCPConn)
	if t.set.bulkBuffer <= 0 || !ok {
		return
	}
	// The kernel caps both at its wmem_max and rmem_max; it refuses
	// nothing else on a connected socket.
	_ = tc.SetWriteBuffer(t.set.bulkBuffer)
	_ = tc.SetReadBuffer(t.set.bulkBuffer)
}
