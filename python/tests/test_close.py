"""Closing an engine whose metastore is gone: `with Engine(...)` ends
without raising when the metastore process was stopped first (the engine
is closed; its descriptor expires with its lease), and still raises when
the metastore answers and refuses."""

from __future__ import annotations

import logging
import subprocess
from urllib.parse import parse_qs, urlparse

import pytest

import ferry
from conftest import FERRY, SECRET, config
from test_mooncake import _Mooncake, _serve


def http_metastore(url: str) -> str:
    return f'kind = "http"\n  url = "{url}"'


@pytest.fixture
def metad():
    """A real `ferry metad` process on a free port; yields (process, url)."""
    p = subprocess.Popen([FERRY, "metad", "--listen", "127.0.0.1:0", "--cluster-secret-file", SECRET],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = p.stdout.readline()
    if "serving " not in line:
        p.kill()
        pytest.fail(f"ferry metad did not say where it serves: {line!r}{p.stdout.read()[-2000:]}")
    yield p, line.split("serving ", 1)[1].strip()
    if p.poll() is None:
        p.kill()
    p.wait()


def test_with_engine_ends_quietly_after_the_metastore_stopped(metad, caplog):
    proc, url = metad
    with caplog.at_level(logging.WARNING, logger="ferry"):
        with ferry.Engine(config_text=config("py-metad-gone", ("tcp",), http_metastore(url))) as e:
            assert e.metastore_url == url
            with e.open_segment("py-metad-gone") as own:  # published there: found by name
                assert own.name == "py-metad-gone"
            proc.terminate()
            assert proc.wait(timeout=30) is not None
    assert e.closed
    warned = [r for r in caplog.records if r.name == "ferry" and r.levelno == logging.WARNING]
    assert len(warned) == 1, caplog.text
    msg = warned[0].getMessage()
    assert "py-metad-gone" in msg and "could not be reached" in msg and url in msg, msg
    e.close()  # a no-op, as before


def test_close_still_raises_when_the_metastore_refuses():
    """A metastore that answers the engine's DELETE with 500 is not gone:
    close raises, with the server's answer, and the engine is closed."""
    class Refusing(_Mooncake):
        store: dict = {}

        def do_DELETE(self) -> None:  # noqa: N802
            if parse_qs(urlparse(self.path).query).get("key", [""])[0].startswith("ferry/segments/"):
                self._reply(500, b"disk on fire", "text/plain")
            else:
                super().do_DELETE()

    srv, url = _serve(Refusing)
    try:
        e = ferry.Engine(config_text=config("py-metad-refuses", ("tcp",), http_metastore(url)))
        assert "ferry/segments/py-metad-refuses" in Refusing.store
        with pytest.raises(ferry.FerryError, match="500") as got:
            e.close()
        assert not isinstance(got.value, ferry.Unavailable)
        assert e.closed
        e.close()
    finally:
        srv.shutdown()
        srv.server_close()
