#!/usr/bin/env python3
"""Context switches per call, by thread: N synchronous 4 KiB writes over
shm to the engine's own segment from Python (Engine.write), and what each
thread of this process and of its plugin processes switched meanwhile
(voluntary: it slept; involuntary: it was preempted, or sched_yield).
Threads that switched less than once per 100 calls are left out.

    /usr/bin/python3 python/bench/switches.py [N] (after `make build`)

TWO=1 adds the tcp plugin (the engine then waits on every lane: spinWait;
with one plugin it waits on its lane: Lane.WaitOn). FERRY_LIB picks the
library, to compare two builds. Linux only (/proc).
"""

import glob
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
os.environ.setdefault("FERRY_PLUGIN_DIR", os.path.join(REPO, "bin"))

import ferry  # noqa: E402

SIZE = 4096


def snap(pid):
    """{tid: (voluntary, involuntary)} of pid's threads now."""
    d = {}
    for t in glob.glob(f"/proc/{pid}/task/*"):
        try:
            s = open(t + "/status").read()
        except OSError:
            continue
        v = int(s.split("\nvoluntary_ctxt_switches:")[1].split()[0])
        nv = int(s.split("nonvoluntary_ctxt_switches:")[1].split()[0])
        d[t.rsplit("/", 1)[1]] = (v, nv)
    return d


def children():
    out = []
    for p in glob.glob("/proc/[0-9]*"):
        try:
            st = open(p + "/stat").read()
        except OSError:
            continue
        if int(st.rsplit(")", 1)[1].split()[1]) == os.getpid():
            out.append(int(p.rsplit("/", 1)[1]))
    return out


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50000
    config = 'name = "switches-%d"\nmetastore {\n  kind = "none"\n}\nplugin "shm" {}\n' % os.getpid()
    if os.environ.get("TWO"):
        config += 'plugin "tcp" {\n  config {\n    listen = ["127.0.0.1:0"]\n  }\n}\n'
    with ferry.Engine(config_text=config) as e:
        mem = e.allocate(2 * SIZE)
        src = e.register(mem.view[:SIZE])
        dst = e.register(mem.view[SIZE:], ferry.Perm.REMOTE_READ_WRITE)
        seg = e.open_segment(e.rpc_address)
        addr, base, sid = src.address, dst.address, seg.id
        w = e.write
        for _ in range(20000):  # warm
            w(addr, sid, base, SIZE, transport="shm")
        pids = [os.getpid()] + children()
        before = {p: snap(p) for p in pids}
        t0 = time.perf_counter_ns()
        for _ in range(n):
            w(addr, sid, base, SIZE, transport="shm")
        dt = (time.perf_counter_ns() - t0) / n
        print(f"{dt:.0f} ns per call, {n} calls; load average {os.getloadavg()[0]:.1f}")
        for p in pids:
            for tid, (v, nv) in snap(p).items():
                if tid not in before[p]:
                    continue
                dv, dn = v - before[p][tid][0], nv - before[p][tid][1]
                if dv + dn > n * 0.01:
                    who = "caller" if int(tid) == os.getpid() else ("this process" if p == os.getpid() else f"plugin {p}")
                    print(f"  thread {tid} ({who}): voluntary {dv / n:.3f}, involuntary {dn / n:.3f} per call")


if __name__ == "__main__":
    main()
