/*
 * ferry.h: the C ABI of the Ferry transfer engine (libferry.so).
 *
 * Hand-written and stable: a function, type or constant here changes only
 * additively. FERRY_ABI_VERSION counts additions; ferry_abi_version()
 * says which one the loaded library has.
 *
 * The shape is TENT's C API (tent_*): an engine made from a configuration,
 * segments opened by name or from an exported blob, memory allocated or
 * registered, batches of requests submitted and polled, notifications, and
 * prepared block lists.
 *
 * ERRORS. Every function that can fail returns int: FERRY_OK (0) or a
 * negative ferry_error value. On failure it also sets a message for the
 * calling thread, read with ferry_last_error(): it says what failed, where
 * (segment, plugin, file:line of the configuration) and what to do. A call
 * that succeeds leaves the previous message in place unless it says
 * otherwise. No Go panic crosses the boundary: one inside the library is
 * returned as FERRY_ERR_INTERNAL with its message.
 *
 * Bad arguments are errors, never crashes: a NULL pointer where one is
 * required, a zero length, an unknown handle or option value, a pointer
 * and length (or element count) that overflow or run past the end of the
 * address space (SIZE_MAX, (void *)-1), or an array of more than 2^24
 * elements returns FERRY_ERR_INVALID and touches nothing. A call on an engine handle after
 * ferry_destroy_engine returns FERRY_ERR_CLOSED.
 *
 * HANDLES. ferry_engine_t, ferry_batch_t and ferry_blocks_t are opaque
 * integers the library hands out and never reuses (0 is never valid);
 * ferry_segment_t is the engine's segment id. None is a pointer: copying
 * or comparing them is fine; dereferencing them is meaningless.
 *
 * THREADING. Every function may be called from any thread, concurrently,
 * with the exceptions named at the functions:
 *   - ferry_destroy_engine must not run while another thread is inside a
 *     call on the same engine (calls begun after it return
 *     FERRY_ERR_CLOSED);
 *   - do not submit to one batch from two threads while one of them uses
 *     ferry_submit_notif (the notification covers the tasks that call
 *     added);
 *   - ferry_free_batch must not race with other calls on that batch.
 * The library starts its own threads (the Go runtime, plugin processes);
 * it installs no signal handlers beyond the Go runtime's and does not
 * fork. Blocking calls are ferry_create_*, ferry_destroy_engine,
 * ferry_open_segment, ferry_import_segment, ferry_register*,
 * ferry_unregister*, ferry_send_notif, ferry_wait, ferry_transfer,
 * ferry_transfer_sync, ferry_free_batch of a batch with pending tasks,
 * ferry_recv_notifs with a timeout and ferry_upgrade_plugin; the others
 * return at once.
 *
 * OWNERSHIP. Pointers passed in are borrowed for the call only, except
 * memory registered with ferry_register*, which the caller keeps
 * allocated and mapped until ferry_unregister* (or ferry_free for Ferry
 * memory) returns. Pointers the library returns are owned as each
 * function says: memory from ferry_allocate until ferry_free (or
 * ferry_destroy_engine, which frees it all); structs and byte buffers
 * from ferry_segment_info, ferry_recv_notifs and ferry_export_segment
 * until their ferry_free_* call; the string of ferry_version() and
 * ferry_last_error() as described there. The library never keeps a
 * pointer the caller passed in beyond the call, but for registered
 * memory and the local memory of a prepared block list.
 *
 * LOGS. Engines log to stderr at $FERRY_LOG_LEVEL (trace, debug, info,
 * warn: the default, error, off). The library reads the environment as
 * it was when it loaded (setenv later is not seen). Another value makes
 * ferry_create_engine_* fail with FERRY_ERR_INVALID.
 *
 * SYMBOLS. The library also exports ferry_go_* symbols: its internals,
 * behind the functions declared here. Do not call them; they change
 * without notice.
 *
 * PLUGINS. Transports are plugin executables (ferry-plugin-tcp,
 * ferry-plugin-shm, ...). The engine looks for them in the plugin
 * configuration's path, then in $FERRY_PLUGIN_DIR, then next to this
 * library when they are there (bin/, the Python wheel), then next to the
 * running executable; an embedding application sets FERRY_PLUGIN_DIR.
 */
#ifndef FERRY_H
#define FERRY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_ABI_VERSION 5

/* ---- error codes ------------------------------------------------------ */

typedef enum ferry_error {
    FERRY_OK = 0,
    /* A bad argument: NULL pointer, zero length, unknown handle, unknown
     * option value, or a request the engine refuses as malformed. */
    FERRY_ERR_INVALID = -1,
    /* Local memory in a request is not (inside) registered memory. */
    FERRY_ERR_NOT_REGISTERED = -2,
    /* A range runs past its buffer, local or remote. */
    FERRY_ERR_OUT_OF_BOUNDS = -3,
    /* The remote buffer's permission forbids the operation. */
    FERRY_ERR_PERMISSION = -4,
    /* No such segment, or it restarted: reopen it. */
    FERRY_ERR_SEGMENT_NOT_FOUND = -5,
    /* No transport can reach the segment now (plugin down, peer
     * unreachable). */
    FERRY_ERR_UNAVAILABLE = -6,
    /* A plugin failed the operation. */
    FERRY_ERR_PLUGIN_FAILED = -7,
    /* A deadline or timeout passed. */
    FERRY_ERR_DEADLINE_EXCEEDED = -8,
    /* The operation was canceled. */
    FERRY_ERR_CANCELED = -9,
    /* The engine was destroyed (or is being destroyed). */
    FERRY_ERR_CLOSED = -10,
    /* The engine refuses the work for now (admission, a full buffer);
     * retry later. */
    FERRY_ERR_BUSY = -11,
    /* The configuration is wrong; the message names file:line. */
    FERRY_ERR_CONFIG = -12,
    /* An output buffer is too small; the call says how much it needs. */
    FERRY_ERR_TOO_SMALL = -13,
    /* Nothing to return yet (ferry_recv_notifs with no timeout). Not a
     * failure; the message is not set. */
    FERRY_ERR_AGAIN = -14,
    /* This build does not implement the call. */
    FERRY_ERR_UNIMPLEMENTED = -98,
    /* A bug in the library (a recovered Go panic); the message says
     * where. Please report it. */
    FERRY_ERR_INTERNAL = -99
} ferry_error;

/* ferry_last_error returns the message of the last failed call on this
 * thread, "" if none failed. The string belongs to the library: it is
 * valid until the next ferry_* call on the same thread. Never NULL. */
const char *ferry_last_error(void);

/* ferry_error_name returns the constant's name ("FERRY_ERR_INVALID") of
 * code, or "FERRY_ERR_UNKNOWN"; a static string. */
const char *ferry_error_name(int code);

/* ---- version ---------------------------------------------------------- */

/* ferry_version returns the library's version text (module version and
 * revision); a static string, never freed. */
const char *ferry_version(void);

/* ferry_abi_version returns the FERRY_ABI_VERSION the library was built
 * with; a caller built against a higher one must not call what the
 * library lacks. */
int ferry_abi_version(void);

/* ---- handles and values ---------------------------------------------- */

typedef uint64_t ferry_engine_t;  /* from ferry_create_engine_*; 0 is none */
typedef uint64_t ferry_batch_t;   /* from ferry_allocate_batch; 0 is none */
typedef uint64_t ferry_blocks_t;  /* from ferry_prepare_blocks; 0 is none */
typedef uint32_t ferry_segment_t; /* from ferry_open_segment / import */

/* Memory permissions (what peers may do with a registered buffer). */
typedef enum ferry_perm {
    FERRY_PERM_LOCAL = 0,           /* this engine only */
    FERRY_PERM_REMOTE_READ = 1,     /* peers may read */
    FERRY_PERM_REMOTE_READ_WRITE = 2 /* peers may read and write */
} ferry_perm;

/* Operations, TENT's numbering. */
typedef enum ferry_opcode {
    FERRY_READ = 0,  /* remote segment -> local memory */
    FERRY_WRITE = 1  /* local memory -> remote segment */
} ferry_opcode;

/* Priorities, TENT's numbering (HIGH=0, MEDIUM=1, LOW=2). MEDIUM is the
 * engine's normal priority; a zeroed request is HIGH, so set it. */
typedef enum ferry_priority {
    FERRY_PRIORITY_HIGH = 0,
    FERRY_PRIORITY_MEDIUM = 1,
    FERRY_PRIORITY_LOW = 2
} ferry_priority;

/* Task states. */
typedef enum ferry_task_state {
    FERRY_TASK_PENDING = 0,
    FERRY_TASK_COMPLETED = 1,
    FERRY_TASK_FAILED = 2,
    FERRY_TASK_CANCELED = 3,
    FERRY_TASK_TIMEOUT = 4,
    FERRY_TASK_INVALID = 5
} ferry_task_state;

/* One transfer between local registered memory and a remote segment. */
typedef struct ferry_request {
    int32_t opcode;            /* ferry_opcode */
    int32_t priority;          /* ferry_priority */
    void *source;              /* local memory, inside a registered buffer;
                                  borrowed until the task ends */
    ferry_segment_t target_id; /* from ferry_open_segment / import */
    uint32_t reserved;         /* zero */
    uint64_t target_offset;    /* remote address, as the segment lists its
                                  buffers (the owner's virtual address) */
    uint64_t length;           /* bytes; > 0 */
    int64_t deadline_ns;       /* absolute, CLOCK_REALTIME ns; 0: the
                                  engine's transfer.default_deadline */
    const char *transport_hint; /* plugin name ("tcp", "shm"); NULL or "":
                                   the engine chooses. Never a silent
                                   fallback: an unusable hint fails the
                                   task INVALID. Borrowed for the call. */
    const char *policy_name;   /* a configured policy; NULL: none */
    const char *intent;        /* policy match input; NULL: none */
} ferry_request_t;

/* One task's status. */
typedef struct ferry_task_status {
    int32_t state;             /* ferry_task_state */
    int32_t error;             /* ferry_error of why the task did not
                                  complete; FERRY_OK when PENDING/COMPLETED */
    uint64_t transferred_bytes;
    int32_t attempts;          /* 1 unless failed over */
    int32_t reserved;
} ferry_task_status_t;

/* A batch's sum. */
typedef struct ferry_batch_status {
    uint64_t tasks, pending, completed;
    uint64_t failed;           /* FAILED, CANCELED, TIMEOUT and INVALID */
    uint64_t transferred_bytes;
} ferry_batch_status_t;

/* ---- engine ----------------------------------------------------------- */

/* ferry_create_engine_from_file starts an engine from the HCL
 * configuration file at path (docs/config.md): it starts the plugins and
 * publishes the engine's segment. Errors: FERRY_ERR_INVALID (NULL),
 * FERRY_ERR_CONFIG (unreadable or wrong file; the message names
 * file:line), others from starting the engine. *out is set on success
 * only. */
int ferry_create_engine_from_file(const char *path, ferry_engine_t *out);

/* ferry_create_engine_from_text is ferry_create_engine_from_file with the
 * configuration's text (NUL-terminated, not empty) instead of a file;
 * relative paths in it are taken from the current directory. */
int ferry_create_engine_from_text(const char *text, ferry_engine_t *out);

/* ferry_create_engine_with_secret is ferry_create_engine_from_file (path)
 * or ferry_create_engine_from_text (text), exactly one of them non-NULL,
 * with the cluster secret in memory instead of a file: secret_len bytes,
 * at least 16 (64 random hex digits serve), the same on every engine of
 * the cluster. It replaces the configuration's cluster_secret_file. With
 * it the engine signs its descriptor, authenticates its control service,
 * and its plugins (unless their blocks name their own) authenticate their
 * peers; without any secret an engine warns once at start of what is
 * open. The secret is copied. Errors: as ferry_create_engine_from_file,
 * and FERRY_ERR_INVALID for a shorter secret. Since FERRY_ABI_VERSION 5. */
int ferry_create_engine_with_secret(const char *path, const char *text,
                                    const void *secret, size_t secret_len,
                                    ferry_engine_t *out);

/* ferry_destroy_engine closes the engine: it ends the tasks in flight,
 * stops the plugins, unpublishes the segment and frees the memory from
 * ferry_allocate (pointers to it are invalid afterwards). The handle is
 * dead afterwards, whatever the call returns; destroying it again returns
 * FERRY_ERR_CLOSED. FERRY_ERR_UNAVAILABLE says only that the metastore
 * could not be reached to delete the segment's descriptor, which expires
 * with its lease. Must not run concurrently with other calls on the same
 * engine. */
int ferry_destroy_engine(ferry_engine_t e);

/* ferry_segment_name writes the engine's segment name (its configured
 * name), NUL-terminated, into buf of cap bytes. When cap is too small it
 * returns FERRY_ERR_TOO_SMALL and writes nothing. *len, when len is not
 * NULL, is set to the name's length without the NUL in both cases. */
int ferry_segment_name(ferry_engine_t e, char *buf, size_t cap, size_t *len);

/* ferry_rpc_addr writes the engine's control address ("host:port", where
 * peers send notifications and fetch its descriptor) as
 * ferry_segment_name does. */
int ferry_rpc_addr(ferry_engine_t e, char *buf, size_t cap, size_t *len);

/* ferry_metastore_url writes the URL of the engine's metastore (the one it
 * embeds or joined; "" for none) as ferry_segment_name does. A second
 * engine joins an embedded metastore with metastore { kind = "http"
 * url = "<this>" }. */
int ferry_metastore_url(ferry_engine_t e, char *buf, size_t cap, size_t *len);

/* ---- memory ----------------------------------------------------------- */

/* ferry_allocate returns size bytes (> 0) of memory the transport plugins
 * map: the zero-copy path. *out is owned by the engine until ferry_free or
 * ferry_destroy_engine; it is not registered yet. */
int ferry_allocate(ferry_engine_t e, size_t size, void **out);

/* ferry_free releases memory from ferry_allocate (ptr is the pointer it
 * returned), unregistering what is still registered in it. Errors:
 * FERRY_ERR_INVALID for a pointer not from ferry_allocate. */
int ferry_free(ferry_engine_t e, void *ptr);

/* ferry_register makes [ptr, ptr+len) usable in transfers and, per perm,
 * by peers. Memory from ferry_allocate (or part of it) is moved in place
 * by every transport. Other memory (malloc, mmap, a numpy array) is the
 * application's: a copying transport (tcp) reaches it by cross-memory
 * attach, with one extra copy, and shm is never chosen for it; it fails
 * here when the system forbids the attach (ptrace_scope 2 or 3). Keep such
 * memory allocated until ferry_unregister returns. *remote_addr, when not
 * NULL, is set to the address peers use for ptr (ptr itself). */
int ferry_register(ferry_engine_t e, void *ptr, size_t len, int perm,
                   uint64_t *remote_addr);

/* ferry_unregister removes the registration that starts at ptr. */
int ferry_unregister(ferry_engine_t e, void *ptr);

/* ferry_register_batch registers n buffers (ptrs[i], lens[i]) with
 * perms[i], or with perms[0] for all when nperms is 1 (nperms is n or 1).
 * All or nothing: when one is refused none is registered, and the message
 * names which. n == 0 is FERRY_ERR_INVALID. */
int ferry_register_batch(ferry_engine_t e, void *const *ptrs,
                         const size_t *lens, size_t n, const int *perms,
                         size_t nperms);

/* ferry_unregister_batch removes the registrations that start at each of
 * ptrs. When one is not the start of a registered buffer, none is
 * removed. */
int ferry_unregister_batch(ferry_engine_t e, void *const *ptrs, size_t n);

/* ---- device memory (ABI version 3) ----------------------------------- */

/* Device memory (a GPU's) is registered by its device address with a kind
 * ("cuda", "cuda:1", "rocm:0"; NULL or "" asks the engine's device plugins
 * which it is) and, where the application made the export, a handle. A
 * device plugin serves the kind: the configuration's device blocks
 * (docs/config.md). Requests name device memory as they name host memory:
 * ferry_request_t.source (or ferry_transfer_sync's local) is the device
 * address; the engine never dereferences it. Where no transport moves
 * device memory directly, the engine stages it through host memory (the
 * staging block). ferry_register of an address that is not host memory of
 * this process is ferry_register_device with no kind and no handle, and
 * ferry_unregister of the start of a device registration removes it. */

/* The most bytes a device handle's data holds. */
#define FERRY_DEVICE_HANDLE_MAX 128

/* A device range exported to other processes: what cuIpcGetMemHandle,
 * cuMemExportToShareableHandle or hipIpcGetMemHandle made, or what
 * ferry_allocate_device returns. A plain value: copy it freely. */
typedef struct ferry_device_handle {
    char type[16];         /* NUL-terminated: "cuda-ipc", "cuda-fd",
                              "hip-ipc", "sim" */
    int32_t device;        /* the exporting device's index */
    uint32_t data_len;     /* bytes of data used, 1..FERRY_DEVICE_HANDLE_MAX */
    uint8_t data[128];     /* FERRY_DEVICE_HANDLE_MAX: the handle (64 bytes
                              for cuda-ipc; for "sim": pid u32, fd u32,
                              allocation id u64, little-endian) */
    uint64_t size;         /* bytes of the whole exported allocation */
    uint64_t offset;       /* where the range starts in the allocation */
    uint64_t length;       /* the range's bytes */
} ferry_device_handle_t;

/* Device memory from ferry_allocate_device. A plain value. */
typedef struct ferry_device_memory {
    void *addr;            /* the device address: register it, name it in
                              requests; never dereference it */
    uint64_t size;
    char kind[32];         /* NUL-terminated: "cuda:0" */
    ferry_device_handle_t handle; /* exports the whole allocation: map it
                              with the device's own driver */
} ferry_device_memory_t;

/* ferry_register_device registers len bytes of device memory at ptr so
 * that requests (and, per perm, peers) can use them. kind: "cuda",
 * "cuda:N", "rocm", "rocm:N", or NULL/"" for the device plugins to find
 * it. handle, when not NULL, exports the range (its length must be len):
 * needed for memory of the application's own driver (cudaMalloc, as
 * PyTorch allocates) that a plugin in another process cannot look into;
 * NULL for memory of ferry_allocate_device or a device whose plugin finds
 * it. *out_base, when not NULL, is set to the address peers use (ptr).
 * Nothing is registered on an error: FERRY_ERR_INVALID for memory that is
 * not device memory, a device index that is not the memory's, a bad or
 * stale handle, or an unknown kind; FERRY_ERR_UNAVAILABLE when no device
 * plugin serves the kind here. The message names the kind, the device
 * and the plugin. */
int ferry_register_device(ferry_engine_t e, void *ptr, size_t len,
                          const char *kind, int perm,
                          const ferry_device_handle_t *handle,
                          uint64_t *out_base);

/* ferry_unregister_device removes the device registration that starts at
 * ptr. */
int ferry_unregister_device(ferry_engine_t e, void *ptr);

/* ferry_allocate_device has the device plugin of kind ("cuda", "cuda:1")
 * allocate size (> 0) bytes of device memory and fills *out: its address,
 * size, kind and a handle that exports it, for the application to map
 * with its own driver. It is not registered yet. It is freed by
 * ferry_free_device or ferry_destroy_engine. */
int ferry_allocate_device(ferry_engine_t e, const char *kind, size_t size,
                          ferry_device_memory_t *out);

/* ferry_free_device frees memory of ferry_allocate_device (addr is its
 * out->addr). Unregister it first. Mappings the application made of its
 * handle stay valid until it unmaps them; new opens of the handle fail. */
int ferry_free_device(ferry_engine_t e, void *addr);

/* ---- segments --------------------------------------------------------- */

/* ferry_open_segment opens the segment of the engine called name, found
 * through the metastore, and prepares every transport both engines have
 * to reach it. Without a metastore (kind "none", or one that does not
 * know name), name may be the host:port of the peer's control address
 * (its ferry_rpc_addr). With a metastore the open segment follows its
 * peer: buffers it registers later are seen without opening it again. */
int ferry_open_segment(ferry_engine_t e, const char *name,
                       ferry_segment_t *out);

/* ferry_close_segment closes a segment from ferry_open_segment or
 * ferry_import_segment. */
int ferry_close_segment(ferry_engine_t e, ferry_segment_t seg);

/* One buffer of a segment. */
typedef struct ferry_buffer_info {
    uint64_t base;   /* the owner's address: a request's target_offset */
    uint64_t length;
    int32_t perm;    /* ferry_perm */
    int32_t foreign; /* 1: application memory (no zero-copy transport) */
} ferry_buffer_info_t;

/* What the engine knows of an open segment. Owned by the caller once
 * returned; free with ferry_free_segment_info. */
typedef struct ferry_segment_info {
    ferry_segment_t id;
    uint32_t reserved;
    uint64_t incarnation;     /* changes when the peer restarts */
    char *name;               /* NUL-terminated */
    char *machine_id;         /* NUL-terminated */
    size_t num_buffers;
    ferry_buffer_info_t *buffers;
    size_t num_transports;
    char **transports;        /* NUL-terminated names both ends have */
} ferry_segment_info_t;

/* ferry_segment_info describes an open segment as last read (from the
 * metastore or its blob). */
int ferry_segment_info(ferry_engine_t e, ferry_segment_t seg,
                       ferry_segment_info_t **out);

/* ferry_free_segment_info frees what ferry_segment_info returned; NULL is
 * ignored. */
void ferry_free_segment_info(ferry_segment_info_t *info);

/* ferry_export_segment returns this engine's segment descriptor as a
 * checksummed (and, with a cluster secret, signed) blob, for the
 * application's own side channel. *blob (of *len bytes) is the caller's;
 * free it with ferry_free_buffer. Export after registering: buffers
 * registered later are not in it. */
int ferry_export_segment(ferry_engine_t e, void **blob, size_t *len);

/* ferry_import_segment opens the segment a peer's blob describes, with no
 * metastore; the id is used as one from ferry_open_segment. expect_name,
 * when not NULL, refuses a blob of any other engine. A truncated,
 * corrupted or badly signed blob is FERRY_ERR_INVALID; nothing opens. */
int ferry_import_segment(ferry_engine_t e, const void *blob, size_t len,
                         const char *expect_name, ferry_segment_t *out);

/* ferry_free_buffer frees a byte buffer the library returned
 * (ferry_export_segment); NULL is ignored. */
void ferry_free_buffer(void *p);

/* ---- batches ---------------------------------------------------------- */

/* ferry_allocate_batch returns a batch that holds up to capacity (> 0)
 * tasks. */
int ferry_allocate_batch(ferry_engine_t e, size_t capacity,
                         ferry_batch_t *out);

/* ferry_free_batch frees a batch: its pending tasks are canceled, and it
 * returns once they have ended (no plugin touches their memory), so the
 * local memory of its tasks may be reused once it returns. The handle is
 * dead afterwards. */
int ferry_free_batch(ferry_engine_t e, ferry_batch_t b);

/* ferry_submit adds n (> 0) requests to the batch as tasks, numbered on
 * from the batch's earlier tasks, and starts them; it does not wait.
 * A request the engine refuses becomes an INVALID task, read with
 * ferry_task_status; a malformed call (NULL, bad opcode or priority, more
 * tasks than the capacity left) returns FERRY_ERR_INVALID and adds none. */
int ferry_submit(ferry_engine_t e, ferry_batch_t b,
                 const ferry_request_t *reqs, size_t n);

/* ferry_submit_notif is ferry_submit and, once every task this call added
 * has COMPLETED, sends the notification (name, NUL-terminated, 1 to 255
 * bytes; msg of msg_len bytes, at most 64 KiB, msg may be NULL when
 * msg_len is 0) to each segment the requests target, exactly once. If any
 * of its tasks ends otherwise, nothing is sent. */
int ferry_submit_notif(ferry_engine_t e, ferry_batch_t b,
                       const ferry_request_t *reqs, size_t n,
                       const char *name, const void *msg, size_t msg_len);

/* ferry_task_status reads task i of the batch. When the task ended other
 * than COMPLETED, out->error says why and ferry_last_error() holds the
 * task's message (the call still returns FERRY_OK). */
int ferry_task_status(ferry_engine_t e, ferry_batch_t b, size_t task,
                      ferry_task_status_t *out);

/* ferry_task_status_list fills out[0..cap) with tasks first, first+1, ...
 * and sets *filled to how many it filled (fewer at the batch's end). */
int ferry_task_status_list(ferry_engine_t e, ferry_batch_t b, size_t first,
                           ferry_task_status_t *out, size_t cap,
                           size_t *filled);

/* ferry_batch_status sums the batch's tasks (TENT's overall status). */
int ferry_batch_status(ferry_engine_t e, ferry_batch_t b,
                       ferry_batch_status_t *out);

/* ferry_cancel_task cancels task i, best effort: it ends CANCELED unless it
 * ended first. It does not wait. */
int ferry_cancel_task(ferry_engine_t e, ferry_batch_t b, size_t task);

/* ferry_cancel_batch cancels every pending task of the batch. */
int ferry_cancel_batch(ferry_engine_t e, ferry_batch_t b);

/* ferry_wait blocks until every task of the batch has ended, or
 * timeout_ns (> 0) passes: then the pending tasks are canceled (TIMEOUT)
 * and it returns FERRY_ERR_DEADLINE_EXCEEDED once they have ended.
 * timeout_ns <= 0 waits without a limit of its own (the tasks' deadlines
 * still end them). FERRY_OK says every task ended, not that every task
 * completed: read the status. */
int ferry_wait(ferry_engine_t e, ferry_batch_t b, int64_t timeout_ns);

/* ferry_transfer runs n requests to the end (a batch of its own) and
 * returns FERRY_OK when all completed, else the first failure's code and
 * message. */
int ferry_transfer(ferry_engine_t e, const ferry_request_t *reqs, size_t n);

/* ferry_transfer_sync is ferry_transfer of one request given as scalars
 * (ABI version 2): opcode (FERRY_READ or FERRY_WRITE) of len bytes between
 * local (in registered memory; written by a read) and address remote of
 * segment seg, at FERRY_PRIORITY_MEDIUM with the engine's default policy.
 * timeout_ns > 0 is the request's deadline from now; 0 is the engine's
 * default (transfer.default_deadline); negative is FERRY_ERR_INVALID.
 * transport_hint is as in ferry_request_t (NULL: any transport); it is
 * read during the call only. It returns as ferry_transfer does, and
 * checks the same: an unknown opcode, a NULL local or a len of 0 is
 * FERRY_ERR_INVALID with nothing transferred. Made for callers that pay
 * per field they fill (Python's cffi, ctypes); with a priority, a policy
 * or an intent, use ferry_transfer. */
int ferry_transfer_sync(ferry_engine_t e, int opcode, ferry_segment_t seg,
                        void *local, uint64_t remote, size_t len,
                        int64_t timeout_ns, const char *transport_hint);

/* ---- plugins (ABI version 4) ----------------------------------------- */

/* ferry_upgrade_plugin replaces the binary of the engine's running plugin
 * name ("tcp", a plugin block's name) with no restart of the engine: the
 * binary at path starts beside the old one, gets the engine's
 * registrations and open peers, and takes all new work; the old one then
 * drains what it holds and is stopped. No task fails because of it: what
 * the old one still holds after drain_ms fails over to the new one.
 *
 * path: the new binary; a relative path is taken from the configuration
 * file's directory (from the current directory for an engine made from
 * text); NULL or "" looks the plugin up in the plugin directory again (a
 * binary replaced in place). sha256: the binary's expected sha256 (64 hex
 * digits, as `sha256sum` prints), checked before it starts; NULL or "":
 * not checked.
 * drain_ms: how long the old binary may take to finish what it holds;
 * 0: the engine's default (30 s).
 *
 * BLOCKING: it returns once the new binary serves and the old one has
 * drained and stopped, so up to drain_ms (past the new binary's start)
 * when the old one is busy. Other calls on the engine, transfers
 * included, go on meanwhile, from other threads; ferry_destroy_engine
 * must not run while it does.
 *
 * Errors: FERRY_ERR_INVALID for a NULL or empty name, a plugin the engine
 * does not have, a sha256 that is not 64 hex digits or a drain_ms too
 * large to be a duration; FERRY_ERR_PLUGIN_FAILED when the new binary
 * does not start (missing, not executable, a wrong sha256, a crash or a
 * refusal at start, a protocol this engine does not speak): then the old
 * binary keeps serving, untouched, and the message says why;
 * FERRY_ERR_BUSY while another upgrade of the plugin runs;
 * FERRY_ERR_UNAVAILABLE when the plugin is not running (restarting,
 * failed); FERRY_ERR_CLOSED after ferry_destroy_engine. */
int ferry_upgrade_plugin(ferry_engine_t e, const char *name, const char *path,
                         const char *sha256, uint64_t drain_ms);

/* ---- notifications ---------------------------------------------------- */

/* ferry_send_notif sends a notification to the engine of segment seg and
 * returns once it is delivered (retried on a lost connection; delivered
 * exactly once). name: NUL-terminated, 1 to 255 bytes; msg: msg_len bytes,
 * at most 64 KiB, may be NULL when msg_len is 0. */
int ferry_send_notif(ferry_engine_t e, ferry_segment_t seg, const char *name,
                     const void *msg, size_t msg_len);

/* One received notification. */
typedef struct ferry_notif {
    char *from;      /* sending engine's name, NUL-terminated */
    char *name;      /* NUL-terminated */
    uint8_t *msg;    /* msg_len bytes (NUL-terminated past them, too) */
    size_t msg_len;
} ferry_notif_t;

/* Received notifications; the caller's, freed with ferry_free_notifs. */
typedef struct ferry_notif_list {
    size_t count;
    ferry_notif_t *notifs;
} ferry_notif_list_t;

/* ferry_recv_notifs takes up to max (> 0) received notifications, oldest
 * first. It waits up to timeout_ns for the first (timeout_ns <= 0: does not
 * wait), then takes what else is there without waiting. With none it
 * returns FERRY_ERR_AGAIN and sets *out to NULL; else *out is the list. */
int ferry_recv_notifs(ferry_engine_t e, size_t max, int64_t timeout_ns,
                      ferry_notif_list_t **out);

/* ferry_free_notifs frees a list from ferry_recv_notifs; NULL is
 * ignored. */
void ferry_free_notifs(ferry_notif_list_t *list);

/* ---- prepared block lists -------------------------------------------- */

/* A block layout: block i is block i%blocks of layer i/blocks. */
typedef struct ferry_block_layout {
    uint64_t block_size;   /* bytes, > 0; both layouts need the same */
    uint64_t blocks;       /* blocks per layer, > 0 */
    uint64_t stride;       /* between blocks of a layer; 0: block_size */
    uint64_t layers;       /* 0: 1 */
    uint64_t layer_stride; /* between layers' block 0; 0: blocks*stride */
} ferry_block_layout_t;

/* What a block submission applies to each task. */
typedef struct ferry_block_request {
    int32_t opcode;            /* ferry_opcode */
    int32_t priority;          /* ferry_priority */
    int64_t deadline_ns;       /* as ferry_request_t */
    const char *transport_hint; /* as ferry_request_t */
    const char *policy_name;
    const char *intent;
    int32_t no_merge;          /* 1: one task per pair, even where blocks
                                  follow on both sides */
    int32_t reserved;
} ferry_block_request_t;

/* ferry_prepare_blocks checks once that local blocks laid out as *local
 * from local_base (inside local_len bytes of registered memory) and remote
 * blocks laid out as *remote from remote_base of segment seg lie inside
 * registered buffers on both sides. The local memory is borrowed until
 * ferry_free_blocks. */
int ferry_prepare_blocks(ferry_engine_t e, ferry_segment_t seg,
                         void *local_base, size_t local_len,
                         const ferry_block_layout_t *local,
                         uint64_t remote_base,
                         const ferry_block_layout_t *remote,
                         ferry_blocks_t *out);

/* ferry_free_blocks releases a prepared list. */
int ferry_free_blocks(ferry_engine_t e, ferry_blocks_t l);

/* ferry_submit_blocks submits n (> 0) block pairs (local_idx[k] ->
 * remote_idx[k]) to batch b; adjacent pairs are merged into one task
 * unless no_merge. *first_task and *task_count (each may be NULL) name the
 * tasks it added. */
int ferry_submit_blocks(ferry_engine_t e, ferry_batch_t b, ferry_blocks_t l,
                        const ferry_block_request_t *req,
                        const uint32_t *local_idx, const uint32_t *remote_idx,
                        size_t n, size_t *first_task, size_t *task_count);

/* ferry_submit_block_range submits the n (> 0) pairs (local_first+k,
 * remote_first+k), as ferry_submit_blocks does. */
int ferry_submit_block_range(ferry_engine_t e, ferry_batch_t b,
                             ferry_blocks_t l,
                             const ferry_block_request_t *req,
                             uint32_t local_first, uint32_t remote_first,
                             size_t n, size_t *first_task,
                             size_t *task_count);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_H */
