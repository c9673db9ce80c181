"""Engine.upgrade_plugin: the tcp plugin of an engine is upgraded to a
copy of bin/ferry-plugin-tcp at another path, pinned by its sha256, and
back to the plugin directory's binary, while a thread moves verified
bytes over tcp; upgrades that cannot serve (a path with nothing there, a
wrong sha256) raise PluginFailed with why and the old plugin serves on.
No transfer may fail (examples/c/upgrade_test.c does the same in C)."""

import hashlib
import os
import shutil
import threading
import time

import pytest

import ferry
from conftest import BIN, config

CHUNK = 1 << 16


class Traffic:
    """A thread writing fresh bytes from ``a`` to the target's buffer over
    tcp, checking them there, reading them back and checking them again."""

    def __init__(self, a, seg, target_view, remote):
        self.a, self.seg, self.target, self.remote = a, seg, target_view, remote
        self.src = a.allocate(CHUNK)
        self.back = a.allocate(CHUNK)
        a.register(self.src)
        a.register(self.back)
        self.rounds = 0
        self.errors = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        seed = 0
        while not self.stop.is_set():
            seed += 1
            data = bytes((i * 31 + seed * 7) & 0xFF for i in range(256)) * (CHUNK // 256)
            try:
                self.src.view[:] = data
                self.a.write(self.src, self.seg, self.remote, timeout=10, transport="tcp")
                if bytes(self.target) != data:
                    raise AssertionError(f"round {seed}: the target holds other bytes than were written")
                self.back.view[:] = bytes(CHUNK)
                self.a.read(self.back, self.seg, self.remote, timeout=10, transport="tcp")
                if bytes(self.back.view) != data:
                    raise AssertionError(f"round {seed}: read back other bytes than were written")
            except Exception as ex:  # noqa: BLE001 - collected, asserted at the end
                self.errors.append(ex)
                continue
            self.rounds += 1

    def after(self, n, what):
        """Wait until n more rounds passed: the plugin serves."""
        want = self.rounds + n
        end = time.monotonic() + 30
        while self.rounds < want and time.monotonic() < end:
            time.sleep(0.01)
        assert self.rounds >= want, f"{what}: no {n} verified rounds in 30 s; errors: {self.errors[:3]}"

    def finish(self):
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()


def test_upgrade_plugin_under_traffic(tmp_path):
    copy = tmp_path / "ferry-plugin-tcp-v2"
    shutil.copy2(os.path.join(BIN, "ferry-plugin-tcp"), copy)
    os.chmod(copy, 0o755)
    sum_ = hashlib.sha256(copy.read_bytes()).hexdigest()
    bad_sum = ("1" if sum_[0] == "0" else "0") + sum_[1:]
    pid = os.getpid()
    with ferry.Engine(config_text=config(f"py-upgrade-target-{pid}", ["tcp"])) as target, \
            ferry.Engine(config_text=config(f"py-upgrade-a-{pid}", ["tcp"])) as a:
        tmem = target.allocate(CHUNK)
        target.register(tmem, ferry.Perm.REMOTE_READ_WRITE)
        seg = a.open_segment(target.rpc_address)
        t = Traffic(a, seg, tmem.view, tmem.address)
        try:
            t.after(3, "before any upgrade")

            # Bad arguments: refused before anything starts.
            with pytest.raises(ferry.InvalidRequest, match="name"):
                a.upgrade_plugin("", str(copy))
            with pytest.raises(ferry.InvalidRequest, match='has no plugin "nosuch"'):
                a.upgrade_plugin("nosuch", str(copy))
            with pytest.raises(ferry.InvalidRequest, match="not 64 hex digits"):
                a.upgrade_plugin("tcp", str(copy), sha256="abc")
            with pytest.raises(ferry.InvalidRequest, match="drain"):
                a.upgrade_plugin("tcp", str(copy), drain=-1)

            # Binaries that cannot serve: the old plugin serves on.
            missing = tmp_path / "nothing-here"
            with pytest.raises(ferry.PluginFailed, match="binary not found") as ei:
                a.upgrade_plugin("tcp", missing, drain=5)
            assert str(missing) in str(ei.value)
            assert ei.value.code == -7  # FERRY_ERR_PLUGIN_FAILED
            t.after(3, "after the upgrade to a missing binary")
            with pytest.raises(ferry.PluginFailed, match="checksum mismatch"):
                a.upgrade_plugin("tcp", str(copy), sha256=bad_sum, drain=5)
            t.after(3, "after the upgrade with a wrong sha256")

            # The copy, pinned by its sum; then the plugin directory's
            # binary again, unpinned, with the default drain.
            a.upgrade_plugin("tcp", copy, sha256=sum_, drain=5)
            t.after(3, "after the upgrade to the copy")
            a.upgrade_plugin("tcp")
            t.after(3, "after the upgrade back to the plugin directory's binary")
        finally:
            t.finish()
        assert not t.errors, f"{len(t.errors)} transfer(s) failed across the upgrades: {t.errors[:3]}"
    with pytest.raises(ferry.Closed):
        a.upgrade_plugin("tcp", str(copy))
