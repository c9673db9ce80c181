"""What pyproject.toml cannot say: the wheel is a platform wheel, and it
carries the native pieces of a `make build` (FERRY_BIN, default ../bin):

    ferry/bin/libferry.so       the library the package loads
    ferry/bin/ferry             the command (python -m ferry doctor runs it)
    ferry/bin/ferry-plugin-*    the transports: tcp, shm, nvlink
    ferry/bin/ferry-device-*    the GPU device plugins: cuda, rocm

stripped of their symbol tables when `strip` is there (a third of their
size; stack traces keep their function names), plus ferry._fast when it is
built for this interpreter. The test-only plugins (fault, simdev) stay
out. Build it with `make wheel` (python/build_wheel.py), or
`pip wheel --no-build-isolation python/` after `make build`.
"""

import os
import shutil
import subprocess
import sysconfig

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))

# Makefile's PLUGINS and DEVICES, less the ones for tests.
NATIVE = (
    "libferry.so",
    "ferry",
    "ferry-plugin-tcp",
    "ferry-plugin-shm",
    "ferry-plugin-nvlink",
    "ferry-device-cuda",
    "ferry-device-rocm",
)


def native_dir() -> str:
    return os.path.abspath(os.environ.get("FERRY_BIN") or os.path.join(HERE, "..", "bin"))


def fast_module() -> str:
    """ferry._fast built for this interpreter, or ""."""
    p = os.path.join(HERE, "ferry", "_fast" + sysconfig.get_config_var("EXT_SUFFIX"))
    return p if os.path.exists(p) else ""


class BuildWithNative(build_py):
    def run(self) -> None:
        super().run()
        src = native_dir()
        missing = [n for n in NATIVE if not os.path.isfile(os.path.join(src, n))]
        if missing:
            raise SystemExit(f"ferry wheel: {', '.join(missing)} not in {src}: run `make build` first "
                             "(or set FERRY_BIN to the directory that holds them)")
        dst = os.path.join(self.build_lib, "ferry", "bin")
        os.makedirs(dst, exist_ok=True)
        strip = shutil.which("strip")
        for n in NATIVE:
            out = os.path.join(dst, n)
            if strip:
                subprocess.run([strip, "-o", out, os.path.join(src, n)], check=True)
            else:
                shutil.copyfile(os.path.join(src, n), out)
            os.chmod(out, 0o755)
        fast = fast_module()
        if fast:
            shutil.copyfile(fast, os.path.join(self.build_lib, "ferry", os.path.basename(fast)))


class NativeDistribution(Distribution):
    """Native code inside: a platform wheel, installed to platlib."""

    def has_ext_modules(self) -> bool:
        return True


class PlatformWheel(bdist_wheel):
    """Linux x86_64 (the Go binaries), and this CPython's ABI only when
    ferry._fast is in it; without it any Python 3 takes the wheel."""

    def get_tag(self):
        py, abi, plat = super().get_tag()
        return (py, abi, plat) if fast_module() else ("py3", "none", plat)


setup(distclass=NativeDistribution, cmdclass={"build_py": BuildWithNative, "bdist_wheel": PlatformWheel})
