/*
 * move_block.c: the C version of examples/embed.go. A decode engine
 * serves the metastore and exposes its KV memory; a prefill engine joins
 * that metastore, finds "decode-0" by name and writes a block into it,
 * with a notification on landing. Real deployments run the two in two
 * processes (see ferry_test.c); the calls on each side are the same.
 * Both engines share a cluster secret generated here, so that they sign
 * and authenticate what they tell each other (and warn of nothing); two
 * processes would share it through a file (cluster_secret_file).
 *
 * Build and run (after `make build`):
 *   cc -Iinclude examples/c/move_block.c -Lbin -lferry -Wl,-rpath,bin -o move_block
 *   FERRY_PLUGIN_DIR=bin ./move_block
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry.h"

/* check prints what failed and exits: every ferry call returns a code and
 * leaves a message saying what failed and what to do. */
static void check(int rc, const char *what) {
    if (rc != FERRY_OK) {
        fprintf(stderr, "%s: %s: %s\n", what, ferry_error_name(rc), ferry_last_error());
        exit(1);
    }
}

/* new_secret fills secret with 64 hex digits from /dev/urandom. */
static void new_secret(char secret[65]) {
    unsigned char b[32];
    FILE *f = fopen("/dev/urandom", "rb");
    if (f == NULL || fread(b, 1, sizeof b, f) != sizeof b) {
        fprintf(stderr, "cannot read /dev/urandom for the cluster secret\n");
        exit(1);
    }
    fclose(f);
    for (int i = 0; i < 32; i++) {
        snprintf(secret + 2 * i, 3, "%02x", b[i]);
    }
}

int main(void) {
    char secret[65];
    new_secret(secret);

    /* The decode side embeds the metastore and exposes memory peers may
     * write. */
    ferry_engine_t decode = 0;
    check(ferry_create_engine_with_secret(NULL,
                                          "name = \"decode-0\"\n"
                                          "metastore {\n  kind = \"embedded\"\n  listen = \"127.0.0.1:0\"\n}\n"
                                          "plugin \"tcp\" {\n  config {\n    listen = [\"127.0.0.1:0\"]\n  }\n}\n"
                                          "plugin \"shm\" {}\n",
                                          secret, 64, &decode),
          "create decode");
    void *kv = NULL;
    check(ferry_allocate(decode, 1 << 20, &kv), "allocate"); /* memory the plugins map: zero copy */
    check(ferry_register(decode, kv, 1 << 20, FERRY_PERM_REMOTE_READ_WRITE, NULL), "register kv");

    /* The prefill side joins decode's metastore, so it finds "decode-0"
     * by name. */
    char url[256], cfg[1024];
    check(ferry_metastore_url(decode, url, sizeof url, NULL), "metastore url");
    snprintf(cfg, sizeof cfg,
             "name = \"prefill-0\"\n"
             "metastore {\n  kind = \"http\"\n  url = \"%s\"\n}\n"
             "plugin \"tcp\" {\n  config {\n    listen = [\"127.0.0.1:0\"]\n  }\n}\n"
             "plugin \"shm\" {}\n",
             url);
    ferry_engine_t prefill = 0;
    check(ferry_create_engine_with_secret(NULL, cfg, secret, 64, &prefill), "create prefill");
    void *block = NULL;
    check(ferry_allocate(prefill, 4096, &block), "allocate block");
    check(ferry_register(prefill, block, 4096, FERRY_PERM_LOCAL, NULL), "register block");
    for (int i = 0; i < 4096; i++) {
        ((unsigned char *)block)[i] = (unsigned char)(i * 7 + 3);
    }

    ferry_segment_t seg = 0;
    check(ferry_open_segment(prefill, "decode-0", &seg), "open segment");
    ferry_segment_info_t *info = NULL;
    check(ferry_segment_info(prefill, seg, &info), "segment info");
    uint64_t remote = info->buffers[0].base; /* the owner's address, as in TENT */
    ferry_free_segment_info(info);

    /* One batch of one request, with a notification once it landed. */
    ferry_batch_t batch = 0;
    check(ferry_allocate_batch(prefill, 1, &batch), "allocate batch");
    ferry_request_t req = {0};
    req.opcode = FERRY_WRITE;
    req.priority = FERRY_PRIORITY_MEDIUM;
    req.source = block;
    req.target_id = seg;
    req.target_offset = remote;
    req.length = 4096;
    check(ferry_submit_notif(prefill, batch, &req, 1, "block-0", "layer 0", 7), "submit");
    check(ferry_wait(prefill, batch, 5000000000LL), "wait");
    ferry_task_status_t st;
    check(ferry_task_status(prefill, batch, 0, &st), "task status");
    if (st.state != FERRY_TASK_COMPLETED) {
        fprintf(stderr, "the write ended %d: %s\n", st.state, ferry_last_error());
        return 1;
    }
    check(ferry_free_batch(prefill, batch), "free batch");

    /* Decode learns that the block landed, then reads it. */
    ferry_notif_list_t *got = NULL;
    check(ferry_recv_notifs(decode, 1, 5000000000LL, &got), "receive notification");
    if (memcmp(kv, block, 4096) != 0) {
        fprintf(stderr, "decode holds other bytes than prefill wrote\n");
        return 1;
    }
    printf("wrote 4096 bytes from prefill-0 to decode-0, verified on notification %s (%s) from %s\n",
           got->notifs[0].name, (char *)got->notifs[0].msg, got->notifs[0].from);
    ferry_free_notifs(got);

    check(ferry_destroy_engine(prefill), "destroy prefill"); /* frees block */
    check(ferry_destroy_engine(decode), "destroy decode");
    return 0;
}
