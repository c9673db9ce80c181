package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// The few CUDA driver API types and prototypes this plugin calls,
// declared here with the driver's values (cuda.h, CUDA 12/13): no CUDA
// headers or toolkit are needed to build it.
typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct { char bytes[16]; } CUuuid;
typedef struct { char reserved[64]; } CUipcMemHandle;
typedef struct { int type; int id; } CUmemLocation;
typedef struct {
	int type;                 // CUmemAllocationType
	int requestedHandleTypes; // CUmemAllocationHandleType
	CUmemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} CUmemAllocationProp;
typedef struct { CUmemLocation location; int flags; } CUmemAccessDesc;

enum {
	CU_MEM_ALLOCATION_TYPE_PINNED = 1,
	CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1,
	CU_MEM_LOCATION_TYPE_DEVICE = 1,
	CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
	CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
	CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1,
	CU_MEMHOSTREGISTER_PORTABLE = 1,
	CU_STREAM_NON_BLOCKING = 1,
	CU_EVENT_BLOCKING_SYNC = 1,
	CU_EVENT_DISABLE_TIMING = 2,
	CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED = 3,
};

typedef struct {
	void *lib;
	CUresult (*cuInit)(unsigned);
	CUresult (*cuGetErrorName)(CUresult, const char **);
	CUresult (*cuDeviceGetCount)(int *);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuDeviceGetName)(char *, int, CUdevice);
	CUresult (*cuDeviceGetUuid)(CUuuid *, CUdevice);
	CUresult (*cuDeviceTotalMem)(size_t *, CUdevice);
	CUresult (*cuDeviceGetPCIBusId)(char *, int, CUdevice);
	CUresult (*cuDeviceCanAccessPeer)(int *, CUdevice, CUdevice);
	CUresult (*cuDeviceGetP2PAttribute)(int *, int, CUdevice, CUdevice);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
	CUresult (*cuCtxSetCurrent)(CUcontext);
	CUresult (*cuStreamCreate)(CUstream *, unsigned);
	CUresult (*cuStreamDestroy)(CUstream);
	CUresult (*cuEventCreate)(CUevent *, unsigned);
	CUresult (*cuEventDestroy)(CUevent);
	CUresult (*cuEventRecord)(CUevent, CUstream);
	CUresult (*cuEventSynchronize)(CUevent);
	CUresult (*cuMemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
	CUresult (*cuMemHostRegister)(void *, size_t, unsigned);
	CUresult (*cuMemHostUnregister)(void *);
	CUresult (*cuMemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *, int);
	CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
	CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
	CUresult (*cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*cuMemAddressFree)(CUdeviceptr, size_t);
	CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
	CUresult (*cuMemUnmap)(CUdeviceptr, size_t);
	CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*cuMemExportToShareableHandle)(void *, CUmemGenericAllocationHandle, int, unsigned long long);
	CUresult (*cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle *, void *, int);
	CUresult (*cuIpcOpenMemHandle)(CUdeviceptr *, CUipcMemHandle, unsigned);
	CUresult (*cuIpcCloseMemHandle)(CUdeviceptr);
} cu_api;

// cu_load fills api from the library at path. It returns 0, 1 with *err
// the dlerror text when dlopen failed, or 2 with *err the missing symbol.
// Symbols are looked up under the names cuda.h maps them to (the _v2
// ABIs).
static int cu_load(const char *path, cu_api *api, const char **err) {
	memset(api, 0, sizeof *api);
	dlerror();
	api->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!api->lib) {
		*err = dlerror();
		return 1;
	}
#define SYM(field, name) \
	api->field = dlsym(api->lib, name); \
	if (!api->field) { *err = name; return 2; }
	SYM(cuInit, "cuInit") SYM(cuGetErrorName, "cuGetErrorName")
	SYM(cuDeviceGetCount, "cuDeviceGetCount") SYM(cuDeviceGet, "cuDeviceGet")
	SYM(cuDeviceGetName, "cuDeviceGetName") SYM(cuDeviceGetUuid, "cuDeviceGetUuid")
	SYM(cuDeviceTotalMem, "cuDeviceTotalMem_v2") SYM(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId")
	SYM(cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer") SYM(cuDeviceGetP2PAttribute, "cuDeviceGetP2PAttribute")
	SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")
	SYM(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2")
	SYM(cuCtxSetCurrent, "cuCtxSetCurrent")
	SYM(cuStreamCreate, "cuStreamCreate") SYM(cuStreamDestroy, "cuStreamDestroy_v2")
	SYM(cuEventCreate, "cuEventCreate") SYM(cuEventDestroy, "cuEventDestroy_v2")
	SYM(cuEventRecord, "cuEventRecord") SYM(cuEventSynchronize, "cuEventSynchronize")
	SYM(cuMemcpyAsync, "cuMemcpyAsync")
	SYM(cuMemHostRegister, "cuMemHostRegister_v2") SYM(cuMemHostUnregister, "cuMemHostUnregister")
	SYM(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity")
	SYM(cuMemCreate, "cuMemCreate") SYM(cuMemRelease, "cuMemRelease")
	SYM(cuMemAddressReserve, "cuMemAddressReserve") SYM(cuMemAddressFree, "cuMemAddressFree")
	SYM(cuMemMap, "cuMemMap") SYM(cuMemUnmap, "cuMemUnmap") SYM(cuMemSetAccess, "cuMemSetAccess")
	SYM(cuMemExportToShareableHandle, "cuMemExportToShareableHandle")
	SYM(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle")
	SYM(cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2") SYM(cuIpcCloseMemHandle, "cuIpcCloseMemHandle")
#undef SYM
	return 0;
}

// Trampolines: cgo cannot call a C function pointer itself. Those that
// take a device index resolve it with cuDeviceGet first; *call names the
// call that failed in the multi-call ones.
static const char *t_errname(cu_api *a, CUresult r) {
	const char *s = 0;
	if (a->cuGetErrorName(r, &s) != 0 || !s) return "CUDA_ERROR_UNKNOWN_CODE";
	return s;
}
static CUresult t_init(cu_api *a) { return a->cuInit(0); }
static CUresult t_count(cu_api *a, int *n) { return a->cuDeviceGetCount(n); }
#define DEV(ord) CUdevice d; { CUresult r = a->cuDeviceGet(&d, ord); if (r) return r; }
static CUresult t_name(cu_api *a, char *s, int n, int ord) { DEV(ord) return a->cuDeviceGetName(s, n, d); }
static CUresult t_uuid(cu_api *a, void *u, int ord) { DEV(ord) return a->cuDeviceGetUuid((CUuuid *)u, d); }
static CUresult t_totalmem(cu_api *a, size_t *n, int ord) { DEV(ord) return a->cuDeviceTotalMem(n, d); }
static CUresult t_busid(cu_api *a, char *s, int n, int ord) { DEV(ord) return a->cuDeviceGetPCIBusId(s, n, d); }
static CUresult t_peer(cu_api *a, int ord, int peerOrd, int *ok, int *atomics) {
	DEV(ord)
	CUdevice p;
	CUresult r = a->cuDeviceGet(&p, peerOrd);
	if (r) return r;
	if ((r = a->cuDeviceCanAccessPeer(ok, d, p)) || !*ok) return r;
	return a->cuDeviceGetP2PAttribute(atomics, CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, d, p);
}
static CUresult t_retain(cu_api *a, int ord, uintptr_t *ctx) { DEV(ord) return a->cuDevicePrimaryCtxRetain((CUcontext *)ctx, d); }
static CUresult t_release(cu_api *a, int ord) { DEV(ord) return a->cuDevicePrimaryCtxRelease(d); }
static CUresult t_setcurrent(cu_api *a, uintptr_t ctx) { return a->cuCtxSetCurrent((CUcontext)ctx); }
static CUresult t_streamcreate(cu_api *a, uintptr_t *s) { return a->cuStreamCreate((CUstream *)s, CU_STREAM_NON_BLOCKING); }
static CUresult t_streamdestroy(cu_api *a, uintptr_t s) { return a->cuStreamDestroy((CUstream)s); }
static CUresult t_eventcreate(cu_api *a, uintptr_t *e) { return a->cuEventCreate((CUevent *)e, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING); }
static CUresult t_eventdestroy(cu_api *a, uintptr_t e) { return a->cuEventDestroy((CUevent)e); }
static CUresult t_eventrecord(cu_api *a, uintptr_t e, uintptr_t s) { return a->cuEventRecord((CUevent)e, (CUstream)s); }
static CUresult t_eventsync(cu_api *a, uintptr_t e) { return a->cuEventSynchronize((CUevent)e); }
static CUresult t_memcpyasync(cu_api *a, uint64_t dst, uint64_t src, size_t n, uintptr_t s) { return a->cuMemcpyAsync(dst, src, n, (CUstream)s); }
static CUresult t_hostreg(cu_api *a, uint64_t p, size_t n) { return a->cuMemHostRegister((void *)(uintptr_t)p, n, CU_MEMHOSTREGISTER_PORTABLE); }
static CUresult t_hostunreg(cu_api *a, uint64_t p) { return a->cuMemHostUnregister((void *)(uintptr_t)p); }

// t_map reserves address space for h, maps it and grants read-write
// access to device d and every device that can reach d as a peer.
static CUresult t_map(cu_api *a, CUdevice d, CUmemGenericAllocationHandle h, size_t size, uint64_t *ptr, const char **call) {
	CUdeviceptr p = 0;
	CUresult r;
	*call = "cuMemAddressReserve";
	if ((r = a->cuMemAddressReserve(&p, size, 0, 0, 0))) return r;
	*call = "cuMemMap";
	if ((r = a->cuMemMap(p, size, 0, h, 0))) { a->cuMemAddressFree(p, size); return r; }
	int n = 0;
	a->cuDeviceGetCount(&n);
	CUmemAccessDesc acc[64];
	int k = 0;
	acc[k++] = (CUmemAccessDesc){{CU_MEM_LOCATION_TYPE_DEVICE, d}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	for (int i = 0; i < n && k < 64; i++) {
		CUdevice q;
		int ok = 0;
		if (a->cuDeviceGet(&q, i) || q == d || a->cuDeviceCanAccessPeer(&ok, q, d) || !ok) continue;
		acc[k++] = (CUmemAccessDesc){{CU_MEM_LOCATION_TYPE_DEVICE, q}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	}
	*call = "cuMemSetAccess";
	if ((r = a->cuMemSetAccess(p, size, acc, k))) { a->cuMemUnmap(p, size); a->cuMemAddressFree(p, size); return r; }
	*ptr = p;
	return 0;
}

static CUresult t_unmap(cu_api *a, uint64_t p, size_t size, uint64_t h, const char **call) {
	CUresult r;
	*call = "cuMemUnmap";
	if ((r = a->cuMemUnmap(p, size))) return r;
	*call = "cuMemAddressFree";
	if ((r = a->cuMemAddressFree(p, size))) return r;
	*call = "cuMemRelease";
	return a->cuMemRelease(h);
}

// t_vmm_alloc makes a VMM allocation of at least *size bytes on ord
// (rounded up to the granularity, written back), maps it and exports it
// as a POSIX file descriptor.
static CUresult t_vmm_alloc(cu_api *a, int ord, size_t *size, uint64_t *ptr, uint64_t *handle, int *fd, const char **call) {
	*call = "cuDeviceGet";
	DEV(ord)
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof prop);
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = d;
	size_t gran = 0;
	CUresult r;
	*call = "cuMemGetAllocationGranularity";
	if ((r = a->cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM))) return r;
	if (gran) *size = (*size + gran - 1) / gran * gran;
	CUmemGenericAllocationHandle h;
	*call = "cuMemCreate";
	if ((r = a->cuMemCreate(&h, *size, &prop, 0))) return r;
	if ((r = t_map(a, d, h, *size, ptr, call))) { a->cuMemRelease(h); return r; }
	*call = "cuMemExportToShareableHandle";
	if ((r = a->cuMemExportToShareableHandle(fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0))) {
		const char *ignored;
		t_unmap(a, *ptr, *size, h, &ignored);
		return r;
	}
	*handle = h;
	return 0;
}

// t_vmm_import imports the allocation behind fd (this process's copy,
// which the caller closes) and maps size bytes of it.
static CUresult t_vmm_import(cu_api *a, int ord, int fd, size_t size, uint64_t *ptr, uint64_t *handle, const char **call) {
	*call = "cuDeviceGet";
	DEV(ord)
	CUmemGenericAllocationHandle h;
	CUresult r;
	*call = "cuMemImportFromShareableHandle";
	if ((r = a->cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))) return r;
	if ((r = t_map(a, d, h, size, ptr, call))) { a->cuMemRelease(h); return r; }
	*handle = h;
	return 0;
}

static CUresult t_ipcopen(cu_api *a, uint64_t *p, const void *h) {
	CUipcMemHandle mh;
	CUdeviceptr v = 0;
	memcpy(&mh, h, sizeof mh);
	CUresult r = a->cuIpcOpenMemHandle(&v, mh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	*p = v;
	return r;
}
static CUresult t_ipcclose(cu_api *a, uint64_t p) { return a->cuIpcCloseMemHandle(p); }
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/devices/internal/gpu"
	"github.com/ferrydev/ferry/sdk"
)

// DefaultLibrary is the CUDA driver the plugin loads without `library`.
const DefaultLibrary = "libcuda.so.1"

// ipcHandleSize is sizeof(CUipcMemHandle); fdHandleSize is a cuda-fd
// handle's Data: the exporter's pid and fd number, little-endian uint32s.
const (
	ipcHandleSize = 64
	fdHandleSize  = 8
)

// libs holds every driver loaded in this process, by path: loaded once,
// never closed (libcuda does not survive dlclose), its table in C memory.
var libs struct {
	sync.Mutex
	m map[string]*C.cu_api
}

// driverAPI is the gpu.Driver over a dlopened libcuda. Each device's
// primary context is retained once, at its first Bind, and made current
// on every thread that binds it (its worker and its streams' completion
// goroutines); Release releases it once at Stop.
type driverAPI struct {
	api *C.cu_api

	mu   sync.Mutex
	ctxs map[int]C.uintptr_t
}

var _ gpu.Driver = (*driverAPI)(nil)

func (d *driverAPI) Load(path string) error {
	if path == "" {
		path = DefaultLibrary
	}
	libs.Lock()
	defer libs.Unlock()
	if api := libs.m[path]; api != nil {
		d.api = api
		return nil
	}
	api := (*C.cu_api)(C.calloc(1, C.sizeof_cu_api))
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var cerr *C.char
	switch C.cu_load(cpath, api, &cerr) {
	case 1:
		C.free(unsafe.Pointer(api))
		return fmt.Errorf("%s not found: %s", path, C.GoString(cerr))
	case 2:
		C.dlclose(api.lib)
		C.free(unsafe.Pointer(api))
		return fmt.Errorf("%s is not a usable CUDA driver: it lacks %s", path, C.GoString(cerr))
	}
	if rc := C.t_init(api); rc != 0 {
		return fmt.Errorf("cuInit failed with code %d (%s)", int(rc), C.GoString(C.t_errname(api, rc)))
	}
	if libs.m == nil {
		libs.m = make(map[string]*C.cu_api)
	}
	libs.m[path] = api
	d.api = api
	return nil
}

func (d *driverAPI) check(call string, rc C.CUresult) error {
	if rc == 0 {
		return nil
	}
	return &gpu.DriverError{Call: call, Code: int(rc), Name: C.GoString(C.t_errname(d.api, rc))}
}

func (d *driverAPI) Count() (int, error) {
	var n C.int
	err := d.check("cuDeviceGetCount", C.t_count(d.api, &n))
	return int(n), err
}

func (d *driverAPI) Describe(dev int) (sdk.DeviceAttr, error) {
	var a sdk.DeviceAttr
	var buf [256]C.char
	if err := d.check("cuDeviceGetName", C.t_name(d.api, &buf[0], C.int(len(buf)), C.int(dev))); err != nil {
		return a, err
	}
	a.Name = C.GoString(&buf[0])
	if err := d.check("cuDeviceGetPCIBusId", C.t_busid(d.api, &buf[0], C.int(len(buf)), C.int(dev))); err != nil {
		return a, err
	}
	a.PCIBusID = C.GoString(&buf[0])
	var mem C.size_t
	if err := d.check("cuDeviceTotalMem", C.t_totalmem(d.api, &mem, C.int(dev))); err != nil {
		return a, err
	}
	a.Memory = uint64(mem)
	var uuid [16]byte
	if err := d.check("cuDeviceGetUuid", C.t_uuid(d.api, unsafe.Pointer(&uuid[0]), C.int(dev))); err != nil {
		return a, err
	}
	a.UUID = gpu.FormatUUID(uuid)
	return a, nil
}

// Peer calls a peer link "nvlink" when the two devices support native
// atomics over it (cuDeviceGetP2PAttribute NATIVE_ATOMIC_SUPPORTED), which
// PCIe peer access does not: a heuristic, as the driver API names no
// link; NVML (nvmlDeviceGetNvLinkState) would say for certain.
func (d *driverAPI) Peer(dev, peer int) (bool, string, error) {
	var ok, atomics C.int
	if err := d.check("cuDeviceCanAccessPeer", C.t_peer(d.api, C.int(dev), C.int(peer), &ok, &atomics)); err != nil {
		return false, "", err
	}
	switch {
	case ok == 0:
		return false, "", nil
	case atomics != 0:
		return true, "nvlink", nil
	}
	return true, "pcie", nil
}

func (d *driverAPI) Bind(dev int) error {
	d.mu.Lock()
	ctx, ok := d.ctxs[dev]
	if !ok {
		if err := d.check("cuDevicePrimaryCtxRetain", C.t_retain(d.api, C.int(dev), &ctx)); err != nil {
			d.mu.Unlock()
			return err
		}
		if d.ctxs == nil {
			d.ctxs = make(map[int]C.uintptr_t)
		}
		d.ctxs[dev] = ctx
	}
	d.mu.Unlock()
	return d.check("cuCtxSetCurrent", C.t_setcurrent(d.api, ctx))
}

func (d *driverAPI) Release(dev int) error {
	d.mu.Lock()
	_, ok := d.ctxs[dev]
	delete(d.ctxs, dev)
	d.mu.Unlock()
	if !ok {
		return nil
	}
	return d.check("cuDevicePrimaryCtxRelease", C.t_release(d.api, C.int(dev)))
}

func (d *driverAPI) NewStream() (gpu.Stream, error) {
	var s C.uintptr_t
	err := d.check("cuStreamCreate", C.t_streamcreate(d.api, &s))
	return gpu.Stream(s), err
}

func (d *driverAPI) DestroyStream(s gpu.Stream) error {
	return d.check("cuStreamDestroy", C.t_streamdestroy(d.api, C.uintptr_t(s)))
}

func (d *driverAPI) NewEvent() (gpu.Event, error) {
	var e C.uintptr_t
	err := d.check("cuEventCreate", C.t_eventcreate(d.api, &e))
	return gpu.Event(e), err
}

func (d *driverAPI) DestroyEvent(e gpu.Event) error {
	return d.check("cuEventDestroy", C.t_eventdestroy(d.api, C.uintptr_t(e)))
}

func (d *driverAPI) CopyAsync(dst, src, n uint64, s gpu.Stream) error {
	return d.check("cuMemcpyAsync", C.t_memcpyasync(d.api, C.uint64_t(dst), C.uint64_t(src), C.size_t(n), C.uintptr_t(s)))
}

func (d *driverAPI) Record(e gpu.Event, s gpu.Stream) error {
	return d.check("cuEventRecord", C.t_eventrecord(d.api, C.uintptr_t(e), C.uintptr_t(s)))
}

func (d *driverAPI) Wait(e gpu.Event) error {
	return d.check("cuEventSynchronize", C.t_eventsync(d.api, C.uintptr_t(e)))
}

func (d *driverAPI) RegisterHost(addr, n uint64) error {
	return d.check("cuMemHostRegister", C.t_hostreg(d.api, C.uint64_t(addr), C.size_t(n)))
}

func (d *driverAPI) UnregisterHost(addr uint64) error {
	return d.check("cuMemHostUnregister", C.t_hostunreg(d.api, C.uint64_t(addr)))
}

// Allocate makes a VMM allocation (cuMemCreate) exported as a POSIX fd;
// the handle carries this process's pid and the fd's number, which an
// importer takes with pidfd_getfd. Free closes the fd first, so that the
// handle stops opening.
func (d *driverAPI) Allocate(dev int, size uint64) (gpu.Memory, error) {
	var ptr, handle C.uint64_t
	var fd C.int
	var call *C.char
	csize := C.size_t(size)
	if err := d.check("", C.t_vmm_alloc(d.api, C.int(dev), &csize, &ptr, &handle, &fd, &call)); err != nil {
		err.(*gpu.DriverError).Call = C.GoString(call)
		return gpu.Memory{}, err
	}
	size = uint64(csize)
	data := make([]byte, fdHandleSize)
	binary.LittleEndian.PutUint32(data[0:], uint32(os.Getpid()))
	binary.LittleEndian.PutUint32(data[4:], uint32(fd))
	return gpu.Memory{
		Addr:   uint64(ptr),
		Size:   size,
		Handle: sdk.Handle{Type: sdk.HandleCUDAFD, Device: dev, Data: data, Size: size, Length: size},
		Free: func() error {
			unix.Close(int(fd))
			return d.unmap(ptr, size, handle)
		},
	}, nil
}

func (d *driverAPI) unmap(ptr C.uint64_t, size uint64, handle C.uint64_t) error {
	var call *C.char
	if err := d.check("", C.t_unmap(d.api, ptr, C.size_t(size), handle, &call)); err != nil {
		err.(*gpu.DriverError).Call = C.GoString(call)
		return err
	}
	return nil
}

// Open imports a cuda-fd handle (pidfd_getfd, cuMemImportFromShareableHandle,
// map) or a cuda-ipc one (cuIpcOpenMemHandle with lazy peer access). A
// handle whose exporter is gone or closed the fd, or whose open the driver
// refuses, is ErrStaleHandle: the driver does not tell a freed allocation
// from another failure to open.
func (d *driverAPI) Open(dev int, h sdk.Handle) (gpu.Memory, error) {
	switch h.Type {
	case sdk.HandleCUDAFD:
		return d.openFD(dev, h)
	case sdk.HandleCUDAIPC:
		if len(h.Data) != ipcHandleSize {
			return gpu.Memory{}, fmt.Errorf("%s handle of %d bytes, want %d", h.Type, len(h.Data), ipcHandleSize)
		}
		var p C.uint64_t
		if err := d.check("cuIpcOpenMemHandle", C.t_ipcopen(d.api, &p, unsafe.Pointer(&h.Data[0]))); err != nil {
			return gpu.Memory{}, fmt.Errorf("%w: %w", sdk.ErrStaleHandle, err)
		}
		return gpu.Memory{Addr: uint64(p), Size: h.Size, Free: func() error {
			return d.check("cuIpcCloseMemHandle", C.t_ipcclose(d.api, p))
		}}, nil
	}
	return gpu.Memory{}, fmt.Errorf("the cuda device plugin imports %s and %s handles, not %q", sdk.HandleCUDAFD, sdk.HandleCUDAIPC, h.Type)
}

func (d *driverAPI) openFD(dev int, h sdk.Handle) (gpu.Memory, error) {
	if len(h.Data) != fdHandleSize {
		return gpu.Memory{}, fmt.Errorf("%s handle of %d bytes, want %d", h.Type, len(h.Data), fdHandleSize)
	}
	pid := int(binary.LittleEndian.Uint32(h.Data[0:]))
	remote := int(binary.LittleEndian.Uint32(h.Data[4:]))
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return gpu.Memory{}, fmt.Errorf("%w: exporter process %d is gone", sdk.ErrStaleHandle, pid)
		}
		return gpu.Memory{}, fmt.Errorf("pidfd_open(%d): %w", pid, err)
	}
	fd, err := unix.PidfdGetfd(pidfd, remote, 0)
	unix.Close(pidfd)
	if err != nil {
		if errors.Is(err, unix.EBADF) || errors.Is(err, unix.ESRCH) {
			return gpu.Memory{}, fmt.Errorf("%w: process %d has no fd %d", sdk.ErrStaleHandle, pid, remote)
		}
		return gpu.Memory{}, fmt.Errorf("pidfd_getfd(process %d, fd %d): %w", pid, remote, err)
	}
	defer unix.Close(fd) // the imported handle holds the allocation
	var ptr, handle C.uint64_t
	var call *C.char
	if err := d.check("", C.t_vmm_import(d.api, C.int(dev), C.int(fd), C.size_t(h.Size), &ptr, &handle, &call)); err != nil {
		err.(*gpu.DriverError).Call = C.GoString(call)
		return gpu.Memory{}, fmt.Errorf("%w: %w", sdk.ErrStaleHandle, err)
	}
	size := h.Size
	return gpu.Memory{Addr: uint64(ptr), Size: size, Free: func() error { return d.unmap(ptr, size, handle) }}, nil
}

// Cached: a legacy IPC handle opens once per process (142 ms on an H200)
// and is shared; a cuda-fd import is per region (0.24 ms).
func (d *driverAPI) Cached(t sdk.HandleType) bool { return t == sdk.HandleCUDAIPC }
