"""The wheel users install: built from bin/ as `make wheel` builds it,
pip-installed into a fresh venv in a temporary directory, and used from
there, outside the checkout, with nothing pointing back at it: `ferry
version` and `python -m ferry doctor` find the wheel's library and
plugins; the KV-connector example moves numpy KV blocks between two
processes over the wheel's plugins; and test files of this suite run
against the installed package (FERRY_TEST_INSTALLED=1; by default
test_two_engines.py, FERRY_TEST_WHEEL_SUITE=all runs every one, as
`make pytest-installed` does)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

import pytest

from conftest import HERE, PYTHON, REPO, SECRET

def run(cmd, cwd, env, timeout=300) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-4000:]}"
    return p


@pytest.fixture(scope="module")
def venv():
    """(python, directory) of a fresh venv with the wheel installed; the
    venv sees Debian's cffi, numpy and pytest (--system-site-packages), and
    no package index is asked."""
    with tempfile.TemporaryDirectory(prefix="ferry-wheel-test-") as tmp:
        env = outside_env()
        wheel = run([sys.executable, os.path.join(PYTHON, "build_wheel.py"), "--bin", os.path.join(REPO, "bin"),
                     "--out", os.path.join(tmp, "dist")], tmp, env).stdout.strip().splitlines()[-1]
        wheel = os.path.join(tmp, wheel) if not os.path.isabs(wheel) else wheel
        assert os.path.basename(wheel).startswith("ferry_transfer_engine-") and wheel.endswith("-linux_x86_64.whl"), wheel
        run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", os.path.join(tmp, "venv")], tmp, env)
        py = os.path.join(tmp, "venv", "bin", "python")
        run([py, "-m", "pip", "install", "--no-index", "--disable-pip-version-check", "-q", wheel], tmp, env)
        work = os.path.join(tmp, "work")
        os.mkdir(work)
        yield py, os.path.join(tmp, "venv"), work


def outside_env(**extra: str) -> dict:
    """The environment with nothing that leads to the checkout: no
    PYTHONPATH, FERRY_LIB or FERRY_PLUGIN_DIR."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "FERRY_LIB", "FERRY_PLUGIN_DIR", "FERRY_TEST_PLUGINS", "FERRY_TEST_INSTALLED")}
    env.update(PYTHONDONTWRITEBYTECODE="1", FERRY_LOG_LEVEL="error", **extra)
    return env


def test_the_installed_package_finds_its_own_library_and_plugins(venv):
    py, vdir, work = venv
    got = json.loads(run([os.path.join(vdir, "bin", "ferry"), "version", "--json"], work, outside_env()).stdout)
    pkg = got["package_dir"]
    assert pkg.startswith(vdir + os.sep) and not pkg.startswith(REPO), got
    assert got["library"] == os.path.join(pkg, "bin", "libferry.so"), got
    assert got["plugin_dir"] == os.path.join(pkg, "bin"), got
    assert got["plugins"] == ["nvlink", "shm", "tcp"] and got["devices"] == ["cuda", "rocm"], got
    assert got["command"] == os.path.join(pkg, "bin", "ferry"), got
    assert got["abi"] >= got["abi_needed"], got
    fast_built = os.path.exists(os.path.join(PYTHON, "ferry", "_fast" + sysconfig.get_config_var("EXT_SUFFIX")))
    assert got["fast"] == fast_built, f"ferry._fast: built in the checkout {fast_built}, loaded from the wheel {got['fast']}"

    # The doctor's verdict on this machine is its own (a missing GPU
    # driver warns); what is checked here is that it found the wheel's
    # pieces and moved bytes through them.
    p = subprocess.run([py, "-m", "ferry", "doctor", "--json"], cwd=work, env=outside_env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    rows = {(r["area"], r["item"]): r for r in map(json.loads, p.stdout.splitlines())}
    for key in (("python", "library"), ("python", "plugins"), ("python", "engine shm"), ("python", "engine tcp"),
                ("plugin", "tcp"), ("plugin", "shm")):
        assert rows.get(key, {}).get("status") == "ok", f"{key}: {rows.get(key)}\n{p.stdout[-3000:]}"
    assert os.path.join(pkg, "bin", "ferry-plugin-tcp") in rows[("plugin", "tcp")]["detail"], rows[("plugin", "tcp")]


def test_two_processes_move_numpy_kv_blocks_from_the_installed_package(venv):
    """examples/kv_connector.py, copied outside the checkout, as a decode
    and a prefill process of the venv's Python: numpy KV caches in Ferry
    memory, blocks written over the wheel's plugins, checked by decode."""
    py, _, work = venv
    script = shutil.copy(os.path.join(PYTHON, "examples", "kv_connector.py"), work)
    env = outside_env(FERRY_CLUSTER_SECRET_FILE=SECRET)
    d = subprocess.Popen([py, script, "decode", "--wait", "60"], cwd=work, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = d.stdout.readline()
        assert line, f"decode printed nothing: {d.stderr.read()[-2000:]}"
        where = json.loads(line)
        run([py, script, "prefill", "--decode", where["addr"], "--base", str(where["base"]), "--mode", "layers"], work, env, 120)
        out, err = d.communicate(timeout=60)
        assert d.returncode == 0, err[-2000:]
        assert "decode: verified 8 blocks x 4 layers from kv-prefill (layers)" in out, out
    finally:
        if d.poll() is None:
            d.kill()
            d.wait()


def test_the_suite_runs_against_the_installed_package(venv):
    py, _, work = venv
    which = os.environ.get("FERRY_TEST_WHEEL_SUITE", "test_two_engines.py")
    files = [HERE] if which == "all" else [os.path.join(HERE, f) for f in which.split()]
    env = outside_env(FERRY_TEST_INSTALLED="1")
    env.pop("FERRY_LOG_LEVEL")
    out = run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--ignore={os.path.join(HERE, 'test_wheel.py')}", *files],
              work, env, 900).stdout
    assert " passed" in out and " failed" not in out, out[-3000:]
    print(f"installed package: {out.strip().splitlines()[-1]}")
