#!/usr/bin/env bash
# tebench-build.sh: build Mooncake's tebench (TENT and classic TE backends,
# no CUDA) from a source tree, for scripts/tent-compare.sh.
#
#   scripts/tebench-build.sh MOONCAKE_SRC [JOBS]
#
# MOONCAKE_SRC is a checkout of kvcache-ai/Mooncake (measured at 3b5a594)
# with its submodules extern/yalantinglibs and extern/pybind11 filled in at
# the commits Mooncake pins (7801bc9 and 58c382a at 3b5a594; CMake needs
# pybind11 even for tebench, since mooncake-integration is always added).
# With the session's `fetch` tool:
#
#   fetch github:kvcache-ai/Mooncake     -> /work/.mirror/kvcache-ai+Mooncake/repo
#   fetch github:alibaba/yalantinglibs   -> /work/.mirror/alibaba+yalantinglibs/repo
#   fetch github:pybind/pybind11         -> /work/.mirror/pybind+pybind11/repo
#   scripts/tebench-build.sh --checkout /work/.mirror /work/tebench-src
#   scripts/tebench-build.sh /work/tebench-src
#
# Every step is skipped when its result is already there, so the script can
# be rerun after a failure. The binary ends up at
# MOONCAKE_SRC/build/mooncake-transfer-engine/benchmark/tebench; the script
# prints its path last. JOBS defaults to 2; the build runs under nice -n 10.
#
# Running tebench by hand, on one machine: two processes, p2p metadata (no
# server). The target registers its buffer, prints the segment name
# (IP:PORT for TENT, hostname:port for classic) and waits for SIGINT:
#
#   tebench --backend=tent --xport_type=shm --seg_type=DRAM --total_buffer_size=268435456
#
# The initiator runs one case per (threads, block size, batch) — each
# swept by powers of two from --start_* to --max_* — with 1 s of warm-up
# and --duration whole seconds measured:
#
#   tebench --backend=tent --xport_type=shm --seg_type=DRAM --target_seg_name=IP:PORT \
#     --op_type=write --total_buffer_size=268435456 \
#     --start_block_size=4096 --max_block_size=4096 --start_batch_size=1 --max_batch_size=1 \
#     --start_num_threads=1 --max_num_threads=1 --duration=5
#
# --xport_type=tcp for TENT's tcp; --backend=classic takes no --xport_type
# (classic TE installs tcp where there is no RDMA device). --op_type
# defaults to read. A case is skipped when block*batch*threads exceeds
# --total_buffer_size (default 1 GiB, allocated on each side). Its result
# line follows a row of dashes: BlkSize Batch "BW (GB/s)" (10^9 B/s over the
# wall time) "Avg Inst GB/s" "Avg Lat (us)" "Avg Tx (us)" (mean per batch)
# "P99 Tx" "P999 Tx"; there is no p50, and latencies are whole
# microseconds (under 1 us shows as 0.0). Each initiator thread waits by
# spinning on getTransferStatus, and TENT's shm copies in the caller's
# thread. scripts/tent-compare.sh drives all this.
set -euo pipefail

die() { echo "tebench-build: $*" >&2; exit 1; }

if [[ "${1:-}" == "--checkout" ]]; then
  # --checkout MIRRORS DEST: extract Mooncake and its two submodules from the
  # bare mirrors MIRRORS/<owner>+<name>/repo (no work tree there). A few
  # large blobs (traces, gifs) are absent from the mirror and not needed,
  # so they are left out.
  [[ $# -eq 3 ]] || die "usage: $0 --checkout MIRRORS DEST"
  mirrors=$2 dest=$3
  mc=$mirrors/kvcache-ai+Mooncake/repo
  [[ -d "$mc" ]] || die "no Mooncake mirror at $mc: run fetch github:kvcache-ai/Mooncake"
  if [[ -f "$dest/mooncake-transfer-engine/benchmark/main.cpp" ]]; then
    echo "tebench-build: $dest already holds Mooncake; not extracting again"
  else
    mkdir -p "$dest"
    git --git-dir="$mc" archive HEAD -- . ':!FAST25-release' ':!*.gif' | tar -x -C "$dest"
  fi
  for sub in alibaba/yalantinglibs:extern/yalantinglibs pybind/pybind11:extern/pybind11; do
    repo=${sub%%:*} path=${sub#*:}
    git_dir=$mirrors/${repo/\//+}/repo
    pin=$(git --git-dir="$mc" ls-tree HEAD "$path" | awk '{print $3}')
    [[ -n "$pin" ]] || die "Mooncake names no submodule commit for $path"
    if [[ -f "$dest/$path/CMakeLists.txt" ]]; then
      echo "tebench-build: $path already extracted"
      continue
    fi
    git --git-dir="$git_dir" cat-file -e "$pin^{commit}" 2>/dev/null ||
      die "mirror $git_dir lacks $repo at the pinned commit $pin: run fetch github:$repo"
    mkdir -p "$dest/$path"
    git --git-dir="$git_dir" archive "$pin" | tar -x -C "$dest/$path"
    echo "tebench-build: $path at ${pin:0:7}"
  done
  echo "tebench-build: Mooncake $(git --git-dir="$mc" rev-parse --short HEAD) in $dest"
  exit 0
fi

src=${1:?usage: $0 MOONCAKE_SRC [JOBS]   (or $0 --checkout MIRRORS DEST)}
jobs=${2:-2}
src=$(cd "$src" && pwd)
[[ -f "$src/mooncake-transfer-engine/benchmark/main.cpp" ]] ||
  die "$src is not a Mooncake source tree (no mooncake-transfer-engine/benchmark/main.cpp)"
for sub in yalantinglibs pybind11; do
  [[ -f "$src/extern/$sub/CMakeLists.txt" ]] ||
    die "$src/extern/$sub is empty: extract the submodule's pinned commit (see --checkout)"
done

# 1. Debian packages Mooncake's CMake asks for (TE + TENT, no store, no CUDA).
pkgs=(cmake make g++ pkg-config libgoogle-glog-dev libgflags-dev libjsoncpp-dev
      libasio-dev libyaml-cpp-dev liburing-dev libhiredis-dev libnuma-dev
      libibverbs-dev libcurl4-openssl-dev libboost-dev libmsgpack-dev
      libunwind-dev libssl-dev python3-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "tebench-build: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
else
  echo "tebench-build: Debian packages present"
fi

# 2. yalantinglibs (header-only, found by find_package CONFIG), installed into
#    a prefix inside the source tree rather than /usr/local.
prefix=$src/.ylt-prefix
if [[ -f "$prefix/lib/cmake/yalantinglibs/yalantinglibsConfig.cmake" ]] ||
   compgen -G "$prefix/*/cmake/yalantinglibs/*onfig.cmake" >/dev/null ||
   compgen -G "$prefix/lib*/cmake/yalantinglibs/*onfig.cmake" >/dev/null; then
  echo "tebench-build: yalantinglibs installed in $prefix"
else
  echo "tebench-build: installing yalantinglibs into $prefix"
  cmake -S "$src/extern/yalantinglibs" -B "$src/extern/yalantinglibs/build" \
    -DCMAKE_INSTALL_PREFIX="$prefix" -DBUILD_EXAMPLES=OFF -DBUILD_BENCHMARK=OFF \
    -DBUILD_UNIT_TESTS=OFF -DCMAKE_BUILD_TYPE=Release
  nice -n 10 cmake --build "$src/extern/yalantinglibs/build" -j"$jobs"
  cmake --install "$src/extern/yalantinglibs/build"
fi

# 3. Configure Mooncake: transfer engine only, TENT on, CUDA off, Release.
build=$src/build
if [[ -f "$build/CMakeCache.txt" ]] && grep -q '^USE_TENT:BOOL=ON' "$build/CMakeCache.txt"; then
  echo "tebench-build: $build configured"
else
  cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" \
    -DUSE_CUDA=OFF -DUSE_TENT=ON -DUSE_TCP=ON -DUSE_HTTP=ON \
    -DWITH_TE=ON -DWITH_STORE=OFF -DWITH_STORE_RUST=OFF -DWITH_P2P_STORE=OFF \
    -DWITH_RUST_EXAMPLE=OFF -DWITH_EP=OFF \
    -DBUILD_UNIT_TESTS=OFF -DBUILD_EXAMPLES=OFF -DBUILD_BENCHMARK=ON \
    -DENABLE_DEBUG_SYMBOLS=OFF
fi

# 4. Build only tebench and what it links.
bin=$build/mooncake-transfer-engine/benchmark/tebench
nice -n 10 cmake --build "$build" --target tebench -j"$jobs"
[[ -x "$bin" ]] || die "build finished but $bin is missing"
"$bin" --help >/dev/null 2>&1 || true
echo "$bin"
