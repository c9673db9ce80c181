// FAKE CUDA driver (libcuda.so.1), for Ferry's tests only: NOT NVIDIA's
// driver, and no GPU.
//
// It implements the CUDA driver API entry points devices/cuda resolves
// (driverapi.go's cu_load, under the same versioned names), with the
// driver's signatures, struct layouts and error codes, over host memory,
// so that the plugin's real binding (dlopen, dlsym, trampolines) and the
// worker, stream and completion machinery of devices/internal/gpu run on
// a machine without an NVIDIA GPU:
//
//   - a VMM allocation (cuMemCreate) is a memfd of the requested size;
//     cuMemExportToShareableHandle (POSIX fd) returns a dup of it and
//     cuMemImportFromShareableHandle takes one (and dups it: the caller
//     keeps and closes its own); cuMemAddressReserve reserves address
//     space with mmap(PROT_NONE), cuMemMap maps the memfd there
//     MAP_SHARED|MAP_FIXED (still PROT_NONE) and cuMemSetAccess makes it
//     read-write, so memory touched before access is granted faults as it
//     would on a GPU;
//   - sizes, offsets and addresses given to cuMemCreate, cuMemAddressReserve
//     and cuMemMap must be multiples of the granularity
//     (cuMemGetAllocationGranularity: FAKECUDA_GRANULARITY bytes, default
//     64 KiB; a real GPU says 2 MiB);
//   - a legacy allocation (cuMemAlloc_v2, not used by the plugin, for the
//     exporter fixture) is a memfd mapped MAP_SHARED; its IPC handle
//     (cuIpcGetMemHandle) names the exporting pid, the fd number and the
//     memfd's inode, so another process opens it (cuIpcOpenMemHandle_v2)
//     through /proc/<pid>/fd and a freed allocation (fd closed, or its
//     number reused) fails to open, as a real freed allocation does;
//   - each device's primary context is reference counted; the calls that
//     need a context (streams, events, copies, host registration, IPC
//     open, cuMemAlloc) fail with CUDA_ERROR_INVALID_CONTEXT on a thread
//     where no retained context is current, as the driver does;
//   - copies are memcpy, run at submission; events complete at once;
//   - a copy fails with CUDA_ERROR_INVALID_VALUE at once when an end is
//     not memory the driver knows (mapped with access, IPC-opened,
//     cuMemAlloc'd or host-registered), and asynchronously (reported by
//     the next event recorded on its stream) with
//     CUDA_ERROR_ILLEGAL_ADDRESS when its length equals the environment
//     variable FAKECUDA_FAIL_LEN (a test hook);
//   - FAKECUDA_DEVICES sets the device count (default 2, at most 8); the
//     devices are "FAKE CUDA device N", all peers of each other, with
//     native atomics (the plugin calls that "nvlink");
//   - fakecuda_live() counts what is still held (allocation handles,
//     reservations, mappings, IPC opens, legacy allocations, host
//     registrations, streams, events and primary context references), for
//     the tests' leak checks.
//
// Build: gcc -shared -fPIC -o libcuda.so.1 fakecuda.c -lpthread
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// The driver's types and values (cuda.h, CUDA 12/13).
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
	int type;
	int requestedHandleTypes;
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

// The layouts cuda.h gives these on LP64.
_Static_assert(sizeof(CUmemAllocationProp) == 32, "CUmemAllocationProp");
_Static_assert(sizeof(CUmemAccessDesc) == 12, "CUmemAccessDesc");
_Static_assert(sizeof(CUipcMemHandle) == 64, "CUipcMemHandle");

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_ALREADY_MAPPED = 208,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_ILLEGAL_ADDRESS = 700,
	CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
	CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
	CUDA_ERROR_NOT_SUPPORTED = 801,
};

enum {
	CU_MEM_ALLOCATION_TYPE_PINNED = 1,
	CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1,
	CU_MEM_LOCATION_TYPE_DEVICE = 1,
	CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
	CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1,
	CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK = 1,
	CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED = 2,
	CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED = 3,
	CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED = 4,
};

// A legacy IPC handle's contents in the fake.
struct fake_ipc {
	uint32_t magic;
	int32_t pid;
	int32_t fd;
	int32_t dev;
	uint64_t ino;
	uint64_t size;
};
#define FAKE_MAGIC 0x41444346u // "FCDA"

enum {
	K_HANDLE,   // cuMemCreate / cuMemImportFromShareableHandle: fd, size
	K_RESERVE,  // cuMemAddressReserve: p, size
	K_MAP,      // cuMemMap: p, size, rw once cuMemSetAccess granted it
	K_LEGACY,   // cuMemAlloc_v2: p, size, fd, ino
	K_OPENED,   // cuIpcOpenMemHandle_v2: p, size
	K_HOST,     // cuMemHostRegister_v2: p, size
	K_STREAM,   // cuStreamCreate: err
	K_EVENT,    // cuEventCreate: err
};

struct obj {
	int kind;
	char *p;
	size_t size;
	int fd;
	uint64_t ino;
	int dev;
	int rw;
	CUresult err;
	struct obj *next;
};

#define MAXDEV 8
struct ctx { int dev; int refs; };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct obj *objs;
static struct ctx ctxs[MAXDEV];
static int initialized;
static __thread struct ctx *current;

static int ndev(void) {
	const char *s = getenv("FAKECUDA_DEVICES");
	int n = s ? atoi(s) : 2;
	return n < 0 ? 0 : n > MAXDEV ? MAXDEV : n;
}

static size_t granularity(void) {
	const char *s = getenv("FAKECUDA_GRANULARITY");
	size_t g = s ? strtoull(s, 0, 10) : 0;
	long page = sysconf(_SC_PAGESIZE);
	if (g == 0) g = 65536;
	if (g % page) g = (g + page - 1) / page * page;
	return g;
}

static int okdev(CUdevice d) { return d >= 0 && d < ndev(); }

#define INIT() do { if (!initialized) return CUDA_ERROR_NOT_INITIALIZED; } while (0)
#define CTX() do { INIT(); if (!current || current->refs <= 0) return CUDA_ERROR_INVALID_CONTEXT; } while (0)

static struct obj *add(struct obj o) {
	struct obj *r = malloc(sizeof *r);
	*r = o;
	pthread_mutex_lock(&mu);
	r->next = objs;
	objs = r;
	pthread_mutex_unlock(&mu);
	return r;
}

// find returns the object of kind that is r itself (byptr) or starts at p
// (with size, when size != 0), under mu.
static struct obj *find_locked(int kind, const void *p, size_t size, int byptr) {
	for (struct obj *r = objs; r; r = r->next) {
		if (r->kind != kind) continue;
		if (byptr ? (const void *)r == p : (r->p == p && (size == 0 || r->size == size))) return r;
	}
	return NULL;
}

static int has(int kind, const void *p) {
	pthread_mutex_lock(&mu);
	int ok = find_locked(kind, p, 0, 1) != NULL;
	pthread_mutex_unlock(&mu);
	return ok;
}

// take removes and returns the object, as find_locked finds it.
static struct obj *take(int kind, const void *p, size_t size, int byptr) {
	pthread_mutex_lock(&mu);
	for (struct obj **rp = &objs; *rp; rp = &(*rp)->next) {
		struct obj *r = *rp;
		if (r->kind != kind) continue;
		if (byptr ? (const void *)r == p : (r->p == p && (size == 0 || r->size == size))) {
			*rp = r->next;
			pthread_mutex_unlock(&mu);
			return r;
		}
	}
	pthread_mutex_unlock(&mu);
	return NULL;
}

// known says whether [p, p+n) lies inside one piece of memory a copy may
// touch.
static int known(const void *p, size_t n) {
	const char *c = p;
	int ok = 0;
	pthread_mutex_lock(&mu);
	for (struct obj *r = objs; r; r = r->next) {
		int mem = (r->kind == K_MAP && r->rw) || r->kind == K_LEGACY || r->kind == K_OPENED || r->kind == K_HOST;
		if (mem && c >= r->p && c + n <= r->p + r->size && c + n >= c) {
			ok = 1;
			break;
		}
	}
	pthread_mutex_unlock(&mu);
	return ok;
}

static CUresult check_prop(const CUmemAllocationProp *prop) {
	if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	if (!okdev(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
	if (prop->requestedHandleTypes & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
	return CUDA_SUCCESS;
}

// ---- Initialization, errors, devices ----

CUresult cuInit(unsigned flags) {
	if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	if (!initialized) {
		for (int i = 0; i < MAXDEV; i++) ctxs[i].dev = i;
		initialized = 1;
	}
	pthread_mutex_unlock(&mu);
	return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult e, const char **s) {
	if (!s) return CUDA_ERROR_INVALID_VALUE;
	switch (e) {
#define N(x) case x: *s = #x; return CUDA_SUCCESS;
	N(CUDA_SUCCESS) N(CUDA_ERROR_INVALID_VALUE) N(CUDA_ERROR_OUT_OF_MEMORY)
	N(CUDA_ERROR_NOT_INITIALIZED) N(CUDA_ERROR_INVALID_DEVICE) N(CUDA_ERROR_INVALID_CONTEXT)
	N(CUDA_ERROR_ALREADY_MAPPED) N(CUDA_ERROR_INVALID_HANDLE) N(CUDA_ERROR_NOT_FOUND)
	N(CUDA_ERROR_ILLEGAL_ADDRESS) N(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
	N(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED) N(CUDA_ERROR_NOT_SUPPORTED)
#undef N
	}
	*s = NULL; // as the driver does for a code it does not know
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuDeviceGetCount(int *n) {
	INIT();
	if (!n) return CUDA_ERROR_INVALID_VALUE;
	*n = ndev();
	return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *d, int ord) {
	INIT();
	if (!d) return CUDA_ERROR_INVALID_VALUE;
	if (!okdev(ord)) return CUDA_ERROR_INVALID_DEVICE;
	*d = ord;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *s, int len, CUdevice d) {
	INIT();
	if (!s || len <= 0) return CUDA_ERROR_INVALID_VALUE;
	if (!okdev(d)) return CUDA_ERROR_INVALID_DEVICE;
	snprintf(s, len, "FAKE CUDA device %d", d);
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d) {
	INIT();
	if (!u) return CUDA_ERROR_INVALID_VALUE;
	if (!okdev(d)) return CUDA_ERROR_INVALID_DEVICE;
	for (int i = 0; i < 16; i++) u->bytes[i] = (char)(0xc0 + 16 * d + i);
	return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *n, CUdevice d) {
	INIT();
	if (!n) return CUDA_ERROR_INVALID_VALUE;
	if (!okdev(d)) return CUDA_ERROR_INVALID_DEVICE;
	*n = (size_t)1 << 30;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char *s, int len, CUdevice d) {
	INIT();
	if (!s || len <= 0) return CUDA_ERROR_INVALID_VALUE;
	if (!okdev(d)) return CUDA_ERROR_INVALID_DEVICE;
	snprintf(s, len, "0000:%02X:00.0", 0xc0 + d);
	return CUDA_SUCCESS;
}

CUresult cuDeviceCanAccessPeer(int *ok, CUdevice d, CUdevice peer) {
	INIT();
	if (!ok) return CUDA_ERROR_INVALID_VALUE;
	if (!okdev(d) || !okdev(peer)) return CUDA_ERROR_INVALID_DEVICE;
	*ok = d != peer;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetP2PAttribute(int *v, int attr, CUdevice d, CUdevice peer) {
	INIT();
	if (!v) return CUDA_ERROR_INVALID_VALUE;
	if (!okdev(d) || !okdev(peer) || d == peer) return CUDA_ERROR_INVALID_DEVICE;
	switch (attr) {
	case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK: *v = 0; return CUDA_SUCCESS;
	case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
	case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
	case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED: *v = 1; return CUDA_SUCCESS;
	}
	return CUDA_ERROR_INVALID_VALUE;
}

// ---- Contexts ----

CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
	INIT();
	if (!c) return CUDA_ERROR_INVALID_VALUE;
	if (!okdev(d)) return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&mu);
	ctxs[d].refs++;
	pthread_mutex_unlock(&mu);
	*c = &ctxs[d];
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
	INIT();
	if (!okdev(d)) return CUDA_ERROR_INVALID_DEVICE;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&mu);
	if (ctxs[d].refs <= 0) r = CUDA_ERROR_INVALID_CONTEXT;
	else ctxs[d].refs--;
	pthread_mutex_unlock(&mu);
	return r;
}

CUresult cuCtxSetCurrent(CUcontext c) {
	INIT();
	if (c && ((struct ctx *)c < ctxs || (struct ctx *)c >= ctxs + MAXDEV)) return CUDA_ERROR_INVALID_CONTEXT;
	current = c;
	return CUDA_SUCCESS;
}

// ---- Streams, events, copies ----

CUresult cuStreamCreate(CUstream *s, unsigned flags) {
	CTX();
	if (!s || flags > 1) return CUDA_ERROR_INVALID_VALUE;
	*s = add((struct obj){.kind = K_STREAM, .fd = -1, .dev = current->dev});
	return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream s) {
	INIT();
	struct obj *r = take(K_STREAM, s, 0, 1);
	if (!r) return CUDA_ERROR_INVALID_HANDLE;
	free(r);
	return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent *e, unsigned flags) {
	CTX();
	if (!e || flags > 0xf) return CUDA_ERROR_INVALID_VALUE;
	*e = add((struct obj){.kind = K_EVENT, .fd = -1, .dev = current->dev});
	return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent e) {
	INIT();
	struct obj *r = take(K_EVENT, e, 0, 1);
	if (!r) return CUDA_ERROR_INVALID_HANDLE;
	free(r);
	return CUDA_SUCCESS;
}

// cuEventRecord takes the stream's failure, if any, into the event.
CUresult cuEventRecord(CUevent e, CUstream s) {
	CTX();
	if (!has(K_EVENT, e) || (s && !has(K_STREAM, s))) return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&mu);
	struct obj *ev = e, *st = s;
	ev->err = st ? st->err : CUDA_SUCCESS;
	if (st) st->err = CUDA_SUCCESS;
	pthread_mutex_unlock(&mu);
	return CUDA_SUCCESS;
}

CUresult cuEventSynchronize(CUevent e) {
	INIT();
	if (!has(K_EVENT, e)) return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&mu);
	CUresult r = ((struct obj *)e)->err;
	pthread_mutex_unlock(&mu);
	return r;
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
	CTX();
	if (s && !has(K_STREAM, s)) return CUDA_ERROR_INVALID_HANDLE;
	void *d = (void *)(uintptr_t)dst;
	const void *sp = (const void *)(uintptr_t)src;
	if (!known(d, n) || !known(sp, n)) return CUDA_ERROR_INVALID_VALUE;
	const char *fail = getenv("FAKECUDA_FAIL_LEN");
	if (fail && (size_t)strtoull(fail, 0, 10) == n) {
		if (s) {
			pthread_mutex_lock(&mu);
			((struct obj *)s)->err = CUDA_ERROR_ILLEGAL_ADDRESS;
			pthread_mutex_unlock(&mu);
		}
		return CUDA_SUCCESS;
	}
	memmove(d, sp, n);
	return CUDA_SUCCESS;
}

// ---- Host registration ----

CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags) {
	CTX();
	(void)flags;
	if (!p || n == 0) return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	for (struct obj *r = objs; r; r = r->next) {
		if (r->kind == K_HOST && (char *)p < r->p + r->size && (char *)p + n > r->p) {
			pthread_mutex_unlock(&mu);
			return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
		}
	}
	pthread_mutex_unlock(&mu);
	add((struct obj){.kind = K_HOST, .p = p, .size = n, .fd = -1, .dev = -1});
	return CUDA_SUCCESS;
}

CUresult cuMemHostUnregister(void *p) {
	INIT();
	struct obj *r = take(K_HOST, p, 0, 0);
	if (!r) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	free(r);
	return CUDA_SUCCESS;
}

// ---- Virtual memory management ----

CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop, int option) {
	INIT();
	if (!g || (option != 0 && option != 1)) return CUDA_ERROR_INVALID_VALUE;
	CUresult r = check_prop(prop);
	if (r) return r;
	*g = granularity();
	return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop, unsigned long long flags) {
	INIT();
	if (!h || flags != 0 || size == 0 || size % granularity()) return CUDA_ERROR_INVALID_VALUE;
	CUresult r = check_prop(prop);
	if (r) return r;
	int fd = memfd_create("fakecuda", MFD_CLOEXEC);
	if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
	if (ftruncate(fd, size) != 0) {
		close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*h = (uintptr_t)add((struct obj){.kind = K_HANDLE, .size = size, .fd = fd, .dev = prop->location.id});
	return CUDA_SUCCESS;
}

// cuMemRelease drops the handle; memory still mapped stays (the mapping
// holds the memfd), as the driver frees it only once it is also unmapped.
CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
	INIT();
	struct obj *r = take(K_HANDLE, (void *)(uintptr_t)h, 0, 1);
	if (!r) return CUDA_ERROR_INVALID_HANDLE;
	close(r->fd);
	free(r);
	return CUDA_SUCCESS;
}

CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h, int type, unsigned long long flags) {
	INIT();
	if (!out || flags != 0) return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
	pthread_mutex_lock(&mu);
	struct obj *r = find_locked(K_HANDLE, (void *)(uintptr_t)h, 0, 1);
	int fd = r ? fcntl(r->fd, F_DUPFD_CLOEXEC, 0) : -1;
	pthread_mutex_unlock(&mu);
	if (!r) return CUDA_ERROR_INVALID_HANDLE;
	if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
	*(int *)out = fd;
	return CUDA_SUCCESS;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os, int type) {
	INIT();
	if (!h) return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
	int fd = fcntl((int)(intptr_t)os, F_DUPFD_CLOEXEC, 0);
	struct stat st;
	if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
		close(fd);
		return CUDA_ERROR_INVALID_VALUE;
	}
	*h = (uintptr_t)add((struct obj){.kind = K_HANDLE, .size = st.st_size, .fd = fd, .dev = -1});
	return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags) {
	INIT();
	size_t g = granularity();
	if (!p || size == 0 || size % g || flags != 0 || (align && align % g) || addr % g) return CUDA_ERROR_INVALID_VALUE;
	// Reserve size + align and trim both ends, so the range is aligned
	// to the granularity (or align) as the driver's is.
	size_t a = align > g ? align : g;
	char *raw = mmap((void *)(uintptr_t)addr, size + a, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
	char *m = (char *)(((uintptr_t)raw + a - 1) / a * a);
	if (m > raw) munmap(raw, m - raw);
	if (raw + size + a > m + size) munmap(m + size, raw + size + a - (m + size));
	add((struct obj){.kind = K_RESERVE, .p = m, .size = size, .fd = -1, .dev = -1});
	*p = (uintptr_t)m;
	return CUDA_SUCCESS;
}

// cuMemAddressFree frees a whole reservation, which must have nothing
// mapped in it any more.
CUresult cuMemAddressFree(CUdeviceptr p, size_t size) {
	INIT();
	char *c = (char *)(uintptr_t)p;
	pthread_mutex_lock(&mu);
	for (struct obj *r = objs; r; r = r->next) {
		if (r->kind == K_MAP && r->p >= c && r->p < c + size) {
			pthread_mutex_unlock(&mu);
			return CUDA_ERROR_INVALID_VALUE;
		}
	}
	pthread_mutex_unlock(&mu);
	struct obj *r = take(K_RESERVE, c, size, 0);
	if (!r) return CUDA_ERROR_INVALID_VALUE;
	munmap(r->p, r->size);
	free(r);
	return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags) {
	INIT();
	size_t g = granularity();
	char *c = (char *)(uintptr_t)p;
	if (flags != 0 || size == 0 || size % g || offset % g || p % g) return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	struct obj *hr = find_locked(K_HANDLE, (void *)(uintptr_t)h, 0, 1);
	int inside = 0, overlap = 0;
	for (struct obj *r = objs; r; r = r->next) {
		if (r->kind == K_RESERVE && c >= r->p && c + size <= r->p + r->size) inside = 1;
		if (r->kind == K_MAP && c < r->p + r->size && c + size > r->p) overlap = 1;
	}
	int fd = hr ? hr->fd : -1;
	size_t hsize = hr ? hr->size : 0;
	int dev = hr ? hr->dev : -1;
	pthread_mutex_unlock(&mu);
	if (!hr) return CUDA_ERROR_INVALID_HANDLE;
	if (!inside || offset + size > hsize) return CUDA_ERROR_INVALID_VALUE;
	if (overlap) return CUDA_ERROR_ALREADY_MAPPED;
	if (mmap(c, size, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, offset) == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
	add((struct obj){.kind = K_MAP, .p = c, .size = size, .fd = -1, .dev = dev});
	return CUDA_SUCCESS;
}

// cuMemUnmap unmaps one whole mapping, leaving the address range reserved.
CUresult cuMemUnmap(CUdeviceptr p, size_t size) {
	INIT();
	struct obj *r = take(K_MAP, (char *)(uintptr_t)p, size, 0);
	if (!r) return CUDA_ERROR_INVALID_VALUE;
	mmap(r->p, r->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
	free(r);
	return CUDA_SUCCESS;
}

// cuMemSetAccess grants access to whole mappings in [p, p+size); the fake
// makes them read-write once any valid device is granted read-write.
CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *desc, size_t count) {
	INIT();
	char *c = (char *)(uintptr_t)p;
	if (!desc || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
	int rw = 0;
	for (size_t i = 0; i < count; i++) {
		if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
		if (!okdev(desc[i].location.id)) return CUDA_ERROR_INVALID_DEVICE;
		if (desc[i].flags < 0 || desc[i].flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE || desc[i].flags == 2) return CUDA_ERROR_INVALID_VALUE;
		if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) rw = 1;
	}
	pthread_mutex_lock(&mu);
	size_t covered = 0;
	for (struct obj *r = objs; r; r = r->next) {
		if (r->kind != K_MAP || r->p < c || r->p + r->size > c + size) continue;
		if (mprotect(r->p, r->size, rw ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) {
			pthread_mutex_unlock(&mu);
			return CUDA_ERROR_INVALID_VALUE;
		}
		r->rw = rw;
		covered += r->size;
	}
	pthread_mutex_unlock(&mu);
	return covered == size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// ---- Legacy allocations and IPC ----

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size) {
	CTX();
	if (!p || size == 0) return CUDA_ERROR_INVALID_VALUE;
	int fd = memfd_create("fakecuda-legacy", MFD_CLOEXEC);
	if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
	struct stat st;
	if (ftruncate(fd, size) != 0 || fstat(fd, &st) != 0) {
		close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	add((struct obj){.kind = K_LEGACY, .p = m, .size = size, .fd = fd, .ino = st.st_ino, .dev = current->dev});
	*p = (uintptr_t)m;
	return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
	INIT();
	struct obj *r = take(K_LEGACY, (void *)(uintptr_t)p, 0, 0);
	if (!r) return CUDA_ERROR_INVALID_VALUE;
	munmap(r->p, r->size);
	close(r->fd);
	free(r);
	return CUDA_SUCCESS;
}

CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) {
	INIT();
	if (!h) return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	struct obj *r = find_locked(K_LEGACY, (void *)(uintptr_t)p, 0, 0);
	struct fake_ipc f = {0};
	if (r) f = (struct fake_ipc){FAKE_MAGIC, getpid(), r->fd, r->dev, r->ino, r->size};
	pthread_mutex_unlock(&mu);
	if (!r) return CUDA_ERROR_INVALID_VALUE;
	memset(h, 0, sizeof *h);
	memcpy(h, &f, sizeof f);
	return CUDA_SUCCESS;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned flags) {
	CTX();
	if (!p || flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) return CUDA_ERROR_INVALID_VALUE;
	struct fake_ipc f;
	memcpy(&f, &h, sizeof f);
	if (f.magic != FAKE_MAGIC || f.size == 0) return CUDA_ERROR_INVALID_VALUE;
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fd/%d", f.pid, f.fd);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) return CUDA_ERROR_INVALID_VALUE; // the exporter freed it, or is gone
	struct stat st;
	if (fstat(fd, &st) != 0 || st.st_ino != f.ino) { // fd number reused
		close(fd);
		return CUDA_ERROR_INVALID_VALUE;
	}
	void *m = mmap(NULL, f.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED) return CUDA_ERROR_INVALID_VALUE;
	add((struct obj){.kind = K_OPENED, .p = m, .size = f.size, .fd = -1, .ino = f.ino, .dev = f.dev});
	*p = (uintptr_t)m;
	return CUDA_SUCCESS;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
	INIT();
	struct obj *r = take(K_OPENED, (void *)(uintptr_t)p, 0, 0);
	if (!r) return CUDA_ERROR_INVALID_VALUE;
	munmap(r->p, r->size);
	free(r);
	return CUDA_SUCCESS;
}

// fakecuda_live counts what is still held: a test hook, not CUDA.
int fakecuda_live(void) {
	int n = 0;
	pthread_mutex_lock(&mu);
	for (struct obj *r = objs; r; r = r->next) n++;
	for (int i = 0; i < MAXDEV; i++) n += ctxs[i].refs;
	pthread_mutex_unlock(&mu);
	return n;
}
