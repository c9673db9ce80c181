package shmtransport

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/regtable"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Version is the plugin's own version.
const Version = "0.1.0"

// Transport is the shared-memory transport. The zero value is not usable;
// call New.
type Transport struct {
	log hclog.Logger

	// mu guards the control state, the set of served connections and what
	// each may have mapped (srvConn.held, srvConn.acks). Lock order:
	// conn.wmu before mu.
	mu       sync.Mutex
	started  bool
	set      settings
	ln       *net.UnixListener
	servers  map[*srvConn]struct{}
	endpoint sdk.Endpoint

	// Set once at Start, before any goroutine reads them.
	engine      string
	incarnation uint64
	machine     string

	stopped atomic.Bool
	nextGen atomic.Uint64

	regions regtable.Table[*region]

	peerMu sync.Mutex // serialises OpenPeer/ClosePeer
	peers  atomic.Pointer[map[uint32]*peer]

	pool   pool
	wg     sync.WaitGroup // accept loop and served connections
	stats  counters
	opPool sync.Pool
}

var _ sdk.Transport = (*Transport)(nil)

// Option configures New.
type Option func(*Transport)

// WithLogger sets the logger (default: JSON to stderr, which go-plugin
// forwards to the host with the plugin's name).
func WithLogger(l hclog.Logger) Option { return func(t *Transport) { t.log = l } }

// New returns a shared-memory transport ready for Start.
func New(opts ...Option) *Transport {
	t := &Transport{servers: make(map[*srvConn]struct{}), set: defaultSettings()}
	t.opPool.New = func() any { return new(op) }
	for _, o := range opts {
		o(t)
	}
	if t.log == nil {
		t.log = hclog.New(&hclog.LoggerOptions{Name: "shm", Output: os.Stderr, JSONFormat: true, Level: hclog.Info})
	}
	return t
}

// PreferredSlice is the slice the host should cut for shm: one copy per
// slice, large enough that the per-descriptor cost vanishes and that
// split_min splits it over the workers.
const PreferredSlice = 64 << 20

// Describe says what the plugin is: CPU memory, same machine only, any
// descriptor length, best with 64 MiB slices.
func (t *Transport) Describe(context.Context) (sdk.Info, error) {
	return sdk.Info{Name: "shm", Version: Version, Ops: []ring.Op{ring.OpWrite, ring.OpRead},
		PreferredSlice: PreferredSlice, SameMachineOnly: true, MemoryKinds: []string{"cpu"}}, nil
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
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped.Load() {
		return nil, errors.New("shm: start after stop")
	}
	if t.started {
		return nil, errors.New("shm: already started")
	}
	if cfg.Engine == "" {
		return nil, errors.New("shm: start: empty engine name")
	}
	if len(cfg.Engine) > MaxNameLen {
		return nil, fmt.Errorf("shm: start: engine name longer than %d bytes", MaxNameLen)
	}
	set, err := parseConfig(cfg)
	if err != nil {
		return nil, err
	}
	machine := cfg.MachineID
	if machine == "" {
		machine = localMachineID()
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	sum := sha256.Sum256([]byte(cfg.Engine))
	name := fmt.Sprintf("@ferry-shm/%x/%x/%s", sum[:8], cfg.Incarnation, hex.EncodeToString(rnd[:]))
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: name, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("shm: listen on abstract socket %s: %w", name, err)
	}
	t.set = set
	t.engine, t.incarnation, t.machine = cfg.Engine, cfg.Incarnation, machine
	t.ln = ln
	t.endpoint = encodeEndpoint(endpoint{V: EndpointVersion, Socket: name, Machine: machine})
	t.pool.start(t, set.workers, set.splitMin)
	t.started = true
	t.wg.Add(1)
	go t.acceptLoop(ln)
	t.log.Info("listening", "engine", cfg.Engine, "socket", name, "machine", machine, "copy_workers", set.workers)
	return append(sdk.Endpoint(nil), t.endpoint...), nil
}

// localMachineID is the machine id when the host gave none.
func localMachineID() string {
	for _, p := range []string{"/etc/machine-id", "/proc/sys/kernel/random/boot_id"} {
		if b, err := os.ReadFile(p); err == nil {
			if s := strings.TrimSpace(string(b)); s != "" {
				return s
			}
		}
	}
	return ""
}

// RegisterMemory makes r known. Peers may map it as r.Perm allows, through
// r.FD (a region without an fd is served to nobody).
func (t *Transport) RegisterMemory(_ context.Context, r sdk.Region) error {
	if t.stopped.Load() {
		return errors.New("shm: register after stop")
	}
	switch r.Perm {
	case sdk.PermLocal, sdk.PermRemoteRead, sdk.PermRemoteReadWrite:
	default:
		return fmt.Errorf("shm: region %d: unknown permission %d", r.ID, r.Perm)
	}
	if r.Kind != "" && r.Kind != "cpu" {
		return fmt.Errorf("shm: region %d: memory kind %q is not supported (cpu only)", r.ID, r.Kind)
	}
	if len(r.Mem) == 0 {
		return fmt.Errorf("shm: region %d: empty", r.ID)
	}
	fd := r.FD
	if fd <= 0 {
		// -1 is "none"; 0 is what a Region literal without FD carries,
		// never a memfd the SDK received.
		fd = -1
	}
	g := &region{id: r.ID, mem: r.Mem, perm: r.Perm, fd: fd, off: r.FDOffset, gen: t.nextGen.Add(1)}
	g.Init()
	if !t.regions.Add(g.id, g) {
		return fmt.Errorf("shm: region %d already registered", r.ID)
	}
	return nil
}

// UnregisterMemory forgets a region: no peer gets it any more, every peer
// that mapped it is told to unmap it and UnregisterMemory waits for each
// to confirm (at most revoke_timeout, see the package documentation), and
// for this plugin's own copies that use it.
func (t *Transport) UnregisterMemory(_ context.Context, id uint32) error {
	t.mu.Lock()
	r := t.regions.Remove(id)
	if r == nil {
		t.mu.Unlock()
		return fmt.Errorf("shm: region %d not registered", id)
	}
	var holders []*srvConn
	var acks []chan struct{}
	for sc := range t.servers {
		if g, ok := sc.held[id]; ok && g == r.gen {
			delete(sc.held, id)
			ch := make(chan struct{})
			sc.acks[r.gen] = ch
			holders = append(holders, sc)
			acks = append(acks, ch)
		}
	}
	t.mu.Unlock()
	t.revoke(r, holders, acks)
	// Our own copies on it are memcpys already under way: they end.
	r.Release()
	<-r.Drained()
	return nil
}

// OpenPeer prepares to reach a segment on this machine. It refuses a peer
// on another machine; the socket is dialed when the first descriptor for
// the peer arrives.
func (t *Transport) OpenPeer(_ context.Context, p sdk.Peer) error {
	t.mu.Lock()
	started, machine := t.started, t.machine
	t.mu.Unlock()
	if !started || t.stopped.Load() {
		return errors.New("shm: open peer: transport not running")
	}
	if len(p.Segment) > MaxNameLen {
		return fmt.Errorf("shm: peer %d: segment name longer than %d bytes", p.ID, MaxNameLen)
	}
	ep, err := decodeEndpoint(p.Endpoint)
	if err != nil {
		return fmt.Errorf("shm: peer %d (%s): %w", p.ID, p.Segment, err)
	}
	if p.MachineID != "" && p.MachineID != machine || ep.Machine != machine {
		on := p.MachineID
		if on == "" {
			on = ep.Machine
		}
		return fmt.Errorf("shm: peer %d (%s) is on machine %q and this engine on %q: shared memory reaches only engines on the same machine", p.ID, p.Segment, on, machine)
	}
	pr := &peer{t: t, id: p.ID, segment: p.Segment, inc: p.Incarnation, socket: ep.Socket,
		waiting: map[uint32][]*op{}, wake: make(chan struct{}, 1)}
	pr.ctx, pr.cancel = context.WithCancel(context.Background())
	t.peerMu.Lock()
	defer t.peerMu.Unlock()
	old := t.peers.Load()
	if old != nil {
		if _, ok := (*old)[p.ID]; ok {
			pr.cancel()
			return fmt.Errorf("shm: peer %d already open", p.ID)
		}
	}
	n := make(map[uint32]*peer, 1+mapLen(old))
	if old != nil {
		for k, v := range *old {
			n[k] = v
		}
	}
	n[p.ID] = pr
	if t.stopped.Load() {
		pr.cancel()
		return errors.New("shm: open peer: transport stopped")
	}
	pr.wg.Add(1)
	go pr.pumpLoop()
	t.peers.Store(&n)
	return nil
}

// ClosePeer forgets a peer: descriptors waiting on it complete with
// StatusShutdown, copies in flight finish, and its regions are unmapped
// before ClosePeer returns.
func (t *Transport) ClosePeer(_ context.Context, id uint32) error {
	t.peerMu.Lock()
	old := t.peers.Load()
	var pr *peer
	if old != nil {
		pr = (*old)[id]
	}
	if pr == nil {
		t.peerMu.Unlock()
		return fmt.Errorf("shm: peer %d not open", id)
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

// Submit checks a descriptor and copies: inline up to inline_max, on the
// worker pool above. A descriptor whose remote region is not mapped yet
// waits (without blocking Submit) for the peer's answer.
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
	o.token, o.kind, o.c = d.Token, d.Op, c
	o.local, o.lmem = r, r.mem[d.LocalOffset:end:end]
	o.rRegion, o.rOff, o.deadline = d.RemoteRegion, d.RemoteOffset, d.Deadline
	o.status.Store(0)
	p.submit(o)
}

// Stats returns the counters, with one chunk counter per copy worker.
func (t *Transport) Stats(context.Context) (map[string]uint64, error) {
	return t.stats.snapshot(t.pool.workers), nil
}

// Stop closes the socket and every connection, completes every
// outstanding descriptor (StatusShutdown for what has not started),
// unmaps every peer region and waits for every goroutine it started.
func (t *Transport) Stop(ctx context.Context) error {
	t.mu.Lock()
	if t.stopped.Swap(true) {
		t.mu.Unlock()
		return t.waitStopped(ctx)
	}
	ln := t.ln
	for sc := range t.servers {
		sc.c.Close()
	}
	started := t.started
	t.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	t.peerMu.Lock()
	var peers []*peer
	if m := t.peers.Load(); m != nil {
		for _, p := range *m {
			peers = append(peers, p)
		}
	}
	t.peers.Store(nil)
	t.peerMu.Unlock()
	for _, p := range peers {
		p.close()
	}
	if started {
		t.pool.close()
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
		return fmt.Errorf("shm: stop: %w", ctx.Err())
	}
}

func mapLen[K comparable, V any](m *map[K]V) int {
	if m == nil {
		return 0
	}
	return len(*m)
}
