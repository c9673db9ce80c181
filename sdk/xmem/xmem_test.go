package xmem_test

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk/xmem"
)

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// TestReadWrite copies through this process's own address space, which
// the kernel allows without any grant.
func TestReadWrite(t *testing.T) {
	src := bytes.Repeat([]byte("ferry"), 100_000)
	dst := make([]byte, len(src))
	if err := xmem.Read(os.Getpid(), addrOf(src), dst); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, src) {
		t.Fatal("read bytes differ")
	}
	out := make([]byte, 4096)
	if err := xmem.Write(os.Getpid(), addrOf(out)+1, src[:4094]); err != nil {
		t.Fatal(err)
	}
	if out[0] != 0 || out[4095] != 0 || !bytes.Equal(out[1:4095], src[:4094]) {
		t.Fatal("write landed outside its range or wrong")
	}
}

// TestUnmappedFaults: a range that is, or runs into, unmapped memory fails
// with ErrFault, and a write touches nothing past the mapped part's end.
func TestUnmappedFaults(t *testing.T) {
	page := os.Getpagesize()
	m, err := unix.Mmap(-1, 0, 2*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.MunmapPtr(unsafe.Pointer(&m[0]), uintptr(page))
	base := addrOf(m)
	if err := unix.MunmapPtr(unsafe.Pointer(&m[page]), uintptr(page)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, page)
	if err := xmem.Read(os.Getpid(), base+uint64(page), buf); !errors.Is(err, xmem.ErrFault) {
		t.Errorf("read of unmapped memory: %v, want ErrFault", err)
	}
	if err := xmem.Read(os.Getpid(), base+uint64(page/2), buf); !errors.Is(err, xmem.ErrFault) {
		t.Errorf("read running into unmapped memory: %v, want ErrFault", err)
	}
	if err := xmem.Write(os.Getpid(), base+uint64(page), buf); !errors.Is(err, xmem.ErrFault) {
		t.Errorf("write to unmapped memory: %v, want ErrFault", err)
	}
}

// TestGoneProcess: a pid that does not exist is ErrGone.
func TestGoneProcess(t *testing.T) {
	var b [1]byte
	// pid_max is at most 2^22; this one cannot exist.
	if err := xmem.Read(1<<23, 4096, b[:]); !errors.Is(err, xmem.ErrGone) {
		t.Errorf("read of a process that does not exist: %v, want ErrGone", err)
	}
}

// TestCopyAllocatesNothing: the data path's copy costs no allocation.
func TestCopyAllocatesNothing(t *testing.T) {
	src, dst := make([]byte, 8192), make([]byte, 8192)
	pid, a := os.Getpid(), addrOf(src)
	if n := testing.AllocsPerRun(100, func() { _ = xmem.Read(pid, a, dst) }); n != 0 {
		t.Errorf("Read allocates %v times per call", n)
	}
}
