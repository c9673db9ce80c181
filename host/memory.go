package host

import (
	"context"
	"fmt"
	"slices"
	"unsafe"

	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/shm"
)

// Perm says who may use registered memory.
type Perm = sdk.Perm

// Permissions for Register.
const (
	LocalOnly       = sdk.PermLocal           // this engine only
	RemoteRead      = sdk.PermRemoteRead      // peers may read
	RemoteReadWrite = sdk.PermRemoteReadWrite // peers may read and write
)

// allocation is memory the engine allocated: a sealed memfd mapped here
// and, once registered, by every plugin.
type allocation struct {
	region *shm.Region
	base   uintptr
	size   uintptr
}

// localBuf is one registered range.
type localBuf struct {
	segment.Buffer
	alloc *allocation
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// Allocate returns size bytes of memory that transport plugins can reach:
// a shared-memory file mapped by this process and, once registered, by each
// plugin, so that plugins move bytes in place. Free it with Free.
func (e *Engine) Allocate(size int) ([]byte, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if size <= 0 {
		return nil, fmt.Errorf("%w: allocate %d bytes: size must be positive", ErrInvalid, size)
	}
	r, err := shm.Create(fmt.Sprintf("ferry-%s", e.name), size)
	if err != nil {
		return nil, fmt.Errorf("engine %q: allocate %d bytes: %w", e.name, size, err)
	}
	mem := r.Mem()
	a := &allocation{region: r, base: addr(mem), size: uintptr(size)}
	e.mu.Lock()
	e.allocs[a.base] = a
	e.mu.Unlock()
	return mem, nil
}

// Free releases memory from Allocate, unregistering what is still
// registered in it.
func (e *Engine) Free(buf []byte) error {
	base := addr(buf)
	e.mu.Lock()
	a, ok := e.allocs[base]
	e.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: free %#x: not the start of memory from Engine.Allocate", ErrInvalid, base)
	}
	for _, lb := range *e.local.Load() {
		if lb.alloc == a {
			if err := e.unregister(context.Background(), lb.Base); err != nil {
				return err
			}
		}
	}
	e.mu.Lock()
	delete(e.allocs, base)
	e.mu.Unlock()
	return a.region.Close()
}

// findAlloc returns the allocation holding [p, p+n); e.mu held.
func (e *Engine) findAlloc(p, n uintptr) *allocation {
	for _, a := range e.allocs {
		if p >= a.base && p+n <= a.base+a.size && p+n >= p {
			return a
		}
	}
	return nil
}

// Register makes buf (memory from Allocate, or part of it) usable in
// transfers and, per perm, by peers. It returns the buffer's address as
// peers see it in this engine's descriptor.
func (e *Engine) Register(ctx context.Context, buf []byte, perm Perm) (uint64, error) {
	if e.closed.Load() {
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
	if err := e.register(ctx, p, n, perm); err != nil {
		return 0, err
	}
	if err := e.publish(ctx); err != nil {
		return 0, err
	}
	return uint64(p), nil
}

// register records [p, p+n) and registers it with every usable plugin.
func (e *Engine) register(ctx context.Context, p, n uintptr, perm Perm) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	a := e.findAlloc(p, n)
	if a == nil {
		return fmt.Errorf("%w: register %d bytes at %#x: the memory was not allocated by Engine.Allocate; "+
			"plugins run in their own processes and can only reach shared memory, so allocate transfer buffers with Engine.Allocate", ErrNotRegistered, n, p)
	}
	cur := *e.local.Load()
	for _, lb := range cur {
		if uint64(p) < lb.Base+lb.Length && lb.Base < uint64(p+n) {
			return fmt.Errorf("%w: register %d bytes at %#x: overlaps the buffer registered at %#x (%d bytes); unregister it first", ErrInvalid, n, p, lb.Base, lb.Length)
		}
	}
	e.nextReg++
	id := e.nextReg
	var done []*pluginState
	for _, ps := range e.plugins {
		if !ps.usable() {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, controlTimeout)
		err := ps.proc().Client.RegisterMemory(cctx, id, a.region.FD(), uint64(p-a.base), uint64(n), perm, string(sdk.MemoryCPU))
		cancel()
		if err != nil {
			for _, d := range done {
				d.proc().Client.UnregisterMemory(context.Background(), id)
			}
			return fmt.Errorf("%w: register %d bytes at %#x with plugin %q: %v", ErrPluginFailed, n, p, ps.name, err)
		}
		done = append(done, ps)
	}
	lb := localBuf{Buffer: segment.Buffer{Region: id, Base: uint64(p), Length: uint64(n), Perm: perm, Location: string(sdk.MemoryCPU)}, alloc: a}
	next := append(slices.Clone(cur), lb)
	slices.SortFunc(next, func(x, y localBuf) int {
		switch {
		case x.Base < y.Base:
			return -1
		case x.Base > y.Base:
			return 1
		}
		return 0
	})
	e.local.Store(&next)
	return nil
}

// Unregister removes the registration that starts at buf.
func (e *Engine) Unregister(ctx context.Context, buf []byte) error {
	return e.unregister(ctx, uint64(addr(buf)))
}

func (e *Engine) unregister(ctx context.Context, base uint64) error {
	e.mu.Lock()
	cur := *e.local.Load()
	i := slices.IndexFunc(cur, func(lb localBuf) bool { return lb.Base == base })
	if i < 0 {
		e.mu.Unlock()
		return fmt.Errorf("%w: unregister %#x: no buffer registered at this address", ErrNotRegistered, base)
	}
	lb := cur[i]
	next := slices.Delete(slices.Clone(cur), i, i+1)
	e.local.Store(&next)
	e.mu.Unlock()
	for _, ps := range e.plugins {
		if !ps.usable() {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, controlTimeout)
		err := ps.proc().Client.UnregisterMemory(cctx, lb.Region)
		cancel()
		if err != nil {
			e.log.Warn("unregister failed", "plugin", ps.name, "region", lb.Region, "error", err)
		}
	}
	return e.publish(ctx)
}

// lookupLocal finds the registered buffer holding [p, p+n) without
// allocating.
func (e *Engine) lookupLocal(p, n uint64) (region uint32, off uint64, ok bool) {
	bufs := *e.local.Load()
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
