"""Bad input gets a clear error, of the taxonomy's class, and leaves
nothing touched: no registration added, the engine still works."""

import numpy
import pytest

import ferry
from conftest import config


def own(e):
    return e.open_segment(e.rpc_address)


def still_works(e):
    """The engine moves bytes after the refusal."""
    mem = e.allocate(8192)
    e.register(mem.view[:4096])
    d = e.register(mem.view[4096:], ferry.Perm.REMOTE_READ_WRITE)
    mem.view[:4096] = b"k" * 4096
    e.write(mem.view[:4096], own(e), d.address)
    assert bytes(mem.view[4096:]) == b"k" * 4096


def test_config_errors():
    with pytest.raises(ferry.InvalidRequest, match="exactly one"):
        ferry.Engine()
    with pytest.raises(ferry.InvalidRequest):
        ferry.Engine(config_text="")
    with pytest.raises(ferry.ConfigError) as ei:
        ferry.Engine(config_text='name = "x"\nmetastore {\n  kind = "nonsense"\n}\n')
    assert "kind" in str(ei.value)
    with pytest.raises(ferry.FerryError, match="no-such-file"):
        ferry.Engine(config="/nonexistent/no-such-file.hcl")


def test_null_and_zero_lengths(engine):
    with pytest.raises(ferry.InvalidRequest, match="NULL"):
        engine.register(ptr=0, length=4096)
    with pytest.raises(ferry.InvalidRequest, match="length"):
        engine.register(ptr=0x1000, length=0)
    with pytest.raises(ferry.InvalidRequest, match="empty"):
        engine.register(bytearray())
    with pytest.raises(ferry.InvalidRequest, match="empty"):
        engine.register(numpy.zeros(0))
    with pytest.raises(ferry.InvalidRequest):
        engine.allocate(0)
    mem = engine.allocate(4096)
    engine.register(mem)
    seg = own(engine)
    with pytest.raises(ferry.InvalidRequest, match="NULL"):
        engine.write(0, seg, mem.address, 4096)
    with pytest.raises(ferry.InvalidRequest, match="empty"):
        engine.write(mem.view[:0], seg, mem.address)
    with pytest.raises(ferry.InvalidRequest, match="length"):
        engine.write(mem.address, seg, mem.address, 0)
    with pytest.raises(ferry.InvalidRequest):
        engine.batch(0)
    with pytest.raises(ferry.InvalidRequest):
        engine.open_segment("")
    with pytest.raises(ferry.InvalidRequest):
        engine.notify(seg, "")
    with pytest.raises(ferry.InvalidRequest):
        engine.register_batch([])
    assert len(engine.registrations()) == 1
    still_works(engine)


def test_not_a_buffer(engine):
    with pytest.raises(ferry.InvalidRequest, match="buffer protocol"):
        engine.register("a string")
    with pytest.raises(ferry.InvalidRequest, match="buffer protocol"):
        engine.register([1, 2, 3])


def test_non_contiguous_buffers_are_refused(engine):
    strided = numpy.zeros((64, 64), dtype=numpy.uint8)[:, 1]
    with pytest.raises(ferry.InvalidRequest, match="not C-contiguous"):
        engine.register(strided)
    with pytest.raises(ferry.InvalidRequest, match="not C-contiguous"):
        engine.register(memoryview(bytearray(4096))[::2])
    with pytest.raises(ferry.InvalidRequest, match="not C-contiguous"):
        engine.register(numpy.zeros((64, 64), order="F"))
    mem = engine.allocate(8192)
    engine.register(mem)
    with pytest.raises(ferry.InvalidRequest, match="not C-contiguous"):
        engine.write(mem.numpy()[::2], own(engine), mem.address)
    with pytest.raises(ferry.InvalidRequest, match="not C-contiguous"):
        engine.register_batch([bytearray(16), memoryview(bytearray(64))[::4]])
    assert len(engine.registrations()) == 1  # the batch added none
    still_works(engine)


def test_read_only_buffers_where_written(engine):
    ro = bytes(4096)
    with pytest.raises(ferry.InvalidRequest, match="read-only"):
        engine.register(ro, ferry.Perm.REMOTE_READ_WRITE)  # peers would write into it
    frozen = numpy.zeros(4096, dtype=numpy.uint8)
    frozen.flags.writeable = False
    with pytest.raises(ferry.InvalidRequest, match="read-only"):
        engine.register(frozen, ferry.Perm.REMOTE_READ_WRITE)
    assert engine.registrations() == []
    # Registered read-only as a source: fine to write from, never read into.
    reg = engine.register(ro)
    assert not reg.writable
    src = engine.allocate(4096)
    d = engine.register(src, ferry.Perm.REMOTE_READ_WRITE)
    seg = own(engine)
    engine.write(ro, seg, d.address, transport="tcp")
    with pytest.raises(ferry.InvalidRequest, match="read-only"):
        engine.read(ro, seg, d.address)
    with pytest.raises(ferry.InvalidRequest, match="read-only"):
        engine.read(reg.address, seg, d.address, 4096)  # by address, too
    with pytest.raises(ferry.InvalidRequest, match="read-only"):
        with engine.batch(1) as b:
            b.submit(ferry.Request(ferry.Op.READ, reg.address, seg, d.address, length=4096))
    still_works(engine)


def test_unregistered_memory(engine):
    mem = engine.allocate(8192)
    d = engine.register(mem.view[4096:], ferry.Perm.REMOTE_READ_WRITE)
    seg = own(engine)
    with pytest.raises(ferry.NotRegistered):
        engine.write(mem.view[:4096], seg, d.address)  # allocated, not registered
    with pytest.raises(ferry.NotRegistered):
        engine.write(bytearray(4096), seg, d.address)  # the application's, not registered
    with pytest.raises(ferry.OutOfBounds):
        engine.write(d.obj if d.obj is not None else mem.view[4096:], seg, d.address + 4096 * 16)
    with pytest.raises(ferry.FerryError):
        engine.unregister(mem.address)  # nothing starts there
    assert len(engine.registrations()) == 1
    still_works(engine)


def test_calls_after_close():
    e = ferry.Engine(config_text=config("py-after-close"))
    mem = e.allocate(4096)
    reg = e.register(mem, ferry.Perm.REMOTE_READ_WRITE)
    seg = own(e)
    b = e.batch(4)
    e.close()
    e.close()  # twice is a no-op
    assert e.closed and mem.freed and not reg.registered and seg.closed
    calls = [
        lambda: e.allocate(4096),
        lambda: e.register(bytearray(16)),
        lambda: e.unregister(reg),
        lambda: e.open_segment("x"),
        lambda: e.write(mem, seg, 0),
        lambda: e.read(bytearray(16), seg, 0),
        lambda: e.batch(1),
        lambda: e.notify(seg, "n"),
        lambda: e.notifications(),
        lambda: e.export_segment(),
        lambda: b.submit(ferry.Request(ferry.Op.WRITE, 0x1000, seg, 0, length=16)),
        lambda: b.wait(),
        lambda: mem.view,
        lambda: mem.numpy(),
    ]
    for i, c in enumerate(calls):
        with pytest.raises(ferry.Closed):
            c()
            pytest.fail(f"call {i} after close did not raise")
    b.free()  # freeing after close is harmless


def test_addresses_that_overflow(engine):
    """An address or length past the end of the address space is a bad
    argument (InvalidRequest, the library's FERRY_ERR_INVALID), never an
    internal error from a panic the library recovered."""
    mem = engine.allocate(4096)
    engine.register(mem)
    seg = own(engine)
    for ptr, length in ((-1, 64), (2**64 - 1, 64), (2**64, 64), (mem.address, 2**64 - 1), (mem.address, 2**64)):
        with pytest.raises(ferry.InvalidRequest, match="address"):
            engine.register(ptr=ptr, length=length)
        with pytest.raises(ferry.InvalidRequest, match="address"):
            engine.register_batch([(ptr, length)])
        with pytest.raises(ferry.InvalidRequest, match="address"):
            engine.write(ptr, seg, mem.address, length)
        with pytest.raises(ferry.InvalidRequest, match="address"):
            engine.read(ptr, seg, mem.address, length)
    with pytest.raises(ferry.InvalidRequest, match="address"):
        engine.unregister(-1)
    assert [r.address for r in engine.registrations()] == [mem.address]
    still_works(engine)


def test_library_refuses_overflowing_ranges(engine):
    """The library itself (what C callers and bindings reach) refuses
    them as invalid, with no recovered panic on the way."""
    from ferry._ffi import ffi

    lib, h = engine._lib, engine._handle()
    mem = engine.allocate(4096)
    top = ffi.cast("void *", -1)
    size_max = 2**64 - 1
    for rc in (
        lib.ferry_register(h, ffi.cast("void *", mem.address), size_max, 0, ffi.NULL),
        lib.ferry_register(h, top, 64, 0, ffi.NULL),
        lib.ferry_unregister(h, top),
        lib.ferry_allocate(h, size_max, ffi.new("void **")),
    ):
        msg = ffi.string(lib.ferry_last_error()).decode()
        assert rc == lib.FERRY_ERR_INVALID, msg
        assert "internal error" not in msg and "address space" in msg, msg
