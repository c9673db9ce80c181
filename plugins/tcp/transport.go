package tcp

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Version is the plugin's own version.
const Version = "0.1.0"

// Transport is the TCP transport. The zero value is not usable; call New.
type Transport struct {
	log hclog.Logger

	// base is the lifecycle, the region table, the peers, the goroutines
	// Stop waits for and the outcome counters.
	base kit.Base[*region, *peer]

	mu          sync.Mutex // control plane: settings, listeners, servers
	set         settings
	listen      []net.Listener
	rails       []*rail // rail i listens on listen[i]; set at Start
	servers     map[*serverConn]struct{}
	guard       guard           // connection limits and their logs
	niceLog     sync.Once       // the one warning that bulk_nice could not be applied
	prioThreads atomic.Int32    // readers waiting on threads of their own (prio.go)
	ctx         context.Context // canceled by Stop
	cancel      context.CancelFunc

	stats  counters
	served kit.Served // traffic served to peers, per peer and rail
	recv   budget     // staging bytes of every server connection (bounds.go)
	ahead  budget     // read-ahead buffers of every server connection (ahead.go)
	opPool sync.Pool

	// run is this run of the plugin (sdk.StartConfig.Run), carried in
	// every hello it dials; fences are the runs of peers it was asked
	// to fence (fence.go).
	run    uint64
	fences kit.Fences
	epochs atomic.Uint64 // the last connection epoch this run dialed
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
		base:    kit.Base[*region, *peer]{Name: "tcp", MaxNameLen: MaxNameLen, ForeignMemory: true},
		servers: make(map[*serverConn]struct{}),
		set:     defaultSettings(),
	}
	t.opPool.New = func() any { return new(op) }
	t.guard.init()
	for _, o := range opts {
		o(t)
	}
	if t.log == nil {
		t.log = kit.Logger("tcp")
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
		MaxSlice: maxFrame, MemoryKinds: []sdk.MemoryKind{sdk.MemoryCPU}, ForeignMemory: true, TwoSided: true}, nil
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
	return t.base.Start(cfg, func() (sdk.Endpoint, error) { return t.start(ctx, cfg) })
}

func (t *Transport) start(ctx context.Context, cfg sdk.StartConfig) (sdk.Endpoint, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	set, err := parse(cfg)
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
	t.run = cfg.Run
	t.recv.init(set.maxRecvBuffer)
	t.ahead.init(set.maxRecvBuffer)
	t.listen = lns
	t.rails = make([]*rail, len(lns))
	for i, ln := range lns {
		t.rails[i] = newRail(i, ln)
	}
	ep := encodeEndpoint(endpoint{Addrs: addrs, MaxFrame: set.maxFrame, From: true})
	t.ctx, t.cancel = context.WithCancel(context.Background())
	for i, ln := range lns {
		t.base.Goroutines.Add(1)
		go t.acceptLoop(ln, t.rails[i])
	}
	t.log.Info("listening", "engine", cfg.Engine, "addrs", addrs, "connections_per_peer", set.conns,
		"max_frame", set.maxFrame, "io_timeout", set.ioTimeout, "authenticated", set.Secret != nil,
		"max_connections", set.maxConns, "max_connections_per_peer", set.maxConnsPerPeer,
		"max_startups", set.startups.String(),
		"max_connections_per_host", set.maxConnsPerHost, "handshake_timeout", set.handshakeTimeout)
	if set.Secret == nil {
		// Info, not a warning: the engine warns once, in one line, of all
		// it leaves open without a secret (host/exposure); this is the detail.
		t.log.Info(openAccessWarning(set.listen, lns), "engine", cfg.Engine)
	}
	return ep, nil
}

// openAccessWarning is what Start logs (at info) without a cluster secret: whoever
// can reach a listen address is a peer, which on a loopback address is any
// local user of a shared machine (an unspecified address, 0.0.0.0 or ::,
// is reachable from everywhere). It names the listen addresses as the
// operator wrote them, with the bound port.
func openAccessWarning(listen []string, lns []net.Listener) string {
	var addrs []string
	local := true
	for i, ln := range lns {
		a, ok := ln.Addr().(*net.TCPAddr)
		local = local && ok && a.IP.IsLoopback()
		addr := ln.Addr().String()
		if host, _, err := net.SplitHostPort(listen[i]); err == nil && ok {
			addr = net.JoinHostPort(host, strconv.Itoa(a.Port))
		}
		addrs = append(addrs, addr)
	}
	who := "anyone who can reach " + strings.Join(addrs, ", ")
	if local {
		who += " (a loopback address: any user or process of this machine)"
	}
	return "the tcp transport accepts transfers from " + who +
		", and they may read and write every buffer registered for remote access; set cluster_secret in the tcp plugin's config block"
}

// RegisterMemory makes r known. Peers reach it only as r.Perm allows.
func (t *Transport) RegisterMemory(_ context.Context, r sdk.Region) error {
	return t.base.RegisterMemory(r, newRegion)
}

// UnregisterMemory forgets a region. New descriptors and frames no longer
// find it; queued descriptors that use it complete StatusNotRegistered; and
// it returns only when nothing touches the memory any more. Frames in flight
// get io_timeout to finish; then the connections carrying them are closed.
func (t *Transport) UnregisterMemory(ctx context.Context, id uint32) error {
	r, err := t.base.UnregisterMemory(id)
	if err != nil {
		return err
	}
	r.removed.Store(true)
	for _, p := range t.base.Peers.List() {
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
	for _, p := range t.base.Peers.List() {
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
	if err := t.base.CheckPeer(p); err != nil {
		return err
	}
	t.mu.Lock()
	set, parent, rails := t.set, t.ctx, t.rails
	t.mu.Unlock()
	ep, err := decodeEndpoint(p.Endpoint)
	if err != nil {
		return t.base.PeerError(p, err)
	}
	peerMax := ep.MaxFrame
	if peerMax == 0 {
		peerMax = DefaultMaxFrame
	}
	pr := &peer{
		t: t, id: p.ID, segment: p.Segment, incarnation: p.Incarnation,
		maxFrame: min(peerMax, set.maxFrame), conns: set.conns, nrails: len(rails), prio: set.prioConn,
	}
	// Name this engine in the hello to a listener that reads it, where the
	// name fits beside the target's.
	if self := t.base.Engine(); ep.From && self != "" && !strings.ContainsRune(p.Segment, 0) &&
		len(p.Segment)+1+len(self) <= MaxNameLen {
		pr.from = self
	}
	pr.ctx, pr.cancel = context.WithCancel(parent)
	for _, rl := range rails {
		plan := dialPlan(rl.ip, rl.idx, ep.Addrs)
		for range set.conns {
			pr.slots = append(pr.slots, &slot{t: t, p: pr, rail: rl, plan: plan, wake: make(chan struct{}, 1)})
		}
	}
	if pr.prio {
		pr.addPrioritySlots(rails)
	}
	// The writers start where Stop cannot miss them.
	return t.base.AddPeer(p.ID, pr, func() {
		for _, s := range pr.slots {
			t.base.Goroutines.Add(1)
			pr.wg.Add(1)
			go s.run()
		}
	})
}

// ClosePeer forgets a peer: its connections close and its descriptors
// still queued or in flight complete with StatusShutdown before it returns.
func (t *Transport) ClosePeer(_ context.Context, id uint32) error {
	return t.base.ClosePeer(id)
}

// Submit starts one descriptor. It checks what it can locally, queues the
// rest to a connection's writer and returns; it never waits on the network.
func (t *Transport) Submit(d *ring.Descriptor, c sdk.Completer) {
	p, ok := t.base.Admit(d, c)
	if !ok {
		return
	}
	if int(d.Rail) >= p.rails() {
		t.stats.opsBadRail.Add(1)
		t.base.Fail(d, c, ring.StatusInvalid)
		return
	}
	if d.Length > p.maxFrame {
		// The host slices requests; a slice over the peer's max_frame is a
		// configuration mismatch, not something to split here.
		t.base.Fail(d, c, ring.StatusInvalid)
		return
	}
	r, mem, ok := t.base.Local(d, c)
	if !ok {
		return
	}
	o := t.opPool.Get().(*op)
	o.token = d.Token
	o.kind = d.Op
	o.local = r
	o.mem = mem
	o.rRegion = d.RemoteRegion
	o.rOffset = d.RemoteOffset
	o.deadline = d.Deadline
	o.c = c
	// mem is nil where the bytes go through the host (foreign memory, or
	// a read into a sealed region): stage them.
	if mem == nil && r.Foreign != nil && !t.stage(o, r, d.LocalOffset, d.Length) {
		*o = op{}
		t.opPool.Put(o)
		r.Release()
		t.base.Fail(d, c, ring.StatusIO)
		return
	}
	s := p.slotFor(d)
	s.rail.requests.Add(1)
	s.enqueue(o)
}

// complete reports o's outcome, after giving back its region reference so
// that an UnregisterMemory prompted by the completion does not wait on it.
func (t *Transport) complete(o *op, st ring.Status, n uint64) {
	st = t.unstage(o, st, n)
	c, tok := o.c, o.token
	o.local.Release()
	if o.s != nil {
		o.s.load.Add(-(int64(len(o.mem)) + frameCost))
	}
	t.base.Outcomes.Count(st)
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
	t.base.Outcomes.Export(m)
	t.served.Export(m)
	t.recv.export(m)
	m["read_ahead_held"] = t.ahead.held()
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
	return t.base.Stop(ctx, func() {
		t.mu.Lock()
		lns := t.listen
		for sc := range t.servers {
			_ = sc.link.close()
		}
		cancel := t.cancel
		t.mu.Unlock()
		for _, ln := range lns {
			_ = ln.Close()
		}
		for _, p := range t.base.Peers.CloseAll() {
			for _, s := range p.slots {
				s.mu.Lock()
				s.closed = true
				s.mu.Unlock()
			}
		}
		if cancel != nil {
			cancel()
		}
	})
}
