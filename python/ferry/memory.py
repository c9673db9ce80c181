"""Memory: Ferry-allocated buffers (:class:`Memory`), registrations of any
buffer-protocol object or raw range (:class:`Registration`), and how a
Python object becomes an (address, length) the library takes.

The contract for memory registered while Python owns it:

* An object with the buffer protocol (bytearray, memoryview, numpy array,
  mmap) is referenced by its :class:`Registration`, and its buffer is held
  exported, until it is unregistered (and any write or read of it in
  flight on another thread has returned): it cannot be garbage collected,
  and a bytearray cannot be resized (BufferError) while registered.
  Dropping every other reference to it is safe.
* A raw ``(ptr, length)`` is the caller's: it must stay allocated and
  mapped until ``unregister`` returns. Memory unmapped while registered
  makes the transfers on it fail; memory freed but still mapped (free()
  that keeps the page) is read or written as registered. Unregister first.
* :class:`Memory` from :meth:`ferry.Engine.allocate` stays mapped until
  :meth:`Memory.free` or the engine's close. ``free`` refuses (Busy) while
  views of it (memoryviews, numpy arrays, torch tensors made from it) are
  alive, since they would point at unmapped memory; closing the engine
  unmaps it regardless, so drop the views first.
"""

from __future__ import annotations

import sys
from typing import Any, Tuple

from . import errors
from ._ffi import ffi
from .values import Perm

__all__ = ["Memory", "Registration"]


def contiguous(obj: Any, writable: bool, what: str) -> Tuple[Any, int, int]:
    """(cdata, address, length) of obj's buffer, held exported while the
    cdata lives; InvalidRequest for what cffi would refuse, said plainly."""
    try:
        mv = memoryview(obj)
    except TypeError:
        raise errors.InvalidRequest(
            f"{what}: a {type(obj).__name__} has no buffer protocol; pass a bytearray, memoryview, "
            "numpy array, ferry.Memory, or an integer address with a length"
        ) from None
    with mv:
        if not mv.c_contiguous:
            raise errors.InvalidRequest(
                f"{what}: the buffer is not C-contiguous (shape {mv.shape}, strides {mv.strides}); "
                "Ferry moves one contiguous range: pass a contiguous array (numpy.ascontiguousarray) "
                "or register its base"
            )
        if writable and mv.readonly:
            raise errors.InvalidRequest(
                f"{what}: the buffer is read-only ({type(obj).__name__}) but is written here; "
                "pass a writable buffer (bytearray, a writable array)"
            )
        n = mv.nbytes
    if n == 0:
        raise errors.InvalidRequest(f"{what}: the buffer is empty (0 bytes)")
    c = ffi.from_buffer(obj, require_writable=writable)
    return c, int(ffi.cast("uintptr_t", c)), n


class Memory:
    """Memory the engine allocated (:meth:`ferry.Engine.allocate`): mapped
    by the transport plugins too, so that shm and tcp move its bytes in
    place. Register it (or parts of it) before transfers.

    ``view`` is a writable memoryview of it; ``numpy()`` and ``torch()``
    wrap it without a copy. Free it with :meth:`free` (or ``with``)."""

    def __init__(self, engine: Any, ptr: Any, size: int) -> None:
        self._engine = engine
        self._ptr = ptr
        self.address = int(ffi.cast("uintptr_t", ptr))
        self.size = size
        self._buf: Any = ffi.buffer(ptr, size)
        self._base_refs = sys.getrefcount(self._buf)

    def __repr__(self) -> str:
        state = "freed" if self._buf is None else f"{self.size} bytes"
        return f"<ferry.Memory {state} at {self.address:#x}>"

    def __len__(self) -> int:
        return self.size

    @property
    def freed(self) -> bool:
        return self._buf is None

    def _live(self) -> Any:
        if self._buf is None:
            raise errors.Closed(f"memory at {self.address:#x}: it was freed (or its engine closed)")
        return self._buf

    @property
    def buffer(self) -> Any:
        """The memory as a writable buffer object (cffi's), for any API
        that takes the buffer protocol."""
        return self._live()

    @property
    def view(self) -> memoryview:
        """A writable memoryview of the whole memory."""
        return memoryview(self._live())

    def numpy(self, dtype: Any = "uint8", shape: Any = None) -> Any:
        """A numpy array over the memory, without a copy (writable)."""
        import numpy

        a = numpy.frombuffer(self._live(), dtype=dtype)
        return a if shape is None else a.reshape(shape)

    def torch(self, dtype: Any = None) -> Any:
        """A torch tensor over the memory, without a copy (1-D, uint8
        unless dtype says). Needs torch."""
        import torch  # an ImportError says plainly that torch is absent

        return torch.frombuffer(self._live(), dtype=dtype or torch.uint8)

    def views(self) -> int:
        """How many views (memoryviews, arrays, tensors) of the memory are
        alive; free refuses while any is."""
        if self._buf is None:
            return 0
        return sys.getrefcount(self._buf) - self._base_refs

    def free(self) -> None:
        """Unregister what is registered in the memory and release it.
        Busy while views of it are alive; Closed when already freed."""
        self._live()
        if self.views() > 0:
            raise errors.Busy(
                f"memory at {self.address:#x}: {self.views()} view(s) of it (memoryview, numpy array, "
                "torch tensor) are still alive; release them (del, memoryview.release()) before free"
            )
        self._engine._free_memory(self)

    def _drop(self) -> None:
        self._buf = None
        self._ptr = None

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._buf is not None:
            self.free()


class Registration:
    """A registered buffer. ``address`` is its start, also the address
    peers use for it (``segment.buffers[i].base``); ``obj`` is the object
    registered (None for a raw range), referenced until unregistered."""

    def __init__(self, engine: Any, address: int, length: int, perm: Perm, obj: Any, hold: Any, writable: bool) -> None:
        self._engine = engine
        self.address = address
        self.length = length
        self.perm = perm
        self.obj = obj
        self._hold = hold  # the exported buffer (cffi), or None
        self.writable = writable
        self.registered = True
        #: "cpu", or the device memory's kind ("cuda:0"; "device" when
        #: the device plugins found it)
        self.kind = "cpu"

    def __repr__(self) -> str:
        where = "" if self.kind == "cpu" else f" on {self.kind}"
        return f"<ferry.Registration {self.length} bytes at {self.address:#x}{where} {self.perm.name}>"

    def contains(self, address: int, length: int) -> bool:
        return self.address <= address and address + length <= self.address + self.length

    def unregister(self) -> None:
        """Remove the registration; the object is released."""
        self._engine.unregister(self)

    def _drop(self) -> None:
        # The export is released with its last reference, at once here
        # unless a write or read of the object is in flight on another
        # thread: that call holds it (the engine's lookup entry) until it
        # returns, so the object cannot be resized under the transfer.
        self.registered = False
        self.obj = None
        self._hold = None

    def __enter__(self) -> "Registration":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.registered:
            self.unregister()
