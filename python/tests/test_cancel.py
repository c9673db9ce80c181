"""Cancel and deadlines of asynchronous tasks, against the fault plugin
holding every descriptor (its "hold" fault: the task stays pending until
it is canceled or times out; the plugin gives held slices back on abort)."""

import pytest

import ferry
from conftest import config

HOLD = """
plugin "fault" {
  config {
    fault "hold" {
      delay = "30s"
    }
    tcp {
      listen = ["127.0.0.1:0"]
    }
  }
}
"""


@pytest.fixture
def held(request):
    name = "py-" + request.node.name.replace("_", "-")[:50]
    with ferry.Engine(config_text=config(name, plugins=(), extra=HOLD)) as e:
        mem = e.allocate(8192)
        e.register(mem.view[:4096])
        d = e.register(mem.view[4096:], ferry.Perm.REMOTE_READ_WRITE)
        seg = e.open_segment(e.rpc_address)
        req = ferry.Request(ferry.Op.WRITE, mem.address, seg, d.address, length=4096, transport="fault")
        yield e, req
        del mem


def test_cancel_a_pending_task(held):
    e, req = held
    with e.batch(2) as b:
        b.submit([req, req])
        assert b.summary().pending == 2
        b.cancel(0)
        b.cancel()  # and the rest
        st = b.wait(timeout=30, check=False)
        assert st.pending == 0 and st.failed == 2
        s = b.status(0)
        assert s.state == ferry.State.CANCELED and isinstance(s.error, ferry.Canceled)
        with pytest.raises(ferry.Canceled):
            b.check()


def test_wait_timeout_ends_pending_tasks(held):
    e, req = held
    with e.batch(1) as b:
        b.submit(req)
        with pytest.raises(ferry.DeadlineExceeded):
            b.wait(timeout=0.2)
        s = b.status(0)
        assert s.state == ferry.State.TIMEOUT


def test_request_deadline(held):
    e, req = held
    with pytest.raises(ferry.DeadlineExceeded):
        e.write(req.local, req.segment, req.remote, 4096, transport="fault", timeout=0.2)
