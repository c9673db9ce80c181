package localmem

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/shm"
)

// Errors the table returns, wrapped with what failed. Their texts are the
// public API's (package host), which maps them onto its own sentinels.
var (
	ErrNotRegistered = errors.New("memory not registered")
	ErrInvalid       = errors.New("invalid request")
	ErrPluginFailed  = errors.New("plugin failed")
	ErrClosed        = errors.New("engine closed")
)

// Location is where registered memory lives; only host memory today.
const Location = sdk.MemoryCPU

// Plugin is one transport plugin as the table sees it: where a
// registration is sent.
type Plugin interface {
	Name() string
	RegisterMemory(ctx context.Context, region uint32, fd int, off, length uint64, perm sdk.Perm, location sdk.MemoryKind) error
	UnregisterMemory(ctx context.Context, region uint32) error
}

// allocation is memory from Allocate: a sealed memfd mapped here and,
// once registered, by every plugin.
type allocation struct {
	region *shm.Region
	base   uintptr
	size   uintptr
}

// Buf is one registered range, as published, and the allocation it lies
// in.
type Buf struct {
	segment.Buffer
	alloc *allocation
}

// Table is an engine's local memory. The zero value is not usable; use
// New.
type Table struct {
	owner   string        // the engine's name, for errors and memfd names
	timeout time.Duration // bounds one call to one plugin

	amu    sync.Mutex // guards allocs and carves
	allocs map[uintptr]*allocation
	carves map[uint32]*carve // region id -> its own memfd (carve.go)

	bufs    atomic.Pointer[[]Buf] // sorted by base; read lock-free
	nextReg uint32                // the last region id given out; writers only

	foreign foreignState // memory the application allocated (foreign.go)
}

// New returns an empty table for the engine named owner; timeout bounds
// each call to a plugin.
func New(owner string, timeout time.Duration) *Table {
	t := &Table{owner: owner, timeout: timeout, allocs: make(map[uintptr]*allocation)}
	t.foreign.attach = SystemAttach()
	empty := []Buf{}
	t.bufs.Store(&empty)
	return t
}

// Addr returns the address of b's first byte.
func Addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// Allocate returns size bytes of shared memory mapped here.
func (t *Table) Allocate(size int) ([]byte, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: allocate %d bytes: size must be positive", ErrInvalid, size)
	}
	r, err := shm.Create("ferry-"+t.owner, size)
	if err != nil {
		return nil, fmt.Errorf("engine %q: allocate %d bytes: %w", t.owner, size, err)
	}
	mem := r.Mem()
	a := &allocation{region: r, base: Addr(mem), size: uintptr(size)}
	t.amu.Lock()
	defer t.amu.Unlock()
	if t.allocs == nil { // closed meanwhile
		r.Close()
		return nil, ErrClosed
	}
	t.allocs[a.base] = a
	return mem, nil
}

// Registered returns the bases of the buffers registered inside the
// allocation that starts at base, and whether there is one: Free
// unregisters them, then calls Release.
func (t *Table) Registered(base uintptr) ([]uint64, bool) {
	t.amu.Lock()
	a, ok := t.allocs[base]
	t.amu.Unlock()
	if !ok {
		return nil, false
	}
	var in []uint64
	for _, b := range *t.bufs.Load() {
		if b.alloc == a {
			in = append(in, b.Base)
		}
	}
	return in, true
}

// Release unmaps the allocation that starts at base.
func (t *Table) Release(base uintptr) error {
	t.amu.Lock()
	a, ok := t.allocs[base]
	delete(t.allocs, base)
	t.amu.Unlock()
	if !ok {
		return fmt.Errorf("%w: free %#x: not the start of memory from Engine.Allocate", ErrInvalid, base)
	}
	err := a.region.Close()
	t.dropCarves(a)
	return err
}

// findAlloc returns the allocation holding [p, p+n).
func (t *Table) findAlloc(p, n uintptr) *allocation {
	t.amu.Lock()
	defer t.amu.Unlock()
	for _, a := range t.allocs {
		if p >= a.base && p+n <= a.base+a.size && p+n >= p {
			return a
		}
	}
	return nil
}

// Register records [p, p+n) under a new region id and registers it with
// each of plugins; when one refuses, those that took it forget it again
// and nothing is recorded. The caller serialises writers.
func (t *Table) Register(ctx context.Context, p, n uintptr, perm sdk.Perm, plugins []Plugin) error {
	a := t.findAlloc(p, n)
	if a == nil {
		return fmt.Errorf("%w: register %d bytes at %#x: the memory was not allocated by Engine.Allocate; "+
			"plugins run in their own processes and can only reach shared memory, so allocate transfer buffers with Engine.Allocate", ErrNotRegistered, n, p)
	}
	cur := *t.bufs.Load()
	if err := checkCount(len(cur), 1); err != nil {
		return fmt.Errorf("register %d bytes at %#x: %w", n, p, err)
	}
	for _, b := range cur {
		if uint64(p) < b.Base+b.Length && b.Base < uint64(p+n) {
			return fmt.Errorf("%w: register %d bytes at %#x: overlaps the buffer registered at %#x (%d bytes); unregister it first", ErrInvalid, n, p, b.Base, b.Length)
		}
	}
	if t.carving(p, n) {
		return fmt.Errorf("%w: register %d bytes at %#x: an Unregister of this memory is still running; wait for it to return", ErrInvalid, n, p)
	}
	c, err := t.carveFor(a, p, n, perm, t.sealing(perm, plugins))
	if err != nil {
		return fmt.Errorf("engine %q: register %d bytes at %#x: %w", t.owner, n, p, err)
	}
	fd, off := regionFile(a, c, p)
	t.nextReg++
	id := t.nextReg
	reg := Registration{Region: id, FD: fd, Off: off, Length: uint64(n), Perm: perm, Location: Location, Addr: uint64(p), Sealed: c != nil && c.sealed}
	for k, pl := range plugins {
		var err error
		if reg.Sealed {
			err = t.registerSealed(ctx, pl, reg)
		} else {
			cctx, cancel := context.WithTimeout(ctx, t.timeout)
			err = pl.RegisterMemory(cctx, id, fd, off, uint64(n), perm, Location)
			cancel()
		}
		if err != nil {
			for _, d := range plugins[:k] {
				d.UnregisterMemory(context.Background(), id)
			}
			if c != nil {
				c.undo()
			}
			return fmt.Errorf("%w: register %d bytes at %#x with plugin %q: %w", ErrPluginFailed, n, p, pl.Name(), err)
		}
	}
	t.keepCarve(id, c)
	b := Buf{Buffer: segment.Buffer{Region: id, Base: uint64(p), Length: uint64(n), Perm: perm, Location: Location}, alloc: a}
	t.insert(cur, b)
	return nil
}

// Remove forgets the registration that starts at base and returns it;
// the caller then tells the plugins (Unregister). Writers are serialised
// by the caller.
func (t *Table) Remove(base uint64) (segment.Buffer, error) {
	cur := *t.bufs.Load()
	i := slices.IndexFunc(cur, func(b Buf) bool { return b.Base == base })
	if i < 0 {
		return segment.Buffer{}, fmt.Errorf("%w: unregister %#x: no buffer registered at this address", ErrNotRegistered, base)
	}
	b := cur[i]
	next := slices.Delete(slices.Clone(cur), i, i+1)
	t.bufs.Store(&next)
	return b.Buffer, nil
}

// Unregister tells each of plugins to forget region. It reports the
// plugins that failed to, for the caller to log: the region is gone from
// the table whatever they answer.
func (t *Table) Unregister(ctx context.Context, region uint32, plugins []Plugin, failed func(p Plugin, err error)) {
	for _, pl := range plugins {
		cctx, cancel := context.WithTimeout(ctx, t.timeout)
		err := pl.UnregisterMemory(cctx, region)
		cancel()
		if err != nil && failed != nil {
			failed(pl, err)
		}
	}
	if err := t.uncarve(region); err != nil && failed != nil {
		failed(memorySelf{}, fmt.Errorf("engine %q: region %d: %w", t.owner, region, err))
	}
}

// Replay registers every buffer again, with its region id, with p: a
// restarted plugin. The caller holds the writers' lock.
func (t *Table) Replay(ctx context.Context, p Plugin) error {
	t.amu.Lock()
	live := make(map[*allocation]bool, len(t.allocs))
	for _, a := range t.allocs {
		live[a] = true
	}
	t.amu.Unlock()
	// One batch (batch.go): a plugin restarted under 10,000 buffers
	// gets one call, not 10,000.
	var regs []Registration
	for _, b := range *t.bufs.Load() {
		if b.Foreign {
			if err := t.replayForeign(ctx, p, b); err != nil {
				return err
			}
			continue
		}
		if !live[b.alloc] {
			continue
		}
		c := t.carveOf(b.Region)
		fd, off := regionFile(b.alloc, c, uintptr(b.Base))
		regs = append(regs, Registration{Region: b.Region, FD: fd, Off: off, Length: b.Length, Perm: b.Perm, Location: b.Location,
			Addr: b.Base, Sealed: c != nil && c.sealed})
	}
	if err := t.registerAll(ctx, p, regs); err != nil {
		return fmt.Errorf("re-register %d regions: %w", len(regs), err)
	}
	return nil
}

// Buffers returns the registered buffers as a descriptor lists them.
func (t *Table) Buffers() []segment.Buffer {
	cur := *t.bufs.Load()
	if len(cur) == 0 {
		return nil
	}
	out := make([]segment.Buffer, len(cur))
	for i, b := range cur {
		out[i] = b.Buffer
	}
	return out
}

// Lookup finds the registered buffer holding [p, p+n) without locking or
// allocating.
func (t *Table) Lookup(p, n uint64) (region uint32, off uint64, ok bool) {
	bufs := *t.bufs.Load()
	lo, hi := 0, len(bufs)
	for lo < hi {
		m := (lo + hi) / 2
		if bufs[m].Base+bufs[m].Length <= p {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(bufs) || bufs[lo].Base > p || p+n > bufs[lo].Base+bufs[lo].Length || p+n < p {
		return 0, 0, false
	}
	return bufs[lo].Region, p - bufs[lo].Base, true
}

// Close unmaps every allocation and unpins foreign memory (the plugins
// are gone); Allocate fails afterwards.
func (t *Table) Close() {
	t.unpinAll()
	t.amu.Lock()
	defer t.amu.Unlock()
	for _, a := range t.allocs {
		a.region.Close()
	}
	t.allocs = nil
	t.dropCarvesLocked(nil)
}

// Memfd returns the memfd holding [p, p+n) of an allocation and the
// range's offset in it, for a device plugin that registers the memory
// for DMA (staging slots); ok is false outside Allocate's memory. The
// table owns the fd: it stays open until the allocation is released.
func (t *Table) Memfd(p, n uintptr) (fd int, off uint64, ok bool) {
	a := t.findAlloc(p, n)
	if a == nil {
		return -1, 0, false
	}
	return a.region.FD(), uint64(p - a.base), true
}
