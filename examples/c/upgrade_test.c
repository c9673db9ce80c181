/*
 * upgrade_test.c: the C test of ferry_upgrade_plugin (run by `make ctest`
 * and by capi's Go test). Two engines in this process talk over tcp only;
 * a thread moves verified bytes between them the whole time. The tcp
 * plugin of the writing engine is upgraded to a copy of
 * $FERRY_PLUGIN_DIR/ferry-plugin-tcp at another path, pinned by its
 * sha256 (from `sha256sum`), then to the plugin directory's binary again
 * with no sha256. Upgrades that cannot serve (a path with nothing there,
 * a wrong sha256) fail with a clear message while the old plugin serves
 * on; bad arguments are FERRY_ERR_INVALID. No transfer may fail.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ferry.h"
#include "check.h"

enum { CHUNK = 1 << 16 };

static ferry_engine_t engine(const char *name) {
    char cfg[512];
    snprintf(cfg, sizeof cfg,
             "name = \"%s\"\n"
             "metastore {\n  kind = \"none\"\n}\n"
             "plugin \"tcp\" {\n  config {\n    listen = [\"127.0.0.1:0\"]\n  }\n}\n",
             name);
    ferry_engine_t e = 0;
    MUST(ferry_create_engine_from_text(cfg, &e));
    return e;
}

/* The traffic: write fresh bytes from src to the target's buffer, read
 * them back into back, check both. */
struct traffic {
    ferry_engine_t e;
    ferry_segment_t seg;
    uint8_t *src, *back, *target; /* target: the other engine's buffer */
    uint64_t remote;
    atomic_int stop;
    atomic_long rounds, failed;
};

static int round_trip(struct traffic *t, unsigned seed) {
    for (size_t i = 0; i < CHUNK; i++) {
        t->src[i] = (uint8_t)(i * 31 + seed * 7 + (i >> 8));
    }
    int rc = ferry_transfer_sync(t->e, FERRY_WRITE, t->seg, t->src, t->remote, CHUNK, 10000000000LL, "tcp");
    if (rc != FERRY_OK) {
        fprintf(stderr, "round %u: write: %s: %s\n", seed, ferry_error_name(rc), ferry_last_error());
        return 0;
    }
    if (memcmp(t->target, t->src, CHUNK) != 0) {
        fprintf(stderr, "round %u: the target holds other bytes than were written\n", seed);
        return 0;
    }
    memset(t->back, 0, CHUNK);
    rc = ferry_transfer_sync(t->e, FERRY_READ, t->seg, t->back, t->remote, CHUNK, 10000000000LL, "tcp");
    if (rc != FERRY_OK) {
        fprintf(stderr, "round %u: read: %s: %s\n", seed, ferry_error_name(rc), ferry_last_error());
        return 0;
    }
    if (memcmp(t->back, t->src, CHUNK) != 0) {
        fprintf(stderr, "round %u: read back other bytes than were written\n", seed);
        return 0;
    }
    return 1;
}

static void *traffic_loop(void *p) {
    struct traffic *t = p;
    for (unsigned seed = 1; !atomic_load(&t->stop); seed++) {
        if (round_trip(t, seed)) {
            atomic_fetch_add(&t->rounds, 1);
        } else {
            atomic_fetch_add(&t->failed, 1);
        }
    }
    return NULL;
}

/* after waits until n more rounds passed: the plugin serves. */
static void after(struct traffic *t, long n, const char *what) {
    long want = atomic_load(&t->rounds) + n;
    for (int i = 0; i < 3000 && atomic_load(&t->rounds) < want; i++) {
        usleep(10000);
    }
    CHECK(atomic_load(&t->rounds) >= want, "%s: no %ld verified rounds within 30 s (%ld failed)", what, n,
          atomic_load(&t->failed));
}

/* copy_file copies src to dst, executable. */
static void copy_file(const char *src, const char *dst) {
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    if (in == NULL || out == NULL) {
        fprintf(stderr, "FAIL: copy %s to %s: cannot open\n", src, dst);
        exit(1);
    }
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) {
        if (fwrite(buf, 1, n, out) != n) {
            fprintf(stderr, "FAIL: copy %s to %s: short write\n", src, dst);
            exit(1);
        }
    }
    fclose(in);
    if (fclose(out) != 0 || chmod(dst, 0755) != 0) {
        fprintf(stderr, "FAIL: copy %s to %s: cannot close or chmod\n", src, dst);
        exit(1);
    }
}

/* sha256 puts the hex sha256 of path (64 digits) in out, from sha256sum. */
static void sha256(const char *path, char out[65]) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", path);
    FILE *p = popen(cmd, "r");
    if (p == NULL || fscanf(p, "%64s", out) != 1 || pclose(p) != 0 || strlen(out) != 64) {
        fprintf(stderr, "FAIL: %s: no sha256\n", cmd);
        exit(1);
    }
}

int main(void) {
    const char *dir = getenv("FERRY_PLUGIN_DIR");
    if (dir == NULL || dir[0] == 0) {
        fprintf(stderr, "FAIL: set FERRY_PLUGIN_DIR to the directory of ferry-plugin-tcp\n");
        return 1;
    }
    CHECK(ferry_abi_version() >= 4, "abi %d: ferry_upgrade_plugin needs 4", ferry_abi_version());

    /* The new binary: a copy of the plugin at another path, and its sum. */
    char tmpl[] = "/tmp/ferry-upgrade-XXXXXX", orig[4096], copy[4096], missing[4096], sum[65], bad_sum[65];
    if (mkdtemp(tmpl) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(orig, sizeof orig, "%s/ferry-plugin-tcp", dir);
    snprintf(copy, sizeof copy, "%s/ferry-plugin-tcp-v2", tmpl);
    snprintf(missing, sizeof missing, "%s/nothing-here", tmpl);
    copy_file(orig, copy);
    sha256(copy, sum);
    memcpy(bad_sum, sum, sizeof sum);
    bad_sum[0] = bad_sum[0] == '0' ? '1' : '0';

    ferry_engine_t target = engine("upgrade-target"), a = engine("upgrade-a");
    uint8_t *tbuf = NULL;
    MUST(ferry_allocate(target, CHUNK, (void **)&tbuf));
    MUST(ferry_register(target, tbuf, CHUNK, FERRY_PERM_REMOTE_READ_WRITE, NULL));
    uint8_t *local = NULL;
    MUST(ferry_allocate(a, 2 * CHUNK, (void **)&local));
    MUST(ferry_register(a, local, 2 * CHUNK, FERRY_PERM_LOCAL, NULL));
    char addr[256];
    MUST(ferry_rpc_addr(target, addr, sizeof addr, NULL));
    ferry_segment_t seg = 0;
    MUST(ferry_open_segment(a, addr, &seg));

    static struct traffic t;
    t.e = a;
    t.seg = seg;
    t.src = local;
    t.back = local + CHUNK;
    t.target = tbuf;
    t.remote = (uint64_t)(uintptr_t)tbuf;
    pthread_t th;
    if (pthread_create(&th, NULL, traffic_loop, &t) != 0) {
        perror("pthread_create");
        return 1;
    }
    after(&t, 3, "before any upgrade");

    /* Bad arguments: refused before anything starts. */
    EXPECT_SAYS(FERRY_ERR_INVALID, "name is NULL", ferry_upgrade_plugin(a, NULL, copy, sum, 0));
    EXPECT_SAYS(FERRY_ERR_INVALID, "name is NULL", ferry_upgrade_plugin(a, "", copy, sum, 0));
    EXPECT_SAYS(FERRY_ERR_INVALID, "has no plugin \"nosuch\"", ferry_upgrade_plugin(a, "nosuch", copy, NULL, 0));
    EXPECT_SAYS(FERRY_ERR_INVALID, "not 64 hex digits", ferry_upgrade_plugin(a, "tcp", copy, "abc", 0));
    EXPECT_SAYS(FERRY_ERR_INVALID, "drain_ms", ferry_upgrade_plugin(a, "tcp", copy, NULL, UINT64_MAX));
    EXPECT_SAYS(FERRY_ERR_INVALID, "unknown engine handle", ferry_upgrade_plugin(a + 1000, "tcp", copy, NULL, 0));

    /* Binaries that cannot serve: the old plugin serves on. */
    EXPECT_SAYS(FERRY_ERR_PLUGIN_FAILED, missing, ferry_upgrade_plugin(a, "tcp", missing, NULL, 5000));
    printf("missing binary: %s\n", ferry_last_error());
    after(&t, 3, "after the upgrade to a missing binary");
    EXPECT_SAYS(FERRY_ERR_PLUGIN_FAILED, "checksum mismatch", ferry_upgrade_plugin(a, "tcp", copy, bad_sum, 5000));
    printf("wrong sha256: %s\n", ferry_last_error());
    after(&t, 3, "after the upgrade with a wrong sha256");

    /* The copy, pinned by its sum, under traffic; then the plugin
     * directory's binary again, unpinned, with the default drain. */
    MUST(ferry_upgrade_plugin(a, "tcp", copy, sum, 5000));
    after(&t, 3, "after the upgrade to the copy");
    MUST(ferry_upgrade_plugin(a, "tcp", NULL, NULL, 0));
    after(&t, 3, "after the upgrade back to the plugin directory's binary");

    atomic_store(&t.stop, 1);
    pthread_join(th, NULL);
    CHECK(atomic_load(&t.failed) == 0, "%ld transfers failed across the upgrades", atomic_load(&t.failed));
    long rounds = atomic_load(&t.rounds);

    MUST(ferry_destroy_engine(a));
    EXPECT_SAYS(FERRY_ERR_CLOSED, "destroyed", ferry_upgrade_plugin(a, "tcp", copy, sum, 0));
    MUST(ferry_destroy_engine(target));
    unlink(copy);
    rmdir(tmpl);

    if (failures) {
        fprintf(stderr, "upgrade_test: %d failure(s)\n", failures);
        return 1;
    }
    printf("ok: upgraded tcp twice under traffic, %ld verified round trips, none failed; bad upgrades left the old plugin serving\n",
           rounds);
    printf("upgrade_test: ok\n");
    return 0;
}
