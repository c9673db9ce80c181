package xmem

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Read copies len(dst) bytes from [addr, addr+len(dst)) of process pid
// into dst. It allocates nothing.
func Read(pid int, addr uint64, dst []byte) error {
	return copyLoop(pid, addr, dst, false)
}

// Write copies src to [addr, addr+len(src)) of process pid. It allocates
// nothing.
func Write(pid int, addr uint64, src []byte) error {
	return copyLoop(pid, addr, src, true)
}

// copyLoop moves b from or to the remote range, calling again after a
// short count: the kernel stops at the first page it cannot reach, and
// the next call then says why.
func copyLoop(pid int, addr uint64, b []byte, write bool) error {
	done := 0
	for done < len(b) {
		var local [1]unix.Iovec
		var remote [1]unix.RemoteIovec
		local[0].Base = (*byte)(unsafe.Pointer(&b[done]))
		local[0].SetLen(len(b) - done)
		remote[0] = unix.RemoteIovec{Base: uintptr(addr) + uintptr(done), Len: len(b) - done}
		var n int
		var err error
		if write {
			n, err = unix.ProcessVMWritev(pid, local[:], remote[:], 0)
		} else {
			n, err = unix.ProcessVMReadv(pid, local[:], remote[:], 0)
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return rangeErr(pid, addr+uint64(done), len(b)-done, write, err)
		}
		if n == 0 {
			return rangeErr(pid, addr+uint64(done), len(b)-done, write, unix.EFAULT)
		}
		done += n
	}
	return nil
}

func rangeErr(pid int, addr uint64, n int, write bool, err error) error {
	call := "process_vm_readv"
	if write {
		call = "process_vm_writev"
	}
	kind := err
	switch {
	case errors.Is(err, unix.EFAULT):
		kind = ErrFault
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		kind = ErrDenied
	case errors.Is(err, unix.ESRCH):
		kind = ErrGone
	case errors.Is(err, unix.ENOSYS):
		kind = ErrUnsupported
	}
	if kind == err {
		return fmt.Errorf("%s %d bytes at %#x of pid %d: %w", call, n, addr, pid, err)
	}
	return fmt.Errorf("%w: %s %d bytes at %#x of pid %d: %w", kind, call, n, addr, pid, err)
}
