package shm

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit/samehost"
	"github.com/ferrydev/ferry/sdk/regtable"
	"github.com/ferrydev/ferry/sdk/ring"
	sdkshm "github.com/ferrydev/ferry/sdk/shm"
)

// mapping is a peer's region mapped into this process. The peer table
// holds one reference; every op copying to or from it holds another.
type mapping struct {
	regtable.Ref
	region uint32
	gen    uint64
	m      *sdkshm.Mapping
	mem    []byte
	perm   sdk.Perm
	dc     *dialConn // the connection it came on: its end drops the mapping
	// revoked is the status queued chunks complete with, skipped, once
	// it leaves the table (0 while in it): StatusNotRegistered when its
	// owner unregistered it, StatusPeerUnreachable when the connection
	// it came on was lost, StatusShutdown when the peer is closed.
	revoked atomic.Int32
}

// dialConn is our connection to a peer plugin.
type dialConn struct {
	*samehost.Conn
	p       *peer
	queried map[uint32]bool // regions asked for and not answered yet; under peer.mu

	// tally is what copies moved in the peer's memory since the last
	// report (served.go); nil when the peer's plugin takes no reports.
	tally *tally
}

// peer is a remote segment on this machine, reached through its plugin's
// socket. Its regions are mapped on first use and cached until the owner
// revokes them, the connection ends, ClosePeer or Stop.
type peer struct {
	t            *Transport
	id           uint32
	segment      string
	inc          uint64
	socket       string
	takesReports bool // its endpoint takes reports of what we move in its memory (served.go)

	maps atomic.Pointer[map[uint32]*mapping] // written under mu

	mu      sync.Mutex
	closed  bool
	dc      *dialConn
	waiting map[uint32][]*op // ops whose remote region is not mapped yet

	armed atomic.Bool // a report is due (served.go)

	ctx    context.Context // canceled by close: interrupts a dial
	cancel context.CancelFunc
	wake   chan struct{}
	wg     sync.WaitGroup // pump, reader, retirers
}

func (p *peer) lookup(id uint32) *mapping {
	m := p.maps.Load()
	if m == nil {
		return nil
	}
	return (*m)[id]
}

// setMaps replaces the table with a copy that has id set to m (or
// removed, m == nil), and returns what was there. Caller holds mu.
func (p *peer) setMapsLocked(id uint32, m *mapping) *mapping {
	old := p.maps.Load()
	size := 1
	if old != nil {
		size += len(*old)
	}
	n := make(map[uint32]*mapping, size)
	var prev *mapping
	if old != nil {
		for k, v := range *old {
			if k == id {
				prev = v
				continue
			}
			n[k] = v
		}
	}
	if m != nil {
		n[id] = m
	}
	p.maps.Store(&n)
	return prev
}

// submit runs o against the mapped region, or parks it until the region
// is mapped and wakes the pump to ask for it.
func (p *peer) submit(o *op) {
	if m := p.lookup(o.rRegion); m != nil && m.Acquire() {
		p.t.run(o, m)
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.t.finish(o, ring.StatusShutdown)
		return
	}
	if m := p.lookup(o.rRegion); m != nil && m.Acquire() {
		p.mu.Unlock()
		p.t.run(o, m)
		return
	}
	p.waiting[o.rRegion] = append(p.waiting[o.rRegion], o)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// pumpLoop is the peer's goroutine for everything that may block on the
// socket: dialing, and sending queries for regions ops wait on.
func (p *peer) pumpLoop() {
	defer p.wg.Done()
	for {
		select {
		case <-p.wake:
		case <-p.ctx.Done():
			return
		}
		p.report()
		p.pump()
	}
}

func (p *peer) pump() {
	p.mu.Lock()
	if p.closed || len(p.waiting) == 0 {
		p.mu.Unlock()
		return
	}
	if p.dc == nil {
		p.mu.Unlock()
		dc, st := p.dial()
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			if dc != nil {
				dc.C.Close()
			}
			return // close fails what waits
		}
		if dc == nil {
			failed := p.takeWaitingLocked()
			p.mu.Unlock()
			p.t.finishAll(failed, st)
			return
		}
		p.dc = dc
		p.wg.Add(1)
		go p.read(dc)
	}
	dc := p.dc
	var ask []uint32
	for id := range p.waiting {
		if !dc.queried[id] {
			dc.queried[id] = true
			ask = append(ask, id)
		}
	}
	p.mu.Unlock()
	for _, id := range ask {
		p.t.stats.Queries.Add(1)
		if err := dc.Send(msg{Type: msgQuery, Region: id}, -1); err != nil {
			dc.C.Close() // the reader fails what waits on it
			return
		}
	}
}

func (p *peer) takeWaitingLocked() []*op {
	var out []*op
	for id, ops := range p.waiting {
		out = append(out, ops...)
		delete(p.waiting, id)
	}
	return out
}

func (t *Transport) finishAll(ops []*op, st ring.Status) {
	for _, o := range ops {
		t.finish(o, st)
	}
}

// dial connects to the peer's socket and says hello (samehost.Link.Dial:
// same user, segment and incarnation, the cluster secret). It returns nil
// and the status for the ops waiting otherwise.
func (p *peer) dial() (*dialConn, ring.Status) {
	c, st := p.t.link.Dial(p.ctx, p.socket, p.segment, p.inc)
	if c == nil {
		return nil, st
	}
	dc := &dialConn{Conn: c, p: p, queried: map[uint32]bool{}}
	if p.takesReports {
		dc.tally = new(tally)
	}
	return dc, ring.StatusOK
}

// read handles what the peer's plugin sends: region answers and revokes.
// When the connection ends, every mapping that came on it is dropped.
func (p *peer) read(dc *dialConn) {
	defer p.wg.Done()
	rd := samehost.NewReader(codec{})
	for {
		m, fds, err := rd.Read(dc.C)
		if err == nil {
			switch {
			case m.Type == msgRegion && m.Status == ring.StatusOK && len(fds) == 1:
				p.onRegion(dc, m, fds[0])
				continue
			case m.Type == msgRegion && m.Status != ring.StatusOK && len(fds) == 0:
				p.onRegion(dc, m, -1)
				continue
			case m.Type == msgRevoke && len(fds) == 0:
				p.onRevoke(dc, m)
				continue
			}
			err = errMalformed
		}
		samehost.CloseFDs(fds)
		if samehost.IsProtocol(err) {
			p.t.stats.Malformed.Add(1)
			p.t.log.Warn("dropping the connection to a peer: malformed message", "peer", p.segment, "error", err)
		}
		break
	}
	p.connLost(dc)
}

// onRegion maps what the peer offered (fd >= 0) and runs the ops that
// waited for it, or fails them with the peer's status.
func (p *peer) onRegion(dc *dialConn, m msg, fd int) {
	t := p.t
	st := m.Status
	var mp *mapping
	if fd >= 0 {
		sm, mst := p.mapOffer(m, fd)
		unix.Close(fd)
		if sm == nil {
			st = mst
		} else {
			mp = &mapping{region: m.Region, gen: m.Gen, m: sm, mem: sm.Mem(), perm: m.Perm, dc: dc}
			mp.Init()
			t.stats.mapsCreated.Add(1)
			t.stats.mapsOpen.Add(1)
		}
	}
	p.mu.Lock()
	delete(dc.queried, m.Region)
	ops := p.waiting[m.Region]
	delete(p.waiting, m.Region)
	var prev *mapping
	if mp != nil {
		if p.closed || p.dc != dc {
			// Closing: drop it, close fails what waits.
			p.mu.Unlock()
			p.retire(mp, ring.StatusShutdown)
			t.finishAll(ops, ring.StatusShutdown)
			return
		}
		prev = p.setMapsLocked(m.Region, mp)
	}
	p.mu.Unlock()
	if prev != nil {
		p.retire(prev, ring.StatusNotRegistered) // replaced by a newer offer of the region
	}
	for _, o := range ops {
		if mp != nil && mp.Acquire() {
			t.run(o, mp)
		} else {
			t.finish(o, st)
		}
	}
}

// mapOffer maps the file a peer offered for region m.region, after
// checking it: the file must be exactly the region (offset 0, its size the
// answer's length), and mapping it must keep this plugin's mapped peer
// memory within max_mapped_bytes. Nothing is mapped otherwise; it returns
// nil and the status for the ops waiting.
func (p *peer) mapOffer(m msg, fd int) (*sdkshm.Mapping, ring.Status) {
	t := p.t
	size, allocated := fileStat(fd)
	if m.Off != 0 || size != int64(m.Length) {
		t.stats.OffersRefused.Add(1)
		t.log.Warn("refused a peer's region: its file is not exactly the region (a peer of this version sends a file of the region alone, at offset 0)",
			"peer", p.segment, "region", m.Region, "length", m.Length, "offset", m.Off, "file_size", size)
		return nil, ring.StatusProtocol
	}
	if allocated < size {
		// A peer's registered memory is allocated (the host populates
		// it); a sparse file would make our MAP_POPULATE allocate its
		// holes here, on our account.
		t.stats.OffersRefused.Add(1)
		t.log.Warn("refused a peer's region: its file is sparse (registered memory of an engine is allocated); mapping it would allocate its holes in this process",
			"peer", p.segment, "region", m.Region, "length", m.Length, "allocated", allocated)
		return nil, ring.StatusProtocol
	}
	for {
		cur := t.mapped.Load()
		if cur+m.Length > t.set.maxMapped || cur+m.Length < cur {
			t.stats.OffersRefused.Add(1)
			t.log.Warn("refused a peer's region: mapping it would exceed max_mapped_bytes; raise max_mapped_bytes in the shm plugin's config block, or let another transport reach it",
				"peer", p.segment, "region", m.Region, "length", m.Length, "mapped", cur, "max_mapped_bytes", t.set.maxMapped)
			return nil, ring.StatusUnsupported
		}
		if t.mapped.CompareAndSwap(cur, cur+m.Length) {
			break
		}
	}
	// Writable only when peers may write: for a remote-read region the
	// kernel itself refuses a write.
	sm, err := sdkshm.Map(fd, 0, int(m.Length), m.Perm.AllowsRemoteWrite())
	if err != nil {
		t.mapped.Add(-m.Length)
		t.log.Warn("cannot map a peer's region", "peer", p.segment, "region", m.Region, "error", err)
		return nil, ring.StatusProtocol
	}
	return sm, ring.StatusOK
}

// onRevoke drops the mapping of a region its owner unregistered and
// acknowledges once no copy uses it any more. Until then, copies already
// started on it run to their end; chunks not started yet are skipped.
func (p *peer) onRevoke(dc *dialConn, m msg) {
	p.t.stats.RevokesRecv.Add(1)
	p.mu.Lock()
	mp := p.lookup(m.Region)
	if mp != nil && mp.gen == m.Gen && mp.dc == dc {
		p.setMapsLocked(m.Region, nil)
	} else {
		mp = nil
	}
	p.mu.Unlock()
	ack := msg{Type: msgRevokeAck, Region: m.Region, Gen: m.Gen}
	if mp == nil {
		_ = dc.Send(ack, -1)
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.retire(mp, ring.StatusNotRegistered)
		_ = dc.Send(ack, -1)
	}()
}

// retire takes a mapping out of use: chunks not started yet complete
// with st, and it waits for the copies that hold it and unmaps it.
func (p *peer) retire(mp *mapping, st ring.Status) {
	mp.revoked.Store(int32(st))
	mp.Release()
	<-mp.Drained()
	mp.m.Close()
	p.t.mapped.Add(-uint64(len(mp.mem)))
	p.t.stats.mapsDropped.Add(1)
	p.t.stats.mapsOpen.Add(-1)
}

// connLost fails what waits on the connection and drops its mappings.
func (p *peer) connLost(dc *dialConn) {
	dc.C.Close()
	p.t.stats.ConnsOpen.Add(-1)
	p.mu.Lock()
	if p.dc == dc {
		p.dc = nil
	}
	st := ring.StatusPeerUnreachable
	if p.closed {
		st = ring.StatusShutdown
	}
	failed := p.takeWaitingLocked()
	var drop []*mapping
	if cur := p.maps.Load(); cur != nil {
		for id, mp := range *cur {
			if mp.dc == dc {
				p.setMapsLocked(id, nil)
				drop = append(drop, mp)
			}
		}
	}
	p.mu.Unlock()
	p.t.finishAll(failed, st)
	for _, mp := range drop {
		p.retire(mp, st)
	}
}

// Close ends the peer: its connection closes, ops waiting on it complete
// with StatusShutdown, copies in flight finish and every mapping is
// unmapped before close returns.
func (p *peer) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	dc := p.dc
	p.mu.Unlock()
	if dc != nil {
		// What the connection moved since its last report would be lost
		// with it (a bench that ends, an engine that closes): send it
		// now, bounded, since a stopped peer may not read.
		dc.C.SetWriteDeadline(time.Now().Add(finalReportWait))
		p.report()
	}
	p.cancel()
	if dc != nil {
		dc.C.Close()
	}
	p.wg.Wait()
	p.mu.Lock()
	failed := p.takeWaitingLocked()
	var drop []*mapping
	if cur := p.maps.Load(); cur != nil {
		for _, mp := range *cur {
			drop = append(drop, mp)
		}
	}
	p.maps.Store(nil)
	p.mu.Unlock()
	p.t.finishAll(failed, ring.StatusShutdown)
	for _, mp := range drop {
		p.retire(mp, ring.StatusShutdown)
	}
}
