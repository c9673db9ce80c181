"""The other engine of test_two_engines.py, run as its own process.

It starts an engine with the plugins named on the command line, allocates
and registers SIZE bytes of memory peers may read and write, fills the
second half with a pattern of its own, and prints one JSON line:
{"addr": rpc address, "base": buffer address, "size": SIZE}. Then it waits
for the notification "check", whose message is JSON: the sha256 the first
half must have, and the rpc address of the engine to answer; checks it,
answers with a notification "ok" (or "bad") and exits 0 (or 1).
"""

import hashlib
import json
import os
import sys

from conftest import config  # noqa: E402  (first: it puts the package under test on sys.path)

import ferry  # noqa: E402

SIZE = 1 << 20


def pattern(seed: int, n: int) -> bytes:
    return bytes((i * 131 + seed) & 0xFF for i in range(256)) * (n // 256)


def main() -> int:
    name, plugins = sys.argv[1], sys.argv[2].split(",")
    with ferry.Engine(config_text=config(name, plugins)) as e:
        mem = e.allocate(SIZE)
        arr = mem.numpy()
        arr[SIZE // 2:] = memoryview(pattern(7, SIZE // 2))
        reg = e.register(mem, ferry.Perm.REMOTE_READ_WRITE)
        print(json.dumps({"addr": e.rpc_address, "base": reg.address, "size": SIZE}), flush=True)
        while True:
            got = e.notifications(max=1, timeout=60)
            if not got:
                print("no check notification within 60 s", file=sys.stderr)
                return 1
            n = got[0]
            if n.name == "check":
                break
        check = json.loads(n.msg)
        have = hashlib.sha256(arr[: SIZE // 2].tobytes()).hexdigest()
        ok = have == check["sha256"]
        del arr
        seg = e.open_segment(check["reply"])
        e.notify(seg, "ok" if ok else "bad", have.encode())
        print("verified" if ok else f"first half has sha256 {have}, want {check['sha256']}", flush=True)
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
