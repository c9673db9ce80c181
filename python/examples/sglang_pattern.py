"""Same connector pattern, two engines.

This script moves a KV cache the way SGLang's mooncake disaggregation
connector does (python/sglang/srt/disaggregation/mooncake/conn.py): each
side registers one buffer per layer (``kv_data_ptrs``, ``kv_item_lens``),
the block indices to send are grouped into runs contiguous on both sides,
and each layer is one ``batch_transfer_sync_write`` of the runs' addresses,
issued from a thread pool, to the decode side's session "host:rpc_port"
(peer-to-peer, "P2PHANDSHAKE"). Then it checks the bytes.

The import below is the one line that picks the engine:

    python3 python/examples/sglang_pattern.py                        # ferry.mooncake
    KV_ENGINE=mooncake python3 python/examples/sglang_pattern.py      # mooncake.engine, where installed

Both runs use the same calls with the same arguments; protocol "tcp" so
that Mooncake's runs without RDMA devices. It prints one line and exits 0
when every byte arrived where it should and nothing else was touched.
"""

from __future__ import annotations

import concurrent.futures
import os
import sys
from typing import List, Tuple

import numpy as np

if os.environ.get("KV_ENGINE", "ferry") == "mooncake":
    from mooncake.engine import TransferEngine  # type: ignore[import-not-found]
else:
    try:
        from ferry.mooncake import TransferEngine  # installed (the wheel), or on PYTHONPATH
    except ImportError:  # run from a checkout: its python/ package
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
        from ferry.mooncake import TransferEngine

LAYERS = int(os.environ.get("KV_LAYERS", "4"))
BLOCKS = int(os.environ.get("KV_BLOCKS", "64"))
ITEM_LEN = int(os.environ.get("KV_ITEM_LEN", "4096"))  # bytes of one block of one layer
HOST = "127.0.0.1"


def group_concurrent_contiguous(src: np.ndarray, dst: np.ndarray) -> Tuple[List[np.ndarray], List[np.ndarray]]:
    """Split the index pairs into runs that are contiguous on both sides,
    as SGLang does before it computes addresses."""
    if src.size == 0:
        return [], []
    brk = np.where((np.diff(src) != 1) | (np.diff(dst) != 1))[0] + 1
    return np.split(src, brk), np.split(dst, brk)


def block(layer: int, idx: int) -> np.ndarray:
    """The bytes prefill holds in block idx of layer."""
    return ((np.arange(ITEM_LEN, dtype=np.uint32) * 7 + layer * 131 + idx * 29) & 0xFF).astype(np.uint8)


def main() -> int:
    prefill, decode = TransferEngine(), TransferEngine()
    for name, te in (("prefill", prefill), ("decode", decode)):
        if te.initialize(HOST, "P2PHANDSHAKE", "tcp", "") != 0:
            print(f"{name}: initialize failed", file=sys.stderr)
            return 1
    session = f"{HOST}:{decode.get_rpc_port()}"

    src = [np.concatenate([block(layer, i) for i in range(BLOCKS)]) for layer in range(LAYERS)]
    dst = [np.zeros(BLOCKS * ITEM_LEN, dtype=np.uint8) for _ in range(LAYERS)]
    for te, bufs in ((prefill, src), (decode, dst)):
        for b in bufs:
            if te.register_memory(b.ctypes.data, b.nbytes) != 0:
                print("register_memory failed", file=sys.stderr)
                return 1
    kv_data_ptrs = [b.ctypes.data for b in src]
    dst_kv_ptrs = [b.ctypes.data for b in dst]
    kv_item_lens = [ITEM_LEN] * LAYERS

    rng = np.random.default_rng(7)
    n = BLOCKS // 2
    prefill_kv_indices = np.sort(rng.choice(BLOCKS, n, replace=False)).astype(np.int32)
    dst_kv_indices = np.sort(rng.choice(BLOCKS, n, replace=False)).astype(np.int32)
    prefill_blocks, dst_blocks = group_concurrent_contiguous(prefill_kv_indices, dst_kv_indices)

    def process_layer(src_ptr: int, dst_ptr: int, item_len: int) -> int:
        src_addrs, dst_addrs, lengths = [], [], []
        for p, d in zip(prefill_blocks, dst_blocks):
            src_addrs.append(src_ptr + int(p[0]) * item_len)
            dst_addrs.append(dst_ptr + int(d[0]) * item_len)
            lengths.append(item_len * len(p))
        return prefill.batch_transfer_sync_write(session, src_addrs, dst_addrs, lengths)

    with concurrent.futures.ThreadPoolExecutor(max_workers=LAYERS) as ex:
        futures = [ex.submit(process_layer, s, d, n) for s, d, n in zip(kv_data_ptrs, dst_kv_ptrs, kv_item_lens)]
        statuses = [f.result() for f in futures]
    if any(s != 0 for s in statuses):
        print(f"batch_transfer_sync_write statuses {statuses}", file=sys.stderr)
        return 1

    moved = dict(zip(dst_kv_indices.tolist(), prefill_kv_indices.tolist()))
    for layer in range(LAYERS):
        got = dst[layer].reshape(BLOCKS, ITEM_LEN)
        for d in range(BLOCKS):
            want = block(layer, moved[d]) if d in moved else np.zeros(ITEM_LEN, dtype=np.uint8)
            if not np.array_equal(got[d], want):
                print(f"layer {layer} block {d}: wrong bytes", file=sys.stderr)
                return 1
    for te, bufs in ((prefill, src), (decode, dst)):
        for b in bufs:
            te.unregister_memory(b.ctypes.data)
    print(f"{TransferEngine.__module__}: {LAYERS} layers x {n} blocks ({len(prefill_blocks)} runs) of {ITEM_LEN} bytes moved and verified")
    for te in (prefill, decode):
        if hasattr(te, "close"):
            te.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
