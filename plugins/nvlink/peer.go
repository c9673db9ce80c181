package nvlink

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit/samehost"
	"github.com/ferrydev/ferry/sdk/regtable"
	"github.com/ferrydev/ferry/sdk/ring"
	sdkshm "github.com/ferrydev/ferry/sdk/shm"
)

// remote is a peer's region imported into this process: a device handle
// imported with its backend (dev), or a memfd of host memory mapped here
// (host, sm). The peer table holds one reference; every op copying to or
// from it holds another.
type remote struct {
	regtable.Ref
	region uint32
	gen    uint64
	n      uint64
	perm   sdk.Perm
	mem    memory
	dev    devMem
	host   *hostMem
	sm     *sdkshm.Mapping
	dc     *dialConn // the connection it came on: its end drops it
	// revoked is the status queued chunks complete with, skipped, once
	// it leaves the table (0 while in it): StatusNotRegistered when its
	// owner unregistered it, StatusPeerUnreachable when the connection
	// it came on was lost, StatusShutdown when the peer is closed.
	revoked atomic.Int32
}

// dialConn is our connection to a peer plugin.
type dialConn struct {
	*samehost.Conn
	queried map[uint32]bool // regions asked for and not answered yet; under peer.mu
}

// peer is a remote segment on this machine, reached through its plugin's
// socket. Its regions are mapped on first use and cached until the owner
// revokes them, the connection ends, ClosePeer or Stop.
type peer struct {
	t       *Transport
	id      uint32
	segment string
	inc     uint64
	socket  string

	maps atomic.Pointer[map[uint32]*remote] // written under mu

	mu      sync.Mutex
	closed  bool
	dc      *dialConn
	waiting map[uint32][]*op // ops whose remote region is not mapped yet

	ctx    context.Context // canceled by close: interrupts a dial
	cancel context.CancelFunc
	wake   chan struct{}
	wg     sync.WaitGroup // pump, reader, retirers
}

func (p *peer) lookup(id uint32) *remote {
	m := p.maps.Load()
	if m == nil {
		return nil
	}
	return (*m)[id]
}

// setMaps replaces the table with a copy that has id set to m (or
// removed, m == nil), and returns what was there. Caller holds mu.
func (p *peer) setMapsLocked(id uint32, m *remote) *remote {
	old := p.maps.Load()
	size := 1
	if old != nil {
		size += len(*old)
	}
	n := make(map[uint32]*remote, size)
	var prev *remote
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
	return &dialConn{Conn: c, queried: map[uint32]bool{}}, ring.StatusOK
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
			case m.Type == msgRegion && m.Status == ring.StatusOK && !m.Device && len(fds) == 1:
				p.onRegion(dc, m, fds[0])
				continue
			case m.Type == msgRegion && (m.Status != ring.StatusOK || m.Device) && len(fds) == 0:
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

// onRegion imports what the peer offered (a handle, or fd >= 0) and runs
// the ops that waited for it, or fails them. The import runs here, on the
// connection's reader: a legacy CUDA IPC open takes 142 ms once, and the
// result is cached until the owner revokes it.
func (p *peer) onRegion(dc *dialConn, m msg, fd int) {
	t := p.t
	st := m.Status
	var mp *remote
	if st == ring.StatusOK {
		mp, st = p.importOffer(m, fd)
		if mp != nil {
			mp.dc = dc
			mp.Init()
			t.stats.importsOpen.Add(1)
		}
	}
	if fd >= 0 {
		unix.Close(fd)
	}
	p.mu.Lock()
	delete(dc.queried, m.Region)
	ops := p.waiting[m.Region]
	delete(p.waiting, m.Region)
	var prev *remote
	if mp != nil {
		if p.closed || p.dc != dc {
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

// importOffer imports a device handle with its backend, or maps a host
// memfd that is exactly the region. A handle that does not import (its
// allocation was freed: sdk.ErrStaleHandle) fails the ops waiting with
// StatusInvalid and the reason in the log; nothing is cached, so a later
// descriptor asks again.
func (p *peer) importOffer(m msg, fd int) (*remote, ring.Status) {
	t := p.t
	if m.Device {
		if fd >= 0 {
			t.stats.Malformed.Add(1)
			return nil, ring.StatusProtocol
		}
		be, err := t.backendFor(m.Handle.Type)
		if err != nil {
			t.stats.importFailures.Add(1)
			t.log.Warn("cannot import a peer's device region", "peer", p.segment, "region", m.Region, "error", err)
			return nil, ring.StatusUnsupported
		}
		dev, err := be.importHandle(m.Handle)
		if err != nil {
			t.stats.importFailures.Add(1)
			t.log.Warn("a peer's device region does not import; its descriptors fail", "peer", p.segment, "region", m.Region,
				"handle", m.Handle.Type, "stale", errors.Is(err, sdk.ErrStaleHandle), "error", err)
			return nil, ring.StatusInvalid
		}
		t.stats.imports.Add(1)
		return &remote{region: m.Region, gen: m.Gen, n: m.Length, perm: m.Perm, mem: dev, dev: dev}, ring.StatusOK
	}
	if fd < 0 {
		t.stats.Malformed.Add(1)
		return nil, ring.StatusProtocol
	}
	sm, err := mapOffer(fd, m.Length, m.Perm.AllowsRemoteWrite())
	if err != nil {
		t.stats.OffersRefused.Add(1)
		t.log.Warn("refused a peer's host region", "peer", p.segment, "region", m.Region, "error", err)
		return nil, ring.StatusProtocol
	}
	h := &hostMem{b: sm.Mem(), readOnly: !m.Perm.AllowsRemoteWrite()}
	return &remote{region: m.Region, gen: m.Gen, n: m.Length, perm: m.Perm, mem: h, host: h, sm: sm}, ring.StatusOK
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
func (p *peer) retire(mp *remote, st ring.Status) {
	mp.revoked.Store(int32(st))
	mp.Release()
	<-mp.Drained()
	if mp.dev != nil {
		if err := mp.dev.release(); err != nil {
			p.t.log.Warn("releasing a peer region's import failed", "peer", p.segment, "region", mp.region, "error", err)
		}
	}
	if mp.host != nil {
		mp.host.drop()
		mp.sm.Close()
	}
	p.t.stats.importsOpen.Add(-1)
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
	var drop []*remote
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
	p.cancel()
	if dc != nil {
		dc.C.Close()
	}
	p.wg.Wait()
	p.mu.Lock()
	failed := p.takeWaitingLocked()
	var drop []*remote
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
