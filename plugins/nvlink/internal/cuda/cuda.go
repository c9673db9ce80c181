//go:build linux && cgo

package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemHandle;
typedef struct { char reserved[64]; } CUipcMemHandle;
typedef struct { int type; int id; } CUmemLocation;
typedef struct { CUmemLocation location; int flags; } CUmemAccessDesc;

static struct {
	void *lib;
	CUresult (*cuInit)(unsigned);
	CUresult (*cuDriverGetVersion)(int *);
	CUresult (*cuDeviceGetCount)(int *);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
	CUresult (*cuCtxPushCurrent)(CUcontext);
	CUresult (*cuCtxPopCurrent)(CUcontext *);
	CUresult (*cuGetErrorString)(CUresult, const char **);
	CUresult (*cuStreamCreate)(CUstream *, unsigned);
	CUresult (*cuStreamDestroy)(CUstream);
	CUresult (*cuStreamSynchronize)(CUstream);
	CUresult (*cuMemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
	CUresult (*cuIpcOpenMemHandle)(CUdeviceptr *, CUipcMemHandle, unsigned);
	CUresult (*cuIpcCloseMemHandle)(CUdeviceptr);
	CUresult (*cuMemImportFromShareableHandle)(CUmemHandle *, void *, int);
	CUresult (*cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*cuMemAddressFree)(CUdeviceptr, size_t);
	CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemHandle, unsigned long long);
	CUresult (*cuMemUnmap)(CUdeviceptr, size_t);
	CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*cuMemRelease)(CUmemHandle);
	CUresult (*cuMemHostRegister)(void *, size_t, unsigned);
	CUresult (*cuMemHostUnregister)(void *);
} cu;

// ferry_cu_load opens libcuda and resolves every symbol; it returns the
// name of the first one missing, or NULL.
static const char *ferry_cu_load(void) {
	cu.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!cu.lib) return "libcuda.so.1";
#define SYM(f, n) if (!(*(void **)&cu.f = dlsym(cu.lib, n))) return n;
	SYM(cuInit, "cuInit")
	SYM(cuDriverGetVersion, "cuDriverGetVersion")
	SYM(cuDeviceGetCount, "cuDeviceGetCount")
	SYM(cuDeviceGet, "cuDeviceGet")
	SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")
	SYM(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2")
	SYM(cuCtxPushCurrent, "cuCtxPushCurrent_v2")
	SYM(cuCtxPopCurrent, "cuCtxPopCurrent_v2")
	SYM(cuGetErrorString, "cuGetErrorString")
	SYM(cuStreamCreate, "cuStreamCreate")
	SYM(cuStreamDestroy, "cuStreamDestroy_v2")
	SYM(cuStreamSynchronize, "cuStreamSynchronize")
	SYM(cuMemcpyAsync, "cuMemcpyAsync")
	SYM(cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2")
	SYM(cuIpcCloseMemHandle, "cuIpcCloseMemHandle")
	SYM(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle")
	SYM(cuMemAddressReserve, "cuMemAddressReserve")
	SYM(cuMemAddressFree, "cuMemAddressFree")
	SYM(cuMemMap, "cuMemMap")
	SYM(cuMemUnmap, "cuMemUnmap")
	SYM(cuMemSetAccess, "cuMemSetAccess")
	SYM(cuMemRelease, "cuMemRelease")
	SYM(cuMemHostRegister, "cuMemHostRegister_v2")
	SYM(cuMemHostUnregister, "cuMemHostUnregister")
#undef SYM
	return NULL;
}

static const char *ferry_cu_dlerror(void) { return dlerror(); }

static const char *ferry_cu_errstr(CUresult r) {
	const char *s = NULL;
	if (cu.cuGetErrorString(r, &s) != 0 || !s) return "unknown CUDA error";
	return s;
}

static CUresult ferry_cu_init(int *version, int *count) {
	CUresult r = cu.cuInit(0);
	if (r) return r;
	if ((r = cu.cuDriverGetVersion(version))) return r;
	return cu.cuDeviceGetCount(count);
}

static CUresult ferry_cu_retain(int ordinal, CUcontext *ctx, CUdevice *dev) {
	CUresult r = cu.cuDeviceGet(dev, ordinal);
	if (r) return r;
	return cu.cuDevicePrimaryCtxRetain(ctx, *dev);
}
static CUresult ferry_cu_release(CUdevice dev) { return cu.cuDevicePrimaryCtxRelease(dev); }
static CUresult ferry_cu_push(CUcontext c) { return cu.cuCtxPushCurrent(c); }
static CUresult ferry_cu_pop(void) { CUcontext c; return cu.cuCtxPopCurrent(&c); }
static CUresult ferry_cu_stream(CUstream *s) { return cu.cuStreamCreate(s, 1); } // CU_STREAM_NON_BLOCKING
static CUresult ferry_cu_stream_destroy(CUstream s) { return cu.cuStreamDestroy(s); }

static CUresult ferry_cu_copy(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
	CUresult r = cu.cuMemcpyAsync(dst, src, n, s);
	if (r) return r;
	return cu.cuStreamSynchronize(s);
}

static CUresult ferry_cu_ipc_open(const void *handle, CUdeviceptr *p) {
	CUipcMemHandle h;
	memcpy(h.reserved, handle, sizeof h.reserved);
	return cu.cuIpcOpenMemHandle(p, h, 1); // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
}
static CUresult ferry_cu_ipc_close(CUdeviceptr p) { return cu.cuIpcCloseMemHandle(p); }

// ferry_cu_fd_import maps the VMM allocation exported as fd (size bytes,
// granularity-aligned by its exporter) readable and writable by device
// ordinal dev.
static CUresult ferry_cu_fd_import(int fd, size_t size, int dev, CUdeviceptr *p) {
	CUmemHandle h;
	CUresult r = cu.cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd, 1); // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
	if (r) return r;
	if ((r = cu.cuMemAddressReserve(p, size, 0, 0, 0))) { cu.cuMemRelease(h); return r; }
	if ((r = cu.cuMemMap(*p, size, 0, h, 0))) { cu.cuMemAddressFree(*p, size); cu.cuMemRelease(h); return r; }
	cu.cuMemRelease(h); // the mapping keeps the allocation
	CUmemAccessDesc d = {{1, dev}, 3}; // CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_ACCESS_FLAGS_PROT_READWRITE
	if ((r = cu.cuMemSetAccess(*p, size, &d, 1))) { cu.cuMemUnmap(*p, size); cu.cuMemAddressFree(*p, size); return r; }
	return 0;
}
static CUresult ferry_cu_fd_unmap(CUdeviceptr p, size_t size) {
	CUresult r = cu.cuMemUnmap(p, size);
	CUresult r2 = cu.cuMemAddressFree(p, size);
	return r ? r : r2;
}

static CUresult ferry_cu_host_register(void *p, size_t n, int ro) { return cu.cuMemHostRegister(p, n, 1 | 2 | (ro ? 8 : 0)); } // PORTABLE | DEVICEMAP | READ_ONLY
static CUresult ferry_cu_host_unregister(void *p) { return cu.cuMemHostUnregister(p); }
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// Error is a driver call that failed.
type Error struct {
	Call string
	Code int
	Text string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: CUDA error %d (%s)", e.Call, e.Code, e.Text) }

func check(call string, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	return &Error{Call: call, Code: int(r), Text: C.GoString(C.ferry_cu_errstr(r))}
}

var (
	loadOnce sync.Once
	loaded   *Driver
	loadErr  error
)

// Driver is the loaded libcuda.
type Driver struct {
	Version int // cuDriverGetVersion: 13000 is CUDA 13.0
	Devices int
}

// Load opens libcuda.so.1 once and initialises the driver. It fails with
// the reason (no library, a symbol missing, cuInit's error, no device).
func Load() (*Driver, error) {
	loadOnce.Do(func() {
		if missing := C.ferry_cu_load(); missing != nil {
			what := C.GoString(missing)
			if what == "libcuda.so.1" {
				loadErr = fmt.Errorf("libcuda.so.1 not found: %s", C.GoString(C.ferry_cu_dlerror()))
			} else {
				loadErr = fmt.Errorf("libcuda.so.1 lacks %s (driver too old)", what)
			}
			return
		}
		var v, n C.int
		if err := check("cuInit", C.ferry_cu_init(&v, &n)); err != nil {
			loadErr = err
			return
		}
		if n == 0 {
			loadErr = fmt.Errorf("the CUDA driver %d sees no device", int(v))
			return
		}
		loaded = &Driver{Version: int(v), Devices: int(n)}
	})
	return loaded, loadErr
}

// Context is a device's primary context, retained.
type Context struct {
	ordinal int
	ctx     C.CUcontext
	dev     C.CUdevice
}

// Retain retains device ordinal's primary context.
func (d *Driver) Retain(ordinal int) (*Context, error) {
	if ordinal < 0 || ordinal >= d.Devices {
		return nil, fmt.Errorf("device %d: the driver sees %d", ordinal, d.Devices)
	}
	c := &Context{ordinal: ordinal}
	if err := check("cuDevicePrimaryCtxRetain", C.ferry_cu_retain(C.int(ordinal), &c.ctx, &c.dev)); err != nil {
		return nil, err
	}
	return c, nil
}

// Release releases the primary context.
func (c *Context) Release() error {
	return check("cuDevicePrimaryCtxRelease", C.ferry_cu_release(c.dev))
}

// Do runs f with c current on this goroutine's OS thread, and pops it
// after.
func (c *Context) Do(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := check("cuCtxPushCurrent", C.ferry_cu_push(c.ctx)); err != nil {
		return err
	}
	defer C.ferry_cu_pop()
	return f()
}

// HostPointer is b's address, which a copy takes for registered host
// memory (unified addressing).
func HostPointer(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

// Ordinal is the device's index.
func (c *Context) Ordinal() int { return c.ordinal }

// Stream is a CUDA stream (non-blocking). Call its methods inside Do.
type Stream struct{ s C.CUstream }

// NewStream creates a stream in the current context.
func NewStream() (*Stream, error) {
	s := &Stream{}
	if err := check("cuStreamCreate", C.ferry_cu_stream(&s.s)); err != nil {
		return nil, err
	}
	return s, nil
}

// Destroy destroys the stream.
func (s *Stream) Destroy() error { return check("cuStreamDestroy", C.ferry_cu_stream_destroy(s.s)) }

// Copy copies n bytes from src to dst (device pointers, or registered
// host memory through unified addressing) on s and waits for them.
func (s *Stream) Copy(dst, src uint64, n uint64) error {
	return check("cuMemcpyAsync", C.ferry_cu_copy(C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n), s.s))
}

// IPCHandleLen is the length of a legacy IPC handle.
const IPCHandleLen = 64

// OpenIPC opens a legacy IPC handle (current context) and returns the
// allocation's base address.
func OpenIPC(handle []byte) (uint64, error) {
	if len(handle) != IPCHandleLen {
		return 0, fmt.Errorf("a CUDA IPC handle is %d bytes, not %d", IPCHandleLen, len(handle))
	}
	var p C.CUdeviceptr
	h := C.CBytes(handle)
	defer C.free(h)
	if err := check("cuIpcOpenMemHandle", C.ferry_cu_ipc_open(h, &p)); err != nil {
		return 0, err
	}
	return uint64(p), nil
}

// CloseIPC closes what OpenIPC opened.
func CloseIPC(p uint64) error {
	return check("cuIpcCloseMemHandle", C.ferry_cu_ipc_close(C.CUdeviceptr(p)))
}

// ImportFD maps the VMM allocation exported as fd (size bytes) for device
// ordinal (current context) and returns its address. fd stays the
// caller's.
func ImportFD(fd int, size uint64, ordinal int) (uint64, error) {
	var p C.CUdeviceptr
	if err := check("cuMemImportFromShareableHandle", C.ferry_cu_fd_import(C.int(fd), C.size_t(size), C.int(ordinal), &p)); err != nil {
		return 0, err
	}
	return uint64(p), nil
}

// UnmapFD undoes ImportFD.
func UnmapFD(p, size uint64) error {
	return check("cuMemUnmap", C.ferry_cu_fd_unmap(C.CUdeviceptr(p), C.size_t(size)))
}

// HostRegister page-locks b for DMA (current context); readOnly for a
// mapping without write permission, which the device then only reads.
func HostRegister(b []byte, readOnly bool) error {
	if len(b) == 0 {
		return nil
	}
	ro := C.int(0)
	if readOnly {
		ro = 1
	}
	return check("cuMemHostRegister", C.ferry_cu_host_register(unsafe.Pointer(&b[0]), C.size_t(len(b)), ro))
}

// HostUnregister undoes HostRegister.
func HostUnregister(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return check("cuMemHostUnregister", C.ferry_cu_host_unregister(unsafe.Pointer(&b[0])))
}
