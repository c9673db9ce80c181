package device

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// FirstRegion is the first region id of device memory; host memory's
// ids (host/localmem) count up from 1 and never reach it.
const FirstRegion uint32 = 1 << 31

// Errors of device memory. Each is wrapped with what failed and where.
var (
	// ErrUnavailable: no device plugin serves the kind, or the one that
	// does cannot run here (no driver, no device).
	ErrUnavailable = errors.New("device unavailable")
	// ErrInvalid: a registration or copy that cannot be (a range that is
	// not device memory, the wrong device, a stale handle).
	ErrInvalid = errors.New("invalid device memory")
	// ErrNotRegistered: the range is not inside registered device memory.
	ErrNotRegistered = errors.New("device memory not registered")
	// ErrCopy: a device copy failed.
	ErrCopy = errors.New("device copy failed")
)

// CopyResult is one copy's outcome as the plugin reported it.
type CopyResult struct {
	Status ring.Status
	Bytes  uint64
}

// Client is a running device plugin as this package uses it
// (internal/pluginclient's DeviceClient).
type Client interface {
	Devices(ctx context.Context) ([]sdk.DeviceAttr, error)
	Identify(ctx context.Context, pid int, addr, length uint64) (sdk.Identity, error)
	Allocate(ctx context.Context, dev int, size uint64) (sdk.Allocation, error)
	Free(ctx context.Context, addr uint64) error
	Import(ctx context.Context, region uint32, h sdk.Handle) error
	Unimport(ctx context.Context, region uint32) error
	RegisterHost(ctx context.Context, region uint32, fd int, offset, length uint64) error
	UnregisterHost(ctx context.Context, region uint32) error
	Copy(ctx context.Context, copies []sdk.DeviceCopy) ([]CopyResult, error)
}

// Proc is one run of a device plugin: its client, what it said of
// itself, and its process.
type Proc struct {
	Client  Client
	Info    sdk.DeviceInfo
	Probe   sdk.ProbeResult
	Devices []sdk.DeviceAttr
	Pid     int
	Exited  <-chan struct{}
	Kill    func()
}

// Launcher starts the device plugin named name, Probes it and, when it
// is available, Starts it and lists its devices. An unavailable plugin
// comes back with Probe.Available false and no process.
type Launcher func(ctx context.Context, name string) (*Proc, error)

// Region is registered device memory.
type Region struct {
	ID     uint32
	Base   uint64 // the application's address of the range
	Length uint64
	Kind   sdk.MemoryKind
	Device int
	Plugin string // the device plugin that imported it
	Handle sdk.Handle
	Perm   sdk.Perm
	// Lost says why the region's memory is gone, "" while it is not: its
	// handle no longer opened when the plugin was started again (the
	// memory was the dead plugin's own allocation). Requests on it fail
	// with this reason until it is unregistered.
	Lost string
}

// Name is how errors and explanations name the region's device:
// "cuda:0, device plugin simdev".
func (r Region) Name() string {
	return fmt.Sprintf("%s:%d, device plugin %s", r.Kind, r.Device, r.Plugin)
}

// hostReg is host memory registered with a plugin, to give again to a
// new run of it.
type hostReg struct {
	plugin     string
	region     uint32
	fd         int
	off, lenth uint64
}

// plugin is one configured device plugin and its current run.
type plugin struct {
	name string
	// Guarded by Set.mu:
	proc     *Proc
	starting chan struct{} // closed when a start in progress ends
	// unavailable is why the plugin cannot run here (its Probe); it is
	// not started again.
	unavailable string
	runs        int
}

// Set is an engine's device plugins and device memory.
type Set struct {
	launch  Launcher
	timeout time.Duration // bounds one control call to a plugin

	mu      sync.Mutex
	plugins []*plugin // in configuration order: the first that serves a kind is asked first
	regions []Region  // sorted by Base; snap is a copy for readers without the lock
	snap    atomic.Pointer[[]Region]
	hosts   []hostReg
	next    uint32
	closed  bool
}

// New returns a set of the device plugins named (in configuration order),
// none started; launch starts one. timeout bounds each control call.
func New(names []string, launch Launcher, timeout time.Duration) *Set {
	s := &Set{launch: launch, timeout: timeout, next: FirstRegion}
	for _, n := range names {
		s.plugins = append(s.plugins, &plugin{name: n})
	}
	return s
}

// Configured reports whether any device plugin is configured.
func (s *Set) Configured() bool { return len(s.plugins) > 0 }

// get returns p's running process, starting it (and giving it what its
// last run held) when it is not running. No lock is held while it starts.
func (s *Set) get(ctx context.Context, p *plugin) (*Proc, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: the engine is closed", ErrUnavailable)
		}
		if p.unavailable != "" {
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: device plugin %q: %s", ErrUnavailable, p.name, p.unavailable)
		}
		if pr := p.proc; pr != nil {
			select {
			case <-pr.Exited:
				// Died: its client is let go of (outside the lock), and
				// it is started again below.
				p.proc = nil
				s.mu.Unlock()
				pr.Kill()
				continue
			default:
				s.mu.Unlock()
				return pr, nil
			}
		}
		if ch := p.starting; ch != nil {
			s.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("%w: device plugin %q is starting: %w", ErrUnavailable, p.name, ctx.Err())
			}
		}
		ch := make(chan struct{})
		p.starting = ch
		hosts := s.hostsOf(p.name)
		regions := s.regionsOf(p.name)
		s.mu.Unlock()

		pr, err := s.start(ctx, p, hosts, regions)

		s.mu.Lock()
		p.starting = nil
		close(ch)
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		if !pr.Probe.Available {
			p.unavailable = "unavailable: " + pr.Probe.Reason
			s.mu.Unlock()
			continue
		}
		p.proc = pr
		p.runs++
		closed := s.closed
		s.mu.Unlock()
		if closed {
			pr.Kill()
			return nil, fmt.Errorf("%w: the engine is closed", ErrUnavailable)
		}
		return pr, nil
	}
}

// start launches p and gives the new run the host memory and device
// ranges its last run held.
func (s *Set) start(ctx context.Context, p *plugin, hosts []hostReg, regions []Region) (*Proc, error) {
	pr, err := s.launch(ctx, p.name)
	if err != nil {
		return nil, fmt.Errorf("%w: device plugin %q did not start: %w", ErrUnavailable, p.name, err)
	}
	if !pr.Probe.Available {
		return pr, nil
	}
	for _, h := range hosts {
		if err := s.call(ctx, func(ctx context.Context) error { return pr.Client.RegisterHost(ctx, h.region, h.fd, h.off, h.lenth) }); err != nil {
			pr.Kill()
			return nil, fmt.Errorf("%w: device plugin %q (restarted): register host region %d again: %w", ErrUnavailable, p.name, h.region, err)
		}
	}
	var lost []Region
	for _, r := range regions {
		if r.Lost != "" {
			continue
		}
		err := s.call(ctx, func(ctx context.Context) error { return pr.Client.Import(ctx, r.ID, r.Handle) })
		if errors.Is(err, sdk.ErrStaleHandle) {
			r.Lost = fmt.Sprintf("its memory is gone: device plugin %s exited and the handle no longer opens (%v); unregister it and register new memory", p.name, err)
			lost = append(lost, r)
			continue
		}
		if err != nil {
			pr.Kill()
			return nil, fmt.Errorf("%w: device plugin %q (restarted): import %s region %d again: %w", ErrUnavailable, p.name, r.Name(), r.ID, err)
		}
	}
	if len(lost) > 0 {
		s.mu.Lock()
		for _, l := range lost {
			for i := range s.regions {
				if s.regions[i].ID == l.ID {
					s.regions[i].Lost = l.Lost
				}
			}
		}
		s.publish()
		s.mu.Unlock()
	}
	return pr, nil
}

// call runs f under the control timeout.
func (s *Set) call(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return f(ctx)
}

func (s *Set) hostsOf(name string) []hostReg {
	return ofPlugin(s.hosts, func(h hostReg) bool { return h.plugin == name })
}

func (s *Set) regionsOf(name string) []Region {
	return ofPlugin(s.regions, func(r Region) bool { return r.Plugin == name })
}

// ofPlugin returns the elements of all that keep says are a plugin's.
func ofPlugin[T any](all []T, keep func(T) bool) []T {
	var out []T
	for _, v := range all {
		if keep(v) {
			out = append(out, v)
		}
	}
	return out
}

// Ref names device memory as a caller writes it: "cuda", "cuda:1",
// "rocm:0". Device -1 is "any device".
type Ref struct {
	Kind   sdk.MemoryKind
	Device int
}

// ParseRef reads "cuda", "cuda:1"; "" is no kind (the plugins are asked).
func ParseRef(s string) (Ref, error) {
	if s == "" {
		return Ref{Device: -1}, nil
	}
	k, d, hasDev := strings.Cut(s, ":")
	kind, err := sdk.ParseMemoryKind(k)
	if err != nil || kind == sdk.MemoryCPU || kind == sdk.MemoryFile {
		return Ref{}, fmt.Errorf("%w: device memory kind %q: want cuda, rocm, cuda:N or rocm:N", ErrInvalid, s)
	}
	r := Ref{Kind: kind, Device: -1}
	if hasDev {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			return Ref{}, fmt.Errorf("%w: device memory kind %q: the device index must be a number from 0", ErrInvalid, s)
		}
		r.Device = n
	}
	return r, nil
}

func (r Ref) String() string {
	if r.Kind == "" {
		return "device memory"
	}
	if r.Device < 0 {
		return string(r.Kind)
	}
	return fmt.Sprintf("%s:%d", r.Kind, r.Device)
}

// candidates returns the plugins to ask for ref, running or not, in
// configuration order.
func (s *Set) candidates(ctx context.Context, ref Ref, handle *sdk.Handle) ([]*Proc, []string, error) {
	var procs []*Proc
	var names, why []string
	for _, p := range s.plugins {
		pr, err := s.get(ctx, p)
		if err != nil {
			why = append(why, err.Error())
			continue
		}
		if ref.Kind != "" && pr.Info.Kind != ref.Kind {
			continue
		}
		if handle != nil && !slices.Contains(pr.Info.Handles, handle.Type) {
			why = append(why, fmt.Sprintf("device plugin %q does not import %s handles", p.name, handle.Type))
			continue
		}
		procs, names = append(procs, pr), append(names, p.name)
	}
	if len(procs) == 0 {
		if len(s.plugins) == 0 {
			return nil, nil, fmt.Errorf("%w: no device block is configured, so %s cannot be registered: add one (device \"cuda\" {})", ErrUnavailable, ref)
		}
		return nil, nil, fmt.Errorf("%w: no device plugin serves %s: %s", ErrUnavailable, ref, strings.Join(why, "; "))
	}
	return procs, names, nil
}

// Register records [addr, addr+length) of process pid as device memory
// of ref under a new region id, imported by the device plugin that owns
// it. With handle (the application exported the range with its own
// driver) the plugin that imports that handle type takes it; without,
// the plugins of ref's kind are asked (Identify). Nothing is recorded
// when it fails.
func (s *Set) Register(ctx context.Context, pid int, addr, length uint64, ref Ref, handle *sdk.Handle, perm sdk.Perm) (Region, error) {
	if length == 0 || addr+length < addr {
		return Region{}, fmt.Errorf("%w: register %s %#x+%d: empty or wrapping range", ErrInvalid, ref, addr, length)
	}
	if handle != nil {
		if err := handle.Check(); err != nil {
			return Region{}, fmt.Errorf("%w: register %s %#x+%d: %w", ErrInvalid, ref, addr, length, err)
		}
		if handle.Length != length {
			return Region{}, fmt.Errorf("%w: register %s %#x+%d: the handle covers %d bytes, not %d", ErrInvalid, ref, addr, length, handle.Length, length)
		}
	}
	if s.overlaps(addr, length) {
		return Region{}, fmt.Errorf("%w: register %s %#x+%d: overlaps device memory registered already; unregister it first", ErrInvalid, ref, addr, length)
	}
	procs, names, err := s.candidates(ctx, ref, handle)
	if err != nil {
		return Region{}, err
	}
	var h sdk.Handle
	var dev int
	var pr *Proc
	var name string
	var misses []string
	for i, c := range procs {
		if handle != nil {
			h, dev, pr, name = *handle, handle.Device, c, names[i]
			break
		}
		var id sdk.Identity
		err := s.call(ctx, func(ctx context.Context) (err error) { id, err = c.Client.Identify(ctx, pid, addr, length); return })
		if err != nil {
			misses = append(misses, fmt.Sprintf("device plugin %q: %v", names[i], err))
			continue
		}
		h, dev, pr, name = id.Handle, id.Device, c, names[i]
		break
	}
	if pr == nil {
		return Region{}, fmt.Errorf("%w: register %s %#x+%d: %s", ErrInvalid, ref, addr, length, strings.Join(misses, "; "))
	}
	if ref.Device >= 0 && dev != ref.Device {
		return Region{}, fmt.Errorf("%w: register %s %#x+%d: the memory is on %s:%d (device plugin %s), not device %d: %w",
			ErrInvalid, ref, addr, length, pr.Info.Kind, dev, name, ref.Device, sdk.ErrNoDevice)
	}
	if dev < 0 || dev >= len(pr.Devices) {
		return Region{}, fmt.Errorf("%w: register %s %#x+%d: device %d: device plugin %s has %d devices: %w",
			ErrInvalid, ref, addr, length, dev, name, len(pr.Devices), sdk.ErrNoDevice)
	}
	s.mu.Lock()
	id := s.next
	s.next++
	s.mu.Unlock()
	r := Region{ID: id, Base: addr, Length: length, Kind: pr.Info.Kind, Device: dev, Plugin: name, Handle: h, Perm: perm}
	if err := s.call(ctx, func(ctx context.Context) error { return pr.Client.Import(ctx, id, h) }); err != nil {
		return Region{}, fmt.Errorf("%w: register %s %#x+%d: device plugin %s cannot import its handle: %w", ErrInvalid, r.Name(), addr, length, name, err)
	}
	s.mu.Lock()
	if s.closed || overlapsIn(s.regions, addr, length) {
		closed := s.closed
		s.mu.Unlock()
		s.call(ctx, func(ctx context.Context) error { return pr.Client.Unimport(ctx, id) })
		if closed {
			return Region{}, fmt.Errorf("%w: the engine is closed", ErrUnavailable)
		}
		return Region{}, fmt.Errorf("%w: register %s %#x+%d: overlaps device memory registered meanwhile", ErrInvalid, ref, addr, length)
	}
	s.regions = append(s.regions, r)
	sort.Slice(s.regions, func(i, j int) bool { return s.regions[i].Base < s.regions[j].Base })
	s.publish()
	s.mu.Unlock()
	return r, nil
}

func (s *Set) overlaps(addr, length uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return overlapsIn(s.regions, addr, length)
}

func overlapsIn(rs []Region, addr, length uint64) bool {
	for _, r := range rs {
		if addr < r.Base+r.Length && r.Base < addr+length {
			return true
		}
	}
	return false
}

// Unregister forgets the region that starts at base and has its plugin
// unimport it. It returns the region.
func (s *Set) Unregister(ctx context.Context, base uint64) (Region, error) {
	s.mu.Lock()
	i := slices.IndexFunc(s.regions, func(r Region) bool { return r.Base == base })
	if i < 0 {
		s.mu.Unlock()
		return Region{}, fmt.Errorf("%w: no device memory is registered at %#x", ErrNotRegistered, base)
	}
	r := s.regions[i]
	s.regions = slices.Delete(s.regions, i, i+1)
	s.publish()
	s.mu.Unlock()
	if pr := s.running(r.Plugin); pr != nil && r.Lost == "" {
		if err := s.call(ctx, func(ctx context.Context) error { return pr.Client.Unimport(ctx, r.ID) }); err != nil {
			// It did not say it let go (it died, or does not answer):
			// killed, it touches nothing of the range any more. It is
			// started again on next use.
			pr.Kill()
		}
	}
	return r, nil
}

// running returns the plugin's current run, nil when it runs none.
func (s *Set) running(name string) *Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.plugins {
		if p.name == name && p.proc != nil {
			select {
			case <-p.proc.Exited:
				return nil // gone: what it held went with it
			default:
				return p.proc
			}
		}
	}
	return nil
}

// publish makes the regions what readers see; s.mu held.
func (s *Set) publish() {
	c := slices.Clone(s.regions)
	s.snap.Store(&c)
}

// Died reports whether the plugin's last run is gone (it exited, or was
// killed for not answering): it is started again on next use.
func (s *Set) Died(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.byName(name)
	if p == nil || p.proc == nil {
		return p != nil && p.runs > 0
	}
	select {
	case <-p.proc.Exited:
		return true
	default:
		return false
	}
}

// Lookup finds the registered device region holding [addr, addr+n),
// without a lock: an engine without device memory pays a load for it.
func (s *Set) Lookup(addr, n uint64) (Region, uint64, bool) {
	if s == nil {
		return Region{}, 0, false
	}
	p := s.snap.Load()
	if p == nil {
		return Region{}, 0, false
	}
	// Sorted by base and apart: the one that may hold addr is the last
	// that starts at or below it. Every request of the engine asks
	// (selectorFacts), so it is a search, not a walk.
	rs := *p
	k := sort.Search(len(rs), func(i int) bool { return rs[i].Base > addr }) - 1
	if k < 0 || addr+n < addr || addr+n > rs[k].Base+rs[k].Length {
		return Region{}, 0, false
	}
	return rs[k], addr - rs[k].Base, true
}

// Regions returns the registered device regions, by base.
func (s *Set) Regions() []Region {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.regions)
}

// Buffers returns the registered device regions as a descriptor lists
// them: their kind is their location.
func (s *Set) Buffers() []segment.Buffer {
	var out []segment.Buffer
	for _, r := range s.Regions() {
		out = append(out, segment.Buffer{Region: r.ID, Base: r.Base, Length: r.Length, Perm: r.Perm, Location: r.Kind})
	}
	return out
}

// Allocate has a device plugin of ref's kind allocate size bytes on
// ref's device (0 when ref names none), and returns the allocation.
func (s *Set) Allocate(ctx context.Context, ref Ref, size uint64) (sdk.Allocation, string, error) {
	procs, names, err := s.candidates(ctx, ref, nil)
	if err != nil {
		return sdk.Allocation{}, "", err
	}
	dev := max(ref.Device, 0)
	var a sdk.Allocation
	err = s.call(ctx, func(ctx context.Context) (err error) { a, err = procs[0].Client.Allocate(ctx, dev, size); return })
	if err != nil {
		return a, names[0], fmt.Errorf("%w: allocate %d bytes of %s: device plugin %s: %w", ErrInvalid, size, ref, names[0], err)
	}
	return a, names[0], nil
}

// Free frees an allocation of Allocate.
func (s *Set) Free(ctx context.Context, plugin string, addr uint64) error {
	pr := s.running(plugin)
	if pr == nil {
		return fmt.Errorf("%w: device plugin %s is not running; its allocations went with it", ErrUnavailable, plugin)
	}
	return s.call(ctx, func(ctx context.Context) error { return pr.Client.Free(ctx, addr) })
}

// RegisterHost registers host memory (a memfd range) with the device
// plugin name, for copies to and from it, and remembers it for the
// plugin's next runs.
func (s *Set) RegisterHost(ctx context.Context, name string, region uint32, fd int, off, length uint64) error {
	p := s.byName(name)
	if p == nil {
		return fmt.Errorf("%w: no device plugin %q", ErrUnavailable, name)
	}
	pr, err := s.get(ctx, p)
	if err != nil {
		return err
	}
	if err := s.call(ctx, func(ctx context.Context) error { return pr.Client.RegisterHost(ctx, region, fd, off, length) }); err != nil {
		return fmt.Errorf("device plugin %s: register host region %d: %w", name, region, err)
	}
	s.mu.Lock()
	s.hosts = append(s.hosts, hostReg{plugin: name, region: region, fd: fd, off: off, lenth: length})
	s.mu.Unlock()
	return nil
}

// HostRegistered reports whether host region is registered with plugin.
func (s *Set) HostRegistered(name string, region uint32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.hosts, func(h hostReg) bool { return h.plugin == name && h.region == region })
}

func (s *Set) byName(name string) *plugin {
	for _, p := range s.plugins {
		if p.name == name {
			return p
		}
	}
	return nil
}

// Copy has the device plugin name copy length bytes from src to dst (a
// device region and a host region, or two device regions), and returns
// once the plugin reported it. A plugin that does not answer within the
// timeout is killed before Copy returns: nothing it may still do touches
// the caller's memory after that.
func (s *Set) Copy(ctx context.Context, name string, src, dst sdk.MemRef, length uint64, what string) error {
	p := s.byName(name)
	if p == nil {
		return fmt.Errorf("%w: %s: no device plugin %q", ErrCopy, what, name)
	}
	pr, err := s.get(ctx, p)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCopy, what, err)
	}
	// The copy is not abandoned when the task's context ends (a cancel):
	// the plugin may be writing a slot. It is bounded by the timeout, and
	// a plugin that overruns it is killed.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	res, err := pr.Client.Copy(cctx, []sdk.DeviceCopy{{Src: src, Dst: dst, Length: length}})
	if err != nil {
		if cctx.Err() != nil {
			pr.Kill()
			return fmt.Errorf("%w: %s: device plugin %s did not answer within %v and was killed: %w", ErrCopy, what, name, s.timeout, err)
		}
		return fmt.Errorf("%w: %s: device plugin %s: %w", ErrCopy, what, name, err)
	}
	if len(res) != 1 || res[0].Status != ring.StatusOK || res[0].Bytes != length {
		st := ring.StatusIO
		var n uint64
		if len(res) == 1 {
			st, n = res[0].Status, res[0].Bytes
		}
		return fmt.Errorf("%w: %s: device plugin %s reported %s after %d of %d bytes", ErrCopy, what, name, st, n, length)
	}
	return nil
}

// Status is one configured device plugin as `ferry status` shows it.
type Status struct {
	Name      string
	State     string // "not started", "running", "unavailable: ...", "starting"
	Kind      sdk.MemoryKind
	Simulated bool
	Devices   []sdk.DeviceAttr
	Runs      int
	Regions   int
	Pid       int // of the running process, 0 when none
}

// Statuses returns every configured device plugin's state.
func (s *Set) Statuses() []Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Status
	for _, p := range s.plugins {
		st := Status{Name: p.name, State: "not started", Runs: p.runs}
		switch {
		case p.unavailable != "":
			st.State = p.unavailable
		case p.starting != nil:
			st.State = "starting"
		case p.proc != nil:
			st.State = "running"
			st.Kind, st.Simulated, st.Devices, st.Pid = p.proc.Info.Kind, p.proc.Info.Simulated, p.proc.Devices, p.proc.Pid
		}
		for _, r := range s.regions {
			if r.Plugin == p.name {
				st.Regions++
			}
		}
		out = append(out, st)
	}
	return out
}

// Close stops every running device plugin (killing it) and refuses
// further use.
func (s *Set) Close() {
	s.mu.Lock()
	s.closed = true
	var kill []func()
	for _, p := range s.plugins {
		if p.proc != nil {
			kill = append(kill, p.proc.Kill)
			p.proc = nil
		}
	}
	s.mu.Unlock()
	for _, k := range kill {
		k()
	}
}
