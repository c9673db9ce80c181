"""Shared set-up of the ferry package's tests: the package from this
checkout, the library and plugins from the repository's bin/ (make build),
and engine configurations as HCL text.

With FERRY_TEST_INSTALLED=1 they test an installed package instead (the
wheel, pip-installed into the interpreter that runs pytest): `import
ferry` must find it outside this checkout, with its own library, and the
engines take the wheel's plugins, plus the test-only ones (fault, simdev)
from bin/. python/tests/test_wheel.py runs them so.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import sys
import tempfile
from typing import Iterable

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = os.path.dirname(HERE)
REPO = os.path.dirname(PYTHON)
INSTALLED = os.environ.get("FERRY_TEST_INSTALLED") == "1"
#: What a child process of a test puts first on sys.path to import the
#: package under test: the checkout's python/, or nothing when installed.
CHECKOUT_PATH = [] if INSTALLED else [PYTHON]
sys.path[:0] = CHECKOUT_PATH

import ferry  # noqa: E402
from ferry import _ffi  # noqa: E402

if INSTALLED:
    if os.path.abspath(ferry.__file__).startswith(REPO + os.sep):
        raise RuntimeError(f"FERRY_TEST_INSTALLED=1, but ferry was imported from the checkout ({ferry.__file__}): run pytest "
                           "with the interpreter the wheel is installed in, from outside the checkout, without PYTHONPATH")
    # The plugins the engines of the tests start: the wheel's, and the
    # test-only ones it does not carry from bin/, linked into one directory
    # (made once; child processes of the tests find it in the environment).
    if "FERRY_TEST_PLUGINS" not in os.environ:
        _plugins = tempfile.mkdtemp(prefix="ferry-py-plugins-")
        atexit.register(shutil.rmtree, _plugins, True)
        for d in (_ffi.bundled_dir(), os.path.join(REPO, "bin")):
            for n in sorted(os.listdir(d)) if d else ():
                if n.startswith(("ferry-plugin-", "ferry-device-")) and not os.path.exists(os.path.join(_plugins, n)):
                    os.symlink(os.path.join(d, n), os.path.join(_plugins, n))
        os.environ["FERRY_TEST_PLUGINS"] = _plugins
    BIN = os.environ["FERRY_TEST_PLUGINS"]
else:
    BIN = os.path.join(REPO, "bin")

# An installed package has no checkout's wheel to build: test_wheel.py is
# what runs the suite so.
collect_ignore = ["test_wheel.py"] if INSTALLED else []
os.environ.setdefault("FERRY_PLUGIN_DIR", BIN)
# One cluster secret for every engine of the run, this process's and the
# peers' (the environment reaches them): descriptors, blobs, control calls
# and plugin connections are authenticated, as in a real deployment.
if "FERRY_TEST_SECRET_FILE" not in os.environ:
    fd, _secret = tempfile.mkstemp(prefix="ferry-py-secret-")
    os.write(fd, os.urandom(32).hex().encode())
    os.close(fd)
    os.environ["FERRY_TEST_SECRET_FILE"] = _secret
    atexit.register(os.unlink, _secret)
SECRET = os.environ["FERRY_TEST_SECRET_FILE"]
#: The ferry command beside the library under test (bin/ferry, or the
#: wheel's); finding it loads the library, after the environment is set.
FERRY = os.path.join(os.path.dirname(ferry.library_path()), "ferry")


def ipv6_loopback() -> bool:
    """Whether this machine can bind IPv6 loopback (::1)."""
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def child_env(**extra: str) -> dict:
    """The environment of a child Python process that imports the package
    under test: PYTHONPATH is the checkout's python/, or unset when the
    tests run against the installed package."""
    env = dict(os.environ, **extra)
    if INSTALLED:
        env.pop("PYTHONPATH", None)
    else:
        env["PYTHONPATH"] = PYTHON
    return env


def config(name: str, plugins: Iterable[str] = ("shm", "tcp"), metastore: str = 'kind = "none"', extra: str = "") -> str:
    """An engine's HCL: peer-to-peer (no metastore) unless told, its
    plugins from bin/, tcp on loopback."""
    blocks = []
    for p in plugins:
        body = 'config {\n    listen = ["127.0.0.1:0"]\n  }' if p == "tcp" else ""
        blocks.append(f'plugin "{p}" {{\n  {body}\n}}')
    return (
        f'name = "{name}"\nplugin_dir = "{BIN}"\ncluster_secret_file = "{SECRET}"\nmetastore {{\n  {metastore}\n}}\n'
        + "\n".join(blocks) + "\n" + extra
    )


@pytest.fixture(scope="session", autouse=True)
def library() -> str:
    """The library must be there: a missing one fails the run, it does not
    skip it (make build makes bin/libferry.so). An installed package uses
    its own."""
    path = ferry.library_path()
    if INSTALLED:
        assert not path.startswith(REPO + os.sep), f"the installed package loaded the checkout's library {path}"
    return path


@pytest.fixture
def engine(request: pytest.FixtureRequest):
    """One engine with shm and tcp, named after the test."""
    name = "py-" + request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:60]
    e = ferry.Engine(config_text=config(name))
    yield e
    e.close()
