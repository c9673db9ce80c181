package localmem

import (
	"context"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
)

// Carving. A plugin that shares memory with other processes (shm) passes
// on the file descriptor the host gave it for a region. If that were the
// allocation's memfd, a peer would receive the whole allocation: local-only
// and unregistered bytes as well as the region. So a region that peers may
// use (remote-read or remote-read-write) reaches the plugins as a file that
// holds exactly its bytes:
//
//   - a region that is the whole allocation, whose memfd is exactly its
//     size (a whole number of pages), goes as the allocation's memfd,
//     unless it is sealed (seal.go: remote-read), when it is carved as
//     below, since the allocation's memfd must stay writable;
//   - a region that starts on a page boundary of its allocation and ends on
//     one, or at the allocation's end, is carved: a new memfd of exactly the
//     region's length, sealed against shrinking and growing, gets a copy of
//     its bytes and is mapped MAP_FIXED|MAP_SHARED over the same addresses
//     (the application's slice stays valid and keeps its bytes), and the old
//     range is punched out of the allocation's memfd;
//   - any other region goes as the allocation's memfd at its offset. A
//     plugin that shares fds must check that a region's file is exactly the
//     region (offset 0, file size = length) and refuse to share one that is
//     not: plugins/shm answers StatusUnsupported for it.
//
// A local-only region is never carved: its fd goes only to this engine's
// own plugins, which are its children. When a carved region is
// unregistered (or its registration fails), its bytes are copied back into
// the allocation's memfd, that is mapped over the range again and the
// carved memfd is closed: a peer that kept a mapping of it (one that did
// not acknowledge a revoke) keeps a copy, never the application's memory.
// Register and Unregister copy the region's bytes, so the application must
// not write into a buffer while it registers or unregisters it (writes in
// that window may be lost).
//
// Cost: one memfd and one mapping per carved region, in this process and
// in every plugin (which map one per region anyway). Go raises
// RLIMIT_NOFILE's soft limit to its hard limit at start, and
// vm.max_map_count (65530 by default) bounds the mappings.

// pageSize is the unit of carving.
var pageSize = uintptr(os.Getpagesize())

// carve is a registered region that lives in its own memfd.
type carve struct {
	alloc  *allocation
	off    uintptr // the region's offset in its allocation (page aligned)
	n      uintptr // the region's length, the memfd's size
	mapped uintptr // bytes mapped over the allocation at off: n rounded up to pages
	fd     int
	sealed bool // fd is sealed against writes (seal.go)
}

// wholeFile reports whether the allocation's memfd is exactly [p, p+n).
func (a *allocation) wholeFile(p, n uintptr) bool {
	return p == a.base && n == a.size && a.size%pageSize == 0
}

// carveFor carves [p, p+n) of a into its own memfd when peers may use it
// and it can be carved; it returns nil when the region goes as part of
// the allocation's memfd. With sealed, the carve is sealed against writes
// once mapped here (seal.go), and a whole allocation is carved too: its
// own memfd must stay writable for its other registrations.
func (t *Table) carveFor(a *allocation, p, n uintptr, perm sdk.Perm, sealed bool) (*carve, error) {
	off := p - a.base
	if !perm.AllowsRemoteRead() || !sealed && a.wholeFile(p, n) || off%pageSize != 0 || (n%pageSize != 0 && p+n != a.base+a.size) {
		return nil, nil
	}
	mapped := (n + pageSize - 1) &^ (pageSize - 1)
	mem := a.region.Mem()
	if mem == nil {
		return nil, fmt.Errorf("%w: carve %d bytes at %#x: the allocation was freed", ErrInvalid, n, p)
	}
	fd, err := unix.MemfdCreate("ferry-"+t.owner+"-region", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("carve %d bytes at %#x into its own memfd: memfd_create: %w (raise the open-files limit, ulimit -n, for many remotely readable buffers)", n, p, err)
	}
	fail := func(op string, err error) (*carve, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("carve %d bytes at %#x into its own memfd: %s: %w", n, p, op, err)
	}
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		return fail("ftruncate", err)
	}
	if err := writeAll(fd, mem[off:off+n], 0); err != nil {
		return fail("copy", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
		return fail("seal", err)
	}
	if err := mapFixed(mem, off, mapped, fd, 0); err != nil {
		return fail("map over the allocation (vm.max_map_count may be too low for this many buffers)", err)
	}
	if sealed {
		// After the mapping: this process's stays writable.
		if err := seal(fd); err != nil {
			mapFixed(mem, off, mapped, a.region.FD(), int64(off)) // the bytes are still there
			return fail("seal", err)
		}
	}
	// The allocation's pages of the range are no longer mapped anywhere
	// that matters: give them back, so the range is not held twice.
	_ = unix.Fallocate(a.region.FD(), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(off), int64(mapped))
	return &carve{alloc: a, off: off, n: n, mapped: mapped, fd: fd, sealed: sealed}, nil
}

// undo puts c's bytes back into its allocation's memfd, maps that over the
// range again and closes c's memfd. An allocation already released has
// nothing to put back.
func (c *carve) undo() error {
	defer unix.Close(c.fd)
	mem := c.alloc.region.Mem()
	if mem == nil {
		return nil
	}
	if err := writeAll(c.alloc.region.FD(), mem[c.off:c.off+c.n], int64(c.off)); err != nil {
		return fmt.Errorf("put %d carved bytes back at offset %d: %w", c.n, c.off, err)
	}
	if err := mapFixed(mem, c.off, c.mapped, c.alloc.region.FD(), int64(c.off)); err != nil {
		return fmt.Errorf("map the allocation over %d carved bytes at offset %d again: %w", c.n, c.off, err)
	}
	return nil
}

// regionFile returns the file a registration of [p, p+n) in a goes to
// plugins as: c's memfd, or a's at the region's offset.
func regionFile(a *allocation, c *carve, p uintptr) (fd int, off uint64) {
	if c != nil {
		return c.fd, 0
	}
	return a.region.FD(), uint64(p - a.base)
}

// keepCarve records c as region id's file (nil: none).
func (t *Table) keepCarve(id uint32, c *carve) {
	if c == nil {
		return
	}
	t.amu.Lock()
	if t.carves == nil {
		t.carves = make(map[uint32]*carve)
	}
	t.carves[id] = c
	t.amu.Unlock()
}

// carveOf returns region id's carve, nil when it has none.
func (t *Table) carveOf(id uint32) *carve {
	t.amu.Lock()
	defer t.amu.Unlock()
	return t.carves[id]
}

// carving reports whether [p, p+n) overlaps a carve not yet put back: a
// region whose Unregister is still running.
func (t *Table) carving(p, n uintptr) bool {
	t.amu.Lock()
	defer t.amu.Unlock()
	for _, c := range t.carves {
		s := c.alloc.base + c.off
		if p < s+c.n && s < p+n {
			return true
		}
	}
	return false
}

// uncarve puts region id's bytes back into its allocation, if it was
// carved; once plugins have forgotten it.
func (t *Table) uncarve(id uint32) error {
	t.amu.Lock()
	c := t.carves[id]
	t.amu.Unlock()
	if c == nil {
		return nil
	}
	// Still listed while it is put back, so that a Register of the same
	// memory meanwhile is refused (carving) instead of racing the copy.
	err := c.undo()
	t.amu.Lock()
	if t.carves[id] == c {
		delete(t.carves, id)
	}
	t.amu.Unlock()
	return err
}

// dropCarves closes the memfds of a's carves (every carve when a is nil):
// the allocation was unmapped, there is nothing to put back.
func (t *Table) dropCarves(a *allocation) {
	t.amu.Lock()
	defer t.amu.Unlock()
	t.dropCarvesLocked(a)
}

func (t *Table) dropCarvesLocked(a *allocation) {
	for id, c := range t.carves {
		if a == nil || c.alloc == a {
			unix.Close(c.fd)
			delete(t.carves, id)
		}
	}
}

// memorySelf names the table itself where Unregister reports a failure
// that is no plugin's: putting a carved region back.
type memorySelf struct{}

func (memorySelf) Name() string { return "local memory" }
func (memorySelf) RegisterMemory(context.Context, uint32, int, uint64, uint64, sdk.Perm, sdk.MemoryKind) error {
	return nil
}
func (memorySelf) UnregisterMemory(context.Context, uint32) error { return nil }

// mapFixed maps length bytes of fd from foff, shared and read-write, over
// mem[off:] in place.
func mapFixed(mem []byte, off, length uintptr, fd int, foff int64) error {
	addr := unsafe.Pointer(unsafe.SliceData(mem[off:]))
	_, err := unix.MmapPtr(fd, foff, addr, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED|unix.MAP_POPULATE)
	return err
}

// writeAll writes b to fd at off.
func writeAll(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}
