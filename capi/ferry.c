// The C half of libferry: the public functions of include/ferry.h, each a
// thin wrapper over its Go export (ferry_go_*, in exports*.go), so that
// the C compiler checks every definition against the header's prototype;
// the thread-local error message; and the functions that need no Go.

#include <stdlib.h>
#include <string.h>

#include "ferry.h"
#include "_cgo_export.h"

// ---- the thread-local message -------------------------------------------

static __thread char *ferry_msg;
static __thread size_t ferry_msg_cap;

// ferry_set_error copies n bytes of msg as this thread's message. Called
// from Go, which runs on the calling C thread for the whole of an export.
__attribute__((visibility("hidden"))) void ferry_set_error(const char *msg, size_t n) {
    if (n + 1 > ferry_msg_cap) {
        size_t c = n + 1 < 256 ? 256 : n + 1;
        char *p = realloc(ferry_msg, c);
        if (p == NULL) {
            return; // keep the old message rather than none
        }
        ferry_msg = p;
        ferry_msg_cap = c;
    }
    if (n > 0) {
        memcpy(ferry_msg, msg, n);
    }
    ferry_msg[n] = 0;
}

const char *ferry_last_error(void) { return ferry_msg != NULL ? ferry_msg : ""; }

const char *ferry_error_name(int code) {
    switch (code) {
    case FERRY_OK: return "FERRY_OK";
    case FERRY_ERR_INVALID: return "FERRY_ERR_INVALID";
    case FERRY_ERR_NOT_REGISTERED: return "FERRY_ERR_NOT_REGISTERED";
    case FERRY_ERR_OUT_OF_BOUNDS: return "FERRY_ERR_OUT_OF_BOUNDS";
    case FERRY_ERR_PERMISSION: return "FERRY_ERR_PERMISSION";
    case FERRY_ERR_SEGMENT_NOT_FOUND: return "FERRY_ERR_SEGMENT_NOT_FOUND";
    case FERRY_ERR_UNAVAILABLE: return "FERRY_ERR_UNAVAILABLE";
    case FERRY_ERR_PLUGIN_FAILED: return "FERRY_ERR_PLUGIN_FAILED";
    case FERRY_ERR_DEADLINE_EXCEEDED: return "FERRY_ERR_DEADLINE_EXCEEDED";
    case FERRY_ERR_CANCELED: return "FERRY_ERR_CANCELED";
    case FERRY_ERR_CLOSED: return "FERRY_ERR_CLOSED";
    case FERRY_ERR_BUSY: return "FERRY_ERR_BUSY";
    case FERRY_ERR_CONFIG: return "FERRY_ERR_CONFIG";
    case FERRY_ERR_TOO_SMALL: return "FERRY_ERR_TOO_SMALL";
    case FERRY_ERR_AGAIN: return "FERRY_ERR_AGAIN";
    case FERRY_ERR_UNIMPLEMENTED: return "FERRY_ERR_UNIMPLEMENTED";
    case FERRY_ERR_INTERNAL: return "FERRY_ERR_INTERNAL";
    }
    return "FERRY_ERR_UNKNOWN";
}

int ferry_abi_version(void) { return FERRY_ABI_VERSION; }

const char *ferry_version(void) { return ferry_go_version(); }

// ---- what the library returns, freed here ------------------------------

void ferry_free_buffer(void *p) { free(p); }

void ferry_free_segment_info(ferry_segment_info_t *info) {
    if (info == NULL) {
        return;
    }
    free(info->name);
    free(info->machine_id);
    free(info->buffers);
    for (size_t i = 0; i < info->num_transports; i++) {
        free(info->transports[i]);
    }
    free(info->transports);
    free(info);
}

void ferry_free_notifs(ferry_notif_list_t *list) {
    if (list == NULL) {
        return;
    }
    for (size_t i = 0; i < list->count; i++) {
        free(list->notifs[i].from);
        free(list->notifs[i].name);
        free(list->notifs[i].msg);
    }
    free(list->notifs);
    free(list);
}

// ---- wrappers over the Go exports ----------------------------------------

int ferry_create_engine_from_file(const char *path, ferry_engine_t *out) {
    return ferry_go_create_engine_from_file((char *)path, out);
}
int ferry_create_engine_from_text(const char *text, ferry_engine_t *out) {
    return ferry_go_create_engine_from_text((char *)text, out);
}
int ferry_create_engine_with_secret(const char *path, const char *text, const void *secret, size_t secret_len,
                                    ferry_engine_t *out) {
    return ferry_go_create_engine_with_secret((char *)path, (char *)text, (void *)secret, secret_len, out);
}
int ferry_destroy_engine(ferry_engine_t e) { return ferry_go_destroy_engine(e); }
int ferry_segment_name(ferry_engine_t e, char *buf, size_t cap, size_t *len) {
    return ferry_go_engine_string(e, 0, buf, cap, len);
}
int ferry_rpc_addr(ferry_engine_t e, char *buf, size_t cap, size_t *len) {
    return ferry_go_engine_string(e, 1, buf, cap, len);
}
int ferry_metastore_url(ferry_engine_t e, char *buf, size_t cap, size_t *len) {
    return ferry_go_engine_string(e, 2, buf, cap, len);
}

int ferry_allocate(ferry_engine_t e, size_t size, void **out) {
    return ferry_go_allocate(e, size, out);
}
int ferry_free(ferry_engine_t e, void *ptr) { return ferry_go_free(e, ptr); }
int ferry_register(ferry_engine_t e, void *ptr, size_t len, int perm, uint64_t *remote_addr) {
    return ferry_go_register(e, ptr, len, perm, remote_addr);
}
// Device addresses cross as numbers: they are not this process's memory.
int ferry_register_device(ferry_engine_t e, void *ptr, size_t len, const char *kind, int perm,
                          const ferry_device_handle_t *handle, uint64_t *out_base) {
    return ferry_go_register_device(e, (uint64_t)(uintptr_t)ptr, len, (char *)kind, perm,
                                    (ferry_device_handle_t *)handle, out_base);
}
int ferry_unregister_device(ferry_engine_t e, void *ptr) {
    return ferry_go_unregister_device(e, (uint64_t)(uintptr_t)ptr);
}
int ferry_allocate_device(ferry_engine_t e, const char *kind, size_t size, ferry_device_memory_t *out) {
    return ferry_go_allocate_device(e, (char *)kind, size, out);
}
int ferry_free_device(ferry_engine_t e, void *addr) {
    return ferry_go_free_device(e, (uint64_t)(uintptr_t)addr);
}
int ferry_unregister(ferry_engine_t e, void *ptr) { return ferry_go_unregister(e, ptr); }
int ferry_register_batch(ferry_engine_t e, void *const *ptrs, const size_t *lens, size_t n,
                         const int *perms, size_t nperms) {
    return ferry_go_register_batch(e, (void **)ptrs, (size_t *)lens, n, (int *)perms, nperms);
}
int ferry_unregister_batch(ferry_engine_t e, void *const *ptrs, size_t n) {
    return ferry_go_unregister_batch(e, (void **)ptrs, n);
}

int ferry_open_segment(ferry_engine_t e, const char *name, ferry_segment_t *out) {
    return ferry_go_open_segment(e, (char *)name, out);
}
int ferry_close_segment(ferry_engine_t e, ferry_segment_t seg) {
    return ferry_go_close_segment(e, seg);
}
int ferry_segment_info(ferry_engine_t e, ferry_segment_t seg, ferry_segment_info_t **out) {
    return ferry_go_segment_info(e, seg, out);
}
int ferry_export_segment(ferry_engine_t e, void **blob, size_t *len) {
    return ferry_go_export_segment(e, blob, len);
}
int ferry_import_segment(ferry_engine_t e, const void *blob, size_t len, const char *expect_name,
                         ferry_segment_t *out) {
    return ferry_go_import_segment(e, (void *)blob, len, (char *)expect_name, out);
}

int ferry_allocate_batch(ferry_engine_t e, size_t capacity, ferry_batch_t *out) {
    return ferry_go_allocate_batch(e, capacity, out);
}
int ferry_free_batch(ferry_engine_t e, ferry_batch_t b) { return ferry_go_free_batch(e, b); }
int ferry_submit(ferry_engine_t e, ferry_batch_t b, const ferry_request_t *reqs, size_t n) {
    return ferry_go_submit(e, b, (ferry_request_t *)reqs, n, NULL, NULL, 0);
}
int ferry_submit_notif(ferry_engine_t e, ferry_batch_t b, const ferry_request_t *reqs, size_t n,
                       const char *name, const void *msg, size_t msg_len) {
    if (name == NULL) {
        ferry_set_error("ferry_submit_notif: name is NULL; give the notification's name",
                        strlen("ferry_submit_notif: name is NULL; give the notification's name"));
        return FERRY_ERR_INVALID;
    }
    return ferry_go_submit(e, b, (ferry_request_t *)reqs, n, (char *)name, (void *)msg, msg_len);
}
int ferry_task_status(ferry_engine_t e, ferry_batch_t b, size_t task, ferry_task_status_t *out) {
    return ferry_go_task_status(e, b, task, out);
}
int ferry_task_status_list(ferry_engine_t e, ferry_batch_t b, size_t first, ferry_task_status_t *out,
                           size_t cap, size_t *filled) {
    return ferry_go_task_status_list(e, b, first, out, cap, filled);
}
int ferry_batch_status(ferry_engine_t e, ferry_batch_t b, ferry_batch_status_t *out) {
    return ferry_go_batch_status(e, b, out);
}
int ferry_cancel_task(ferry_engine_t e, ferry_batch_t b, size_t task) {
    return ferry_go_cancel(e, b, task, 0);
}
int ferry_cancel_batch(ferry_engine_t e, ferry_batch_t b) { return ferry_go_cancel(e, b, 0, 1); }
int ferry_wait(ferry_engine_t e, ferry_batch_t b, int64_t timeout_ns) {
    return ferry_go_wait(e, b, timeout_ns);
}
int ferry_transfer(ferry_engine_t e, const ferry_request_t *reqs, size_t n) {
    return ferry_go_transfer(e, (ferry_request_t *)reqs, n);
}
int ferry_transfer_sync(ferry_engine_t e, int opcode, ferry_segment_t seg, void *local,
                        uint64_t remote, size_t len, int64_t timeout_ns,
                        const char *transport_hint) {
    return ferry_go_transfer_sync(e, opcode, seg, local, remote, len, timeout_ns,
                                  (char *)transport_hint);
}

int ferry_upgrade_plugin(ferry_engine_t e, const char *name, const char *path, const char *sha256,
                         uint64_t drain_ms) {
    return ferry_go_upgrade_plugin(e, (char *)name, (char *)path, (char *)sha256, drain_ms);
}

int ferry_send_notif(ferry_engine_t e, ferry_segment_t seg, const char *name, const void *msg,
                     size_t msg_len) {
    return ferry_go_send_notif(e, seg, (char *)name, (void *)msg, msg_len);
}
int ferry_recv_notifs(ferry_engine_t e, size_t max, int64_t timeout_ns, ferry_notif_list_t **out) {
    return ferry_go_recv_notifs(e, max, timeout_ns, out);
}

int ferry_prepare_blocks(ferry_engine_t e, ferry_segment_t seg, void *local_base, size_t local_len,
                         const ferry_block_layout_t *local, uint64_t remote_base,
                         const ferry_block_layout_t *remote, ferry_blocks_t *out) {
    return ferry_go_prepare_blocks(e, seg, local_base, local_len, (ferry_block_layout_t *)local,
                                   remote_base, (ferry_block_layout_t *)remote, out);
}
int ferry_free_blocks(ferry_engine_t e, ferry_blocks_t l) { return ferry_go_free_blocks(e, l); }
int ferry_submit_blocks(ferry_engine_t e, ferry_batch_t b, ferry_blocks_t l,
                        const ferry_block_request_t *req, const uint32_t *local_idx,
                        const uint32_t *remote_idx, size_t n, size_t *first_task,
                        size_t *task_count) {
    return ferry_go_submit_blocks(e, b, l, (ferry_block_request_t *)req, (uint32_t *)local_idx,
                                  (uint32_t *)remote_idx, n, 0, 0, 0, first_task, task_count);
}
int ferry_submit_block_range(ferry_engine_t e, ferry_batch_t b, ferry_blocks_t l,
                             const ferry_block_request_t *req, uint32_t local_first,
                             uint32_t remote_first, size_t n, size_t *first_task,
                             size_t *task_count) {
    return ferry_go_submit_blocks(e, b, l, (ferry_block_request_t *)req, NULL, NULL, n, local_first,
                                  remote_first, 1, first_task, task_count);
}
