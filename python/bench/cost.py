#!/usr/bin/env python3
"""The cost of the Python layer: a 4 KiB write over shm to the engine's
own segment, called from Python (ferry.Engine.write, over cffi and the C
ABI) and from Go (host.Engine.Transfer, gocost/), in the same run,
interleaved (Go, raw, Python in one round, Python, raw, Go in the next;
"raw" is the call Engine.write makes, with its arguments made once); each
round runs N calls of each and reports the mean per call. It prints each
round, then the median and the min-max of each side and of the per-round
difference (Python - Go).

    /usr/bin/python3 python/bench/cost.py [--rounds 7] [--calls 20000] [--mode transfer|batch|percall|parts]

Run it from the repository after `make build` (bin/libferry.so and the
plugins). "transfer" is the synchronous call (Engine.write against
host.Engine.Transfer); "batch" keeps a batch across calls as an
asynchronous caller does (Batch.submit, wait, status, free, allocate
again; in Go the same calls). The figures are wall-clock means on a shared
machine: compare only the two sides of one run. "percall" is "transfer"
with each call timed on its own (p10 and median per round, for a loaded
machine); "parts" times the Python layer's pieces in thread CPU time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
os.environ.setdefault("FERRY_PLUGIN_DIR", os.path.join(REPO, "bin"))

import ferry  # noqa: E402

SIZE = 4 << 10

# The engine's blocks; config_of puts together the ones --plugins names
# (gocost runs the same plugins: config.Default less those not named).
HEAD = """
name = "pycost-{pid}"
metastore {{
  kind = "none"
}}
"""
PLUGINS = {
    "tcp": """plugin "tcp" {
  config {
    listen = ["127.0.0.1:0"]
  }
}
""",
    "shm": """plugin "shm" {}
""",
}


def config_of(plugins: str = "tcp,shm") -> str:
    """This process's engine config with the plugins named ("tcp,shm" or "shm")."""
    return HEAD.format(pid=os.getpid()) + "".join(PLUGINS[p] for p in plugins.split(","))


def switches(pid: int) -> int:
    """Context switches (voluntary and not) of every thread of pid so far:
    a call that wakes other threads shows here, whatever the load."""
    n = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/status") as f:
                for line in f:
                    if "ctxt_switches:" in line:  # voluntary_ and nonvoluntary_
                        n += int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return n


def go_half(gobin: str, plugins: str = "") -> subprocess.Popen:
    env = dict(os.environ, GOCOST_PLUGINS=plugins)
    p = subprocess.Popen([gobin], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
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
    ap.add_argument("--mode", choices=["transfer", "batch", "parts", "percall"], default="transfer")
    ap.add_argument("--gocost", help="a built gocost binary (default: go build it)")
    ap.add_argument("--plugins", choices=["tcp,shm", "shm"], default="tcp,shm",
                    help="the plugins both engines run: with shm alone an engine waits on its one lane (Lane.WaitOn), "
                    "with two on every lane (spinWait)")
    args = ap.parse_args()

    if args.mode == "parts":
        parts(args)
        return
    gobin = args.gocost
    tmp = None
    if not gobin:
        tmp = tempfile.mkdtemp(prefix="ferry-cost-")
        gobin = os.path.join(tmp, "gocost")
        subprocess.run(["go", "build", "-o", gobin, "./python/bench/gocost"], cwd=REPO, check=True)

    gop = go_half(gobin, args.plugins)
    e = ferry.Engine(config_text=config_of(args.plugins))
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

    # raw: the call Engine.write makes (ferry_transfer_sync, through
    # ferry._fast when built), with its arguments made once and no package
    # code per call: python - raw is the package's own cost, raw - go that
    # of the call, cgo and the C ABI.
    xfer, h, hint = e._xfer, e._h, e._hint("shm")

    def raw_transfer(n: int) -> float:
        f = xfer
        t0 = time.perf_counter_ns()
        for _ in range(n):
            if f(h, 1, sid, addr, base, SIZE, 0, hint) != 0:
                raise SystemExit(f"raw ferry_transfer_sync failed: {ferry._ffi.last_error()}")
        return (time.perf_counter_ns() - t0) / n

    def finish() -> None:
        e.close()
        gop.stdin.close()
        gop.wait(timeout=60)
        if tmp:
            os.unlink(gobin)
            os.rmdir(tmp)

    if args.mode == "percall":
        percall(args, gop, e, a, lambda: e.write(addr, sid, base, SIZE, transport="shm"),
                lambda: xfer(h, 1, sid, addr, base, SIZE, 0, hint))
        del a
        finish()
        return

    py_round = py_transfer if args.mode == "transfer" else py_batch
    # Warm both: lanes, rails, pools, the interpreter's caches.
    go_round(gop, args.mode, 2000)
    py_round(2000)

    raw = args.mode == "transfer"
    gos, pys, raws = [], [], []
    gsw, psw = [], []  # context switches per call of each process
    how = "ferry._fast" if ferry._ffi.fast() is not None else "cffi ABI mode"
    print(f"4 KiB write over shm, mode {args.mode}, {args.calls} calls a round, ns per call; write calls through {how}; "
          f"load average {os.getloadavg()[0]:.1f}")
    print("round        go    python" + ("       raw" if raw else "") + "   python-go" + ("  python-raw" if raw else ""))
    def go_side() -> float:
        s0 = switches(gop.pid)
        g = go_round(gop, args.mode, args.calls)
        gsw.append((switches(gop.pid) - s0) / args.calls)
        return g

    def py_side() -> float:
        a[SIZE:] = 0
        s0 = switches(os.getpid())
        p = py_round(args.calls)
        psw.append((switches(os.getpid()) - s0) / args.calls)
        if bytes(a[SIZE:]) != bytes(a[:SIZE]):
            raise SystemExit("the Python half's bytes did not land")
        return p

    for r in range(args.rounds):
        # Go first in odd rounds, Python first in even ones (raw between
        # them), so that neither side always follows the other.
        if r % 2 == 0:
            g = go_side()
            w = raw_transfer(args.calls) if raw else 0.0
            p = py_side()
        else:
            p = py_side()
            w = raw_transfer(args.calls) if raw else 0.0
            g = go_side()
        gos.append(g)
        pys.append(p)
        if raw:
            raws.append(w)
            print(f"{r + 1:5d} {g:9.0f} {p:9.0f} {w:9.0f} {p - g:11.0f} {p - w:11.0f}")
        else:
            print(f"{r + 1:5d} {g:9.0f} {p:9.0f} {p - g:11.0f}")

    def line(name, xs):
        return f"{name:11s} median {statistics.median(xs):8.0f}  min {min(xs):8.0f}  max {max(xs):8.0f}  ({len(xs)} rounds)"

    diffs = [p - g for p, g in zip(pys, gos)]
    print(line("go", gos))
    print(line("python", pys))
    print(line("python-go", diffs))
    print(f"context switches per call (all threads): go median {statistics.median(gsw):.2f}, "
          f"python median {statistics.median(psw):.2f}")
    if raw:
        print(line("raw", raws))
        print(line("python-raw", [p - w for p, w in zip(pys, raws)]))
        print(line("raw-go", [w - g for w, g in zip(raws, gos)]))
    print(f"python layer adds {statistics.median(diffs) / 1000:.2f} us per call over Go "
          f"(median of {args.rounds} paired rounds; min of python - min of go: {(min(pys) - min(gos)) / 1000:.2f} us)")

    del a
    finish()


def timed_each(call, n: int) -> Tuple[float, float, float]:
    """(mean, p10, p50) ns of n calls timed one by one, less the cost of
    the timing itself (the median of empty timed windows), as gocost's
    transferq does."""
    pc = time.perf_counter_ns
    ds = [0] * n
    for i in range(n):
        t0 = pc()
        ds[i] = pc() - t0
    ds.sort()
    tick = ds[n // 2]
    for i in range(n):
        t0 = pc()
        call()
        ds[i] = pc() - t0 - tick
    mean = sum(ds) / n
    ds.sort()
    return mean, float(ds[n // 10]), float(ds[n // 2])


def percall(args: argparse.Namespace, gop: subprocess.Popen, e: Any, a: Any, write, raw) -> None:
    """--mode percall: as transfer, but each call is timed on its own and
    each round reports the mean, the 10th percentile and the median per
    call of each side. On a loaded machine the round means are swamped by
    preemptions (a call that waits for a core costs a scheduler quantum),
    while the quantiles of single calls mostly are not: compare p10 and
    p50 there, the means on a quiet machine."""
    def go_side() -> Tuple[float, float, float]:
        gop.stdin.write(f"transferq {args.calls}\n")
        gop.stdin.flush()
        line = gop.stdout.readline().strip()
        try:
            m, p10, p50 = (float(x) for x in line.split())
        except ValueError:
            raise SystemExit(f"gocost failed: {line!r} (exit {gop.poll()})") from None
        return m, p10, p50

    def py_side() -> Tuple[float, float, float]:
        a[SIZE:] = 0
        r = timed_each(write, args.calls)
        if bytes(a[SIZE:]) != bytes(a[:SIZE]):
            raise SystemExit("the Python half's bytes did not land")
        return r

    go_side()
    py_side()
    timed_each(raw, 2000)
    gos, pys, raws = [], [], []
    how = "ferry._fast" if ferry._ffi.fast() is not None else "cffi ABI mode"
    print(f"4 KiB write over shm, each call timed, {args.calls} calls a round, ns per call; write calls through {how}; "
          f"load average {os.getloadavg()[0]:.1f}")
    print("round   go p10  py p10 raw p10   go p50  py p50 raw p50   py-go p10  py-go p50")
    for r in range(args.rounds):
        if r % 2 == 0:
            g, w, p = go_side(), timed_each(raw, args.calls), py_side()
        else:
            p, w, g = py_side(), timed_each(raw, args.calls), go_side()
        gos.append(g)
        pys.append(p)
        raws.append(w)
        print(f"{r + 1:5d} {g[1]:8.0f} {p[1]:7.0f} {w[1]:7.0f}  {g[2]:7.0f} {p[2]:7.0f} {w[2]:7.0f}  "
              f"{p[1] - g[1]:10.0f} {p[2] - g[2]:10.0f}")

    def line(name, xs):
        return f"{name:31s} median {statistics.median(xs):8.0f}  min {min(xs):8.0f}  max {max(xs):8.0f}  ({len(xs)} rounds)"

    for k, stat in ((0, "mean"), (1, "p10"), (2, "p50")):
        print(line(f"go {stat}", [g[k] for g in gos]))
        print(line(f"python {stat}", [p[k] for p in pys]))
        print(line(f"raw {stat}", [w[k] for w in raws]))
        print(line(f"python-go {stat}", [p[k] - g[k] for p, g in zip(pys, gos)]))
        print(line(f"python-raw {stat}", [p[k] - w[k] for p, w in zip(pys, raws)]))
    d10 = statistics.median(p[1] - g[1] for p, g in zip(pys, gos))
    d50 = statistics.median(p[2] - g[2] for p, g in zip(pys, gos))
    print(f"python layer adds {d50 / 1000:.2f} us per call over Go at the median call, {d10 / 1000:.2f} us at the "
          f"10th percentile (medians of {args.rounds} paired rounds; load average now {os.getloadavg()[0]:.1f})")
    # Under load a whole round of either side can fall into a slow regime
    # (every call ~100x the fast one: its waiter or the plugin waits for
    # a core), which swamps any difference; the rounds where neither side
    # did are the comparable ones.
    floor = min(min(g[2] for g in gos), min(p[2] for p in pys))
    both = [(p, g) for p, g in zip(pys, gos) if p[2] < 10 * floor and g[2] < 10 * floor]
    if both:
        print(line("python-go p10, rounds both fast", [p[1] - g[1] for p, g in both]))
        print(line("python-go p50, rounds both fast", [p[2] - g[2] for p, g in both]))
    else:
        print("no round had both sides in the fast regime")


def parts(args: argparse.Namespace) -> None:
    """The Python layer's parts, each timed with nothing else behind it, so
    that the machine's load (which swamps a 4 KiB transfer's time) barely
    shows: the package's code of Engine.write (against a do-nothing C
    ferry_transfer_sync, stub.c), the bare call write makes (to the stub),
    and the entry from C into the library's Go (ferry_version: C calling a
    Go export that returns a string made once, against the stub's C one).
    With ferry._fast built, write's call goes through it, and the same
    write through cffi's ABI mode is timed too. Rounds interleave them; the
    figures are each round's mean CPU time of the calling thread per call
    (none of these calls blocks), which a busy machine inflates less than
    wall-clock time."""
    from ferry._ffi import ffi

    tmp = tempfile.mkdtemp(prefix="ferry-cost-")
    so = os.path.join(tmp, "stub.so")
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", so, os.path.join(HERE, "stub.c")], check=True)
    stub = ffi.dlopen(so)
    e = ferry.Engine(config_text=config_of())
    mem = e.allocate(2 * SIZE)
    src = e.register(mem.view[:SIZE])
    dst = e.register(mem.view[SIZE:], ferry.Perm.REMOTE_READ_WRITE)
    seg = e.open_segment(e.rpc_address)
    addr, base, sid, h = src.address, dst.address, seg.id, e._h
    real = e._lib
    n = args.calls
    fast = ferry._ffi.fast()
    real_xfer = e._xfer
    stub_abi = ffi.cast(ferry._ffi.TRANSFER_SYNC_PY, stub.ferry_transfer_sync)
    hint = e._hint("shm")

    def use_stub(abi: bool = False) -> None:
        e._lib = stub
        if fast is not None and not abi:
            fast.ferry_py_bind(int(ffi.cast("uintptr_t", stub.ferry_transfer_sync)))
        else:
            e._xfer = stub_abi

    def use_real() -> None:
        e._lib, e._xfer = real, real_xfer
        if fast is not None:
            fast.ferry_py_bind(int(ffi.cast("uintptr_t", real.ferry_transfer_sync)))

    # None of these calls blocks, so the calling thread's CPU time is
    # their cost, without the time the loaded machine ran others instead.
    def timed(f) -> float:
        t0 = time.thread_time_ns()
        f()
        return (time.thread_time_ns() - t0) / n

    def package() -> None:
        w = e.write
        for _ in range(n):
            w(addr, sid, base, SIZE, transport="shm")

    def bare_call() -> None:  # the call write makes, as it makes it
        f = e._xfer
        for _ in range(n):
            f(h, 1, sid, addr, base, SIZE, 0, hint)

    def go_entry() -> None:
        f = real.ferry_version
        for _ in range(n):
            f()

    def c_entry() -> None:
        f = stub.ferry_version
        for _ in range(n):
            f()

    WRITE, CALL = "write (package + call)", "call (to the stub)"
    res: dict = {WRITE: [], CALL: [], "C->Go call": [], "C call": []}
    if fast is not None:
        res["write, ABI mode"] = []
        res["call, ABI mode"] = []
    try:
        for _ in range(args.rounds):
            use_stub()
            res[WRITE].append(timed(package))
            res[CALL].append(timed(bare_call))
            use_real()
            res["C->Go call"].append(timed(go_entry))
            res["C call"].append(timed(c_entry))
            if fast is not None:
                use_stub(abi=True)
                res["write, ABI mode"].append(timed(package))
                res["call, ABI mode"].append(timed(bare_call))
                use_real()
    finally:
        use_real()
    how = "through ferry._fast (cffi API mode)" if fast is not None else "through cffi's ABI mode (ferry._fast not built)"
    print(f"the Python layer's parts, {n} calls a round, {args.rounds} rounds, thread CPU ns per call; "
          f"write calls ferry_transfer_sync {how}")

    def line(k, xs):
        print(f"{k:26s} median {statistics.median(xs):7.0f}  min {min(xs):7.0f}  max {max(xs):7.0f}")

    for k, xs in res.items():
        line(k, xs)
    pkg = [a - b for a, b in zip(res[WRITE], res[CALL])]
    cgo = [a - b for a, b in zip(res["C->Go call"], res["C call"])]
    line("package code (write-call)", pkg)
    line("cgo entry (Go-C)", cgo)
    if fast is not None:
        line("write: ABI mode - fast", [a - b for a, b in zip(res["write, ABI mode"], res[WRITE])])
    total = [w + c for w, c in zip(res[WRITE], cgo)]
    print(f"Python layer per call (package + call + cgo entry): median {statistics.median(total) / 1000:.2f} us, "
          f"min {min(total) / 1000:.2f} us, max {max(total) / 1000:.2f} us; load average {os.getloadavg()[0]:.1f}")
    e.close()
    os.unlink(so)
    os.rmdir(tmp)


if __name__ == "__main__":
    main()
