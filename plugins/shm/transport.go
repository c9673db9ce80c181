package shm

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit"
	"github.com/ferrydev/ferry/sdk/kit/samehost"
	"github.com/ferrydev/ferry/sdk/memcpy"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Version is the plugin's own version.
const Version = "0.1.0"

// Transport is the shared-memory transport. The zero value is not usable;
// call New.
type Transport struct {
	log hclog.Logger

	// base is the lifecycle, the region table, the peers, the goroutines
	// Stop waits for and the outcome counters.
	base kit.Base[*region, *peer]

	// mu guards the control state, and is the exchange server's lock:
	// what each served connection may have mapped (samehost.Server.Mu).
	// Lock order: a connection's write lock before mu.
	mu  sync.Mutex
	set settings
	// link is the region exchange (sdk/kit/samehost): the socket, the
	// hello and the cluster secret's proofs; srv serves peers on it.
	link samehost.Link
	srv  samehost.Server
	// readOnly are the regions whose read-only fd is open (region.ro),
	// closed at UnregisterMemory or Stop.
	readOnly map[*region]struct{}

	machine string // set once at Start, before any goroutine reads it
	nextGen atomic.Uint64
	mapped  atomic.Uint64 // bytes of peers' regions mapped now (max_mapped_bytes)

	pool pool
	// bulk runs the copies of low-priority descriptors on nice threads
	// (bulk_nice), so that they leave the cores to everything else.
	bulk    pool
	niceLog sync.Once
	stats   counters
	served  kit.Served // what peers report they moved in this engine's memory
	opPool  sync.Pool
}

var _ sdk.Transport = (*Transport)(nil)

// Option configures New.
type Option func(*Transport)

// WithFatal sets what happens when the plugin can no longer serve new
// peers (its accept loop ended for good). The plugin binary ends its
// process (the host sees the exit and restarts it, fresh); by default the
// plugin only logs and reports accepting=0 in Stats.
func WithFatal(f func(error)) Option { return func(t *Transport) { t.srv.Fatal = f } }

// WithLogger sets the logger (default: JSON to stderr, which go-plugin
// forwards to the host with the plugin's name).
func WithLogger(l hclog.Logger) Option { return func(t *Transport) { t.log = l } }

// New returns a shared-memory transport ready for Start.
func New(opts ...Option) *Transport {
	t := &Transport{
		base:     kit.Base[*region, *peer]{Name: "shm", MaxNameLen: MaxNameLen, ForeignMemory: true},
		readOnly: make(map[*region]struct{}),
		set:      defaultSettings(),
	}
	t.link = samehost.Link{Name: "shm", Label: "ferry-shm/1", Codec: codec{}, Stats: &t.stats.Counters}
	t.srv = samehost.Server{Link: &t.link, Mu: &t.mu, Answer: t.answer}
	t.opPool.New = func() any { return new(op) }
	for _, o := range opts {
		o(t)
	}
	if t.log == nil {
		t.log = kit.Logger("shm")
	}
	t.link.Log = t.log
	return t
}

// PreferredSlice is the slice the host should cut for shm: one copy per
// slice, large enough that the per-descriptor cost vanishes and that
// split_min splits it over the workers.
const PreferredSlice = 64 << 20

// SpinsAlone implements sdk.SpinsAlone: a lane copies small requests
// itself and hands large ones to the copy workers, so its spin for the
// next descriptor keeps its P.
func (t *Transport) SpinsAlone() bool { return true }

// Describe says what the plugin is: CPU memory, same machine only, any
// descriptor length, best with 64 MiB slices; memory the application
// allocated itself on this side only (foreign.go).
func (t *Transport) Describe(context.Context) (sdk.Info, error) {
	return sdk.Info{Name: "shm", Version: Version, Ops: []ring.Op{ring.OpWrite, ring.OpRead},
		PreferredSlice: PreferredSlice, SameMachineOnly: true, MemoryKinds: []sdk.MemoryKind{sdk.MemoryCPU},
		ForeignMemory: true, ForeignLocalOnly: true}, nil
}

// Probe checks the two kernel features the transport stands on: memfds
// that can be sealed and SOCK_SEQPACKET unix sockets.
func (t *Transport) Probe(context.Context) (sdk.ProbeResult, error) {
	fd, err := unix.MemfdCreate("ferry-shm-probe", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return sdk.ProbeResult{Reason: fmt.Sprintf("memfd_create: %v (Linux 3.17 or later needed)", err)}, nil
	}
	unix.Close(fd)
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return sdk.ProbeResult{Reason: fmt.Sprintf("unix SOCK_SEQPACKET socket: %v", err)}, nil
	}
	unix.Close(s)
	return sdk.ProbeResult{Available: true, Rails: []sdk.Rail{{Name: "shm", NUMANode: -1}}}, nil
}

// Start listens for peer plugins on an abstract unix socket (nothing on
// disk, gone with the process) and returns the endpoint: the socket name
// and this machine's id.
func (t *Transport) Start(_ context.Context, cfg sdk.StartConfig) (sdk.Endpoint, error) {
	return t.base.Start(cfg, func() (sdk.Endpoint, error) { return t.start(cfg) })
}

func (t *Transport) start(cfg sdk.StartConfig) (sdk.Endpoint, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	set, err := parseConfig(cfg)
	if err != nil {
		return nil, err
	}
	// The host's id, or a hash of this machine's: never the raw /etc/machine-id.
	machine := kit.MachineID(cfg)
	t.link.Secret = set.Secret
	ln, name, err := t.link.Listen(cfg.Engine, cfg.Incarnation)
	if err != nil {
		return nil, err
	}
	t.set = set
	t.machine = machine
	ep := samehost.Endpoint{V: EndpointVersion, Socket: name, Machine: machine, Served: true}.Encode()
	t.srv.Served = &t.served
	t.pool.start(t, set.workers, set.splitMin, 0)
	if set.bulkNice > 0 {
		t.bulk.start(t, set.workers, set.splitMin, set.bulkNice)
	}
	t.srv.Engine, t.srv.Incarnation = cfg.Engine, cfg.Incarnation
	t.srv.MaxConns, t.srv.RevokeTimeout = set.MaxConns, set.RevokeTimeout
	t.srv.Serve(ln)
	t.log.Info("listening", "engine", cfg.Engine, "socket", name, "machine", machine, "copy_workers", set.workers, "copy_cached_max", memcpy.CachedMax(), "bulk_nice", set.bulkNice, "cluster_secret", set.Secret != nil)
	if set.Secret == nil {
		// The detail of what the engine's one start warning (host/exposure)
		// lists: at info.
		t.log.Info("the shm transport hands every remotely readable buffer to any process of this user that connects to " + name +
			" (abstract socket names are listed in /proc/net/unix); set cluster_secret in the shm plugin's config block of every engine so that only plugins that know it get one")
	}
	return ep, nil
}

// RegisterMemory makes r known. Peers may map it as r.Perm allows, through
// r.FD (a region without an fd is served to nobody).
func (t *Transport) RegisterMemory(_ context.Context, r sdk.Region) error {
	return t.base.RegisterMemory(r, func(r sdk.Region) *region {
		fd := r.FD
		if fd <= 0 {
			// -1 is "none"; 0 is what a Region literal without FD carries,
			// never a memfd the SDK received.
			fd = -1
		}
		g := &region{fd: fd, off: r.FDOffset, gen: t.nextGen.Add(1), ro: -1}
		size, _ := fileStat(fd)
		g.exact = fd >= 0 && r.FDOffset == 0 && size == int64(len(r.Mem))
		g.Init(r)
		return g
	})
}

// fileStat returns fd's size and the bytes allocated to it; -1 when fstat
// fails.
func fileStat(fd int) (size, allocated int64) {
	var st unix.Stat_t
	if fd < 0 || unix.Fstat(fd, &st) != nil {
		return -1, -1
	}
	return st.Size, st.Blocks * 512
}

// UnregisterMemory forgets a region: no peer gets it any more, every peer
// that mapped it is told to unmap it and UnregisterMemory waits for each
// to confirm (at most revoke_timeout, see the package documentation), and
// for this plugin's own copies that use it.
func (t *Transport) UnregisterMemory(_ context.Context, id uint32) error {
	t.mu.Lock()
	r, err := t.base.UnregisterMemory(id)
	if err != nil {
		t.mu.Unlock()
		return err
	}
	rv := t.srv.Holders(id, r.gen)
	t.mu.Unlock()
	t.srv.Revoke(rv)
	t.mu.Lock()
	if r.ro >= 0 {
		unix.Close(r.ro)
		r.ro = -1
		delete(t.readOnly, r)
	}
	t.mu.Unlock()
	// Our own copies on it are memcpys already under way: they end.
	r.Release()
	<-r.Drained()
	return nil
}

// OpenPeer prepares to reach a segment on this machine. It refuses a peer
// on another machine; the socket is dialed when the first descriptor for
// the peer arrives.
func (t *Transport) OpenPeer(_ context.Context, p sdk.Peer) error {
	if err := t.base.CheckPeer(p); err != nil {
		return err
	}
	t.mu.Lock()
	machine := t.machine
	t.mu.Unlock()
	ep, err := t.link.DecodeEndpoint(p.Endpoint)
	if err != nil {
		return t.base.PeerError(p, err)
	}
	if p.MachineID != "" && p.MachineID != machine || ep.Machine != machine {
		on := p.MachineID
		if on == "" {
			on = ep.Machine
		}
		return fmt.Errorf("shm: peer %d (%s) is on machine %q and this engine on %q: shared memory reaches only engines on the same machine", p.ID, p.Segment, on, machine)
	}
	pr := &peer{t: t, id: p.ID, segment: p.Segment, inc: p.Incarnation, socket: ep.Socket, takesReports: ep.Served,
		waiting: map[uint32][]*op{}, wake: make(chan struct{}, 1)}
	pr.ctx, pr.cancel = context.WithCancel(context.Background())
	return t.base.AddPeer(p.ID, pr, func() {
		pr.wg.Add(1)
		go pr.pumpLoop()
	})
}

// ClosePeer forgets a peer: descriptors waiting on it complete with
// StatusShutdown, copies in flight finish, and its regions are unmapped
// before ClosePeer returns.
func (t *Transport) ClosePeer(_ context.Context, id uint32) error {
	return t.base.ClosePeer(id)
}

// Submit checks a descriptor and copies: inline up to inline_max, on the
// worker pool above. A descriptor whose remote region is not mapped yet
// waits (without blocking Submit) for the peer's answer.
func (t *Transport) Submit(d *ring.Descriptor, c sdk.Completer) {
	p, r, mem, ok := t.base.Accept(d, c)
	if !ok {
		return
	}
	p.submit(t.newOp(d, c, r, mem))
}

// newOp returns the op of accepted descriptor d, holding r's reference
// the caller took for it.
func (t *Transport) newOp(d *ring.Descriptor, c sdk.Completer, r *region, mem []byte) *op {
	o := t.opPool.Get().(*op)
	o.token, o.kind, o.c = d.Token, d.Op, c
	o.local, o.lmem, o.n = r, mem, d.Length
	// The local side goes through the host (runForeign) where kit gave no
	// bytes: foreign memory, or a read into a sealed region.
	o.lf, o.lOff = nil, d.LocalOffset
	if mem == nil {
		o.lf = r.Foreign
	}
	o.rRegion, o.rOff, o.deadline = d.RemoteRegion, d.RemoteOffset, d.Deadline
	o.low = d.Prio == uint8(sdk.PriorityLow)
	o.status.Store(0)
	return o
}

// Stats returns the counters, with one chunk counter per copy worker,
// mapped_bytes (peers' memory mapped now) and accepting (1 while new
// peers can connect).
func (t *Transport) Stats(context.Context) (map[string]uint64, error) {
	m := t.stats.snapshot(t.pool.workers)
	t.base.Outcomes.Export(m)
	t.served.Export(m)
	m["mapped_bytes"] = t.mapped.Load()
	m["accepting"] = 0
	if t.base.Started() && !t.base.Stopped() && t.srv.Accepting() {
		m["accepting"] = 1
	}
	return m, nil
}

// Stop closes the socket and every connection, completes every
// outstanding descriptor (StatusShutdown for what has not started),
// unmaps every peer region and waits for every goroutine it started.
func (t *Transport) Stop(ctx context.Context) error {
	err := t.base.Stop(ctx, func() {
		t.srv.Close()
		for _, p := range t.base.Peers.CloseAll() {
			p.Close()
		}
		if t.base.Started() {
			t.pool.close()
			t.bulk.close()
		}
	})
	if err != nil {
		return err
	}
	// Every connection's goroutine has ended: no answer is sending a
	// read-only fd any more, so they can be closed without one being
	// reused under a send.
	t.mu.Lock()
	for r := range t.readOnly {
		unix.Close(r.ro)
		r.ro = -1
	}
	clear(t.readOnly)
	t.mu.Unlock()
	return nil
}
