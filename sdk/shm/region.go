package shm

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Errors that Map returns for files it refuses. They are wrapped with the
// details; test them with errors.Is.
var (
	// ErrNotSealed means the file does not carry F_SEAL_SHRINK and
	// F_SEAL_GROW (or cannot carry seals at all): its owner could shrink it
	// under the mapping and the next access would raise SIGBUS.
	ErrNotSealed = errors.New("shm: file is not sealed against shrinking and growing")
	// ErrTooSmall means the file is smaller than the range asked for.
	ErrTooSmall = errors.New("shm: file is smaller than the requested range")
)

// requiredSeals are the seals without which a mapping is unsafe.
const requiredSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW

// maxNameLen is memfd_create's limit (249 bytes, NUL excluded).
const maxNameLen = 249

// pageSize is the system page size, the unit of mmap offsets.
var pageSize = os.Getpagesize()

// Region is a sealed memfd mapping that this process created. Its fd can be
// sent to other processes ([FDSender.Send]), which map it with [Map].
// A Region is safe for concurrent use; Close must not race with accesses to
// Mem.
type Region struct {
	name string
	size int

	mu     sync.Mutex
	fd     int
	mapped []byte // the whole mapping, page-rounded, as mmap returned it
	mem    []byte // mapped[:size:size]
}

// Create makes a shared memory region of size bytes named name (the name
// is only a label: it shows in /proc/<pid>/maps as /memfd:name). The file
// is rounded up to whole pages and sealed against shrinking, growing and
// further sealing before it is mapped, so any process that maps it can
// trust its size. The memory starts zeroed.
func Create(name string, size int) (*Region, error) {
	if size <= 0 {
		return nil, fmt.Errorf("shm: create %q: size %d must be positive", name, size)
	}
	if len(name) > maxNameLen {
		return nil, fmt.Errorf("shm: create %q: name longer than %d bytes", name, maxNameLen)
	}
	fileSize, ok := roundUp(size, pageSize)
	if !ok {
		return nil, fmt.Errorf("shm: create %q: size %d too large", name, size)
	}
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("shm: create %q: memfd_create: %w", name, err)
	}
	fail := func(op string, err error) (*Region, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: create %q (%d bytes): %s: %w", name, size, op, err)
	}
	if err := unix.Ftruncate(fd, int64(fileSize)); err != nil {
		return fail("ftruncate", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return fail("seal", err)
	}
	// MAP_POPULATE: an allocation is memory to transfer from, like pinned
	// host memory; faulting its pages in one by one on first transfer costs
	// ~20 us a page on a VM (0.2 GB/s for a cold 64 MiB read).
	mapped, err := unix.Mmap(fd, 0, fileSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fail("mmap", err)
	}
	return &Region{name: name, size: size, fd: fd, mapped: mapped, mem: mapped[:size:size]}, nil
}

// Mem returns the region's memory: exactly the size asked of Create. It is
// nil after Close.
func (r *Region) Mem() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mem
}

// FD returns the memfd, for sending to another process. The Region keeps
// ownership: the caller must not close it. It is -1 after Close.
func (r *Region) FD() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fd
}

// Size returns the size asked of Create (the file itself is rounded up to
// whole pages).
func (r *Region) Size() int { return r.size }

// Name returns the label given to Create.
func (r *Region) Name() string { return r.name }

// Close unmaps the region and closes its fd. Other processes that mapped it
// keep their mappings. Close is idempotent.
func (r *Region) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fd < 0 {
		return nil
	}
	errUnmap := unix.Munmap(r.mapped)
	errClose := unix.Close(r.fd)
	r.fd, r.mapped, r.mem = -1, nil, nil
	if err := errors.Join(errUnmap, errClose); err != nil {
		return fmt.Errorf("shm: close region %q: %w", r.name, err)
	}
	return nil
}

// Mapping is a view of a file received from another process.
// Close must not race with accesses to Mem.
type Mapping struct {
	mu       sync.Mutex
	mapped   []byte // as mmap returned it, from the page boundary below off
	mem      []byte
	writable bool
}

// Map maps size bytes of the file fd from offset off, which need not be
// page aligned. It refuses a file that is not sealed against shrinking and
// growing ([ErrNotSealed]) and one smaller than off+size ([ErrTooSmall]).
// With writable false the pages are mapped PROT_READ only: a write faults.
// Map does not take ownership of fd: the mapping outlives it, and the
// caller may close fd as soon as Map returns.
func Map(fd int, off int64, size int, writable bool) (*Mapping, error) {
	if fd < 0 {
		return nil, fmt.Errorf("shm: map fd %d: invalid fd", fd)
	}
	if off < 0 || size <= 0 || off > int64(^uint(0)>>1)-int64(size) {
		return nil, fmt.Errorf("shm: map fd %d: invalid range offset %d size %d", fd, off, size)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		// EINVAL: a file that cannot carry seals at all (a regular file,
		// a tmpfs file in /dev/shm). A memfd made without
		// MFD_ALLOW_SEALING answers F_SEAL_SEAL and is refused below.
		return nil, fmt.Errorf("shm: map fd %d: F_GET_SEALS: %w: %w", fd, err, ErrNotSealed)
	}
	if seals&requiredSeals != requiredSeals {
		return nil, fmt.Errorf("shm: map fd %d: seals %#x lack shrink|grow: %w", fd, seals, ErrNotSealed)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shm: map fd %d: fstat: %w", fd, err)
	}
	if st.Size < off+int64(size) {
		return nil, fmt.Errorf("shm: map fd %d: range %d+%d beyond file size %d: %w", fd, off, size, st.Size, ErrTooSmall)
	}
	pageOff := off &^ int64(pageSize-1)
	delta := int(off - pageOff)
	prot := unix.PROT_READ
	if writable {
		prot |= unix.PROT_WRITE
	}
	// Populate at registration, as an RDMA registration pins: the first
	// transfer must not pay a page fault per page.
	mapped, err := unix.Mmap(fd, pageOff, delta+size, prot, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("shm: map fd %d: mmap %d bytes at %d (writable %t): %w", fd, delta+size, pageOff, writable, err)
	}
	return &Mapping{mapped: mapped, mem: mapped[delta : delta+size : delta+size], writable: writable}, nil
}

// Mem returns the mapped bytes: exactly the range asked of Map. It is nil
// after Close.
func (m *Mapping) Mem() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mem
}

// Writable reports whether the mapping allows writes.
func (m *Mapping) Writable() bool { return m.writable }

// Close unmaps the memory. Close is idempotent.
func (m *Mapping) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mapped == nil {
		return nil
	}
	err := unix.Munmap(m.mapped)
	m.mapped, m.mem = nil, nil
	if err != nil {
		return fmt.Errorf("shm: unmap: %w", err)
	}
	return nil
}

// roundUp rounds n up to a multiple of unit (a power of two).
func roundUp(n, unit int) (int, bool) {
	r := (n + unit - 1) &^ (unit - 1)
	return r, r >= n
}

// ReadOnly reopens fd read-only through /proc/self/fd: a descriptor that
// cannot be mapped writable and shared (mmap answers EACCES), for a
// process that may only read the memory. The caller owns the new fd.
//
// Alone it is not a security boundary against a process of the same
// user: the receiver can open its own /proc/self/fd/N read-write again,
// because the kernel checks a memfd's inode mode (0777, and its owner may
// chmod it), not how the descriptor was opened. What closes that is the
// file's F_SEAL_FUTURE_WRITE, which the host adds to a remote-read
// region's memfd (a sealed region; see sdk.Region.Foreign).
func ReadOnly(fd int) (int, error) {
	ro, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("shm: reopen fd %d read-only: %w", fd, err)
	}
	return ro, nil
}
