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
              "ferry_block_request_t", "ferry_device_handle_t", "ferry_device_memory_t"):
        assert hdr.sizeof(t) == mine.sizeof(t), t
        for f, _ in hdr.typeof(t).fields:
            assert hdr.offsetof(t, f) == mine.offsetof(t, f), f"{t}.{f}"


def test_request_alias_has_the_header_layout():
    """ferry_request_py_t (integer addresses) is ferry_request_t's layout."""
    hdr = header_ffi()
    mine = _ffi.ffi
    assert mine.sizeof("ferry_request_py_t") == hdr.sizeof("ferry_request_t")
    fields = [f for f, _ in hdr.typeof("ferry_request_t").fields]
    assert fields == [f for f, _ in mine.typeof("ferry_request_py_t").fields]
    for f in fields:
        assert mine.offsetof("ferry_request_py_t", f) == hdr.offsetof("ferry_request_t", f), f


def test_packed_request_head_has_the_header_layout():
    """engine._REQ_HEAD writes ferry_request_t's fields up to
    transport_hint at their offsets."""
    from ferry import engine

    hdr = header_ffi()
    names = ["opcode", "priority", "source", "target_id", "reserved", "target_offset", "length", "deadline_ns", "transport_hint"]
    assert engine._REQ_HEAD.size == hdr.offsetof("ferry_request_t", "policy_name")
    r = hdr.new("ferry_request_t *")
    vals = [1, 2, 0x1234, 7, 0, 0x5678, 4096, 99, 0]
    engine._REQ_HEAD.pack_into(hdr.buffer(r), 0, *vals)
    got = [r.opcode, r.priority, int(hdr.cast("uintptr_t", r.source)), r.target_id, r.reserved, r.target_offset,
           r.length, r.deadline_ns, int(hdr.cast("uintptr_t", r.transport_hint))]
    assert got == vals, dict(zip(names, got))
