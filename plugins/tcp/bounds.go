package tcp

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Receive-side bounds. A peer's writes into mapped regions land straight
// in the region's memory, so the buffers a listener keeps of its own are
// the staging buffers of foreign memory (a write's payload on its way
// into the application's memory, a read's payload held back with its
// response) and the responses a connection holds back to send together.
// Both are bounded: max_held_responses per connection, and
// max_receive_buffer for the staging buffers of every connection
// together. A connection that needs a staging buffer past the budget
// first sends what it holds back, then waits for others to give theirs
// back, leaving the peer's frames in the socket: a flood waits (TCP's own
// flow control slows its sender) instead of growing this process.

// Defaults and limits of the receive-side bounds.
const (
	DefaultMaxReceiveBuffer = 256 << 20
	minMaxReceiveBuffer     = 64 << 10
	maxMaxReceiveBuffer     = 1 << 40
)

// budget is the staging bytes every server connection holds at once.
type budget struct {
	mu    sync.Mutex
	limit uint64
	used  uint64
	wake  chan struct{} // closed when bytes come back; nil while nobody waits

	peak  atomic.Uint64 // the most held at once
	waits atomic.Uint64 // acquisitions that had to wait
}

func (b *budget) init(limit uint64) { b.limit = limit }

// try takes n bytes if they fit, or if nothing is held (a frame larger
// than the whole budget still goes, alone).
func (b *budget) try(n uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit && b.used != 0 {
		return false
	}
	b.used += n
	for p := b.peak.Load(); b.used > p && !b.peak.CompareAndSwap(p, b.used); p = b.peak.Load() {
	}
	return true
}

// acquire takes n bytes, waiting while they do not fit, until stopped
// reports true (the transport stopping); it reports whether it took them.
func (b *budget) acquire(n uint64, stopped func() bool) bool {
	if b.try(n) {
		return true
	}
	b.waits.Add(1)
	tick := time.NewTicker(100 * time.Millisecond) // to see a Stop
	defer tick.Stop()
	for {
		b.mu.Lock()
		if b.wake == nil {
			b.wake = make(chan struct{})
		}
		w := b.wake
		b.mu.Unlock()
		if b.try(n) {
			return true
		}
		if stopped() {
			return false
		}
		select {
		case <-w:
		case <-tick.C:
		}
	}
}

// release gives back n bytes.
func (b *budget) release(n uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= min(n, b.used)
	if b.wake != nil {
		close(b.wake)
		b.wake = nil
	}
}

// held returns the bytes held now.
func (b *budget) held() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// errStopped ends a connection that waited for receive buffer while the
// transport stopped.
var errStopped = errors.New("the transport stopped while the connection waited for receive buffer (max_receive_buffer)")

// stage takes n bytes of the receive budget for a staging buffer of sc,
// first sending the responses sc holds back (they may hold staging
// buffers themselves) when the budget is short. An error ends the
// connection: the flush failed, or the transport stopped meanwhile.
func (sc *serverConn) stage(n uint64) error {
	b := &sc.t.recv
	if b.try(n) {
		return nil
	}
	if err := sc.flush(); err != nil {
		return err
	}
	if !b.acquire(n, sc.t.base.Stopped) {
		return errStopped
	}
	return nil
}

// export adds the receive budget's gauges and counter to a Stats map:
// receive_buffer_held (bytes now), receive_buffer_peak (the most at
// once) and receive_buffer_waits (staging buffers that waited for room).
func (b *budget) export(m map[string]uint64) {
	m["receive_buffer_held"] = b.held()
	m["receive_buffer_peak"] = b.peak.Load()
	m["receive_buffer_waits"] = b.waits.Load()
}
