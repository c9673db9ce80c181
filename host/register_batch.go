package host

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/ferrydev/ferry/host/localmem"
	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/internal/pluginclient"
)

// RegisterBatch registers many buffers in one call, and returns their
// addresses as peers see them, in the order of bufs. perms holds one
// permission per buffer, or one for all. A buffer is memory from Allocate
// (or part of it) or, as with Register, memory the application allocated
// itself (a Go slice, pinned until it is unregistered; C malloc; mmap),
// which only the plugins that reach such memory get; a batch may mix both.
//
// It is all or nothing: when one buffer is refused (empty, across the
// edge of an allocation, app memory no running plugin can reach,
// overlapping a registered buffer or another of the batch, past the most
// buffers a segment holds) or a plugin refuses the batch, none is
// registered, in the engine or in any plugin, and the error names the
// buffer. Each plugin gets one call for the batch's Allocate memory
// (plugins built before batches get one per buffer) and one per buffer
// of app memory; the descriptor is published once. Like Register, it
// returns once the buffers are in the descriptor written to the
// metastore.
func (e *Engine) RegisterBatch(ctx context.Context, bufs [][]byte, perms []Perm) ([]uint64, error) {
	if e.x.Closed() {
		return nil, ErrClosed
	}
	if len(perms) != 1 && len(perms) != len(bufs) {
		return nil, fmt.Errorf("%w: register batch: %d permissions for %d buffers; give one per buffer, or one for all", ErrInvalid, len(perms), len(bufs))
	}
	rs := make([]localmem.Range, len(bufs))
	addrs := make([]uint64, len(bufs))
	for i, b := range bufs {
		perm := perms[0]
		if len(perms) > 1 {
			perm = perms[i]
		}
		switch {
		case len(b) == 0:
			return nil, fmt.Errorf("%w: register batch: buffer %d is empty; nothing of the batch was registered", ErrInvalid, i)
		case perm != LocalOnly && perm != RemoteRead && perm != RemoteReadWrite:
			return nil, fmt.Errorf("%w: register batch: buffer %d: unknown permission %d; nothing of the batch was registered", ErrInvalid, i, perm)
		}
		rs[i] = localmem.Range{P: addr(b), N: uintptr(len(b)), Perm: perm, Ptr: unsafe.Pointer(unsafe.SliceData(b))}
		addrs[i] = uint64(rs[i].P)
	}
	if len(bufs) == 0 {
		return addrs, nil
	}
	e.mu.Lock()
	err := e.mem.RegisterBatch(ctx, rs, e.memPlugins())
	e.mu.Unlock()
	if err != nil {
		return nil, localmemErr(err)
	}
	if err := e.publish(ctx); err != nil {
		return nil, err
	}
	return addrs, nil
}

// UnregisterBatch removes the registrations that start at each of bufs,
// with one call to each plugin and one publication. When one of bufs is
// not the start of a registered buffer, none is removed.
func (e *Engine) UnregisterBatch(ctx context.Context, bufs [][]byte) error {
	bases := make([]uint64, len(bufs))
	for i, b := range bufs {
		bases[i] = uint64(addr(b))
	}
	return e.unregisterBatch(ctx, bases)
}

func (e *Engine) unregisterBatch(ctx context.Context, bases []uint64) error {
	if len(bases) == 0 {
		return nil
	}
	e.mu.Lock()
	gone, err := e.mem.RemoveBatch(bases)
	plugins := e.memPlugins()
	e.mu.Unlock()
	if err != nil {
		return localmemErr(err)
	}
	// App memory went only to the plugins that reach it (localmem.Reaching).
	var ids, foreign []uint32
	for _, b := range gone {
		if b.Foreign {
			foreign = append(foreign, b.Region)
		} else {
			ids = append(ids, b.Region)
		}
	}
	failed := func(p localmem.Plugin, err error) {
		e.log.Warn("unregister failed", "plugin", p.Name(), "regions", len(gone), "error", err)
	}
	e.mem.UnregisterBatch(ctx, ids, plugins, failed)
	if len(foreign) > 0 {
		held := false
		e.mem.UnregisterBatch(ctx, foreign, localmem.Reaching(segment.Buffer{Foreign: true}, plugins), func(p localmem.Plugin, err error) {
			held = true
			failed(p, err)
		})
		if !held {
			// Every plugin let go of them. Where one did not answer, the
			// pins stay until Close (as with Unregister), so that the
			// garbage collector never reuses memory a plugin may still
			// write.
			for _, id := range foreign {
				e.mem.Unpin(id)
			}
		}
	}
	return e.publish(ctx)
}

// RegisterMemoryBatch and UnregisterMemoryBatch make a pluginPort a
// localmem.BatchPlugin: the client sends one call to a plugin that takes
// batches, one per region to any other.
func (p pluginPort) RegisterMemoryBatch(ctx context.Context, regs []localmem.Registration) error {
	rs := make([]pluginclient.Region, len(regs))
	for i, r := range regs {
		rs[i] = pluginclient.Region{ID: r.Region, FD: r.FD, Offset: r.Off, Length: r.Length, Perm: r.Perm, Kind: r.Location}
	}
	return p.p.Client.RegisterMemoryBatch(ctx, rs)
}

func (p pluginPort) UnregisterMemoryBatch(ctx context.Context, regions []uint32) error {
	return p.p.Client.UnregisterMemoryBatch(ctx, regions)
}

var _ localmem.BatchPlugin = pluginPort{}
