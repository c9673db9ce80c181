"""One engine (or two in this process) through the package: memory,
registration, transfers to its own segment over shm and tcp, batches,
block lists, blobs and notifications."""

import os
import sys

import numpy
import pytest

import ferry
from conftest import BIN, CHECKOUT_PATH, config


def own(e):
    """The engine's own segment (peer-to-peer: by its rpc address)."""
    return e.open_segment(e.rpc_address)


def test_engine_identity(engine):
    assert engine.name.startswith("py-")
    host, port = engine.rpc_address.rsplit(":", 1)
    assert host and int(port) > 0
    assert engine.metastore_url == ""
    assert ferry.version()
    assert ferry.library_path() in ferry.library_candidates()


def test_engine_from_file(tmp_path):
    p = tmp_path / "engine.hcl"
    p.write_text(config("py-from-file"))
    with ferry.Engine(p) as e:
        assert e.name == "py-from-file"
    assert e.closed


def test_plugin_dir_set_after_start_reaches_a_config_file(tmp_path):
    """A configuration file that names no plugin_dir finds the plugins
    through $FERRY_PLUGIN_DIR even when the process set it after it
    started (Go's own os.Getenv in the library would not see it)."""
    import subprocess
    p = tmp_path / "engine.hcl"
    p.write_text("\n".join(l for l in config("py-env-dir").splitlines() if not l.startswith("plugin_dir")))
    script = (
        "import os, sys; sys.path[:0] = %r\n"
        "import ferry\n"
        "os.environ['FERRY_PLUGIN_DIR'] = %r\n"
        "with ferry.Engine(%r) as e:\n"
        "    print(sorted(e.open_segment(e.rpc_address).transports))\n"
    ) % (CHECKOUT_PATH, BIN, str(p))
    env = {k: v for k, v in os.environ.items() if k != "FERRY_PLUGIN_DIR"}
    env["FERRY_LIB"] = ferry.library_path()
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "shm" in out.stdout and "tcp" in out.stdout, out.stdout


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_write_read_own_segment(engine, transport):
    mem = engine.allocate(64 << 10)
    a = mem.numpy()
    a[:4096] = numpy.arange(4096, dtype=numpy.uint32).view(numpy.uint8)[:4096]
    src = engine.register(mem.view[:8192])
    dst = engine.register(mem.view[8192:], ferry.Perm.REMOTE_READ_WRITE)
    seg = own(engine)
    assert seg.name == engine.name
    assert any(b.base == dst.address and b.perm == ferry.Perm.REMOTE_READ_WRITE for b in seg.buffers)
    engine.write(mem.view[:4096], seg, dst.address, transport=transport)
    assert bytes(a[8192:8192 + 4096]) == bytes(a[:4096])
    a[4096:8192] = 0
    engine.read(mem.address + 4096, seg, dst.address, 4096, transport=transport)
    assert bytes(a[4096:8192]) == bytes(a[:4096])
    del a
    src.unregister()
    dst.unregister()
    mem.free()


def test_memory_is_a_writable_buffer_without_copies(engine):
    mem = engine.allocate(4096)
    v = mem.view
    assert not v.readonly and len(v) == 4096
    arr = mem.numpy(dtype=numpy.uint32)
    assert arr.flags.writeable and arr.size == 1024
    arr[0] = 0xDEADBEEF
    assert bytes(v[:4]) == (0xDEADBEEF).to_bytes(4, "little")  # one memory, two views
    assert mem.views() == 2
    with pytest.raises(ferry.Busy, match="view"):
        mem.free()  # views alive: they would point at unmapped memory
    del v, arr
    mem.free()
    assert mem.freed
    with pytest.raises(ferry.Closed):
        mem.view


def test_memory_as_torch_tensor(engine):
    pytest.importorskip("torch")
    mem = engine.allocate(4096)
    t = mem.torch()
    t[0] = 7
    assert mem.view[0] == 7
    del t
    mem.free()


def test_register_kinds_and_batches(engine):
    mem = engine.allocate(1 << 16)
    ba = bytearray(8192)
    arr = numpy.zeros(2048, dtype=numpy.float32)
    regs = engine.register_batch([mem, ba, arr], [ferry.Perm.REMOTE_READ, ferry.Perm.LOCAL, ferry.Perm.REMOTE_READ_WRITE])
    assert [r.length for r in regs] == [1 << 16, 8192, 8192]
    assert regs[0].obj is None and regs[1].obj is ba and regs[2].obj is arr
    seg = own(engine)
    bases = {b.base: b for b in seg.buffers}
    assert bases[regs[0].address].perm == ferry.Perm.REMOTE_READ
    assert bases[regs[2].address].foreign  # the application's memory
    engine.unregister_batch(regs)
    assert engine.registrations() == []
    assert not any(r.registered for r in regs)
    # raw (ptr, len) and a tuple in a batch
    r = engine.register(ptr=mem.address, length=4096)
    assert r.obj is None and r.address == mem.address
    r.unregister()
    (r,) = engine.register_batch([(mem.address + 4096, 4096)])
    engine.unregister(mem.address + 4096)
    assert not r.registered
    mem.free()


def test_tcp_moves_application_memory(engine):
    """A bytearray and a numpy array (not Ferry's memory) as both ends;
    shm cannot reach them, tcp can with one extra copy."""
    src = bytearray(os.urandom(8192))
    dst = numpy.zeros(8192, dtype=numpy.uint8)
    engine.register(src)
    d = engine.register(dst, ferry.Perm.REMOTE_READ_WRITE)
    seg = own(engine)
    engine.write(src, seg, d.address, transport="tcp")
    assert dst.tobytes() == bytes(src)
    # The engine chooses tcp by itself: shm cannot take such memory.
    dst[:] = 0
    engine.write(memoryview(src)[:4096], seg, d.address + 4096)
    assert dst[4096:].tobytes() == bytes(src[:4096])


def test_registered_object_is_kept_alive(engine):
    """The contract: an object is referenced while registered; dropping the
    caller's references frees nothing, unregister does."""
    import gc
    import weakref

    arr = numpy.ones(4096, dtype=numpy.uint8)
    ref = weakref.ref(arr)
    reg = engine.register(arr, ferry.Perm.REMOTE_READ_WRITE)
    del arr
    gc.collect()
    assert ref() is not None, "a registered array was collected"
    seg = own(engine)
    src = engine.allocate(4096)
    src.view[:] = b"\x05" * 4096
    engine.register(src)
    engine.write(src, seg, reg.address)  # the memory is still there to write to
    assert ref()[4095] == 5
    reg.unregister()
    gc.collect()
    assert ref() is None, "unregister did not release the array"


def test_bytearray_cannot_be_resized_while_registered(engine):
    ba = bytearray(4096)
    reg = engine.register(ba)
    with pytest.raises(BufferError):
        ba.extend(b"x")  # would move the memory under the registration
    reg.unregister()
    ba.extend(b"x")  # free to change once unregistered


def test_batch_async(engine):
    n, size = 16, 4096
    mem = engine.allocate(2 * n * size)
    a = mem.numpy()
    a[: n * size] = numpy.frombuffer(os.urandom(n * size), dtype=numpy.uint8)
    engine.register(mem.view[: n * size])
    dst = engine.register(mem.view[n * size:], ferry.Perm.REMOTE_READ_WRITE)
    seg = own(engine)
    reqs = [ferry.Request(ferry.Op.WRITE, mem.view[k * size:(k + 1) * size], seg, dst.address + k * size) for k in range(n)]
    with engine.batch(n) as b:
        assert b.submit(reqs[: n // 2]) == range(0, n // 2)
        assert b.submit(reqs[n // 2:]) == range(n // 2, n)
        st = b.wait(timeout=30)
        assert st == ferry.BatchStatus(n, 0, n, 0, n * size)
        assert all(s.ok and s.transferred_bytes == size for s in b.statuses())
        assert b.status(3).state == ferry.State.COMPLETED
        assert len(b) == n
    assert bytes(a[: n * size]) == bytes(a[n * size:])
    del a


def test_failed_task_carries_its_error(engine):
    mem = engine.allocate(8192)
    engine.register(mem.view[:4096])
    dst = engine.register(mem.view[4096:], ferry.Perm.REMOTE_READ)  # peers may not write
    seg = own(engine)
    with pytest.raises(ferry.PermissionDenied, match="write"):
        engine.write(mem.view[:4096], seg, dst.address)
    with engine.batch(2) as b:
        b.submit([ferry.Request(ferry.Op.WRITE, mem.address, seg, dst.address, length=4096),
                  ferry.Request(ferry.Op.READ, mem.address, seg, dst.address, length=4096)])
        with pytest.raises(ferry.PermissionDenied):
            b.wait(timeout=30)
        st = b.statuses()
        assert st[0].state in (ferry.State.INVALID, ferry.State.FAILED) and isinstance(st[0].error, ferry.PermissionDenied)
        assert st[1].ok
        assert isinstance(b.status(0).error, ferry.PermissionDenied)


def test_block_list(engine):
    bs, blocks, layers = 256, 16, 2
    lay = ferry.BlockLayout(block_size=bs, blocks=blocks, layers=layers)
    span = lay.span()
    mem = engine.allocate(2 * span)
    a = mem.numpy()
    a[:span] = numpy.frombuffer(os.urandom(span), dtype=numpy.uint8)
    engine.register(mem.view[:span])
    dst = engine.register(mem.view[span:], ferry.Perm.REMOTE_READ_WRITE)
    seg = own(engine)
    with engine.prepare_blocks(seg, mem.view[:span], lay, dst.address, lay) as bl, engine.batch(64) as b:
        local = numpy.array([1, 2, 3, 9, 17], dtype=numpy.uint32)  # 17: layer 1, block 1
        remote = numpy.array([5, 6, 7, 0, 30], dtype=numpy.uint32)
        tasks = b.submit_blocks(bl, local, remote)
        assert 1 <= len(tasks) <= 5
        tasks2 = b.submit_block_range(bl, 10, 10, 3, no_merge=True)
        assert len(tasks2) == 3 and tasks2.start == tasks.stop
        b.wait(timeout=30)

        for l, r in list(zip(local.tolist(), remote.tolist())) + [(10, 10), (11, 11), (12, 12)]:
            got, want = a[span + r * bs: span + (r + 1) * bs], a[l * bs: (l + 1) * bs]
            assert bytes(got) == bytes(want), f"block {l} -> {r}"
        del got, want
        with pytest.raises(ferry.InvalidRequest):
            b.submit_blocks(bl, [1, 2], [3])
        with pytest.raises(ferry.FerryError):
            b.submit_blocks(bl, [blocks * layers], [0])  # past the last block
    del a


def test_notifications_to_self(engine):
    seg = own(engine)
    assert engine.notifications(timeout=0) == []
    engine.notify(seg, "hello", b"\x00payload")
    got = engine.notifications(max=8, timeout=30)
    assert got == [ferry.Notification(engine.name, "hello", b"\x00payload")]


def test_export_import_blob():
    with ferry.Engine(config_text=config("py-blob-a")) as a, ferry.Engine(config_text=config("py-blob-b")) as b:
        mem = a.allocate(4096)
        reg = a.register(mem, ferry.Perm.REMOTE_READ_WRITE)
        blob = a.export_segment()
        assert isinstance(blob, bytes) and blob
        with pytest.raises(ferry.InvalidRequest):
            b.import_segment(blob, expect_name="someone-else")
        with pytest.raises(ferry.InvalidRequest):
            b.import_segment(blob[: len(blob) // 2])  # truncated
        seg = b.import_segment(blob, expect_name="py-blob-a")
        assert seg.name == "py-blob-a" and seg.buffers[0].base == reg.address
        src = b.allocate(4096)
        src.view[:] = b"z" * 4096
        b.register(src)
        b.write(src, seg, reg.address)
        assert bytes(mem.view) == b"z" * 4096
        seg.close()
        assert seg.closed


def test_plugins_found_without_plugin_dir(monkeypatch):
    """Configuration text without plugin_dir: the package names the
    directory ($FERRY_PLUGIN_DIR as os.environ has it, which the library's
    Go runtime would not see), and both transports run."""
    text = config("py-no-plugin-dir").replace(f'plugin_dir = "{BIN}"\n', "")
    assert "plugin_dir" not in text
    monkeypatch.setenv("FERRY_PLUGIN_DIR", BIN)
    with ferry.Engine(config_text=text) as e:
        mem = e.allocate(8192)
        e.register(mem.view[:4096])
        d = e.register(mem.view[4096:], ferry.Perm.REMOTE_READ_WRITE)
        seg = own(e)
        assert set(seg.transports) >= {"shm", "tcp"}
        for t in ("shm", "tcp"):
            e.write(mem.view[:4096], seg, d.address, transport=t)
    with pytest.raises(ferry.InvalidRequest, match="twice"):
        ferry.Engine(config_text=config("py-twice"), plugin_dir=BIN)


def test_mmap_cannot_be_closed_while_registered(engine):
    """The registration holds the mmap's buffer: closing it (which would
    unmap memory the engine may write) is refused until unregister."""
    import mmap

    m = mmap.mmap(-1, 8192)
    reg = engine.register(m, ferry.Perm.REMOTE_READ_WRITE)
    with pytest.raises(BufferError):
        m.close()
    reg.unregister()
    m.close()


def test_threads_write_at_once(engine):
    """write releases the GIL and keeps one request per thread: threads
    moving different blocks at once each land their own bytes."""
    import threading

    n, size, rounds = 4, 4096, 50
    mem = engine.allocate(2 * n * size)
    a = mem.numpy()
    for k in range(n):
        a[k * size:(k + 1) * size] = k + 1
    engine.register(mem.view[: n * size])
    dst = engine.register(mem.view[n * size:], ferry.Perm.REMOTE_READ_WRITE)
    seg = own(engine)
    errs = []

    def worker(k):
        try:
            for _ in range(rounds):
                engine.write(mem.address + k * size, seg, dst.address + k * size, size)
        except Exception as e:  # reported below, with the thread's block
            errs.append((k, e))

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errs == []
    for k in range(n):
        assert bytes(a[(n + k) * size:(n + k + 1) * size]) == bytes([k + 1]) * size, f"thread {k}'s block"
    del a


def test_strict_is_the_default():
    """A configuration that leaves strict out is strict: an engine whose
    tcp plugin does not match its pinned sha256 does not start."""
    from conftest import config

    pinned = config("py-strict").replace('plugin "tcp" {', 'plugin "tcp" {\n  sha256 = "' + "0" * 64 + '"', 1)
    assert "sha256" in pinned
    with pytest.raises(ferry.PluginFailed, match="strict = false"):
        ferry.Engine(config_text=pinned)
