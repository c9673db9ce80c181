"""The Python examples run as they are documented: the SGLang-pattern
script against ferry.mooncake, and the KV connector's prefill and decode
as two processes in both of its modes, plus a bad block index."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import BIN, PYTHON, SECRET, child_env

EXAMPLES = os.path.join(PYTHON, "examples")


def env(secret: bool = True) -> dict:
    e = child_env(FERRY_PLUGIN_DIR=BIN, FERRY_CLUSTER_SECRET_FILE=SECRET, PYTHONDONTWRITEBYTECODE="1")
    e.pop("KV_ENGINE", None)
    if not secret:
        e.pop("FERRY_CLUSTER_SECRET_FILE")
    return e


def run(*args: str, timeout: float = 120, secret: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env(secret), capture_output=True, text=True, timeout=timeout)


def test_sglang_pattern_on_ferry():
    p = run(os.path.join(EXAMPLES, "sglang_pattern.py"))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "ferry.mooncake: 4 layers x 32 blocks" in p.stdout and "moved and verified" in p.stdout, p.stdout


def decode(secret: bool = True) -> tuple:
    d = subprocess.Popen([sys.executable, os.path.join(EXAMPLES, "kv_connector.py"), "decode", "--wait", "60"],
                         env=env(secret), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = d.stdout.readline()
    if not line:
        d.kill()
        pytest.fail(f"decode printed nothing: {d.stderr.read()[-2000:]}")
    return d, json.loads(line)


@pytest.mark.parametrize("mode", ["layers", "prepared"])
def test_kv_connector(mode):
    d, where = decode()
    try:
        p = run(os.path.join(EXAMPLES, "kv_connector.py"), "prefill", "--decode", where["addr"],
                "--base", str(where["base"]), "--mode", mode)
        assert p.returncode == 0, p.stderr[-2000:]
        out, err = d.communicate(timeout=60)
        assert d.returncode == 0, err[-2000:]
        assert f"decode: verified 8 blocks x 4 layers from kv-prefill ({mode}); the other 24 untouched" in out, out
    finally:
        if d.poll() is None:
            d.kill()
            d.wait()


def test_kv_connector_refuses_a_block_past_the_layer():
    d, where = decode()
    try:
        p = run(os.path.join(EXAMPLES, "kv_connector.py"), "prefill", "--decode", where["addr"],
                "--base", str(where["base"]), "--src", "0,1", "--dst", "5,32")
        assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
        assert "out of 0..31: [32]" in p.stderr, p.stderr[-2000:]
        assert "notified" not in p.stdout
    finally:
        d.kill()
        d.wait()


def test_kv_connector_generates_a_shared_secret():
    """Without $FERRY_CLUSTER_SECRET_FILE decode generates the run's secret
    and names its file; prefill takes it: nothing warns, and the file goes
    with decode."""
    d, where = decode(secret=False)
    try:
        assert where["secret_file"] != SECRET and os.stat(where["secret_file"]).st_mode & 0o077 == 0, where
        p = run(os.path.join(EXAMPLES, "kv_connector.py"), "prefill", "--decode", where["addr"],
                "--base", str(where["base"]), "--secret-file", where["secret_file"], secret=False)
        assert p.returncode == 0, p.stderr[-2000:]
        out, err = d.communicate(timeout=60)
        assert d.returncode == 0 and "decode: verified 8 blocks" in out, err[-2000:]
        assert "[WARN]" not in p.stderr + err, p.stderr + err
        assert not os.path.exists(where["secret_file"])
    finally:
        if d.poll() is None:
            d.kill()
            d.wait()
