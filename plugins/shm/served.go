package shm

import (
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/sdk/kit/samehost"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Served traffic. A copy into or out of a peer's mapping never reaches
// the peer's plugin, so the peer cannot count what it served; this side
// tells it. Each connection keeps a tally of what its copies moved, and
// the peer's pump sends it (msgServed, with this engine's name) at most
// every reportEvery, to a peer whose endpoint says it takes reports (an
// older one would drop the connection). The peer counts the reports in
// its kit.Served; a peer closed (ClosePeer, Stop) sends what its
// connection moved since the last report first, and only a connection
// that breaks loses it.

// reportEvery is how long a tally waits before it is sent: a bound on
// the messages a busy peer gets (one per connection per period), and on
// how late the peer's figures are.
const reportEvery = 100 * time.Millisecond

// finalReportWait bounds the last report's send when a peer is closed.
const finalReportWait = 100 * time.Millisecond

// tally counts what copies moved in a peer's memory since the last
// report: counters the copying goroutines (each lane's, the workers) add
// to without a lock, which report takes and zeroes one by one; a copy
// counted between two of its swaps goes in the next report, and the sums
// stay exact. The tally, then behind a mutex taken per copy, was about a
// twentieth of a 4 KiB write's cost in batches of 128 on one lane
// (BenchmarkRequestPath with it taken out); without the lock the
// difference is within this machine's noise there, and lanes that
// complete copies at once no longer queue on one mutex.
type tally struct {
	writes, writeBytes, reads, readBytes atomic.Uint64
}

// take returns what t counted since the last take and zeroes it.
func (t *tally) take() samehost.Tally {
	return samehost.Tally{Writes: t.writes.Swap(0), WriteBytes: t.writeBytes.Swap(0), Reads: t.reads.Swap(0), ReadBytes: t.readBytes.Swap(0)}
}

// moved adds ops completed copies of n bytes in all to the tally and
// makes sure a report follows.
func (dc *dialConn) moved(op ring.Op, ops, n uint64) {
	t := dc.tally
	if t == nil {
		return
	}
	if op == ring.OpRead {
		t.reads.Add(ops)
		t.readBytes.Add(n)
	} else {
		t.writes.Add(ops)
		t.writeBytes.Add(n)
	}
	p := dc.p
	if !p.armed.Load() && p.armed.CompareAndSwap(false, true) {
		time.AfterFunc(reportEvery, func() {
			select {
			case p.wake <- struct{}{}:
			default:
			}
		})
	}
}

// report sends the current connection's tally, if it holds anything. It
// runs on the pump, which owns sending; a report that fails to send
// closes the connection (its reader then cleans up, as after a query).
func (p *peer) report() {
	p.armed.Store(false) // copies from here on arm the next report
	p.mu.Lock()
	dc := p.dc
	p.mu.Unlock()
	if dc == nil || dc.tally == nil {
		return
	}
	t := dc.tally.take()
	if t.Zero() {
		return
	}
	if err := dc.Send(msg{Type: msgServed, Name: p.t.base.Engine(), Tally: t}, -1); err != nil {
		dc.C.Close()
	}
}
