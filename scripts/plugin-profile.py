#!/usr/bin/env python3
# Names the functions in `perf script` samples of a plugin process. The
# engine runs each plugin from a sealed memfd copy of its verified image
# (host/loader), so perf finds no file behind its code and prints bare
# offsets into "/memfd:ferry-plugin-image (deleted)". This reads those
# offsets, adds the image's load address (from `readelf -lW BINARY`, the
# first LOAD segment: 0x400000 for Go's executables) and asks `go tool
# addr2line` for the function, then prints the top functions by samples
# they were running (leaf) and by samples they were on the stack
# (inclusive). BINARY is the plugin's file the engine loaded (bin/ or
# plugin_dir): the same bytes, so the same addresses.
#
#   perf record -e cpu-clock -F 4999 -g -p <plugin pid> -o p.data -- sleep 3
#   perf script -i p.data -F ip,dso | scripts/plugin-profile.py bin/ferry-plugin-shm [rows=30]
import collections, subprocess, sys

if len(sys.argv) < 2:
    sys.exit("usage: perf script -F ip,dso | plugin-profile.py BINARY [rows]")
binary = sys.argv[1]
rows = int(sys.argv[2]) if len(sys.argv) > 2 else 30

base = 0x400000
try:
    out = subprocess.run(["readelf", "-lW", binary], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "LOAD":
            base = int(f[2], 16)  # VirtAddr
            break
except (OSError, subprocess.CalledProcessError) as e:
    print(f"plugin-profile: readelf {binary}: {e}; taking 0x400000 as its load address", file=sys.stderr)

samples = []  # each a list of frames, leaf first: an address or the name of a file perf knew
for block in sys.stdin.read().split("\n\n"):
    frames = []
    for line in block.strip().splitlines():
        f = line.split(None, 1)
        if len(f) < 2:
            continue
        try:
            ip = int(f[0], 16)
        except ValueError:
            continue
        frames.append(ip + base if "memfd:" in f[1] else f[1].strip("()"))
    if frames:
        samples.append(frames)
if not samples:
    sys.exit("plugin-profile: no samples on stdin (perf script -F ip,dso)")

addrs = sorted({a for s in samples for a in s if isinstance(a, int)})
res = subprocess.run(["go", "tool", "addr2line", binary], input="".join(f"{a:#x}\n" for a in addrs),
                     capture_output=True, text=True, check=True).stdout.splitlines()
name = {a: res[2 * i] if 2 * i < len(res) else "?" for i, a in enumerate(addrs)}

def label(a):
    return name[a].replace("github.com/ferrydev/ferry/", "") if isinstance(a, int) else a

leaf, incl = collections.Counter(), collections.Counter()
for s in samples:
    leaf[label(s[0])] += 1
    for n in {label(a) for a in s}:
        incl[n] += 1
n = len(samples)
print(f"{n} samples")
for title, c in (("running (leaf)", leaf), ("on the stack (inclusive)", incl)):
    print(f"\n{title}:")
    for k, v in c.most_common(rows):
        print(f"{100 * v / n:6.1f}%  {k}")
