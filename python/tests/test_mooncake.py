"""ferry.mooncake.TransferEngine: Mooncake's classic Python API on Ferry.
Two engines in this process, peer-to-peer ("P2PHANDSHAKE") unless a test
runs a metadata server; every call is checked for Mooncake's return codes,
on success and on each bad input."""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import socketserver
import subprocess
import threading
import time
from typing import Dict, Iterator, Tuple

import numpy as np
import pytest

from conftest import SECRET, ipv6_loopback

import ferry
from ferry.mooncake import TransferEngine, TransferNotify, TransferOpcode

HOST = "127.0.0.1"


def engine(name: str = HOST, meta: str = "P2PHANDSHAKE") -> TransferEngine:
    te = TransferEngine(cluster_secret_file=SECRET)
    assert te.initialize(name, meta, "tcp", "") == 0, te.last_error
    return te


@pytest.fixture
def pair() -> Iterator[Tuple[TransferEngine, TransferEngine, str]]:
    a, b = engine(), engine()
    yield a, b, f"{HOST}:{b.get_rpc_port()}"
    a.close()
    b.close()


def fill(te: TransferEngine, addr: int, n: int, seed: int) -> bytes:
    data = bytes((i * 31 + seed) & 0xFF for i in range(n))
    assert te.write_bytes_to_buffer(addr, data, n) == 0
    return data


def until(what: str, cond, limit: float = 30.0):
    """Poll cond (a status call) until it returns something true."""
    end = time.monotonic() + limit
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > end:
            pytest.fail(f"{what}: not within {limit} s")
        time.sleep(0.002)


def test_sync_write_and_read(pair):
    a, b, session = pair
    n = 64 << 10
    la, rb = a.allocate_managed_buffer(2 * n), b.allocate_managed_buffer(n)
    assert la and rb
    data = fill(a, la, n, 3)
    assert a.transfer_sync_write(session, la, rb, n) == 0
    assert b.read_bytes_from_buffer(rb, n) == data
    assert a.transfer_sync_read(session, la + n, rb + 7, n - 7) == 0
    assert a.read_bytes_from_buffer(la + n, n - 7) == data[7:]
    assert a.transfer_sync(session, la + 1, rb, 100, TransferOpcode.Write) == 0
    assert b.read_bytes_from_buffer(rb, 100) == data[1:101]
    assert a.get_first_buffer_address(session) == rb
    assert a.free_managed_buffer(la, 2 * n) == 0
    assert b.free_managed_buffer(rb, n) == 0


def test_batch_sync_and_async(pair):
    a, b, session = pair
    blk, k = 4096, 8
    la, rb = a.allocate_managed_buffer(k * blk), b.allocate_managed_buffer(k * blk)
    data = fill(a, la, k * blk, 5)
    order = [3, 0, 7, 1]
    srcs = [la + i * blk for i in order]
    dsts = [rb + j * blk for j in range(len(order))]
    assert a.batch_transfer_sync_write(session, srcs, dsts, [blk] * len(order)) == 0
    for j, i in enumerate(order):
        assert b.read_bytes_from_buffer(rb + j * blk, blk) == data[i * blk:(i + 1) * blk]
    assert a.batch_transfer_sync_read(session, [la], [rb + blk], [blk]) == 0
    assert a.read_bytes_from_buffer(la, blk) == data[0:blk]

    data = fill(a, la, k * blk, 9)
    ids = [a.batch_transfer_async_write(session, [la + i * blk], [rb + i * blk], [blk]) for i in range(k)]
    assert all(ids) and len(set(ids)) == k
    assert a.get_batch_transfer_status(ids) == 0
    assert b.read_bytes_from_buffer(rb, k * blk) == data
    assert a.get_batch_transfer_status(ids[:1]) < 0, "a finished batch id is no longer valid"

    rid = a.batch_transfer_async_read(session, [la], [rb + 2 * blk], [blk])
    assert rid and a.get_batch_transfer_status([rid]) == 0
    assert a.read_bytes_from_buffer(la, blk) == data[2 * blk:3 * blk]
    oid = a.batch_transfer_async(session, [la], [rb], [blk], TransferOpcode.Write)
    assert oid and a.get_batch_transfer_status([oid]) == 0

    fill(a, la, blk, 11)
    wid = a.transfer_submit_write(session, la, rb + 5 * blk, blk)
    assert wid
    assert until("transfer_check_status", lambda: a.transfer_check_status(wid)) == 1
    assert b.read_bytes_from_buffer(rb + 5 * blk, blk) == a.read_bytes_from_buffer(la, blk)


def test_register_application_memory(pair):
    a, b, session = pair
    src = np.arange(8192, dtype=np.uint8)
    dst = np.zeros(8192, dtype=np.uint8)
    extra = [np.zeros(4096, dtype=np.uint8) for _ in range(3)]
    assert a.register_memory(src.ctypes.data, src.nbytes) == 0
    assert b.register_memory(dst.ctypes.data, dst.nbytes, "cpu:0") == 0
    assert b.batch_register_memory([x.ctypes.data for x in extra], [x.nbytes for x in extra]) == 0
    assert a.transfer_sync_write(session, src.ctypes.data + 1, dst.ctypes.data, 8000) == 0
    assert np.array_equal(dst[:8000], src[1:8001]) and not dst[8000:].any()
    assert a.batch_transfer_sync_write(session, [src.ctypes.data] * 3, [x.ctypes.data for x in extra], [4096] * 3) == 0
    assert all(np.array_equal(x, src[:4096]) for x in extra)
    assert b.batch_unregister_memory([x.ctypes.data for x in extra]) == 0
    assert b.unregister_memory(dst.ctypes.data) == 0
    assert b.unregister_memory(dst.ctypes.data) < 0, "unregistering twice"
    assert a.unregister_memory(src.ctypes.data) == 0


def test_notify_on_landing(pair):
    """A sync call's notification is delivered before the call returns,
    as Mooncake's (it sends it when it sees the batch complete): the
    peer has it at once, and those of successive calls arrive in their
    order."""
    a, b, session = pair
    la, rb = a.allocate_managed_buffer(4096), b.allocate_managed_buffer(8192)
    fill(a, la, 4096, 1)
    assert a.transfer_sync(session, la, rb, 4096, TransferOpcode.Write, TransferNotify("layer-0", "ready")) == 0
    assert a.batch_transfer_sync(session, [la, la], [rb, rb + 4096], [4096, 4096], TransferOpcode.Write,
                                 notify=TransferNotify("kv", "done")) == 0
    assert b.get_notifies() == [TransferNotify("layer-0", "ready"), TransferNotify("kv", "done")]
    assert b.get_notifies() == []
    want = []
    for i in range(100):
        want.append(TransferNotify(f"layer-{i}", str(i)))
        if i % 2:
            assert a.transfer_sync(session, la, rb, 64, TransferOpcode.Write, want[-1]) == 0, a.last_error
        else:
            assert a.batch_transfer_sync(session, [la], [rb + 4096], [64], TransferOpcode.Write, want[-1]) == 0, a.last_error
    assert b.get_notifies() == want


def test_return_codes_on_bad_input(pair):
    a, b, session = pair
    la, rb = a.allocate_managed_buffer(4096), b.allocate_managed_buffer(4096)
    stray = np.zeros(4096, dtype=np.uint8)

    cases = {
        "mismatched lists": lambda: a.batch_transfer_sync_write(session, [la, la], [rb], [16, 16]),
        "unregistered local buffer": lambda: a.transfer_sync_write(session, stray.ctypes.data, rb, 16),
        "remote past its buffer": lambda: a.transfer_sync_write(session, la, rb + 4090, 16),
        "zero length": lambda: a.transfer_sync_write(session, la, rb, 0),
        "unknown segment": lambda: a.transfer_sync_write("no-such-engine", la, rb, 16),
        "nobody at the address": lambda: a.transfer_sync_write(f"{HOST}:1", la, rb, 16),
        "unknown batch id": lambda: a.get_batch_transfer_status([12345]),
        "not a managed buffer": lambda: a.free_managed_buffer(la + 64, 4096),
        "managed buffer of another length": lambda: a.free_managed_buffer(la, 100),
        "register NULL": lambda: a.register_memory(0, 4096),
        "initialize again": lambda: a.initialize(HOST, "P2PHANDSHAKE", "tcp", ""),
    }
    for what, call in cases.items():
        rc = call()
        assert rc < 0, f"{what}: returned {rc}"
        assert a.last_error, f"{what}: no message"
    assert a.batch_transfer_async_write(session, [la], [rb + 4090], [16]) == 0, "an async write past the remote buffer"
    assert a.batch_transfer_async_write(session, [la, la], [rb], [16]) == 0, "mismatched async lists"
    assert a.get_first_buffer_address("no-such-engine") == 0
    # The engine still works after every refusal, and the peer's bytes are untouched.
    assert b.read_bytes_from_buffer(rb, 4096) == bytes(4096)
    fill(a, la, 16, 2)
    assert a.transfer_sync_write(session, la, rb, 16) == 0


def test_calls_before_initialize_and_after_close():
    te = TransferEngine()
    assert te.get_rpc_port() < 0 and "initialize" in te.last_error
    assert te.register_memory(0x1000, 4096) < 0
    assert te.transfer_sync_write(f"{HOST}:1", 0x1000, 0, 16) < 0
    assert te.allocate_managed_buffer(4096) == 0
    assert te.batch_transfer_async_write(f"{HOST}:1", [0x1000], [0], [16]) == 0
    assert te.get_notifies() == []
    up = engine()
    up.close()
    assert up.get_rpc_port() < 0 and up.allocate_managed_buffer(4096) == 0
    up.close()


def test_get_engine_is_the_ferry_engine(pair):
    """get_engine() gives the ferry.Engine underneath (None before
    initialize, as Mooncake's), usable with Ferry's own API on the
    memory Mooncake's calls registered; get_engine_ptr is not supported."""
    a, b, session = pair
    assert TransferEngine().get_engine() is None
    fe = a.get_engine()
    assert isinstance(fe, ferry.Engine) and fe is a.engine
    assert fe.rpc_address.endswith(f":{a.get_rpc_port()}")
    la, rb = a.allocate_managed_buffer(4096), b.allocate_managed_buffer(4096)
    data = fill(a, la, 4096, 6)
    seg = fe.open_segment(session)
    fe.write(la, seg, rb, length=4096, priority=ferry.Priority.HIGH)
    assert b.read_bytes_from_buffer(rb, 4096) == data
    with pytest.raises(NotImplementedError, match="get_engine_ptr is not supported"):
        a.get_engine_ptr()
    assert a.get_local_topology() == "{}"
    assert a.warmup_efa_segment("x") == 0
    assert TransferEngine.TransferOpcode.READ == TransferOpcode.Read == 0


def test_bare_ipv6_host():
    """"::1", as SGLang passes it to initialize, starts the engine on
    IPv6 loopback; peers reach it as "[::1]:port" and, as Mooncake parses
    it, "::1:port"; "[::1]:16010" is a name with a port too. Each P2P
    engine is named "[::1]:rpc_port", as Mooncake names it (the port of
    local_hostname is not used)."""
    if not ipv6_loopback():
        if os.environ.get("CI"):
            pytest.fail("no IPv6 loopback (::1) on this machine")
        pytest.skip("no IPv6 loopback (::1) on this machine")
    a = engine("::1")
    b = engine("[::1]:16010")
    try:
        for te in (a, b):
            assert te.engine.name == f"[::1]:{te.get_rpc_port()}", te.engine.name
            assert te.engine.rpc_address == te.engine.name, te.engine.rpc_address
            assert 'listen = ["[::1]:0"]' in te.config_text
        la, rb = a.allocate_managed_buffer(8192), b.allocate_managed_buffer(8192)
        data = fill(a, la, 8192, 8)
        port = b.get_rpc_port()
        assert a.transfer_sync_write(f"[::1]:{port}", la, rb, 4096) == 0, a.last_error
        assert a.transfer_sync_write(f"::1:{port}", la + 4096, rb + 4096, 4096) == 0, a.last_error
        assert b.read_bytes_from_buffer(rb, 8192) == data
        assert b.transfer_sync_read(f"::1:{a.get_rpc_port()}", rb, la, 16) == 0, b.last_error
    finally:
        a.close()
        b.close()
    bad = TransferEngine(cluster_secret_file=SECRET)
    assert bad.initialize("[not-an-address]:1", "P2PHANDSHAKE", "tcp", "") < 0
    assert "not an IPv6 address" in bad.last_error


def test_numpy_integers_as_addresses_and_lengths(pair):
    """Mooncake's pybind module takes anything with __index__ (numpy
    integers) for an address, a length or a batch id, and numpy arrays
    for its lists; so does Ferry's, with the same result as ints."""
    a, b, session = pair
    blk = 4096
    la = a.allocate_managed_buffer(np.uint64(4 * blk))
    rb = b.allocate_managed_buffer(np.int32(4 * blk))
    assert la and rb
    data = fill(a, np.uint64(la), np.int64(4 * blk), 12)
    assert a.transfer_sync_write(session, np.uint64(la), np.uint64(rb), np.int64(blk)) == 0, a.last_error
    assert b.read_bytes_from_buffer(np.uint64(rb), np.uint32(blk)) == data[:blk]
    assert a.transfer_sync_read(session, np.uint64(la + blk), np.uint64(rb + 1), np.uint16(100)) == 0, a.last_error
    assert a.read_bytes_from_buffer(la + blk, 100) == data[1:101]
    srcs = np.array([la + blk, la + 3 * blk], dtype=np.uint64)
    dsts = np.array([rb + 2 * blk, rb + 3 * blk], dtype=np.uint64)
    lens = np.full(2, blk, dtype=np.int64)
    data = fill(a, la, 4 * blk, 13)
    assert a.batch_transfer_sync_write(session, srcs, dsts, lens) == 0, a.last_error
    assert b.read_bytes_from_buffer(rb + 2 * blk, blk) == data[blk:2 * blk]
    assert b.read_bytes_from_buffer(rb + 3 * blk, blk) == data[3 * blk:]
    bid = a.batch_transfer_async_write(session, srcs[:1], dsts[:1], lens[:1])
    assert bid and a.get_batch_transfer_status(np.array([bid], dtype=np.uint64)) == 0, a.last_error
    wid = a.transfer_submit_write(session, np.uint64(la), np.uint64(rb), np.uint64(16))
    assert until("transfer_check_status", lambda: a.transfer_check_status(np.uint64(wid))) == 1
    arr = np.zeros(2 * blk, dtype=np.uint8)
    addr = np.uint64(arr.ctypes.data)
    assert a.register_memory(addr, np.uint64(arr.nbytes), "cpu:0") == 0, a.last_error
    assert b.transfer_sync_read(f"{HOST}:{a.get_rpc_port()}", np.uint64(rb), addr, np.int64(blk)) == 0, b.last_error
    assert a.unregister_memory(addr) == 0
    parts = [np.zeros(blk, dtype=np.uint8) for _ in range(2)]
    ptrs = np.array([p.ctypes.data for p in parts], dtype=np.uint64)
    assert a.batch_register_memory(ptrs, np.array([blk, blk])) == 0, a.last_error
    assert a.batch_unregister_memory(ptrs) == 0
    assert a.free_managed_buffer(np.uint64(la), np.uint64(4 * blk)) == 0


def test_type_errors_where_mooncake_raises_them(pair):
    """Arguments pybind cannot convert to the C++ parameter raise
    TypeError before anything happens, as Mooncake's module does: a float,
    str, None or negative number for an address or length, a str or a
    generator for a list, an opcode or notify of the wrong type, None for
    a std::string. The engine is untouched and works after."""
    a, b, session = pair
    la, rb = a.allocate_managed_buffer(4096), b.allocate_managed_buffer(4096)
    W = TransferOpcode.Write
    cases = {
        "float length": lambda: a.transfer_sync_write(session, la, rb, 16.0),
        "str buffer": lambda: a.transfer_sync_write(session, str(la), rb, 16),
        "None peer address": lambda: a.transfer_sync_read(session, la, None, 16),
        "negative length": lambda: a.transfer_sync_write(session, la, rb, -1),
        "address past 2**64": lambda: a.transfer_sync_write(session, la, 1 << 64, 16),
        "numpy float": lambda: a.transfer_sync_write(session, la, rb, np.float64(16)),
        "a buffer object for an address": lambda: a.transfer_sync_write(session, np.zeros(16, dtype=np.uint8), rb, 16),
        "int target": lambda: a.transfer_sync_write(1234, la, rb, 16),
        "None transport_hint": lambda: a.transfer_sync_write(session, la, rb, 16, None),
        "str for a list": lambda: a.batch_transfer_sync_write(session, "12", [rb], [16]),
        "bytes for a list": lambda: a.batch_transfer_sync_write(session, b"12", [rb], [16]),
        "generator for a list": lambda: a.batch_transfer_sync_write(session, (x for x in [la]), [rb], [16]),
        "set for a list": lambda: a.batch_transfer_async_write(session, {la}, [rb], [16]),
        "float in a list": lambda: a.batch_transfer_sync_read(session, [la], [rb], [16.5]),
        "float array": lambda: a.batch_transfer_sync_write(session, [la], [rb], np.array([16.0])),
        "int for a list": lambda: a.get_batch_transfer_status(1),
        "str opcode": lambda: a.transfer_sync(session, la, rb, 16, "write"),
        "opcode 2": lambda: a.batch_transfer_async(session, [la], [rb], [16], 2),
        "str notify": lambda: a.transfer_sync(session, la, rb, 16, W, "done"),
        "None location": lambda: a.register_memory(la, 16, None),
        "int segment name": lambda: a.get_first_buffer_address(7),
        "None probe name": lambda: a.send_probe(None),
        "float managed length": lambda: a.allocate_managed_buffer(4096.0),
        "negative managed length": lambda: a.free_managed_buffer(la, -4096),
        "int bytes to write": lambda: a.write_bytes_to_buffer(la, 5, 1),
        "float batch id": lambda: a.transfer_check_status(1.0),
        "float stream": lambda: a.transfer_write_on_cuda(session, la, rb, 16, 0.5),
        "int hostname": lambda: TransferEngine().initialize(1, "P2PHANDSHAKE", "tcp", ""),
        "int metadata_type": lambda: TransferEngine().initialize_ext(HOST, "P2PHANDSHAKE", "tcp", "", 3),
        "int notify name": lambda: TransferNotify(1, "msg"),
    }
    for what, call in cases.items():
        with pytest.raises(TypeError) as got:
            call()
        assert got.value.args and got.value.args[0], what
    assert b.read_bytes_from_buffer(rb, 4096) == bytes(4096), "a refused call moved bytes"
    assert a.get_notifies() == [] and b.get_notifies() == []
    data = fill(a, la, 64, 14)
    # What Mooncake's converts, Ferry's does too: a bool, a tuple, a
    # range, bytes for a str, a numpy bool array is not an index list.
    assert a.transfer_sync(session, la, rb, 32, TransferOpcode.Write, TransferNotify(b"n", b"m"), b"tcp") == 0, a.last_error
    assert a.batch_transfer_sync_write(session, (la + 32,), range(rb + 32, rb + 33), [True]) == 0, a.last_error
    assert b.read_bytes_from_buffer(rb, 33) == data[:33]
    assert until("the notification", lambda: b.get_notifies()) == [TransferNotify("n", "m")]


@pytest.fixture
def redis_server():
    """A real redis-server on a free port of 127.0.0.1, no persistence."""
    exe = shutil.which("redis-server")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed (Debian: redis-server; .ci/run installs it)")
        pytest.skip("redis-server is not installed")
    with socket.socket() as s:
        s.bind((HOST, 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([exe, "--bind", HOST, "--port", str(port), "--save", "", "--appendonly", "no"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        def up() -> bool:
            if p.poll() is not None:
                pytest.fail(f"redis-server exited: {p.stdout.read().decode()[-2000:]}")
            try:
                socket.create_connection((HOST, port), timeout=1).close()
                return True
            except OSError:
                return False

        until("redis-server answers", up, 20)
        yield f"{HOST}:{port}"
    finally:
        p.kill()
        p.wait()


def test_initialize_ext(redis_server):
    """initialize_ext's metadata_type applies to a metadata_server without
    a scheme, as Mooncake's buildConnString: "redis" with "host:port" (a
    real redis-server) and "http" with "host:port/metadata" (Mooncake's
    server protocol) join that metastore, where two engines find each
    other by name; a server with a scheme keeps its own, and
    P2PHANDSHAKE stays peer-to-peer whatever the type."""
    class Handler(_Mooncake):
        store: Dict[str, bytes] = {}

    srv, url = _serve(Handler)
    try:
        bare_http = url.split("://", 1)[1]
        for meta, mtype, kind in ((redis_server, "redis", "redis"), (bare_http, "http", "http"), (url, "redis", "http")):
            na, nb = f"{HOST}:16021", f"{HOST}:16022"
            a, b = TransferEngine(cluster_secret_file=SECRET), TransferEngine(cluster_secret_file=SECRET)
            try:
                assert a.initialize_ext(na, meta, "tcp", "", mtype) == 0, a.last_error
                assert b.initialize_ext(nb, meta, "tcp", "", mtype) == 0, b.last_error
                assert f'kind = "{kind}"' in a.config_text, a.config_text
                if kind == "http":
                    assert f"ferry/segments/{nb}" in Handler.store
                rb, la = b.allocate_managed_buffer(4096), a.allocate_managed_buffer(4096)
                data = fill(a, la, 4096, 15)
                assert a.transfer_sync_write(nb, la, rb, 4096) == 0, (meta, a.last_error)
                assert b.read_bytes_from_buffer(rb, 4096) == data
            finally:
                a.close()
                b.close()
        assert Handler.store == {}
    finally:
        srv.shutdown()
        srv.server_close()
    p2p = TransferEngine(cluster_secret_file=SECRET)
    assert p2p.initialize_ext(HOST, "P2PHANDSHAKE", "tcp", "", "etcd") == 0, p2p.last_error
    assert 'kind = "none"' in p2p.config_text
    assert p2p.engine.name == f"{HOST}:{p2p.get_rpc_port()}", "a P2P engine is named host:rpc_port, as Mooncake's"
    p2p.close()


class _Mooncake(http.server.BaseHTTPRequestHandler):
    """A stand-in for Mooncake's Python HTTP metadata server
    (mooncake_http_metadata_server): GET/PUT/DELETE /metadata?key=K, 404
    "metadata not found", 400 for an empty key, keys that never expire."""

    store: Dict[str, bytes] = {}

    def _key(self) -> str:
        from urllib.parse import parse_qs, urlparse

        u = urlparse(self.path)
        if u.path != "/metadata":
            self._reply(404, b"404: Not Found", "text/plain")
            return ""
        key = parse_qs(u.query).get("key", [""])[0].strip()
        if not key:
            self._reply(400, b"metadata key is required")
        return key

    def _reply(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        k = self._key()
        if k:
            v = self.store.get(k)
            self._reply(200, v) if v is not None else self._reply(404, b"metadata not found")

    def do_PUT(self) -> None:  # noqa: N802
        k = self._key()
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if k:
            self.store[k] = body
            self._reply(200, b"metadata updated")

    def do_DELETE(self) -> None:  # noqa: N802
        k = self._key()
        if k:
            if self.store.pop(k, None) is None:
                self._reply(404, b"metadata not found")
            else:
                self._reply(200, b"metadata deleted")

    def log_message(self, *args) -> None:
        pass


def _serve(handler) -> Tuple[socketserver.TCPServer, str]:
    srv = http.server.ThreadingHTTPServer((HOST, 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://{HOST}:{srv.server_address[1]}/metadata"


def test_engines_on_a_mooncake_metadata_server():
    """Two engines find each other by name through Mooncake's metadata
    server protocol, survive a peer's restart, and delete their keys."""
    class Handler(_Mooncake):
        store: Dict[str, bytes] = {}

    srv, url = _serve(Handler)
    try:
        # Mooncake's segment names are "host[:port]" (the port is not bound).
        na, nb = f"{HOST}:16001", f"{HOST}:16002"
        a, b = engine(na, url), engine(nb, url)
        assert set(Handler.store) == {f"ferry/segments/{na}", f"ferry/segments/{nb}"}
        rb = b.allocate_managed_buffer(4096)
        la = a.allocate_managed_buffer(4096)
        data = fill(a, la, 4096, 4)
        assert a.transfer_sync_write(nb, la, rb, 4096) == 0
        assert b.read_bytes_from_buffer(rb, 4096) == data
        assert a.get_first_buffer_address(nb) == rb
        # The peer goes away and comes back under its name: a transfer to
        # it fails meanwhile, and the next one reaches the new engine.
        b.close()
        assert a.transfer_sync_write(nb, la, rb, 4096) < 0 and nb in a.last_error
        b = engine(nb, url)
        rb = b.allocate_managed_buffer(1 << 20)
        assert a.transfer_sync_write(nb, la, rb + 4096, 4096) == 0, a.last_error
        assert b.read_bytes_from_buffer(rb + 4096, 4096) == data
        a.close()
        b.close()
        assert Handler.store == {}, "closed engines left their keys on a server that never expires them"
    finally:
        srv.shutdown()
        srv.server_close()


def test_initialize_refuses_a_server_that_is_not_a_metadata_server():
    class Page(http.server.BaseHTTPRequestHandler):
        def _page(self) -> None:
            body = b"<html><body>It works!</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_PUT = do_DELETE = _page

        def log_message(self, *args) -> None:
            pass

    srv, url = _serve(Page)
    try:
        te = TransferEngine(cluster_secret_file=SECRET)
        assert te.initialize(f"{HOST}:16003", url, "tcp", "") < 0
        assert url in te.last_error and "not a Mooncake or Ferry metadata server" in te.last_error, te.last_error
        assert te.engine is None
    finally:
        srv.shutdown()
        srv.server_close()
