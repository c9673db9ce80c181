"""``python -m ferry`` (and the ``ferry`` script a wheel installs): the
Python side's checks, then the bundled ``ferry`` command.

    python -m ferry version [--json]   the package, its library, ferry._fast, plugins and command
    python -m ferry doctor [flags]     the Python side's checks (library, plugins, one engine
                                       moving verified bytes over each transport), then
                                       `ferry doctor [flags]` (--json: one JSON object a line)
    python -m ferry COMMAND ...        any other command of the bundled `ferry` (demo, bench, ...)

The bundled command is the ``ferry`` executable beside the library the
package loads: the wheel's ``ferry/bin/ferry``, or ``bin/ferry`` of a
checkout. Exit status: 0 when every check passed, 1 when one failed, 2 for
a usage error.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

USAGE = __doc__.split("\n\n")[1]


def _command() -> Optional[str]:
    """The ferry executable beside the loaded library, or None. Never one
    found on PATH: in a venv that is this script."""
    from . import _ffi

    _ffi.lib()
    p = os.path.join(os.path.dirname(_ffi.path()), "ferry")
    return p if os.path.isfile(p) and os.access(p, os.X_OK) else None


def _plugins(d: str, prefix: str) -> List[str]:
    try:
        return sorted(n[len(prefix):] for n in os.listdir(d) if n.startswith(prefix))
    except OSError:
        return []


def _facts() -> Dict[str, object]:
    """What `version` prints: raises ferry.LibraryNotFound when the
    library does not load."""
    import ferry
    from . import _ffi

    lib = _ffi.lib()
    fast = _ffi.fast()
    pdir = _ffi.plugin_dir()
    return {
        "package": ferry.__version__,
        "package_dir": os.path.dirname(os.path.abspath(ferry.__file__)),
        "python": sys.executable,
        "library": _ffi.path(),
        "library_version": ferry.version(),
        "abi": int(lib.ferry_abi_version()),
        "abi_needed": _ffi.ABI_VERSION,
        "fast": fast is not None,
        "plugin_dir": pdir,
        "plugins": _plugins(pdir, "ferry-plugin-") if pdir else [],
        "devices": _plugins(pdir, "ferry-device-") if pdir else [],
        "command": _command() or "",
    }


def version(args: Sequence[str]) -> int:
    from .errors import LibraryNotFound

    try:
        f = _facts()
    except LibraryNotFound as e:
        print(f"ferry (python) {_package_version()}: {e}", file=sys.stderr)
        return 1
    if "--json" in args or "-json" in args:
        print(json.dumps(f))
        return 0
    print(f"ferry (python) {f['package']}, {f['package_dir']} ({f['python']})")
    print(f"library  {f['library_version']}, {f['library']} (ABI {f['abi']}; the package needs {f['abi_needed']})")
    print(f"fast     {'ferry._fast (cffi API mode)' if f['fast'] else 'not built: calls go through cffi ABI mode'}")
    print(f"plugins  {', '.join(f['plugins']) or 'none'}; devices {', '.join(f['devices']) or 'none'}; in {f['plugin_dir'] or '(nowhere found)'}")
    print(f"command  {f['command'] or 'none beside the library'}")
    return 0


def _package_version() -> str:
    from . import __version__

    return __version__


class _Findings:
    """Rows as `ferry doctor` prints them: area, item, status, detail, fix."""

    def __init__(self) -> None:
        self.rows: List[Dict[str, str]] = []

    def add(self, item: str, status: str, detail: str, fix: str = "") -> None:
        row = {"area": "python", "item": item, "status": status, "detail": detail}
        if fix:
            row["fix"] = fix
        self.rows.append(row)

    @property
    def failed(self) -> bool:
        return any(r["status"] == "fail" for r in self.rows)

    def print(self, as_json: bool) -> None:
        if as_json:
            for r in self.rows:
                print(json.dumps(r))
            return
        w = max(len(r["item"]) for r in self.rows)
        print(f"{'AREA':<10} {'ITEM':<{w}}  {'STATUS':<7} DETAIL")
        for r in self.rows:
            print(f"{r['area']:<10} {r['item']:<{w}}  {r['status'].upper():<7} {r['detail']}")
            if r.get("fix"):
                print(f"{'':<10} {'':<{w}}  {'':<7} -> {r['fix']}")


def _move(pdir: str, transports: Sequence[str]) -> Dict[str, str]:
    """Start one engine with the transports, open its own segment and move
    256 KiB there and back over each; transport -> "" or what went wrong."""
    import ferry

    fd, secret = tempfile.mkstemp(prefix="ferry-doctor-secret-")
    try:
        os.write(fd, os.urandom(32).hex().encode())
        os.close(fd)
        blocks = "\n".join(
            f'plugin "{t}" {{\n  config {{\n    listen = ["127.0.0.1:0"]\n  }}\n}}' if t == "tcp" else f'plugin "{t}" {{}}'
            for t in transports)
        text = (f"name = \"python-doctor-{os.getpid()}\"\nplugin_dir = {json.dumps(pdir)}\n"
                f"cluster_secret_file = {json.dumps(secret)}\nmetastore {{\n  kind = \"none\"\n}}\n{blocks}\n")
        n = 256 << 10
        out: Dict[str, str] = {}
        with ferry.Engine(config_text=text) as e:
            mem = e.allocate(3 * n)
            base = e.register(mem, ferry.Perm.REMOTE_READ_WRITE).address
            view = mem.view
            pattern = os.urandom(n)
            view[:n] = pattern
            with e.open_segment(e.rpc_address) as seg:
                for t in transports:
                    if t not in seg.transports:
                        out[t] = f"the engine's own segment is not reachable over it (it has {', '.join(seg.transports) or 'none'})"
                        continue
                    view[n:] = bytes(2 * n)
                    e.write(view[:n], seg, base + n, transport=t, timeout=30)
                    e.read(view[2 * n:], seg, base + n, transport=t, timeout=30)
                    out[t] = "" if bytes(view[2 * n:]) == pattern else "the bytes read back differ from those written"
            del view
        return out
    finally:
        os.unlink(secret)


def doctor(args: Sequence[str]) -> int:
    import ferry
    from . import _ffi

    as_json = "--json" in args or "-json" in args
    f = _Findings()
    f.add("package", "ok", f"{ferry.__version__}, {os.path.dirname(os.path.abspath(ferry.__file__))}, Python {sys.version.split()[0]} ({sys.executable})")
    try:
        lib = _ffi.lib()
    except ferry.LibraryNotFound as e:
        f.add("library", "fail", str(e), "reinstall the wheel, or in a checkout run make build; FERRY_LIB names a library to use")
        f.print(as_json)
        return 1
    f.add("library", "ok", f"{ferry.version()}, {_ffi.path()}, ABI {int(lib.ferry_abi_version())} (the package needs {_ffi.ABI_VERSION})")
    if _ffi.fast() is not None:
        f.add("ferry._fast", "ok", "built: write and read call the library in cffi's API mode")
    else:
        f.add("ferry._fast", "info", "not built or not for this Python: write and read go through cffi's ABI mode (the same calls, slower)",
              "make build compiles it where Python.h is (Debian: python3-dev)")
    pdir = _ffi.plugin_dir()
    have = _plugins(pdir, "ferry-plugin-") if pdir else []
    if not have:
        f.add("plugins", "fail", f"no ferry-plugin-* found (plugin directory: {pdir or 'none'}; FERRY_PLUGIN_DIR is {os.environ.get('FERRY_PLUGIN_DIR', 'unset')})",
              "set FERRY_PLUGIN_DIR to the directory of the plugins, or reinstall the wheel, which carries them")
    else:
        f.add("plugins", "ok", f"{', '.join(have)}; devices {', '.join(_plugins(pdir, 'ferry-device-')) or 'none'}; in {pdir}")
        transports = [t for t in ("shm", "tcp") if t in have]
        os.environ.setdefault("FERRY_LOG_LEVEL", "error")
        start = time.monotonic()
        try:
            moved = _move(pdir, transports)
        except ferry.FerryError as e:
            f.add("engine", "fail", f"an engine with {', '.join(transports)} did not start or move bytes: {e}",
                  "run `ferry doctor` below for the plugin at fault")
        else:
            ms = (time.monotonic() - start) * 1e3
            for t, why in moved.items():
                if why:
                    f.add(f"engine {t}", "fail", why, "see the plugin rows of `ferry doctor` below")
                else:
                    f.add(f"engine {t}", "ok", f"256 KiB written and read back, verified, through {t} (one engine, its own segment; {ms:.0f} ms in all)")
    cmd = _command()
    if cmd is None:
        f.add("command", "warn", f"no ferry executable beside {_ffi.path()}: the machine checks below are skipped",
              "reinstall the wheel, or in a checkout run make build")
    f.print(as_json)
    if cmd is None:
        return 1 if f.failed else 0
    if not as_json:
        print(flush=True)
    sys.stdout.flush()
    import subprocess

    rc = subprocess.run([cmd, "doctor", *args]).returncode
    return 1 if f.failed or rc != 0 else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else 2
    cmd, rest = args[0], args[1:]
    if cmd == "version":
        return version(rest)
    if cmd == "doctor":
        return doctor(rest)
    from .errors import LibraryNotFound

    try:
        exe = _command()
    except LibraryNotFound as e:
        print(f"ferry: {e}", file=sys.stderr)
        return 1
    if exe is None:
        print("ferry: no ferry executable beside the library; reinstall the wheel, or in a checkout run make build", file=sys.stderr)
        return 1
    sys.stdout.flush()
    os.execv(exe, [exe, cmd, *rest])
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
