// libferry-mooncake.so: Mooncake's classic C API (include/mooncake/
// transfer_engine_c.h) as a client of Ferry's own C API (include/ferry.h,
// libferry.so). `make build` compiles it with the system cc against
// bin/libferry.so, which it finds beside itself (rpath $ORIGIN).
//
// It owns the translation only: Mooncake's connection string and names
// into an engine configuration, its requests, statuses and codes into
// and out of ferry_*, and its notification arrays. Every transfer,
// registration and segment operation is one ferry_* call; the semantics
// live in the engine behind libferry.so, once. It is a separate library,
// and not symbols of libferry.so, because Mooncake's names (openSegment,
// submitTransfer) are generic: exported from libferry.so they would take
// the place of a real Mooncake's in any process that loads both.
//
// The engine handle is the ferry_engine_t itself, cast to a pointer (never
// NULL; never reused), so that a NULL, unknown or destroyed engine is an
// error code here, not a crash. The little state Mooncake's API needs
// beyond ferry_* (which transports an engine runs, its own segment for
// LOCAL_SEGMENT) is a record per engine, read off the hot path only.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ferry.h"
#include "transfer_engine_c.h"

#define EXPORT __attribute__((visibility("default")))

_Static_assert(sizeof(void *) == sizeof(ferry_engine_t), "the engine handle travels as a pointer: a 64-bit platform is needed");

// ---- messages -------------------------------------------------------------

static __thread char mc_msg[1024];

EXPORT const char *ferry_mooncake_last_error(void) { return mc_msg; }

// quiet reports whether $FERRY_LOG_LEVEL keeps warnings off stderr.
static int quiet(void) {
    const char *l = getenv("FERRY_LOG_LEVEL");
    return l != NULL && (strcmp(l, "error") == 0 || strcmp(l, "off") == 0);
}

// setmsg sets the thread's message without logging it: for a reason a
// caller adds to and logs, or one a caller may read many times.
__attribute__((format(printf, 1, 2))) static void setmsg(const char *format, ...) {
    va_list ap;
    va_start(ap, format);
    vsnprintf(mc_msg, sizeof mc_msg, format, ap);
    va_end(ap);
}

// failf sets the thread's message, logs it as libferry logs a warning,
// and returns code.
__attribute__((format(printf, 2, 3))) static int failf(int code, const char *format, ...) {
    va_list ap;
    va_start(ap, format);
    vsnprintf(mc_msg, sizeof mc_msg, format, ap);
    va_end(ap);
    if (!quiet()) {
        fprintf(stderr, "[WARN]  ferry-mooncake: %s\n", mc_msg);
    }
    return code;
}

// mc_err is Mooncake's negative error number for a ferry_error.
static int mc_err(int rc) {
    switch (rc) {
    case FERRY_OK:
        return 0;
    case FERRY_ERR_NOT_REGISTERED:
        return FERRY_MC_ERR_ADDRESS_NOT_REGISTERED;
    case FERRY_ERR_SEGMENT_NOT_FOUND:
        return FERRY_MC_ERR_METADATA;
    case FERRY_ERR_UNAVAILABLE:
        return FERRY_MC_ERR_ENDPOINT;
    case FERRY_ERR_DEADLINE_EXCEEDED:
        return FERRY_MC_ERR_SOCKET;
    case FERRY_ERR_BUSY:
        return FERRY_MC_ERR_TOO_MANY_REQUESTS;
    case FERRY_ERR_PLUGIN_FAILED:
    case FERRY_ERR_CANCELED:
    case FERRY_ERR_INTERNAL:
        return FERRY_MC_ERR_CONTEXT;
    case FERRY_ERR_UNIMPLEMENTED:
        return FERRY_MC_ERR_NOT_IMPLEMENTED;
    }
    return FERRY_MC_ERR_INVALID_ARGUMENT; // INVALID, OUT_OF_BOUNDS, PERMISSION, CLOSED, CONFIG, ...
}

// mc_status is Mooncake's positive Status code for a ferry_error.
static int mc_status(int rc) {
    int e = mc_err(rc);
    return e == FERRY_MC_ERR_NOT_IMPLEMENTED ? FERRY_MC_STATUS_NOT_IMPLEMENTED : -e;
}

// ferry_fail sets the message from libferry's for a failed ferry_* call
// and returns Mooncake's error number for it.
static int ferry_fail(int rc, const char *what) {
    failf(0, "%s: %s (%s)", what, ferry_last_error(), ferry_error_name(rc));
    return mc_err(rc);
}

static ferry_engine_t handle(transfer_engine_t engine) { return (ferry_engine_t)(uintptr_t)engine; }

// ---- engine records -------------------------------------------------------

// record is what this library knows of an engine beyond its handle.
struct record {
    ferry_engine_t h;
    char plugins[256];   // the transports it runs, comma-separated
    ferry_segment_t self; // its own segment once opened (LOCAL_SEGMENT), 0 before
    struct record *next;
};

static pthread_mutex_t records_mu = PTHREAD_MUTEX_INITIALIZER;
static struct record *records;

// has_plugin reports whether engine h runs the transport proto.
static int has_plugin(ferry_engine_t h, const char *proto) {
    int found = 0;
    size_t n = strlen(proto);
    pthread_mutex_lock(&records_mu);
    for (struct record *r = records; r != NULL && !found; r = r->next) {
        if (r->h != h) {
            continue;
        }
        for (const char *p = r->plugins; *p != 0;) {
            size_t k = strcspn(p, ",");
            found = found || (k == n && strncmp(p, proto, n) == 0);
            p += k + (p[k] == ',');
        }
    }
    pthread_mutex_unlock(&records_mu);
    return found;
}

// local_segment returns the engine's own segment (Mooncake's
// LOCAL_SEGMENT), opening it by the engine's name the first time;
// FERRY_OK or the failure's code, with the message set.
static int local_segment(ferry_engine_t h, ferry_segment_t *out) {
    ferry_segment_t seg = 0;
    pthread_mutex_lock(&records_mu);
    for (struct record *r = records; r != NULL; r = r->next) {
        if (r->h == h) {
            seg = r->self;
        }
    }
    pthread_mutex_unlock(&records_mu);
    if (seg != 0) {
        *out = seg;
        return FERRY_OK;
    }
    char name[512];
    int rc = ferry_segment_name(h, name, sizeof name, NULL);
    if (rc == FERRY_OK) {
        rc = ferry_open_segment(h, name, &seg);
    }
    if (rc != FERRY_OK) {
        setmsg("LOCAL_SEGMENT: opening the engine's own segment: %s (%s)", ferry_last_error(), ferry_error_name(rc));
        return rc;
    }
    pthread_mutex_lock(&records_mu);
    for (struct record *r = records; r != NULL; r = r->next) {
        if (r->h == h) {
            r->self = seg; // a second opener got the same id: opens of one name share it
        }
    }
    pthread_mutex_unlock(&records_mu);
    *out = seg;
    return FERRY_OK;
}

// target converts a Mooncake segment id: LOCAL_SEGMENT is the engine's
// own segment.
static int target(ferry_engine_t h, segment_id_t id, ferry_segment_t *out) {
    if (id < 0) {
        setmsg("target_id %d is not a segment id; pass what openSegment returned, or LOCAL_SEGMENT", (int)id);
        return FERRY_ERR_INVALID;
    }
    if (id == LOCAL_SEGMENT) {
        return local_segment(h, out);
    }
    *out = (ferry_segment_t)id;
    return FERRY_OK;
}

// ---- createTransferEngine -------------------------------------------------

// text is a growing configuration text; a write past its room marks it
// overflowed rather than truncating silently.
struct text {
    char buf[8192];
    size_t n;
    int overflow;
};

__attribute__((format(printf, 2, 3))) static void put(struct text *t, const char *format, ...) {
    va_list ap;
    va_start(ap, format);
    int k = vsnprintf(t->buf + t->n, sizeof t->buf - t->n, format, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof t->buf - t->n) {
        t->overflow = 1;
        return;
    }
    t->n += (size_t)k;
}

// put_quoted writes s as an HCL string literal: quotes, backslashes and
// template sequences escaped, so that a name cannot change the
// configuration it is put in. Control characters are refused (0).
static int put_quoted(struct text *t, const char *s) {
    put(t, "\"");
    for (; *s != 0; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c == 0x7f) {
            return 0;
        }
        if (c == '"' || c == '\\') {
            put(t, "\\%c", c);
        } else if ((c == '$' || c == '%') && s[1] == '{') {
            put(t, "%c%c", c, c);
        } else {
            put(t, "%c", c);
        }
    }
    put(t, "\"");
    return 1;
}

// split_host copies the host of "host", "host:port", "[v6]" or
// "[v6]:port" into host (an IPv6 address in brackets, as a listen
// address needs it; a bare one gets them). 0 when it does not fit.
static int split_host(const char *name, char *host, size_t cap) {
    size_t n = strlen(name);
    const char *colon = strchr(name, ':');
    if (name[0] == '[') {
        const char *end = strchr(name, ']');
        n = end != NULL ? (size_t)(end - name) + 1 : n;
    } else if (colon != NULL && strchr(colon + 1, ':') == NULL) {
        n = (size_t)(colon - name);
    } else if (colon != NULL) { // a bare IPv6 address
        if (n + 3 > cap) {
            return 0;
        }
        snprintf(host, cap, "[%s]", name);
        return 1;
    }
    if (n == 0 || n + 1 > cap) {
        return 0;
    }
    memcpy(host, name, n);
    host[n] = 0;
    return 1;
}

// free_port returns a port free on host now (bound and released, as
// Mooncake's P2P handshake picks its own), 0 with the message set when
// none can be bound there.
static int free_port(const char *host) {
    char h[256];
    size_t n = strlen(host);
    if (host[0] == '[' && n >= 2 && n - 2 < sizeof h) { // [v6] -> v6
        memcpy(h, host + 1, n - 2);
        h[n - 2] = 0;
    } else {
        snprintf(h, sizeof h, "%s", host);
    }
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int e = getaddrinfo(h, "0", &hints, &ai);
    if (e != 0) {
        failf(0, "createTransferEngine: host %s of local_server_name does not resolve: %s; give this machine's IP address", host, gai_strerror(e));
        return 0;
    }
    int port = 0;
    for (struct addrinfo *a = ai; a != NULL && port == 0; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) {
            continue;
        }
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
            port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) : ntohs(((struct sockaddr_in *)&ss)->sin_port);
        }
        close(fd);
    }
    freeaddrinfo(ai);
    if (port == 0) {
        failf(0, "createTransferEngine: no port can be bound on %s (from local_server_name); give an address of this machine", host);
    }
    return port;
}

// plugin_dir writes where ferry's plugins are when $FERRY_PLUGIN_DIR does
// not say: beside this library, where `make build` puts them both. "" when
// they are not there (libferry then looks beside the executable).
static void plugin_dir(char *dir, size_t cap) {
    dir[0] = 0;
    const char *env = getenv("FERRY_PLUGIN_DIR");
    Dl_info info;
    if ((env != NULL && *env != 0) || dladdr((void *)plugin_dir, &info) == 0 || info.dli_fname == NULL) {
        return;
    }
    const char *slash = strrchr(info.dli_fname, '/');
    if (slash == NULL || (size_t)(slash - info.dli_fname) + sizeof "/ferry-plugin-tcp" > cap) {
        return;
    }
    size_t n = (size_t)(slash - info.dli_fname);
    memcpy(dir, info.dli_fname, n);
    strcpy(dir + n, "/ferry-plugin-tcp");
    if (access(dir, X_OK) != 0) {
        dir[0] = 0;
        return;
    }
    dir[n] = 0;
}

// put_metastore writes the metastore block for Mooncake's connection
// string; 0, with the message set, for one Ferry does not join.
static int put_metastore(struct text *t, const char *conn, int p2p) {
    put(t, "metastore {\n  ");
    if (p2p) {
        put(t, "kind = \"none\"\n}\n");
        return 1;
    }
    const char *rest = strstr(conn, "://");
    if (rest != NULL && (strncmp(conn, "http://", 7) == 0 || strncmp(conn, "https://", 8) == 0)) {
        put(t, "kind = \"http\"\n  url = ");
        put_quoted(t, conn);
        put(t, "\n}\n");
        return 1;
    }
    if (rest != NULL && strncmp(conn, "redis://", 8) == 0) {
        put(t, "kind = \"redis\"\n  address = ");
        put_quoted(t, conn + 8);
        put(t, "\n}\n");
        return 1;
    }
    if (rest != NULL && strncmp(conn, "etcd://", 7) != 0) {
        failf(0, "createTransferEngine: metadata_conn_string \"%s\": Ferry joins P2PHANDSHAKE, http://host:port/path, etcd://host:port[,host:port] (or host:port) and redis://host:port", conn);
        return 0;
    }
    // etcd, Mooncake's default: comma-separated host:port endpoints.
    const char *p = rest != NULL ? rest + 3 : conn;
    put(t, "kind = \"etcd\"\n  endpoints = [");
    int first = 1;
    while (*p != 0) {
        size_t k = strcspn(p, ",");
        if (k > 0 && k < 256) {
            char ep[256 + 8];
            snprintf(ep, sizeof ep, "http://%.*s", (int)k, p);
            put(t, "%s", first ? "" : ", ");
            put_quoted(t, ep);
            first = 0;
        }
        p += k + (p[k] == ',');
    }
    put(t, "]\n}\n");
    if (first) {
        failf(0, "createTransferEngine: metadata_conn_string \"%s\" names no etcd endpoint; give etcd://host:port", conn);
        return 0;
    }
    return 1;
}

// plugin_list writes the transports to start: $FERRY_MOONCAKE_PLUGINS
// (comma-separated), else tcp alone with Mooncake's MC_FORCE_TCP, else
// shm and tcp (Ferry picks per request). 0 for a name that is no
// plugin's.
static int plugin_list(char *out, size_t cap) {
    const char *env = getenv("FERRY_MOONCAKE_PLUGINS");
    const char *l = env != NULL && *env != 0 ? env : getenv("MC_FORCE_TCP") != NULL ? "tcp" : "shm,tcp";
    if (strlen(l) >= cap || strspn(l, "abcdefghijklmnopqrstuvwxyz0123456789_-,") != strlen(l)) {
        failf(0, "createTransferEngine: $FERRY_MOONCAKE_PLUGINS \"%s\" is not a comma-separated list of plugin names (\"shm,tcp\")", l);
        return 0;
    }
    strcpy(out, l);
    return 1;
}

// config writes the engine's configuration for Mooncake's arguments; 0
// with the message set when they cannot make one.
static int config(struct text *t, const char *conn, const char *name, const char *host, int port, const char *plugins) {
    int p2p = port != 0;
    char dir[4096];
    put(t, "name = ");
    if (!put_quoted(t, name)) {
        failf(0, "createTransferEngine: local_server_name holds a control character; give host or host:port");
        return 0;
    }
    put(t, "\n");
    plugin_dir(dir, sizeof dir);
    if (dir[0] != 0) {
        put(t, "plugin_dir = ");
        put_quoted(t, dir);
        put(t, "\n");
    }
    const char *secret = getenv("FERRY_CLUSTER_SECRET_FILE");
    if (secret != NULL && *secret != 0) {
        put(t, "cluster_secret_file = ");
        put_quoted(t, secret);
        put(t, "\n");
    }
    if (!put_metastore(t, conn, p2p)) {
        return 0;
    }
    char addr[300];
    snprintf(addr, sizeof addr, "%s:%d", host, port);
    put(t, "control {\n  listen = ");
    if (!put_quoted(t, addr)) {
        failf(0, "createTransferEngine: the host of local_server_name holds a control character");
        return 0;
    }
    put(t, "\n}\n");
    snprintf(addr, sizeof addr, "%s:0", host);
    for (const char *p = plugins; *p != 0;) {
        size_t k = strcspn(p, ",");
        if (k == 3 && strncmp(p, "tcp", 3) == 0) {
            put(t, "plugin \"tcp\" {\n  config {\n    listen = [");
            put_quoted(t, addr);
            put(t, "]\n  }\n}\n");
        } else if (k > 0) {
            put(t, "plugin \"%.*s\" {}\n", (int)k, p);
        }
        p += k + (p[k] == ',');
    }
    const char *extra = getenv("FERRY_MOONCAKE_EXTRA_CONFIG");
    if (extra != NULL) {
        put(t, "%s\n", extra);
    }
    if (t->overflow) {
        failf(0, "createTransferEngine: the configuration is over %zu bytes (names or $FERRY_MOONCAKE_EXTRA_CONFIG too long)", sizeof t->buf);
        return 0;
    }
    return 1;
}

EXPORT transfer_engine_t createTransferEngine(const char *metadata_conn_string, const char *local_server_name,
                                              const char *ip_or_host_name, uint64_t rpc_port, int auto_discover) {
    (void)ip_or_host_name;
    (void)rpc_port;
    (void)auto_discover;
    if (metadata_conn_string == NULL || local_server_name == NULL || *local_server_name == 0) {
        failf(0, "createTransferEngine: metadata_conn_string and local_server_name must not be NULL or empty");
        return NULL;
    }
    char host[256], plugins[256];
    const char *bind = getenv("MC_TCP_BIND_ADDRESS");
    int p2p = strcmp(metadata_conn_string, "P2PHANDSHAKE") == 0;
    if (!split_host(p2p || bind == NULL || *bind == 0 ? local_server_name : bind, host, sizeof host)) {
        failf(0, "createTransferEngine: no host in local_server_name \"%s\"; give host or host:port", local_server_name);
        return NULL;
    }
    if (!plugin_list(plugins, sizeof plugins)) {
        return NULL;
    }
    struct record *r = calloc(1, sizeof *r);
    if (r == NULL) {
        failf(0, "createTransferEngine: out of memory");
        return NULL;
    }
    snprintf(r->plugins, sizeof r->plugins, "%s", plugins);
    // In P2P mode the engine is named "host:port" of its control service,
    // as Mooncake names it: the name peers open it by, unique on the
    // machine. The port is picked free here and bound by the engine: a
    // race another process may win, so a bind that fails is tried again.
    int rc = FERRY_OK;
    for (int try = 0; try < 3; try++) {
        struct text t = {.n = 0};
        int port = 0;
        char name[300];
        if (p2p) {
            if ((port = free_port(host)) == 0) {
                free(r);
                return NULL;
            }
            snprintf(name, sizeof name, "%s:%d", host, port);
        }
        if (!config(&t, metadata_conn_string, p2p ? name : local_server_name, host, port, plugins)) {
            free(r);
            return NULL;
        }
        rc = ferry_create_engine_from_text(t.buf, &r->h);
        if (rc == FERRY_OK || !p2p || strstr(ferry_last_error(), "address already in use") == NULL) {
            break;
        }
    }
    if (rc != FERRY_OK) {
        ferry_fail(rc, "createTransferEngine");
        free(r);
        return NULL;
    }
    pthread_mutex_lock(&records_mu);
    r->next = records;
    records = r;
    pthread_mutex_unlock(&records_mu);
    return (transfer_engine_t)(uintptr_t)r->h;
}

EXPORT void destroyTransferEngine(transfer_engine_t engine) {
    ferry_engine_t h = handle(engine);
    int rc = ferry_destroy_engine(h);
    if (rc != FERRY_OK) {
        ferry_fail(rc, "destroyTransferEngine");
    }
    pthread_mutex_lock(&records_mu);
    for (struct record **p = &records; *p != NULL; p = &(*p)->next) {
        if ((*p)->h == h) {
            struct record *r = *p;
            *p = r->next;
            free(r);
            break;
        }
    }
    pthread_mutex_unlock(&records_mu);
}

EXPORT int discoverTopology(transfer_engine_t engine) {
    (void)engine;
    return 0;
}

EXPORT int getLocalIpAndPort(transfer_engine_t engine, char *buf_out, size_t buf_len) {
    char addr[300];
    if (buf_out == NULL && buf_len > 0) {
        return failf(FERRY_MC_ERR_INVALID_ARGUMENT, "getLocalIpAndPort: buf_out is NULL with buf_len %zu", buf_len);
    }
    int rc = ferry_rpc_addr(handle(engine), addr, sizeof addr, NULL);
    if (rc != FERRY_OK) {
        return ferry_fail(rc, "getLocalIpAndPort");
    }
    snprintf(buf_out, buf_len, "%s", addr);
    return 0;
}

EXPORT transport_t installTransport(transfer_engine_t engine, const char *proto, void **args) {
    (void)args;
    if (proto == NULL) {
        failf(0, "installTransport: proto is NULL");
        return NULL;
    }
    if (!has_plugin(handle(engine), proto)) {
        failf(0, "installTransport: the engine does not run \"%s\" (Ferry starts its transports with the engine: set $FERRY_MOONCAKE_PLUGINS, default \"shm,tcp\", before createTransferEngine)", proto);
        return NULL;
    }
    return (transport_t)engine;
}

EXPORT int uninstallTransport(transfer_engine_t engine, const char *proto) {
    (void)engine;
    return failf(FERRY_MC_ERR_NOT_IMPLEMENTED, "uninstallTransport \"%s\": not supported by Ferry (transports run for the engine's life)", proto != NULL ? proto : "(null)");
}

// ---- segments -------------------------------------------------------------

EXPORT segment_id_t openSegment(transfer_engine_t engine, const char *segment_name) {
    if (segment_name == NULL) {
        return failf(-1, "openSegment: segment_name is NULL");
    }
    while (*segment_name == '/') { // Mooncake trims leading slashes
        segment_name++;
    }
    if (*segment_name == 0) {
        return failf(-1, "openSegment: segment_name is empty; give the peer's name (its host:port in P2PHANDSHAKE mode)");
    }
    ferry_segment_t seg = 0;
    int rc = ferry_open_segment(handle(engine), segment_name, &seg);
    if (rc != FERRY_OK) {
        ferry_fail(rc, "openSegment");
        return -1;
    }
    if (seg > INT32_MAX) {
        return failf(-1, "openSegment \"%s\": segment id %u does not fit Mooncake's segment_id_t", segment_name, (unsigned)seg);
    }
    return (segment_id_t)seg;
}

EXPORT segment_id_t openSegmentNoCache(transfer_engine_t engine, const char *segment_name) {
    return openSegment(engine, segment_name);
}

EXPORT int closeSegment(transfer_engine_t engine, segment_id_t segment_id) {
    (void)engine;
    (void)segment_id;
    return 0;
}

EXPORT int warmupEfaSegment(transfer_engine_t engine, const char *segment_name) {
    (void)engine;
    (void)segment_name;
    return 0;
}

EXPORT int removeLocalSegment(transfer_engine_t engine, const char *segment_name) {
    (void)engine;
    return failf(FERRY_MC_ERR_NOT_IMPLEMENTED, "removeLocalSegment \"%s\": not supported by Ferry (the engine's segment is unpublished by destroyTransferEngine)", segment_name != NULL ? segment_name : "(null)");
}

EXPORT int syncSegmentCache(transfer_engine_t engine) {
    (void)engine;
    return 0;
}

// ---- memory ---------------------------------------------------------------

// device_kind returns the device kind of a Mooncake location ("cuda:0" ->
// "cuda:0", "hip:1" -> "rocm:1"), "" for host memory or one to find out
// ("cpu", "cpu:N", "*", NULL), NULL for one Ferry has no kind for.
static const char *device_kind(const char *loc, char *buf, size_t cap) {
    if (loc == NULL || *loc == 0 || strcmp(loc, "*") == 0 || strcmp(loc, "cpu") == 0 || strncmp(loc, "cpu:", 4) == 0) {
        return "";
    }
    static const char *const kinds[][2] = {{"cuda", "cuda"}, {"rocm", "rocm"}, {"hip", "rocm"}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        size_t n = strlen(kinds[i][0]);
        if (strncmp(loc, kinds[i][0], n) == 0 && (loc[n] == 0 || loc[n] == ':')) {
            snprintf(buf, cap, "%s%s", kinds[i][1], loc + n);
            return buf;
        }
    }
    return NULL;
}

EXPORT int registerLocalMemory(transfer_engine_t engine, void *addr, size_t length, const char *location,
                               int remote_accessible) {
    char kb[64];
    const char *kind = device_kind(location, kb, sizeof kb);
    if (kind == NULL) {
        return failf(FERRY_MC_ERR_INVALID_ARGUMENT, "registerLocalMemory: location \"%s\": Ferry registers \"cpu[:N]\", \"cuda[:N]\", \"rocm[:N]\" or \"*\"", location);
    }
    int perm = remote_accessible ? FERRY_PERM_REMOTE_READ_WRITE : FERRY_PERM_LOCAL;
    int rc = *kind == 0 ? ferry_register(handle(engine), addr, length, perm, NULL)
                        : ferry_register_device(handle(engine), addr, length, kind, perm, NULL, NULL);
    return rc == FERRY_OK ? 0 : ferry_fail(rc, "registerLocalMemory");
}

EXPORT int unregisterLocalMemory(transfer_engine_t engine, void *addr) {
    int rc = ferry_unregister(handle(engine), addr);
    return rc == FERRY_OK ? 0 : ferry_fail(rc, "unregisterLocalMemory");
}

EXPORT int registerLocalMemoryBatch(transfer_engine_t engine, buffer_entry_t *buffer_list, size_t buffer_len,
                                    const char *location) {
    char kb[64];
    const char *kind = device_kind(location, kb, sizeof kb);
    if (kind == NULL) {
        return failf(FERRY_MC_ERR_INVALID_ARGUMENT, "registerLocalMemoryBatch: location \"%s\": Ferry registers \"cpu[:N]\", \"cuda[:N]\", \"rocm[:N]\" or \"*\"", location);
    }
    if (buffer_len == 0) {
        return 0; // Mooncake registers nothing and succeeds
    }
    if (buffer_list == NULL) {
        return failf(FERRY_MC_ERR_INVALID_ARGUMENT, "registerLocalMemoryBatch: buffer_list is NULL with buffer_len %zu", buffer_len);
    }
    ferry_engine_t h = handle(engine);
    const int perm = FERRY_PERM_REMOTE_READ_WRITE;
    if (*kind != 0) {
        // Device memory: one registration each, undone on a refusal.
        for (size_t i = 0; i < buffer_len; i++) {
            int rc = ferry_register_device(h, buffer_list[i].addr, buffer_list[i].length, kind, perm, NULL, NULL);
            if (rc != FERRY_OK) {
                int code = ferry_fail(rc, "registerLocalMemoryBatch (nothing of the batch was registered)");
                while (i-- > 0) {
                    ferry_unregister(h, buffer_list[i].addr);
                }
                return code;
            }
        }
        return 0;
    }
    if (buffer_len > SIZE_MAX / sizeof(void *)) {
        return failf(FERRY_MC_ERR_INVALID_ARGUMENT, "registerLocalMemoryBatch: buffer_len %zu is too large", buffer_len);
    }
    void **ptrs = malloc(buffer_len * sizeof *ptrs);
    size_t *lens = malloc(buffer_len * sizeof *lens);
    int rc = FERRY_ERR_INVALID;
    if (ptrs != NULL && lens != NULL) {
        for (size_t i = 0; i < buffer_len; i++) {
            ptrs[i] = buffer_list[i].addr;
            lens[i] = buffer_list[i].length;
        }
        rc = ferry_register_batch(h, ptrs, lens, buffer_len, &perm, 1);
    }
    free(ptrs);
    free(lens);
    if (rc == FERRY_ERR_INVALID && (ptrs == NULL || lens == NULL)) {
        return failf(FERRY_MC_ERR_INVALID_ARGUMENT, "registerLocalMemoryBatch: %zu entries: out of memory", buffer_len);
    }
    return rc == FERRY_OK ? 0 : ferry_fail(rc, "registerLocalMemoryBatch");
}

EXPORT int unregisterLocalMemoryBatch(transfer_engine_t engine, void **addr_list, size_t addr_len) {
    if (addr_len == 0) {
        return 0;
    }
    int rc = ferry_unregister_batch(handle(engine), (void *const *)addr_list, addr_len);
    return rc == FERRY_OK ? 0 : ferry_fail(rc, "unregisterLocalMemoryBatch");
}

// ---- batches --------------------------------------------------------------

EXPORT batch_id_t allocateBatchID(transfer_engine_t engine, size_t batch_size) {
    ferry_batch_t b = 0;
    int rc = ferry_allocate_batch(handle(engine), batch_size, &b);
    if (rc != FERRY_OK) {
        ferry_fail(rc, "allocateBatchID");
        return INVALID_BATCH;
    }
    return (batch_id_t)b;
}

// submit is submitTransfer[WithNotify] (name NULL: without). Mooncake
// refuses a request it cannot route at submission; the engine makes such
// a request an INVALID task, so the new tasks are read back and one of
// them fails the call as Mooncake's would (it stays in the batch, failed).
static int submit(const char *what, transfer_engine_t engine, batch_id_t batch_id, struct transfer_request *entries,
                  size_t count, const char *name, const char *msg) {
    ferry_engine_t h = handle(engine);
    if (count == 0) {
        return FERRY_MC_STATUS_OK;
    }
    if (entries == NULL) {
        return failf(FERRY_MC_STATUS_INVALID_ARGUMENT, "%s: entries is NULL with count %zu", what, count);
    }
    if (count > SIZE_MAX / sizeof(ferry_request_t)) {
        return failf(FERRY_MC_STATUS_INVALID_ARGUMENT, "%s: count %zu is too large", what, count);
    }
    ferry_batch_status_t before;
    int rc = ferry_batch_status(h, batch_id, &before);
    if (rc != FERRY_OK) {
        ferry_fail(rc, what);
        return mc_status(rc);
    }
    ferry_request_t small[32];
    ferry_request_t *reqs = count <= 32 ? small : malloc(count * sizeof *reqs);
    if (reqs == NULL) {
        return failf(FERRY_MC_STATUS_INVALID_ARGUMENT, "%s: %zu requests: out of memory", what, count);
    }
    memset(reqs, 0, count * sizeof *reqs);
    for (size_t i = 0; i < count && rc == FERRY_OK; i++) {
        reqs[i].opcode = entries[i].opcode;
        reqs[i].priority = FERRY_PRIORITY_MEDIUM;
        reqs[i].source = entries[i].source;
        reqs[i].target_offset = entries[i].target_offset;
        reqs[i].length = entries[i].length;
        if ((rc = target(h, entries[i].target_id, &reqs[i].target_id)) != FERRY_OK) {
            char m[sizeof mc_msg];
            snprintf(m, sizeof m, "%s", mc_msg);
            failf(0, "%s: request %zu: %s; nothing was submitted", what, i, m);
        }
    }
    if (rc == FERRY_OK) {
        rc = name == NULL ? ferry_submit(h, batch_id, reqs, count)
                          : ferry_submit_notif(h, batch_id, reqs, count, name, msg, msg != NULL ? strlen(msg) : 0);
        if (rc != FERRY_OK) {
            ferry_fail(rc, what);
        }
    }
    if (reqs != small) {
        free(reqs);
    }
    if (rc != FERRY_OK) {
        return mc_status(rc);
    }
    for (size_t i = 0; i < count; i++) {
        ferry_task_status_t st;
        if (ferry_task_status(h, batch_id, (size_t)before.tasks + i, &st) == FERRY_OK && st.state == FERRY_TASK_INVALID) {
            failf(0, "%s: request %zu (task %zu) was refused: %s", what, i, (size_t)before.tasks + i, ferry_last_error());
            return mc_status(st.error);
        }
    }
    return FERRY_MC_STATUS_OK;
}

EXPORT int submitTransfer(transfer_engine_t engine, batch_id_t batch_id, struct transfer_request *entries, size_t count) {
    return submit("submitTransfer", engine, batch_id, entries, count, NULL, NULL);
}

EXPORT int submitTransferWithNotify(transfer_engine_t engine, batch_id_t batch_id, struct transfer_request *entries,
                                    size_t count, notify_msg_t notify_msg) {
    if (notify_msg.name == NULL) {
        return failf(FERRY_MC_STATUS_INVALID_ARGUMENT, "submitTransferWithNotify: notify_msg.name is NULL; nothing was submitted");
    }
    return submit("submitTransferWithNotify", engine, batch_id, entries, count, notify_msg.name,
                  notify_msg.msg != NULL ? notify_msg.msg : "");
}

EXPORT int getTransferStatus(transfer_engine_t engine, batch_id_t batch_id, size_t task_id, struct transfer_status *status) {
    if (status == NULL) {
        return failf(FERRY_MC_STATUS_INVALID_ARGUMENT, "getTransferStatus: status is NULL");
    }
    ferry_task_status_t st;
    int rc = ferry_task_status(handle(engine), batch_id, task_id, &st);
    if (rc != FERRY_OK) {
        ferry_fail(rc, "getTransferStatus");
        return mc_status(rc);
    }
    status->transferred_bytes = st.transferred_bytes;
    switch (st.state) {
    case FERRY_TASK_PENDING:
        status->status = STATUS_WAITING;
        return FERRY_MC_STATUS_OK;
    case FERRY_TASK_COMPLETED:
        status->status = STATUS_COMPLETED;
        return FERRY_MC_STATUS_OK;
    case FERRY_TASK_CANCELED:
        status->status = STATUS_CANCELED;
        break;
    case FERRY_TASK_TIMEOUT:
        status->status = STATUS_TIMEOUT;
        break;
    default: // FAILED, and INVALID (a request the engine refused)
        status->status = STATUS_FAILED;
    }
    // The task's reason, for ferry_mooncake_last_error; not logged, since
    // a caller may poll a failed task many times.
    setmsg("getTransferStatus: task %zu: %s", task_id, ferry_last_error());
    return FERRY_MC_STATUS_OK;
}

EXPORT int freeBatchID(transfer_engine_t engine, batch_id_t batch_id) {
    ferry_batch_status_t s;
    int rc = ferry_batch_status(handle(engine), batch_id, &s);
    if (rc == FERRY_OK && s.pending > 0) {
        return failf(FERRY_MC_STATUS_BATCH_BUSY, "freeBatchID: %llu of the batch's %llu tasks are in progress; free it once they ended",
                     (unsigned long long)s.pending, (unsigned long long)s.tasks);
    }
    if (rc == FERRY_OK) {
        rc = ferry_free_batch(handle(engine), batch_id);
    }
    if (rc != FERRY_OK) {
        ferry_fail(rc, "freeBatchID");
        return mc_status(rc);
    }
    return FERRY_MC_STATUS_OK;
}

// ---- notifications --------------------------------------------------------

EXPORT notify_msg_t *getNotifsFromEngine(transfer_engine_t engine, int *size) {
    if (size == NULL) {
        failf(0, "getNotifsFromEngine: size is NULL");
        return NULL;
    }
    *size = 0;
    notify_msg_t *out = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        ferry_notif_list_t *l = NULL;
        int rc = ferry_recv_notifs(handle(engine), 256, 0, &l);
        if (rc == FERRY_ERR_AGAIN) {
            break;
        }
        if (rc != FERRY_OK) {
            ferry_fail(rc, "getNotifsFromEngine");
            break;
        }
        if (n + l->count > cap) {
            size_t c = (n + l->count) * 2;
            notify_msg_t *p = c <= (size_t)INT32_MAX ? realloc(out, c * sizeof *p) : NULL;
            if (p == NULL) {
                ferry_free_notifs(l);
                failf(0, "getNotifsFromEngine: out of memory; %zu notifications were dropped", l->count);
                break;
            }
            out = p;
            cap = c;
        }
        for (size_t i = 0; i < l->count; i++) {
            ferry_notif_t *f = &l->notifs[i];
            out[n].name = strdup(f->name);
            out[n].msg = malloc(f->msg_len + 1);
            if (out[n].msg != NULL) {
                memcpy(out[n].msg, f->msg, f->msg_len + 1);
            }
            n++;
        }
        size_t got = l->count;
        ferry_free_notifs(l);
        if (got < 256) {
            break;
        }
    }
    *size = (int)n;
    if (n == 0) {
        free(out);
        return NULL;
    }
    return out;
}

EXPORT int freeNotifsMsgBuf(notify_msg_t *msg, int size) {
    if (msg == NULL) {
        return 0;
    }
    for (int i = 0; i < size; i++) {
        free(msg[i].name);
        free(msg[i].msg);
    }
    free(msg);
    return 0;
}

EXPORT int genNotifyInEngine(transfer_engine_t engine, uint64_t target_id, notify_msg_t notify_msg) {
    ferry_engine_t h = handle(engine);
    if (notify_msg.name == NULL) {
        return failf(FERRY_MC_ERR_INVALID_ARGUMENT, "genNotifyInEngine: notify_msg.name is NULL");
    }
    if (target_id > INT32_MAX) {
        return failf(FERRY_MC_ERR_METADATA, "genNotifyInEngine: %llu is not a segment id; pass what openSegment returned", (unsigned long long)target_id);
    }
    ferry_segment_t seg = 0;
    int rc = target(h, (segment_id_t)target_id, &seg);
    if (rc != FERRY_OK) {
        char m[sizeof mc_msg];
        snprintf(m, sizeof m, "%s", mc_msg);
        return failf(mc_err(rc), "genNotifyInEngine: %s", m);
    }
    const char *msg = notify_msg.msg != NULL ? notify_msg.msg : "";
    rc = ferry_send_notif(h, seg, notify_msg.name, msg, strlen(msg));
    return rc == FERRY_OK ? 0 : ferry_fail(rc, "genNotifyInEngine");
}

// ---- what Ferry has no counterpart for ------------------------------------

EXPORT int getNicLoadStats(transfer_engine_t engine, nic_load_stat_t *stats, size_t *count) {
    if (engine == NULL || stats == NULL || count == NULL) {
        return failf(-1, "getNicLoadStats: engine, stats and count must not be NULL");
    }
    *count = 0;
    return 0;
}

EXPORT void enableGracefulShutdown(transfer_engine_t engine) { (void)engine; }

EXPORT int showLinks(transfer_engine_t engine, char *buf_out, size_t buf_len, int json) {
    if (engine == NULL || buf_out == NULL || buf_len == 0) {
        return failf(-1, "showLinks: engine and buf_out must not be NULL, buf_len not 0");
    }
    snprintf(buf_out, buf_len, "%s", json ? "{}" : "(no link table in Ferry: `ferry status` shows the engine's peers and rails)");
    return 0;
}
