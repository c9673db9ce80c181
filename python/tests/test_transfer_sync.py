"""ferry_transfer_sync, the scalar C entry point Engine.write and read
call, and their fast path: the library's bad-input answers, and the
package's checks that the fast path keeps (registration, bounds, read-only
targets, closed engines and freed memory)."""

import os

import numpy
import pytest

import ferry
from ferry import _ffi
from ferry._ffi import ffi
from conftest import config


def own(e):
    return e.open_segment(e.rpc_address)


def fast_lib():
    """ferry._fast's lib; a missing one fails under CI (make build builds
    it there, .ci/run installs python3-dev) and skips elsewhere."""
    f = _ffi.fast()
    if f is None:
        if os.environ.get("CI"):
            pytest.fail("ferry._fast is not built: run make build (it needs Debian's python3-dev)")
        pytest.skip("ferry._fast is not built (make build; Debian's python3-dev)")
    return f


@pytest.fixture(params=["fast", "abi"])
def call_path(request, engine):
    """The engine, with write and read calling ferry_transfer_sync through
    ferry._fast or through cffi's ABI mode."""
    if request.param == "fast":
        engine._xfer = fast_lib().ferry_py_transfer_sync
    else:
        engine._xfer = _ffi.transfer_sync_abi()
    return engine


def test_engines_use_the_fast_module():
    f = fast_lib()
    e = ferry.Engine(config_text=config("py-sync-fast"))
    try:
        assert e._xfer == f.ferry_py_transfer_sync
    finally:
        e.close()


def test_fast_module_passes_bad_input_through(engine):
    f = fast_lib()
    mem = engine.allocate(4096)
    assert f.ferry_py_transfer_sync(engine._h, 1, 999, 0, 0, 64, 0, ffi.NULL) == _ffi.lib().FERRY_ERR_INVALID
    assert "local is NULL" in _ffi.last_error()
    assert f.ferry_py_transfer_sync(engine._h, 1, 999, mem.address, 0, 64, -5, ffi.NULL) == _ffi.lib().FERRY_ERR_INVALID
    assert "timeout_ns -5" in _ffi.last_error()


def test_bad_input_at_the_boundary(engine):
    lib = _ffi.lib()
    h = engine._h
    mem = engine.allocate(8192)
    src = mem._ptr
    d = engine.register(mem.view[4096:], ferry.Perm.REMOTE_READ_WRITE)
    seg = own(engine).id
    mem.view[:4096] = b"s" * 4096
    cases = [
        (0, 1, seg, src, d.address, 64, 0, ffi.NULL, "engine handle 0"),
        (h + 1000, 1, seg, src, d.address, 64, 0, ffi.NULL, "unknown engine handle"),
        (h, 1, seg, ffi.NULL, d.address, 64, 0, ffi.NULL, "local is NULL"),
        (h, 1, seg, src, d.address, 0, 0, ffi.NULL, "length 0"),
        (h, 9, seg, src, d.address, 64, 0, ffi.NULL, "opcode 9"),
        (h, 1, seg, src, d.address, 64, -1, ffi.NULL, "timeout_ns -1"),
        (h, 1, seg, src, d.address, 2**64 - 1, 0, ffi.NULL, "address space"),
    ]
    for *args, want in cases:
        rc = lib.ferry_transfer_sync(*args)
        assert rc == lib.FERRY_ERR_INVALID, (want, ffi.string(lib.ferry_error_name(rc)))
        assert want in _ffi.last_error(), _ffi.last_error()
    assert bytes(mem.view[4096:]) == bytes(4096), "a refused call moved bytes"
    # Well formed, but the source is allocated and not registered.
    rc = lib.ferry_transfer_sync(h, 1, seg, src, d.address, 64, 0, ffi.NULL)
    assert rc == lib.FERRY_ERR_NOT_REGISTERED, _ffi.last_error()
    engine.register(mem.view[:4096])
    hint = ffi.new("char[]", b"shm")
    assert lib.ferry_transfer_sync(h, 1, seg, src, d.address, 4096, 30 * 10**9, hint) == 0, _ffi.last_error()
    assert bytes(mem.view[4096:]) == b"s" * 4096
    # A read back into the source, over tcp, with the engine's deadline.
    mem.view[:4096] = bytes(4096)
    assert lib.ferry_transfer_sync(h, 0, seg, src, d.address, 4096, 0, ffi.new("char[]", b"tcp")) == 0, _ffi.last_error()
    assert bytes(mem.view[:4096]) == b"s" * 4096


def test_after_destroy():
    e = ferry.Engine(config_text=config("py-sync-after-destroy"))
    h = e._h
    mem = e.allocate(4096)
    p = mem._ptr
    e.close()
    lib = _ffi.lib()
    assert lib.ferry_transfer_sync(h, 1, 1, p, 0, 64, 0, ffi.NULL) == lib.FERRY_ERR_CLOSED
    assert "destroyed" in _ffi.last_error()


def test_registered_objects_take_the_fast_path_and_its_checks(call_path):
    engine = call_path
    dmem = engine.allocate(8192)
    d = engine.register(dmem, ferry.Perm.REMOTE_READ_WRITE)
    seg = own(engine)  # after the registration: the segment's buffers are read at open
    ba = bytearray(b"b" * 4096)
    arr = numpy.full(4096, 7, dtype=numpy.uint8)
    rb = engine.register(ba)
    engine.register(arr)
    assert {id(ba), id(arr), id(dmem)} <= set(engine._locals), "registered objects are not looked up by identity"
    engine.write(ba, seg, d.address, transport="tcp")
    engine.write(arr, seg, d.address + 4096, transport="tcp")
    assert bytes(dmem.view[:4096]) == b"b" * 4096 and bytes(dmem.view[4096:]) == bytes([7]) * 4096
    engine.read(arr, seg, d.address, 2048, transport="tcp")  # into the array, a part of it
    assert bytes(arr[:2048]) == b"b" * 2048 and bytes(arr[2048:]) == bytes([7]) * 2048
    # Bounds: more than the object holds is refused, nothing moved.
    dmem.view[:] = bytes(8192)
    with pytest.raises(ferry.InvalidRequest, match="length 4097"):
        engine.write(ba, seg, d.address, 4097)
    with pytest.raises(ferry.InvalidRequest, match="length"):
        engine.write(ba, seg, d.address, 0)
    with pytest.raises(ferry.InvalidRequest, match="remote"):
        engine.write(ba, seg, -1)
    with pytest.raises(ferry.InvalidRequest, match="timeout"):
        engine.write(ba, seg, d.address, timeout=0)
    with pytest.raises(ferry.InvalidRequest, match="positive length"):
        engine.write(dmem.address, seg, d.address)  # an address needs a length
    assert bytes(dmem.view) == bytes(8192)
    # Unregistered: no longer found, so the library refuses it.
    rb.unregister()
    assert id(ba) not in engine._locals
    with pytest.raises(ferry.NotRegistered):
        engine.write(ba, seg, d.address, transport="tcp")
    ba.extend(b"x")  # no longer held exported
    assert bytes(dmem.view) == bytes(8192)
    # Registered again: found again.
    engine.register(ba)
    engine.write(ba, seg, d.address, 4096, transport="tcp", priority=ferry.Priority.HIGH)  # the struct path
    engine.write(ba, seg, d.address + 4096, 4096, transport="tcp", timeout=30)
    assert bytes(dmem.view) == b"b" * 8192


def test_registered_part_of_an_object(call_path):
    """An object registered in part moves its whole size, as a view of it
    does: the library refuses what lies past the registration."""
    engine = call_path
    dmem = engine.allocate(8192)
    d = engine.register(dmem, ferry.Perm.REMOTE_READ_WRITE)
    seg = own(engine)  # after the registration: the segment's buffers are read at open
    ba = bytearray(b"p" * 8192)
    engine.register(ba, length=4096)
    with pytest.raises(ferry.FerryError) as fast:
        engine.write(ba, seg, d.address, transport="tcp")
    with pytest.raises(ferry.FerryError) as slow:
        engine.write(memoryview(ba), seg, d.address, transport="tcp")
    assert type(fast.value) is type(slow.value)
    engine.write(ba, seg, d.address, 4096, transport="tcp")
    assert bytes(dmem.view[:4096]) == b"p" * 4096


def test_freed_memory_and_read_only_targets(call_path):
    engine = call_path
    d = engine.register(engine.allocate(4096), ferry.Perm.REMOTE_READ_WRITE)
    seg = own(engine)
    mem = engine.allocate(4096)
    engine.register(mem)
    engine.write(mem, seg, d.address)
    mem.free()
    assert id(mem) not in engine._locals
    with pytest.raises(ferry.Closed, match="freed"):
        engine.write(mem, seg, d.address)
    ro = numpy.zeros(4096, dtype=numpy.uint8)
    ro.flags.writeable = False
    engine.register(ro)
    engine.write(ro, seg, d.address)  # a source: fine
    with pytest.raises(ferry.InvalidRequest, match="read-only"):
        engine.read(ro, seg, d.address)


def test_fast_first_in_a_fresh_process():
    """ferry._ffi.fast() before anything loaded the library loads it (and
    does not wait on its own lock)."""
    import subprocess
    import sys

    from conftest import child_env

    code = "from ferry import _ffi; f = _ffi.fast(); print('fast' if f is not None else 'abi', _ffi.path())"
    env = child_env()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[1].endswith("libferry.so"), out.stdout


def test_a_call_in_flight_keeps_the_export(engine):
    """write and read do not export the registered object per call; the
    registration's export stays alive while a call holds the object's
    lookup entry, as one in flight on another thread does: unregistering
    meanwhile does not let the object be resized under the transfer."""
    ba = bytearray(4096)
    engine.register(ba)
    entry = engine._locals[id(ba)]  # what a write of ba holds through its call
    engine.unregister(ba)
    assert id(ba) not in engine._locals
    with pytest.raises(BufferError):
        ba.extend(b"x")  # still exported: the "call" has not returned
    del entry
    ba.extend(b"x")  # released with the last holder
    assert len(ba) == 4097
