#!/usr/bin/env bash
# The GPU check, run from the repository root (or an unpacked bundle's).
#
#   scripts/gpu-check.sh [--device cuda] [--size 64MiB] [--runs 5]
#       On the GPU machine (no Go there): checks for the driver, measures
#       the driver's own copies with torch and CUDA events (the baseline:
#       cudaMemcpy D2D, pinned H2D and D2H of --size, median of several),
#       tries the Python package's torch tensor registration, runs
#       `bin/ferry gpu-check --device cuda --baseline <that>`, and prints
#       ONE JSON line: the command's, with "torch" and "driver" added.
#   scripts/gpu-check.sh --device sim      (or --dry-run)
#       The same script here, against ferry-device-simdev: the baseline is
#       the command's own memmove of the same size, and the pipelining
#       check runs. Proves the script before a GPU is at hand.
#   scripts/gpu-check.sh --pack OUT.tar.gz
#       Here (needs Go): builds stripped binaries and packs bin/, this
#       script and python/ferry into OUT.tar.gz, under the 64 MiB a device
#       run carries, and prints its size. There: tar xzf OUT.tar.gz &&
#       scripts/gpu-check.sh.
#
# Exit status: 0 when every verification passed, 1 otherwise, 2 for bad
# usage or a machine that cannot run the check (the JSON line says why).
set -u -o pipefail

device=cuda size=64MiB runs=5 pack=""
while [ $# -gt 0 ]; do
	case "$1" in
	--device) device="$2"; shift 2 ;;
	--dry-run) device=sim; shift ;;
	--size) size="$2"; shift 2 ;;
	--runs) runs="$2"; shift 2 ;;
	--pack) pack="$2"; shift 2 ;;
	-h|--help) sed -n '2,24p' "$0"; exit 0 ;;
	*) echo "gpu-check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done

# One JSON line for a check that could not run at all.
die() {
	python3 -c 'import json,sys; print(json.dumps({"check":"gpu-check","device":sys.argv[1],"pass":False,"errors":[sys.argv[2]]}))' "$device" "$1"
	exit 2
}

if [ -n "$pack" ]; then
	command -v go >/dev/null || { echo "gpu-check.sh --pack: needs Go (run it on the build machine)" >&2; exit 2; }
	stage=$(mktemp -d)
	trap 'rm -rf "$stage"' EXIT
	mkdir -p "$stage/bin" "$stage/scripts" "$stage/python"
	rev=$(git rev-parse --short=12 HEAD 2>/dev/null)$(git diff --quiet HEAD 2>/dev/null || echo -modified)
	flags=(-trimpath -ldflags "-s -w -X main.revision=$rev")
	set -e
	go build "${flags[@]}" -o "$stage/bin/ferry" ./cmd/ferry
	for p in tcp nvlink; do go build "${flags[@]}" -o "$stage/bin/ferry-plugin-$p" "./plugins/$p/cmd/ferry-plugin-$p"; done
	go build "${flags[@]}" -o "$stage/bin/ferry-device-cuda" ./devices/cuda/cmd/ferry-device-cuda
	go build "${flags[@]}" -o "$stage/bin/ferry-device-simdev" ./plugins/simdev/cmd/ferry-device-simdev
	go build "${flags[@]}" -buildmode=c-shared -o "$stage/bin/libferry.so" ./capi
	rm -f "$stage/bin/libferry.h"
	cp scripts/gpu-check.sh "$stage/scripts/"
	(cd python && tar cf - --exclude=__pycache__ --exclude='*.so' ferry) | (cd "$stage/python" && tar xf -)
	set +e
	out=$(realpath -m "$pack")
	tar czf "$out" -C "$stage" bin scripts python || exit 1
	bytes=$(stat -c %s "$out")
	echo "{\"bundle\":\"$out\",\"bytes\":$bytes,\"mib\":$(python3 -c "print(round($bytes/1048576,1))"),\"limit_mib\":64}"
	[ "$bytes" -lt $((64 << 20)) ] || { echo "gpu-check.sh: bundle over 64 MiB" >&2; exit 1; }
	exit 0
fi

[ -x bin/ferry ] || die "no bin/ferry here: run from the repository root after make build, or unpack the bundle (--pack)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

case "$device" in
sim)
	echo '{"skipped":"--device sim: the baseline is the command'"'"'s memmove"}' >"$work/torch.json"
	echo '{"skipped":"--device sim"}' >"$work/driver.json"
	bin/ferry gpu-check --device sim --size "$size" --runs "$runs" --log-level error >"$work/check.json" 2>"$work/check.err"
	rc=$?
	;;
cuda)
	# The driver: libcuda on the loader path and a GPU it sees.
	python3 - "$work/driver.json" <<'EOF' || die "no CUDA driver: $(cat "$work/driver.json" 2>/dev/null)"
import ctypes, json, subprocess, sys
out = {}
try:
    ctypes.CDLL("libcuda.so.1")
    out["libcuda"] = "libcuda.so.1 loads"
except OSError as e:
    json.dump({"error": str(e)}, open(sys.argv[1], "w")); sys.exit(1)
try:
    out["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                                       capture_output=True, text=True, timeout=30).stdout.strip()
except Exception as e:
    out["nvidia_smi"] = "not run: %s" % e
json.dump(out, open(sys.argv[1], "w"))
EOF
	# The baseline: the driver's own copies of the same size, through
	# torch (cudaMemcpyAsync on one stream), timed with CUDA events.
	PYTHONPATH=python python3 - "$size" "$runs" "$work/baseline.json" "$work/torch.json" <<'EOF' || die "torch baseline failed: $(cat "$work/torch.json" 2>/dev/null)"
import json, re, statistics, sys
import torch

def parse_size(s):
    m = re.fullmatch(r"(\d+)\s*([KMG]i?B)?", s.strip())
    mult = {None: 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 10**3, "MB": 10**6, "GB": 10**9}[m.group(2)]
    return int(m.group(1)) * mult

n, runs = parse_size(sys.argv[1]), max(5, int(sys.argv[2]))
info = {"torch": torch.__version__, "cuda": torch.version.cuda, "device_name": torch.cuda.get_device_name(0)}
dev = torch.device("cuda:0")
a = torch.randint(0, 255, (n,), dtype=torch.uint8, device=dev)
b = torch.empty_like(a)
h = torch.empty(n, dtype=torch.uint8, pin_memory=True)

def fig(fn):
    fn(); torch.cuda.synchronize()  # warm
    s = []
    for _ in range(runs):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); fn(); e1.record(); e1.synchronize()
        s.append(n / (e0.elapsed_time(e1) / 1e3) / 1e9)
    return {"median": round(statistics.median(s), 3), "min": round(min(s), 3), "max": round(max(s), 3), "samples": [round(x, 3) for x in s]}

base = {"source": "torch %s, cudaMemcpyAsync on one stream, CUDA events, %d runs after a warm-up; h2d/d2h from pinned memory" % (torch.__version__, runs),
        "d2d": fig(lambda: b.copy_(a, non_blocking=True)),
        "h2d": fig(lambda: b.copy_(h, non_blocking=True)),
        "d2h": fig(lambda: h.copy_(a, non_blocking=True))}
json.dump(base, open(sys.argv[3], "w"))

# A torch tensor (cudaMalloc memory of the caching allocator) exported
# with the legacy IPC handle, and its registration through the Python
# package where it has one.
try:
    st = a.untyped_storage()._share_cuda_()
    info["ipc_handle"] = {"bytes": len(st[1]), "storage_offset": st[3] if len(st) > 3 else None}
except Exception as e:
    info["ipc_handle"] = "failed: %s" % e
try:
    import ferry
    if hasattr(ferry.Engine, "register_device"):
        e = ferry.Engine()
        e.register_device(a)
        info["python_register_device"] = "ok"
        e.close()
    else:
        info["python_register_device"] = "absent: python/ferry has no register_device yet"
except Exception as e:
    info["python_register_device"] = "failed: %s: %s" % (type(e).__name__, e)
json.dump(info, open(sys.argv[4], "w"))
EOF
	bin/ferry gpu-check --device cuda --size "$size" --runs "$runs" --baseline "$work/baseline.json" --log-level error >"$work/check.json" 2>"$work/check.err"
	rc=$?
	;;
*) die "--device $device: want cuda or sim" ;;
esac

# One line: the command's, with what this script found beside it.
python3 - "$work" "$rc" <<'EOF'
import json, os, sys
work, rc = sys.argv[1], int(sys.argv[2])
def load(name):
    try:
        return json.load(open(os.path.join(work, name)))
    except Exception as e:
        return {"error": str(e)}
try:
    line = open(os.path.join(work, "check.json")).read().strip().splitlines()[-1]
    rep = json.loads(line)
except Exception as e:
    err = open(os.path.join(work, "check.err")).read()[-2000:]
    rep = {"check": "gpu-check", "pass": False, "errors": ["bin/ferry gpu-check printed no JSON (exit %d): %s; stderr: %s" % (rc, e, err)]}
rep["driver"] = load("driver.json")
rep["torch"] = load("torch.json")
rep["exit"] = rc
print(json.dumps(rep))
EOF
[ "$rc" -eq 0 ] || exit 1
