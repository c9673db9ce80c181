// Package simmem opens a simulated device's memory (sdk.HandleSim) in the
// process that holds the handle: an application that fills or checks
// simulated device memory, a test, or a plugin with a simulated backend
// (plugins/nvlink). It also owns the handle's byte layout, which
// plugins/simdev writes with Encode.
//
// A HandleSim's Data is 16 bytes, little-endian:
//
//	[0:4)   pid of the simulating process (uint32)
//	[4:8)   fd number of the allocation's memfd in that process (uint32)
//	[8:16)  allocation id (uint64)
//
// The memfd is named MemfdName(id) ("ferry-simdev-<id>"), so that whoever
// opens /proc/<pid>/fd/<fd> can tell the allocation from a later file that
// reused the fd number. It is sealed against growing and shrinking.
//
// simmem must not keep state between calls, start goroutines or know the
// simdev plugin's internals beyond this layout.
package simmem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/shm"
)

// DataSize is the length of a HandleSim's Data.
const DataSize = 16

// Ref is what a HandleSim's Data names: an allocation's memfd in the
// simulating process.
type Ref struct {
	PID int
	FD  int
	ID  uint64 // the allocation id
}

// Encode returns r as a HandleSim's Data.
func Encode(r Ref) []byte {
	b := make([]byte, DataSize)
	binary.LittleEndian.PutUint32(b[0:], uint32(r.PID))
	binary.LittleEndian.PutUint32(b[4:], uint32(r.FD))
	binary.LittleEndian.PutUint64(b[8:], r.ID)
	return b
}

// Decode reads a HandleSim's Data.
func Decode(data []byte) (Ref, error) {
	if len(data) != DataSize {
		return Ref{}, fmt.Errorf("sim handle data is %d bytes, want %d", len(data), DataSize)
	}
	r := Ref{
		PID: int(binary.LittleEndian.Uint32(data[0:])),
		FD:  int(binary.LittleEndian.Uint32(data[4:])),
		ID:  binary.LittleEndian.Uint64(data[8:]),
	}
	if r.PID <= 0 || r.FD < 0 || r.PID > 1<<30 || r.FD > 1<<30 {
		return Ref{}, fmt.Errorf("sim handle names pid %d fd %d, not a process's descriptor", r.PID, r.FD)
	}
	return r, nil
}

// MemfdName is the name of allocation id's memfd.
func MemfdName(id uint64) string { return "ferry-simdev-" + strconv.FormatUint(id, 10) }

// OpenFD opens the memfd r names, read-write, and checks that it is
// allocation r.ID's: a freed allocation, an exited simulator or a reused
// fd number fail with an error wrapping sdk.ErrStaleHandle. The caller
// owns the returned fd.
//
// It opens first and checks the file it got (through /proc/self), so that
// the fd number cannot be reused between the check and the open.
func OpenFD(r Ref) (int, error) {
	src := fmt.Sprintf("/proc/%d/fd/%d", r.PID, r.FD)
	fd, err := unix.Open(src, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
			return -1, fmt.Errorf("%w: allocation %d: %s is gone (freed, or its simulator exited)", sdk.ErrStaleHandle, r.ID, src)
		}
		return -1, fmt.Errorf("open allocation %d through %s: %w", r.ID, src, err)
	}
	link, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("read what %s is: %w", src, err)
	}
	// A memfd reads "/memfd:NAME (deleted)".
	want := "/memfd:" + MemfdName(r.ID) + " "
	if !strings.HasPrefix(link+" ", want) {
		unix.Close(fd)
		return -1, fmt.Errorf("%w: allocation %d: %s is now %q, not its memfd (the allocation was freed)", sdk.ErrStaleHandle, r.ID, src, link)
	}
	return fd, nil
}

// Create makes allocation id's memfd of size bytes, named and sealed as
// the layout says: what plugins/simdev allocates with, and what a test
// makes a handle of without a simulator. The caller owns the fd.
func Create(id uint64, size int64) (int, error) {
	fd, err := unix.MemfdCreate(MemfdName(id), unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("simmem: create memfd %s: %w", MemfdName(id), err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("simmem: size memfd %s to %d bytes: %w", MemfdName(id), size, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("simmem: seal memfd %s: %w", MemfdName(id), err)
	}
	return fd, nil
}

// Mapping is a HandleSim's range mapped in this process.
type Mapping struct {
	m *shm.Mapping
}

// Open maps exactly the range h covers (h.Offset, h.Length), read-write.
// A handle of a freed allocation fails with an error wrapping
// sdk.ErrStaleHandle. The mapping stays valid after the allocation is
// freed, until Close.
func Open(h sdk.Handle) (*Mapping, error) {
	if h.Type != sdk.HandleSim {
		return nil, fmt.Errorf("simmem: a %q handle is not a simulated device's (%q)", h.Type, sdk.HandleSim)
	}
	if err := h.Check(); err != nil {
		return nil, fmt.Errorf("simmem: %w", err)
	}
	r, err := Decode(h.Data)
	if err != nil {
		return nil, fmt.Errorf("simmem: %w", err)
	}
	fd, err := OpenFD(r)
	if err != nil {
		return nil, fmt.Errorf("simmem: %w", err)
	}
	defer unix.Close(fd) // the mapping outlives it
	m, err := MapFD(fd, h)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// MapFD maps the range h covers of fd, an allocation's memfd (OpenFD's,
// or the simulator's own), read-write. The caller may close fd once it
// returns.
func MapFD(fd int, h sdk.Handle) (*Mapping, error) {
	if h.Length > 1<<46 || h.Offset > 1<<46 {
		return nil, fmt.Errorf("simmem: handle range offset %d length %d is too large", h.Offset, h.Length)
	}
	m, err := shm.Map(fd, int64(h.Offset), int(h.Length), true)
	if err != nil {
		return nil, fmt.Errorf("simmem: map allocation range [%d, %d): %w", h.Offset, h.Offset+h.Length, err)
	}
	return &Mapping{m: m}, nil
}

// Bytes returns the mapped range: exactly the handle's. It is nil after
// Close.
func (m *Mapping) Bytes() []byte { return m.m.Mem() }

// Close unmaps the range. It is idempotent.
func (m *Mapping) Close() error { return m.m.Close() }
