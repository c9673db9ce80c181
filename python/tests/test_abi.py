"""The package's cdef against include/ferry.h: the same functions with the
same types, the same structs and constants."""

import os
import re

import cffi

from conftest import REPO
from ferry import _ffi

HEADER = os.path.join(REPO, "include", "ferry.h")


def header_ffi() -> cffi.FFI:
    src = open(HEADER).read()
    src = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
    lines = [l for l in src.splitlines() if not l.lstrip().startswith("#") and l.strip() not in ('extern "C" {', "}")]
    f = cffi.FFI()
    f.cdef("\n".join(lines))
    return f


def test_cdef_matches_header(library):
    hdr = header_ffi()
    mine = _ffi.ffi
    a, b = hdr.dlopen(library), _ffi.lib()
    names = sorted(n for n in dir(a) if n.startswith("ferry_") or n.startswith("FERRY_"))
    assert names == sorted(n for n in dir(b) if n.startswith("ferry_") or n.startswith("FERRY_")), \
        "the header and python/ferry/_ffi.py declare different names: copy the header's declarations into CDEF"
    for n in names:
        x, y = getattr(a, n), getattr(b, n)
        if isinstance(x, int):
            assert x == y, n
        else:
            assert hdr.typeof(x).cname == mine.typeof(y).cname, n
    for t in ("ferry_request_t", "ferry_task_status_t", "ferry_batch_status_t", "ferry_segment_info_t",
              "ferry_buffer_info_t", "ferry_notif_t", "ferry_notif_list_t", "ferry_block_layout_t",
              "ferry_block_request_t"):
        assert hdr.sizeof(t) == mine.sizeof(t), t
        for f, _ in hdr.typeof(t).fields:
            assert hdr.offsetof(t, f) == mine.offsetof(t, f), f"{t}.{f}"
