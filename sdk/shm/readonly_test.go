package shm

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadOnly: the reopened fd is O_RDONLY, cannot be mapped writable and
// shared or written, and maps the same memory read-only.
func TestReadOnly(t *testing.T) {
	r, err := Create("ro", 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ro, err := ReadOnly(r.FD())
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ro)
	if fl, err := unix.FcntlInt(uintptr(ro), unix.F_GETFL, 0); err != nil || fl&unix.O_ACCMODE != unix.O_RDONLY {
		t.Fatalf("flags %#x (%v), want O_RDONLY", fl, err)
	}
	if m, err := unix.Mmap(ro, 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); !errors.Is(err, unix.EACCES) {
		if err == nil {
			unix.Munmap(m)
		}
		t.Fatalf("writable shared mapping of the read-only fd: %v, want EACCES", err)
	}
	if _, err := unix.Pwrite(ro, []byte{1}, 0); err == nil {
		t.Fatal("write through the read-only fd succeeded")
	}
	m, err := Map(ro, 0, 8192, false)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	r.Mem()[100] = 42
	if m.Mem()[100] != 42 {
		t.Fatal("the read-only mapping does not see the owner's write")
	}
	if _, err := ReadOnly(-1); err == nil {
		t.Fatal("ReadOnly(-1) succeeded")
	}
}
