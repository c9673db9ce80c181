// Package cuda is Ferry's NVIDIA GPU device plugin (plugin "cuda"):
// sdk.Device over the CUDA driver API, loaded at run time with
// dlopen("libcuda.so.1") so that the plugin builds and runs where no CUDA
// is installed (Probe then says why it is unavailable). This package is
// only the binding (driverapi.go: the driver's few types and prototypes
// declared by hand, called through C trampolines); threads, streams,
// completions and tables are devices/internal/gpu's, shared with
// devices/rocm. Each device's primary context is retained once and made
// current on the device's worker and completion threads, each locked to
// its OS thread (the context is current per thread).
//
// Allocate is a VMM allocation (cuMemCreate, reserve, map, access for the
// device and its peers) exported as a POSIX fd (cuda-fd: 0.24 ms to
// import against 142 ms for legacy IPC, measured on an H200); the handle
// carries the exporter's pid and fd number, and an importer takes the fd
// with pidfd_open + pidfd_getfd. Import also opens legacy IPC handles
// (cuda-ipc, cudaMalloc memory such as PyTorch's), once per allocation,
// shared between regions. Copies are cuMemcpyAsync with unified
// addressing.
//
// Peers come from cuDeviceCanAccessPeer; the link is "nvlink" when the
// pair supports native atomics (cuDeviceGetP2PAttribute), "pcie"
// otherwise: a heuristic, as the driver API does not name the link.
package cuda
