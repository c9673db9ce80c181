package rocm

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// The few HIP types and prototypes this plugin calls, declared here: no
// HIP headers are needed to build it. Values are HIP's (hip_runtime_api.h).
typedef int hipError_t;
typedef struct { char reserved[64]; } hipIpcMemHandle_t;
typedef struct { char bytes[16]; } hipUUID;
typedef void *hipStream_t;
typedef void *hipEvent_t;

enum {
	hipMemcpyDefault = 4,
	hipIpcMemLazyEnablePeerAccess = 1,
	hipHostRegisterPortable = 1,
	hipStreamNonBlocking = 1,
	hipEventBlockingSync = 1,
	hipEventDisableTiming = 2,
	hsaLinkXGMI = 4, // HSA_AMD_LINK_INFO_TYPE_XGMI
};

typedef struct {
	void *lib;
	hipError_t (*hipInit)(unsigned);
	hipError_t (*hipGetDeviceCount)(int *);
	hipError_t (*hipDeviceGetName)(char *, int, int);
	hipError_t (*hipDeviceGetUuid)(hipUUID *, int); // optional
	hipError_t (*hipDeviceTotalMem)(size_t *, int);
	hipError_t (*hipDeviceGetPCIBusId)(char *, int, int);
	hipError_t (*hipDeviceCanAccessPeer)(int *, int, int);
	hipError_t (*hipExtGetLinkTypeAndHopCount)(int, int, uint32_t *, uint32_t *); // optional
	hipError_t (*hipSetDevice)(int);
	hipError_t (*hipMalloc)(void **, size_t);
	hipError_t (*hipFree)(void *);
	hipError_t (*hipIpcGetMemHandle)(hipIpcMemHandle_t *, void *);
	hipError_t (*hipIpcOpenMemHandle)(void **, hipIpcMemHandle_t, unsigned);
	hipError_t (*hipIpcCloseMemHandle)(void *);
	hipError_t (*hipHostRegister)(void *, size_t, unsigned);
	hipError_t (*hipHostUnregister)(void *);
	hipError_t (*hipStreamCreateWithFlags)(hipStream_t *, unsigned);
	hipError_t (*hipStreamDestroy)(hipStream_t);
	hipError_t (*hipEventCreateWithFlags)(hipEvent_t *, unsigned);
	hipError_t (*hipEventDestroy)(hipEvent_t);
	hipError_t (*hipEventRecord)(hipEvent_t, hipStream_t);
	hipError_t (*hipEventSynchronize)(hipEvent_t);
	hipError_t (*hipMemcpyAsync)(void *, const void *, size_t, int, hipStream_t);
	const char *(*hipGetErrorName)(hipError_t);
} hip_api;

// hip_load fills api from the library at path. It returns 0, 1 with
// *err the dlerror text when dlopen failed, or 2 with *err the missing
// symbol.
static int hip_load(const char *path, hip_api *api, const char **err) {
	memset(api, 0, sizeof *api);
	dlerror();
	api->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!api->lib) {
		*err = dlerror();
		return 1;
	}
#define SYM(name, required) \
	api->name = dlsym(api->lib, #name); \
	if (!api->name && required) { *err = #name; return 2; }
	SYM(hipInit, 1) SYM(hipGetDeviceCount, 1) SYM(hipDeviceGetName, 1)
	SYM(hipDeviceGetUuid, 0) SYM(hipDeviceTotalMem, 1) SYM(hipDeviceGetPCIBusId, 1)
	SYM(hipDeviceCanAccessPeer, 1) SYM(hipExtGetLinkTypeAndHopCount, 0)
	SYM(hipSetDevice, 1) SYM(hipMalloc, 1) SYM(hipFree, 1)
	SYM(hipIpcGetMemHandle, 1) SYM(hipIpcOpenMemHandle, 1) SYM(hipIpcCloseMemHandle, 1)
	SYM(hipHostRegister, 1) SYM(hipHostUnregister, 1)
	SYM(hipStreamCreateWithFlags, 1) SYM(hipStreamDestroy, 1)
	SYM(hipEventCreateWithFlags, 1) SYM(hipEventDestroy, 1) SYM(hipEventRecord, 1)
	SYM(hipEventSynchronize, 1) SYM(hipMemcpyAsync, 1) SYM(hipGetErrorName, 1)
#undef SYM
	return 0;
}

// Trampolines: cgo cannot call a C function pointer itself.
static hipError_t t_init(hip_api *a) { return a->hipInit(0); }
static hipError_t t_count(hip_api *a, int *n) { return a->hipGetDeviceCount(n); }
static hipError_t t_name(hip_api *a, char *s, int n, int d) { return a->hipDeviceGetName(s, n, d); }
static hipError_t t_uuid(hip_api *a, void *u, int d) { return a->hipDeviceGetUuid ? a->hipDeviceGetUuid((hipUUID *)u, d) : -1; }
static hipError_t t_totalmem(hip_api *a, size_t *n, int d) { return a->hipDeviceTotalMem(n, d); }
static hipError_t t_busid(hip_api *a, char *s, int n, int d) { return a->hipDeviceGetPCIBusId(s, n, d); }
static hipError_t t_canpeer(hip_api *a, int *ok, int d, int p) { return a->hipDeviceCanAccessPeer(ok, d, p); }
static int t_xgmi(hip_api *a, int d, int p) {
	uint32_t type = 0, hops = 0;
	if (!a->hipExtGetLinkTypeAndHopCount || a->hipExtGetLinkTypeAndHopCount(d, p, &type, &hops) != 0) return 0;
	return type == hsaLinkXGMI;
}
static hipError_t t_setdevice(hip_api *a, int d) { return a->hipSetDevice(d); }
static hipError_t t_malloc(hip_api *a, uint64_t *p, size_t n) {
	void *v = 0;
	hipError_t e = a->hipMalloc(&v, n);
	*p = (uint64_t)(uintptr_t)v;
	return e;
}
static hipError_t t_free(hip_api *a, uint64_t p) { return a->hipFree((void *)(uintptr_t)p); }
static hipError_t t_ipcget(hip_api *a, void *h, uint64_t p) { return a->hipIpcGetMemHandle((hipIpcMemHandle_t *)h, (void *)(uintptr_t)p); }
static hipError_t t_ipcopen(hip_api *a, uint64_t *p, const void *h) {
	hipIpcMemHandle_t mh;
	void *v = 0;
	memcpy(&mh, h, sizeof mh);
	hipError_t e = a->hipIpcOpenMemHandle(&v, mh, hipIpcMemLazyEnablePeerAccess);
	*p = (uint64_t)(uintptr_t)v;
	return e;
}
static hipError_t t_ipcclose(hip_api *a, uint64_t p) { return a->hipIpcCloseMemHandle((void *)(uintptr_t)p); }
static hipError_t t_hostreg(hip_api *a, uint64_t p, size_t n) { return a->hipHostRegister((void *)(uintptr_t)p, n, hipHostRegisterPortable); }
static hipError_t t_hostunreg(hip_api *a, uint64_t p) { return a->hipHostUnregister((void *)(uintptr_t)p); }
static hipError_t t_streamcreate(hip_api *a, uintptr_t *s) { return a->hipStreamCreateWithFlags((hipStream_t *)s, hipStreamNonBlocking); }
static hipError_t t_streamdestroy(hip_api *a, uintptr_t s) { return a->hipStreamDestroy((hipStream_t)s); }
static hipError_t t_eventcreate(hip_api *a, uintptr_t *e) { return a->hipEventCreateWithFlags((hipEvent_t *)e, hipEventBlockingSync | hipEventDisableTiming); }
static hipError_t t_eventdestroy(hip_api *a, uintptr_t e) { return a->hipEventDestroy((hipEvent_t)e); }
static hipError_t t_eventrecord(hip_api *a, uintptr_t e, uintptr_t s) { return a->hipEventRecord((hipEvent_t)e, (hipStream_t)s); }
static hipError_t t_eventsync(hip_api *a, uintptr_t e) { return a->hipEventSynchronize((hipEvent_t)e); }
static hipError_t t_memcpyasync(hip_api *a, uint64_t dst, uint64_t src, size_t n, uintptr_t s) {
	return a->hipMemcpyAsync((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n, hipMemcpyDefault, (hipStream_t)s);
}
static const char *t_errname(hip_api *a, hipError_t e) { return a->hipGetErrorName(e); }
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ferrydev/ferry/devices/internal/gpu"
	"github.com/ferrydev/ferry/sdk"
)

// DefaultLibrary is the HIP runtime the plugin loads without `library`.
const DefaultLibrary = "libamdhip64.so"

// ipcHandleSize is sizeof(hipIpcMemHandle_t).
const ipcHandleSize = 64

// libs holds every library loaded in this process, by path: a library
// is opened once and never closed (HIP's runtime does not survive
// dlclose), and its function table lives in C memory.
var libs struct {
	sync.Mutex
	m map[string]*C.hip_api
}

// hip is the gpu.Driver over a dlopened HIP runtime.
type hip struct {
	api *C.hip_api
}

var _ gpu.Driver = (*hip)(nil)

func (h *hip) Load(path string) error {
	if path == "" {
		path = DefaultLibrary
	}
	libs.Lock()
	defer libs.Unlock()
	if api := libs.m[path]; api != nil {
		h.api = api
		return nil
	}
	api := (*C.hip_api)(C.calloc(1, C.sizeof_hip_api))
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var cerr *C.char
	switch C.hip_load(cpath, api, &cerr) {
	case 1:
		C.free(unsafe.Pointer(api))
		return fmt.Errorf("%s not found: %s", path, C.GoString(cerr))
	case 2:
		C.dlclose(api.lib)
		C.free(unsafe.Pointer(api))
		return fmt.Errorf("%s is not a usable HIP runtime: it lacks %s", path, C.GoString(cerr))
	}
	if rc := C.t_init(api); rc != 0 {
		err := fmt.Errorf("hipInit failed with code %d (%s)", int(rc), C.GoString(C.t_errname(api, rc)))
		// Kept loaded: a library that failed to initialize stays
		// mapped, as it may have started threads.
		return err
	}
	if libs.m == nil {
		libs.m = make(map[string]*C.hip_api)
	}
	libs.m[path] = api
	h.api = api
	return nil
}

// check turns a HIP return code into an error naming call.
func (h *hip) check(call string, rc C.hipError_t) error {
	if rc == 0 {
		return nil
	}
	return &gpu.DriverError{Call: call, Code: int(rc), Name: C.GoString(C.t_errname(h.api, rc))}
}

func (h *hip) Count() (int, error) {
	var n C.int
	if err := h.check("hipGetDeviceCount", C.t_count(h.api, &n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

func (h *hip) Describe(dev int) (sdk.DeviceAttr, error) {
	var a sdk.DeviceAttr
	var buf [256]C.char
	if err := h.check("hipDeviceGetName", C.t_name(h.api, &buf[0], C.int(len(buf)), C.int(dev))); err != nil {
		return a, err
	}
	a.Name = C.GoString(&buf[0])
	if err := h.check("hipDeviceGetPCIBusId", C.t_busid(h.api, &buf[0], C.int(len(buf)), C.int(dev))); err != nil {
		return a, err
	}
	a.PCIBusID = C.GoString(&buf[0])
	var mem C.size_t
	if err := h.check("hipDeviceTotalMem", C.t_totalmem(h.api, &mem, C.int(dev))); err != nil {
		return a, err
	}
	a.Memory = uint64(mem)
	var uuid [16]byte
	if C.t_uuid(h.api, unsafe.Pointer(&uuid[0]), C.int(dev)) == 0 {
		a.UUID = gpu.FormatUUID(uuid)
	}
	return a, nil
}

// Peer reports the link as "xgmi" when hipExtGetLinkTypeAndHopCount
// names XGMI, else "pcie".
func (h *hip) Peer(dev, peer int) (bool, string, error) {
	var ok C.int
	if err := h.check("hipDeviceCanAccessPeer", C.t_canpeer(h.api, &ok, C.int(dev), C.int(peer))); err != nil {
		return false, "", err
	}
	if ok == 0 {
		return false, "", nil
	}
	if C.t_xgmi(h.api, C.int(dev), C.int(peer)) != 0 {
		return true, "xgmi", nil
	}
	return true, "pcie", nil
}

func (h *hip) Bind(dev int) error { return h.check("hipSetDevice", C.t_setdevice(h.api, C.int(dev))) }

// Release has nothing to undo: hipSetDevice retains nothing.
func (h *hip) Release(dev int) error { return nil }

func (h *hip) NewStream() (gpu.Stream, error) {
	var s C.uintptr_t
	err := h.check("hipStreamCreateWithFlags", C.t_streamcreate(h.api, &s))
	return gpu.Stream(s), err
}

func (h *hip) DestroyStream(s gpu.Stream) error {
	return h.check("hipStreamDestroy", C.t_streamdestroy(h.api, C.uintptr_t(s)))
}

func (h *hip) NewEvent() (gpu.Event, error) {
	var e C.uintptr_t
	err := h.check("hipEventCreateWithFlags", C.t_eventcreate(h.api, &e))
	return gpu.Event(e), err
}

func (h *hip) DestroyEvent(e gpu.Event) error {
	return h.check("hipEventDestroy", C.t_eventdestroy(h.api, C.uintptr_t(e)))
}

func (h *hip) CopyAsync(dst, src, n uint64, s gpu.Stream) error {
	return h.check("hipMemcpyAsync", C.t_memcpyasync(h.api, C.uint64_t(dst), C.uint64_t(src), C.size_t(n), C.uintptr_t(s)))
}

func (h *hip) Record(e gpu.Event, s gpu.Stream) error {
	return h.check("hipEventRecord", C.t_eventrecord(h.api, C.uintptr_t(e), C.uintptr_t(s)))
}

func (h *hip) Wait(e gpu.Event) error {
	return h.check("hipEventSynchronize", C.t_eventsync(h.api, C.uintptr_t(e)))
}

func (h *hip) RegisterHost(addr, n uint64) error {
	return h.check("hipHostRegister", C.t_hostreg(h.api, C.uint64_t(addr), C.size_t(n)))
}

func (h *hip) UnregisterHost(addr uint64) error {
	return h.check("hipHostUnregister", C.t_hostunreg(h.api, C.uint64_t(addr)))
}

// Allocate is hipMalloc exported with hipIpcGetMemHandle.
func (h *hip) Allocate(dev int, size uint64) (gpu.Memory, error) {
	var p C.uint64_t
	if err := h.check("hipMalloc", C.t_malloc(h.api, &p, C.size_t(size))); err != nil {
		return gpu.Memory{}, err
	}
	free := func() error { return h.check("hipFree", C.t_free(h.api, p)) }
	data := make([]byte, ipcHandleSize)
	if err := h.check("hipIpcGetMemHandle", C.t_ipcget(h.api, unsafe.Pointer(&data[0]), p)); err != nil {
		free()
		return gpu.Memory{}, err
	}
	return gpu.Memory{
		Addr:   uint64(p),
		Size:   size,
		Handle: sdk.Handle{Type: sdk.HandleHIPIPC, Device: dev, Data: data, Size: size, Length: size},
		Free:   free,
	}, nil
}

// Open is hipIpcOpenMemHandle. HIP does not tell a freed allocation from
// another failure to open, so every failed open is ErrStaleHandle,
// wrapping the driver's error.
func (h *hip) Open(dev int, hd sdk.Handle) (gpu.Memory, error) {
	if hd.Type != sdk.HandleHIPIPC {
		return gpu.Memory{}, fmt.Errorf("the rocm device plugin imports %s handles, not %s", sdk.HandleHIPIPC, hd.Type)
	}
	if len(hd.Data) != ipcHandleSize {
		return gpu.Memory{}, fmt.Errorf("%s handle of %d bytes, want %d", hd.Type, len(hd.Data), ipcHandleSize)
	}
	var p C.uint64_t
	if err := h.check("hipIpcOpenMemHandle", C.t_ipcopen(h.api, &p, unsafe.Pointer(&hd.Data[0]))); err != nil {
		return gpu.Memory{}, fmt.Errorf("%w: %w", sdk.ErrStaleHandle, err)
	}
	return gpu.Memory{
		Addr: uint64(p),
		Size: hd.Size,
		Free: func() error { return h.check("hipIpcCloseMemHandle", C.t_ipcclose(h.api, p)) },
	}, nil
}

// Cached: a HIP IPC handle is opened once per process and shared.
func (h *hip) Cached(t sdk.HandleType) bool { return t == sdk.HandleHIPIPC }
