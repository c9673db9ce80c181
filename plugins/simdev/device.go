package simdev

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/plugins/simdev/simmem"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/shm"
)

// Version is the plugin's version, as Describe reports it.
const Version = "0.1.0"

// Simulated device addresses: device d's range starts at addrBase +
// d*maxMemory, all 64 ranges within [0x4000_0000_0000, 0x5000_0000_0000).
// No process maps there: the kernel places mmaps top-down from below
// 0x7fff_ffff_ffff (where a range at 0x7f00_0000_0000 once met a Python
// process's library and read as host memory), PIE binaries and their
// heap sit at 0x55.., and the race detector's shadow and meta ranges end
// at 0x4000_0000_0000 (what lies between them it reserves unreadable).
const (
	addrBase  = 0x4000_0000_0000
	addrAlign = 2 << 20 // cudaMalloc's granularity
)

// Device is the simulated device (sdk.Device).
type Device struct {
	pid int // this process's: what handles name

	mu      sync.Mutex
	set     settings
	started bool
	stopped bool
	nextID  uint64
	allocs  map[uint64]*allocation // by id
	next    []uint64               // per device: the next free address
	used    []uint64               // per device: bytes allocated

	// regions are the imported and host regions Copy takes. Copies hold
	// regionMu for reading while they touch a region's memory; Unimport,
	// UnregisterHost and Stop take it for writing, so that once they
	// return no copy touches the memory they let go.
	regionMu sync.RWMutex
	regions  map[uint32]*region

	copies *copier
}

var _ sdk.Device = (*Device)(nil)

// New returns a Device; Start configures it.
func New() *Device {
	return &Device{pid: os.Getpid(), allocs: make(map[uint64]*allocation), regions: make(map[uint32]*region)}
}

// allocation is device memory of Allocate: a memfd of its own, mapped here.
type allocation struct {
	id   uint64
	dev  int
	addr uint64
	size uint64
	fd   int
	m    *shm.Mapping
}

func (a *allocation) handle(pid int, off, length uint64) sdk.Handle {
	return sdk.Handle{
		Type: sdk.HandleSim, Device: a.dev,
		Data: simmem.Encode(simmem.Ref{PID: pid, FD: a.fd, ID: a.id}),
		Size: a.size, Offset: off, Length: length,
	}
}

// region is what Copy takes: an imported device range (m is its own
// mapping) or a host region (the SDK maps it; m is nil).
type region struct {
	mem  []byte
	m    *simmem.Mapping
	host bool
}

// Describe says the plugin simulates a CUDA GPU.
func (d *Device) Describe(context.Context) (sdk.DeviceInfo, error) {
	return sdk.DeviceInfo{
		Name: "simdev", Version: Version, Kind: sdk.MemoryCUDA,
		Handles: []sdk.HandleType{sdk.HandleSim}, Simulated: true,
	}, nil
}

// Probe: a simulated device is always present.
func (d *Device) Probe(context.Context) (sdk.ProbeResult, error) {
	return sdk.ProbeResult{Available: true, Reason: "simulated devices (test tool): no hardware"}, nil
}

// Start decodes the configuration and starts the copy workers.
func (d *Device) Start(_ context.Context, cfg sdk.StartConfig) error {
	s, err := parseSettings(cfg)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started || d.stopped {
		return errors.New("simdev: already started")
	}
	d.set, d.started = s, true
	d.next = make([]uint64, s.devices)
	d.used = make([]uint64, s.devices)
	for i := range d.next {
		d.next[i] = addrBase + uint64(i)*maxMemory
	}
	d.copies = newCopier(d, copyWorkers, s.bandwidth)
	return nil
}

// Devices lists the simulated devices, each a peer of every other.
func (d *Device) Devices(context.Context) ([]sdk.DeviceAttr, error) {
	d.mu.Lock()
	s := d.set
	d.mu.Unlock()
	devs := make([]sdk.DeviceAttr, s.devices)
	for i := range devs {
		var peers []int
		for j := range s.devices {
			if j != i {
				peers = append(peers, j)
			}
		}
		devs[i] = sdk.DeviceAttr{
			Index: i, Name: "Ferry simulated GPU", UUID: fmt.Sprintf("GPU-SIM-%d-%d", d.pid, i),
			NUMANode: -1, Memory: s.memory, Peers: peers, Link: "sim",
		}
	}
	return devs, nil
}

// Identify answers for ranges inside a live allocation. pid is ignored:
// the simulated device owns its address space, as a driver does.
func (d *Device) Identify(_ context.Context, _ int, addr, length uint64) (sdk.Identity, error) {
	if length == 0 {
		return sdk.Identity{}, errors.New("simdev: identify of an empty range")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, a := range d.allocs {
		if addr < a.addr || addr-a.addr >= a.size {
			continue
		}
		off := addr - a.addr
		if length > a.size-off {
			return sdk.Identity{}, fmt.Errorf("%w: [%#x, %#x) runs %d bytes past the end of simulated allocation %d [%#x, %#x) on device %d",
				sdk.ErrNotDevice, addr, addr+length, length-(a.size-off), a.id, a.addr, a.addr+a.size, a.dev)
		}
		return sdk.Identity{Device: a.dev, Handle: a.handle(d.pid, off, length)}, nil
	}
	return sdk.Identity{}, fmt.Errorf("%w: %#x is in no simulated allocation", sdk.ErrNotDevice, addr)
}

// Allocate makes a memfd of size bytes, maps it, and gives it the next
// address of device dev's range.
func (d *Device) Allocate(_ context.Context, dev int, size uint64) (sdk.Allocation, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.started || d.stopped {
		return sdk.Allocation{}, errors.New("simdev: allocate: not started")
	}
	if dev < 0 || dev >= d.set.devices {
		return sdk.Allocation{}, fmt.Errorf("%w: device %d (simdev has %d)", sdk.ErrNoDevice, dev, d.set.devices)
	}
	if size == 0 || size > d.set.memory-d.used[dev] {
		return sdk.Allocation{}, fmt.Errorf("simdev: out of memory: %d bytes asked on device %d, %d of %d free", size, dev, d.set.memory-d.used[dev], d.set.memory)
	}
	d.nextID++
	id := d.nextID
	fd, err := simmem.Create(id, int64(size))
	if err != nil {
		return sdk.Allocation{}, err
	}
	m, err := shm.Map(fd, 0, int(size), true)
	if err != nil {
		unix.Close(fd)
		return sdk.Allocation{}, fmt.Errorf("simdev: map allocation %d: %w", id, err)
	}
	a := &allocation{id: id, dev: dev, addr: d.next[dev], size: size, fd: fd, m: m}
	d.next[dev] += (size + addrAlign - 1) &^ (addrAlign - 1)
	d.used[dev] += size
	d.allocs[id] = a
	return sdk.Allocation{Device: dev, Addr: a.addr, Size: size, Handle: a.handle(d.pid, 0, size)}, nil
}

// Free closes the allocation's memfd, so that its handles stop opening;
// imports keep their own mappings.
func (d *Device) Free(_ context.Context, addr uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, a := range d.allocs {
		if a.addr == addr {
			delete(d.allocs, id)
			d.used[a.dev] -= a.size
			a.release()
			return nil
		}
	}
	return fmt.Errorf("simdev: free %#x: no allocation starts there", addr)
}

func (a *allocation) release() {
	a.m.Close()
	unix.Close(a.fd)
}

// Import maps the range h covers: from this process's own allocation, or
// through /proc from another simulator's.
func (d *Device) Import(_ context.Context, id uint32, h sdk.Handle) error {
	if h.Type != sdk.HandleSim {
		return fmt.Errorf("simdev: import region %d: a %q handle; simdev imports %q only", id, h.Type, sdk.HandleSim)
	}
	ref, err := simmem.Decode(h.Data)
	if err != nil {
		return fmt.Errorf("simdev: import region %d: %w", id, err)
	}
	d.mu.Lock()
	if !d.started || d.stopped {
		d.mu.Unlock()
		return errors.New("simdev: import: not started")
	}
	if h.Device < 0 || h.Device >= d.set.devices {
		d.mu.Unlock()
		return fmt.Errorf("%w: import region %d: the handle is of device %d, simdev has %d", sdk.ErrNoDevice, id, h.Device, d.set.devices)
	}
	var m *simmem.Mapping
	if ref.PID == d.pid {
		a, ok := d.allocs[ref.ID]
		switch {
		case !ok || a.fd != ref.FD:
			err = fmt.Errorf("%w: import region %d: allocation %d was freed", sdk.ErrStaleHandle, id, ref.ID)
		case a.dev != h.Device:
			err = fmt.Errorf("simdev: import region %d: allocation %d is on device %d, the handle says %d", id, ref.ID, a.dev, h.Device)
		default:
			m, err = simmem.MapFD(a.fd, h)
		}
		d.mu.Unlock()
	} else {
		d.mu.Unlock()
		m, err = simmem.Open(h)
	}
	if err != nil {
		return fmt.Errorf("simdev: import region %d: %w", id, err)
	}
	if err := d.addRegion(id, &region{mem: m.Bytes(), m: m}); err != nil {
		m.Close()
		return err
	}
	return nil
}

func (d *Device) addRegion(id uint32, r *region) error {
	d.regionMu.Lock()
	defer d.regionMu.Unlock()
	if _, ok := d.regions[id]; ok {
		return fmt.Errorf("simdev: region %d is already imported or registered", id)
	}
	d.regions[id] = r
	return nil
}

// dropRegion forgets region id, once no copy touches it.
func (d *Device) dropRegion(id uint32, host bool) error {
	d.regionMu.Lock()
	defer d.regionMu.Unlock()
	r, ok := d.regions[id]
	if !ok || r.host != host {
		what := "imported"
		if host {
			what = "a registered host region"
		}
		return fmt.Errorf("simdev: region %d is not %s", id, what)
	}
	delete(d.regions, id)
	if r.m != nil {
		r.m.Close()
	}
	return nil
}

// Unimport unmaps an imported range.
func (d *Device) Unimport(_ context.Context, id uint32) error { return d.dropRegion(id, false) }

// RegisterHost takes the SDK's mapping of a host region.
func (d *Device) RegisterHost(_ context.Context, r sdk.Region) error {
	return d.addRegion(r.ID, &region{mem: r.Mem, host: true})
}

// UnregisterHost forgets a host region; the SDK unmaps it.
func (d *Device) UnregisterHost(_ context.Context, id uint32) error { return d.dropRegion(id, true) }

// Copy queues c for a copy worker.
func (d *Device) Copy(c sdk.DeviceCopy, done sdk.Completer) {
	d.mu.Lock()
	cp := d.copies
	d.mu.Unlock()
	if cp == nil {
		done.Complete(c.Token, statusShutdown, 0) // not started
		return
	}
	cp.submit(c, done)
}

// Stop completes the queued copies (StatusShutdown), waits for the workers,
// and releases every import and allocation.
func (d *Device) Stop(context.Context) error {
	d.mu.Lock()
	d.stopped = true
	cp := d.copies
	d.mu.Unlock()
	if cp != nil {
		cp.stop()
	}
	d.regionMu.Lock()
	for id, r := range d.regions {
		if r.m != nil {
			r.m.Close()
		}
		delete(d.regions, id)
	}
	d.regionMu.Unlock()
	d.mu.Lock()
	for id, a := range d.allocs {
		a.release()
		delete(d.allocs, id)
	}
	d.mu.Unlock()
	return nil
}
