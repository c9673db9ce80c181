package localmem

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/sdk"
)

// Range is one buffer of a batch registration: [P, P+N) with Perm. Ptr
// is P as a pointer, for pinning memory the application allocated itself
// (foreign_batch.go); it may be nil for memory from Allocate.
type Range struct {
	P, N uintptr
	Perm sdk.Perm
	Ptr  unsafe.Pointer
}

// Registration is one region as a plugin receives it: [Off, Off+Length)
// of the memfd FD, under the id Region; for memory the application
// allocated itself, FD is -1 and the region is [Addr, Addr+Length) of
// this process.
type Registration struct {
	Region      uint32
	FD          int
	Off, Length uint64
	Perm        sdk.Perm
	Location    sdk.MemoryKind
	Addr        uint64
	// Sealed: FD is sealed against writes (seal.go); the region goes to
	// each plugin alone (SealPlugin.RegisterSealed), written through Addr.
	Sealed bool
}

// BatchPlugin is a Plugin that takes many regions in one call. A Plugin
// without it gets one RegisterMemory per region.
type BatchPlugin interface {
	Plugin
	// RegisterMemoryBatch registers every region or, when it fails, none.
	RegisterMemoryBatch(ctx context.Context, regs []Registration) error
	// UnregisterMemoryBatch forgets every region it can; the error names
	// those it could not.
	UnregisterMemoryBatch(ctx context.Context, regions []uint32) error
}

// RegisterBatch records every range of rs under a new region id each and
// registers them with each of plugins, in one call per plugin where the
// plugin takes batches. A range outside every allocation is memory the
// application allocated itself (foreign_batch.go). It is all or nothing:
// when a range is refused (across an allocation's edge, foreign with no
// plugin to take it, overlapping a registered buffer or another range of
// the batch, past segment.MaxBuffers) nothing is sent, and when a
// plugin refuses, the plugins that took the batch forget it again and
// nothing is recorded. The table is sorted once for the whole batch. The
// caller serialises writers.
func (t *Table) RegisterBatch(ctx context.Context, rs []Range, plugins []Plugin) error {
	if len(rs) == 0 {
		return nil
	}
	cur := *t.bufs.Load()
	if len(cur)+len(rs) > segment.MaxBuffers {
		return fmt.Errorf("%w: register %d buffers: %d are registered already, and a segment holds at most %d; unregister some or register larger buffers", ErrInvalid, len(rs), len(cur), segment.MaxBuffers)
	}
	allocs := t.sortedAllocs()
	order := make([]int, len(rs)) // rs by address
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(x, y int) int { return cmpAddr(rs[x].P, rs[y].P) })
	added := make([]Buf, len(rs)) // in address order
	var foreign []int             // of rs, in address order
	for _, i := range order {
		if findIn(allocs, rs[i].P, rs[i].N) == nil {
			foreign = append(foreign, i)
		}
	}
	if len(foreign) > 0 {
		if err := t.checkForeign(rs, foreign, plugins); err != nil {
			return err
		}
	}
	for k, i := range order {
		r := rs[i]
		a := findIn(allocs, r.P, r.N)
		if a == nil {
			if s := straddlingAlloc(allocs, r.P, r.N); s != nil {
				return fmt.Errorf("%w: register batch: buffer %d (%d bytes at %#x): overlaps memory from Engine.Allocate at %#x (%d bytes) without lying inside it; "+
					"register a range inside the allocation, or memory that is not Ferry's; nothing of the batch was registered", ErrInvalid, i, r.N, r.P, s.base, s.size)
			}
			if r.P+r.N < r.P {
				return fmt.Errorf("%w: register batch: buffer %d (%d bytes at %#x): the range wraps the address space; nothing of the batch was registered", ErrInvalid, i, r.N, r.P)
			}
		}
		if k > 0 {
			if prev := rs[order[k-1]]; prev.P+prev.N > r.P {
				return fmt.Errorf("%w: register batch: buffers %d (%d bytes at %#x) and %d (%d bytes at %#x) overlap; nothing of the batch was registered", ErrInvalid, order[k-1], prev.N, prev.P, i, r.N, r.P)
			}
		}
		if j := overlapping(cur, uint64(r.P), uint64(r.N)); j >= 0 {
			return fmt.Errorf("%w: register batch: buffer %d (%d bytes at %#x) overlaps the buffer registered at %#x (%d bytes); unregister it first; nothing of the batch was registered", ErrInvalid, i, r.N, r.P, cur[j].Base, cur[j].Length)
		}
		added[k] = Buf{Buffer: segment.Buffer{Base: uint64(r.P), Length: uint64(r.N), Perm: r.Perm, Location: Location, Foreign: a == nil}, alloc: a}
	}
	// Region ids in the caller's order, so that a batch reads back as it
	// was given.
	first := t.nextReg + 1
	for k, i := range order {
		added[k].Region = first + uint32(i)
	}
	// A region peers may use reaches the plugins as a memfd of exactly
	// its bytes (carve.go), as with Register.
	carves := make([]*carve, len(added))
	undoCarves := func() {
		for _, c := range carves {
			if c != nil {
				c.undo()
			}
		}
	}
	seal := t.sealing(sdk.PermRemoteRead, plugins) // once for the batch: it reads the ptrace scope
	for k, b := range added {
		p, n := uintptr(b.Base), uintptr(b.Length)
		if b.Foreign {
			continue // nothing to carve: it has no memfd
		}
		if t.carving(p, n) {
			undoCarves()
			return fmt.Errorf("%w: register batch: %d bytes at %#x: an Unregister of this memory is still running; wait for it to return; nothing of the batch was registered", ErrInvalid, n, p)
		}
		c, err := t.carveFor(b.alloc, p, n, b.Perm, seal && b.Perm == sdk.PermRemoteRead)
		if err != nil {
			undoCarves()
			return fmt.Errorf("engine %q: register batch: %w; nothing of the batch was registered", t.owner, err)
		}
		carves[k] = c
	}
	t.nextReg += uint32(len(rs))
	regs := make([]Registration, 0, len(rs)-len(foreign))
	fregs := make([]Registration, 0, len(foreign))
	for k, b := range added {
		if b.Foreign {
			fregs = append(fregs, Registration{Region: b.Region, FD: -1, Length: b.Length, Perm: b.Perm, Location: b.Location, Addr: b.Base})
			continue
		}
		fd, off := regionFile(b.alloc, carves[k], uintptr(b.Base))
		regs = append(regs, Registration{Region: b.Region, FD: fd, Off: off, Length: b.Length, Perm: b.Perm, Location: b.Location,
			Addr: b.Base, Sealed: carves[k] != nil && carves[k].sealed})
	}
	// The plugins map the regions at once, each in its own process.
	errs := eachPlugin(plugins, func(_ int, pl Plugin) error { return t.registerMixed(ctx, pl, regs, fregs) })
	for k, err := range errs {
		if err == nil {
			continue
		}
		eachPlugin(plugins, func(j int, pl Plugin) error {
			if errs[j] == nil { // it took the batch: forget it again
				t.unregisterMixed(context.Background(), pl, regs, fregs)
			}
			return nil
		})
		undoCarves()
		return fmt.Errorf("%w: register %d buffers with plugin %q: %w; nothing of the batch was registered", ErrPluginFailed, len(rs), plugins[k].Name(), err)
	}
	for k, b := range added {
		t.keepCarve(b.Region, carves[k])
	}
	if len(foreign) > 0 {
		fids := make([]uint32, len(foreign))
		for k, i := range foreign {
			fids[k] = first + uint32(i)
		}
		t.pinBatch(rs, foreign, fids)
	}
	next := make([]Buf, 0, len(cur)+len(added))
	i, j := 0, 0
	for i < len(cur) || j < len(added) {
		if j == len(added) || i < len(cur) && cur[i].Base < added[j].Base {
			next = append(next, cur[i])
			i++
		} else {
			next = append(next, added[j])
			j++
		}
	}
	t.bufs.Store(&next)
	return nil
}

// RemoveBatch forgets the registrations that start at bases and returns
// them, or, when one of bases is not the start of a registered buffer (or
// is listed twice), forgets none. The caller then tells the plugins
// (UnregisterBatch). Writers are serialised by the caller.
func (t *Table) RemoveBatch(bases []uint64) ([]segment.Buffer, error) {
	cur := *t.bufs.Load()
	gone := make([]bool, len(cur))
	out := make([]segment.Buffer, len(bases))
	for k, base := range bases {
		i, ok := slices.BinarySearchFunc(cur, base, func(b Buf, base uint64) int { return cmpAddr(b.Base, base) })
		if !ok {
			return nil, fmt.Errorf("%w: unregister batch: buffer %d (%#x): no buffer registered at this address; nothing of the batch was unregistered", ErrNotRegistered, k, base)
		}
		if gone[i] {
			return nil, fmt.Errorf("%w: unregister batch: buffer %d (%#x) is listed twice; nothing of the batch was unregistered", ErrInvalid, k, base)
		}
		gone[i] = true
		out[k] = cur[i].Buffer
	}
	next := make([]Buf, 0, len(cur)-len(bases))
	for i, b := range cur {
		if !gone[i] {
			next = append(next, b)
		}
	}
	t.bufs.Store(&next)
	return out, nil
}

// UnregisterBatch tells each of plugins to forget regions, in one call per
// plugin where the plugin takes batches. It reports the plugins that
// failed to, for the caller to log: the regions are gone from the table
// whatever they answer.
func (t *Table) UnregisterBatch(ctx context.Context, regions []uint32, plugins []Plugin, failed func(p Plugin, err error)) {
	if len(regions) == 0 {
		return
	}
	errs := eachPlugin(plugins, func(_ int, pl Plugin) error { return t.unregisterAll(ctx, pl, regions) })
	for k, err := range errs {
		if err != nil && failed != nil {
			failed(plugins[k], err)
		}
	}
	for _, region := range regions { // put carved bytes back, as Unregister does
		if err := t.uncarve(region); err != nil && failed != nil {
			failed(memorySelf{}, fmt.Errorf("engine %q: region %d: %w", t.owner, region, err))
		}
	}
}

// eachPlugin calls f for each of plugins at once and returns their
// errors, in order, once every call has returned.
func eachPlugin(plugins []Plugin, f func(k int, pl Plugin) error) []error {
	errs := make([]error, len(plugins))
	var wg sync.WaitGroup
	for k, pl := range plugins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[k] = f(k, pl)
		}()
	}
	wg.Wait()
	return errs
}

// registerAll registers regs with pl: in one call, or region by region,
// forgetting those it took when one fails. Sealed regions go one by one
// (RegisterSealed), after the others.
func (t *Table) registerAll(ctx context.Context, pl Plugin, regs []Registration) error {
	var sealed []Registration
	if slices.ContainsFunc(regs, func(r Registration) bool { return r.Sealed }) {
		plain := make([]Registration, 0, len(regs))
		for _, r := range regs {
			if r.Sealed {
				sealed = append(sealed, r)
			} else {
				plain = append(plain, r)
			}
		}
		regs = plain
	}
	if err := t.registerPlain(ctx, pl, regs); err != nil {
		return err
	}
	for k, r := range sealed {
		if err := t.registerSealed(ctx, pl, r); err != nil {
			if done := append(regionIDs(regs), regionIDs(sealed[:k])...); len(done) > 0 {
				t.unregisterAll(context.Background(), pl, done)
			}
			return fmt.Errorf("region %d: %w", r.Region, err)
		}
	}
	return nil
}

// registerPlain registers regs, none sealed, with pl: in one call, or
// region by region, forgetting those it took when one fails.
func (t *Table) registerPlain(ctx context.Context, pl Plugin, regs []Registration) error {
	if len(regs) == 0 {
		return nil
	}
	if bp, ok := pl.(BatchPlugin); ok {
		cctx, cancel := context.WithTimeout(ctx, t.timeout)
		defer cancel()
		return bp.RegisterMemoryBatch(cctx, regs)
	}
	for k, r := range regs {
		cctx, cancel := context.WithTimeout(ctx, t.timeout)
		err := pl.RegisterMemory(cctx, r.Region, r.FD, r.Off, r.Length, r.Perm, r.Location)
		cancel()
		if err != nil {
			for _, d := range regs[:k] {
				pl.UnregisterMemory(context.Background(), d.Region)
			}
			return fmt.Errorf("region %d: %w", r.Region, err)
		}
	}
	return nil
}

// unregisterAll tells pl to forget regions: in one call, or region by
// region, going on past failures; it returns the first.
func (t *Table) unregisterAll(ctx context.Context, pl Plugin, regions []uint32) error {
	if bp, ok := pl.(BatchPlugin); ok {
		cctx, cancel := context.WithTimeout(ctx, t.timeout)
		defer cancel()
		return bp.UnregisterMemoryBatch(cctx, regions)
	}
	var first error
	failures := 0
	for _, id := range regions {
		cctx, cancel := context.WithTimeout(ctx, t.timeout)
		err := pl.UnregisterMemory(cctx, id)
		cancel()
		if err != nil {
			if first == nil {
				first = fmt.Errorf("region %d: %w", id, err)
			}
			failures++
		}
	}
	if failures > 1 {
		return fmt.Errorf("%d of %d regions not unregistered; the first: %w", failures, len(regions), first)
	}
	return first
}

// sortedAllocs returns the allocations by base address.
func (t *Table) sortedAllocs() []*allocation {
	t.amu.Lock()
	out := make([]*allocation, 0, len(t.allocs))
	for _, a := range t.allocs {
		out = append(out, a)
	}
	t.amu.Unlock()
	slices.SortFunc(out, func(x, y *allocation) int { return cmpAddr(x.base, y.base) })
	return out
}

// findIn returns the allocation of sorted allocs holding [p, p+n).
func findIn(allocs []*allocation, p, n uintptr) *allocation {
	i, found := slices.BinarySearchFunc(allocs, p, func(a *allocation, p uintptr) int { return cmpAddr(a.base, p) })
	if !found {
		i-- // the last allocation that starts below p
	}
	if i < 0 {
		return nil
	}
	a := allocs[i]
	if p >= a.base && p+n <= a.base+a.size && p+n >= p {
		return a
	}
	return nil
}

// overlapping returns the index of the buffer of sorted bufs that
// overlaps [p, p+n), or -1.
func overlapping(bufs []Buf, p, n uint64) int {
	i, _ := slices.BinarySearchFunc(bufs, p, func(b Buf, p uint64) int {
		if b.Base+b.Length <= p {
			return -1
		}
		return 1
	})
	if i < len(bufs) && bufs[i].Base < p+n {
		return i
	}
	return -1
}

// insert publishes cur, the table as it is, with b added in address
// order: one copy, no sort. The caller serialises writers and has
// checked that b overlaps nothing.
func (t *Table) insert(cur []Buf, b Buf) {
	i, _ := slices.BinarySearchFunc(cur, b.Base, func(x Buf, base uint64) int { return cmpAddr(x.Base, base) })
	next := make([]Buf, 0, len(cur)+1)
	next = append(append(append(next, cur[:i]...), b), cur[i:]...)
	t.bufs.Store(&next)
}

func cmpAddr[T ~uint64 | ~uintptr](x, y T) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}
