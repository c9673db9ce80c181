#!/usr/bin/env python3
"""The cost of the Python layer: a 4 KiB write over shm to the engine's
own segment, called from Python (ferry.Engine.write, over cffi and the C
ABI) and from Go (host.Engine.Transfer, gocost/), in the same run,
interleaved: Go, Python, Go, Python, ...; each round runs N calls and
reports the mean per call. It prints each round, then the median and the
min-max of each side and of the per-round difference (Python - Go).

    /usr/bin/python3 python/bench/cost.py [--rounds 7] [--calls 20000] [--mode transfer|batch]

Run it from the repository after `make build` (bin/libferry.so and the
plugins). "transfer" is the synchronous call (Engine.write against
host.Engine.Transfer); "batch" keeps a batch across calls as an
asynchronous caller does (Batch.submit, wait, status, free, allocate
again; in Go the same calls). The figures are wall-clock means on a shared
machine: compare only the two sides of one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
os.environ.setdefault("FERRY_PLUGIN_DIR", os.path.join(REPO, "bin"))

import ferry  # noqa: E402

SIZE = 4 << 10

CONFIG = """
name = "pycost-{pid}"
metastore {{
  kind = "none"
}}
plugin "tcp" {{
  config {{
    listen = ["127.0.0.1:0"]
  }}
}}
plugin "shm" {{}}
"""


def go_half(gobin: str) -> subprocess.Popen:
    p = subprocess.Popen([gobin], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline().strip()
    if line != "ready":
        raise SystemExit(f"gocost did not start (said {line!r}, exit {p.poll()})")
    return p


def go_round(p: subprocess.Popen, mode: str, n: int) -> float:
    p.stdin.write(f"{mode} {n}\n")
    p.stdin.flush()
    line = p.stdout.readline().strip()
    try:
        return float(line)
    except ValueError:
        raise SystemExit(f"gocost failed: {line!r} (exit {p.poll()})") from None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--mode", choices=["transfer", "batch"], default="transfer")
    ap.add_argument("--gocost", help="a built gocost binary (default: go build it)")
    args = ap.parse_args()

    gobin = args.gocost
    tmp = None
    if not gobin:
        tmp = tempfile.mkdtemp(prefix="ferry-cost-")
        gobin = os.path.join(tmp, "gocost")
        subprocess.run(["go", "build", "-o", gobin, "./python/bench/gocost"], cwd=REPO, check=True)

    gop = go_half(gobin)
    e = ferry.Engine(config_text=CONFIG.format(pid=os.getpid()))
    mem = e.allocate(2 * SIZE)
    a = mem.numpy()
    a[:SIZE] = (bytearray(range(256)) * (SIZE // 256))
    src = e.register(mem.view[:SIZE])
    dst = e.register(mem.view[SIZE:], ferry.Perm.REMOTE_READ_WRITE)
    seg = e.open_segment(e.rpc_address)
    addr, base, sid = src.address, dst.address, seg.id

    def py_transfer(n: int) -> float:
        w = e.write
        t0 = time.perf_counter_ns()
        for _ in range(n):
            w(addr, sid, base, SIZE, transport="shm")
        return (time.perf_counter_ns() - t0) / n

    req = ferry.Request(ferry.Op.WRITE, addr, sid, base, length=SIZE, transport="shm")

    def py_batch(n: int) -> float:
        b = e.batch(1)
        t0 = time.perf_counter_ns()
        for _ in range(n):
            b.submit(req)
            b.wait(check=False)
            if b.status(0).state != ferry.State.COMPLETED:
                raise SystemExit(f"task ended {b.status(0)}")
            b.free()
            b = e.batch(1)
        dt = (time.perf_counter_ns() - t0) / n
        b.free()
        return dt

    py_round = py_transfer if args.mode == "transfer" else py_batch
    # Warm both: lanes, rails, pools, the interpreter's caches.
    go_round(gop, args.mode, 2000)
    py_round(2000)

    gos, pys = [], []
    print(f"4 KiB write over shm, mode {args.mode}, {args.calls} calls a round, ns per call")
    print("round        go    python   python-go")
    for r in range(args.rounds):
        a[SIZE:] = 0
        g = go_round(gop, args.mode, args.calls)
        p = py_round(args.calls)
        if bytes(a[SIZE:]) != bytes(a[:SIZE]):
            raise SystemExit("the Python half's bytes did not land")
        gos.append(g)
        pys.append(p)
        print(f"{r + 1:5d} {g:9.0f} {p:9.0f} {p - g:11.0f}")
    diffs = [p - g for p, g in zip(pys, gos)]

    def line(name, xs):
        return f"{name:10s} median {statistics.median(xs):7.0f}  min {min(xs):7.0f}  max {max(xs):7.0f}"

    print(line("go", gos))
    print(line("python", pys))
    print(line("python-go", diffs))
    print(f"python layer adds {statistics.median(diffs) / 1000:.2f} us per call (median of {args.rounds} paired rounds)")

    del a
    e.close()
    gop.stdin.close()
    gop.wait(timeout=60)
    if tmp:
        os.unlink(gobin)
        os.rmdir(tmp)


if __name__ == "__main__":
    main()
