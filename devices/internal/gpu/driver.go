package gpu

import (
	"fmt"

	"github.com/ferrydev/ferry/sdk"
)

// Driver is one vendor library's binding. Load, Count, Describe and Peer
// run on a locked probe goroutine; every other method runs on a goroutine
// locked to a thread where Bind made the device current. A Driver need
// not be safe for concurrent use by one thread; different devices' threads
// call it at the same time.
type Driver interface {
	// Load opens the library at path ("" for the default) and
	// initializes it. Its error is Probe's reason, as the operator reads
	// it: "libcuda.so.1 not found: <dlerror>", "cuInit failed: ...".
	// Loading twice is cheap.
	Load(path string) error
	// Count says how many devices the library sees.
	Count() (int, error)
	// Describe fills Name, UUID, PCIBusID and Memory of device dev.
	Describe(dev int) (sdk.DeviceAttr, error)
	// Peer says whether dev reaches peer directly and over what link
	// ("nvlink", "xgmi", "pcie").
	Peer(dev, peer int) (ok bool, link string, err error)

	// Bind makes dev current on the calling thread; Release undoes what
	// the first Bind retained, once, after all of dev's work ended.
	Bind(dev int) error
	Release(dev int) error

	NewStream() (Stream, error)
	DestroyStream(Stream) error
	// NewEvent makes an event that Wait can block on without spinning.
	NewEvent() (Event, error)
	DestroyEvent(Event) error
	// CopyAsync queues a copy of n bytes from src to dst (unified
	// addresses: host or device) on s.
	CopyAsync(dst, src, n uint64, s Stream) error
	// Record queues e on s; Wait blocks until e happened and returns the
	// error of any work before it that failed.
	Record(e Event, s Stream) error
	Wait(e Event) error

	// RegisterHost pins [addr, addr+n) of this process for DMA from
	// every device; UnregisterHost undoes it.
	RegisterHost(addr, n uint64) error
	UnregisterHost(addr uint64) error

	// Allocate makes size bytes on dev (rounded up as the driver must)
	// and exports them; Memory.Handle covers the whole allocation.
	Allocate(dev int, size uint64) (Memory, error)
	// Open maps the allocation h names into this process on dev.
	// Memory.Addr is the allocation's start: h.Offset is added by the
	// caller. An allocation that was freed fails with an error wrapping
	// sdk.ErrStaleHandle.
	Open(dev int, h sdk.Handle) (Memory, error)
	// Cached says whether opens of handles of type t are kept and shared
	// by every region that names the same handle bytes (legacy IPC: one
	// open per allocation per process), rather than opened per region.
	Cached(t sdk.HandleType) bool
}

// Stream and Event are a driver's opaque stream and event pointers.
type (
	Stream uintptr
	Event  uintptr
)

// Memory is device memory mapped in this process: an allocation of
// Allocate or an opened handle. Free unmaps (and for an allocation,
// releases) it; it runs on the device's worker.
type Memory struct {
	Addr   uint64
	Size   uint64
	Handle sdk.Handle // Allocate's export; zero for Open
	Free   func() error
}

// DriverError is a failed driver call, named as the driver names it
// (cuGetErrorName, hipGetErrorName).
type DriverError struct {
	Call string // "cuMemcpyAsync"
	Code int
	Name string // "CUDA_ERROR_ILLEGAL_ADDRESS"
}

func (e *DriverError) Error() string {
	return fmt.Sprintf("%s failed: %s (%d)", e.Call, e.Name, e.Code)
}
