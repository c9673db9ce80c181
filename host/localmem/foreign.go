package localmem

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/sdk"
)

// Memory the application allocated itself ("foreign": a Go slice, C
// malloc, an anonymous mapping) is registered without a memfd. A plugin
// that declares it can (ForeignPlugin.TakesForeign) gets (this process's
// pid, address, length, permission) and reaches the bytes with
// cross-memory attach, one extra copy; a plugin that must map memory
// never gets it. Register pins Go memory (runtime.Pinner) until the
// plugins have forgotten it; the application keeps C and mmap memory
// mapped until Unregister returns.

// ForeignPlugin is a Plugin that may take foreign memory.
type ForeignPlugin interface {
	Plugin
	// TakesForeign reports whether the plugin declared
	// sdk.Info.ForeignMemory.
	TakesForeign() bool
	// RegisterForeign registers [addr, addr+length) of process pid as
	// region.
	RegisterForeign(ctx context.Context, region uint32, pid int, addr, length uint64, perm sdk.Perm, location sdk.MemoryKind) error
}

// LocalOnlyPlugin is a ForeignPlugin that may say it reaches foreign
// memory only for this engine's own descriptors (shm: it copies straight
// between the application and the peer's mapping), never for peers.
type LocalOnlyPlugin interface {
	// ForeignLocalOnly reports sdk.Info.ForeignLocalOnly.
	ForeignLocalOnly() bool
}

// servesPeers reports whether p reaches foreign memory for peers too.
func servesPeers(p ForeignPlugin) bool {
	lo, ok := p.(LocalOnlyPlugin)
	return !ok || !lo.ForeignLocalOnly()
}

// foreignState is the table's part for foreign memory: the attach seam
// and the pins.
type foreignState struct {
	attach AttachEnv
	pmu    sync.Mutex // guards pins
	pins   map[uint32]*runtime.Pinner
}

// SetAttachEnv replaces the attach check's view of the system (tests).
func (t *Table) SetAttachEnv(env AttachEnv) { t.foreign.attach = env }

// Reaching returns the plugins among plugins that hold b: all of them for
// memory from Allocate, those that take foreign memory for foreign b.
func Reaching(b segment.Buffer, plugins []Plugin) []Plugin {
	if !b.Foreign {
		return plugins
	}
	var out []Plugin
	for _, p := range plugins {
		if fp, ok := p.(ForeignPlugin); ok && fp.TakesForeign() {
			out = append(out, p)
		}
	}
	return out
}

// RegisterForeign records [ptr, ptr+n), memory Engine.Allocate did not
// allocate, under a new region id and registers it with each of plugins
// that takes foreign memory; when one refuses, those that took it forget
// it again and nothing is recorded. It fails, touching nothing, when the
// range overlaps a registered buffer or an allocation, when no plugin can
// take it (for peers, with a remote perm: none but those that reach it
// only for their own descriptors), or when the system forbids cross-memory attach (naming
// kernel.yama.ptrace_scope). The caller serialises writers.
func (t *Table) RegisterForeign(ctx context.Context, ptr unsafe.Pointer, n uintptr, perm sdk.Perm, plugins []Plugin) error {
	p := uintptr(ptr)
	if p+n < p {
		return fmt.Errorf("%w: register %d bytes at %#x: the range wraps the address space", ErrInvalid, n, p)
	}
	if a := t.overlappingAlloc(p, n); a != nil {
		return fmt.Errorf("%w: register %d bytes at %#x: overlaps memory from Engine.Allocate at %#x (%d bytes) without lying inside it; "+
			"register a range inside the allocation, or memory that is not Ferry's", ErrInvalid, n, p, a.base, a.size)
	}
	cur := *t.bufs.Load()
	for _, b := range cur {
		if uint64(p) < b.Base+b.Length && b.Base < uint64(p+n) {
			return fmt.Errorf("%w: register %d bytes at %#x: overlaps the buffer registered at %#x (%d bytes); unregister it first", ErrInvalid, n, p, b.Base, b.Length)
		}
	}
	var takers []ForeignPlugin
	for _, pl := range plugins {
		if fp, ok := pl.(ForeignPlugin); ok && fp.TakesForeign() {
			takers = append(takers, fp)
		}
	}
	if len(takers) == 0 {
		return fmt.Errorf("%w: register %d bytes at %#x: the memory was not allocated by Engine.Allocate, and no running plugin can reach such memory "+
			"(plugins run in their own processes: a copying transport such as tcp reaches it by cross-memory attach, one that maps memory cannot); "+
			"allocate transfer buffers with Engine.Allocate", ErrNotRegistered, n, p)
	}
	if perm.AllowsRemoteRead() && !slices.ContainsFunc(takers, servesPeers) {
		return fmt.Errorf("%w: register %d bytes at %#x for peers: the memory was not allocated by Engine.Allocate, and the running plugins that reach such memory "+
			"do it only for this engine's own transfers (they map the peer's memory and cannot hand this memory to a peer); "+
			"register it LocalOnly, run a copying transport such as tcp, or allocate it with Engine.Allocate", ErrNotRegistered, n, p)
	}
	if err := checkAttach(t.foreign.attach); err != nil {
		return fmt.Errorf("register %d bytes at %#x: %w", n, p, err)
	}
	t.nextReg++
	id := t.nextReg
	pid := os.Getpid()
	for k, pl := range takers {
		cctx, cancel := context.WithTimeout(ctx, t.timeout)
		err := pl.RegisterForeign(cctx, id, pid, uint64(p), uint64(n), perm, Location)
		cancel()
		if err != nil {
			for _, d := range takers[:k] {
				d.UnregisterMemory(context.Background(), id)
			}
			return fmt.Errorf("%w: register %d bytes at %#x (memory the application allocated) with plugin %q: %w; "+
				"if the plugin may not attach, check sysctl kernel.yama.ptrace_scope (1 or 0 let plugins attach), or allocate with Engine.Allocate",
				ErrPluginFailed, n, p, pl.Name(), err)
		}
	}
	pin := new(runtime.Pinner)
	pin.Pin(ptr) // Go memory stays alive until Unpin; a no-op for C and mmap memory
	t.foreign.pmu.Lock()
	if t.foreign.pins == nil {
		t.foreign.pins = make(map[uint32]*runtime.Pinner)
	}
	t.foreign.pins[id] = pin
	t.foreign.pmu.Unlock()
	b := Buf{Buffer: segment.Buffer{Region: id, Base: uint64(p), Length: uint64(n), Perm: perm, Location: Location, Foreign: true}}
	t.insert(cur, b)
	return nil
}

// Unpin lets the garbage collector have region's Go memory again; call it
// once the plugins have forgotten the region (Unregister). A no-op for a
// region that is not foreign.
func (t *Table) Unpin(region uint32) {
	t.foreign.pmu.Lock()
	pin := t.foreign.pins[region]
	delete(t.foreign.pins, region)
	t.foreign.pmu.Unlock()
	if pin != nil {
		pin.Unpin()
	}
}

// Foreign reports whether [p, p+n) lies in a registered buffer of foreign
// memory, without locking or allocating.
func (t *Table) Foreign(p, n uint64) bool {
	bufs := *t.bufs.Load()
	i, _ := slices.BinarySearchFunc(bufs, p, func(b Buf, p uint64) int {
		switch {
		case b.Base+b.Length <= p:
			return -1
		case b.Base > p:
			return 1
		}
		return 0
	})
	return i < len(bufs) && bufs[i].Base <= p && p+n <= bufs[i].Base+bufs[i].Length && p+n >= p && bufs[i].Foreign
}

// unpinAll unpins every foreign region: the engine closes.
func (t *Table) unpinAll() {
	t.foreign.pmu.Lock()
	pins := t.foreign.pins
	t.foreign.pins = nil
	t.foreign.pmu.Unlock()
	for _, pin := range pins {
		pin.Unpin()
	}
}

// InAllocation reports whether [p, p+n) lies inside one allocation of
// Engine.Allocate: Register takes the memfd path for it.
func (t *Table) InAllocation(p, n uintptr) bool { return t.findAlloc(p, n) != nil }

// overlappingAlloc returns an allocation that [p, p+n) overlaps, or nil.
func (t *Table) overlappingAlloc(p, n uintptr) *allocation {
	t.amu.Lock()
	defer t.amu.Unlock()
	for _, a := range t.allocs {
		if p < a.base+a.size && a.base < p+n {
			return a
		}
	}
	return nil
}

// replayForeign registers foreign b again with restarted plugin p, if p
// takes foreign memory.
func (t *Table) replayForeign(ctx context.Context, p Plugin, b Buf) error {
	fp, ok := p.(ForeignPlugin)
	if !ok || !fp.TakesForeign() {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	if err := fp.RegisterForeign(cctx, b.Region, os.Getpid(), b.Base, b.Length, b.Perm, b.Location); err != nil {
		return fmt.Errorf("re-register region %d (memory the application allocated): %w", b.Region, err)
	}
	return nil
}

// Mapped reports whether the byte at p is host memory of this process
// that it may read: false for an address nothing maps here (a GPU's
// device address, or garbage), which Register then asks the device
// plugins about. It reads the byte with process_vm_readv, which reports
// EFAULT instead of faulting.
func Mapped(p uintptr) bool {
	var b [1]byte
	local := []unix.Iovec{{Base: &b[0], Len: 1}}
	remote := []unix.RemoteIovec{{Base: p, Len: 1}}
	n, err := unix.ProcessVMReadv(os.Getpid(), local, remote, 0)
	return err == nil && n == 1
}
