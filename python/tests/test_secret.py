"""A cluster secret given in memory (Engine(cluster_secret=...)): two
engines that share one talk, sign and authenticate, and warn of nothing;
an engine without any secret warns once, in one line; a bad secret is
refused before anything starts."""

import os

import pytest

import ferry
from conftest import BIN


def hcl(name: str) -> str:
    """An engine with no cluster_secret_file: peer-to-peer, shm and tcp."""
    return (
        f'name = "{name}"\nplugin_dir = "{BIN}"\nmetastore {{\n  kind = "none"\n}}\n'
        'plugin "shm" {}\nplugin "tcp" {\n  config {\n    listen = ["127.0.0.1:0"]\n  }\n}\n'
    )


def test_shared_secret_in_memory_moves_bytes_quietly(capfd):
    secret = ferry.new_cluster_secret()
    assert len(secret) == 64 and secret != ferry.new_cluster_secret()
    tag = os.getpid()
    with ferry.Engine(config_text=hcl(f"py-sec-a-{tag}"), cluster_secret=secret) as a, \
            ferry.Engine(config_text=hcl(f"py-sec-b-{tag}"), cluster_secret=secret.decode()) as b:
        dst = b.allocate(4096)
        b.register(dst, ferry.Perm.REMOTE_READ_WRITE)
        src = a.allocate(4096)
        a.register(src)
        src.view[:] = bytes(range(256)) * 16
        seg = a.open_segment(b.rpc_address)
        a.write(src, seg, seg.buffers[0].base)
        assert bytes(dst.view) == bytes(src.view)
    assert "[WARN]" not in capfd.readouterr().err


def test_other_secret_is_refused():
    tag = os.getpid()
    with ferry.Engine(config_text=hcl(f"py-sec-c-{tag}"), cluster_secret=ferry.new_cluster_secret()) as a, \
            ferry.Engine(config_text=hcl(f"py-sec-d-{tag}"), cluster_secret=ferry.new_cluster_secret()) as b:
        with pytest.raises(ferry.FerryError):
            a.open_segment(b.rpc_address)


def test_no_secret_warns_once(capfd):
    with ferry.Engine(config_text=hcl(f"py-nosec-{os.getpid()}")):
        pass
    warns = [l for l in capfd.readouterr().err.splitlines() if "[WARN]" in l]
    assert len(warns) == 1 and "no cluster secret" in warns[0] and "the shm and tcp plugins" in warns[0], warns


def test_bad_secret_is_refused():
    with pytest.raises(ferry.InvalidRequest, match="the cluster secret is 5 bytes; give at least 16"):
        ferry.Engine(config_text=hcl("py-short"), cluster_secret=b"short")
    with pytest.raises(TypeError, match="cluster_secret must be bytes or str"):
        ferry.Engine(config_text=hcl("py-int"), cluster_secret=1234)
