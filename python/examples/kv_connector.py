"""A KV-cache connector on Ferry's own API: a prefill process sends a
request's KV blocks to a decode process.

Both sides hold a KV cache of LAYERS x BLOCKS blocks of BLOCK_SIZE bytes in
Ferry memory (one allocation, layer after layer). Decode registers its
cache for peers' writes and prints where it is; prefill fills its own,
opens decode's segment, moves a list of block indices (its blocks ->
decode's free blocks) and tells decode, with a notification, once every
block landed. Decode then checks each block it was sent and that no other
block changed.

Prefill moves the blocks in one of two ways:

* ``--mode layers``: one batch per layer, as a model produces them, each
  the runs of blocks contiguous on both sides (one task per run); it waits
  for every layer, then notifies.
* ``--mode prepared``: one prepared block list of both layouts
  (:meth:`ferry.Engine.prepare_blocks`, checked once) and one submission
  of every layer's index pairs; its notification goes with the batch
  (``submit(..., notify=...)`` is not used: block submissions carry
  none), sent when the batch is done.

Run it as two processes (python/tests/test_kv_connector.py does)::

    python3 kv_connector.py decode            # prints {"addr": ..., "base": ..., "secret_file": ...}
    python3 kv_connector.py prefill --decode ADDR --base BASE --secret-file FILE --mode prepared

Both engines share a cluster secret, so that they sign and authenticate
what they tell each other: the file $FERRY_CLUSTER_SECRET_FILE names, else
one decode generates (mode 0600, removed when it exits) and names in its
line, for prefill's --secret-file.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import sys
import tempfile
from typing import List, Sequence, Tuple

import numpy as np

try:
    import ferry  # installed (the wheel), or on PYTHONPATH
except ImportError:  # run from a checkout: its python/ package
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import ferry

LAYERS, BLOCKS, BLOCK_SIZE = 4, 32, 8192
NOTIFY = "kv-landed"


def config(name: str, secret_file: str) -> str:
    """Peer-to-peer (no metastore), shm and tcp on loopback, the cluster
    secret from secret_file."""
    return (
        f'name = "{name}"\n'
        + f'cluster_secret_file = "{secret_file}"\n'
        + 'metastore {\n  kind = "none"\n}\n'
        + 'plugin "shm" {}\nplugin "tcp" {\n  config {\n    listen = ["127.0.0.1:0"]\n  }\n}\n'
    )


def pattern(layer: int, blk: int) -> np.ndarray:
    """What prefill holds in block blk of layer."""
    return ((np.arange(BLOCK_SIZE, dtype=np.uint32) * 13 + layer * 71 + blk * 5 + 1) & 0xFF).astype(np.uint8)


def runs(src: Sequence[int], dst: Sequence[int]) -> List[Tuple[int, int, int]]:
    """(first src, first dst, count) of the pairs' runs contiguous on both
    sides."""
    out: List[Tuple[int, int, int]] = []
    for s, d in zip(src, dst):
        if out and out[-1][0] + out[-1][2] == s and out[-1][1] + out[-1][2] == d:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + 1)
        else:
            out.append((s, d, 1))
    return out


def decode(args: argparse.Namespace) -> int:
    secret_file = os.environ.get("FERRY_CLUSTER_SECRET_FILE")
    if not secret_file:  # a new secret, for this run's two engines
        fd, secret_file = tempfile.mkstemp(prefix="ferry-kv-secret-")
        os.write(fd, ferry.new_cluster_secret())
        os.close(fd)
        atexit.register(os.unlink, secret_file)
    with ferry.Engine(config_text=config(args.name, secret_file)) as e:
        mem = e.allocate(LAYERS * BLOCKS * BLOCK_SIZE)
        kv = mem.numpy(shape=(LAYERS, BLOCKS, BLOCK_SIZE))
        kv[:] = 0
        reg = e.register(mem, ferry.Perm.REMOTE_READ_WRITE)
        print(json.dumps({"addr": e.rpc_address, "base": reg.address, "layers": LAYERS, "blocks": BLOCKS,
                          "block_size": BLOCK_SIZE, "secret_file": secret_file}), flush=True)
        got = []
        while not got:
            got = [n for n in e.notifications(max=8, timeout=args.wait) if n.name == NOTIFY]
            if not got and args.wait:
                print(f"decode: no {NOTIFY!r} notification within {args.wait} s", file=sys.stderr)
                return 1
        req = json.loads(got[0].msg)
        sent = dict(zip(req["dst"], req["src"]))
        bad = []
        for layer in range(LAYERS):
            for d in range(BLOCKS):
                want = pattern(layer, sent[d]) if d in sent else np.zeros(BLOCK_SIZE, dtype=np.uint8)
                if not np.array_equal(kv[layer, d], want):
                    bad.append((layer, d))
        del kv
        if bad:
            print(f"decode: {len(bad)} blocks wrong, first {bad[:4]} (layer, block)", file=sys.stderr)
            return 1
        print(f"decode: verified {len(sent)} blocks x {LAYERS} layers from {got[0].sender} ({req['mode']}); "
              f"the other {BLOCKS - len(sent)} untouched", flush=True)
        return 0


def prefill(args: argparse.Namespace) -> int:
    src = [int(x) for x in args.src.split(",")]
    dst = [int(x) for x in args.dst.split(",")]
    # The connector checks its indices: block BLOCKS of a layer is block 0
    # of the next one, inside the same registered buffer, so neither an
    # address nor a layered block list could tell it from a valid one.
    bad = [i for i in src + dst if not 0 <= i < BLOCKS]
    if len(src) != len(dst) or not src or bad:
        print(f"prefill: {len(src)} src and {len(dst)} dst block indices, out of 0..{BLOCKS - 1}: {bad}; "
              "give one dst per src, each a block of a layer", file=sys.stderr)
        return 2
    if not args.secret_file:
        print("prefill: no cluster secret: give --secret-file (decode's line names it) or set FERRY_CLUSTER_SECRET_FILE",
              file=sys.stderr)
        return 2
    with ferry.Engine(config_text=config(args.name, args.secret_file)) as e:
        mem = e.allocate(LAYERS * BLOCKS * BLOCK_SIZE)
        kv = mem.numpy(shape=(LAYERS, BLOCKS, BLOCK_SIZE))
        for layer in range(LAYERS):
            for b in range(BLOCKS):
                kv[layer, b] = pattern(layer, b)
        del kv
        e.register(mem, ferry.Perm.LOCAL)
        seg = e.open_segment(args.decode)
        msg = json.dumps({"src": src, "dst": dst, "mode": args.mode}).encode()
        layer_bytes = BLOCKS * BLOCK_SIZE
        try:
            if args.mode == "layers":
                batches = []
                for layer in range(LAYERS):
                    b = e.batch(len(src))
                    b.submit([
                        ferry.Request(ferry.Op.WRITE, mem.address + layer * layer_bytes + s * BLOCK_SIZE, seg,
                                      args.base + layer * layer_bytes + d * BLOCK_SIZE, n * BLOCK_SIZE)
                        for s, d, n in runs(src, dst)
                    ])
                    batches.append(b)
                for b in batches:
                    b.wait()
                    b.free()
            else:
                layout = ferry.BlockLayout(BLOCK_SIZE, BLOCKS, layers=LAYERS)
                with e.prepare_blocks(seg, mem, layout, args.base, layout) as bl, e.batch(LAYERS * len(src)) as b:
                    local = np.array([layer * BLOCKS + s for layer in range(LAYERS) for s in src], dtype=np.uint32)
                    remote = np.array([layer * BLOCKS + d for layer in range(LAYERS) for d in dst], dtype=np.uint32)
                    b.submit_blocks(bl, local, remote)
                    b.wait()
        except ferry.FerryError as err:
            print(f"prefill: {type(err).__name__}: {err}", file=sys.stderr)
            return 2
        e.notify(seg, NOTIFY, msg)
        print(f"prefill: sent {len(src)} blocks x {LAYERS} layers ({args.mode}) and notified", flush=True)
        return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="role", required=True)
    d = sub.add_parser("decode")
    d.add_argument("--name", default="kv-decode")
    d.add_argument("--wait", type=float, default=60.0, help="seconds to wait for the blocks")
    f = sub.add_parser("prefill")
    f.add_argument("--name", default="kv-prefill")
    f.add_argument("--decode", required=True, help="decode's rpc address (host:port)")
    f.add_argument("--base", required=True, type=int, help="decode's KV cache address")
    f.add_argument("--secret-file", default=os.environ.get("FERRY_CLUSTER_SECRET_FILE"),
                   help="the cluster secret's file, decode's (default: $FERRY_CLUSTER_SECRET_FILE)")
    f.add_argument("--mode", choices=("layers", "prepared"), default="prepared")
    f.add_argument("--src", default="0,1,2,5,6,9,17,30", help="prefill's block indices")
    f.add_argument("--dst", default="3,4,5,8,9,20,21,31", help="decode's block indices, one per src")
    args = p.parse_args()
    return decode(args) if args.role == "decode" else prefill(args)


if __name__ == "__main__":
    sys.exit(main())
