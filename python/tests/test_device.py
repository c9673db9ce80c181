"""GPU buffers through the Python package, on the simulated device
(plugins/simdev: a test tool standing in for a GPU; its device addresses
cannot be dereferenced here, its memory is reached through the handle).

The GPU buffers here are labelled FAKES: small objects exposing
``__cuda_array_interface__`` or DLPack over simulated device memory, as a
CuPy array or a CUDA tensor would; torch is not installed and not needed.
"""

from __future__ import annotations

import ctypes
from typing import Any, Iterator, Optional, Tuple

import pytest

import ferry
from conftest import config
from ferry import _cuda
from ferry.device import DeviceHandle, DeviceSpan

SIMDEV = """
device "simdev" {
  config {
    devices = 2
    memory  = "64MiB"
  }
}
staging {
  pool       = "8MiB"
  slice_size = "1MiB"
}
"""


class FakeCudaArray:
    """FAKE: a CUDA array (as CuPy's or a CUDA tensor's) over device
    memory at ptr, exposing only __cuda_array_interface__ (v3)."""

    def __init__(self, ptr: int, nbytes: int, typestr: str = "<f4", strides: Optional[Tuple[int, ...]] = None,
                 shape: Optional[Tuple[int, ...]] = None) -> None:
        item = int(typestr[2:])
        self.__cuda_array_interface__ = {
            "data": (ptr, False), "shape": shape or (nbytes // item,), "typestr": typestr,
            "strides": strides, "version": 3,
        }


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class FakeDLPackTensor:
    """FAKE: a DLPack producer (a GPU tensor) over device memory: a 2-D
    uint16 tensor of rows x cols on device (type 2 = CUDA, id dev)."""

    def __init__(self, ptr: int, rows: int, cols: int, dev: int, offset: int = 0) -> None:
        self._shape = (ctypes.c_int64 * 2)(rows, cols)
        self._t = _DLManagedTensor(ptr, 2, dev, 2, 1, 16, 1, self._shape, None, offset, None, None)
        self._dev = dev

    def __dlpack_device__(self) -> Tuple[int, int]:
        return (2, self._dev)

    def __dlpack__(self, stream: Any = None) -> Any:
        return _capsule_new(ctypes.addressof(self._t), b"dltensor", None)


@pytest.fixture
def pair() -> Iterator[Tuple[ferry.Engine, ferry.Engine]]:
    """Two engines with tcp and the simulated device, peer to peer (no
    metastore: open b's segment once its memory is registered)."""
    a = ferry.Engine(config_text=config("py-dev-a", plugins=("tcp",), extra=SIMDEV))
    b = ferry.Engine(config_text=config("py-dev-b", plugins=("tcp",), extra=SIMDEV))
    yield a, b
    a.close()
    b.close()


def pattern(n: int, seed: int) -> bytes:
    return bytes((i * 131 + (i >> 9) + seed) & 0xFF for i in range(n))


N = (2 << 20) + 4099


def test_gpu_buffers_move_staged(pair):
    """A fake CUDA array over simulated GPU memory is registered by
    register(), written to a peer's GPU memory and read back into a
    DeviceSpan and a slice of the array, staged over tcp."""
    a, b = pair
    src, dst = a.allocate_device("cuda:0", 4 << 20), b.allocate_device("cuda", 4 << 20)
    assert src.kind == "cuda:0" and src.size == 4 << 20 and src.handle.type == "sim"
    with src.map() as sv, dst.map() as dv:
        sv.view[:N] = pattern(N, 3)
        arr = FakeCudaArray(src.addr, 4 << 20)
        r = a.register(arr)
        assert r.kind == "cuda" and r.length == 4 << 20 and r.address == src.addr
        d = b.register_device(dst, perm=ferry.Perm.REMOTE_READ_WRITE)
        assert d.kind == "cuda:0" and "on cuda:0" in repr(d)
        seg = a.open_segment(b.rpc_address)
        assert any(x.base == d.address and x.length == 4 << 20 for x in seg.buffers)

        a.write(arr, seg, d.address, N)  # the registered object: the fast path
        assert bytes(dv.view[:N]) == bytes(sv.view[:N])

        a.read(DeviceSpan(src.addr + (3 << 20), 4096), seg, d.address + 5)
        assert bytes(sv.view[3 << 20:(3 << 20) + 4096]) == pattern(N, 3)[5:5 + 4096]

        part = FakeCudaArray(src.addr + 4, 8192, typestr="|u1")  # a slice: a new view, not the registered object
        a.transfer([ferry.Request(ferry.Op.WRITE, part, seg, d.address + (3 << 20))])
        assert bytes(dv.view[3 << 20:(3 << 20) + 8192]) == bytes(sv.view[4:4 + 8192])

        a.unregister(arr)
        b.unregister(d)
        assert not a.registrations() and not b.registrations()
    src.free()
    dst.free()


def test_dlpack_and_detected_pointer(pair):
    """A fake DLPack CUDA tensor on device 1 registers as cuda:1; a raw
    device address registers by detection (the device plugins identify
    it) and moves as a request's local address."""
    a, b = pair
    m = a.allocate_device("cuda:1", 1 << 20)
    t = FakeDLPackTensor(m.addr, 256, 2048, dev=1)
    r = a.register(t, ferry.Perm.REMOTE_READ)
    assert r.kind == "cuda:1" and r.length == 256 * 2048 * 2
    a.unregister(r)

    dst = b.allocate_device("cuda:1", 1 << 20)
    d = b.register(ptr=dst.addr, length=dst.size, perm=ferry.Perm.REMOTE_READ_WRITE)
    assert d.kind == "device"
    seg = a.open_segment(b.rpc_address)
    with m.map() as mv, dst.map() as dv:
        mv.view[:65536] = pattern(65536, 9)
        a.register_device(m.addr, m.size, kind="cuda:1")
        a.write(m.addr + 16, seg, d.address, 4000)
        assert bytes(dv.view[:4000]) == pattern(65536, 9)[16:16 + 4000]
        a.unregister(m.addr)
        b.unregister(dst.addr)


def test_bad_device_input(pair):
    """Host memory said to be device memory, a wrong device index, a kind
    no device plugin serves, a non-contiguous array, a non-GPU object, a
    stale handle: each a clear error, nothing registered."""
    a, _ = pair
    m = a.allocate_device("cuda:0", 1 << 20)
    host = bytearray(4096)
    addr = ctypes.addressof((ctypes.c_char * 4096).from_buffer(host))
    cases = [
        (lambda: a.register_device(addr, 4096, kind="cuda"), ferry.InvalidRequest, "not device memory"),
        (lambda: a.register_device(m.addr, 4096, kind="cuda:1"), ferry.InvalidRequest, "is on cuda:0"),
        (lambda: a.register_device(m.addr, 4096, kind="rocm"), ferry.Unavailable, "no device plugin serves rocm"),
        (lambda: a.register_device(m.addr, 4096, kind="tpu:0"), ferry.InvalidRequest, "want cuda, rocm"),
        (lambda: a.register(FakeCudaArray(m.addr, 4096, typestr="<f4", shape=(32, 32), strides=(256, 4))),
         ferry.InvalidRequest, "not C-contiguous"),
        (lambda: a.register_device(object()), ferry.InvalidRequest, "not a GPU buffer"),
        (lambda: a.register_device(m.addr, 4096, kind="cuda:0",
                                   handle=DeviceHandle("sim", 0, m.handle.data, m.size, 0, 4096 + 1)),
         ferry.InvalidRequest, "handle->length"),
        (lambda: a.allocate_device("rocm:0", 4096), ferry.Unavailable, "rocm"),
    ]
    for call, exc, says in cases:
        with pytest.raises(exc, match=says):
            call()
    assert not a.registrations()
    stale = a.allocate_device("cuda:0", 1 << 20)
    stale.free()
    with pytest.raises(ferry.InvalidRequest, match="freed"):
        a.register_device(stale.addr, 4096, kind="cuda:0", handle=stale.handle._replace(length=4096))
    with pytest.raises(ferry.InvalidRequest, match="ferry_allocate_device"):
        a._free_device(stale)


class FakeDriver:
    """FAKE libcuda: one device allocation [0x7f0000000000, +1 MiB) on
    device 3, answering as cuPointerGetAttribute, cuMemGetAddressRange_v2,
    cuIpcGetMemHandle and the context calls do (CUresult 0, or 1 for
    CUDA_ERROR_INVALID_VALUE)."""

    BASE, SIZE = 0x7F0000000000, 1 << 20

    def _mine(self, p: Any) -> bool:
        return self.BASE <= p.value < self.BASE + self.SIZE

    def cuPointerGetAttribute(self, out: Any, attr: int, p: Any) -> int:
        if not self._mine(p):
            return 1
        out._obj.value = {_cuda.CU_POINTER_ATTRIBUTE_MEMORY_TYPE: _cuda.CU_MEMORYTYPE_DEVICE,
                          _cuda.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: 3,
                          _cuda.CU_POINTER_ATTRIBUTE_CONTEXT: 0x1234}[attr]
        return 0

    def cuMemGetAddressRange_v2(self, base: Any, size: Any, p: Any) -> int:
        base._obj.value, size._obj.value = self.BASE, self.SIZE
        return 0

    def cuCtxPushCurrent_v2(self, ctx: Any) -> int:
        return 0

    def cuCtxPopCurrent_v2(self, out: Any) -> int:
        return 0

    def cuIpcGetMemHandle(self, buf: Any, p: Any) -> int:
        buf[:] = bytes(range(64))
        return 0


def test_cuda_export_through_the_driver():
    """_cuda exports this process's CUDA memory as a cuda-ipc handle with
    the range's offset in its allocation; host memory and a missing
    driver give no handle; a range past its allocation is refused."""
    f = FakeDriver()
    h = _cuda.export(f.BASE + 4096, 8192, lib=f)
    assert h == DeviceHandle("cuda-ipc", 3, bytes(range(64)), f.SIZE, 4096, 8192)
    assert _cuda.export(0x1000, 4096, lib=f) is None
    with pytest.raises(ValueError, match="past the CUDA allocation"):
        _cuda.export(f.BASE + f.SIZE - 10, 4096, lib=f)
    if not _cuda.available():  # no NVIDIA driver here: no export, the device plugins identify
        assert _cuda.export(f.BASE, 4096) is None
