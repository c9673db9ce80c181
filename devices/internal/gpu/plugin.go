package gpu

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Plugin implements sdk.Device over a Driver. Make one with New.
type Plugin struct {
	info sdk.DeviceInfo
	drv  Driver
	log  hclog.Logger

	mu       sync.RWMutex
	library  string // the option's, replaced by config's at Start
	started  bool
	stopping bool
	devs     []*device
	attrs    []sdk.DeviceAttr
	regions  map[uint32]*region
	own      map[uint64]*owned // by address
	ownByKey map[string]*owned // by handle bytes
	// freed are the handle keys of allocations Free released: their
	// handles no longer open (ErrStaleHandle), though memory an import
	// still holds is alive and a driver would open it.
	freed map[string]struct{}
}

var _ sdk.Device = (*Plugin)(nil)

// Option configures New.
type Option func(*Plugin)

// WithLibrary loads the vendor library from path instead of the default
// (the config's `library` still wins at Start). Probe uses it: Probe runs
// before Start.
func WithLibrary(path string) Option { return func(p *Plugin) { p.library = path } }

// WithLogger logs through l (copies that fail, with the driver's error
// name). The default discards.
func WithLogger(l hclog.Logger) Option { return func(p *Plugin) { p.log = l } }

// New returns a plugin that describes itself as info and drives drv.
func New(info sdk.DeviceInfo, drv Driver, opts ...Option) *Plugin {
	p := &Plugin{
		info:     info,
		drv:      drv,
		log:      hclog.NewNullLogger(),
		regions:  make(map[uint32]*region),
		own:      make(map[uint64]*owned),
		ownByKey: make(map[string]*owned),
		freed:    make(map[string]struct{}),
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// device is one device's worker, streams and the state only its worker
// touches.
type device struct {
	idx   int
	w     *worker
	lanes []*lane // set at Start; read by the worker only afterwards

	// Worker only.
	next      int // the lane the next copy goes to
	quiesced  bool
	events    []Event // every event made, destroyed at Stop
	cache     map[string]*opened
	evMu      sync.Mutex
	freeEvent []Event // events whose copy was reported; lanes put, the worker takes
}

// opened is a cached open of an IPC handle (worker only).
type opened struct {
	mem  Memory
	refs int
}

// owned is an allocation of Allocate; refs (under Plugin.mu) counts the
// allocation itself until Free, and each region that imported it.
type owned struct {
	dev  int
	mem  Memory
	key  string
	refs int
}

// region is an imported device range or a registered host region.
type region struct {
	dev    int // -1: host memory
	addr   uint64
	length uint64
	host   []byte // keeps a host region's mapping referenced
	// inflight counts copies that touch the region. Add only under
	// Plugin.mu while the region is in the table, so Wait after removing
	// it races no Add.
	inflight sync.WaitGroup
	release  func() error
}

func handleKey(h sdk.Handle) string {
	return fmt.Sprintf("%s/%d/%x", h.Type, h.Device, h.Data)
}

// onLockedThread runs fn on a fresh goroutine locked to its own thread,
// which ends with it: calls that concern no device.
func onLockedThread(fn func() error) error {
	res := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		res <- fn()
	}()
	return <-res
}

// Describe implements sdk.Device.
func (p *Plugin) Describe(ctx context.Context) (sdk.DeviceInfo, error) {
	return p.info, nil
}

// Probe implements sdk.Device: it loads the library and counts devices.
func (p *Plugin) Probe(ctx context.Context) (sdk.ProbeResult, error) {
	p.mu.RLock()
	lib := p.library
	p.mu.RUnlock()
	var n int
	err := onLockedThread(func() error {
		if err := p.drv.Load(lib); err != nil {
			return err
		}
		var err error
		n, err = p.drv.Count()
		return err
	})
	switch {
	case err != nil:
		return sdk.ProbeResult{Reason: err.Error()}, nil
	case n == 0:
		return sdk.ProbeResult{Reason: "no devices"}, nil
	}
	return sdk.ProbeResult{Available: true}, nil
}

// enumerate loads the library and describes every device.
func (p *Plugin) enumerate(lib string) ([]sdk.DeviceAttr, error) {
	var attrs []sdk.DeviceAttr
	err := onLockedThread(func() error {
		if err := p.drv.Load(lib); err != nil {
			return err
		}
		n, err := p.drv.Count()
		if err != nil {
			return err
		}
		for i := range n {
			a, err := p.drv.Describe(i)
			if err != nil {
				return fmt.Errorf("device %d: %w", i, err)
			}
			a.Index = i
			a.NUMANode = numaNode(a.PCIBusID)
			for j := range n {
				if j == i {
					continue
				}
				ok, link, err := p.drv.Peer(i, j)
				if err != nil {
					return fmt.Errorf("device %d, peer %d: %w", i, j, err)
				}
				if ok {
					a.Peers = append(a.Peers, j)
					// One link names all peers: the slowest wins, so
					// "nvlink" means every peer is reached over NVLink.
					if a.Link == "" || link == "pcie" {
						a.Link = link
					}
				}
			}
			attrs = append(attrs, a)
		}
		return nil
	})
	return attrs, err
}

// Start implements sdk.Device: it decodes the config, lists the devices
// and starts each device's worker and streams.
func (p *Plugin) Start(ctx context.Context, cfg sdk.StartConfig) error {
	lib, streams, err := decodeConfig(cfg, p.info.Name)
	if err != nil {
		return fmt.Errorf("%s device plugin: config: %w", p.info.Name, err)
	}
	p.mu.Lock()
	if p.started {
		p.mu.Unlock()
		return fmt.Errorf("%s device plugin: already started", p.info.Name)
	}
	p.started = true
	if lib != "" {
		p.library = lib
	}
	lib = p.library
	p.mu.Unlock()

	attrs, err := p.enumerate(lib)
	if err != nil {
		p.mu.Lock()
		p.started = false // a failed Start may be tried again
		p.mu.Unlock()
		return fmt.Errorf("%s device plugin: %w", p.info.Name, err)
	}
	var devs []*device
	for i := range attrs {
		d, err := p.startDevice(i, streams)
		if err != nil {
			for _, d := range devs {
				p.stopDevice(d)
			}
			p.mu.Lock()
			p.started = false
			p.mu.Unlock()
			return fmt.Errorf("%s device plugin: device %d: %w", p.info.Name, i, err)
		}
		devs = append(devs, d)
	}
	p.mu.Lock()
	p.attrs, p.devs = attrs, devs
	p.mu.Unlock()
	return nil
}

func (p *Plugin) startDevice(idx, streams int) (*device, error) {
	d := &device{idx: idx, cache: make(map[string]*opened)}
	w, err := startWorker(func() error { return p.drv.Bind(idx) })
	if err != nil {
		return nil, err
	}
	d.w = w
	var ss []Stream
	err = w.call(func() error {
		for range streams {
			s, err := p.drv.NewStream()
			if err != nil {
				return err
			}
			ss = append(ss, s)
		}
		return nil
	})
	if err == nil {
		for _, s := range ss {
			l, lerr := startLane(s, func() error { return p.drv.Bind(idx) }, p.drv.Wait, d.putEvent)
			if lerr != nil {
				err = lerr
				break
			}
			d.lanes = append(d.lanes, l)
		}
	}
	if err != nil {
		for _, l := range d.lanes {
			l.stop()
		}
		d.lanes = nil
		w.call(func() error {
			for _, s := range ss {
				p.drv.DestroyStream(s)
			}
			return p.drv.Release(idx)
		})
		w.close()
		return nil, err
	}
	return d, nil
}

func (d *device) putEvent(e Event) {
	d.evMu.Lock()
	d.freeEvent = append(d.freeEvent, e)
	d.evMu.Unlock()
}

// event returns a free event, or makes one (worker only).
func (p *Plugin) event(d *device) (Event, error) {
	d.evMu.Lock()
	if n := len(d.freeEvent); n > 0 {
		e := d.freeEvent[n-1]
		d.freeEvent = d.freeEvent[:n-1]
		d.evMu.Unlock()
		return e, nil
	}
	d.evMu.Unlock()
	e, err := p.drv.NewEvent()
	if err != nil {
		return 0, err
	}
	d.events = append(d.events, e)
	return e, nil
}

// Devices implements sdk.Device. Before Start it lists the devices
// without starting them.
func (p *Plugin) Devices(ctx context.Context) ([]sdk.DeviceAttr, error) {
	p.mu.RLock()
	attrs, started, lib := p.attrs, p.started, p.library
	p.mu.RUnlock()
	if !started {
		var err error
		if attrs, err = p.enumerate(lib); err != nil {
			return nil, fmt.Errorf("%s device plugin: %w", p.info.Name, err)
		}
	}
	out := make([]sdk.DeviceAttr, len(attrs))
	for i, a := range attrs {
		a.Peers = append([]int(nil), a.Peers...)
		out[i] = a
	}
	return out, nil
}

// Identify implements sdk.Device. A GPU pointer is known only to the
// process whose context made it, so the plugin identifies only its own
// allocations (whose addresses the host got from Allocate); anything else
// is ErrCannotIdentify: the application exports it with its own driver and
// registers the handle.
func (p *Plugin) Identify(ctx context.Context, pid int, addr, length uint64) (sdk.Identity, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, o := range p.own {
		start, end := o.mem.Addr, o.mem.Addr+o.mem.Size
		if addr < start || addr >= end {
			continue
		}
		if length == 0 || length > end-addr {
			return sdk.Identity{}, fmt.Errorf("%w: [%#x, +%d) runs past the end of allocation [%#x, %#x)", sdk.ErrNotDevice, addr, length, start, end)
		}
		h := o.mem.Handle
		h.Data = append([]byte(nil), h.Data...)
		h.Offset, h.Length = addr-start, length
		return sdk.Identity{Device: o.dev, Handle: h}, nil
	}
	return sdk.Identity{}, fmt.Errorf("%w: %s device plugin: address %#x of process %d", sdk.ErrCannotIdentify, p.info.Name, addr, pid)
}

// deviceFor returns device dev of a started plugin.
func (p *Plugin) deviceFor(dev int) (*device, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if !p.started || p.stopping || p.devs == nil {
		return nil, fmt.Errorf("%s device plugin: %w", p.info.Name, errNotRunning)
	}
	if dev < 0 || dev >= len(p.devs) {
		return nil, fmt.Errorf("%w: device %d (%s device plugin drives %d)", sdk.ErrNoDevice, dev, p.info.Name, len(p.devs))
	}
	return p.devs[dev], nil
}

var errNotRunning = errors.New("not started, or stopped")

// Allocate implements sdk.Device.
func (p *Plugin) Allocate(ctx context.Context, dev int, size uint64) (sdk.Allocation, error) {
	if size == 0 {
		return sdk.Allocation{}, errors.New("allocate 0 bytes")
	}
	d, err := p.deviceFor(dev)
	if err != nil {
		return sdk.Allocation{}, err
	}
	var m Memory
	if err := d.w.call(func() (err error) { m, err = p.drv.Allocate(dev, size); return err }); err != nil {
		return sdk.Allocation{}, fmt.Errorf("allocate %d bytes on device %d: %w", size, dev, err)
	}
	o := &owned{dev: dev, mem: m, key: handleKey(m.Handle), refs: 1}
	p.mu.Lock()
	if p.stopping {
		p.mu.Unlock()
		d.w.call(m.Free)
		return sdk.Allocation{}, fmt.Errorf("%s device plugin: %w", p.info.Name, errNotRunning)
	}
	p.own[m.Addr] = o
	p.ownByKey[o.key] = o
	delete(p.freed, o.key) // a driver may give a new allocation a freed one's handle
	p.mu.Unlock()
	h := m.Handle
	h.Data = append([]byte(nil), h.Data...)
	return sdk.Allocation{Device: dev, Addr: m.Addr, Size: m.Size, Handle: h}, nil
}

// Free implements sdk.Device: the allocation's handle stops opening at
// once; its memory is released when the last region importing it is
// forgotten.
func (p *Plugin) Free(ctx context.Context, addr uint64) error {
	p.mu.Lock()
	o := p.own[addr]
	if o == nil {
		p.mu.Unlock()
		return fmt.Errorf("%w: no allocation of the %s device plugin at %#x", sdk.ErrNotDevice, p.info.Name, addr)
	}
	delete(p.own, addr)
	delete(p.ownByKey, o.key)
	p.freed[o.key] = struct{}{}
	p.mu.Unlock()
	return p.unrefOwned(o)
}

// unrefOwned drops one reference to o and frees it with the last.
func (p *Plugin) unrefOwned(o *owned) error {
	p.mu.Lock()
	o.refs--
	last := o.refs == 0
	d := p.devs[o.dev]
	p.mu.Unlock()
	if !last {
		return nil
	}
	return d.w.call(o.mem.Free)
}

// Import implements sdk.Device. A handle of the plugin's own allocation
// is not opened (a driver refuses to open its own process's handle): the
// region points into the allocation and keeps it alive.
func (p *Plugin) Import(ctx context.Context, id uint32, h sdk.Handle) error {
	if err := h.Check(); err != nil {
		return fmt.Errorf("import region %d: %w", id, err)
	}
	d, err := p.deviceFor(h.Device)
	if err != nil {
		return fmt.Errorf("import region %d: %w", id, err)
	}
	key := handleKey(h)
	p.mu.Lock()
	if _, dup := p.regions[id]; dup {
		p.mu.Unlock()
		return fmt.Errorf("import region %d: the region is already known", id)
	}
	if o := p.ownByKey[key]; o != nil {
		if h.Offset+h.Length > o.mem.Size {
			p.mu.Unlock()
			return fmt.Errorf("import region %d: range [%d, %d) is outside the allocation of %d bytes", id, h.Offset, h.Offset+h.Length, o.mem.Size)
		}
		o.refs++
		p.regions[id] = &region{dev: o.dev, addr: o.mem.Addr + h.Offset, length: h.Length, release: func() error { return p.unrefOwned(o) }}
		p.mu.Unlock()
		return nil
	}
	p.mu.Unlock()

	var base uint64
	var release func() error
	err = d.w.call(func() error {
		if !p.drv.Cached(h.Type) {
			m, err := p.drv.Open(h.Device, h)
			if err != nil {
				return err
			}
			base, release = m.Addr, func() error { return d.w.call(m.Free) }
			return nil
		}
		o := d.cache[key]
		if o == nil {
			m, err := p.drv.Open(h.Device, h)
			if err != nil {
				return err
			}
			o = &opened{mem: m}
			d.cache[key] = o
		}
		o.refs++
		base = o.mem.Addr
		release = func() error {
			return d.w.call(func() error {
				if o.refs--; o.refs > 0 {
					return nil
				}
				delete(d.cache, key)
				return o.mem.Free()
			})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("import region %d (%s handle of device %d): %w", id, h.Type, h.Device, err)
	}
	p.mu.Lock()
	_, dup := p.regions[id]
	_, freed := p.freed[key]
	if dup || freed || p.stopping {
		p.mu.Unlock()
		release()
		switch {
		case dup:
			return fmt.Errorf("import region %d: the region is already known", id)
		case freed:
			// The driver opened it (an import still holds the memory),
			// but the allocation was freed: its handles no longer open.
			return fmt.Errorf("import region %d: %w: the %s device plugin freed that allocation", id, sdk.ErrStaleHandle, p.info.Name)
		}
		return fmt.Errorf("import region %d: %s device plugin: %w", id, p.info.Name, errNotRunning)
	}
	p.regions[id] = &region{dev: h.Device, addr: base + h.Offset, length: h.Length, release: release}
	p.mu.Unlock()
	return nil
}

// forget removes region id, waits for the copies that touch it and
// releases it.
func (p *Plugin) forget(id uint32, host bool) error {
	p.mu.Lock()
	r := p.regions[id]
	if r == nil || (r.dev < 0) != host {
		p.mu.Unlock()
		return fmt.Errorf("region %d is not known", id)
	}
	delete(p.regions, id)
	p.mu.Unlock()
	r.inflight.Wait()
	return r.release()
}

// Unimport implements sdk.Device.
func (p *Plugin) Unimport(ctx context.Context, id uint32) error {
	if err := p.forget(id, false); err != nil {
		return fmt.Errorf("unimport: %w", err)
	}
	return nil
}

// RegisterHost implements sdk.Device: the region is pinned (portable: for
// every device) through device 0's worker.
func (p *Plugin) RegisterHost(ctx context.Context, r sdk.Region) error {
	if len(r.Mem) == 0 {
		return fmt.Errorf("register host region %d: no mapped memory (foreign memory cannot be pinned by this process)", r.ID)
	}
	d, err := p.deviceFor(0)
	if err != nil {
		return fmt.Errorf("register host region %d: %w", r.ID, err)
	}
	p.mu.RLock()
	_, dup := p.regions[r.ID]
	p.mu.RUnlock()
	if dup {
		return fmt.Errorf("register host region %d: the region is already known", r.ID)
	}
	addr := uint64(uintptr(unsafe.Pointer(&r.Mem[0])))
	n := uint64(len(r.Mem))
	if err := d.w.call(func() error { return p.drv.RegisterHost(addr, n) }); err != nil {
		return fmt.Errorf("register host region %d: %w", r.ID, err)
	}
	release := func() error { return d.w.call(func() error { return p.drv.UnregisterHost(addr) }) }
	p.mu.Lock()
	if _, dup := p.regions[r.ID]; dup || p.stopping {
		p.mu.Unlock()
		release()
		return fmt.Errorf("register host region %d: the region is already known, or the plugin stopped", r.ID)
	}
	p.regions[r.ID] = &region{dev: -1, addr: addr, length: n, host: r.Mem, release: release}
	p.mu.Unlock()
	return nil
}

// UnregisterHost implements sdk.Device.
func (p *Plugin) UnregisterHost(ctx context.Context, id uint32) error {
	if err := p.forget(id, true); err != nil {
		return fmt.Errorf("unregister host: %w", err)
	}
	return nil
}

// inBounds says whether [off, off+n) lies in a region of length l.
func inBounds(off, n, l uint64) bool { return off <= l && n <= l-off }

// Copy implements sdk.Device. It runs on the device of the device end
// (the source's for device to device: unified addressing reaches the
// peer); a host to host copy is StatusInvalid, not this plugin's work.
func (p *Plugin) Copy(c sdk.DeviceCopy, done sdk.Completer) {
	p.mu.RLock()
	if p.stopping || !p.started {
		p.mu.RUnlock()
		done.Complete(c.Token, ring.StatusShutdown, 0)
		return
	}
	src, dst := p.regions[c.Src.Region], p.regions[c.Dst.Region]
	if src == nil || dst == nil || (src.dev < 0 && dst.dev < 0) ||
		!inBounds(c.Src.Offset, c.Length, src.length) || !inBounds(c.Dst.Offset, c.Length, dst.length) {
		p.mu.RUnlock()
		done.Complete(c.Token, ring.StatusInvalid, 0)
		return
	}
	if c.Length == 0 {
		p.mu.RUnlock()
		done.Complete(c.Token, ring.StatusOK, 0)
		return
	}
	dev := src.dev
	if dev < 0 {
		dev = dst.dev
	}
	d := p.devs[dev]
	src.inflight.Add(1)
	dst.inflight.Add(1)
	finish := func(err error, n uint64) {
		src.inflight.Done()
		dst.inflight.Done()
		st := ring.StatusOK
		if err == errStopped {
			st, n = ring.StatusShutdown, 0
		} else if err != nil {
			st, n = ring.StatusIO, 0
			p.log.Warn("device copy failed", "token", c.Token, "device", dev, "bytes", c.Length, "error", err)
		}
		done.Complete(c.Token, st, n)
	}
	from, to, n := src.addr+c.Src.Offset, dst.addr+c.Dst.Offset, c.Length
	// Posted under the read lock: Stop takes the write lock before it
	// aborts the queues, so no copy is queued after that.
	d.w.post(job{
		run:   func() { p.submit(d, from, to, n, finish) },
		abort: func() { finish(errStopped, 0) },
	})
	p.mu.RUnlock()
}

// submit queues one copy on the device's next stream (worker only).
func (p *Plugin) submit(d *device, from, to, n uint64, finish func(error, uint64)) {
	if d.quiesced {
		finish(errStopped, 0)
		return
	}
	l := d.lanes[d.next]
	d.next = (d.next + 1) % len(d.lanes)
	ev, err := p.event(d)
	if err != nil {
		finish(err, 0)
		return
	}
	if err := p.drv.CopyAsync(to, from, n, l.stream); err != nil {
		d.putEvent(ev)
		finish(err, 0)
		return
	}
	if err := p.drv.Record(ev, l.stream); err != nil {
		d.putEvent(ev)
		finish(err, 0)
		return
	}
	l.pend <- pending{ev: ev, n: n, finish: finish}
}

// Stop implements sdk.Device: copies not started complete with
// StatusShutdown, those on a stream complete as they end, then every
// region, allocation, event and stream is released and the workers end.
func (p *Plugin) Stop(ctx context.Context) error {
	p.mu.Lock()
	if p.stopping || p.devs == nil {
		p.stopping = true
		p.mu.Unlock()
		return nil
	}
	p.stopping = true
	devs, regions := p.devs, p.regions
	var own []*owned
	for _, o := range p.own {
		own = append(own, o)
	}
	p.regions = make(map[uint32]*region)
	p.own = make(map[uint64]*owned)
	p.ownByKey = make(map[string]*owned)
	p.freed = make(map[string]struct{})
	p.mu.Unlock()

	for _, d := range devs {
		d.w.abortQueued()
	}
	for _, d := range devs {
		d.w.call(func() error {
			d.quiesced = true
			for _, l := range d.lanes {
				l.stop()
			}
			return nil
		})
	}
	var errs []error
	for id, r := range regions {
		r.inflight.Wait()
		if err := r.release(); err != nil {
			errs = append(errs, fmt.Errorf("region %d: %w", id, err))
		}
	}
	for _, o := range own {
		if err := p.unrefOwned(o); err != nil {
			errs = append(errs, fmt.Errorf("allocation %#x: %w", o.mem.Addr, err))
		}
	}
	for _, d := range devs {
		if err := p.stopDevice(d); err != nil {
			errs = append(errs, fmt.Errorf("device %d: %w", d.idx, err))
		}
	}
	return errors.Join(errs...)
}

// stopDevice releases a quiesced device's events, streams and cached
// opens, and ends its worker.
func (p *Plugin) stopDevice(d *device) error {
	for _, l := range d.lanes {
		select {
		case <-l.done:
		default:
			l.stop()
		}
	}
	err := d.w.call(func() error {
		var errs []error
		for key, o := range d.cache {
			errs = append(errs, o.mem.Free())
			delete(d.cache, key)
		}
		for _, e := range d.events {
			errs = append(errs, p.drv.DestroyEvent(e))
		}
		d.events = nil
		for _, l := range d.lanes {
			errs = append(errs, p.drv.DestroyStream(l.stream))
		}
		errs = append(errs, p.drv.Release(d.idx))
		return errors.Join(errs...)
	})
	d.w.close()
	return err
}
