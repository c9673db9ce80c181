package simmem_test

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/plugins/simdev/simmem"
	"github.com/ferrydev/ferry/sdk"
)

// allocation makes allocation id's memfd of size bytes in this process and
// a handle of [off, off+length) of it.
func allocation(t *testing.T, id uint64, size, off, length uint64) (int, sdk.Handle) {
	t.Helper()
	fd, err := simmem.Create(id, int64(size))
	if err != nil {
		t.Fatal(err)
	}
	h := sdk.Handle{
		Type: sdk.HandleSim, Data: simmem.Encode(simmem.Ref{PID: os.Getpid(), FD: fd, ID: id}),
		Size: size, Offset: off, Length: length,
	}
	return fd, h
}

func TestOpenSeesTheSameBytes(t *testing.T) {
	fd, whole := allocation(t, 7, 1<<16, 0, 1<<16)
	defer unix.Close(fd)
	part := whole
	part.Offset, part.Length = 5000, 3000 // not page aligned
	a, err := simmem.Open(whole)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := simmem.Open(part)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if len(b.Bytes()) != 3000 {
		t.Fatalf("mapping of a 3000-byte range is %d bytes", len(b.Bytes()))
	}
	copy(b.Bytes(), bytes.Repeat([]byte{0xab}, 3000))
	if got := a.Bytes()[5000:8000]; !bytes.Equal(got, b.Bytes()) || a.Bytes()[4999] != 0 || a.Bytes()[8000] != 0 {
		t.Fatal("a write through the range's mapping is not where the handle says in the whole allocation")
	}
}

func TestOpenRefusesAFreedAllocation(t *testing.T) {
	fd, h := allocation(t, 8, 4096, 0, 4096)
	m, err := simmem.Open(h)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	unix.Close(fd) // freed
	if _, err := simmem.Open(h); !errors.Is(err, sdk.ErrStaleHandle) {
		t.Fatalf("open of a freed allocation: %v, want ErrStaleHandle", err)
	}
	// Another allocation that reuses the fd number is not this one.
	fd2, _ := allocation(t, 9, 4096, 0, 4096)
	defer unix.Close(fd2)
	if fd2 != fd {
		t.Logf("fd %d was not reused (got %d); the reuse case is not exercised", fd, fd2)
	}
	if _, err := simmem.Open(h); !errors.Is(err, sdk.ErrStaleHandle) {
		t.Fatalf("open of a freed allocation whose fd number was reused: %v, want ErrStaleHandle", err)
	}
	m.Bytes()[0] = 1 // the mapping outlives the allocation
}

func TestDecodeRefusesMalformedData(t *testing.T) {
	for _, data := range [][]byte{nil, make([]byte, 15), make([]byte, 17), make([]byte, 16)} {
		if _, err := simmem.Decode(data); err == nil {
			t.Errorf("Decode(%x) accepted", data)
		}
	}
	r := simmem.Ref{PID: 42, FD: 9, ID: 1<<40 + 3}
	if got, err := simmem.Decode(simmem.Encode(r)); err != nil || got != r {
		t.Fatalf("Decode(Encode(%+v)) = %+v, %v", r, got, err)
	}
}

func TestOpenRefusesAnotherHandleType(t *testing.T) {
	fd, h := allocation(t, 10, 4096, 0, 4096)
	defer unix.Close(fd)
	h.Type = sdk.HandleCUDAFD
	if _, err := simmem.Open(h); err == nil {
		t.Fatal("Open took a cuda-fd handle")
	}
}
