package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/regtable"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Version is the plugin's own version.
const Version = "0.1.0"

// Transport is the TCP transport. The zero value is not usable; call New.
type Transport struct {
	log hclog.Logger

	mu       sync.Mutex // control plane: state, listeners, servers
	started  bool
	set      settings
	engine   string
	listen   []net.Listener
	rails    []*rail // rail i listens on listen[i]; set at Start
	endpoint sdk.Endpoint
	servers  map[*serverConn]struct{}
	guard    guard           // connection limits and their logs
	ctx      context.Context // canceled by Stop
	cancel   context.CancelFunc

	incarnation uint64 // set once at Start, before any goroutine reads it
	stopped     atomic.Bool

	regions regtable.Table[*region]

	peerMu sync.Mutex // serialises OpenPeer/ClosePeer
	peers  atomic.Pointer[map[uint32]*peer]

	wg     sync.WaitGroup // every goroutine the transport started
	stats  counters
	opPool sync.Pool
}

var _ sdk.Transport = (*Transport)(nil)

// Option configures New.
type Option func(*Transport)

// WithLogger sets the logger (default: JSON to stderr, which go-plugin
// forwards to the host with the plugin's name).
func WithLogger(l hclog.Logger) Option { return func(t *Transport) { t.log = l } }

// New returns a TCP transport ready for Start.
func New(opts ...Option) *Transport {
	t := &Transport{
		servers: make(map[*serverConn]struct{}),
		set:     defaultSettings(),
	}
	t.opPool.New = func() any { return new(op) }
	t.guard.init()
	for _, o := range opts {
		o(t)
	}
	if t.log == nil {
		t.log = hclog.New(&hclog.LoggerOptions{Name: "tcp", Output: os.Stderr, JSONFormat: true, Level: hclog.Info})
	}
	return t
}

// Describe says what the plugin is and can do. MaxSlice is max_frame, the
// largest payload the plugin sends in one frame (a longer descriptor
// completes with StatusInvalid; a peer with a smaller max_frame lowers it
// further for that peer): the default before Start, the configured value
// after.
func (t *Transport) Describe(context.Context) (sdk.Info, error) {
	t.mu.Lock()
	maxFrame := t.set.maxFrame
	t.mu.Unlock()
	return sdk.Info{Name: "tcp", Version: Version, Ops: []ring.Op{ring.OpWrite, ring.OpRead},
		MaxSlice: maxFrame, MemoryKinds: []string{"cpu"}}, nil
}

// Probe reports TCP as available, with one rail per listen address,
// named as the configuration writes it (so that a rail keeps its name
// across restarts, whatever port it bound; before Start, the default),
// and for each the NUMA node and link speed of the interface that owns
// the address, as sysfs tells them.
func (t *Transport) Probe(context.Context) (sdk.ProbeResult, error) {
	t.mu.Lock()
	addrs := t.set.listen
	t.mu.Unlock()
	rails := make([]sdk.Rail, len(addrs))
	seen := make(map[string]bool, len(addrs))
	for i, a := range addrs {
		rails[i] = probeRail(a)
		if seen[a] { // the same address written twice: two rails all the same
			rails[i].Name = fmt.Sprintf("%s#%d", a, i)
		}
		seen[rails[i].Name] = true
	}
	return sdk.ProbeResult{Available: true, Rails: rails}, nil
}

// Start decodes the configuration, listens on every address and returns the
// endpoint blob.
func (t *Transport) Start(ctx context.Context, cfg sdk.StartConfig) (sdk.Endpoint, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped.Load() {
		return nil, errors.New("tcp: start after stop")
	}
	if t.started {
		return nil, errors.New("tcp: already started")
	}
	if cfg.Engine == "" {
		return nil, errors.New("tcp: start: empty engine name")
	}
	if len(cfg.Engine) > MaxNameLen {
		return nil, fmt.Errorf("tcp: start: engine name longer than %d bytes", MaxNameLen)
	}
	set, err := parseConfig(cfg)
	if err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	var lns []net.Listener
	for _, a := range set.listen {
		ln, err := lc.Listen(ctx, "tcp", a)
		if err != nil {
			for _, l := range lns {
				_ = l.Close()
			}
			return nil, fmt.Errorf("tcp: listen %s: %w", a, err)
		}
		lns = append(lns, ln)
	}
	addrs := set.advertise
	if len(addrs) == 0 {
		for _, ln := range lns {
			addrs = append(addrs, ln.Addr().String())
		}
	}
	t.set = set
	t.engine = cfg.Engine
	t.incarnation = cfg.Incarnation
	t.listen = lns
	t.rails = make([]*rail, len(lns))
	for i, ln := range lns {
		t.rails[i] = newRail(i, ln)
	}
	t.endpoint = encodeEndpoint(endpoint{Addrs: addrs, MaxFrame: set.maxFrame})
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.started = true
	for i, ln := range lns {
		t.wg.Add(1)
		go t.acceptLoop(ln, t.rails[i])
	}
	t.log.Info("listening", "engine", cfg.Engine, "addrs", addrs, "connections_per_peer", set.conns,
		"max_frame", set.maxFrame, "io_timeout", set.ioTimeout, "authenticated", set.secret != nil,
		"max_connections", set.maxConns, "max_connections_per_host", set.maxConnsPerHost,
		"handshake_timeout", set.handshakeTimeout)
	if set.secret == nil {
		if open := exposed(set.listen, lns); len(open) > 0 {
			t.log.Warn(fmt.Sprintf("the tcp transport accepts transfers from anyone who can reach %s; set cluster_secret in the tcp plugin's config block",
				strings.Join(open, ", ")), "engine", cfg.Engine)
		}
	}
	return append(sdk.Endpoint(nil), t.endpoint...), nil
}

// exposed lists the listen addresses whose bound address is not a
// loopback address (an unspecified address, 0.0.0.0 or ::, is reachable
// from everywhere), as the operator wrote them with the bound port.
func exposed(listen []string, lns []net.Listener) []string {
	var out []string
	for i, ln := range lns {
		a, ok := ln.Addr().(*net.TCPAddr)
		if ok && a.IP.IsLoopback() {
			continue
		}
		addr := ln.Addr().String()
		if host, _, err := net.SplitHostPort(listen[i]); err == nil && ok {
			addr = net.JoinHostPort(host, strconv.Itoa(a.Port))
		}
		out = append(out, addr)
	}
	return out
}

// RegisterMemory makes r known. Peers reach it only as r.Perm allows.
func (t *Transport) RegisterMemory(_ context.Context, r sdk.Region) error {
	if t.stopped.Load() {
		return errors.New("tcp: register after stop")
	}
	switch r.Perm {
	case sdk.PermLocal, sdk.PermRemoteRead, sdk.PermRemoteReadWrite:
	default:
		return fmt.Errorf("tcp: region %d: unknown permission %d", r.ID, r.Perm)
	}
	if r.Kind != "" && r.Kind != "cpu" {
		return fmt.Errorf("tcp: region %d: memory kind %q is not supported (cpu only)", r.ID, r.Kind)
	}
	if len(r.Mem) == 0 {
		return fmt.Errorf("tcp: region %d: empty", r.ID)
	}
	if !t.regions.Add(r.ID, newRegion(r)) {
		return fmt.Errorf("tcp: region %d already registered", r.ID)
	}
	return nil
}

// UnregisterMemory forgets a region. New descriptors and frames no longer
// find it; queued descriptors that use it complete StatusNotRegistered; and
// it returns only when nothing touches the memory any more. Frames in flight
// get io_timeout to finish; then the connections carrying them are closed.
func (t *Transport) UnregisterMemory(ctx context.Context, id uint32) error {
	r := t.regions.Remove(id)
	if r == nil {
		return fmt.Errorf("tcp: region %d not registered", id)
	}
	r.removed.Store(true)
	for _, p := range t.peerList() {
		for _, s := range p.slots {
			s.purge(r)
		}
	}
	r.Release() // the table's reference
	iot := t.ioTimeout()
	tm := time.NewTimer(iot)
	defer tm.Stop()
	select {
	case <-r.Drained():
		return nil
	case <-tm.C:
		t.log.Warn("region still in use after io_timeout: closing the connections that use it", "region", id)
	case <-ctx.Done():
	}
	t.abortServersUsing(r)
	for _, p := range t.peerList() {
		for _, s := range p.slots {
			s.abortIfUsing(r)
		}
	}
	// Closing a socket ends the I/O on it at once; this bound only guards
	// against a bug. The caller's context does not shorten it: returning
	// while the memory is in use is what this method must not do.
	tm.Reset(iot)
	select {
	case <-r.Drained():
		return nil
	case <-tm.C:
		return fmt.Errorf("tcp: region %d: still in use after %s", id, 2*iot)
	}
}

func (t *Transport) ioTimeout() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.set.ioTimeout
}

// OpenPeer prepares the slots for a peer: connections_per_peer for each
// local rail, each rail paired with one of the peer's addresses.
// Connections are dialed when the first descriptor for them arrives.
func (t *Transport) OpenPeer(_ context.Context, p sdk.Peer) error {
	t.mu.Lock()
	started, set, parent, rails := t.started, t.set, t.ctx, t.rails
	t.mu.Unlock()
	if !started || t.stopped.Load() {
		return errors.New("tcp: open peer: transport not running")
	}
	if len(p.Segment) > MaxNameLen {
		return fmt.Errorf("tcp: peer %d: segment name longer than %d bytes", p.ID, MaxNameLen)
	}
	ep, err := decodeEndpoint(p.Endpoint)
	if err != nil {
		return fmt.Errorf("tcp: peer %d (%s): %w", p.ID, p.Segment, err)
	}
	peerMax := ep.MaxFrame
	if peerMax == 0 {
		peerMax = DefaultMaxFrame
	}
	t.peerMu.Lock()
	defer t.peerMu.Unlock()
	old := t.peers.Load()
	if old != nil {
		if _, ok := (*old)[p.ID]; ok {
			return fmt.Errorf("tcp: peer %d already open", p.ID)
		}
	}
	pr := &peer{
		t: t, id: p.ID, segment: p.Segment, incarnation: p.Incarnation,
		maxFrame: min(peerMax, set.maxFrame), conns: set.conns,
	}
	pr.ctx, pr.cancel = context.WithCancel(parent)
	for _, rl := range rails {
		plan := dialPlan(rl.ip, rl.idx, ep.Addrs)
		for range set.conns {
			pr.slots = append(pr.slots, &slot{t: t, p: pr, rail: rl, plan: plan, wake: make(chan struct{}, 1)})
		}
	}
	n := make(map[uint32]*peer, 1+mapLen(old))
	if old != nil {
		for k, v := range *old {
			n[k] = v
		}
	}
	n[p.ID] = pr
	// Start the writers under the stop check so that Stop's Wait sees them.
	t.mu.Lock()
	if t.stopped.Load() {
		t.mu.Unlock()
		pr.cancel()
		return errors.New("tcp: open peer: transport stopped")
	}
	for _, s := range pr.slots {
		t.wg.Add(1)
		pr.wg.Add(1)
		go s.run()
	}
	t.mu.Unlock()
	t.peers.Store(&n)
	return nil
}

// ClosePeer forgets a peer: its connections close and its descriptors
// still queued or in flight complete with StatusShutdown before it returns.
func (t *Transport) ClosePeer(_ context.Context, id uint32) error {
	t.peerMu.Lock()
	old := t.peers.Load()
	var pr *peer
	if old != nil {
		pr = (*old)[id]
	}
	if pr == nil {
		t.peerMu.Unlock()
		return fmt.Errorf("tcp: peer %d not open", id)
	}
	n := make(map[uint32]*peer, len(*old))
	for k, v := range *old {
		if k != id {
			n[k] = v
		}
	}
	t.peers.Store(&n)
	t.peerMu.Unlock()
	pr.close()
	return nil
}

func (t *Transport) peerList() []*peer {
	m := t.peers.Load()
	if m == nil {
		return nil
	}
	out := make([]*peer, 0, len(*m))
	for _, p := range *m {
		out = append(out, p)
	}
	return out
}

// Submit starts one descriptor. It checks what it can locally, queues the
// rest to a connection's writer and returns; it never waits on the network.
func (t *Transport) Submit(d *ring.Descriptor, c sdk.Completer) {
	if !t.stats.ops.Admit(d, c, t.stopped.Load()) {
		return
	}
	fail := func(st ring.Status) {
		t.stats.ops.Count(st)
		c.Complete(d.Token, st, 0)
	}
	var p *peer
	if m := t.peers.Load(); m != nil {
		p = (*m)[d.Peer]
	}
	if p == nil {
		fail(ring.StatusPeerUnknown)
		return
	}
	if int(d.Rail) >= p.rails() {
		t.stats.opsBadRail.Add(1)
		fail(ring.StatusInvalid)
		return
	}
	if d.Length > p.maxFrame {
		// The host slices requests; a slice over the peer's max_frame is a
		// configuration mismatch, not something to split here.
		fail(ring.StatusInvalid)
		return
	}
	r := t.regions.Acquire(d.LocalRegion)
	if r == nil {
		fail(ring.StatusNotRegistered)
		return
	}
	end := d.LocalOffset + d.Length
	if end < d.LocalOffset || end > uint64(len(r.mem)) || d.RemoteOffset+d.Length < d.RemoteOffset {
		r.Release()
		fail(ring.StatusOutOfBounds)
		return
	}
	o := t.opPool.Get().(*op)
	o.token = d.Token
	o.kind = d.Op
	o.local = r
	o.mem = r.mem[d.LocalOffset:end:end]
	o.rRegion = d.RemoteRegion
	o.rOffset = d.RemoteOffset
	o.deadline = d.Deadline
	o.c = c
	s := p.pick(int(d.Rail))
	s.rail.requests.Add(1)
	s.enqueue(o)
}

// complete reports o's outcome, after giving back its region reference so
// that an UnregisterMemory prompted by the completion does not wait on it.
func (t *Transport) complete(o *op, st ring.Status, n uint64) {
	c, tok := o.c, o.token
	o.local.Release()
	if o.s != nil {
		o.s.load.Add(-(int64(len(o.mem)) + frameCost))
	}
	t.stats.ops.Count(st)
	*o = op{}
	t.opPool.Put(o)
	c.Complete(tok, st, n)
}

func (t *Transport) completeList(o *op, st ring.Status) {
	for o != nil {
		next := o.next
		o.next = nil
		t.complete(o, st, 0)
		o = next
	}
}

// Stats returns the counters, the rails' as "rail.<i>.<name>".
func (t *Transport) Stats(context.Context) (map[string]uint64, error) {
	m := t.stats.snapshot()
	t.mu.Lock()
	rails := t.rails
	t.mu.Unlock()
	for _, r := range rails {
		r.addTo(m, r.idx)
	}
	return m, nil
}

// Stop closes the listeners and every connection, completes every
// outstanding descriptor with StatusShutdown and waits for every goroutine
// the transport started. It may be called more than once.
func (t *Transport) Stop(ctx context.Context) error {
	t.mu.Lock()
	if t.stopped.Swap(true) {
		t.mu.Unlock()
		return t.waitStopped(ctx)
	}
	lns := t.listen
	for sc := range t.servers {
		_ = sc.link.nc.Close()
	}
	cancel := t.cancel
	t.mu.Unlock()
	for _, ln := range lns {
		_ = ln.Close()
	}
	t.peerMu.Lock()
	peers := t.peerList()
	t.peers.Store(nil)
	t.peerMu.Unlock()
	for _, p := range peers {
		for _, s := range p.slots {
			s.mu.Lock()
			s.closed = true
			s.mu.Unlock()
		}
	}
	if cancel != nil {
		cancel()
	}
	return t.waitStopped(ctx)
}

func (t *Transport) waitStopped(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		t.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("tcp: stop: %w", ctx.Err())
	}
}

func mapLen[K comparable, V any](m *map[K]V) int {
	if m == nil {
		return 0
	}
	return len(*m)
}
