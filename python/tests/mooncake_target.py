"""A Mooncake-style target of test_mooncake_p2p.py, run as its own
process: a ferry.mooncake.TransferEngine started peer-to-peer
("P2PHANDSHAKE") as HOST (argv[1]) with PROTOCOL (argv[2]), one managed
buffer of SIZE bytes, zeroed.

It prints one JSON line: {"session": HOST:get_rpc_port() as a Mooncake
caller writes it, "name": the engine's name, "addr": the buffer's
address, "self_addr": get_first_buffer_address of its own session}. Then,
for each line "digest" on stdin, it prints the sha256 of the buffer as it
holds it, so that the initiator checks the bytes in the target's own
memory; at end of stdin it exits 0.
"""

import hashlib
import json
import sys

import conftest  # noqa: F401  (first: it puts the package under test on sys.path)

from ferry.mooncake import TransferEngine  # noqa: E402

SIZE = 1 << 20


def session(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def main() -> int:
    host, protocol = sys.argv[1], sys.argv[2]
    te = TransferEngine(cluster_secret_file=conftest.SECRET)
    if te.initialize(host, "P2PHANDSHAKE", protocol, "") != 0:
        print(f"initialize {host!r}: {te.last_error}", file=sys.stderr)
        return 1
    addr = te.allocate_managed_buffer(SIZE)
    if addr == 0 or te.write_bytes_to_buffer(addr, bytes(SIZE), SIZE) != 0:
        print(f"allocate_managed_buffer: {te.last_error}", file=sys.stderr)
        return 1
    me = session(host, te.get_rpc_port())
    print(json.dumps({"session": me, "name": te.engine.name, "addr": addr,
                      "self_addr": te.get_first_buffer_address(me)}), flush=True)
    for line in sys.stdin:
        if line.strip() == "digest":
            print(hashlib.sha256(te.read_bytes_from_buffer(addr, SIZE)).hexdigest(), flush=True)
    te.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
