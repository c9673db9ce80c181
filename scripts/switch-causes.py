#!/usr/bin/env python3
# Folds `perf script` output of sched:sched_switch samples with call
# graphs into counts by cause: the state the thread left in (S: slept,
# R: preempted or yielded) and its innermost Go frames, runtime futex and
# syscall wrappers skipped. Use it to see which of Ferry's waits (a
# waiter's ring sleep, a reaper's standby, the Go scheduler parking a
# thread) make a process's context switches:
#
#   perf record -e sched:sched_switch -g -p <pid> -o s.data -- sleep 2
#   perf script -i s.data | scripts/switch-causes.py [frames=4] [rows=25]
import sys, re, collections
c = collections.Counter()
skip = re.compile(r'^(internal/runtime/syscall|syscall\.|runtime\.futex|runtime\.notesleep|runtime\.usleep|runtime\.osyield)')
def flush(hdr, frames):
    if hdr is None: return
    st = 'S' if 'prev_state=S' in hdr else ('R' if 'prev_state=R' in hdr else 'other')
    gos = [f for f in frames if '[kernel' not in f]
    gos = [re.sub(r'\+0x[0-9a-f]+.*', '', f.split(None,1)[1]) for f in gos]
    gos = [g for g in gos if not skip.match(g)]
    c[(st, hdr.split()[0], ' <- '.join(g.replace('github.com/ferrydev/ferry/','') for g in gos[:int(sys.argv[1]) if len(sys.argv)>1 else 4]))] += 1
hdr=None; frames=[]
for line in sys.stdin:
    if 'sched_switch' in line:
        flush(hdr, frames); hdr=line.strip(); frames=[]
    elif line.strip():
        frames.append(line.strip())
flush(hdr, frames)
tot=sum(c.values())
for k,v in c.most_common(int(sys.argv[2]) if len(sys.argv)>2 else 25):
    print(f"{v:6d} {100*v/tot:5.1f}% {k[0]} {k[1]:10s} {k[2]}")
