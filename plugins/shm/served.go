package shm

import (
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

// moved adds a completed copy of n bytes to the tally and makes sure a
// report follows.
func (dc *dialConn) moved(op ring.Op, n uint64) {
	if dc.tally == nil {
		return
	}
	dc.tallyMu.Lock()
	if op == ring.OpRead {
		dc.tally.Reads++
		dc.tally.ReadBytes += n
	} else {
		dc.tally.Writes++
		dc.tally.WriteBytes += n
	}
	dc.tallyMu.Unlock()
	p := dc.p
	if p.armed.CompareAndSwap(false, true) {
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
	dc.tallyMu.Lock()
	t := *dc.tally
	*dc.tally = samehost.Tally{}
	dc.tallyMu.Unlock()
	if t.Zero() {
		return
	}
	if err := dc.Send(msg{Type: msgServed, Name: p.t.base.Engine(), Tally: t}, -1); err != nil {
		dc.C.Close()
	}
}
