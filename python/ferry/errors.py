"""The error taxonomy of Ferry, as Python exceptions.

Every call of the C ABI returns a code and leaves a message on the calling
thread (ferry_last_error); the package raises the exception class of the
code, carrying that message. Catch :class:`FerryError` for any of them, or a
subclass for one kind. The classes that have a Python counterpart also
derive from it (:class:`InvalidRequest` is a :class:`ValueError`,
:class:`DeadlineExceeded` a :class:`TimeoutError`), so generic handlers
keep working.
"""

from __future__ import annotations

from typing import Dict, Optional, Type

__all__ = [
    "FerryError",
    "InvalidRequest",
    "NotRegistered",
    "OutOfBounds",
    "PermissionDenied",
    "SegmentNotFound",
    "Unavailable",
    "PluginFailed",
    "DeadlineExceeded",
    "Canceled",
    "Closed",
    "Busy",
    "ConfigError",
    "LibraryNotFound",
    "Unimplemented",
    "Internal",
]


class FerryError(Exception):
    """A Ferry call failed.

    ``code`` is the ABI's error code (0 when the error was raised by the
    Python layer before any call), ``message`` what failed and what to do.
    """

    #: The ABI's enum name of this class's code, e.g. "FERRY_ERR_INVALID".
    abi_name = ""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    def __str__(self) -> str:
        return self.message


class InvalidRequest(FerryError, ValueError):
    """The call's arguments are wrong: a NULL or empty buffer, an unknown
    handle, a non-contiguous or read-only buffer where one is written."""

    abi_name = "FERRY_ERR_INVALID"


class NotRegistered(FerryError):
    """The local range is not inside memory registered with this engine."""

    abi_name = "FERRY_ERR_NOT_REGISTERED"


class OutOfBounds(FerryError):
    """The remote range is not inside one of the segment's buffers."""

    abi_name = "FERRY_ERR_OUT_OF_BOUNDS"


class PermissionDenied(FerryError, PermissionError):
    """The remote buffer does not allow the operation (read or write)."""

    abi_name = "FERRY_ERR_PERMISSION"


class SegmentNotFound(FerryError, LookupError):
    """No segment of that name (or the peer restarted: open it again)."""

    abi_name = "FERRY_ERR_SEGMENT_NOT_FOUND"


class Unavailable(FerryError, ConnectionError):
    """No transport can reach the peer, or the peer is unreachable."""

    abi_name = "FERRY_ERR_UNAVAILABLE"


class PluginFailed(FerryError):
    """The transport plugin that carried the transfer failed."""

    abi_name = "FERRY_ERR_PLUGIN_FAILED"


class DeadlineExceeded(FerryError, TimeoutError):
    """The transfer or the wait did not finish before its deadline."""

    abi_name = "FERRY_ERR_DEADLINE_EXCEEDED"


class Canceled(FerryError):
    """The task was canceled."""

    abi_name = "FERRY_ERR_CANCELED"


class Closed(FerryError):
    """The engine (or the object) was closed; nothing was done."""

    abi_name = "FERRY_ERR_CLOSED"


class Busy(FerryError):
    """The resource is in use: a batch with tasks still pending, memory
    with views still alive, a queue that is full. Retry later."""

    abi_name = "FERRY_ERR_BUSY"


class ConfigError(FerryError, ValueError):
    """The engine's configuration is wrong; the message names file:line
    and the setting."""

    abi_name = "FERRY_ERR_CONFIG"


class LibraryNotFound(FerryError, OSError):
    """libferry.so was not found or could not be loaded; the message lists
    where the package looked ($FERRY_LIB, beside the package, bin/ of the
    repository)."""


class Unimplemented(FerryError, NotImplementedError):
    """The library does not implement this call yet."""

    abi_name = "FERRY_ERR_UNIMPLEMENTED"


class Internal(FerryError):
    """A bug in Ferry (a recovered panic); the message says where."""

    abi_name = "FERRY_ERR_INTERNAL"


_CLASSES = [
    InvalidRequest,
    NotRegistered,
    OutOfBounds,
    PermissionDenied,
    SegmentNotFound,
    Unavailable,
    PluginFailed,
    DeadlineExceeded,
    Canceled,
    Closed,
    Busy,
    ConfigError,
    Unimplemented,
    Internal,
]


def by_abi_name() -> Dict[str, Type[FerryError]]:
    """The exception class of each ABI enum name."""
    return {c.abi_name: c for c in _CLASSES}


def error_for(code: int, message: str, classes: Dict[int, Type[FerryError]]) -> FerryError:
    """The exception for an ABI code; an unknown code is a FerryError that
    says so (a library newer than this package)."""
    if code == 0:
        return Internal(f"{message} (a failure with code 0: a bug in the ferry package)")
    cls: Optional[Type[FerryError]] = classes.get(code)
    if cls is None:
        return FerryError(f"{message} (error code {code}, unknown to this version of the ferry package)", code)
    return cls(message, code)
