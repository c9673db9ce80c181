"""Ferry from Python: a transfer engine's segments, memory, synchronous and
asynchronous transfers, notifications and prepared block lists, over the C
ABI of libferry.so (cffi, ABI mode).

    import ferry
    with ferry.Engine(config_text=HCL) as e:
        mem = e.allocate(1 << 20)
        e.register(mem, ferry.Perm.REMOTE_READ_WRITE)
        seg = e.open_segment("decode-0")
        e.write(mem.view[:4096], seg, seg.buffers[0].base)

docs/python.md describes the package; include/ferry.h the ABI beneath it.
"""

#: The package's version (the wheel's; pyproject.toml reads it here).
__version__ = "0.1.0"

from . import errors  # noqa: E402
from ._ffi import candidates as library_candidates  # noqa: E402
from .batch import Batch, BlockList
from .engine import Engine, Segment, new_cluster_secret
from .errors import (
    Busy,
    Canceled,
    Closed,
    ConfigError,
    DeadlineExceeded,
    FerryError,
    Internal,
    InvalidRequest,
    LibraryNotFound,
    NotRegistered,
    OutOfBounds,
    PermissionDenied,
    PluginFailed,
    SegmentNotFound,
    Unavailable,
    Unimplemented,
)
from .device import DeviceHandle, DeviceMemory, DeviceSpan
from .memory import Memory, Registration
from .values import BatchStatus, BlockLayout, BufferInfo, Notification, Op, Perm, Priority, Request, State, TaskStatus

__all__ = [
    "Engine", "Segment", "new_cluster_secret", "Memory", "Registration", "Batch", "BlockList", "DeviceMemory", "DeviceSpan", "DeviceHandle",
    "Op", "Perm", "Priority", "State", "Request", "TaskStatus", "BatchStatus", "BufferInfo",
    "Notification", "BlockLayout", "version", "library_path", "library_candidates", "errors",
    "FerryError", "InvalidRequest", "NotRegistered", "OutOfBounds", "PermissionDenied", "SegmentNotFound",
    "Unavailable", "PluginFailed", "DeadlineExceeded", "Canceled", "Closed", "Busy", "ConfigError",
    "LibraryNotFound", "Unimplemented", "Internal",
]


def version() -> str:
    """The loaded library's version text (module version and revision)."""
    from ._ffi import ffi, lib

    return ffi.string(lib().ferry_version()).decode()


def library_path() -> str:
    """Where libferry.so was loaded from (loading it if needed)."""
    from . import _ffi

    _ffi.lib()
    return _ffi.path()
