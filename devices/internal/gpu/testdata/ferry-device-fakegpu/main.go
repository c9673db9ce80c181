// Command ferry-device-fakegpu serves devices/internal/gpu, the core
// devices/cuda and devices/rocm share, over a FAKE driver written in Go:
// two "devices" whose memory is memfds mapped in this process, copies
// that are memmoves done at once, events that are always complete. It is
// a test tool (gpu's conformance test runs the device suite against it),
// so that the core's worker, streams, imports, own allocations and
// refusals are checked through the whole plugin protocol without a vendor
// library. A handle is this process's pid, the memfd's fd and the
// allocation's id, which names the memfd: another process opens it
// through /proc, and a freed allocation's handle does not open.
package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/devices/internal/gpu"
	"github.com/ferrydev/ferry/sdk"
)

// handleFake is the FAKE driver's handle type.
const handleFake sdk.HandleType = "fake-gpu"

const devices = 2

func main() {
	sdk.ServeDevice(gpu.New(sdk.DeviceInfo{Name: "fakegpu", Version: "0.0.1", Kind: sdk.MemoryCUDA, Handles: []sdk.HandleType{handleFake}, Simulated: true},
		&fake{}, gpu.WithLogger(sdk.NewLogger(""))))
}

// fake is the FAKE driver.
type fake struct {
	ids  atomic.Uint64
	next atomic.Uintptr // stream and event numbers
	mu   sync.Mutex
	host map[uint64]bool // registered host memory, by address
}

func fail(call, name string) error { return &gpu.DriverError{Call: call, Code: 1, Name: name} }

func (f *fake) Load(string) error   { return nil }
func (f *fake) Count() (int, error) { return devices, nil }
func (f *fake) Describe(dev int) (sdk.DeviceAttr, error) {
	return sdk.DeviceAttr{Index: dev, Name: fmt.Sprintf("FAKE GPU %d", dev), UUID: fmt.Sprintf("GPU-fake-%d", dev), NUMANode: -1, Memory: 1 << 30}, nil
}
func (f *fake) Peer(dev, peer int) (bool, string, error) { return true, "pcie", nil }
func (f *fake) Bind(int) error                           { return nil }
func (f *fake) Release(int) error                        { return nil }
func (f *fake) NewStream() (gpu.Stream, error)           { return gpu.Stream(f.next.Add(1)), nil }
func (f *fake) DestroyStream(gpu.Stream) error           { return nil }
func (f *fake) NewEvent() (gpu.Event, error)             { return gpu.Event(f.next.Add(1)), nil }
func (f *fake) DestroyEvent(gpu.Event) error             { return nil }
func (f *fake) Record(gpu.Event, gpu.Stream) error       { return nil }
func (f *fake) Wait(gpu.Event) error                     { return nil }
func (f *fake) Cached(sdk.HandleType) bool               { return false }

// CopyAsync copies at once: the core has checked both ranges against
// memory it knows (mapped here), which is what this checks it did.
func (f *fake) CopyAsync(dst, src, n uint64, _ gpu.Stream) error {
	copy(unsafe.Slice((*byte)(unsafe.Pointer(uintptr(dst))), n), unsafe.Slice((*byte)(unsafe.Pointer(uintptr(src))), n))
	return nil
}

func (f *fake) RegisterHost(addr, n uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.host == nil {
		f.host = make(map[uint64]bool)
	}
	f.host[addr] = true
	return nil
}

func (f *fake) UnregisterHost(addr uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.host[addr] {
		return fail("fakeHostUnregister", "FAKE_ERROR_NOT_REGISTERED")
	}
	delete(f.host, addr)
	return nil
}

func memfdName(id uint64) string { return "fakegpu-" + strconv.FormatUint(id, 10) }

func (f *fake) Allocate(dev int, size uint64) (gpu.Memory, error) {
	id := f.ids.Add(1)
	fd, err := unix.MemfdCreate(memfdName(id), unix.MFD_CLOEXEC)
	if err != nil {
		return gpu.Memory{}, fail("fakeMalloc", err.Error())
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return gpu.Memory{}, fail("fakeMalloc", err.Error())
	}
	m, err := mapFD(fd, size)
	if err != nil {
		unix.Close(fd)
		return gpu.Memory{}, err
	}
	data := make([]byte, 16)
	binary.LittleEndian.PutUint32(data[0:], uint32(os.Getpid()))
	binary.LittleEndian.PutUint32(data[4:], uint32(fd))
	binary.LittleEndian.PutUint64(data[8:], id)
	return gpu.Memory{Addr: addr(m), Size: size, Handle: sdk.Handle{Type: handleFake, Device: dev, Data: data, Size: size, Length: size},
		Free: func() error { unix.Close(fd); return unix.Munmap(m) }}, nil
}

// Open maps a handle's allocation, of this process or another, through
// /proc: the fd must still name the allocation's memfd.
func (f *fake) Open(dev int, h sdk.Handle) (gpu.Memory, error) {
	if h.Type != handleFake || len(h.Data) != 16 {
		return gpu.Memory{}, fail("fakeIpcOpen", "FAKE_ERROR_INVALID_HANDLE")
	}
	pid, rfd, id := binary.LittleEndian.Uint32(h.Data[0:]), binary.LittleEndian.Uint32(h.Data[4:]), binary.LittleEndian.Uint64(h.Data[8:])
	path := fmt.Sprintf("/proc/%d/fd/%d", pid, rfd)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return gpu.Memory{}, fmt.Errorf("%w: %w", sdk.ErrStaleHandle, fail("fakeIpcOpen", err.Error()))
	}
	defer unix.Close(fd)
	link, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil || link != "/memfd:"+memfdName(id)+" (deleted)" {
		return gpu.Memory{}, fmt.Errorf("%w: %w", sdk.ErrStaleHandle, fail("fakeIpcOpen", "FAKE_ERROR_FREED"))
	}
	m, err := mapFD(fd, h.Size)
	if err != nil {
		return gpu.Memory{}, err
	}
	return gpu.Memory{Addr: addr(m), Size: h.Size, Free: func() error { return unix.Munmap(m) }}, nil
}

func mapFD(fd int, size uint64) ([]byte, error) {
	m, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fail("fakeMap", err.Error())
	}
	return m, nil
}

func addr(m []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(m)))) }
