"""The C ABI of libferry.so, declared for cffi (ABI mode), and where the
library is found.

CDEF mirrors include/ferry.h without its comments (read the header for
them); python/tests/test_abi.py checks that the two declare the same
functions, types and constants. The library is loaded once, on first use,
from the first of:

1. ``$FERRY_LIB``, a path to the library;
2. ``bin/libferry.so`` inside this package (the wheel's copy, with the
   plugins and the ``ferry`` command beside it: see :func:`bundled_dir`);
3. ``libferry.so`` beside this package (a copy installed by hand);
4. ``bin/libferry.so`` of the repository this package sits in.

The library's Go runtime reads the environment once, as the process
started: ``os.environ`` changes made later (FERRY_PLUGIN_DIR among them)
do not reach it. :class:`ferry.Engine` therefore names the plugin
directory in the configuration text itself (see :func:`plugin_dir`).
"""

from __future__ import annotations

import os
import threading
from typing import Any, Dict, List, Tuple, Type

import cffi

from . import errors

ABI_VERSION = 5  # the FERRY_ABI_VERSION this package was written against (2: ferry_transfer_sync, 3: device memory, 4: ferry_upgrade_plugin, 5: ferry_create_engine_with_secret)

CDEF = """
typedef enum ferry_error {
    FERRY_OK = 0,
    FERRY_ERR_INVALID = -1,
    FERRY_ERR_NOT_REGISTERED = -2,
    FERRY_ERR_OUT_OF_BOUNDS = -3,
    FERRY_ERR_PERMISSION = -4,
    FERRY_ERR_SEGMENT_NOT_FOUND = -5,
    FERRY_ERR_UNAVAILABLE = -6,
    FERRY_ERR_PLUGIN_FAILED = -7,
    FERRY_ERR_DEADLINE_EXCEEDED = -8,
    FERRY_ERR_CANCELED = -9,
    FERRY_ERR_CLOSED = -10,
    FERRY_ERR_BUSY = -11,
    FERRY_ERR_CONFIG = -12,
    FERRY_ERR_TOO_SMALL = -13,
    FERRY_ERR_AGAIN = -14,
    FERRY_ERR_UNIMPLEMENTED = -98,
    FERRY_ERR_INTERNAL = -99
} ferry_error;
const char *ferry_last_error(void);
const char *ferry_error_name(int code);
const char *ferry_version(void);
int ferry_abi_version(void);
typedef uint64_t ferry_engine_t;
typedef uint64_t ferry_batch_t;
typedef uint64_t ferry_blocks_t;
typedef uint32_t ferry_segment_t;
typedef enum ferry_perm {
    FERRY_PERM_LOCAL = 0,
    FERRY_PERM_REMOTE_READ = 1,
    FERRY_PERM_REMOTE_READ_WRITE = 2
} ferry_perm;
typedef enum ferry_opcode {
    FERRY_READ = 0,
    FERRY_WRITE = 1
} ferry_opcode;
typedef enum ferry_priority {
    FERRY_PRIORITY_HIGH = 0,
    FERRY_PRIORITY_MEDIUM = 1,
    FERRY_PRIORITY_LOW = 2
} ferry_priority;
typedef enum ferry_task_state {
    FERRY_TASK_PENDING = 0,
    FERRY_TASK_COMPLETED = 1,
    FERRY_TASK_FAILED = 2,
    FERRY_TASK_CANCELED = 3,
    FERRY_TASK_TIMEOUT = 4,
    FERRY_TASK_INVALID = 5
} ferry_task_state;
typedef struct ferry_request {
    int32_t opcode;
    int32_t priority;
    void *source;
    ferry_segment_t target_id;
    uint32_t reserved;
    uint64_t target_offset;
    uint64_t length;
    int64_t deadline_ns;
    const char *transport_hint;
    const char *policy_name;
    const char *intent;
} ferry_request_t;
typedef struct ferry_task_status {
    int32_t state;
    int32_t error;
    uint64_t transferred_bytes;
    int32_t attempts;
    int32_t reserved;
} ferry_task_status_t;
typedef struct ferry_batch_status {
    uint64_t tasks, pending, completed;
    uint64_t failed;
    uint64_t transferred_bytes;
} ferry_batch_status_t;
int ferry_create_engine_from_file(const char *path, ferry_engine_t *out);
int ferry_create_engine_from_text(const char *text, ferry_engine_t *out);
int ferry_create_engine_with_secret(const char *path, const char *text, const void *secret, size_t secret_len,
                                    ferry_engine_t *out);
int ferry_destroy_engine(ferry_engine_t e);
int ferry_segment_name(ferry_engine_t e, char *buf, size_t cap, size_t *len);
int ferry_rpc_addr(ferry_engine_t e, char *buf, size_t cap, size_t *len);
int ferry_metastore_url(ferry_engine_t e, char *buf, size_t cap, size_t *len);
int ferry_allocate(ferry_engine_t e, size_t size, void **out);
int ferry_free(ferry_engine_t e, void *ptr);
int ferry_register(ferry_engine_t e, void *ptr, size_t len, int perm,
                   uint64_t *remote_addr);
int ferry_unregister(ferry_engine_t e, void *ptr);
int ferry_register_batch(ferry_engine_t e, void *const *ptrs,
                         const size_t *lens, size_t n, const int *perms,
                         size_t nperms);
int ferry_unregister_batch(ferry_engine_t e, void *const *ptrs, size_t n);
typedef struct ferry_device_handle {
    char type[16];
    int32_t device;
    uint32_t data_len;
    uint8_t data[128];
    uint64_t size;
    uint64_t offset;
    uint64_t length;
} ferry_device_handle_t;
typedef struct ferry_device_memory {
    void *addr;
    uint64_t size;
    char kind[32];
    ferry_device_handle_t handle;
} ferry_device_memory_t;
int ferry_register_device(ferry_engine_t e, void *ptr, size_t len,
                          const char *kind, int perm,
                          const ferry_device_handle_t *handle,
                          uint64_t *out_base);
int ferry_unregister_device(ferry_engine_t e, void *ptr);
int ferry_allocate_device(ferry_engine_t e, const char *kind, size_t size,
                          ferry_device_memory_t *out);
int ferry_free_device(ferry_engine_t e, void *addr);
int ferry_open_segment(ferry_engine_t e, const char *name,
                       ferry_segment_t *out);
int ferry_close_segment(ferry_engine_t e, ferry_segment_t seg);
typedef struct ferry_buffer_info {
    uint64_t base;
    uint64_t length;
    int32_t perm;
    int32_t foreign;
} ferry_buffer_info_t;
typedef struct ferry_segment_info {
    ferry_segment_t id;
    uint32_t reserved;
    uint64_t incarnation;
    char *name;
    char *machine_id;
    size_t num_buffers;
    ferry_buffer_info_t *buffers;
    size_t num_transports;
    char **transports;
} ferry_segment_info_t;
int ferry_segment_info(ferry_engine_t e, ferry_segment_t seg,
                       ferry_segment_info_t **out);
void ferry_free_segment_info(ferry_segment_info_t *info);
int ferry_export_segment(ferry_engine_t e, void **blob, size_t *len);
int ferry_import_segment(ferry_engine_t e, const void *blob, size_t len,
                         const char *expect_name, ferry_segment_t *out);
void ferry_free_buffer(void *p);
int ferry_allocate_batch(ferry_engine_t e, size_t capacity,
                         ferry_batch_t *out);
int ferry_free_batch(ferry_engine_t e, ferry_batch_t b);
int ferry_submit(ferry_engine_t e, ferry_batch_t b,
                 const ferry_request_t *reqs, size_t n);
int ferry_submit_notif(ferry_engine_t e, ferry_batch_t b,
                       const ferry_request_t *reqs, size_t n,
                       const char *name, const void *msg, size_t msg_len);
int ferry_task_status(ferry_engine_t e, ferry_batch_t b, size_t task,
                      ferry_task_status_t *out);
int ferry_task_status_list(ferry_engine_t e, ferry_batch_t b, size_t first,
                           ferry_task_status_t *out, size_t cap,
                           size_t *filled);
int ferry_batch_status(ferry_engine_t e, ferry_batch_t b,
                       ferry_batch_status_t *out);
int ferry_cancel_task(ferry_engine_t e, ferry_batch_t b, size_t task);
int ferry_cancel_batch(ferry_engine_t e, ferry_batch_t b);
int ferry_wait(ferry_engine_t e, ferry_batch_t b, int64_t timeout_ns);
int ferry_transfer(ferry_engine_t e, const ferry_request_t *reqs, size_t n);
int ferry_transfer_sync(ferry_engine_t e, int opcode, ferry_segment_t seg,
                        void *local, uint64_t remote, size_t len,
                        int64_t timeout_ns, const char *transport_hint);
int ferry_upgrade_plugin(ferry_engine_t e, const char *name, const char *path,
                         const char *sha256, uint64_t drain_ms);
int ferry_send_notif(ferry_engine_t e, ferry_segment_t seg, const char *name,
                     const void *msg, size_t msg_len);
typedef struct ferry_notif {
    char *from;
    char *name;
    uint8_t *msg;
    size_t msg_len;
} ferry_notif_t;
typedef struct ferry_notif_list {
    size_t count;
    ferry_notif_t *notifs;
} ferry_notif_list_t;
int ferry_recv_notifs(ferry_engine_t e, size_t max, int64_t timeout_ns,
                      ferry_notif_list_t **out);
void ferry_free_notifs(ferry_notif_list_t *list);
typedef struct ferry_block_layout {
    uint64_t block_size;
    uint64_t blocks;
    uint64_t stride;
    uint64_t layers;
    uint64_t layer_stride;
} ferry_block_layout_t;
typedef struct ferry_block_request {
    int32_t opcode;
    int32_t priority;
    int64_t deadline_ns;
    const char *transport_hint;
    const char *policy_name;
    const char *intent;
    int32_t no_merge;
    int32_t reserved;
} ferry_block_request_t;
int ferry_prepare_blocks(ferry_engine_t e, ferry_segment_t seg,
                         void *local_base, size_t local_len,
                         const ferry_block_layout_t *local,
                         uint64_t remote_base,
                         const ferry_block_layout_t *remote,
                         ferry_blocks_t *out);
int ferry_free_blocks(ferry_engine_t e, ferry_blocks_t l);
int ferry_submit_blocks(ferry_engine_t e, ferry_batch_t b, ferry_blocks_t l,
                        const ferry_block_request_t *req,
                        const uint32_t *local_idx, const uint32_t *remote_idx,
                        size_t n, size_t *first_task, size_t *task_count);
int ferry_submit_block_range(ferry_engine_t e, ferry_batch_t b,
                             ferry_blocks_t l,
                             const ferry_block_request_t *req,
                             uint32_t local_first, uint32_t remote_first,
                             size_t n, size_t *first_task,
                             size_t *task_count);
"""

# ferry_request_t with its addresses as integers, the same layout (checked
# in test_abi.py): the package fills requests in this form, then passes a
# cast pointer, so that no field needs a cast per call.
CDEF_PY = """
typedef struct ferry_request_py {
    int32_t opcode;
    int32_t priority;
    uintptr_t source;
    ferry_segment_t target_id;
    uint32_t reserved;
    uint64_t target_offset;
    uint64_t length;
    int64_t deadline_ns;
    const char *transport_hint;
    const char *policy_name;
    const char *intent;
} ferry_request_py_t;
"""

# ferry_transfer_sync with local as an integer, the same ABI (a pointer and
# a uintptr_t pass alike): Engine.write and read call it through a cast
# of the library's function, so that an address needs no cast per call.
TRANSFER_SYNC_PY = "int(*)(uint64_t, int, uint32_t, uintptr_t, uint64_t, size_t, int64_t, const char *)"

ffi = cffi.FFI()
ffi.cdef(CDEF)
ffi.cdef(CDEF_PY)

_lock = threading.Lock()
_lib: Any = None
_path = ""
_classes: Dict[int, Type[errors.FerryError]] = {}


_HERE = os.path.dirname(os.path.abspath(__file__))


def bundled_dir() -> str:
    """The package's own ``bin`` directory, where a wheel puts
    libferry.so, the plugin executables and the ``ferry`` command; ""
    when the package has none (a checkout)."""
    d = os.path.join(_HERE, "bin")
    return d if os.path.isdir(d) else ""


def candidates() -> List[str]:
    """The paths the library is looked for at, in order."""
    here = _HERE
    out = []
    env = os.environ.get("FERRY_LIB")
    if env:
        out.append(env)
    out.append(os.path.join(here, "bin", "libferry.so"))
    out.append(os.path.join(here, "libferry.so"))
    out.append(os.path.join(os.path.dirname(os.path.dirname(here)), "bin", "libferry.so"))
    return out


def _open() -> Tuple[Any, str]:
    tried = []
    for p in candidates():
        if not os.path.exists(p):
            tried.append(f"{p} (absent)")
            continue
        try:
            return ffi.dlopen(p), p
        except OSError as e:
            tried.append(f"{p} ({e})")
            if p == os.environ.get("FERRY_LIB"):
                break
    raise errors.LibraryNotFound(
        "libferry.so not found or not loadable; tried: " + "; ".join(tried)
        + ". Build it with `make build` (bin/libferry.so) or set FERRY_LIB to its path"
    )


def lib() -> Any:
    """The loaded library (loading it on first use)."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            l, p = _open()
            have = l.ferry_abi_version()
            if have < ABI_VERSION:
                raise errors.LibraryNotFound(
                    f"{p} has ABI version {have}, this package needs {ABI_VERSION}: rebuild the library (make build)"
                )
            names = errors.by_abi_name()
            for name, cls in names.items():
                _classes[int(getattr(l, name))] = cls
            _path = p
            _lib = l
    return _lib


def transfer_sync_abi() -> Any:
    """The library's ferry_transfer_sync through cffi's ABI mode, typed to
    take local as an integer address (TRANSFER_SYNC_PY)."""
    return ffi.cast(TRANSFER_SYNC_PY, lib().ferry_transfer_sync)


_fast_lib: Any = None  # ferry._fast's lib once bound; False: not there


def fast() -> Any:
    """ferry._fast's lib (see _fast_build.py), bound to the loaded
    library's ferry_transfer_sync, or None when it is not built, is of
    another version, or $FERRY_PY_NO_FAST is set."""
    global _fast_lib
    if _fast_lib is None:
        lib()  # loaded first: it takes _lock too
        with _lock:
            if _fast_lib is None:
                _fast_lib = _load_fast()
    return _fast_lib or None


def _load_fast() -> Any:
    if os.environ.get("FERRY_PY_NO_FAST"):
        return False
    try:
        from . import _fast  # type: ignore[attr-defined]
    except ImportError:
        return False
    from ._fast_build import FAST_VERSION

    if _fast.lib.ferry_py_fast_version() != FAST_VERSION:
        return False
    _fast.lib.ferry_py_bind(int(ffi.cast("uintptr_t", lib().ferry_transfer_sync)))
    return _fast.lib


def transfer_sync() -> Any:
    """ferry_transfer_sync as Engine.write and read call it: through
    ferry._fast when it is built, else through ABI mode; both take local
    as an integer address."""
    f = fast()
    return f.ferry_py_transfer_sync if f is not None else transfer_sync_abi()


def plugin_dir() -> str:
    """Where an engine of this process finds the plugin executables when
    its configuration does not say: ``$FERRY_PLUGIN_DIR`` as os.environ has
    it now, else the library's directory when it holds ferry-plugin-*
    (bin/ of a built repository, or the wheel's bin/ inside the package),
    else "" (the library's own rule: the running executable's directory,
    which for Python is the interpreter's)."""
    d = os.environ.get("FERRY_PLUGIN_DIR", "")
    if d:
        return d
    lib()
    here = os.path.dirname(os.path.abspath(_path))
    try:
        if any(n.startswith("ferry-plugin-") for n in os.listdir(here)):
            return here
    except OSError:
        pass
    return ""


def path() -> str:
    """Where the library was loaded from ("" before it is)."""
    return _path


def last_error() -> str:
    """The calling thread's message of its last failed call."""
    return ffi.string(lib().ferry_last_error()).decode("utf-8", "replace")


def error(code: int, what: str = "") -> errors.FerryError:
    """The exception for a failed call's code, with the thread's message
    (read at once: the next call on this thread replaces it)."""
    msg = last_error()
    if not msg:
        msg = ffi.string(lib().ferry_error_name(code)).decode()
    if what:
        msg = f"{what}: {msg}"
    return errors.error_for(code, msg, _classes)


def check(code: int, what: str = "") -> None:
    """Raise the exception of code unless it is FERRY_OK."""
    if code != 0:
        raise error(code, what)
