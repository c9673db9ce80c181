// FAKE HIP runtime, for Ferry's tests only: NOT AMD's HIP, and no GPU.
//
// It implements the HIP entry points devices/rocm calls, with HIP's
// signatures and error codes, over host memory, so that the plugin's real
// binding (dlopen, dlsym, trampolines) and its worker, stream and
// completion machinery run on a machine without an AMD GPU:
//
//   - a "device" allocation (hipMalloc) is a memfd mapped MAP_SHARED;
//   - its IPC handle names the exporting pid, the fd number and the
//     memfd's inode, so another process opens it through /proc/<pid>/fd
//     and a freed allocation (fd closed, or its number reused) fails to
//     open, as a real freed allocation does;
//   - copies are memcpy, run at submission; events complete at once;
//   - a copy fails with hipErrorInvalidValue at once when an end is not
//     memory the runtime knows (an allocation, an opened handle or a
//     registered host range), and asynchronously (reported by the next
//     event) with hipErrorIllegalAddress when its length equals the
//     environment variable FAKEHIP_FAIL_LEN (a test hook);
//   - FAKEHIP_DEVICES sets the device count (default 2); peers are all
//     reachable over "XGMI".
//
// Build: gcc -shared -fPIC -o libfakehip.so fakehip.c -lpthread
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

typedef int hipError_t;
enum {
	hipSuccess = 0,
	hipErrorInvalidValue = 1,
	hipErrorOutOfMemory = 2,
	hipErrorInvalidDevice = 101,
	hipErrorInvalidHandle = 400,
	hipErrorIllegalAddress = 700,
	hipErrorHostMemoryAlreadyRegistered = 712,
	hipErrorHostMemoryNotRegistered = 713,
};

typedef struct { char reserved[64]; } hipIpcMemHandle_t;
typedef struct { char bytes[16]; } hipUUID;

struct fake_handle {
	uint32_t magic;
	int32_t pid;
	int32_t fd;
	int32_t dev;
	uint64_t ino;
	uint64_t size;
};
#define FAKE_MAGIC 0x50494846u // "FHIP"

enum { KIND_ALLOC, KIND_OPENED, KIND_HOST };

struct range {
	int kind;
	char *p;
	size_t size;
	int fd;
	uint64_t ino;
	int dev;
	struct range *next;
};

struct stream { hipError_t err; };
struct event { hipError_t err; };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct range *ranges;
static __thread int current;

static int ndev(void) {
	const char *s = getenv("FAKEHIP_DEVICES");
	return s ? atoi(s) : 2;
}

static void add(struct range *r) {
	pthread_mutex_lock(&mu);
	r->next = ranges;
	ranges = r;
	pthread_mutex_unlock(&mu);
}

// take removes and returns the range of kind starting at p.
static struct range *take(int kind, void *p) {
	pthread_mutex_lock(&mu);
	for (struct range **rp = &ranges; *rp; rp = &(*rp)->next) {
		if ((*rp)->kind == kind && (*rp)->p == p) {
			struct range *r = *rp;
			*rp = r->next;
			pthread_mutex_unlock(&mu);
			return r;
		}
	}
	pthread_mutex_unlock(&mu);
	return NULL;
}

// known says whether [p, p+n) lies in one known range (or 0 when kind >= 0
// and the range is not of that kind); *out gets a copy of it.
static int known(const void *p, size_t n, int kind, struct range *out) {
	const char *c = p;
	int ok = 0;
	pthread_mutex_lock(&mu);
	for (struct range *r = ranges; r; r = r->next) {
		if (c >= r->p && c + n <= r->p + r->size && (kind < 0 || r->kind == kind)) {
			if (out) *out = *r;
			ok = 1;
			break;
		}
	}
	pthread_mutex_unlock(&mu);
	return ok;
}

hipError_t hipInit(unsigned flags) { (void)flags; return hipSuccess; }

hipError_t hipGetDeviceCount(int *n) { *n = ndev(); return hipSuccess; }

hipError_t hipDeviceGetName(char *s, int len, int dev) {
	if (dev < 0 || dev >= ndev()) return hipErrorInvalidDevice;
	snprintf(s, len, "FAKE HIP device %d", dev);
	return hipSuccess;
}

hipError_t hipDeviceGetUuid(hipUUID *u, int dev) {
	if (dev < 0 || dev >= ndev()) return hipErrorInvalidDevice;
	for (int i = 0; i < 16; i++) u->bytes[i] = (char)(0xf0 + dev + i);
	return hipSuccess;
}

hipError_t hipDeviceTotalMem(size_t *n, int dev) {
	if (dev < 0 || dev >= ndev()) return hipErrorInvalidDevice;
	*n = (size_t)1 << 30;
	return hipSuccess;
}

hipError_t hipDeviceGetPCIBusId(char *s, int len, int dev) {
	if (dev < 0 || dev >= ndev()) return hipErrorInvalidDevice;
	snprintf(s, len, "0000:%02X:00.0", 0xf0 + dev);
	return hipSuccess;
}

hipError_t hipDeviceCanAccessPeer(int *ok, int dev, int peer) {
	if (dev < 0 || dev >= ndev() || peer < 0 || peer >= ndev()) return hipErrorInvalidDevice;
	*ok = dev != peer;
	return hipSuccess;
}

hipError_t hipExtGetLinkTypeAndHopCount(int dev, int peer, uint32_t *type, uint32_t *hops) {
	if (dev < 0 || dev >= ndev() || peer < 0 || peer >= ndev()) return hipErrorInvalidDevice;
	*type = 4; // HSA_AMD_LINK_INFO_TYPE_XGMI
	*hops = 1;
	return hipSuccess;
}

hipError_t hipSetDevice(int dev) {
	if (dev < 0 || dev >= ndev()) return hipErrorInvalidDevice;
	current = dev;
	return hipSuccess;
}

hipError_t hipMalloc(void **p, size_t size) {
	int fd = memfd_create("fakehip", MFD_CLOEXEC);
	if (fd < 0) return hipErrorOutOfMemory;
	struct stat st;
	if (ftruncate(fd, size) != 0 || fstat(fd, &st) != 0) {
		close(fd);
		return hipErrorOutOfMemory;
	}
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		close(fd);
		return hipErrorOutOfMemory;
	}
	struct range *r = calloc(1, sizeof *r);
	*r = (struct range){.kind = KIND_ALLOC, .p = m, .size = size, .fd = fd, .ino = st.st_ino, .dev = current};
	add(r);
	*p = m;
	return hipSuccess;
}

hipError_t hipFree(void *p) {
	struct range *r = take(KIND_ALLOC, p);
	if (!r) return hipErrorInvalidValue;
	munmap(r->p, r->size);
	close(r->fd);
	free(r);
	return hipSuccess;
}

hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t *h, void *p) {
	struct range r;
	if (!known(p, 1, KIND_ALLOC, &r)) return hipErrorInvalidValue;
	struct fake_handle f = {FAKE_MAGIC, getpid(), r.fd, r.dev, r.ino, r.size};
	memset(h, 0, sizeof *h);
	memcpy(h, &f, sizeof f);
	return hipSuccess;
}

hipError_t hipIpcOpenMemHandle(void **p, hipIpcMemHandle_t h, unsigned flags) {
	(void)flags;
	struct fake_handle f;
	memcpy(&f, &h, sizeof f);
	if (f.magic != FAKE_MAGIC) return hipErrorInvalidHandle;
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fd/%d", f.pid, f.fd);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) return hipErrorInvalidValue; // exporter freed it, or is gone
	struct stat st;
	if (fstat(fd, &st) != 0 || st.st_ino != f.ino) { // fd number reused
		close(fd);
		return hipErrorInvalidValue;
	}
	void *m = mmap(NULL, f.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		close(fd);
		return hipErrorInvalidValue;
	}
	struct range *r = calloc(1, sizeof *r);
	*r = (struct range){.kind = KIND_OPENED, .p = m, .size = f.size, .fd = fd, .ino = f.ino, .dev = f.dev};
	add(r);
	*p = m;
	return hipSuccess;
}

hipError_t hipIpcCloseMemHandle(void *p) {
	struct range *r = take(KIND_OPENED, p);
	if (!r) return hipErrorInvalidValue;
	munmap(r->p, r->size);
	close(r->fd);
	free(r);
	return hipSuccess;
}

hipError_t hipHostRegister(void *p, size_t n, unsigned flags) {
	(void)flags;
	if (known(p, 1, KIND_HOST, NULL)) return hipErrorHostMemoryAlreadyRegistered;
	struct range *r = calloc(1, sizeof *r);
	*r = (struct range){.kind = KIND_HOST, .p = p, .size = n, .fd = -1};
	add(r);
	return hipSuccess;
}

hipError_t hipHostUnregister(void *p) {
	struct range *r = take(KIND_HOST, p);
	if (!r) return hipErrorHostMemoryNotRegistered;
	free(r);
	return hipSuccess;
}

hipError_t hipStreamCreateWithFlags(void **s, unsigned flags) {
	(void)flags;
	*s = calloc(1, sizeof(struct stream));
	return hipSuccess;
}

hipError_t hipStreamDestroy(void *s) { free(s); return hipSuccess; }

hipError_t hipEventCreateWithFlags(void **e, unsigned flags) {
	(void)flags;
	*e = calloc(1, sizeof(struct event));
	return hipSuccess;
}

hipError_t hipEventDestroy(void *e) { free(e); return hipSuccess; }

// hipEventRecord takes the stream's failure, if any, into the event.
hipError_t hipEventRecord(void *e, void *s) {
	struct stream *st = s;
	((struct event *)e)->err = st->err;
	st->err = hipSuccess;
	return hipSuccess;
}

hipError_t hipEventSynchronize(void *e) { return ((struct event *)e)->err; }

hipError_t hipMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *s) {
	if (kind != 4) return hipErrorInvalidValue; // hipMemcpyDefault only
	if (!known(dst, n, -1, NULL) || !known(src, n, -1, NULL)) return hipErrorInvalidValue;
	const char *fail = getenv("FAKEHIP_FAIL_LEN");
	if (fail && (size_t)atoll(fail) == n) {
		((struct stream *)s)->err = hipErrorIllegalAddress;
		return hipSuccess;
	}
	memmove(dst, src, n);
	return hipSuccess;
}

const char *hipGetErrorName(hipError_t e) {
	switch (e) {
	case hipSuccess: return "hipSuccess";
	case hipErrorInvalidValue: return "hipErrorInvalidValue";
	case hipErrorOutOfMemory: return "hipErrorOutOfMemory";
	case hipErrorInvalidDevice: return "hipErrorInvalidDevice";
	case hipErrorInvalidHandle: return "hipErrorInvalidHandle";
	case hipErrorIllegalAddress: return "hipErrorIllegalAddress";
	case hipErrorHostMemoryAlreadyRegistered: return "hipErrorHostMemoryAlreadyRegistered";
	case hipErrorHostMemoryNotRegistered: return "hipErrorHostMemoryNotRegistered";
	}
	return "hipErrorUnknown";
}

// fakehip_live counts what is still allocated, opened or registered: a
// test hook, not HIP.
int fakehip_live(void) {
	int n = 0;
	pthread_mutex_lock(&mu);
	for (struct range *r = ranges; r; r = r->next) n++;
	pthread_mutex_unlock(&mu);
	return n;
}
