package nvlink

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit"
	"github.com/ferrydev/ferry/sdk/kit/samehost"
	"github.com/ferrydev/ferry/sdk/regtable"
	"github.com/ferrydev/ferry/sdk/ring"
	sdkshm "github.com/ferrydev/ferry/sdk/shm"
)

// Version is the plugin's own version.
const Version = "0.1.0"

// Slices: a peer copy of 64 MiB runs at device bandwidth (1.9 TB/s D2D on
// an H200, research/gpu.md) and is sliced across the streams; MaxSlice
// bounds what one descriptor may ask.
const (
	PreferredSlice = 64 << 20
	MaxSlice       = 1 << 30
)

// region is this engine's registered memory: host memory the SDK mapped
// (host, fd) or device memory the host registered as a handle (h, dev).
type region struct {
	regtable.Ref
	id   uint32
	perm sdk.Perm
	kind sdk.MemoryKind
	n    uint64
	gen  uint64 // registration generation, unique within this plugin

	host  *hostMem // host memory; nil for a device region
	fd    int      // the SDK's memfd; -1 when none
	exact bool     // fd holds exactly the region: only then is it shared
	ro    int      // fd reopened O_RDONLY for remote-read peers; -1 until asked. Under Transport.mu.

	h   sdk.Handle // device region: the handle, exactly the region
	dev devMem     // device region: its import in this process
}

func (r *region) Bytes() []byte {
	if r.host != nil {
		return r.host.b
	}
	return nil
}

func (r *region) memory() memory {
	if r.host != nil {
		return r.host
	}
	return r.dev
}

// Transport is the nvlink transport. Use New.
type Transport struct {
	log  hclog.Logger
	base kit.Base[*region, *peer]

	// mu guards the control state, and is the exchange server's lock
	// (samehost.Server.Mu). Lock order: a connection's write lock before mu.
	mu       sync.Mutex
	set      settings
	link     samehost.Link   // the region exchange: socket, hello, cluster secret
	srv      samehost.Server // serves peers on link
	readOnly map[*region]struct{}
	regs     map[uint32]struct{} // registered region ids, for Stop
	machine  string
	nextGen  atomic.Uint64

	sim      simBackend
	cudaOnce sync.Once
	cuda     *cudaBackend
	cudaErr  error

	streams streamPool
	stats   counters
}

var (
	_ sdk.Transport      = (*Transport)(nil)
	_ sdk.DeviceImporter = (*Transport)(nil)
	_ sdk.ConfigChecker  = (*Transport)(nil)
)

// Option configures New.
type Option func(*Transport)

// WithLogger sets the logger (default: JSON on stderr, forwarded by the
// host).
func WithLogger(l hclog.Logger) Option { return func(t *Transport) { t.log = l } }

// New returns a transport ready for Start.
func New(opts ...Option) *Transport {
	t := &Transport{
		base:     kit.Base[*region, *peer]{Name: "nvlink", MaxNameLen: MaxNameLen, MemoryKinds: []sdk.MemoryKind{sdk.MemoryCUDA, sdk.MemoryCPU}},
		readOnly: map[*region]struct{}{},
		regs:     map[uint32]struct{}{},
		set:      defaultSettings(),
	}
	t.link = samehost.Link{Name: "nvlink", Label: "ferry-nvlink/1", Codec: codec{}, Stats: &t.stats.Counters}
	t.srv = samehost.Server{Link: &t.link, Mu: &t.mu, Answer: t.answer}
	for _, o := range opts {
		o(t)
	}
	if t.log == nil {
		t.log = kit.Logger("nvlink")
	}
	t.link.Log = t.log
	return t
}

// Describe: device and host memory, same machine only, writes and reads.
func (t *Transport) Describe(context.Context) (sdk.Info, error) {
	return sdk.Info{Name: "nvlink", Version: Version, Ops: []ring.Op{ring.OpWrite, ring.OpRead},
		PreferredSlice: PreferredSlice, MaxSlice: MaxSlice, SameMachineOnly: true,
		MemoryKinds: []sdk.MemoryKind{sdk.MemoryCUDA, sdk.MemoryCPU}}, nil
}

// Probe: available when libcuda loads (real GPUs), or when the simulated
// backend can work (memfds, pidfds, SOCK_SEQPACKET): the host then moves
// simulated device memory only. The rail says which.
func (t *Transport) Probe(context.Context) (sdk.ProbeResult, error) {
	if b, err := t.cudaBackend(); err == nil {
		return sdk.ProbeResult{Available: true, Rails: []sdk.Rail{{Name: fmt.Sprintf("cuda (driver %d, %d devices)", b.drv.Version, b.drv.Devices), NUMANode: -1}}}, nil
	}
	_, cerr := t.cudaBackend()
	if err := simUsable(); err != nil {
		return sdk.ProbeResult{Reason: fmt.Sprintf("no CUDA (%v) and the simulated backend cannot work: %v", cerr, err)}, nil
	}
	return sdk.ProbeResult{Available: true, Rails: []sdk.Rail{{Name: "sim (simulated devices only; no CUDA: " + cerr.Error() + ")", NUMANode: -1}}}, nil
}

// simUsable checks what the simulated backend stands on.
func simUsable() error {
	fd, err := unix.MemfdCreate("ferry-nvlink-probe", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("memfd_create: %w", err)
	}
	unix.Close(fd)
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("unix SOCK_SEQPACKET socket: %w", err)
	}
	unix.Close(s)
	return nil
}

func (t *Transport) cudaBackend() (*cudaBackend, error) {
	t.cudaOnce.Do(func() { t.cuda, t.cudaErr = newCUDABackend() })
	return t.cuda, t.cudaErr
}

// backendFor is the backend that imports handles of type ht.
func (t *Transport) backendFor(ht sdk.HandleType) (backend, error) {
	switch ht {
	case sdk.HandleSim:
		return t.sim, nil
	case sdk.HandleCUDAFD, sdk.HandleCUDAIPC:
		b, err := t.cudaBackend()
		if err != nil {
			return nil, fmt.Errorf("a %s handle needs CUDA: %w", ht, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("nvlink imports %s, %s and %s handles, not %q", sdk.HandleCUDAFD, sdk.HandleCUDAIPC, sdk.HandleSim, ht)
}

// backendOf is the backend that copies between a and b: the one whose
// device memory either is; the simulated one (a memcpy) for host to
// host; nil for device memory of two backends.
func (t *Transport) backendOf(a, b memory) backend {
	var be backend
	for _, m := range [2]memory{a, b} {
		var mine backend
		switch m.(type) {
		case simMem:
			mine = t.sim
		case *cudaMem:
			mine = t.cuda
		default:
			continue
		}
		if be != nil && be != mine {
			return nil
		}
		be = mine
	}
	if be == nil {
		return t.sim
	}
	return be
}

// Start listens for peer plugins on an abstract unix socket and starts
// the copy streams.
func (t *Transport) Start(_ context.Context, cfg sdk.StartConfig) (sdk.Endpoint, error) {
	return t.base.Start(cfg, func() (sdk.Endpoint, error) {
		t.mu.Lock()
		defer t.mu.Unlock()
		set, err := parseConfig(cfg)
		if err != nil {
			return nil, err
		}
		machine := kit.MachineID(cfg)
		t.link.Secret = set.Secret
		ln, name, err := t.link.Listen(cfg.Engine, cfg.Incarnation)
		if err != nil {
			return nil, err
		}
		t.set, t.machine = set, machine
		t.streams.start(t, set.streams)
		t.srv.Engine, t.srv.Incarnation = cfg.Engine, cfg.Incarnation
		t.srv.MaxConns, t.srv.RevokeTimeout = set.MaxConns, set.RevokeTimeout
		t.srv.Serve(ln)
		t.log.Info("listening", "engine", cfg.Engine, "socket", name, "streams", set.streams, "cluster_secret", set.Secret != nil)
		return samehost.Endpoint{V: EndpointVersion, Socket: name, Machine: machine}.Encode(), nil
	})
}

// RegisterMemory makes host memory known; peers get it through its memfd
// as r.Perm allows, and the cuda backend registers it for DMA on first
// use.
func (t *Transport) RegisterMemory(_ context.Context, r sdk.Region) error {
	if r.Kind.OrCPU() != sdk.MemoryCPU {
		return fmt.Errorf("nvlink: region %d: %s memory is registered with RegisterDevice (a handle), not as host memory", r.ID, r.Kind)
	}
	err := t.base.RegisterMemory(r, func(r sdk.Region) *region {
		fd := r.FD
		if fd <= 0 {
			fd = -1
		}
		g := &region{id: r.ID, perm: r.Perm, kind: sdk.MemoryCPU, n: uint64(len(r.Mem)), gen: t.nextGen.Add(1),
			host: &hostMem{b: r.Mem}, fd: fd, ro: -1}
		var st unix.Stat_t
		g.exact = fd >= 0 && r.FDOffset == 0 && unix.Fstat(fd, &st) == nil && st.Size == int64(len(r.Mem))
		g.Init()
		return g
	})
	if err == nil {
		t.mu.Lock()
		t.regs[r.ID] = struct{}{}
		t.mu.Unlock()
	}
	return err
}

// regionIDs lists the registered regions.
func (t *Transport) regionIDs() []uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := make([]uint32, 0, len(t.regs))
	for id := range t.regs {
		ids = append(ids, id)
	}
	return ids
}

// RegisterDevice imports h with its backend, now: a handle that does not
// open is refused here (sdk.ErrStaleHandle), not at the first copy.
func (t *Transport) RegisterDevice(_ context.Context, id uint32, perm sdk.Perm, kind sdk.MemoryKind, h sdk.Handle) error {
	if t.base.Stopped() {
		return errors.New("nvlink: register after stop")
	}
	switch perm {
	case sdk.PermLocal, sdk.PermRemoteRead, sdk.PermRemoteReadWrite:
	default:
		return fmt.Errorf("nvlink: region %d: unknown permission %d", id, perm)
	}
	if kind != sdk.MemoryCUDA {
		return fmt.Errorf("nvlink: region %d: device memory of kind %q; nvlink moves %s", id, kind, sdk.MemoryCUDA)
	}
	if err := h.Check(); err != nil {
		return fmt.Errorf("nvlink: region %d: %w", id, err)
	}
	if h.Length > MaxSlice*1024 {
		return fmt.Errorf("nvlink: region %d: %d bytes is more than nvlink addresses", id, h.Length)
	}
	be, err := t.backendFor(h.Type)
	if err != nil {
		return fmt.Errorf("nvlink: region %d: %w", id, err)
	}
	dev, err := be.importHandle(h)
	if err != nil {
		return fmt.Errorf("nvlink: region %d: import %s handle: %w", id, h.Type, err)
	}
	t.stats.imports.Add(1)
	g := &region{id: id, perm: perm, kind: kind, n: h.Length, gen: t.nextGen.Add(1), fd: -1, ro: -1, dev: dev,
		h: sdk.Handle{Type: h.Type, Device: h.Device, Data: append([]byte(nil), h.Data...), Size: h.Size, Offset: h.Offset, Length: h.Length}}
	g.Init()
	if !t.base.Regions.Add(id, g) {
		_ = dev.release()
		return fmt.Errorf("nvlink: region %d already registered", id)
	}
	t.mu.Lock()
	t.regs[id] = struct{}{}
	t.mu.Unlock()
	return nil
}

// UnregisterMemory forgets a region: every peer that was handed it is
// told to drop it and UnregisterMemory waits for each (revoke_timeout at
// most), and for this plugin's copies on it; then its import is released.
func (t *Transport) UnregisterMemory(_ context.Context, id uint32) error {
	t.mu.Lock()
	r, err := t.base.UnregisterMemory(id)
	if err != nil {
		t.mu.Unlock()
		return err
	}
	delete(t.regs, id)
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
	r.Release()
	<-r.Drained()
	t.dropRegion(r)
	return nil
}

// dropRegion releases what a region holds once nothing uses it.
func (t *Transport) dropRegion(r *region) {
	if r.host != nil {
		r.host.drop()
	}
	if r.dev != nil {
		if err := r.dev.release(); err != nil {
			t.log.Warn("releasing a device region's import failed", "region", r.id, "error", err)
		}
	}
}

// OpenPeer prepares to reach a segment on this machine; the socket is
// dialed by the first descriptor.
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
		return fmt.Errorf("nvlink: peer %d (%s) is on machine %q and this engine on %q: nvlink reaches only engines on the same machine", p.ID, p.Segment, ep.Machine, machine)
	}
	pr := &peer{t: t, id: p.ID, segment: p.Segment, inc: p.Incarnation, socket: ep.Socket,
		waiting: map[uint32][]*op{}, wake: make(chan struct{}, 1)}
	pr.ctx, pr.cancel = context.WithCancel(context.Background())
	return t.base.AddPeer(p.ID, pr, func() {
		pr.wg.Add(1)
		go pr.pumpLoop()
	})
}

// ClosePeer forgets a peer: what waits on it completes with
// StatusShutdown, copies in flight finish, its imports are released.
func (t *Transport) ClosePeer(_ context.Context, id uint32) error { return t.base.ClosePeer(id) }

// op is one accepted descriptor.
type op struct {
	token    uint64
	kind     ring.Op
	c        sdk.Completer
	local    *region
	lOff     uint64
	n        uint64
	rRegion  uint32
	rOff     uint64
	deadline int64
	remote   *remote

	pending atomic.Int32
	status  atomic.Int32
}

// Submit checks the local side and hands the descriptor to its peer,
// which runs it once the remote region is imported. It never blocks.
func (t *Transport) Submit(d *ring.Descriptor, c sdk.Completer) {
	p, ok := t.base.Admit(d, c)
	if !ok {
		return
	}
	if d.Length > MaxSlice {
		t.base.Fail(d, c, ring.StatusInvalid)
		return
	}
	r := t.base.Regions.Acquire(d.LocalRegion)
	if r == nil {
		t.base.Fail(d, c, ring.StatusNotRegistered)
		return
	}
	end := d.LocalOffset + d.Length
	if end < d.LocalOffset || end > r.n || d.RemoteOffset+d.Length < d.RemoteOffset {
		r.Release()
		t.base.Fail(d, c, ring.StatusOutOfBounds)
		return
	}
	o := &op{token: d.Token, kind: d.Op, c: c, local: r, lOff: d.LocalOffset, n: d.Length,
		rRegion: d.RemoteRegion, rOff: d.RemoteOffset, deadline: d.Deadline}
	p.submit(o)
}

// run checks o's remote side against rm (a reference held, now o's) and
// hands the copy to the streams. Every check happens before a byte moves.
func (t *Transport) run(o *op, rm *remote) {
	o.remote = rm
	end := o.rOff + o.n
	if end < o.rOff || end > rm.n {
		t.finish(o, ring.StatusOutOfBounds)
		return
	}
	if o.kind == ring.OpWrite && !rm.perm.AllowsRemoteWrite() || o.kind == ring.OpRead && !rm.perm.AllowsRemoteRead() {
		t.finish(o, ring.StatusPermission)
		return
	}
	if o.deadline != 0 && sdk.Now(o.c) >= o.deadline {
		t.finish(o, ring.StatusTimeout)
		return
	}
	lm, rmem := o.local.memory(), rm.mem
	be := t.backendOf(lm, rmem)
	if be == nil {
		t.stats.unsupported.Add(1)
		t.finish(o, ring.StatusUnsupported)
		return
	}
	c := chunk{o: o, be: be, dst: rmem, doff: o.rOff, src: lm, soff: o.lOff}
	if o.kind == ring.OpRead {
		c.dst, c.doff, c.src, c.soff = lm, o.lOff, rmem, o.rOff
	}
	t.streams.dispatch(t, c)
}

// finish releases what o holds and reports its outcome, exactly once.
func (t *Transport) finish(o *op, st ring.Status) {
	if o.remote != nil {
		o.remote.Release()
	}
	if o.local != nil {
		o.local.Release()
	}
	t.base.Outcomes.Count(st)
	n := o.n
	if st == ring.StatusOK {
		if o.kind == ring.OpWrite {
			t.stats.bytesWritten.Add(n)
		} else {
			t.stats.bytesRead.Add(n)
		}
	} else {
		n = 0
	}
	o.c.Complete(o.token, st, n)
}

// chunk is a piece of a copy that one stream runs.
type chunk struct {
	o          *op
	be         backend
	dst, src   memory
	doff, soff uint64
	n          uint64
}

// streamPool is the copy streams: one goroutine each, locked to its OS
// thread (the CUDA context is current per thread), with its own queue so
// that the slices of one copy land on different streams.
type streamPool struct {
	mu     sync.RWMutex
	closed bool
	qs     []chan chunk
	rr     atomic.Uint32
	wg     sync.WaitGroup
	chunks []atomic.Uint64
}

const streamQueue = 256

func (p *streamPool) start(t *Transport, n int) {
	p.qs = make([]chan chunk, n)
	p.chunks = make([]atomic.Uint64, n)
	for i := range p.qs {
		p.qs[i] = make(chan chunk, streamQueue)
		p.wg.Add(1)
		go p.work(t, i)
	}
}

// dispatch slices c's copy (from split_min, pieces of at least minChunk)
// over consecutive streams.
func (p *streamPool) dispatch(t *Transport, c chunk) {
	n := c.o.n
	k := uint64(1)
	if n >= t.set.splitMin {
		k = max(min(uint64(len(p.qs)), n/minChunk), 1)
	}
	per := (n + k - 1) / k
	per = (per + 4095) &^ 4095
	k = (n + per - 1) / per
	c.o.pending.Store(int32(k))
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		t.finish(c.o, ring.StatusShutdown)
		return
	}
	if k > 1 {
		t.stats.copiesSliced.Add(1)
	}
	first := p.rr.Add(uint32(k)) - uint32(k)
	for i := range k {
		lo, hi := i*per, min((i+1)*per, n)
		piece := c
		piece.doff, piece.soff, piece.n = c.doff+lo, c.soff+lo, hi-lo
		p.qs[(first+uint32(i))%uint32(len(p.qs))] <- piece
	}
}

func (p *streamPool) work(t *Transport, i int) {
	defer p.wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for c := range p.qs[i] {
		o := c.o
		switch {
		case t.base.Stopped():
			o.status.CompareAndSwap(0, int32(ring.StatusShutdown))
		case o.remote.revoked.Load() != 0:
			o.status.CompareAndSwap(0, o.remote.revoked.Load())
		default:
			if err := c.be.copy(i, c.dst, c.doff, c.src, c.soff, c.n); err != nil {
				t.stats.copyErrors.Add(1)
				t.log.Warn("copy failed", "backend", c.be.name(), "token", o.token, "bytes", c.n, "error", err)
				o.status.CompareAndSwap(0, int32(ring.StatusIO))
			}
			p.chunks[i].Add(1)
		}
		if o.pending.Add(-1) == 0 {
			t.finish(o, ring.Status(o.status.Load()))
		}
	}
}

func (p *streamPool) close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		for _, q := range p.qs {
			close(q)
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Stats returns the counters.
func (t *Transport) Stats(context.Context) (map[string]uint64, error) {
	m := t.stats.snapshot()
	t.base.Outcomes.Export(m)
	for i := range t.streams.chunks {
		m[fmt.Sprintf("stream%d_chunks", i)] = t.streams.chunks[i].Load()
	}
	return m, nil
}

// Stop closes the socket and every connection, completes what is
// outstanding, releases every import and waits for its goroutines.
func (t *Transport) Stop(ctx context.Context) error {
	err := t.base.Stop(ctx, func() {
		t.srv.Close()
		for _, p := range t.base.Peers.CloseAll() {
			p.Close()
		}
		if t.base.Started() {
			t.streams.close()
		}
	})
	if err != nil {
		return err
	}
	t.mu.Lock()
	for r := range t.readOnly {
		unix.Close(r.ro)
		r.ro = -1
	}
	clear(t.readOnly)
	t.mu.Unlock()
	for _, id := range t.regionIDs() {
		if r := t.base.Regions.Remove(id); r != nil {
			r.Release()
			<-r.Drained()
			t.dropRegion(r)
		}
	}
	if t.cuda != nil {
		t.cuda.close()
	}
	return nil
}

// mapOffer maps a peer's memfd of length bytes, exactly the region.
func mapOffer(fd int, length uint64, writable bool) (*sdkshm.Mapping, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Size != int64(length) {
		return nil, fmt.Errorf("the file is %d bytes, the region %d", st.Size, length)
	}
	return sdkshm.Map(fd, 0, int(length), writable)
}
