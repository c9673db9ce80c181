"""ferry.mooncake peer-to-peer ("P2PHANDSHAKE") with several engines on
one host, as NIXL and SGLang run them (one agent per GPU): three engines
in three processes, this one the initiator, two targets
(mooncake_target.py). Each engine is named "host:rpc_port", as Mooncake
names a P2P engine, so the two targets are two segments; the initiator
writes verified bytes to them in turn, many rounds, reads each back, and
at the end each target checks its whole buffer in its own memory."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from conftest import HERE, SECRET, child_env, ipv6_loopback

from ferry.mooncake import TransferEngine

sys.path.insert(0, HERE)
from mooncake_target import SIZE, session  # noqa: E402

ROUNDS = 200
SLOT = 16 << 10  # each round writes up to one slot of the target's buffer


@pytest.fixture
def targets():
    procs = []

    def start(host: str, protocol: str) -> dict:
        p = subprocess.Popen([sys.executable, os.path.join(HERE, "mooncake_target.py"), host, protocol],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env())
        procs.append(p)
        line = p.stdout.readline()
        assert line, f"target {host} exited ({p.wait()}) before it said where it is"
        where = json.loads(line)
        where["proc"] = p
        return where

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def digest(t: dict) -> str:
    p = t["proc"]
    p.stdin.write("digest\n")
    p.stdin.flush()
    line = p.stdout.readline().strip()
    assert line, f"target {t['session']} exited ({p.poll()}) before it gave its digest"
    return line


@pytest.mark.parametrize("host,protocol", [("127.0.0.1", "tcp"), ("127.0.0.1", "rdma"), ("::1", "tcp")])
def test_one_initiator_two_targets_on_one_host(targets, host, protocol):
    """protocol "tcp" runs Ferry's tcp alone; any other (Mooncake's
    "rdma") shm and tcp, and Ferry picks shm between processes of one
    host. "::1" is a bare IPv6 host, as SGLang passes it: the targets are
    "[::1]:port"."""
    if ":" in host and not ipv6_loopback():
        if os.environ.get("CI"):
            pytest.fail("no IPv6 loopback (::1) on this machine")
        pytest.skip("no IPv6 loopback (::1) on this machine")
    ts = [targets(host, protocol), targets(host, protocol)]
    assert ts[0]["session"] != ts[1]["session"]

    te = TransferEngine(cluster_secret_file=SECRET)
    assert te.initialize(host, "P2PHANDSHAKE", protocol, "") == 0, te.last_error
    try:
        src, back = te.allocate_managed_buffer(SLOT), te.allocate_managed_buffer(SLOT)
        assert src and back, te.last_error
        for t in ts:
            assert te.get_first_buffer_address(t["session"]) == t["addr"], f"{t['session']}: {te.last_error}"
        images = [bytearray(SIZE), bytearray(SIZE)]
        slots = SIZE // SLOT
        for i in range(ROUNDS):
            k = i % 2
            t, image = ts[k], images[k]
            n = 512 + (i * 977) % (SLOT - 512)
            off = ((i // 2) % slots) * SLOT
            data = os.urandom(n)
            assert te.write_bytes_to_buffer(src, data, n) == 0
            dst = t["addr"] + off
            if i % 4 < 2:
                rc = te.transfer_sync_write(t["session"], src, dst, n)
            else:
                half = n // 2
                rc = te.batch_transfer_sync_write(t["session"], [src, src + half], [dst, dst + half], [half, n - half])
            assert rc == 0, f"round {i}: write of {n} bytes to {t['session']} failed: {te.last_error}"
            image[off:off + n] = data
            assert te.transfer_sync_read(t["session"], back, dst, n) == 0, f"round {i}: read back from {t['session']}: {te.last_error}"
            assert te.read_bytes_from_buffer(back, n) == data, f"round {i}: {t['session']} holds other bytes than were written"
        for t, image in zip(ts, images):
            assert digest(t) == hashlib.sha256(image).hexdigest(), f"{t['session']}: its buffer is not what was written to it"
        # Mooncake names a P2P engine host:rpc_port ([v6]:port), the name
        # a caller builds from the target's get_rpc_port.
        assert te.engine.name == session(host, te.get_rpc_port())
        for t in ts:
            assert t["name"] == t["session"], t
            assert t["self_addr"] == t["addr"], f"{t['session']}: its own first buffer is {t['self_addr']}, want {t['addr']}"
    finally:
        te.close()
    for t in ts:
        t["proc"].stdin.close()
        assert t["proc"].wait(timeout=60) == 0


def test_p2p_port_taken_before_the_engine_binds_it(monkeypatch):
    """initialize picks a P2P engine's port free, then the engine binds
    it: a port another process took in between is picked again; one
    that stays taken fails initialize with the bind's error."""
    import socket

    import ferry.mooncake as mc

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        real, picks = mc._free_port, []

        def once_taken(host: str) -> int:
            picks.append(host)
            return taken if len(picks) == 1 else real(host)

        monkeypatch.setattr(mc, "_free_port", once_taken)
        te = TransferEngine(cluster_secret_file=SECRET)
        assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0, te.last_error
        try:
            assert picks == ["127.0.0.1", "127.0.0.1"]
            assert te.get_rpc_port() != taken and te.engine.name == f"127.0.0.1:{te.get_rpc_port()}"
        finally:
            te.close()

        monkeypatch.setattr(mc, "_free_port", lambda host: taken)
        te = TransferEngine(cluster_secret_file=SECRET)
        assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") < 0
        assert "address already in use" in te.last_error and f"127.0.0.1:{taken}" in te.last_error, te.last_error
        assert te.engine is None
