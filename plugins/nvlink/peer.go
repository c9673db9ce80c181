package nvlink

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
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
	region  uint32
	gen     uint64
	n       uint64
	perm    sdk.Perm
	mem     memory
	dev     devMem
	host    *hostMem
	sm      *sdkshm.Mapping
	dc      *dialConn   // the connection it came on: its end drops it
	revoked atomic.Bool // set when it leaves the table: queued chunks skip it
}

// dialConn is our connection to a peer plugin.
type dialConn struct {
	conn
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
				dc.c.Close()
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
		p.t.stats.queries.Add(1)
		if err := dc.send(msg{typ: msgQuery, region: id}, -1); err != nil {
			dc.c.Close() // the reader fails what waits on it
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

// dial connects to the peer's socket, checks that the plugin there runs
// as our user (or root) and that it serves the segment and incarnation we
// address. It returns nil and the status for the ops waiting otherwise.
func (p *peer) dial() (*dialConn, ring.Status) {
	t := p.t
	ctx, cancel := context.WithTimeout(p.ctx, helloTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", p.socket)
	if err != nil {
		t.stats.dialFailures.Add(1)
		t.log.Debug("dial failed", "peer", p.segment, "socket", p.socket, "error", err)
		return nil, ring.StatusPeerUnreachable
	}
	c := nc.(*net.UnixConn)
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	fail := func(st ring.Status) (*dialConn, ring.Status) {
		c.Close()
		return nil, st
	}
	uid, err := peerUID(c)
	if err != nil || !uidAllowed(uid) {
		t.stats.credRejected.Add(1)
		t.log.Warn("refused peer plugin: it runs as another user", "peer", p.segment, "uid", uid, "error", err)
		return fail(ring.StatusPermission)
	}
	dc := &dialConn{conn: conn{c: c}, queried: map[uint32]bool{}}
	// A server that refuses us (another user) answers before our hello
	// and closes: the write may fail, but its answer is still there to
	// read, and says why.
	secret := t.set.secret
	hello := msg{typ: msgHello, name: p.segment, inc: p.inc}
	if secret != nil {
		hello.auth, hello.nonce = true, newNonce()
	}
	sendErr := dc.send(hello, -1)
	ack, fds, err := newReader().read(c)
	if err != nil && sendErr != nil {
		err = sendErr
	}
	closeFDs(fds)
	switch {
	case err != nil && (errors.Is(err, errMalformed) || errors.Is(err, errVersion)):
		t.stats.malformed.Add(1)
		return fail(ring.StatusProtocol)
	case err != nil:
		t.stats.dialFailures.Add(1)
		return fail(ring.StatusPeerUnreachable)
	case ack.typ != msgHelloAck || len(fds) != 0:
		t.stats.malformed.Add(1)
		return fail(ring.StatusProtocol)
	case ack.status != ring.StatusOK:
		t.stats.helloRejected.Add(1)
		if ack.status == ring.StatusPermission {
			t.stats.credRejected.Add(1)
			if secret == nil {
				t.log.Warn("refused by a peer plugin: another user, or it requires a cluster secret and this engine has none; set the same cluster_secret in the shm plugin's config block of both engines", "peer", p.segment)
			}
		}
		return fail(ack.status)
	case ack.inc != p.inc:
		t.stats.helloRejected.Add(1)
		return fail(ring.StatusStaleIncarnation)
	case secret == nil && ack.auth:
		t.stats.malformed.Add(1)
		return fail(ring.StatusProtocol) // a proof for a hello that asked for none
	case secret != nil && !ack.auth:
		t.stats.authFailed.Add(1)
		t.log.Warn("refused a peer plugin: it has no cluster secret and this engine has one; set the same cluster_secret in the shm plugin's config block of both engines, or remove it from this one", "peer", p.segment)
		return fail(ring.StatusPermission)
	case secret != nil && !verify(ack.mac, secret, "server", p.segment, p.inc, &hello.nonce, &ack.nonce):
		t.stats.authFailed.Add(1)
		t.log.Warn("refused a peer plugin: its proof of the cluster secret does not verify (another secret, or not a plugin of this cluster); give both engines the same cluster_secret", "peer", p.segment)
		return fail(ring.StatusPermission)
	}
	if secret != nil {
		a := msg{typ: msgAuth, auth: true, mac: proof(secret, "dialer", p.segment, p.inc, &ack.nonce, &hello.nonce)}
		if err := dc.send(a, -1); err != nil {
			t.stats.dialFailures.Add(1)
			return fail(ring.StatusPeerUnreachable)
		}
	}
	if !stop() {
		return fail(ring.StatusShutdown) // closed while we said hello
	}
	t.stats.connsDialed.Add(1)
	t.stats.connsOpen.Add(1)
	return dc, ring.StatusOK
}

// read handles what the peer's plugin sends: region answers and revokes.
// When the connection ends, every mapping that came on it is dropped.
func (p *peer) read(dc *dialConn) {
	defer p.wg.Done()
	rd := newReader()
	for {
		m, fds, err := rd.read(dc.c)
		if err == nil {
			switch {
			case m.typ == msgRegion && m.status == ring.StatusOK && !m.device && len(fds) == 1:
				p.onRegion(dc, m, fds[0])
				continue
			case m.typ == msgRegion && (m.status != ring.StatusOK || m.device) && len(fds) == 0:
				p.onRegion(dc, m, -1)
				continue
			case m.typ == msgRevoke && len(fds) == 0:
				p.onRevoke(dc, m)
				continue
			}
			err = errMalformed
		}
		closeFDs(fds)
		if errors.Is(err, errMalformed) || errors.Is(err, errVersion) {
			p.t.stats.malformed.Add(1)
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
	st := m.status
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
	delete(dc.queried, m.region)
	ops := p.waiting[m.region]
	delete(p.waiting, m.region)
	var prev *remote
	if mp != nil {
		if p.closed || p.dc != dc {
			p.mu.Unlock()
			p.retire(mp)
			t.finishAll(ops, ring.StatusShutdown)
			return
		}
		prev = p.setMapsLocked(m.region, mp)
	}
	p.mu.Unlock()
	if prev != nil {
		p.retire(prev)
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
	if m.device {
		if fd >= 0 {
			t.stats.malformed.Add(1)
			return nil, ring.StatusProtocol
		}
		be, err := t.backendFor(m.h.Type)
		if err != nil {
			t.stats.importFailures.Add(1)
			t.log.Warn("cannot import a peer's device region", "peer", p.segment, "region", m.region, "error", err)
			return nil, ring.StatusUnsupported
		}
		dev, err := be.importHandle(m.h)
		if err != nil {
			t.stats.importFailures.Add(1)
			t.log.Warn("a peer's device region does not import; its descriptors fail", "peer", p.segment, "region", m.region,
				"handle", m.h.Type, "stale", errors.Is(err, sdk.ErrStaleHandle), "error", err)
			return nil, ring.StatusInvalid
		}
		t.stats.imports.Add(1)
		return &remote{region: m.region, gen: m.gen, n: m.length, perm: m.perm, mem: dev, dev: dev}, ring.StatusOK
	}
	if fd < 0 {
		t.stats.malformed.Add(1)
		return nil, ring.StatusProtocol
	}
	sm, err := mapOffer(fd, m.length, m.perm.AllowsRemoteWrite())
	if err != nil {
		t.stats.offersRefused.Add(1)
		t.log.Warn("refused a peer's host region", "peer", p.segment, "region", m.region, "error", err)
		return nil, ring.StatusProtocol
	}
	h := &hostMem{b: sm.Mem(), readOnly: !m.perm.AllowsRemoteWrite()}
	return &remote{region: m.region, gen: m.gen, n: m.length, perm: m.perm, mem: h, host: h, sm: sm}, ring.StatusOK
}

// onRevoke drops the mapping of a region its owner unregistered and
// acknowledges once no copy uses it any more. Until then, copies already
// started on it run to their end; chunks not started yet are skipped.
func (p *peer) onRevoke(dc *dialConn, m msg) {
	p.t.stats.revokesRecv.Add(1)
	p.mu.Lock()
	mp := p.lookup(m.region)
	if mp != nil && mp.gen == m.gen && mp.dc == dc {
		p.setMapsLocked(m.region, nil)
	} else {
		mp = nil
	}
	p.mu.Unlock()
	ack := msg{typ: msgRevokeAck, region: m.region, gen: m.gen}
	if mp == nil {
		_ = dc.send(ack, -1)
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.retire(mp)
		_ = dc.send(ack, -1)
	}()
}

// retire takes a mapping out of use: it waits for the copies that hold it
// and unmaps it.
func (p *peer) retire(mp *remote) {
	mp.revoked.Store(true)
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
	dc.c.Close()
	p.t.stats.connsOpen.Add(-1)
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
		p.retire(mp)
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
		dc.c.Close()
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
		p.retire(mp)
	}
}
