/*
 * transfer_engine_c.h: Mooncake's classic C API (the one NIXL's Mooncake
 * backend calls), served by Ferry's libferry-mooncake.so.
 *
 * Written for Ferry: it declares the names, types, values and signatures
 * that Mooncake's mooncake-transfer-engine/include/transfer_engine_c.h
 * declares, so that a program written against Mooncake's header compiles
 * unmodified against this one (put include/mooncake on the include path)
 * and runs on Ferry when linked with -lferry-mooncake, or with
 * -ltransfer_engine through the bin/libtransfer_engine.so link `make
 * build` makes. docs/c-api.md ("Mooncake's C API") lists every function
 * with what it does on Ferry and where it differs.
 *
 * Return codes are Mooncake's: functions returning int return 0 or one of
 * Mooncake's negative error numbers (FERRY_MC_ERR_* below carry their
 * values), except submitTransfer, submitTransferWithNotify,
 * getTransferStatus and freeBatchID, which return Mooncake's positive
 * Status codes (FERRY_MC_STATUS_*). openSegment returns a segment id >= 0
 * or -1; createTransferEngine NULL; allocateBatchID INVALID_BATCH. Why a
 * call failed is in ferry_mooncake_last_error() (an addition of Ferry's),
 * and is logged to stderr unless $FERRY_LOG_LEVEL is error or off.
 *
 * As in Mooncake, strings passed in are read during the call only.
 */
#ifndef TRANSFER_ENGINE_C
#define TRANSFER_ENGINE_C

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Mooncake spells these types as macros; so does this header, so that
 * code that tests or redefines them sees what it expects. */
#define segment_handle_t int32_t
#define segment_id_t int32_t
#define batch_id_t uint64_t

/* The engine's own segment: a request may name it as its target_id
 * without opening it. */
#define LOCAL_SEGMENT (0)
/* What allocateBatchID returns when it fails. */
#define INVALID_BATCH UINT64_MAX

/* transfer_request.opcode */
#define OPCODE_READ (0)  /* target segment -> source (local memory) */
#define OPCODE_WRITE (1) /* source (local memory) -> target segment */

struct transfer_request {
    int opcode;             /* OPCODE_READ or OPCODE_WRITE */
    void *source;           /* local memory, inside a registered range */
    segment_id_t target_id; /* from openSegment, or LOCAL_SEGMENT */
    uint64_t target_offset; /* the target's address, as its owner
                               registered it */
    uint64_t length;        /* bytes */
};
typedef struct transfer_request transfer_request_t;

/* A notification: name and msg, NUL-terminated. */
struct notify_msg {
    char *name;
    char *msg;
};
typedef struct notify_msg notify_msg_t;

/* transfer_status.status */
#define STATUS_WAITING (0)   /* in progress */
#define STATUS_PENDING (1)   /* in progress (Ferry reports WAITING) */
#define STATUS_INVALID (2)
#define STATUS_CANCELED (3)
#define STATUS_COMPLETED (4)
#define STATUS_TIMEOUT (5)
#define STATUS_FAILED (6)

struct transfer_status {
    int status;                 /* STATUS_* */
    uint64_t transferred_bytes;
};

/* A segment's description (Mooncake's RDMA and NVMe-oF kinds). No
 * function of this API takes or returns it; it is declared because
 * Mooncake's header declares it. */
struct segment_desc {
    int type;
    union {
        struct {
            void *addr;
            uint64_t size;
            const char *location;
        } rdma;
        struct {
            const char *file_path;
            const char *subsystem_name;
            const char *proto;
            const char *ip;
            uint64_t port;
        } nvmeof;
    } desc_;
};

typedef struct transfer_status transfer_status_t;

/* One range for registerLocalMemoryBatch. */
struct buffer_entry {
    void *addr;
    size_t length;
};
typedef struct buffer_entry buffer_entry_t;

typedef struct segment_desc segment_desc_t;
typedef void *transfer_engine_t; /* an engine; NULL is none */
typedef void *transport_t;       /* non-NULL: the transport runs */

/* ---- engine ----------------------------------------------------------- */

/* createTransferEngine starts an engine. metadata_conn_string is
 * "P2PHANDSHAKE" (no metadata server: the engine is named "host:port",
 * host from local_server_name and a free port, and peers open it by that
 * name), "http://host:port/path" (an HTTP metadata server: Mooncake's or
 * Ferry's embedded metastore), "etcd://host:port[,host:port]" or
 * "host:port" (etcd), or "redis://host:port". Otherwise the engine is
 * named local_server_name. ip_or_host_name and rpc_port are not used (as
 * in Mooncake's P2P and default modes); auto_discover is not needed
 * (Ferry finds its transports). NULL on failure. */
transfer_engine_t createTransferEngine(const char *metadata_conn_string,
                                       const char *local_server_name,
                                       const char *ip_or_host_name,
                                       uint64_t rpc_port, int auto_discover);

/* discoverTopology returns 0: Ferry reads the machine's topology itself. */
int discoverTopology(transfer_engine_t engine);

/* getLocalIpAndPort writes the engine's "host:port" (its control address:
 * what a peer opens in P2PHANDSHAKE mode), truncated to buf_len bytes
 * with the NUL, as snprintf does. */
int getLocalIpAndPort(transfer_engine_t engine, char *buf_out, size_t buf_len);

/* installTransport returns non-NULL when the engine runs a transport of
 * that name (Ferry starts them with the engine: "tcp", "shm"), NULL
 * otherwise; args is not used. */
transport_t installTransport(transfer_engine_t engine, const char *proto,
                             void **args);

/* uninstallTransport is not supported: FERRY_MC_ERR_NOT_IMPLEMENTED. */
int uninstallTransport(transfer_engine_t engine, const char *proto);

/* openSegment opens the named segment (in P2PHANDSHAKE mode, a peer's
 * "host:port"), fetching its description, and returns its id (>= 0);
 * opening a name again returns the same id. -1 on failure. */
segment_id_t openSegment(transfer_engine_t engine, const char *segment_name);

/* openSegmentNoCache is openSegment: Ferry fetches the description on
 * every open. */
segment_id_t openSegmentNoCache(transfer_engine_t engine,
                                const char *segment_name);

/* closeSegment returns 0 and leaves the segment open, as Mooncake's: its
 * id stays valid until destroyTransferEngine. */
int closeSegment(transfer_engine_t engine, segment_id_t segment_id);

/* warmupEfaSegment returns 0 (no EFA). */
int warmupEfaSegment(transfer_engine_t engine, const char *segment_name);

/* removeLocalSegment is not supported: FERRY_MC_ERR_NOT_IMPLEMENTED. */
int removeLocalSegment(transfer_engine_t engine, const char *segment_name);

/* destroyTransferEngine stops the engine: transfers in flight end, its
 * registrations and segments go. Must not run while another thread is in
 * a call on the engine; calls after it fail (they do not crash). */
void destroyTransferEngine(transfer_engine_t engine);

/* ---- memory ----------------------------------------------------------- */

/* registerLocalMemory registers [addr, addr+length) for transfers and,
 * when remote_accessible, for peers' reads and writes. location: "cpu",
 * "cpu:N", "*" or NULL (host memory, or device memory the engine's
 * device plugins identify), "cuda:N" / "rocm:N" (device memory of that
 * kind; the engine needs a device block, set with
 * $FERRY_MOONCAKE_EXTRA_CONFIG). */
int registerLocalMemory(transfer_engine_t engine, void *addr, size_t length,
                        const char *location, int remote_accessible);

/* unregisterLocalMemory removes the registration that starts at addr. */
int unregisterLocalMemory(transfer_engine_t engine, void *addr);

/* registerLocalMemoryBatch registers buffer_len ranges, remote
 * accessible, all or nothing. */
int registerLocalMemoryBatch(transfer_engine_t engine,
                             buffer_entry_t *buffer_list, size_t buffer_len,
                             const char *location);

/* unregisterLocalMemoryBatch removes addr_len registrations, all or
 * nothing. */
int unregisterLocalMemoryBatch(transfer_engine_t engine, void **addr_list,
                               size_t addr_len);

/* ---- transfers -------------------------------------------------------- */

/* allocateBatchID returns a batch of up to batch_size (> 0) tasks, or
 * INVALID_BATCH. */
batch_id_t allocateBatchID(transfer_engine_t engine, size_t batch_size);

/* submitTransfer adds count requests to the batch as tasks, numbered on
 * from its earlier ones, and starts them. A Status code: 0, or
 * FERRY_MC_STATUS_INVALID_ARGUMENT (and the others below) when the call
 * or a request is refused. */
int submitTransfer(transfer_engine_t engine, batch_id_t batch_id,
                   struct transfer_request *entries, size_t count);

/* submitTransferWithNotify is submitTransfer that, once every task it
 * added completed, sends notify_msg to each target segment's engine
 * (name: 1 to 255 bytes; msg: at most 64 KiB). */
int submitTransferWithNotify(transfer_engine_t engine, batch_id_t batch_id,
                             struct transfer_request *entries, size_t count,
                             notify_msg_t notify_msg);

/* getNotifsFromEngine returns the notifications received since the last
 * call (oldest first) and sets *size to their count; NULL when there are
 * none. Free the array with freeNotifsMsgBuf. */
notify_msg_t *getNotifsFromEngine(transfer_engine_t engine, int *size);

/* freeNotifsMsgBuf frees what getNotifsFromEngine returned; returns 0. */
int freeNotifsMsgBuf(notify_msg_t *msg, int size);

/* genNotifyInEngine sends notify_msg to the engine of segment target_id
 * and returns once it is delivered. */
int genNotifyInEngine(transfer_engine_t engine, uint64_t target_id,
                      notify_msg_t notify_msg);

/* getTransferStatus reads task task_id of the batch into *status. A
 * Status code: FERRY_MC_STATUS_INVALID_ARGUMENT for a task id past the
 * batch's tasks. */
int getTransferStatus(transfer_engine_t engine, batch_id_t batch_id,
                      size_t task_id, struct transfer_status *status);

/* freeBatchID frees the batch, or returns FERRY_MC_STATUS_BATCH_BUSY and
 * keeps it while a task is in progress. */
int freeBatchID(transfer_engine_t engine, batch_id_t batch_id);

/* syncSegmentCache returns 0: open segments follow their peers. */
int syncSegmentCache(transfer_engine_t engine);

/* One NIC's load, for getNicLoadStats. */
struct nic_load_stat {
    char device_name[64];
    uint64_t inflight_bytes;
    double ewma_bandwidth_bps;
};
typedef struct nic_load_stat nic_load_stat_t;

/* getNicLoadStats sets *count to 0 (no NIC loads, as Mooncake's classic
 * engine reports); -1 for a NULL argument. */
int getNicLoadStats(transfer_engine_t engine, nic_load_stat_t *stats,
                    size_t *count);

/* enableGracefulShutdown does nothing: Ferry installs no signal handlers. */
void enableGracefulShutdown(transfer_engine_t engine);

/* showLinks writes "{}" (json != 0) or a line saying that Ferry has no
 * link table, as snprintf; -1 for a NULL engine or buffer. */
int showLinks(transfer_engine_t engine, char *buf_out, size_t buf_len,
              int json);

/* ---- Ferry's additions ------------------------------------------------ */

/* The calling thread's message for its last failed call of this API ("" if
 * none): what failed, where, and what to do. Valid until the thread's next
 * call of this API. */
const char *ferry_mooncake_last_error(void);

/* Mooncake's error numbers (its error.h), as the int functions return. */
#define FERRY_MC_ERR_INVALID_ARGUMENT (-1)
#define FERRY_MC_ERR_TOO_MANY_REQUESTS (-2)
#define FERRY_MC_ERR_ADDRESS_NOT_REGISTERED (-3)
#define FERRY_MC_ERR_BATCH_BUSY (-4)
#define FERRY_MC_ERR_SOCKET (-102)
#define FERRY_MC_ERR_METADATA (-200)
#define FERRY_MC_ERR_ENDPOINT (-201)
#define FERRY_MC_ERR_CONTEXT (-202)
#define FERRY_MC_ERR_NOT_IMPLEMENTED (-303)

/* Mooncake's Status codes, as submitTransfer, submitTransferWithNotify,
 * getTransferStatus and freeBatchID return. */
#define FERRY_MC_STATUS_OK (0)
#define FERRY_MC_STATUS_INVALID_ARGUMENT (1)
#define FERRY_MC_STATUS_TOO_MANY_REQUESTS (2)
#define FERRY_MC_STATUS_ADDRESS_NOT_REGISTERED (3)
#define FERRY_MC_STATUS_BATCH_BUSY (4)
#define FERRY_MC_STATUS_SOCKET (102)
#define FERRY_MC_STATUS_METADATA (200)
#define FERRY_MC_STATUS_ENDPOINT (201)
#define FERRY_MC_STATUS_CONTEXT (202)
#define FERRY_MC_STATUS_NOT_IMPLEMENTED (999)

#ifdef __cplusplus
}
#endif

#endif /* TRANSFER_ENGINE_C */
