package localmem

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
)

// Sealing. A remote-read region goes to peers as a read-only descriptor
// of its memfd (plugins/shm). A read-only descriptor alone does not keep a
// process of the same user from writing: it can open /proc/self/fd/N (or
// /proc/PID/fd/N of any holder) read-write again, since the kernel checks
// the memfd inode's mode, not how the descriptor was opened. So where
// every plugin can take it, such a region is carved into a memfd of its
// own (even a whole allocation) and, once this process has mapped it
// writable over the application's addresses, sealed with
// F_SEAL_FUTURE_WRITE: from then on no process can write(2) the file or
// map it writable, however it opens it, while this process's mapping (the
// application's memory) stays writable. The plugins map the region
// read-only and write into it through this process's memory, as they do
// memory the application allocated itself (sdk.Region.Foreign), so a
// restarted plugin, which maps every region again, keeps working.
//
// A plugin that cannot (an SDK before sealed regions, or a transport
// without foreign memory) would fail to map a sealed region, and no
// plugin can write one where the system forbids cross-memory attach
// (attach.go): with one of those, regions are not sealed, and read-only
// holds only against a peer that does not reopen the file.

// SealPlugin is a Plugin that may take sealed regions.
type SealPlugin interface {
	Plugin
	// TakesSealed reports whether the plugin's Describe said
	// sealed_regions.
	TakesSealed() bool
	// RegisterSealed registers fd, a sealed memfd of exactly length bytes,
	// as region, written through [addr, addr+length) of process pid.
	RegisterSealed(ctx context.Context, region uint32, fd int, length uint64, perm sdk.Perm, location sdk.MemoryKind, pid int, addr uint64) error
}

// sealing reports whether a region of perm registered with plugins is
// sealed: remote-read (peers may map it, and must not write it), every
// plugin takes sealed regions, and the plugins may attach to this process
// to write them.
func (t *Table) sealing(perm sdk.Perm, plugins []Plugin) bool {
	if perm != sdk.PermRemoteRead || len(plugins) == 0 {
		return false
	}
	for _, p := range plugins {
		if sp, ok := p.(SealPlugin); !ok || !sp.TakesSealed() {
			return false
		}
	}
	return checkAttach(t.foreign.attach) == nil
}

// seal forbids new writes to fd and new writable mappings of it.
func seal(fd int) error {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_FUTURE_WRITE); err != nil {
		return fmt.Errorf("seal against writes (F_SEAL_FUTURE_WRITE, Linux 5.1): %w", err)
	}
	return nil
}

// registerSealed registers r, a sealed region, with pl.
func (t *Table) registerSealed(ctx context.Context, pl Plugin, r Registration) error {
	sp, ok := pl.(SealPlugin)
	if !ok || !sp.TakesSealed() {
		return fmt.Errorf("region %d is sealed against writes (a remote-read region), and plugin %q cannot take a sealed region: "+
			"it was built with an SDK before sealed regions or does not take foreign memory; rebuild it with this SDK", r.Region, pl.Name())
	}
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	return sp.RegisterSealed(cctx, r.Region, r.FD, r.Length, r.Perm, r.Location, os.Getpid(), r.Addr)
}
