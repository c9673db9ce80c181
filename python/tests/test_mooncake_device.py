"""A vLLM/SGLang-style KV connector on ferry.mooncake with the KV cache
in (simulated) GPU memory: each side allocates its cache as device memory
of the engine's simulated device (plugins/simdev, a test tool standing
in for a GPU), maps it through the handle as a framework maps its CUDA
allocation, registers it with register_memory(ptr, len) as the
connectors do, and moves blocks with batch_transfer_sync_write,
transfer_sync_read and the *_on_cuda calls; every byte is checked."""

from __future__ import annotations

from typing import Iterator, List, Tuple

import pytest

from ferry.mooncake import TransferEngine

from test_device import SIMDEV, pattern

HOST = "127.0.0.1"
LAYERS, BLOCKS, BLOCK = 4, 32, 16 << 10  # 4 layers x 32 blocks of 16 KiB
CACHE = LAYERS * BLOCKS * BLOCK


def node() -> TransferEngine:
    te = TransferEngine(extra_config=SIMDEV)
    assert te.initialize(HOST, "P2PHANDSHAKE", "tcp", "") == 0, te.last_error
    return te


class KVCache:
    """One side's KV cache: simulated GPU memory of its engine, mapped."""

    def __init__(self, te: TransferEngine, kind: str) -> None:
        self.mem = te.engine.allocate_device(kind, CACHE)
        self.ptr = self.mem.addr
        self.map = self.mem.map()

    def block(self, layer: int, b: int) -> int:
        return self.ptr + (layer * BLOCKS + b) * BLOCK

    def bytes(self, layer: int, b: int) -> bytes:
        off = (layer * BLOCKS + b) * BLOCK
        return bytes(self.map.view[off:off + BLOCK])


@pytest.fixture
def prefill_decode() -> Iterator[Tuple[TransferEngine, KVCache, TransferEngine, KVCache, str]]:
    p, d = node(), node()
    pk, dk = KVCache(p, "cuda:0"), KVCache(d, "cuda:1")
    assert p.register_memory(pk.ptr, CACHE) == 0, p.last_error  # "*": found to be GPU memory
    assert d.register_memory(dk.ptr, CACHE, "cuda:1") == 0, d.last_error
    yield p, pk, d, dk, f"{HOST}:{d.get_rpc_port()}"
    for te, kv in ((p, pk), (d, dk)):
        assert te.unregister_memory(kv.ptr) == 0, te.last_error
        kv.map.close()
        kv.mem.free()
        te.close()


def test_kv_blocks_between_gpus(prefill_decode):
    p, pk, d, dk, session = prefill_decode
    pk.map.view[:] = pattern(CACHE, 5)
    # Prefill pushes its blocks 0..7 of every layer into decode's blocks
    # 20..27 (vLLM's write path), one request per block.
    src: List[int] = []
    dst: List[int] = []
    for layer in range(LAYERS):
        for i in range(8):
            src.append(pk.block(layer, i))
            dst.append(dk.block(layer, 20 + i))
    assert p.batch_transfer_sync_write(session, src, dst, [BLOCK] * len(src)) == 0, p.last_error
    for layer in range(LAYERS):
        for i in range(8):
            assert dk.bytes(layer, 20 + i) == pk.bytes(layer, i), (layer, i)

    # Prefill pulls one back into a free block (the read path).
    assert p.transfer_sync_read(session, pk.block(3, 31), dk.block(1, 22), BLOCK) == 0, p.last_error
    assert pk.bytes(3, 31) == pk.bytes(1, 2)

    # The stream-ordered calls, on the default stream.
    p.batch_transfer_write_on_cuda(session, [pk.block(0, 30), pk.block(2, 30)], [dk.block(0, 0), dk.block(0, 1)],
                                   [BLOCK, BLOCK], 0)
    assert dk.bytes(0, 0) == pk.bytes(0, 30) and dk.bytes(0, 1) == pk.bytes(2, 30)
    p.transfer_read_on_cuda(session, pk.block(0, 29), dk.block(0, 1), BLOCK)
    assert pk.bytes(0, 29) == pk.bytes(2, 30)


def test_bad_gpu_registrations(prefill_decode):
    p, pk, d, dk, session = prefill_decode
    host = bytearray(4096)
    import ctypes

    addr = ctypes.addressof((ctypes.c_char * 4096).from_buffer(host))
    spare = p.engine.allocate_device("cuda:0", 1 << 20)  # not registered
    cases = [
        ((addr, 4096, "cuda:0"), "not device memory"),
        ((spare.addr, 4096, "cuda:1"), "is on cuda:0"),
        ((spare.addr, 4096, "rocm:0"), "no device plugin serves rocm"),
        ((spare.addr, 4096, "npu:0"), "location 'npu:0'"),
        ((pk.ptr, 4096, "cuda:0"), "overlaps device memory registered already"),
    ]
    for args, says in cases:
        assert p.register_memory(*args) < 0, args
        assert says in p.last_error, (args, p.last_error)
    spare.free()
    with pytest.raises(RuntimeError, match="CUDA driver"):
        p.transfer_write_on_cuda(session, pk.block(0, 0), dk.block(0, 0), BLOCK, stream_ptr=0x1234)
    with pytest.raises(RuntimeError, match="transfer_write_on_cuda"):
        p.transfer_write_on_cuda(session, pk.block(0, 0), dk.ptr + CACHE, BLOCK)
