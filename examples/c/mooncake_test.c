/*
 * mooncake_test.c: Mooncake's classic C API (transfer_engine_c.h) on
 * Ferry, called as NIXL's Mooncake backend calls it
 * (src/plugins/mooncake/mooncake_backend.cpp in ai-dynamo/nixl), in two
 * processes that move verified bytes. It includes Mooncake's header name
 * only and links -ltransfer_engine (bin/libtransfer_engine.so, the link to
 * libferry-mooncake.so), as a program built for Mooncake does: nothing of
 * Ferry's own API is used. Every one of the header's 27 functions is
 * called.
 *
 * The initiator (agent-a) creates its engine as NIXL does
 * (createTransferEngine("P2PHANDSHAKE", ip, "", 0, true)), starts the
 * target (agent-b: this program with "peer") and reads its
 * getLocalIpAndPort and buffer address, then: opens its segment, writes
 * in two submissions to one batch, writes with a notification, reads
 * back, writes to its own memory through LOCAL_SEGMENT, and gets the
 * target's notification that it verified what landed. Bad input comes
 * back as Mooncake's codes, never a crash.
 *
 * With an argument, the metadata connection string ("redis://host:port",
 * "etcd://host:port", "http://host:port/metadata"), the engines are named
 * "127.0.0.1:<pid>.<n>" and open each other by that name through the metadata
 * server instead (go test ./capi -run Mooncake starts the servers).
 *
 * Build and run (after `make build`; `make ctest` does this):
 *   cc -Iinclude/mooncake examples/c/mooncake_test.c -Lbin -ltransfer_engine -Wl,-rpath,bin -o mooncake_test
 *   FERRY_PLUGIN_DIR=bin ./mooncake_test [metadata_conn_string]
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "transfer_engine_c.h"

#define N (1 << 20)   /* bytes written, and bytes read */
#define PIECES 16     /* requests the write is cut into */
#define WAIT_S 60     /* the longest any wait here may take */

static const char *role = "mooncake_test";
static const char *conn = "P2PHANDSHAKE";

/* create makes an engine as NIXL's nixlMooncakeEngine constructor does,
 * and writes the name a peer opens it by into name. */
static transfer_engine_t create(char *name, size_t cap);

__attribute__((format(printf, 1, 2))) static void die(const char *format, ...) {
    va_list ap;
    va_start(ap, format);
    fprintf(stderr, "%s: FAIL: ", role);
    vfprintf(stderr, format, ap);
    va_end(ap);
    fprintf(stderr, " (last error: %s)\n", ferry_mooncake_last_error());
    exit(1);
}

#define EXPECT(cond, ...)  \
    do {                   \
        if (!(cond)) {     \
            die(__VA_ARGS__); \
        }                  \
    } while (0)

static unsigned char pattern(int which, size_t i) { return (unsigned char)(i * 131 + (size_t)which * 17 + (i >> 9)); }

static void fill(unsigned char *p, int which) {
    for (size_t i = 0; i < N; i++) {
        p[i] = pattern(which, i);
    }
}

/* verify returns the first index where p is not pattern which, N if none. */
static size_t verify(const unsigned char *p, int which) {
    for (size_t i = 0; i < N; i++) {
        if (p[i] != pattern(which, i)) {
            return i;
        }
    }
    return N;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void pause_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* check_xfer polls tasks [0, n) of the batch as NIXL's checkXfer does until
 * none is in progress; every one must have COMPLETED. */
static void check_xfer(transfer_engine_t e, batch_id_t b, size_t n, const char *what) {
    double end = now_s() + WAIT_S;
    for (;;) {
        int busy = 0;
        for (size_t i = 0; i < n; i++) {
            transfer_status_t st;
            int rc = getTransferStatus(e, b, i, &st);
            EXPECT(rc == 0, "%s: getTransferStatus task %zu: status code %d", what, i, rc);
            EXPECT(st.status != STATUS_FAILED && st.status != STATUS_CANCELED && st.status != STATUS_TIMEOUT &&
                       st.status != STATUS_INVALID,
                   "%s: task %zu ended with status %d", what, i, st.status);
            if (st.status == STATUS_WAITING || st.status == STATUS_PENDING) {
                busy = 1;
            } else {
                EXPECT(st.status == STATUS_COMPLETED, "%s: task %zu: unknown status %d", what, i, st.status);
            }
        }
        if (!busy) {
            return;
        }
        EXPECT(now_s() < end, "%s: tasks still in progress after %d s", what, WAIT_S);
        pause_ms(1);
    }
}

/* await_notif takes notifications until one named name with msg arrives. */
static void await_notif(transfer_engine_t e, const char *name, const char *msg) {
    double end = now_s() + WAIT_S;
    for (;;) {
        int size = -1;
        notify_msg_t *got = getNotifsFromEngine(e, &size);
        EXPECT(size >= 0 && (size == 0) == (got == NULL), "getNotifsFromEngine: size %d with %p", size, (void *)got);
        int found = 0;
        for (int i = 0; i < size; i++) {
            found = found || (strcmp(got[i].name, name) == 0 && strcmp(got[i].msg, msg) == 0);
        }
        EXPECT(freeNotifsMsgBuf(got, size) == 0, "freeNotifsMsgBuf");
        if (found) {
            return;
        }
        EXPECT(now_s() < end, "no notification %s (%s) after %d s", name, msg, WAIT_S);
        pause_ms(1);
    }
}

/* ---- agent-b: the target ------------------------------------------------- */

static int peer_side(const char *initiator) {
    role = "mooncake_test peer";
    char addr[64];
    transfer_engine_t e = create(addr, sizeof addr);
    /* [0, N): where agent-a writes; [N, 2N): what it reads. */
    unsigned char *buf = calloc(2, N);
    EXPECT(buf != NULL, "calloc");
    fill(buf + N, 2);
    EXPECT(registerLocalMemory(e, buf, 2 * (size_t)N, "cpu:0", 1) == 0, "registerLocalMemory");
    printf("READY %s %llu\n", addr, (unsigned long long)(uintptr_t)buf);
    fflush(stdout);

    await_notif(e, "agent-a", "written");
    size_t bad = verify(buf, 1);
    EXPECT(bad == N, "byte %zu of what agent-a wrote is %u, want %u", bad, buf[bad], pattern(1, bad));
    segment_id_t a = openSegment(e, initiator);
    EXPECT(a >= 0, "openSegment %s", initiator);
    notify_msg_t done = {(char *)"agent-b", (char *)"verified"};
    EXPECT(genNotifyInEngine(e, (uint64_t)a, done) == 0, "genNotifyInEngine");

    /* Stay up, serving reads, until agent-a closes our stdin. */
    char line[16];
    while (fgets(line, sizeof line, stdin) != NULL) {
    }
    EXPECT(unregisterLocalMemory(e, buf) == 0, "unregisterLocalMemory");
    destroyTransferEngine(e);
    free(buf);
    return 0;
}

/* ---- agent-a: the initiator ---------------------------------------------- */

/* bad_input: what a wrong call returns. None may crash. */
static void bad_input(void) {
    EXPECT(createTransferEngine(NULL, "127.0.0.1", "", 0, 1) == NULL, "createTransferEngine(NULL, ...) made an engine");
    EXPECT(createTransferEngine("bogus://x", "127.0.0.1", "", 0, 1) == NULL, "bogus:// made an engine");
    EXPECT(strstr(ferry_mooncake_last_error(), "P2PHANDSHAKE") != NULL, "bogus://: the message does not say what Ferry joins: %s",
           ferry_mooncake_last_error());
    EXPECT(createTransferEngine("P2PHANDSHAKE", "", "", 0, 1) == NULL, "an empty local_server_name made an engine");
    int x = 0;
    EXPECT(registerLocalMemory(NULL, &x, sizeof x, "cpu", 1) == FERRY_MC_ERR_INVALID_ARGUMENT, "registerLocalMemory on NULL");
    EXPECT(openSegment(NULL, "127.0.0.1:1") == -1, "openSegment on NULL");
    EXPECT(allocateBatchID(NULL, 4) == INVALID_BATCH, "allocateBatchID on NULL");
    transfer_status_t st;
    EXPECT(getTransferStatus(NULL, 1, 0, &st) == FERRY_MC_STATUS_INVALID_ARGUMENT, "getTransferStatus on NULL");
    EXPECT(freeBatchID(NULL, 1) == FERRY_MC_STATUS_INVALID_ARGUMENT, "freeBatchID on NULL");
    int size = -1;
    EXPECT(getNotifsFromEngine(NULL, &size) == NULL && size == 0, "getNotifsFromEngine on NULL");
    EXPECT(freeNotifsMsgBuf(NULL, 0) == 0, "freeNotifsMsgBuf(NULL, 0)");
    size_t count = 1;
    nic_load_stat_t stats[1];
    EXPECT(getNicLoadStats(NULL, stats, &count) == -1, "getNicLoadStats on NULL");
    char buf[8];
    EXPECT(showLinks(NULL, buf, sizeof buf, 1) == -1, "showLinks on NULL");
    EXPECT(getLocalIpAndPort(NULL, buf, sizeof buf) < 0, "getLocalIpAndPort on NULL");
    EXPECT(installTransport(NULL, "tcp", NULL) == NULL, "installTransport on NULL");
    notify_msg_t m = {(char *)"n", (char *)"m"};
    EXPECT(genNotifyInEngine(NULL, 1, m) < 0, "genNotifyInEngine on NULL");
    EXPECT(submitTransfer(NULL, 1, NULL, 0) == 0, "submitTransfer of no requests is Mooncake's no-op");
    printf("ok: bad input returns Mooncake's codes\n");
}

static transfer_engine_t create(char *name, size_t cap) {
    int p2p = strcmp(conn, "P2PHANDSHAKE") == 0;
    char own[64] = "127.0.0.1";
    static int made;
    if (!p2p) { /* a name per engine: 127.0.0.1:<pid>.<n> */
        snprintf(own, sizeof own, "127.0.0.1:%d.%d", (int)getpid(), made++);
    }
    transfer_engine_t e = createTransferEngine(conn, own, "", 0, 1);
    EXPECT(e != NULL, "createTransferEngine(\"%s\", \"%s\", \"\", 0, 1)", conn, own);
    /* NIXL's getConnInfo: what the peer opens in P2P mode. */
    EXPECT(getLocalIpAndPort(e, name, cap) == 0 && strncmp(name, "127.0.0.1:", 10) == 0, "getLocalIpAndPort: %s", name);
    if (!p2p) {
        snprintf(name, cap, "%s", own);
    }
    return e;
}

/* two_peers: NIXL runs an agent per GPU, so one initiator opens several
 * peers of one host, all created with that host's IP as their name. Each
 * must stay its own segment: a second engine in this process (agent-c)
 * and agent-b are written in turn, each write verified. */
static void two_peers(transfer_engine_t e, segment_id_t seg_b, uint64_t base_b, unsigned char *src) {
    char name[64];
    transfer_engine_t c = create(name, sizeof name);
    unsigned char *dst = calloc(1, 4096);
    EXPECT(dst != NULL, "calloc");
    EXPECT(registerLocalMemory(c, dst, 4096, "*", 1) == 0, "registerLocalMemory agent-c");
    segment_id_t seg_c = openSegment(e, name);
    EXPECT(seg_c >= 0 && seg_c != seg_b, "openSegment agent-c %s: %d (agent-b is %d)", name, seg_c, seg_b);
    for (int round = 0; round < 3; round++) {
        for (int k = 0; k < 2; k++) {
            batch_id_t b = allocateBatchID(e, 1);
            transfer_request_t req = {OPCODE_WRITE, src, k == 0 ? seg_b : seg_c, k == 0 ? base_b : (uint64_t)(uintptr_t)dst, 4096};
            EXPECT(submitTransfer(e, b, &req, 1) == 0, "round %d: submitTransfer to agent-%c", round, k == 0 ? 'b' : 'c');
            check_xfer(e, b, 1, k == 0 ? "write to agent-b" : "write to agent-c");
            EXPECT(freeBatchID(e, b) == 0, "freeBatchID");
        }
    }
    EXPECT(memcmp(dst, src, 4096) == 0, "agent-c: the bytes written differ");
    EXPECT(unregisterLocalMemory(c, dst) == 0, "unregisterLocalMemory agent-c");
    destroyTransferEngine(c);
    free(dst);
    printf("ok: two peers of one host written in turn, each its own segment\n");
}

/* busy_batch: freeBatchID of a batch with a task in progress returns
 * Mooncake's BatchBusy and keeps the batch. A third engine, whose "tcp"
 * transport is Ferry's fault plugin holding each transfer 3 s before it
 * carries it (plugins/fault), keeps one write in progress that long. */
static void busy_batch(const char *dir, const char *peer, uint64_t base, const unsigned char *bytes) {
    char extra[1024], own[64] = "127.0.0.1", name[64];
    snprintf(extra, sizeof extra,
             "plugin \"tcp\" {\n  path = \"%s/ferry-plugin-fault\"\n  config {\n    fault \"hold\" {\n      delay = \"3s\"\n    }\n"
             "    tcp {\n      listen = [\"127.0.0.1:0\"]\n    }\n  }\n}\n",
             dir);
    if (strcmp(conn, "P2PHANDSHAKE") != 0) {
        snprintf(own, sizeof own, "127.0.0.1:busy-%d", (int)getpid());
    }
    EXPECT(setenv("FERRY_MOONCAKE_PLUGINS", "shm", 1) == 0 && setenv("FERRY_MOONCAKE_EXTRA_CONFIG", extra, 1) == 0, "setenv");
    transfer_engine_t e = createTransferEngine(conn, own, "", 0, 1);
    unsetenv("FERRY_MOONCAKE_PLUGINS");
    unsetenv("FERRY_MOONCAKE_EXTRA_CONFIG");
    EXPECT(e != NULL, "createTransferEngine with the fault plugin");
    EXPECT(getLocalIpAndPort(e, name, sizeof name) == 0, "getLocalIpAndPort");
    unsigned char *src = malloc(4096);
    EXPECT(src != NULL, "malloc");
    memcpy(src, bytes, 4096); /* what agent-b holds there already */
    EXPECT(registerLocalMemory(e, src, 4096, "cpu", 0) == 0, "registerLocalMemory, local only");
    segment_id_t seg = openSegment(e, peer);
    EXPECT(seg >= 0, "openSegment %s", peer);
    batch_id_t b = allocateBatchID(e, 1);
    transfer_request_t req = {OPCODE_WRITE, src, seg, base, 4096};
    EXPECT(submitTransfer(e, b, &req, 1) == 0, "submitTransfer");
    transfer_status_t st;
    EXPECT(getTransferStatus(e, b, 0, &st) == 0 && st.status == STATUS_WAITING, "a held write: status %d", st.status);
    EXPECT(freeBatchID(e, b) == FERRY_MC_STATUS_BATCH_BUSY, "freeBatchID of a batch in progress");
    EXPECT(submitTransfer(e, b, &req, 1) == FERRY_MC_STATUS_INVALID_ARGUMENT, "a second request in a batch of 1");
    check_xfer(e, b, 1, "held write"); /* the batch is still there */
    EXPECT(freeBatchID(e, b) == 0, "freeBatchID once done");
    EXPECT(unregisterLocalMemory(e, src) == 0, "unregisterLocalMemory");
    destroyTransferEngine(e);
    free(src);
    printf("ok: freeBatchID of a batch in progress is BatchBusy; the batch stays\n");
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "peer") == 0) {
        conn = argv[2];
        return peer_side(argv[3]);
    }
    if (argc == 2) {
        conn = argv[1];
    }
    signal(SIGPIPE, SIG_IGN);
    bad_input();

    char self[64];
    transfer_engine_t e = create(self, sizeof self);
    EXPECT(discoverTopology(e) == 0, "discoverTopology");
    EXPECT(installTransport(e, "tcp", NULL) != NULL, "installTransport tcp");
    EXPECT(installTransport(e, "rdma", NULL) == NULL, "installTransport rdma: Ferry runs none");
    EXPECT(uninstallTransport(e, "tcp") == FERRY_MC_ERR_NOT_IMPLEMENTED, "uninstallTransport");
    EXPECT(warmupEfaSegment(e, "x") == 0, "warmupEfaSegment");
    enableGracefulShutdown(e);
    size_t count = 4;
    nic_load_stat_t stats[4];
    EXPECT(getNicLoadStats(e, stats, &count) == 0 && count == 0, "getNicLoadStats: %zu", count);
    char links[64];
    EXPECT(showLinks(e, links, sizeof links, 1) == 0 && strcmp(links, "{}") == 0, "showLinks: %s", links);
    char tiny[4];
    EXPECT(getLocalIpAndPort(e, tiny, sizeof tiny) == 0 && strcmp(tiny, "127") == 0, "getLocalIpAndPort truncates as snprintf: %s", tiny);

    /* As NIXL's registerMem: location "*", remote accessible. */
    unsigned char *src = malloc(N), *dst = calloc(1, N);
    EXPECT(src != NULL && dst != NULL, "malloc");
    fill(src, 1);
    EXPECT(registerLocalMemory(e, src, N, "*", 1) == 0, "registerLocalMemory src");
    EXPECT(registerLocalMemory(e, dst, N, "*", 1) == 0, "registerLocalMemory dst");
    EXPECT(registerLocalMemory(e, src, N, "tpu:0", 1) == FERRY_MC_ERR_INVALID_ARGUMENT, "location tpu:0");
    buffer_entry_t more[4];
    void *more_addr[4];
    for (int i = 0; i < 4; i++) {
        more[i].addr = more_addr[i] = malloc(4096);
        more[i].length = 4096;
    }
    EXPECT(registerLocalMemoryBatch(e, more, 4, "cpu:0") == 0, "registerLocalMemoryBatch");
    EXPECT(unregisterLocalMemoryBatch(e, more_addr, 4) == 0, "unregisterLocalMemoryBatch");
    EXPECT(unregisterLocalMemoryBatch(e, more_addr, 4) < 0, "unregisterLocalMemoryBatch of unregistered memory succeeded");
    EXPECT(unregisterLocalMemory(e, more_addr[0]) < 0, "unregisterLocalMemory of unregistered memory succeeded");

    /* Start agent-b; read its name and buffer. */
    int to_peer[2], from_peer[2];
    EXPECT(pipe(to_peer) == 0 && pipe(from_peer) == 0, "pipe");
    pid_t pid = fork();
    EXPECT(pid >= 0, "fork");
    if (pid == 0) {
        dup2(to_peer[0], 0);
        dup2(from_peer[1], 1);
        close(to_peer[1]);
        close(from_peer[0]);
        execl(argv[0], argv[0], "peer", conn, self, (char *)NULL);
        _exit(127);
    }
    close(to_peer[0]);
    close(from_peer[1]);
    FILE *peer_out = fdopen(from_peer[0], "r");
    char line[256], peer[64];
    unsigned long long base = 0;
    EXPECT(fgets(line, sizeof line, peer_out) != NULL && sscanf(line, "READY %63s %llu", peer, &base) == 2,
           "agent-b did not say READY: %s", line);

    /* As NIXL's loadRemoteConnInfo. */
    segment_id_t seg = openSegment(e, peer);
    EXPECT(seg >= 0, "openSegment %s", peer);
    char slashed[80];
    snprintf(slashed, sizeof slashed, "/%s", peer);
    EXPECT(openSegment(e, slashed) == seg, "openSegment with a leading slash is the same segment");
    EXPECT(openSegmentNoCache(e, peer) == seg, "openSegmentNoCache is the same segment");
    EXPECT(syncSegmentCache(e) == 0, "syncSegmentCache");
    EXPECT(openSegment(e, "") == -1, "openSegment of \"\"");

    /* As NIXL's postXfer/checkXfer: the first half of the write in two
     * submissions to one batch of 1024, polled, freed. */
    transfer_request_t req[PIECES];
    const size_t piece = N / PIECES;
    for (size_t i = 0; i < PIECES; i++) {
        req[i].opcode = OPCODE_WRITE;
        req[i].source = src + i * piece;
        req[i].target_id = seg;
        req[i].target_offset = base + i * piece;
        req[i].length = piece;
    }
    batch_id_t b = allocateBatchID(e, 1024);
    EXPECT(b != INVALID_BATCH, "allocateBatchID");
    EXPECT(submitTransfer(e, b, req, PIECES / 4) == 0, "submitTransfer 1");
    EXPECT(submitTransfer(e, b, req + PIECES / 4, PIECES / 4) == 0, "submitTransfer 2 (numbered on)");
    check_xfer(e, b, PIECES / 2, "write, first half");
    transfer_status_t st;
    EXPECT(getTransferStatus(e, b, PIECES / 2, &st) == FERRY_MC_STATUS_INVALID_ARGUMENT, "getTransferStatus past the tasks");
    EXPECT(freeBatchID(e, b) == 0, "freeBatchID");
    EXPECT(getTransferStatus(e, b, 0, &st) == FERRY_MC_STATUS_INVALID_ARGUMENT, "getTransferStatus of a freed batch");

    /* Refusals: Mooncake's submitTransfer fails, with its Status code. */
    b = allocateBatchID(e, 2);
    EXPECT(b != INVALID_BATCH, "allocateBatchID");
    transfer_request_t bad = req[0];
    bad.opcode = 7;
    EXPECT(submitTransfer(e, b, &bad, 1) == FERRY_MC_STATUS_INVALID_ARGUMENT, "opcode 7");
    bad = req[0];
    bad.source = more_addr[0]; /* unregistered above */
    bad.length = 4096;
    int rc = submitTransfer(e, b, &bad, 1);
    EXPECT(rc == FERRY_MC_STATUS_ADDRESS_NOT_REGISTERED, "unregistered source: status code %d", rc);
    bad = req[0];
    bad.target_id = -3;
    EXPECT(submitTransfer(e, b, &bad, 1) == FERRY_MC_STATUS_INVALID_ARGUMENT, "target_id -3");
    EXPECT(freeBatchID(e, b) == 0, "freeBatchID");

    /* The second half with a notification: agent-b verifies all of it on
     * the notification and answers with its own. */
    b = allocateBatchID(e, 1024);
    notify_msg_t written = {(char *)"agent-a", (char *)"written"};
    EXPECT(submitTransferWithNotify(e, b, req + PIECES / 2, PIECES / 2, written) == 0, "submitTransferWithNotify");
    check_xfer(e, b, PIECES / 2, "write, second half");
    EXPECT(freeBatchID(e, b) == 0, "freeBatchID");
    await_notif(e, "agent-b", "verified");
    printf("ok: two processes: %d verified bytes written in %d requests, notified\n", N, PIECES);

    /* Read agent-b's pattern back. */
    b = allocateBatchID(e, 4);
    for (size_t i = 0; i < 4; i++) {
        req[i].opcode = OPCODE_READ;
        req[i].source = dst + i * (N / 4);
        req[i].target_id = seg;
        req[i].target_offset = base + N + i * (N / 4);
        req[i].length = N / 4;
    }
    EXPECT(submitTransfer(e, b, req, 4) == 0, "submitTransfer read");
    check_xfer(e, b, 4, "read");
    EXPECT(freeBatchID(e, b) == 0, "freeBatchID");
    size_t at = verify(dst, 2);
    EXPECT(at == N, "read: byte %zu is %u, want %u", at, dst[at], pattern(2, at));
    printf("ok: %d verified bytes read back\n", N);

    /* LOCAL_SEGMENT: src to dst of this engine. */
    memset(dst, 0, N);
    b = allocateBatchID(e, 1);
    transfer_request_t local = {OPCODE_WRITE, src, LOCAL_SEGMENT, (uint64_t)(uintptr_t)dst, N};
    EXPECT(submitTransfer(e, b, &local, 1) == 0, "submitTransfer to LOCAL_SEGMENT");
    check_xfer(e, b, 1, "LOCAL_SEGMENT write");
    EXPECT(freeBatchID(e, b) == 0, "freeBatchID");
    at = verify(dst, 1);
    EXPECT(at == N, "LOCAL_SEGMENT: byte %zu is %u, want %u", at, dst[at], pattern(1, at));
    notify_msg_t self_note = {(char *)"agent-a", (char *)"to myself"};
    EXPECT(genNotifyInEngine(e, LOCAL_SEGMENT, self_note) == 0, "genNotifyInEngine to LOCAL_SEGMENT");
    await_notif(e, "agent-a", "to myself");
    printf("ok: LOCAL_SEGMENT write and notification verified\n");

    const char *dir = getenv("FERRY_PLUGIN_DIR");
    char here[4096];
    if (dir == NULL || *dir == 0) { /* beside this program, as in bin/ */
        snprintf(here, sizeof here, "%s", argv[0]);
        char *slash = strrchr(here, '/');
        if (slash != NULL) {
            *slash = 0;
        } else {
            strcpy(here, ".");
        }
        dir = here;
    }
    two_peers(e, seg, base, src);
    busy_batch(dir, peer, base, src);

    /* Done: agent-b exits when its stdin closes. */
    close(to_peer[1]);
    int status = 0;
    EXPECT(waitpid(pid, &status, 0) == pid, "waitpid");
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "agent-b failed: status %d", status);
    fclose(peer_out);

    EXPECT(closeSegment(e, seg) == 0, "closeSegment");
    EXPECT(removeLocalSegment(e, "x") == FERRY_MC_ERR_NOT_IMPLEMENTED, "removeLocalSegment");
    EXPECT(unregisterLocalMemory(e, src) == 0 && unregisterLocalMemory(e, dst) == 0, "unregisterLocalMemory");
    destroyTransferEngine(e);
    /* A destroyed engine is an error, not a crash. */
    EXPECT(registerLocalMemory(e, src, N, "cpu", 1) == FERRY_MC_ERR_INVALID_ARGUMENT, "registerLocalMemory after destroy");
    EXPECT(openSegment(e, peer) == -1, "openSegment after destroy");
    for (int i = 0; i < 4; i++) {
        free(more_addr[i]);
    }
    free(src);
    free(dst);
    printf("mooncake_test: ok (%s)\n", conn);
    return 0;
}
