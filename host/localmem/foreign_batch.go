package localmem

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
)

// A batch registration (RegisterBatch) takes memory the application
// allocated itself beside memory from Allocate: each range lies inside
// one allocation or overlaps none. The foreign ranges are checked as
// RegisterForeign checks one (a plugin that takes them, one that serves
// them to peers for a remote perm, the ptrace scope: once for the batch),
// go only to the plugins that take foreign memory, one RegisterForeign
// per region after the memfd part of the batch, and are pinned when the
// batch has been taken by every plugin.

// checkForeign checks that the batch's foreign ranges (those of rs at
// foreign) can be registered: some plugin takes them, for a range peers
// may use one that serves peers, and the system allows cross-memory
// attach (granting it when the ptrace scope needs it).
func (t *Table) checkForeign(rs []Range, foreign []int, plugins []Plugin) error {
	var takers []ForeignPlugin
	for _, pl := range plugins {
		if fp, ok := pl.(ForeignPlugin); ok && fp.TakesForeign() {
			takers = append(takers, fp)
		}
	}
	first := rs[foreign[0]]
	if len(takers) == 0 {
		return fmt.Errorf("%w: register batch: buffer %d (%d bytes at %#x): the memory was not allocated by Engine.Allocate, and no running plugin can reach such memory "+
			"(plugins run in their own processes: a copying transport such as tcp reaches it by cross-memory attach); "+
			"allocate transfer buffers with Engine.Allocate; nothing of the batch was registered", ErrNotRegistered, foreign[0], first.N, first.P)
	}
	if !slices.ContainsFunc(takers, servesPeers) {
		for _, i := range foreign {
			if r := rs[i]; r.Perm.AllowsRemoteRead() {
				return fmt.Errorf("%w: register batch: buffer %d (%d bytes at %#x) for peers: the memory was not allocated by Engine.Allocate, and the running plugins that reach such memory "+
					"do it only for this engine's own transfers; register it LocalOnly, run a copying transport such as tcp, or allocate it with Engine.Allocate; nothing of the batch was registered",
					ErrNotRegistered, i, r.N, r.P)
			}
		}
	}
	if err := checkAttach(t.foreign.attach); err != nil {
		return fmt.Errorf("register batch: %d buffers the application allocated itself: %w; nothing of the batch was registered", len(foreign), err)
	}
	return nil
}

// straddlingAlloc returns the allocation of sorted allocs that [p, p+n)
// overlaps, or nil. The caller checked that the range is not inside one.
func straddlingAlloc(allocs []*allocation, p, n uintptr) *allocation {
	// The allocations that start below p+n; the last of them is the only
	// one that can reach past p (allocations do not overlap).
	i, _ := slices.BinarySearchFunc(allocs, p+n, func(a *allocation, end uintptr) int { return cmpAddr(a.base, end) })
	if i > 0 && allocs[i-1].base+allocs[i-1].size > p {
		return allocs[i-1]
	}
	return nil
}

// registerMixed registers a batch's regions with pl: the memfd ones
// (mem), then, when pl takes foreign memory, the foreign ones one by one.
// When one fails, pl forgets what it took of the batch.
func (t *Table) registerMixed(ctx context.Context, pl Plugin, mem, foreign []Registration) error {
	if len(mem) > 0 {
		if err := t.registerAll(ctx, pl, mem); err != nil {
			return err
		}
	}
	fp, ok := pl.(ForeignPlugin)
	if len(foreign) == 0 || !ok || !fp.TakesForeign() {
		return nil
	}
	pid := os.Getpid()
	for k, r := range foreign {
		cctx, cancel := context.WithTimeout(ctx, t.timeout)
		err := fp.RegisterForeign(cctx, r.Region, pid, r.Addr, r.Length, r.Perm, r.Location)
		cancel()
		if err != nil {
			for _, d := range foreign[:k] {
				fp.UnregisterMemory(context.Background(), d.Region)
			}
			if len(mem) > 0 {
				t.unregisterAll(context.Background(), pl, regionIDs(mem))
			}
			return fmt.Errorf("region %d (memory the application allocated): %w; "+
				"if the plugin may not attach, check sysctl kernel.yama.ptrace_scope (1 or 0 let plugins attach)", r.Region, err)
		}
	}
	return nil
}

// unregisterMixed makes pl forget what registerMixed gave it.
func (t *Table) unregisterMixed(ctx context.Context, pl Plugin, mem, foreign []Registration) {
	if len(mem) > 0 {
		t.unregisterAll(ctx, pl, regionIDs(mem))
	}
	if fp, ok := pl.(ForeignPlugin); ok && fp.TakesForeign() && len(foreign) > 0 {
		t.unregisterAll(ctx, pl, regionIDs(foreign))
	}
}

// pinBatch pins the Go memory of the batch's foreign regions until
// Unpin (a no-op for C and mmap memory).
func (t *Table) pinBatch(rs []Range, foreign []int, ids []uint32) {
	t.foreign.pmu.Lock()
	defer t.foreign.pmu.Unlock()
	if t.foreign.pins == nil {
		t.foreign.pins = make(map[uint32]*runtime.Pinner)
	}
	for k, i := range foreign {
		pin := new(runtime.Pinner)
		pin.Pin(rs[i].Ptr)
		t.foreign.pins[ids[k]] = pin
	}
}

func regionIDs(regs []Registration) []uint32 {
	ids := make([]uint32, len(regs))
	for i, r := range regs {
		ids[i] = r.Region
	}
	return ids
}
