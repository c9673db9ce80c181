package host

import (
	"context"
	"errors"
	"fmt"
	"github.com/ferrydev/ferry/host/path"
	"unsafe"

	"github.com/ferrydev/ferry/host/loader"
	"github.com/ferrydev/ferry/host/localmem"
	"github.com/ferrydev/ferry/sdk"
)

// Perm says who may use registered memory.
type Perm = sdk.Perm

// Permissions for Register.
const (
	LocalOnly       = sdk.PermLocal           // this engine only
	RemoteRead      = sdk.PermRemoteRead      // peers may read
	RemoteReadWrite = sdk.PermRemoteReadWrite // peers may read and write
)

func addr(b []byte) uintptr { return localmem.Addr(b) }

// localmemErr puts an error of package localmem under the public
// sentinel of the same meaning; its text is unchanged.
func localmemErr(err error) error {
	for _, m := range [...]struct{ from, to error }{
		{localmem.ErrNotRegistered, ErrNotRegistered},
		{localmem.ErrInvalid, ErrInvalid},
		{localmem.ErrPluginFailed, ErrPluginFailed},
		{localmem.ErrClosed, ErrClosed},
	} {
		if errors.Is(err, m.from) {
			return asKind(m.to, err)
		}
	}
	return err
}

func asKind(kind, err error) error { return path.AsKind(kind, err) }

// Allocate returns size bytes of memory that transport plugins can reach:
// a shared-memory file mapped by this process and, once registered, by each
// plugin, so that plugins move bytes in place. Free it with Free.
func (e *Engine) Allocate(size int) ([]byte, error) {
	if e.x.Closed() {
		return nil, ErrClosed
	}
	b, err := e.mem.Allocate(size)
	return b, localmemErr(err)
}

// Free releases memory from Allocate, unregistering what is still
// registered in it.
func (e *Engine) Free(buf []byte) error {
	base := addr(buf)
	regs, ok := e.mem.Registered(base)
	if !ok {
		return localmemErr(e.mem.Release(base)) // says it is not from Allocate
	}
	if err := e.unregisterBatch(context.Background(), regs); err != nil {
		return err
	}
	return localmemErr(e.mem.Release(base))
}

// Register makes buf usable in transfers and, per perm, by peers. It
// returns the buffer's address as peers see it in this engine's
// descriptor.
//
// An address that is not host memory of this process (buf from
// DeviceBytes) is device memory: Register asks the device plugins which
// (RegisterDevice with no kind), as Mooncake's register_memory detects a
// GPU pointer.
//
// buf is best memory from Allocate (or part of it): plugins map it and
// move bytes in place. It may also be memory the application allocated
// itself: a Go slice, C malloc memory, an anonymous mapping. Plugins run
// in their own processes, so a copying transport (tcp) reaches such
// memory by cross-memory attach (process_vm_readv/writev), at the cost of
// one extra copy per transfer, and a transport that maps memory for zero
// copy (shm) is never chosen for it. Register fails, before any transfer,
// when the system forbids the attach (sysctl kernel.yama.ptrace_scope 2
// or 3, or a process that is not dumpable) and when no running plugin
// can take such memory.
//
// The contract for such memory: Register pins a Go slice (runtime.Pinner)
// until Unregister returns, so the garbage collector keeps it; C and mmap
// memory the application must keep allocated until Unregister returns.
// Memory unmapped while registered makes the transfers on it fail (the
// plugin's copy faults, and touches nothing else); memory freed but still
// mapped (free() that keeps the page) is still this process's and is
// read or written as registered, so Unregister before freeing.
func (e *Engine) Register(ctx context.Context, buf []byte, perm Perm) (uint64, error) {
	if e.x.Closed() {
		return 0, ErrClosed
	}
	if len(buf) == 0 {
		return 0, fmt.Errorf("%w: register: empty buffer", ErrInvalid)
	}
	switch perm {
	case LocalOnly, RemoteRead, RemoteReadWrite:
	default:
		return 0, fmt.Errorf("%w: register: unknown permission %d", ErrInvalid, perm)
	}
	p, n := addr(buf), uintptr(len(buf))
	if e.devs.Configured() && !localmem.Mapped(p) && !localmem.Mapped(p+n-1) {
		// Not host memory of this process: device memory, if a device
		// plugin knows the address (as Mooncake detects a GPU pointer).
		return e.RegisterDevice(ctx, DeviceBuffer{Addr: uint64(p), Length: uint64(n)}, perm)
	}
	e.mu.Lock()
	var err error
	if e.mem.InAllocation(p, n) {
		err = e.mem.Register(ctx, p, n, perm, e.memPlugins())
	} else {
		err = e.mem.RegisterForeign(ctx, unsafe.Pointer(unsafe.SliceData(buf)), n, perm, e.memPlugins())
	}
	e.mu.Unlock()
	if err != nil {
		return 0, localmemErr(err)
	}
	if err := e.publish(ctx); err != nil {
		return 0, err
	}
	return uint64(p), nil
}

// Unregister removes the registration that starts at buf.
//
// A buf that starts a device registration (Register of a device address,
// or RegisterDevice) removes that one, as UnregisterDevice does.
func (e *Engine) Unregister(ctx context.Context, buf []byte) error {
	base := uint64(addr(buf))
	if _, off, ok := e.devs.Lookup(base, 1); ok && off == 0 {
		return e.UnregisterDevice(ctx, base)
	}
	return e.unregister(ctx, base)
}

func (e *Engine) unregister(ctx context.Context, base uint64) error {
	e.mu.Lock()
	b, err := e.mem.Remove(base)
	plugins := e.memPlugins()
	e.mu.Unlock()
	if err != nil {
		return localmemErr(err)
	}
	failed := false
	e.mem.Unregister(ctx, b.Region, localmem.Reaching(b, plugins), func(p localmem.Plugin, err error) {
		failed = true
		e.log.Warn("unregister failed", "plugin", p.Name(), "region", b.Region, "error", err)
	})
	if !failed {
		// Every plugin let go of it. Where one did not answer, the pin
		// stays until Close, so that the garbage collector never reuses
		// memory a plugin may still write.
		e.mem.Unpin(b.Region)
	}
	return e.publish(ctx)
}

// pluginPort is one run of a plugin as the local-memory and
// remote-segment tables see it: its control client.
type pluginPort struct {
	name string
	p    *loader.Plugin
}

func portOf(ps *path.Plugin) pluginPort { return pluginPort{name: ps.Name(), p: ps.Proc()} }

func (p pluginPort) Name() string { return p.name }

func (p pluginPort) RegisterMemory(ctx context.Context, region uint32, fd int, off, length uint64, perm sdk.Perm, location sdk.MemoryKind) error {
	return p.p.Client.RegisterMemory(ctx, region, fd, off, length, perm, location)
}

// TakesForeign reports whether the plugin reaches memory the
// application allocated itself (Describe's ForeignMemory).
func (p pluginPort) TakesForeign() bool { return p.p.Info.ForeignMemory }

// ForeignLocalOnly reports whether the plugin reaches such memory only
// for this engine's own descriptors (Describe's ForeignLocalOnly: shm).
func (p pluginPort) ForeignLocalOnly() bool { return p.p.Info.ForeignLocalOnly }

func (p pluginPort) RegisterForeign(ctx context.Context, region uint32, pid int, address, length uint64, perm sdk.Perm, location sdk.MemoryKind) error {
	return p.p.Client.RegisterForeign(ctx, region, pid, address, length, perm, location)
}

// TakesSealed reports whether the plugin takes sealed regions
// (Describe's sealed_regions).
func (p pluginPort) TakesSealed() bool { return p.p.SealedRegions }

func (p pluginPort) RegisterSealed(ctx context.Context, region uint32, fd int, length uint64, perm sdk.Perm, location sdk.MemoryKind, pid int, addr uint64) error {
	return p.p.Client.RegisterSealed(ctx, region, fd, length, perm, location, pid, addr)
}

func (p pluginPort) UnregisterMemory(ctx context.Context, region uint32) error {
	return p.p.Client.UnregisterMemory(ctx, region)
}

// memPlugins returns the usable plugins, where registrations go; e.mu
// held, so that a restart (which replays under e.mu) misses none.
func (e *Engine) memPlugins() []localmem.Plugin {
	var out []localmem.Plugin
	for _, ps := range e.x.Plugins() {
		if ps.Usable() {
			out = append(out, portOf(ps))
		}
		// A run an upgrade replaced still serves peers that have not
		// moved: it takes what is registered, and lets go of what is
		// unregistered, as the current run does.
		for _, p := range ps.Retiring() {
			out = append(out, retiringPort{pluginPort{name: ps.Name(), p: p}})
		}
	}
	return out
}

// retiringPort is a run an upgrade replaced, still serving peers that
// have not moved to its successor. A registration it refuses fails
// nothing (the current run took it; a peer still on the old run gets an
// error for that region and moves), and one it does not let go of
// kills it: nothing may touch unregistered memory.
type retiringPort struct{ pluginPort }

func (p retiringPort) RegisterMemory(ctx context.Context, region uint32, fd int, off, length uint64, perm sdk.Perm, location sdk.MemoryKind) error {
	p.pluginPort.RegisterMemory(ctx, region, fd, off, length, perm, location)
	return nil
}

func (p retiringPort) RegisterForeign(ctx context.Context, region uint32, pid int, address, length uint64, perm sdk.Perm, location sdk.MemoryKind) error {
	p.pluginPort.RegisterForeign(ctx, region, pid, address, length, perm, location)
	return nil
}

func (p retiringPort) RegisterSealed(ctx context.Context, region uint32, fd int, length uint64, perm sdk.Perm, location sdk.MemoryKind, pid int, addr uint64) error {
	p.pluginPort.RegisterSealed(ctx, region, fd, length, perm, location, pid, addr)
	return nil
}

func (p retiringPort) UnregisterMemory(ctx context.Context, region uint32) error {
	if err := p.pluginPort.UnregisterMemory(ctx, region); err != nil {
		p.p.Kill()
	}
	return nil
}

func (p retiringPort) RegisterMemoryBatch(ctx context.Context, regs []localmem.Registration) error {
	p.pluginPort.RegisterMemoryBatch(ctx, regs)
	return nil
}

func (p retiringPort) UnregisterMemoryBatch(ctx context.Context, regions []uint32) error {
	if err := p.pluginPort.UnregisterMemoryBatch(ctx, regions); err != nil {
		p.p.Kill()
	}
	return nil
}
