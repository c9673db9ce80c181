#!/usr/bin/env python3
# Folds `perf script` output of sched:sched_switch events (every CPU)
# into each process's time on a CPU and, for the processes of a
# transfer, the time they were on CPUs at once. A request that crosses
# from the engine to its plugin moves only while both run; beside busy
# processes each gets its share of a core, and how much of those shares
# overlap bounds the throughput (docs/performance.md, "Under
# contention"):
#
#   perf record -e sched:sched_switch -a -o s.data -- sleep 1
#   perf script -i s.data -F pid,tid,cpu,time,trace | scripts/cpu-overlap.py [REGEX] [rows=8]
#
# REGEX (default ^(ferry|tebench)) picks, by command name, the processes
# whose overlaps are printed: each pair of the busiest four, and all of
# them at once. "on" is the time any of a process's threads ran, as a
# share of the recording; "cpu" adds its threads' times (up to the CPU
# count). A process's command name is the one its threads last ran under
# (a plugin's may read as its thread's, e.g. a digit).
import collections
import itertools
import re
import sys

pat = re.compile(r'^\s*(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+prev_comm=(.*?) prev_pid=(\d+) .*?==> next_comm=(.*?) next_pid=(\d+)')
events, tgid, comm = [], {}, {}
for line in sys.stdin:
    m = pat.search(line)
    if not m:
        continue
    pid, tid, cpu, t = int(m.group(1)), int(m.group(2)), int(m.group(3)), float(m.group(4))
    tgid[tid] = pid
    comm[pid] = m.group(5)
    events.append((t, cpu, int(m.group(8))))
if not events:
    sys.exit("cpu-overlap: no sched_switch events read (perf script -F pid,tid,cpu,time,trace)")
events.sort()
span = events[-1][0] - events[0][0]
runs = collections.defaultdict(list)  # tgid -> [(start, end)] of its threads' runs
current = {}                          # cpu -> (tid, since)
for t, cpu, nxt in events:
    if cpu in current:
        tid, since = current[cpu]
        runs[tgid.get(tid, tid)].append((since, t))
    current[cpu] = (nxt, t)


def merged(iv):
    out = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def both(a, b):
    i = j = 0
    out = []
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            out.append([lo, hi])
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def pct(iv):
    return 100 * sum(b - a for a, b in iv) / span


want = re.compile(sys.argv[1] if len(sys.argv) > 1 else r'^(ferry|tebench)')
rows = int(sys.argv[2]) if len(sys.argv) > 2 else 8
on = {p: merged(iv) for p, iv in runs.items() if p != 0}
print("recorded %.3f s" % span)
print("%-16s %8s %7s %7s" % ("process", "pid", "on %", "cpu %"))
for p in sorted(on, key=lambda p: -pct(on[p]))[:rows]:
    print("%-16s %8d %7.1f %7.1f" % (comm.get(p, "?"), p, pct(on[p]), pct(runs[p])))
picked = [p for p in sorted(on, key=lambda p: -pct(on[p])) if want.search(comm.get(p, ""))][:4]
for a, b in itertools.combinations(picked, 2):
    print("both on: %d and %d %.1f%%" % (a, b, pct(both(on[a], on[b]))))
if len(picked) > 2:
    acc = on[picked[0]]
    for p in picked[1:]:
        acc = both(acc, on[p])
    print("all %d on: %.1f%%" % (len(picked), pct(acc)))
