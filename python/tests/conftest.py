"""Shared set-up of the ferry package's tests: the package from this
checkout, the library and plugins from the repository's bin/ (make build),
and engine configurations as HCL text."""

from __future__ import annotations

import atexit
import os
import sys
import tempfile
from typing import Iterable

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = os.path.dirname(HERE)
REPO = os.path.dirname(PYTHON)
BIN = os.path.join(REPO, "bin")

sys.path.insert(0, PYTHON)
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

import ferry  # noqa: E402


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
    skip it (make build makes bin/libferry.so)."""
    return ferry.library_path()


@pytest.fixture
def engine(request: pytest.FixtureRequest):
    """One engine with shm and tcp, named after the test."""
    name = "py-" + request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:60]
    e = ferry.Engine(config_text=config(name))
    yield e
    e.close()
