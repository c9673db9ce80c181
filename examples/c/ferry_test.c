/*
 * ferry_test.c: the C test of libferry (run by `make ctest` and by
 * capi's Go test). It checks the boundary's bad-input handling, then
 * moves verified bytes between two processes, each with its own engine:
 * over shm (Ferry memory, zero copy) and over tcp (malloc'd application
 * memory), each batch with a notification on landing.
 *
 *   ferry_test            run everything (spawns itself as the peer)
 *   ferry_test peer URL   the writing side, joined to URL's metastore
 *
 * Plugins are found through $FERRY_PLUGIN_DIR.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ferry.h"
#include "check.h"

/* EXPECT checks that call returns code with a message that says
 * something. */
#define EXPECT(code, call)                                                        \
    do {                                                                          \
        int rc_ = (call);                                                         \
        CHECK(rc_ == (code), "%s = %s, want %s", #call, ferry_error_name(rc_),    \
              ferry_error_name(code));                                            \
        CHECK(rc_ == FERRY_OK || rc_ == FERRY_ERR_AGAIN || ferry_last_error()[0], \
              "%s failed with no message", #call);                                \
    } while (0)

enum { SIZE = 1 << 16, HALF = SIZE / 2 };

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* pattern is what the peer writes at offset off: verifiable, unlike
 * zeros, and different for each half. */
static uint8_t pattern(size_t off, unsigned seed) { return (uint8_t)(off * 31 + seed * 7 + (off >> 8)); }

static ferry_engine_t engine(const char *name, const char *metastore) {
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "name = \"%s\"\n"
             "metastore {\n%s}\n"
             "plugin \"tcp\" {\n  config {\n    listen = [\"127.0.0.1:0\"]\n  }\n}\n"
             "plugin \"shm\" {}\n",
             name, metastore);
    ferry_engine_t e = 0;
    MUST(ferry_create_engine_from_text(cfg, &e));
    return e;
}

/* ---- bad input ------------------------------------------------------- */

/* b_live returns a new batch of e (for the checks that need one). */
static ferry_batch_t b_live(ferry_engine_t e) {
    ferry_batch_t b = 0;
    MUST(ferry_allocate_batch(e, 1, &b));
    return b;
}

/* Each thread's message is its own: two threads fail differently at
 * once and each reads back its own failure. */
struct thread_arg {
    ferry_engine_t e;
    int which, bad;
};

static void *fail_in_thread(void *p) {
    struct thread_arg *a = p;
    for (int i = 0; i < 200; i++) {
        void *out = NULL;
        const char *want;
        if (a->which == 0) {
            ferry_allocate(a->e, 0, &out);
            want = "size 0";
        } else {
            ferry_open_segment(a->e, "", (ferry_segment_t *)&out);
            want = "name is NULL or empty";
        }
        a->bad += strstr(ferry_last_error(), want) == NULL;
    }
    return NULL;
}

static void thread_messages(ferry_engine_t e) {
    pthread_t t[2];
    struct thread_arg a[2] = {{e, 0, 0}, {e, 1, 0}};
    for (int i = 0; i < 2; i++) {
        pthread_create(&t[i], NULL, fail_in_thread, &a[i]);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
    }
    CHECK(a[0].bad == 0 && a[1].bad == 0, "threads read another thread's message: %d, %d", a[0].bad, a[1].bad);
}

/* EXPECT_INVALID checks that call is refused as a bad argument, with no
 * panic recovered on the way (the message of one says "internal error"). */
#define EXPECT_INVALID(call)                                                                        \
    do {                                                                                            \
        EXPECT(FERRY_ERR_INVALID, call);                                                            \
        CHECK(strstr(ferry_last_error(), "internal error") == NULL, "%s: %s", #call, ferry_last_error()); \
    } while (0)

/* overflows: a length or count that overflows, or a pointer whose range
 * runs past the end of the address space, is a bad argument in every call
 * that takes a pointer and a length; p is 4 KiB of e's memory. */
static void overflows(ferry_engine_t e, void *p) {
    void *top = (void *)UINTPTR_MAX;
    EXPECT_INVALID(ferry_register(e, p, SIZE_MAX, FERRY_PERM_LOCAL, NULL));
    CHECK(strstr(ferry_last_error(), "ferry_register") != NULL && strstr(ferry_last_error(), "overflow") != NULL,
          "message: %s", ferry_last_error());
    EXPECT_INVALID(ferry_register(e, top, 64, FERRY_PERM_LOCAL, NULL));
    CHECK(strstr(ferry_last_error(), "address space") != NULL, "message: %s", ferry_last_error());
    EXPECT_INVALID(ferry_unregister(e, top));
    EXPECT_INVALID(ferry_allocate(e, SIZE_MAX, &(void *){NULL}));
    {
        void *ptrs[1] = {p};
        size_t lens[1] = {SIZE_MAX};
        int perms[1] = {FERRY_PERM_LOCAL};
        EXPECT_INVALID(ferry_register_batch(e, ptrs, lens, 1, perms, 1));
        CHECK(strstr(ferry_last_error(), "buffer 0") != NULL, "message: %s", ferry_last_error());
        EXPECT_INVALID(ferry_register_batch(e, ptrs, lens, SIZE_MAX, perms, 1));
        ptrs[0] = top;
        lens[0] = 64;
        EXPECT_INVALID(ferry_register_batch(e, ptrs, lens, 1, perms, 1));
        EXPECT_INVALID(ferry_unregister_batch(e, ptrs, 1));
        EXPECT_INVALID(ferry_unregister_batch(e, ptrs, SIZE_MAX));
    }
    EXPECT_INVALID(ferry_allocate_batch(e, SIZE_MAX, &(ferry_batch_t){0}));
    {
        ferry_batch_t b = b_live(e);
        ferry_request_t r = {0};
        r.opcode = FERRY_WRITE;
        r.priority = FERRY_PRIORITY_MEDIUM;
        r.source = p;
        r.length = SIZE_MAX;
        EXPECT_INVALID(ferry_submit(e, b, &r, 1));
        EXPECT_INVALID(ferry_transfer(e, &r, 1));
        r.source = top;
        r.length = 64;
        EXPECT_INVALID(ferry_submit(e, b, &r, 1));
        r.source = p;
        EXPECT_INVALID(ferry_submit(e, b, &r, SIZE_MAX));
        EXPECT_INVALID(ferry_submit_notif(e, b, &r, 1, "n", p, SIZE_MAX));
        ferry_task_status_t st[2];
        size_t filled = 0;
        EXPECT_INVALID(ferry_task_status_list(e, b, 0, st, SIZE_MAX, &filled));
        EXPECT_INVALID(ferry_task_status_list(e, b, SIZE_MAX, st, 2, &filled));
        MUST(ferry_free_batch(e, b));
    }
    EXPECT_INVALID(ferry_transfer_sync(e, FERRY_WRITE, 999, top, 0, 64, 0, NULL));
    EXPECT_INVALID(ferry_send_notif(e, 999, "x", p, SIZE_MAX));
    EXPECT_INVALID(ferry_send_notif(e, 999, "x", top, 64));
    EXPECT_INVALID(ferry_import_segment(e, p, SIZE_MAX, NULL, &(ferry_segment_t){0}));
    EXPECT_INVALID(ferry_import_segment(e, top, 64, NULL, &(ferry_segment_t){0}));
    EXPECT_INVALID(ferry_segment_name(e, (char *)top, 64, &(size_t){0}));
    {
        ferry_block_layout_t l = {0};
        l.block_size = 64;
        l.blocks = 1;
        EXPECT_INVALID(ferry_prepare_blocks(e, 999, p, SIZE_MAX, &l, 0, &l, &(ferry_blocks_t){0}));
        EXPECT_INVALID(ferry_prepare_blocks(e, 999, top, 64, &l, 0, &l, &(ferry_blocks_t){0}));
    }
}

/* strict_default: an engine whose configuration leaves strict out is
 * strict, as the reference says: a plugin pinned to a digest its binary
 * does not have keeps it from starting. */
static void strict_default(void) {
    const char *cfg =
        "name = \"c-strict\"\n"
        "metastore {\n  kind = \"none\"\n}\n"
        "plugin \"tcp\" {\n  sha256 = \"0000000000000000000000000000000000000000000000000000000000000000\"\n"
        "  config {\n    listen = [\"127.0.0.1:0\"]\n  }\n}\n"
        "plugin \"shm\" {}\n";
    ferry_engine_t e = 0;
    EXPECT(FERRY_ERR_PLUGIN_FAILED, ferry_create_engine_from_text(cfg, &e));
    CHECK(strstr(ferry_last_error(), "sha256") != NULL && strstr(ferry_last_error(), "strict = false") != NULL,
          "message: %s", ferry_last_error());
    CHECK(e == 0, "a failed create set the handle");
    if (e != 0) {
        ferry_destroy_engine(e);
    }
}

static void bad_input(void) {
    ferry_engine_t e = 0, none = 0;
    ferry_batch_t b = 0;
    ferry_segment_t seg = 0;
    void *p = NULL;
    char buf[8];
    size_t n = 0;

    EXPECT(FERRY_ERR_INVALID, ferry_create_engine_from_text(NULL, &e));
    EXPECT(FERRY_ERR_INVALID, ferry_create_engine_from_text("", &e));
    EXPECT(FERRY_ERR_INVALID, ferry_create_engine_from_file(NULL, &e));
    EXPECT(FERRY_ERR_CONFIG, ferry_create_engine_from_file("/nonexistent/ferry.hcl", &e));
    EXPECT(FERRY_ERR_CONFIG, ferry_create_engine_from_text("name = ", &e));
    CHECK(strstr(ferry_last_error(), "ferry_create_engine_from_text: <config text>:1:") != NULL,
          "a config error names where: %s", ferry_last_error());
    /* A cluster secret in memory: one of path and text, 16 bytes at least. */
    EXPECT(FERRY_ERR_INVALID, ferry_create_engine_with_secret(NULL, NULL, "0123456789abcdef", 16, &e));
    EXPECT(FERRY_ERR_INVALID, ferry_create_engine_with_secret("/etc/ferry.hcl", "name = \"x\"", "0123456789abcdef", 16, &e));
    EXPECT(FERRY_ERR_INVALID, ferry_create_engine_with_secret(NULL, "name = \"x\"", "short", 5, &e));
    CHECK(strstr(ferry_last_error(), "the cluster secret is 5 bytes; give at least 16") != NULL,
          "a short secret's message: %s", ferry_last_error());
    EXPECT(FERRY_ERR_INVALID, ferry_create_engine_with_secret(NULL, "name = \"x\"", NULL, 16, &e));
    EXPECT(FERRY_ERR_CONFIG, ferry_create_engine_with_secret(NULL, "name = ", "0123456789abcdef", 16, &e));
    CHECK(e == 0, "a failed create set the handle");
    strict_default();

    /* Unknown handles. */
    EXPECT(FERRY_ERR_INVALID, ferry_allocate(none, 64, &p));
    EXPECT(FERRY_ERR_INVALID, ferry_destroy_engine(12345678));
    CHECK(strstr(ferry_last_error(), "unknown engine handle") != NULL, "message: %s", ferry_last_error());

    e = engine("c-bad-input", "  kind = \"embedded\"\n  listen = \"127.0.0.1:0\"\n");
    /* NULL pointers and zero lengths. */
    EXPECT(FERRY_ERR_INVALID, ferry_allocate(e, 0, &p));
    EXPECT(FERRY_ERR_INVALID, ferry_allocate(e, 64, NULL));
    EXPECT(FERRY_ERR_INVALID, ferry_free(e, NULL));
    EXPECT(FERRY_ERR_INVALID, ferry_register(e, NULL, 64, FERRY_PERM_LOCAL, NULL));
    MUST(ferry_allocate(e, 4096, &p));
    EXPECT(FERRY_ERR_INVALID, ferry_register(e, p, 0, FERRY_PERM_LOCAL, NULL));
    EXPECT(FERRY_ERR_INVALID, ferry_register(e, p, 64, 7, NULL));
    EXPECT(FERRY_ERR_INVALID, ferry_unregister(e, NULL));
    EXPECT(FERRY_ERR_NOT_REGISTERED, ferry_unregister(e, p));
    EXPECT(FERRY_ERR_INVALID, ferry_register_batch(e, NULL, NULL, 1, NULL, 1));
    {
        void *ptrs[2] = {p, NULL};
        size_t lens[2] = {64, 64};
        int perms[1] = {FERRY_PERM_LOCAL};
        EXPECT(FERRY_ERR_INVALID, ferry_register_batch(e, ptrs, lens, 0, perms, 1));
        EXPECT(FERRY_ERR_INVALID, ferry_register_batch(e, ptrs, lens, 2, perms, 1));
        /* nothing of the refused batch was registered */
        EXPECT(FERRY_ERR_NOT_REGISTERED, ferry_unregister(e, p));
    }
    {
        /* Application memory in a batch: registered one by one, all or
         * nothing. */
        char *am = malloc(8192);
        void *ptrs[2] = {am, am + 4096};
        size_t lens[2] = {4096, 4096};
        int perms[2] = {FERRY_PERM_LOCAL, FERRY_PERM_REMOTE_READ};
        MUST(ferry_register_batch(e, ptrs, lens, 2, perms, 2));
        MUST(ferry_unregister_batch(e, ptrs, 2));
        EXPECT(FERRY_ERR_NOT_REGISTERED, ferry_unregister(e, am));
        /* The second overlaps the first: refused, and the first undone. */
        void *overlap[2] = {am, am + 2048};
        EXPECT(FERRY_ERR_INVALID, ferry_register_batch(e, overlap, lens, 2, perms, 1));
        CHECK(strstr(ferry_last_error(), "buffer 1") != NULL, "message: %s", ferry_last_error());
        EXPECT(FERRY_ERR_NOT_REGISTERED, ferry_unregister(e, am));
        EXPECT(FERRY_ERR_INVALID, ferry_unregister_batch(e, NULL, 1));
        free(am);
        /* Ferry memory in a batch: one host batch. */
        void *halves[2] = {p, (char *)p + 2048};
        size_t hl[2] = {2048, 2048};
        MUST(ferry_register_batch(e, halves, hl, 2, perms, 1));
        EXPECT(FERRY_ERR_INVALID, ferry_register_batch(e, halves, hl, 2, perms, 1)); /* registered already */
        MUST(ferry_unregister_batch(e, halves, 2));
        EXPECT(FERRY_ERR_NOT_REGISTERED, ferry_unregister(e, p));
    }
    EXPECT(FERRY_ERR_INVALID, ferry_free(e, (char *)p + 1));
    EXPECT(FERRY_ERR_INVALID, ferry_open_segment(e, NULL, &seg));
    EXPECT(FERRY_ERR_INVALID, ferry_open_segment(e, "", &seg));
    EXPECT(FERRY_ERR_SEGMENT_NOT_FOUND, ferry_open_segment(e, "c-no-such-engine", &seg));
    EXPECT(FERRY_ERR_INVALID, ferry_import_segment(e, NULL, 0, NULL, &seg));
    EXPECT(FERRY_ERR_INVALID, ferry_import_segment(e, "garbage!", 8, NULL, &seg));
    EXPECT(FERRY_ERR_INVALID, ferry_allocate_batch(e, 0, &b));
    EXPECT(FERRY_ERR_INVALID, ferry_allocate_batch(e, 4, NULL));
    EXPECT(FERRY_ERR_INVALID, ferry_submit(e, 0, NULL, 1));
    MUST(ferry_allocate_batch(e, 4, &b));
    EXPECT(FERRY_ERR_INVALID, ferry_submit(e, b, NULL, 1));
    {
        ferry_request_t r = {0};
        r.opcode = FERRY_WRITE;
        r.priority = FERRY_PRIORITY_MEDIUM;
        r.source = p;
        r.length = 64;
        EXPECT(FERRY_ERR_INVALID, ferry_submit(e, b, &r, 0));
        r.length = 0;
        EXPECT(FERRY_ERR_INVALID, ferry_submit(e, b, &r, 1));
        r.length = 64;
        r.source = NULL;
        EXPECT(FERRY_ERR_INVALID, ferry_submit(e, b, &r, 1));
        r.source = p;
        r.opcode = 9;
        EXPECT(FERRY_ERR_INVALID, ferry_submit(e, b, &r, 1));
        r.opcode = FERRY_WRITE;
        r.priority = 3;
        EXPECT(FERRY_ERR_INVALID, ferry_submit(e, b, &r, 1));
        r.priority = FERRY_PRIORITY_MEDIUM;
        EXPECT(FERRY_ERR_INVALID, ferry_submit_notif(e, b, &r, 1, NULL, NULL, 0));
        /* A well-formed request to a segment not open: an INVALID task. */
        r.target_id = 999;
        MUST(ferry_submit(e, b, &r, 1));
        MUST(ferry_wait(e, b, 0));
        ferry_task_status_t st;
        MUST(ferry_task_status(e, b, 0, &st));
        CHECK(st.state == FERRY_TASK_INVALID && st.error != FERRY_OK, "task to an unopened segment: state %d error %s",
              st.state, ferry_error_name(st.error));
        EXPECT(FERRY_ERR_INVALID, ferry_task_status(e, b, 5, &st));
        EXPECT(FERRY_ERR_INVALID, ferry_task_status(e, b, 0, NULL));
    }
    /* ferry_transfer_sync: the same checks as a request's, nothing moved. */
    EXPECT(FERRY_ERR_INVALID, ferry_transfer_sync(none, FERRY_WRITE, 999, p, 0, 64, 0, NULL));
    EXPECT(FERRY_ERR_INVALID, ferry_transfer_sync(e, FERRY_WRITE, 999, NULL, 0, 64, 0, NULL));
    CHECK(strstr(ferry_last_error(), "local is NULL") != NULL, "message: %s", ferry_last_error());
    EXPECT(FERRY_ERR_INVALID, ferry_transfer_sync(e, FERRY_WRITE, 999, p, 0, 0, 0, NULL));
    CHECK(strstr(ferry_last_error(), "length 0") != NULL, "message: %s", ferry_last_error());
    EXPECT(FERRY_ERR_INVALID, ferry_transfer_sync(e, 9, 999, p, 0, 64, 0, NULL));
    CHECK(strstr(ferry_last_error(), "opcode") != NULL, "message: %s", ferry_last_error());
    EXPECT(FERRY_ERR_INVALID, ferry_transfer_sync(e, FERRY_READ, 999, p, 0, 64, -1, NULL));
    CHECK(strstr(ferry_last_error(), "timeout_ns -1") != NULL, "message: %s", ferry_last_error());
    EXPECT(FERRY_ERR_INVALID, ferry_transfer_sync(e, FERRY_READ, 999, p, 0, SIZE_MAX, 0, NULL));
    CHECK(strstr(ferry_last_error(), "address space") != NULL, "message: %s", ferry_last_error());
    /* ferry_upgrade_plugin: bad arguments upgrade nothing (upgrade_test.c
     * upgrades). */
    EXPECT(FERRY_ERR_INVALID, ferry_upgrade_plugin(none, "tcp", NULL, NULL, 0));
    EXPECT(FERRY_ERR_INVALID, ferry_upgrade_plugin(e, NULL, NULL, NULL, 0));
    EXPECT(FERRY_ERR_INVALID, ferry_upgrade_plugin(e, "nosuch", NULL, NULL, 0));
    EXPECT(FERRY_ERR_INVALID, ferry_upgrade_plugin(e, "tcp", NULL, "xyz", 0));
    EXPECT(FERRY_ERR_INVALID, ferry_upgrade_plugin(e, "tcp", NULL, NULL, UINT64_MAX));
    overflows(e, p);
    {
        /* Well formed, to a segment not open, from memory not registered:
         * the code ferry_transfer gives the same request. */
        ferry_request_t r = {0};
        r.opcode = FERRY_WRITE;
        r.priority = FERRY_PRIORITY_MEDIUM;
        r.source = p;
        r.target_id = 999;
        r.length = 64;
        int want = ferry_transfer(e, &r, 1);
        CHECK(want != FERRY_OK, "ferry_transfer to an unopened segment succeeded");
        EXPECT(want, ferry_transfer_sync(e, FERRY_WRITE, 999, p, 0, 64, 0, NULL));
    }
    MUST(ferry_free_batch(e, b));
    EXPECT(FERRY_ERR_INVALID, ferry_free_batch(e, b));
    CHECK(strstr(ferry_last_error(), "freed") != NULL, "message: %s", ferry_last_error());
    EXPECT(FERRY_ERR_INVALID, ferry_batch_status(e, b, &(ferry_batch_status_t){0}));
    EXPECT(FERRY_ERR_INVALID, ferry_send_notif(e, 999, NULL, NULL, 0));
    EXPECT(FERRY_ERR_SEGMENT_NOT_FOUND, ferry_send_notif(e, 999, "x", NULL, 0));
    EXPECT(FERRY_ERR_INVALID, ferry_send_notif(e, 999, "x", NULL, 5));
    {
        ferry_notif_list_t *l = (ferry_notif_list_t *)1;
        EXPECT(FERRY_ERR_INVALID, ferry_recv_notifs(e, 0, 0, &l));
        EXPECT(FERRY_ERR_AGAIN, ferry_recv_notifs(e, 4, 0, &l));
        CHECK(l == NULL, "no notification, yet a list");
    }
    EXPECT(FERRY_ERR_INVALID, ferry_segment_name(e, NULL, 0, &n));
    EXPECT(FERRY_ERR_TOO_SMALL, ferry_segment_name(e, buf, 4, &n));
    CHECK(n == strlen("c-bad-input"), "segment name length %zu", n);
    EXPECT(FERRY_ERR_INVALID, ferry_prepare_blocks(e, 999, NULL, 0, NULL, 0, NULL, NULL));
    EXPECT(FERRY_ERR_INVALID, ferry_free_blocks(e, 77));
    EXPECT(FERRY_ERR_INVALID, ferry_cancel_task(e, 0, 0));
    EXPECT(FERRY_ERR_SEGMENT_NOT_FOUND, ferry_close_segment(e, 999));
    {
        ferry_segment_info_t *info = NULL;
        EXPECT(FERRY_ERR_SEGMENT_NOT_FOUND, ferry_segment_info(e, 999, &info));
        CHECK(info == NULL, "a failed segment info set the pointer");
        EXPECT(FERRY_ERR_INVALID, ferry_segment_info(e, 999, NULL));
        ferry_free_segment_info(NULL);
        ferry_free_notifs(NULL);
        ferry_free_buffer(NULL);
    }
    EXPECT(FERRY_ERR_INVALID, ferry_export_segment(e, NULL, &n));
    thread_messages(e);

    /* A bad pointer the library reads faults in Go: recovered, never a
     * crash, never a panic across the boundary. */
    ferry_batch_t pb = b_live(e);
    EXPECT(FERRY_ERR_INTERNAL, ferry_submit(e, pb, (const ferry_request_t *)16, 1));
    CHECK(strstr(ferry_last_error(), "internal error") != NULL, "message: %s", ferry_last_error());

    /* Calls after destroy. */
    MUST(ferry_destroy_engine(e));
    EXPECT(FERRY_ERR_CLOSED, ferry_destroy_engine(e));
    EXPECT(FERRY_ERR_CLOSED, ferry_allocate(e, 64, &p));
    EXPECT(FERRY_ERR_CLOSED, ferry_open_segment(e, "x", &seg));
    EXPECT(FERRY_ERR_CLOSED, ferry_allocate_batch(e, 1, &b));
    EXPECT(FERRY_ERR_CLOSED, ferry_transfer_sync(e, FERRY_WRITE, 1, p, 0, 64, 0, NULL));
    EXPECT(FERRY_ERR_CLOSED, ferry_upgrade_plugin(e, "tcp", NULL, NULL, 0));
    CHECK(strstr(ferry_last_error(), "destroyed") != NULL, "message: %s", ferry_last_error());
}

/* ---- two processes ---------------------------------------------------- */

/* wait_notifs waits until want notifications arrived, or fails. */
static void wait_notifs(ferry_engine_t e, const char *const *names, size_t want, uint8_t *got_msgs) {
    size_t got = 0;
    int64_t until = now_ns() + 60LL * 1000000000;
    while (got < want && now_ns() < until) {
        ferry_notif_list_t *l = NULL;
        int rc = ferry_recv_notifs(e, 8, 1000000000, &l);
        if (rc == FERRY_ERR_AGAIN) {
            continue;
        }
        MUST(rc);
        for (size_t i = 0; i < l->count; i++) {
            for (size_t k = 0; k < want; k++) {
                if (strcmp(l->notifs[i].name, names[k]) == 0) {
                    CHECK(!got_msgs[k], "notification %s arrived twice", names[k]);
                    got_msgs[k] = 1;
                    got++;
                    CHECK(l->notifs[i].msg_len == strlen(names[k]) &&
                              memcmp(l->notifs[i].msg, names[k], l->notifs[i].msg_len) == 0,
                          "notification %s carries another message", names[k]);
                }
            }
        }
        ferry_free_notifs(l);
    }
    CHECK(got == want, "%zu of %zu notifications arrived", got, want);
}

static int decode_side(const char *self) {
    char name[64], url[256], blobfile[] = "/tmp/ferry-ctest-blob-XXXXXX";
    snprintf(name, sizeof name, "c-decode-%d", (int)getpid());
    ferry_engine_t e = engine(name, "  kind = \"embedded\"\n  listen = \"127.0.0.1:0\"\n");
    MUST(ferry_metastore_url(e, url, sizeof url, NULL));
    void *kv = NULL;
    MUST(ferry_allocate(e, SIZE, &kv));
    memset(kv, 0, SIZE);
    uint64_t kvaddr = 0;
    MUST(ferry_register(e, kv, SIZE, FERRY_PERM_REMOTE_READ_WRITE, &kvaddr));
    CHECK(kvaddr == (uint64_t)(uintptr_t)kv, "register gave address %#" PRIx64 " for %p", kvaddr, kv);

    /* The blob goes to the peer through a file: the side channel. */
    void *blob = NULL;
    size_t blen = 0;
    MUST(ferry_export_segment(e, &blob, &blen));
    int fd = mkstemp(blobfile);
    CHECK(fd >= 0 && write(fd, blob, blen) == (ssize_t)blen, "writing the blob");
    close(fd);
    ferry_free_buffer(blob);

    pid_t pid = fork();
    if (pid == 0) {
        execl(self, self, "peer", url, name, blobfile, (char *)NULL);
        _exit(127);
    }
    MUST(pid > 0 ? FERRY_OK : FERRY_ERR_INTERNAL);

    const char *names[2] = {"landed-shm", "landed-tcp"};
    uint8_t got[2] = {0, 0};
    wait_notifs(e, names, 2, got);
    /* Landed means landed: the bytes are there when the notification is. */
    size_t bad = 0;
    for (size_t i = 0; i < SIZE; i++) {
        bad += ((uint8_t *)kv)[i] != pattern(i, i < HALF ? 1 : 2);
    }
    CHECK(bad == 0, "%zu of %d bytes differ from what the peer wrote", bad, SIZE);

    /* Tell the peer it may go, and that its bytes arrived. */
    char peer[64];
    snprintf(peer, sizeof peer, "c-prefill-%d", (int)pid);
    ferry_segment_t ps = 0;
    MUST(ferry_open_segment(e, peer, &ps));
    const char *verdict = bad == 0 ? "verified" : "corrupt";
    MUST(ferry_send_notif(e, ps, verdict, verdict, strlen(verdict)));
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "peer exited with status %d", status);
    unlink(blobfile);
    MUST(ferry_unregister(e, kv));
    MUST(ferry_free(e, kv));
    MUST(ferry_destroy_engine(e));
    if (bad == 0 && got[0] && got[1]) {
        printf("ok: two processes moved %d verified bytes over shm and tcp, notified on landing\n", SIZE);
    }
    return 0;
}

static void write_half(ferry_engine_t e, ferry_segment_t seg, void *src, uint64_t dst, const char *transport,
                       const char *notif) {
    ferry_batch_t b = 0;
    MUST(ferry_allocate_batch(e, 4, &b));
    ferry_request_t r[2];
    memset(r, 0, sizeof r);
    for (int k = 0; k < 2; k++) {
        r[k].opcode = FERRY_WRITE;
        r[k].priority = FERRY_PRIORITY_MEDIUM;
        r[k].source = (char *)src + k * (HALF / 2);
        r[k].target_id = seg;
        r[k].target_offset = dst + k * (HALF / 2);
        r[k].length = HALF / 2;
        r[k].deadline_ns = now_ns() + 30LL * 1000000000;
        r[k].transport_hint = transport;
    }
    MUST(ferry_submit_notif(e, b, r, 2, notif, notif, strlen(notif)));
    MUST(ferry_wait(e, b, 60LL * 1000000000));
    ferry_task_status_t st[2];
    size_t filled = 0;
    MUST(ferry_task_status_list(e, b, 0, st, 2, &filled));
    CHECK(filled == 2, "status list filled %zu", filled);
    for (int k = 0; k < 2; k++) {
        CHECK(st[k].state == FERRY_TASK_COMPLETED && st[k].transferred_bytes == HALF / 2,
              "%s task %d: state %d, %" PRIu64 " bytes, %s", transport, k, st[k].state, st[k].transferred_bytes,
              ferry_error_name(st[k].error));
    }
    ferry_batch_status_t bs;
    MUST(ferry_batch_status(e, b, &bs));
    CHECK(bs.tasks == 2 && bs.completed == 2 && bs.transferred_bytes == HALF, "batch status");
    MUST(ferry_free_batch(e, b));
}

static int peer_side(const char *url, const char *decode, const char *blobfile) {
    char name[64], ms[512];
    snprintf(name, sizeof name, "c-prefill-%d", (int)getpid());
    snprintf(ms, sizeof ms, "  kind = \"http\"\n  url = \"%s\"\n", url);
    ferry_engine_t e = engine(name, ms);

    ferry_segment_t seg = 0;
    MUST(ferry_open_segment(e, decode, &seg));
    ferry_segment_info_t *info = NULL;
    MUST(ferry_segment_info(e, seg, &info));
    CHECK(strcmp(info->name, decode) == 0 && info->num_buffers == 1 && info->buffers[0].length == SIZE &&
              info->buffers[0].perm == FERRY_PERM_REMOTE_READ_WRITE,
          "segment info of %s", decode);
    uint64_t dst = info->buffers[0].base;
    ferry_free_segment_info(info);

    /* The blob names the same engine; it opens without the metastore. */
    FILE *f = fopen(blobfile, "rb");
    uint8_t blob[1 << 16];
    size_t blen = f ? fread(blob, 1, sizeof blob, f) : 0;
    if (f) {
        fclose(f);
    }
    ferry_segment_t imported = 0;
    EXPECT(FERRY_ERR_INVALID, ferry_import_segment(e, blob, blen, "someone-else", &imported));
    MUST(ferry_import_segment(e, blob, blen, decode, &imported));

    /* shm: Ferry memory, zero copy. */
    void *fm = NULL;
    MUST(ferry_allocate(e, HALF, &fm));
    for (size_t i = 0; i < HALF; i++) {
        ((uint8_t *)fm)[i] = pattern(i, 1);
    }
    MUST(ferry_register(e, fm, HALF, FERRY_PERM_LOCAL, NULL));
    write_half(e, imported, fm, dst, "shm", "landed-shm");

    /* tcp: the application's own memory (malloc), registered in place. */
    uint8_t *am = malloc(HALF);
    for (size_t i = 0; i < HALF; i++) {
        am[i] = pattern(HALF + i, 2);
    }
    MUST(ferry_register(e, am, HALF, FERRY_PERM_LOCAL, NULL));
    write_half(e, seg, am, dst + HALF, "tcp", "landed-tcp");

    /* Read back what landed, over tcp, into the Ferry memory. */
    memset(fm, 0, HALF);
    ferry_request_t r = {0};
    r.opcode = FERRY_READ;
    r.priority = FERRY_PRIORITY_HIGH;
    r.source = fm;
    r.target_id = seg;
    r.target_offset = dst + HALF;
    r.length = HALF;
    r.transport_hint = "tcp";
    MUST(ferry_transfer(e, &r, 1));
    CHECK(memcmp(fm, am, HALF) == 0, "read back other bytes than written");
    /* The same read as scalars, over shm this time, with a deadline. */
    memset(fm, 0, HALF);
    MUST(ferry_transfer_sync(e, FERRY_READ, seg, fm, dst + HALF, HALF, 30000000000LL, "shm"));
    CHECK(memcmp(fm, am, HALF) == 0, "ferry_transfer_sync read back other bytes than written");
    uint8_t stray[64];
    EXPECT(FERRY_ERR_NOT_REGISTERED, ferry_transfer_sync(e, FERRY_READ, seg, stray, dst, sizeof stray, 0, NULL));

    /* Prepared block lists: the remote buffer as 16 blocks, fm as 8. */
    enum { BLOCK = 4096 };
    ferry_block_layout_t ll = {BLOCK, HALF / BLOCK, 0, 0, 0}, rl = {BLOCK, SIZE / BLOCK, 0, 0, 0};
    ferry_blocks_t bl = 0;
    MUST(ferry_prepare_blocks(e, seg, fm, HALF, &ll, dst, &rl, &bl));
    ferry_block_request_t br = {0};
    br.opcode = FERRY_READ;
    br.priority = FERRY_PRIORITY_LOW;
    br.no_merge = 1;
    uint32_t li[HALF / BLOCK], ri[HALF / BLOCK];
    for (uint32_t k = 0; k < HALF / BLOCK; k++) {
        li[k] = k;
        ri[k] = SIZE / BLOCK - 1 - k; /* reversed: block k <- block 15-k */
    }
    ferry_batch_t b = 0;
    size_t first = 99, count = 0;
    MUST(ferry_allocate_batch(e, 16, &b));
    memset(fm, 0, HALF);
    MUST(ferry_submit_blocks(e, b, bl, &br, li, ri, HALF / BLOCK, &first, &count));
    CHECK(first == 0 && count == HALF / BLOCK, "block tasks %zu+%zu", first, count);
    MUST(ferry_wait(e, b, 60LL * 1000000000));
    size_t bad = 0;
    for (size_t i = 0; i < HALF; i++) {
        size_t roff = (size_t)ri[i / BLOCK] * BLOCK + i % BLOCK;
        bad += ((uint8_t *)fm)[i] != pattern(roff, roff < HALF ? 1 : 2);
    }
    CHECK(bad == 0, "%zu bytes of the block list read differ", bad);
    /* A range of adjacent blocks merges into one task. */
    br.no_merge = 0;
    memset(fm, 0, HALF);
    MUST(ferry_submit_block_range(e, b, bl, &br, 0, 0, HALF / BLOCK, &first, &count));
    CHECK(first == HALF / BLOCK && count == 1, "block range tasks %zu+%zu", first, count);
    MUST(ferry_wait(e, b, 60LL * 1000000000));
    bad = 0;
    for (size_t i = 0; i < HALF; i++) {
        bad += ((uint8_t *)fm)[i] != pattern(i, 1);
    }
    CHECK(bad == 0, "%zu bytes of the block range read differ", bad);
    EXPECT(FERRY_ERR_INVALID, ferry_submit_blocks(e, b, bl, &br, NULL, ri, 1, NULL, NULL));
    EXPECT(FERRY_ERR_INVALID, ferry_submit_block_range(e, b, bl, &br, 0, 0, 0, NULL, NULL));
    /* Past the end of a layout: refused, nothing submitted. */
    EXPECT(FERRY_ERR_OUT_OF_BOUNDS, ferry_submit_block_range(e, b, bl, &br, 4, 0, HALF / BLOCK, NULL, NULL));
    /* Canceling a completed task leaves it completed. */
    MUST(ferry_cancel_task(e, b, 0));
    ferry_task_status_t st;
    MUST(ferry_task_status(e, b, 0, &st));
    CHECK(st.state == FERRY_TASK_COMPLETED, "a canceled completed task reads %d", st.state);
    EXPECT(FERRY_ERR_INVALID, ferry_cancel_task(e, b, 1000));
    MUST(ferry_cancel_batch(e, b));
    MUST(ferry_free_batch(e, b));
    MUST(ferry_free_blocks(e, bl));
    EXPECT(FERRY_ERR_INVALID, ferry_free_blocks(e, bl));

    /* Wait for the decode side's verdict before going. */
    const char *names[1] = {"verified"};
    uint8_t got[1] = {0};
    wait_notifs(e, names, 1, got);
    MUST(ferry_unregister(e, am));
    free(am);
    MUST(ferry_free(e, fm));
    MUST(ferry_destroy_engine(e));
    return failures ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "peer") == 0) {
        return peer_side(argv[2], argv[3], argv[4]);
    }
    printf("%s\n", ferry_version());
    CHECK(ferry_abi_version() == FERRY_ABI_VERSION, "abi %d, header %d", ferry_abi_version(), FERRY_ABI_VERSION);
    bad_input();
    if (failures == 0) {
        printf("ok: bad input at the boundary returns clear errors\n");
    }
    decode_side(argv[0]);
    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("PASS\n");
    return 0;
}
