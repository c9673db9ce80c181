package shm

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestCreate(t *testing.T) {
	r, err := Create("ferry-test", 5000)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Size() != 5000 || len(r.Mem()) != 5000 || cap(r.Mem()) != 5000 {
		t.Fatalf("size %d, len %d, cap %d; want 5000", r.Size(), len(r.Mem()), cap(r.Mem()))
	}
	if r.Name() != "ferry-test" {
		t.Fatalf("name %q", r.Name())
	}
	for i, b := range r.Mem() {
		if b != 0 {
			t.Fatalf("byte %d = %#x, want zeroed memory", i, b)
		}
	}
	seals, err := unix.FcntlInt(uintptr(r.FD()), unix.F_GET_SEALS, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL; seals != want {
		t.Fatalf("seals %#x, want %#x", seals, want)
	}
	if err := unix.Ftruncate(r.FD(), 0); !errors.Is(err, unix.EPERM) {
		t.Fatalf("ftruncate of a sealed region: %v, want EPERM", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(r.FD(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != 8192 {
		t.Fatalf("file size %d, want 8192 (whole pages)", st.Size)
	}
	r.Mem()[4999] = 1 // the last byte is mapped
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if r.Mem() != nil || r.FD() != -1 {
		t.Fatalf("after Close: mem %v, fd %d", r.Mem() != nil, r.FD())
	}
}

func TestCreateInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
	}{
		{"zero", 0},
		{"negative", -1},
		{strings.Repeat("n", 250), 4096},
		{"nul\x00byte", 4096},
	} {
		if r, err := Create(tc.name, tc.size); err == nil {
			r.Close()
			t.Errorf("Create(%q, %d) succeeded", tc.name, tc.size)
		}
	}
}

func TestMapRefuses(t *testing.T) {
	region, err := Create("sealed", 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer region.Close()

	plain, err := unix.MemfdCreate("no-sealing", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(plain)
	unsealed, err := unix.MemfdCreate("sealable-unsealed", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(unsealed)
	shrinkOnly, err := unix.MemfdCreate("shrink-only", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(shrinkOnly)
	for _, fd := range []int{plain, unsealed, shrinkOnly} {
		if err := unix.Ftruncate(fd, 8192); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := unix.FcntlInt(uintptr(shrinkOnly), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		t.Fatal(err)
	}
	file, err := os.CreateTemp(t.TempDir(), "regular")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if err := file.Truncate(8192); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		fd   int
		off  int64
		size int
		want error // nil: any error
	}{
		{"memfd without sealing", plain, 0, 4096, ErrNotSealed},
		{"memfd not sealed", unsealed, 0, 4096, ErrNotSealed},
		{"memfd sealed against shrink only", shrinkOnly, 0, 4096, ErrNotSealed},
		{"regular file", int(file.Fd()), 0, 4096, ErrNotSealed},
		{"larger than the file", region.FD(), 0, 8193, ErrTooSmall},
		{"ends past the file", region.FD(), 4096, 4097, ErrTooSmall},
		{"starts past the file", region.FD(), 8192, 1, ErrTooSmall},
		{"negative offset", region.FD(), -1, 10, nil},
		{"zero size", region.FD(), 0, 0, nil},
		{"offset overflows", region.FD(), 1<<63 - 1, 10, nil},
		{"bad fd", -1, 0, 10, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Map(tc.fd, tc.off, tc.size, true)
			if err == nil {
				m.Close()
				t.Fatal("Map succeeded")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			t.Log(err)
		})
	}
}

func TestMapUnalignedOffset(t *testing.T) {
	region, err := Create("unaligned", 3*4096)
	if err != nil {
		t.Fatal(err)
	}
	defer region.Close()
	const off, size = 4096 + 100, 5000
	m, err := Map(region.FD(), off, size, true)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	mem := m.Mem()
	if len(mem) != size || cap(mem) != size {
		t.Fatalf("len %d cap %d, want %d", len(mem), cap(mem), size)
	}
	for i := range mem {
		mem[i] = pattern(i)
	}
	for i := range size {
		if got := region.Mem()[off+i]; got != pattern(i) {
			t.Fatalf("region byte %d = %#x, want %#x", off+i, got, pattern(i))
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestMapReadOnly(t *testing.T) {
	region, err := Create("readonly", 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer region.Close()
	region.Mem()[10] = 42
	m, err := Map(region.FD(), 0, 4096, false)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Writable() {
		t.Fatal("Writable() on a read-only mapping")
	}
	if got := m.Mem()[10]; got != 42 {
		t.Fatalf("read %d, want 42", got)
	}
	perms, err := mapsPerms(uintptr(unsafe.Pointer(&m.Mem()[0])))
	if err != nil {
		t.Fatal(err)
	}
	if perms != "r--s" {
		t.Fatalf("/proc/self/maps perms %q, want r--s", perms)
	}
	if !writeFaults(m.Mem()) {
		t.Fatal("a write to a read-only mapping did not fault")
	}
	if got := region.Mem()[10]; got != 42 {
		t.Fatalf("region byte changed to %d", got)
	}
}

// writeFaults writes to b[10] and reports whether the write faulted. The
// fault becomes a recoverable panic for this goroutine only.
func writeFaults(b []byte) (faulted bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if recover() != nil {
			faulted = true
		}
	}()
	b[10] = 7
	return false
}

// mapsPerms returns the permissions column of the /proc/self/maps line
// that contains addr.
func mapsPerms(addr uintptr) (string, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var lo, hi uintptr
		var perms string
		if _, err := fmt.Sscanf(sc.Text(), "%x-%x %s", &lo, &hi, &perms); err != nil {
			continue
		}
		if lo <= addr && addr < hi {
			return perms, nil
		}
	}
	return "", fmt.Errorf("address %#x not in /proc/self/maps", addr)
}

// TestTwoProcesses sends a region to a child process, which maps it and
// writes a pattern that the parent then reads through its own mapping.
func TestTwoProcesses(t *testing.T) {
	region, err := Create("two-process", testRegionSize)
	if err != nil {
		t.Fatal(err)
	}
	defer region.Close()
	hostEnd, childEnd, err := Socketpair()
	if err != nil {
		t.Fatal(err)
	}
	tx, err := NewFDSender(hostEnd)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	cmd := startChild(t, "write-pattern", childEnd)
	childEnd.Close()
	if err := tx.Send(7, region.FD()); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	for i, b := range region.Mem() {
		if b != pattern(i) {
			t.Fatalf("byte %d = %#x, want %#x", i, b, pattern(i))
		}
	}
}
