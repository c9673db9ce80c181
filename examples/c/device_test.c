/*
 * device_test.c: the C test of libferry's device memory calls (run by
 * `make ctest`). Two engines in this process, each with tcp and the
 * simulated device (plugins/simdev: a TEST TOOL standing in for a GPU,
 * whose device addresses no process can dereference). It allocates
 * simulated GPU memory with ferry_allocate_device, maps it through the
 * handle as an application maps GPU memory with its own driver, registers
 * it with ferry_register_device, and moves verified bytes GPU -> remote
 * GPU and back, staged through host memory over tcp. Then it checks that
 * bad registrations fail with messages that name what failed.
 *
 * Plugins are found through $FERRY_PLUGIN_DIR.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ferry.h"
#include "check.h"

enum { N = (3 << 20) + 4099, ALLOC = 4 << 20 };

static ferry_engine_t engine(const char *name, const char *metastore) {
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "name = \"%s\"\n"
             "metastore {\n%s}\n"
             "plugin \"tcp\" {\n  config {\n    listen = [\"127.0.0.1:0\"]\n  }\n}\n"
             "device \"simdev\" {\n  config {\n    devices = 2\n    memory = \"64MiB\"\n  }\n}\n"
             "staging {\n  pool = \"8MiB\"\n  slice_size = \"1MiB\"\n}\n",
             name, metastore);
    ferry_engine_t e = 0;
    MUST(ferry_create_engine_from_text(cfg, &e));
    return e;
}

/* map_sim maps a "sim" handle's range: the application's own driver. For
 * a real GPU this is cuMemImportFromShareableHandle or cudaIpcOpenMemHandle;
 * for the simulated device it is the handle's memfd, named by the simdev
 * process's pid and fd number (data: pid u32, fd u32, allocation id u64,
 * little-endian), opened through /proc and checked to be the memfd of
 * that allocation ("ferry-simdev-<id>") before it is mapped. */
static uint8_t *map_sim(const ferry_device_handle_t *h) {
    if (strcmp(h->type, "sim") != 0 || h->data_len != 16) {
        fprintf(stderr, "FAIL: handle type %s with %u bytes is not a sim handle\n", h->type, h->data_len);
        exit(1);
    }
    uint32_t pid, fd;
    uint64_t id;
    memcpy(&pid, h->data, 4); /* little-endian hosts only, as this test runs */
    memcpy(&fd, h->data + 4, 4);
    memcpy(&id, h->data + 8, 8);
    char path[64], link[256], want[64];
    snprintf(path, sizeof path, "/proc/%u/fd/%u", pid, fd);
    ssize_t n = readlink(path, link, sizeof link - 1);
    snprintf(want, sizeof want, "/memfd:ferry-simdev-%" PRIu64 " ", id);
    if (n < 0 || (link[n] = 0, strncmp(link, want, strlen(want) - 1) != 0)) {
        fprintf(stderr, "FAIL: %s links to %s, not the memfd of allocation %" PRIu64 "\n", path, n < 0 ? "nothing" : link, id);
        exit(1);
    }
    int f = open(path, O_RDWR);
    if (f < 0) {
        perror(path);
        exit(1);
    }
    void *p = mmap(NULL, h->offset + h->length, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    close(f);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    return (uint8_t *)p + h->offset;
}

static uint8_t pattern(size_t i) { return (uint8_t)(i * 131 + (i >> 9) + 7); }

int main(void) {
    ferry_engine_t a = engine("cdev-a", "");
    char url[256];
    MUST(ferry_metastore_url(a, url, sizeof url, NULL));
    char join[300];
    snprintf(join, sizeof join, "  kind = \"http\"\n  url = \"%s\"\n", url);
    ferry_engine_t b = engine("cdev-b", join);

    /* Simulated GPU memory on both engines, mapped through its handle. */
    ferry_device_memory_t src, back, dst;
    MUST(ferry_allocate_device(a, "cuda:0", ALLOC, &src));
    MUST(ferry_allocate_device(a, "cuda:1", ALLOC, &back));
    MUST(ferry_allocate_device(b, "cuda", ALLOC, &dst));
    CHECK(strcmp(src.kind, "cuda:0") == 0 && strcmp(back.kind, "cuda:1") == 0, "kinds %s, %s", src.kind, back.kind);
    CHECK(src.size == ALLOC && src.handle.length == ALLOC && src.handle.offset == 0, "size %" PRIu64, src.size);
    uint8_t *srcv = map_sim(&src.handle), *backv = map_sim(&back.handle), *dstv = map_sim(&dst.handle);
    for (size_t i = 0; i < N; i++) {
        srcv[i] = pattern(i);
    }

    /* Registration: by kind with no handle (the plugin finds its own
     * allocation), with the handle, and by detection (ferry_register of
     * an address that is not host memory). */
    uint64_t base = 0, dbase = 0;
    MUST(ferry_register_device(a, src.addr, ALLOC, "cuda:0", FERRY_PERM_LOCAL, NULL, &base));
    CHECK(base == (uint64_t)(uintptr_t)src.addr, "base 0x%" PRIx64 " is not the address", base);
    MUST(ferry_register_device(a, back.addr, ALLOC, "cuda:1", FERRY_PERM_LOCAL, &back.handle, NULL));
    MUST(ferry_register(b, dst.addr, ALLOC, FERRY_PERM_REMOTE_READ_WRITE, &dbase));
    CHECK(dbase == (uint64_t)(uintptr_t)dst.addr, "detected base 0x%" PRIx64, dbase);

    ferry_segment_t seg;
    MUST(ferry_open_segment(a, "cdev-b", &seg));
    ferry_segment_info_t *info = NULL;
    MUST(ferry_segment_info(a, seg, &info));
    int seen = 0;
    for (size_t i = 0; i < info->num_buffers; i++) {
        seen |= info->buffers[i].base == dbase && info->buffers[i].length == ALLOC;
    }
    CHECK(seen, "the peer's segment does not list its device buffer");
    ferry_free_segment_info(info);

    /* GPU -> remote GPU at odd offsets (a write), then remote GPU -> GPU
     * (a read): staged through host memory over tcp on both sides. */
    MUST(ferry_transfer_sync(a, FERRY_WRITE, seg, (uint8_t *)src.addr + 3, dbase + 7, N, 0, NULL));
    CHECK(memcmp(dstv + 7, srcv + 3, N) == 0, "GPU -> remote GPU: bytes differ");
    ferry_request_t r = {.opcode = FERRY_READ, .priority = FERRY_PRIORITY_MEDIUM, .source = (uint8_t *)back.addr + 1,
                         .target_id = seg, .target_offset = dbase + 7, .length = N};
    MUST(ferry_transfer(a, &r, 1));
    CHECK(memcmp(backv + 1, srcv + 3, N) == 0, "remote GPU -> GPU: bytes differ");

    /* Bad input, on src once unregistered (an overlap is refused first):
     * each fails, names what failed, and registers nothing. */
    MUST(ferry_unregister_device(a, src.addr));
    static uint8_t hostbuf[4096];
    EXPECT_SAYS(FERRY_ERR_INVALID, "not device memory",
           ferry_register_device(a, hostbuf, sizeof hostbuf, "cuda", FERRY_PERM_LOCAL, NULL, NULL));
    EXPECT_SAYS(FERRY_ERR_INVALID, "is on cuda:0",
           ferry_register_device(a, src.addr, 4096, "cuda:1", FERRY_PERM_LOCAL, NULL, NULL));
    EXPECT_SAYS(FERRY_ERR_UNAVAILABLE, "no device plugin serves rocm",
           ferry_register_device(a, src.addr, 4096, "rocm", FERRY_PERM_LOCAL, NULL, NULL));
    EXPECT_SAYS(FERRY_ERR_INVALID, "want cuda, rocm",
           ferry_register_device(a, src.addr, 4096, "tpu:0", FERRY_PERM_LOCAL, NULL, NULL));
    EXPECT_SAYS(FERRY_ERR_INVALID, "NULL", ferry_register_device(a, NULL, 4096, "cuda", FERRY_PERM_LOCAL, NULL, NULL));
    ferry_device_handle_t bad = src.handle;
    bad.data_len = 0;
    EXPECT_SAYS(FERRY_ERR_INVALID, "data_len",
           ferry_register_device(a, src.addr, ALLOC, "cuda:0", FERRY_PERM_LOCAL, &bad, NULL));
    bad = src.handle;
    EXPECT_SAYS(FERRY_ERR_INVALID, "handle->length",
           ferry_register_device(a, src.addr, 4096, "cuda:0", FERRY_PERM_LOCAL, &bad, NULL));
    ferry_device_memory_t none;
    EXPECT_SAYS(FERRY_ERR_UNAVAILABLE, "rocm", ferry_allocate_device(a, "rocm", 4096, &none));
    EXPECT_SAYS(FERRY_ERR_INVALID, "ferry_allocate_device", ferry_free_device(a, hostbuf));

    /* Unregister (both calls do it) and free. */
    MUST(ferry_unregister(a, back.addr));
    MUST(ferry_unregister(b, dst.addr));
    EXPECT_SAYS(FERRY_ERR_NOT_REGISTERED, "", ferry_unregister_device(a, src.addr));
    MUST(ferry_free_device(a, src.addr));
    MUST(ferry_free_device(a, back.addr));
    MUST(ferry_free_device(b, dst.addr));
    MUST(ferry_destroy_engine(b));
    MUST(ferry_destroy_engine(a));
    if (failures) {
        fprintf(stderr, "device_test: %d failures\n", failures);
        return 1;
    }
    printf("device_test: ok (%d bytes GPU -> remote GPU -> GPU, staged over tcp; bad registrations refused)\n", N);
    return 0;
}
