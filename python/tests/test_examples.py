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


def env() -> dict:
    e = child_env(FERRY_PLUGIN_DIR=BIN, FERRY_CLUSTER_SECRET_FILE=SECRET, PYTHONDONTWRITEBYTECODE="1")
    e.pop("KV_ENGINE", None)
    return e


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env(), capture_output=True, text=True, timeout=timeout)


def test_sglang_pattern_on_ferry():
    p = run(os.path.join(EXAMPLES, "sglang_pattern.py"))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "ferry.mooncake: 4 layers x 32 blocks" in p.stdout and "moved and verified" in p.stdout, p.stdout


def decode() -> tuple:
    d = subprocess.Popen([sys.executable, os.path.join(EXAMPLES, "kv_connector.py"), "decode", "--wait", "60"],
                         env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
