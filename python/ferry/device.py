"""Device (GPU) memory in Python: how a GPU buffer becomes an (address,
length, kind) the library takes, the values that name device memory
(:class:`DeviceSpan`, :class:`DeviceHandle`, :class:`DeviceMemory`), and
the simulated device's handle mapping for tests.

GPU buffers are recognised without importing their framework:

* an object with ``__cuda_array_interface__`` (CuPy, Numba, PyTorch CUDA
  tensors): the address is ``data[0]``, the length from ``shape``,
  ``strides`` and ``typestr``; it must be C-contiguous;
* an object with ``__dlpack_device__`` of device type 2 (CUDA) or 10
  (ROCm), whose ``__dlpack__()`` capsule is read (not consumed) for the
  address and length;
* a PyTorch tensor on a CUDA device (``is_cuda``), through its own
  methods (``data_ptr``, ``numel``, ``element_size``): torch is never
  imported here.

The engine never dereferences a device address: the device plugin of its
kind imports the range, and requests on it are staged through host memory
where no transport moves device memory directly.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct
from typing import Any, NamedTuple, Optional, Tuple

from . import errors

__all__ = ["DeviceSpan", "DeviceHandle", "DeviceMemory", "device_range", "is_device"]

#: DLPack device types (dlpack.h DLDeviceType).
DL_CPU, DL_CUDA, DL_CUDA_HOST, DL_ROCM = 1, 2, 3, 10


class DeviceSpan(NamedTuple):
    """A range of device memory by address: a request's ``local`` (or what
    :meth:`ferry.Engine.register_device` takes). ``kind`` ("cuda",
    "cuda:1", "rocm:0") is for registration; None lets the device plugins
    find it."""

    addr: int
    length: int
    kind: Optional[str] = None


class DeviceHandle(NamedTuple):
    """A device range exported to other processes (ferry_device_handle_t):
    ``type`` "cuda-ipc" (cuIpcGetMemHandle, 64 bytes), "cuda-fd",
    "hip-ipc" or "sim"; ``data`` the handle's bytes; ``size`` the whole
    allocation's; ``offset`` and ``length`` the range's within it."""

    type: str
    device: int
    data: bytes
    size: int
    offset: int
    length: int

    def to_c(self, ffi: Any) -> Any:
        h = ffi.new("ferry_device_handle_t *")
        t = self.type.encode()
        if not t or len(t) >= 16:
            raise errors.InvalidRequest(f"device handle type {self.type!r}: 1 to 15 bytes")
        if not self.data or len(self.data) > 128:
            raise errors.InvalidRequest(f"device handle data of {len(self.data)} bytes: 1 to 128")
        ffi.memmove(h.type, t, len(t))
        h.device = self.device
        h.data_len = len(self.data)
        ffi.memmove(h.data, self.data, len(self.data))
        h.size, h.offset, h.length = self.size, self.offset, self.length
        return h

    @classmethod
    def from_c(cls, ffi: Any, h: Any) -> "DeviceHandle":
        return cls(ffi.string(h.type).decode(), int(h.device), bytes(ffi.buffer(h.data, h.data_len)),
                   int(h.size), int(h.offset), int(h.length))


class SimMapping:
    """A "sim" handle's range mapped into this process: ``view`` is a
    writable memoryview of it. The simulated device's handle names the
    simdev process's memfd (pid u32, fd u32, allocation id u64, LE); it is
    opened through /proc/<pid>/fd/<fd> after checking that the file is the
    memfd of that allocation ("ferry-simdev-<id>"). For a test: this is
    what an application's own driver does for a real GPU."""

    def __init__(self, h: DeviceHandle) -> None:
        if h.type != "sim" or len(h.data) != 16:
            raise errors.InvalidRequest(f"map: a {h.type!r} handle of {len(h.data)} bytes is not a simulated device's")
        pid, fd, aid = struct.unpack("<IIQ", h.data)
        path = f"/proc/{pid}/fd/{fd}"
        link = os.readlink(path)
        if not link.startswith(f"/memfd:ferry-simdev-{aid} "):
            raise errors.InvalidRequest(f"map: {path} is {link!r}, not the memfd of simulated allocation {aid} (freed?)")
        f = os.open(path, os.O_RDWR)
        try:
            self._mm = mmap.mmap(f, h.offset + h.length)
        finally:
            os.close(f)
        self.view = memoryview(self._mm)[h.offset:h.offset + h.length]

    def close(self) -> None:
        self.view.release()
        self._mm.close()

    def __enter__(self) -> "SimMapping":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class DeviceMemory:
    """Device memory the engine's device plugin allocated
    (:meth:`ferry.Engine.allocate_device`): ``addr`` (a device address,
    never dereferenced here), ``size``, ``kind`` ("cuda:0") and ``handle``
    (a :class:`DeviceHandle` exporting it, for the application's driver).
    Register it with :meth:`ferry.Engine.register` /
    :meth:`~ferry.Engine.register_device`; free it with :meth:`free`."""

    def __init__(self, engine: Any, addr: int, size: int, kind: str, handle: DeviceHandle) -> None:
        self._engine = engine
        self.addr = addr
        self.size = size
        self.kind = kind
        self.handle = handle
        self.freed = False

    def __repr__(self) -> str:
        return f"<ferry.DeviceMemory {self.size} bytes at {self.addr:#x} on {self.kind}>"

    def __len__(self) -> int:
        return self.size

    def span(self, offset: int = 0, length: Optional[int] = None) -> DeviceSpan:
        """[offset, offset+length) of it, as a request's ``local``."""
        n = self.size - offset if length is None else length
        if offset < 0 or n <= 0 or offset + n > self.size:
            raise errors.InvalidRequest(f"span [{offset}, {offset + n}) is outside the {self.size} bytes of {self!r}")
        return DeviceSpan(self.addr + offset, n, self.kind)

    def map(self) -> SimMapping:
        """Map a simulated device's memory here (tests); a real GPU's is
        mapped by the application's own driver from ``handle``."""
        return SimMapping(self.handle)

    def free(self) -> None:
        """Free it (unregister it first)."""
        if not self.freed:
            self._engine._free_device(self)

    def __enter__(self) -> "DeviceMemory":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.free()


# ---- recognising GPU buffers -------------------------------------------------


def _itemsize(typestr: str) -> int:
    try:
        return int(typestr[2:])
    except (ValueError, IndexError):
        raise errors.InvalidRequest(f"__cuda_array_interface__: typestr {typestr!r} is not one (e.g. '<f4')") from None


def _contiguous_len(shape: Tuple[int, ...], strides: Optional[Tuple[int, ...]], item: int, what: str) -> int:
    n = item
    for s in shape:
        n *= s
    if strides is not None:
        want = item
        for dim, st in zip(reversed(shape), reversed(strides)):
            if dim > 1 and st != want:
                raise errors.InvalidRequest(
                    f"{what}: the array is not C-contiguous (shape {shape}, strides {strides}); "
                    "Ferry moves one contiguous range: pass a contiguous array or register its base"
                )
            want *= dim
    return n


def _from_cai(obj: Any, what: str) -> Tuple[int, int, Optional[str]]:
    cai = obj.__cuda_array_interface__
    ptr = int(cai["data"][0])
    shape = tuple(cai["shape"])
    n = _contiguous_len(shape, cai.get("strides"), _itemsize(cai["typestr"]), what)
    kind = "cuda"
    dev = getattr(obj, "device", None)  # a torch tensor's or CuPy array's device
    idx = getattr(dev, "index", None)
    if idx is None:
        idx = getattr(dev, "id", None)
    if isinstance(idx, int):
        kind = f"cuda:{idx}"
    return ptr, n, kind


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _from_dlpack(obj: Any, dtype: int, did: int, what: str) -> Tuple[int, int, Optional[str]]:
    # The capsule is read, not consumed: its name stays "dltensor", so its
    # own destructor releases the tensor; obj (kept by the caller) holds
    # the memory.
    cap = obj.__dlpack__()
    p = _capsule_pointer(cap, b"dltensor")
    t = _DLTensor.from_address(p)  # DLManagedTensor starts with its DLTensor
    bits = t.dtype.bits * max(1, t.dtype.lanes)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = None if not t.strides else tuple(t.strides[i] * ((bits + 7) // 8) for i in range(t.ndim))
    n = _contiguous_len(shape, strides, (bits + 7) // 8, what)
    ptr = (t.data or 0) + t.byte_offset
    del cap
    return ptr, n, f"{'cuda' if dtype == DL_CUDA else 'rocm'}:{did}"


def _dlpack_device(obj: Any) -> Optional[Tuple[int, int]]:
    f = getattr(obj, "__dlpack_device__", None)
    if f is None:
        return None
    try:
        d = f()
    except Exception:
        return None
    return int(d[0]), int(d[1])


def is_device(obj: Any) -> bool:
    """Whether obj is a GPU buffer (or a DeviceSpan / DeviceMemory)."""
    if isinstance(obj, (DeviceSpan, DeviceMemory)):
        return True
    if hasattr(obj, "__cuda_array_interface__"):
        return True
    if type(obj).__module__.startswith("torch") and getattr(obj, "is_cuda", False):
        return True
    d = _dlpack_device(obj)
    return d is not None and d[0] in (DL_CUDA, DL_ROCM)


def device_range(obj: Any, what: str) -> Tuple[int, int, Optional[str]]:
    """(address, length, kind or None) of a GPU buffer; InvalidRequest for
    one that is not contiguous or not a GPU buffer."""
    if isinstance(obj, DeviceSpan):
        return obj.addr, obj.length, obj.kind
    if isinstance(obj, DeviceMemory):
        if obj.freed:
            raise errors.InvalidRequest(f"{what}: {obj!r} was freed")
        return obj.addr, obj.size, obj.kind
    if type(obj).__module__.startswith("torch") and getattr(obj, "is_cuda", False):
        if not obj.is_contiguous():
            raise errors.InvalidRequest(f"{what}: the tensor is not contiguous; call .contiguous() or register its base")
        idx = obj.device.index
        return int(obj.data_ptr()), int(obj.numel()) * int(obj.element_size()), "cuda" if idx is None else f"cuda:{idx}"
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_cai(obj, what)
    d = _dlpack_device(obj)
    if d is not None and d[0] in (DL_CUDA, DL_ROCM):
        return _from_dlpack(obj, d[0], d[1], what)
    raise errors.InvalidRequest(
        f"{what}: a {type(obj).__name__} is not a GPU buffer (no __cuda_array_interface__, no CUDA/ROCm "
        "__dlpack_device__); pass a GPU tensor, a DeviceSpan, DeviceMemory, or an address with a length"
    )
