"""Build ferry._fast, the package's one compiled piece: a cffi API-mode
module with a C function that calls the library's ferry_transfer_sync
through a pointer bound at load (ferry._ffi binds it to the libferry.so it
loaded, so there is only ever one library in the process).

Why: Engine.write and read are one ferry_transfer_sync call, and through
cffi's ABI mode (libffi) each of its eight arguments is converted
generically; an API-mode call converts them in compiled code, about half
the cost of the call (python/bench/cost.py --mode parts shows both).

Optional: without it (no C compiler, no Python headers: Debian's
python3-dev), the package calls ferry_transfer_sync through ABI mode, the
same function with the same checks. `make build` runs this:

    /usr/bin/python3 python/ferry/_fast_build.py

It writes python/ferry/_fast.<abi tag>.so (git-ignored) and says so, or
says in one line why it did not and exits 0.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
import sysconfig
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

# FAST_VERSION changes with CDEF/SOURCE; ferry._ffi ignores a built module
# of another version (a stale build), as it ignores a missing one.
FAST_VERSION = 1

CDEF = """
int ferry_py_fast_version(void);
void ferry_py_bind(uintptr_t transfer_sync);
int ferry_py_transfer_sync(uint64_t e, int opcode, uint32_t seg, uintptr_t local, uint64_t remote,
                           size_t len, int64_t timeout_ns, const char *transport_hint);
"""

SOURCE = """
#include <stddef.h>
#include <stdint.h>

typedef int (*transfer_sync_fn)(uint64_t, int, uint32_t, uintptr_t, uint64_t, size_t, int64_t, const char *);
static transfer_sync_fn transfer_sync;

static int ferry_py_fast_version(void) { return %d; }

static void ferry_py_bind(uintptr_t f) { transfer_sync = (transfer_sync_fn)f; }

static int ferry_py_transfer_sync(uint64_t e, int opcode, uint32_t seg, uintptr_t local, uint64_t remote,
                                  size_t len, int64_t timeout_ns, const char *transport_hint) {
    if (transfer_sync == NULL) {
        return -99; /* FERRY_ERR_INTERNAL: never bound (ferry._ffi binds before use) */
    }
    return transfer_sync(e, opcode, seg, local, remote, len, timeout_ns, transport_hint);
}
""" % FAST_VERSION


def main() -> int:
    try:
        import cffi
    except ImportError:
        print("ferry._fast not built: no cffi (Debian's python3-cffi); the package uses cffi's ABI mode")
        return 0
    inc = sysconfig.get_paths().get("include", "")
    if not os.path.exists(os.path.join(inc, "Python.h")):
        print(f"ferry._fast not built: no Python.h in {inc!r} (Debian's python3-dev); the package uses cffi's ABI mode")
        return 0
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    ffi.set_source("_fast", SOURCE)
    tmp = tempfile.mkdtemp(prefix="ferry-fast-")
    try:
        try:
            so = ffi.compile(tmpdir=tmp, verbose=False)
        except Exception as e:  # a compiler error: say it, build nothing
            print(f"ferry._fast not built: {e}; the package uses cffi's ABI mode")
            return 0
        for old in glob.glob(os.path.join(HERE, "_fast.*.so")):
            os.unlink(old)
        dst = os.path.join(HERE, os.path.basename(so))
        shutil.copyfile(so, dst + ".tmp")
        os.replace(dst + ".tmp", dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"built {os.path.relpath(dst)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
