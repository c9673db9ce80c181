"""Two engines in two processes move verified bytes, over shm and over
tcp: this process writes the peer's first half and reads its second half,
then tells the peer (a notification) what the first half must hold; the
peer checks it in its own memory and answers."""

import hashlib
import json
import os
import subprocess
import sys

import pytest

import ferry
from conftest import HERE, config

sys.path.insert(0, HERE)
from peer import SIZE, pattern  # noqa: E402


@pytest.fixture
def peer(request):
    procs = []

    def start(name, plugins):
        p = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "peer.py"), name, ",".join(plugins)],
            stdout=subprocess.PIPE, text=True,
        )
        procs.append(p)
        line = p.stdout.readline()
        assert line, f"peer {name} exited ({p.wait()}) before it said where it is"
        return p, json.loads(line)

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


# shm needs memory both plugins map: Ferry's own (allocate). tcp also
# takes the application's memory: a bytearray here, and a numpy array.
@pytest.mark.parametrize("transport,local_kind", [("shm", "ferry"), ("tcp", "ferry"), ("tcp", "bytearray"), ("tcp", "numpy")])
def test_two_processes_move_verified_bytes(peer, transport, local_kind):
    plugins = ["shm", "tcp"] if transport == "shm" else ["tcp"]
    tag = f"{transport}-{local_kind}-{os.getpid()}"
    p, where = peer(f"py-peer-{tag}", plugins)
    with ferry.Engine(config_text=config(f"py-main-{tag}", plugins)) as e:
        half = SIZE // 2
        out = pattern(3, half)
        if local_kind == "ferry":
            mem = e.allocate(SIZE)
            buf = mem.view
        elif local_kind == "bytearray":
            buf = bytearray(SIZE)
        else:
            import numpy

            buf = numpy.zeros(SIZE, dtype=numpy.uint8)
        reg = e.register(mem if local_kind == "ferry" else buf, ferry.Perm.LOCAL)
        src, dst = memoryview(buf)[:half], memoryview(buf)[half:]
        src[:] = out
        seg = e.open_segment(where["addr"])
        assert seg.buffers and seg.buffers[0].length == SIZE
        base = where["base"]
        assert any(b.base == base for b in seg.buffers)

        e.write(src, seg, base, transport=transport, timeout=30)
        e.read(dst, seg, base + half, transport=transport, timeout=30)
        assert bytes(dst) == pattern(7, half), "read did not bring the peer's second half"

        msg = json.dumps({"sha256": hashlib.sha256(out).hexdigest(), "reply": e.rpc_address}).encode()
        e.notify(seg, "check", msg)
        got = e.notifications(max=1, timeout=60)
        assert got and got[0].name == "ok", f"peer answered {got}"
        assert got[0].sender == f"py-peer-{tag}"
        assert p.wait(timeout=60) == 0
        del src, dst, buf
        reg.unregister()


def test_batch_with_notification_lands_before_it(peer):
    """submit(notify=...) sends the notification only once every task of
    the call completed: when it arrives, the bytes are there."""
    tag = f"notif-{os.getpid()}"
    p, where = peer(f"py-peer-{tag}", ["shm", "tcp"])
    with ferry.Engine(config_text=config(f"py-main-{tag}")) as e:
        half = SIZE // 2
        mem = e.allocate(half)
        mem.view[:] = pattern(3, half)
        e.register(mem)
        seg = e.open_segment(where["addr"])
        base = where["base"]
        chunk = half // 8
        reqs = [ferry.Request(ferry.Op.WRITE, mem.address + k * chunk, seg, base + k * chunk, length=chunk)
                for k in range(8)]
        msg = json.dumps({"sha256": hashlib.sha256(pattern(3, half)).hexdigest(), "reply": e.rpc_address}).encode()
        with e.batch(8) as b:
            tasks = b.submit(reqs, notify=("check", msg))
            assert tasks == range(0, 8)
            st = b.wait(timeout=30)
            assert st.completed == 8 and st.transferred_bytes == half
        got = e.notifications(max=1, timeout=60)
        assert got and got[0].name == "ok", f"peer answered {got}"
        assert p.wait(timeout=60) == 0
