"""What the application's process must do itself for memory of its own
CUDA driver (cudaMalloc, as PyTorch's caching allocator allocates): a
device plugin runs in another process and cannot look into this one's
pointers, so the range is exported here, with cuIpcGetMemHandle, and the
handle passed to ferry_register_device.

libcuda.so.1 is loaded with ctypes only when a raw pointer or a GPU
buffer is registered, and only once; where it is missing (no NVIDIA
driver), :func:`export` returns None and the engine's device plugins
identify the memory themselves (the simulated device does).
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any, NamedTuple, Optional

from .device import DeviceHandle

__all__ = ["PointerInfo", "pointer_info", "export", "available"]

# cuda.h
CU_POINTER_ATTRIBUTE_CONTEXT = 1
CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_ARRAY, CU_MEMORYTYPE_UNIFIED = 1, 2, 3, 4
CU_IPC_HANDLE_SIZE = 64

_lock = threading.Lock()
_lib: Any = None  # the loaded driver, False when it is not there


def _load() -> Any:
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                try:
                    l = ctypes.CDLL("libcuda.so.1")
                    if l.cuInit(0) != 0:
                        raise OSError("cuInit failed")
                    _lib = l
                except (OSError, AttributeError):
                    _lib = False
    return _lib or None


def available() -> bool:
    """Whether the CUDA driver is loadable and initialises."""
    return _load() is not None


class PointerInfo(NamedTuple):
    memory_type: int  # CU_MEMORYTYPE_*
    device: int       # the device ordinal
    base: int         # the allocation's start (cuMemGetAddressRange)
    size: int         # and its size


def pointer_info(ptr: int, lib: Any = None) -> Optional[PointerInfo]:
    """What the driver knows of ptr: None when there is no driver or the
    pointer is not one it allocated or registered (CUDA_ERROR_INVALID_VALUE:
    plain host memory, or another device's)."""
    l = lib if lib is not None else _load()
    if l is None:
        return None
    mtype = ctypes.c_uint(0)
    if l.cuPointerGetAttribute(ctypes.byref(mtype), CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ctypes.c_uint64(ptr)) != 0:
        return None
    ordinal = ctypes.c_int(-1)
    l.cuPointerGetAttribute(ctypes.byref(ordinal), CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ctypes.c_uint64(ptr))
    base, size = ctypes.c_uint64(0), ctypes.c_size_t(0)
    if mtype.value == CU_MEMORYTYPE_DEVICE and l.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr)) != 0:
        return None
    return PointerInfo(mtype.value, ordinal.value, base.value, size.value)


def export(ptr: int, length: int, lib: Any = None) -> Optional[DeviceHandle]:
    """A "cuda-ipc" handle for [ptr, ptr+length) of this process's CUDA
    memory, or None when the driver is missing or does not know ptr as
    device memory. Raises ValueError for a range that runs past its
    allocation and RuntimeError when the driver refuses the export."""
    l = lib if lib is not None else _load()
    info = pointer_info(ptr, l)
    if info is None or info.memory_type != CU_MEMORYTYPE_DEVICE:
        return None
    if ptr + length > info.base + info.size:
        raise ValueError(
            f"{length} bytes at {ptr:#x} run past the CUDA allocation [{info.base:#x}, {info.base + info.size:#x}) "
            f"on cuda:{info.device}"
        )
    # The IPC export is made in the allocation's context, whichever is
    # current on this thread.
    ctx = ctypes.c_void_p(0)
    l.cuPointerGetAttribute(ctypes.byref(ctx), CU_POINTER_ATTRIBUTE_CONTEXT, ctypes.c_uint64(ptr))
    pushed = bool(ctx.value) and l.cuCtxPushCurrent_v2(ctx) == 0
    try:
        buf = (ctypes.c_char * CU_IPC_HANDLE_SIZE)()
        rc = l.cuIpcGetMemHandle(buf, ctypes.c_uint64(info.base))
    finally:
        if pushed:
            l.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p(0)))
    if rc != 0:
        raise RuntimeError(f"cuIpcGetMemHandle of the allocation at {info.base:#x} on cuda:{info.device} failed: CUresult {rc}")
    return DeviceHandle("cuda-ipc", info.device, bytes(buf), info.size, ptr - info.base, length)


def synchronize(stream: int, lib: Any = None) -> None:
    """Wait for the work queued on stream (a cudaStream_t / CUstream as an
    integer; 0 is the legacy default stream). Without a driver only stream
    0 is allowed (there is no work to wait for)."""
    l = lib if lib is not None else _load()
    if l is None:
        if stream:
            raise RuntimeError(f"stream {stream:#x} given but the CUDA driver (libcuda.so.1) is not loadable")
        return
    rc = l.cuStreamSynchronize(ctypes.c_void_p(stream))
    if rc != 0:
        raise RuntimeError(f"cuStreamSynchronize({stream:#x}) failed: CUresult {rc}")
