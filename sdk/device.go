package sdk

import (
	"context"
	"errors"
	"fmt"
)

// Device is what a device plugin implements: devices/cuda, devices/rocm,
// and plugins/simdev, the simulated device CI tests with. A vendor reads
// this file to know what to write; ServeDevice does the rest (go-plugin
// handshake, gRPC control plane, fd passing for host memory, host
// liveness), as ServeTransport does for transports.
//
// A device plugin runs in its own process, like a transport: the host
// links no vendor library. Device memory crosses processes as exported
// handles (Handle): the application's memory reaches the plugin through
// one, and a peer on the same machine (plugins/nvlink) imports the handle
// the engine publishes. The plugin never touches memory it was not given:
// a device range the host imported, an allocation of its own, or a host
// region the host registered.
//
// Control methods are called from gRPC handlers, possibly concurrently.
// The data path is Copy: it must not block; the plugin reports each
// copy's outcome exactly once through the Completer, from any goroutine.
type Device interface {
	// Describe says what the plugin is. It must work before Start.
	Describe(ctx context.Context) (DeviceInfo, error)

	// Probe says whether the driver and a device are present. Without
	// them the plugin answers Available=false with the reason ("libcuda.so.1
	// not found"), and the host runs on without it. The host calls it
	// after Start, whose config may name the driver (a library path):
	// Probe answers for what Start configured, even when Start failed
	// because the driver is missing.
	Probe(ctx context.Context) (ProbeResult, error)

	// Start configures the plugin for one engine. Config is the device
	// block's config body (DecodeConfig); Endpoint-free: a device serves
	// no peers of its own.
	Start(ctx context.Context, cfg StartConfig) error

	// Devices lists the devices the plugin drives, in index order.
	Devices(ctx context.Context) ([]DeviceAttr, error)

	// Identify tells whether [addr, addr+length) of process pid (the
	// engine's application) is memory of one of this plugin's devices,
	// and returns the device and a handle that exports the range. It
	// returns an error wrapping ErrNotDevice when the range is not device
	// memory, or not all of it, and one wrapping ErrCannotIdentify when
	// the plugin cannot look into another process's pointers (a CUDA
	// pointer is only known to the process whose context made it): the
	// application then exports the range itself and registers the handle.
	Identify(ctx context.Context, pid int, addr, length uint64) (Identity, error)

	// Allocate makes size bytes of device memory on device dev, owned by
	// the plugin until Free, and exports it. Addr is the allocation's
	// address as the plugin's device sees it: what Identify and Free take.
	Allocate(ctx context.Context, dev int, size uint64) (Allocation, error)

	// Free releases an allocation of Allocate. Handles of it stop opening
	// (ErrStaleHandle); mappings already imported stay valid until their
	// Unimport, as a driver keeps an allocation alive while it is mapped.
	Free(ctx context.Context, addr uint64) error

	// Import opens h, a handle exported by this plugin or by the
	// application's own driver in another process, and names the range
	// it covers (h.Offset, h.Length) region from now on: Copy takes it.
	// A handle of a freed allocation fails with ErrStaleHandle, one of a
	// device this plugin does not drive with ErrNoDevice.
	Import(ctx context.Context, region uint32, h Handle) error

	// Unimport forgets a region of Import. After it returns the plugin
	// must not touch the range again.
	Unimport(ctx context.Context, region uint32) error

	// RegisterHost makes a host region (memory of Engine.Allocate: r.Mem
	// is mapped by the SDK, r.FD is its memfd) known to the plugin and
	// ready for DMA (cuMemHostRegister, hipHostRegister): Copy takes it.
	RegisterHost(ctx context.Context, r Region) error

	// UnregisterHost forgets a host region; after it returns the plugin
	// must not touch it.
	UnregisterHost(ctx context.Context, region uint32) error

	// Copy starts one copy between two regions the plugin knows (device
	// to host, host to device, device to device). It must not block:
	// queue the work and return. The plugin calls done.Complete exactly
	// once per copy with c.Token, also on failure: StatusInvalid for a
	// region it does not know or a range out of bounds, StatusIO for a
	// driver failure. Over gRPC the SDK answers the host's batch once
	// every copy of it completed.
	Copy(c DeviceCopy, done Completer)

	// Stop ends all work: copies in flight complete (StatusShutdown for
	// those not started) before it returns, and every import, allocation
	// and host registration is released.
	Stop(ctx context.Context) error
}

// KindDevice is the go-plugin plugin-set key for device plugins.
const KindDevice = "device"

// DeviceInfo describes a device plugin.
type DeviceInfo struct {
	Name    string     // "cuda"
	Version string     // the plugin's own version
	Kind    MemoryKind // the memory its devices hold: MemoryCUDA, MemoryROCm
	// Handles are the handle types the plugin exports and imports, the
	// one it prefers first (HandleCUDAFD before HandleCUDAIPC).
	Handles []HandleType
	// Simulated is true for a device that is not hardware (plugins/simdev):
	// `ferry status` and explanations say so.
	Simulated bool
}

// DeviceAttr is one device.
type DeviceAttr struct {
	Index    int
	Name     string // "NVIDIA H200"
	UUID     string // "GPU-8f3a..."
	PCIBusID string // "0000:19:00.0"
	NUMANode int    // -1 when unknown
	Memory   uint64 // bytes of device memory
	// Peers are the indexes of the devices this one reaches directly
	// (NVLink, XGMI, PCIe peer access), and Link what reaches them
	// ("nvlink", "xgmi", "pcie").
	Peers []int
	Link  string
}

// HandleType names how a device range is exported.
type HandleType string

// Handle types.
const (
	// HandleCUDAFD is a VMM allocation's POSIX file descriptor
	// (cuMemExportToShareableHandle), carried as the exporting process's
	// pid and fd number and taken with pidfd_getfd: 0.24 ms to open.
	HandleCUDAFD HandleType = "cuda-fd"
	// HandleCUDAIPC is a legacy CUDA IPC handle (cuIpcGetMemHandle), 64
	// bytes, for cudaMalloc memory (PyTorch's caching allocator): 142 ms to
	// open, so importers cache the opens.
	HandleCUDAIPC HandleType = "cuda-ipc"
	// HandleHIPIPC is a HIP IPC handle (hipIpcGetMemHandle).
	HandleHIPIPC HandleType = "hip-ipc"
	// HandleSim is a simulated device's allocation: its memfd, named by
	// the simulating process's pid, fd number and allocation id.
	HandleSim HandleType = "sim"
)

// Handle exports a range of one device allocation to other processes. Data
// is opaque to everyone but the plugins that import this Type.
type Handle struct {
	Type   HandleType
	Device int    // the exporting device's index
	Data   []byte // the handle itself (IPC handle bytes, pid and fd)
	Size   uint64 // bytes of the whole exported allocation
	Offset uint64 // where the range starts within the allocation
	Length uint64 // the range's length
}

// Check reports what is wrong with h before any plugin opens it.
func (h Handle) Check() error {
	switch {
	case h.Type == "":
		return errors.New("handle has no type")
	case len(h.Data) == 0:
		return fmt.Errorf("%s handle has no data", h.Type)
	case h.Length == 0:
		return fmt.Errorf("%s handle covers no bytes", h.Type)
	case h.Offset > h.Size || h.Length > h.Size-h.Offset:
		return fmt.Errorf("%s handle range [%d, %d) is outside its allocation of %d bytes", h.Type, h.Offset, h.Offset+h.Length, h.Size)
	}
	return nil
}

// Identity is what Identify found: the device, and a handle for the range.
type Identity struct {
	Device int
	Handle Handle // covers exactly the range asked for
}

// Allocation is device memory a plugin allocated with Allocate.
type Allocation struct {
	Device int
	Addr   uint64 // the allocation's device address, as the plugin sees it
	Size   uint64
	Handle Handle // exports the whole allocation
}

// DeviceCopy is one copy of Length bytes from Src to Dst, both regions the
// plugin knows (Import or RegisterHost).
type DeviceCopy struct {
	Token    uint64
	Src, Dst MemRef
	Length   uint64
}

// MemRef is a place in a region.
type MemRef struct {
	Region uint32
	Offset uint64
}

// Errors of device plugins. A plugin wraps them with what it found
// (fmt.Errorf("%w: ...")); they cross the plugin boundary as gRPC codes and
// arrive at the host wrapped the same way.
var (
	// ErrNotDevice: the range is not device memory of this plugin.
	ErrNotDevice = errors.New("not device memory")
	// ErrCannotIdentify: the plugin cannot look into another process's
	// pointers; the application must export the range and pass the handle.
	ErrCannotIdentify = errors.New("cannot identify another process's pointers")
	// ErrNoDevice: no device of that index.
	ErrNoDevice = errors.New("no such device")
	// ErrStaleHandle: the handle's allocation was freed (or its exporter
	// is gone).
	ErrStaleHandle = errors.New("handle of a freed allocation")
)
