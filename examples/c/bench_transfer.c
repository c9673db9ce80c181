/*
 * bench_transfer.c: the cost of one synchronous 4 KiB write through the C
 * ABI (ferry_transfer), over shm to the engine's own segment, the same
 * work as capi's BenchmarkTransfer4KiB does through host's Go API.
 * Compare the two in the same run, interleaved.
 *
 *   FERRY_PLUGIN_DIR=bin ./bench_transfer [iterations]
 *
 * It prints "ns/op N" (the median of 5 rounds) and the rounds, then
 * the same for ferry_batch_status alone ("status ns/op"): the cost of a
 * call across the boundary with next to no work behind it, against
 * capi's BenchmarkBatchStatus.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ferry.h"

static void check(int rc, const char *what) {
    if (rc != FERRY_OK) {
        fprintf(stderr, "%s: %s: %s\n", what, ferry_error_name(rc), ferry_last_error());
        exit(1);
    }
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 20000;
    enum { SIZE = 4096, ROUNDS = 5 };
    char name[64], cfg[512];
    snprintf(name, sizeof name, "c-bench-%ld", (long)now_ns());
    snprintf(cfg, sizeof cfg,
             "name = \"%s\"\nmetastore {\n  kind = \"embedded\"\n  listen = \"127.0.0.1:0\"\n}\n"
             "plugin \"shm\" {}\n",
             name);
    ferry_engine_t e = 0;
    check(ferry_create_engine_from_text(cfg, &e), "create");
    void *mem = NULL;
    check(ferry_allocate(e, 2 * SIZE, &mem), "allocate");
    check(ferry_register(e, mem, SIZE, FERRY_PERM_LOCAL, NULL), "register src");
    uint64_t dst = 0;
    check(ferry_register(e, (char *)mem + SIZE, SIZE, FERRY_PERM_REMOTE_READ_WRITE, &dst), "register dst");
    memset(mem, 7, SIZE);
    ferry_segment_t seg = 0;
    check(ferry_open_segment(e, name, &seg), "open own segment");
    ferry_request_t r = {0};
    r.opcode = FERRY_WRITE;
    r.priority = FERRY_PRIORITY_MEDIUM;
    r.source = mem;
    r.target_id = seg;
    r.target_offset = dst;
    r.length = SIZE;
    r.transport_hint = "shm";
    for (int i = 0; i < 1000; i++) { /* warm: lanes, pools */
        check(ferry_transfer(e, &r, 1), "transfer");
    }
    double ns[ROUNDS];
    for (int k = 0; k < ROUNDS; k++) {
        int64_t t0 = now_ns();
        for (long i = 0; i < iters; i++) {
            check(ferry_transfer(e, &r, 1), "transfer");
        }
        ns[k] = (double)(now_ns() - t0) / (double)iters;
    }
    if (memcmp(mem, (char *)mem + SIZE, SIZE) != 0) {
        fprintf(stderr, "the destination holds other bytes than the source\n");
        return 1;
    }
    double sorted[ROUNDS];
    memcpy(sorted, ns, sizeof ns);
    qsort(sorted, ROUNDS, sizeof sorted[0], cmp);
    printf("ns/op %.0f (rounds:", sorted[ROUNDS / 2]);
    for (int k = 0; k < ROUNDS; k++) {
        printf(" %.0f", ns[k]);
    }
    printf("; %ld transfers each)\n", iters);

    ferry_batch_t b = 0;
    check(ferry_allocate_batch(e, 1, &b), "allocate batch");
    check(ferry_submit(e, b, &r, 1), "submit");
    check(ferry_wait(e, b, 0), "wait");
    ferry_batch_status_t bs;
    long calls = iters * 20;
    for (int k = 0; k < ROUNDS; k++) {
        int64_t t0 = now_ns();
        for (long i = 0; i < calls; i++) {
            check(ferry_batch_status(e, b, &bs), "batch status");
        }
        ns[k] = (double)(now_ns() - t0) / (double)calls;
    }
    if (bs.completed != 1) {
        fprintf(stderr, "batch status: %llu completed, want 1\n", (unsigned long long)bs.completed);
        return 1;
    }
    memcpy(sorted, ns, sizeof ns);
    qsort(sorted, ROUNDS, sizeof sorted[0], cmp);
    printf("status ns/op %.0f (rounds:", sorted[ROUNDS / 2]);
    for (int k = 0; k < ROUNDS; k++) {
        printf(" %.0f", ns[k]);
    }
    printf("; %ld calls each)\n", calls);
    check(ferry_free_batch(e, b), "free batch");
    check(ferry_destroy_engine(e), "destroy");
    return 0;
}
