"""Build the ferry wheel (make wheel) from a `make build` tree, with what
Debian ships: pip (python3-pip) drives setuptools (python3-setuptools) and
wheel (python3-wheel) without build isolation, so no package index is
needed.

    /usr/bin/python3 python/build_wheel.py [--bin bin] [--out bin/wheel]

It copies the package's sources (pyproject.toml, setup.py, ferry/) to a
temporary directory, so that the checkout gets no build/ or egg-info,
builds there (setup.py adds bin/'s native pieces) and prints the wheel's
path, its only line on stdout.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def build(bin_dir: str, out: str, python: str = sys.executable) -> str:
    """Build the wheel into out; return its path."""
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ferry-wheel-") as tmp:
        src = os.path.join(tmp, "src")
        os.makedirs(src)
        for f in ("pyproject.toml", "setup.py"):
            shutil.copy2(os.path.join(HERE, f), src)
        shutil.copytree(os.path.join(HERE, "ferry"), os.path.join(src, "ferry"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "bin"))
        dist = os.path.join(tmp, "dist")
        env = dict(os.environ, FERRY_BIN=os.path.abspath(bin_dir), PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
                   PYTHONDONTWRITEBYTECODE="1")
        cmd = [python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index", "-q", "-w", dist, src]
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            raise SystemExit(f"build_wheel: `{' '.join(cmd)}` failed ({p.returncode}):\n{p.stdout[-4000:]}")
        wheels = glob.glob(os.path.join(dist, "*.whl"))
        if len(wheels) != 1:
            raise SystemExit(f"build_wheel: pip made {wheels}, want one wheel")
        dst = os.path.join(out, os.path.basename(wheels[0]))
        shutil.move(wheels[0], dst)
        return dst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "bin"), help="the make build output (default: bin/)")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "bin", "wheel"), help="where the wheel goes (default: bin/wheel)")
    a = ap.parse_args()
    print(os.path.relpath(build(a.bin, a.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
