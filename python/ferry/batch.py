"""Asynchronous transfers: :class:`Batch` (tasks submitted, polled, waited
for, canceled) and prepared block lists (:class:`BlockList`)."""

from __future__ import annotations

import threading
from typing import Any, List, Optional, Sequence, Tuple, Union

from . import _ffi, errors
from ._ffi import ffi
from .values import BatchStatus, BlockLayout, Op, Priority, Request, State, TaskStatus

__all__ = ["Batch", "BlockList"]


def _u32(xs: Any, what: str) -> Tuple[Any, int]:
    """A uint32_t array of xs: a numpy uint32 array is passed without a
    copy; any other sequence of ints is copied."""
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy is a dependency of the tests only
        numpy = None
    if numpy is not None and isinstance(xs, numpy.ndarray):
        if xs.dtype != numpy.uint32 or not xs.flags.c_contiguous or xs.ndim != 1:
            xs = numpy.ascontiguousarray(xs, dtype=numpy.uint32).ravel()
        return ffi.from_buffer("uint32_t[]", xs), len(xs)
    try:
        return ffi.new("uint32_t[]", list(xs)), len(xs)
    except (OverflowError, TypeError) as e:
        raise errors.InvalidRequest(f"{what}: block indices must be integers in 0..2**32-1 ({e})") from None


class BlockList:
    """A prepared pair of block layouts, local memory and a remote
    segment's, checked once (:meth:`ferry.Engine.prepare_blocks`). Submit
    index pairs with :meth:`Batch.submit_blocks` or
    :meth:`Batch.submit_block_range`; free it with :meth:`free` or
    ``with``. It keeps the local memory referenced until freed."""

    def __init__(self, engine: Any, segment: Any, local: Any, ll: BlockLayout, remote: int, rl: BlockLayout) -> None:
        self._engine = engine
        self._h = 0
        span = ll.span()
        address, n, keep = engine._local(local, None, 1, "prepare_blocks")
        self._keep = (local, keep)
        cl = ffi.new("ferry_block_layout_t *", ll.as_tuple())
        cr = ffi.new("ferry_block_layout_t *", rl.as_tuple())
        out = ffi.new("ferry_blocks_t *")
        sid = segment if isinstance(segment, int) else segment.id
        engine._call(
            f"prepare blocks ({ll.layers or 1} layers x {ll.blocks} blocks of {ll.block_size} bytes, {span} of {n} bytes)",
            engine._lib.ferry_prepare_blocks, engine._handle(), sid, ffi.cast("void *", address), n, cl, remote, cr, out,
        )
        self._h = int(out[0])
        self.local_layout = ll
        self.remote_layout = rl

    def _handle(self) -> int:
        if self._h == 0:
            raise errors.Closed("block list: it was freed")
        return self._h

    def free(self) -> None:
        """Release the list (idempotent)."""
        h, self._h = self._h, 0
        if h and not self._engine.closed:
            self._engine._call("free block list", self._engine._lib.ferry_free_blocks, self._engine._handle(), h)
        self._keep = None

    def __enter__(self) -> "BlockList":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.free()


class Batch:
    """Up to ``capacity`` asynchronous tasks (:meth:`ferry.Engine.batch`).

    :meth:`submit` starts requests and returns their task indices;
    :meth:`status`, :meth:`statuses` and :meth:`summary` poll,
    :meth:`wait` blocks, :meth:`cancel` cancels. Free it with
    :meth:`free` or ``with`` (pending tasks are canceled). The local
    buffers of its requests are referenced until it is freed. Do not free
    a batch while another thread uses it."""

    def __init__(self, engine: Any, capacity: int) -> None:
        self._engine = engine
        self._lib = engine._lib
        self._h = 0
        if not isinstance(capacity, int) or capacity <= 0:
            raise errors.InvalidRequest(f"batch: capacity {capacity!r} must be a positive number of tasks")
        out = ffi.new("ferry_batch_t *")
        engine._call(f"allocate batch of {capacity}", self._lib.ferry_allocate_batch, engine._handle(), capacity, out)
        self._h = int(out[0])
        self.capacity = capacity
        self._keep: List[Any] = []
        self._lock = threading.Lock()
        self._st = ffi.new("ferry_task_status_t *")

    def __repr__(self) -> str:
        return f"<ferry.Batch capacity={self.capacity}{' freed' if self._h == 0 else ''}>"

    def _handle(self) -> Tuple[int, int]:
        if self._h == 0:
            raise errors.Closed("batch: it was freed")
        return self._engine._handle(), self._h

    def submit(self, requests: Union[Request, Sequence[Request]], notify: Optional[Tuple[str, bytes]] = None) -> range:
        """Start the requests as tasks; return their indices. With
        ``notify=(name, msg)``, once every one of them has COMPLETED the
        notification goes to each segment they target, exactly once (not
        at all if one ends otherwise). A request the engine refuses
        becomes an INVALID task; a malformed call raises and adds none."""
        self._handle()
        if isinstance(requests, Request):
            requests = [requests]
        e = self._engine
        arr, keep = e._requests(requests, "submit")
        h, b = self._handle()
        n = len(requests)
        with self._lock:
            first = self.summary().tasks
            if notify is None:
                e._call(f"submit {n} requests", self._lib.ferry_submit, h, b, arr, n)
            else:
                name, msg = notify
                if not name:
                    raise errors.InvalidRequest("submit: empty notification name")
                m = bytes(msg)
                e._call(f"submit {n} requests with notification {name!r}", self._lib.ferry_submit_notif,
                        h, b, arr, n, name.encode(), m or ffi.NULL, len(m))
            self._keep.append(keep)
        return range(first, first + n)

    def _block_request(self, op: Op, priority: Priority, timeout: Optional[float], transport: Optional[str],
                       policy: Optional[str], intent: Optional[str], no_merge: bool, keep: List[Any]) -> Any:
        from .engine import _deadline

        r = ffi.new("ferry_block_request_t *")
        r.opcode = int(op)
        r.priority = int(priority)
        r.deadline_ns = _deadline(timeout)
        r.no_merge = 1 if no_merge else 0
        for field, s in (("transport_hint", transport), ("policy_name", policy), ("intent", intent)):
            if s:
                c = ffi.new("char[]", s.encode())
                keep.append(c)
                setattr(r, field, c)
        return r

    def submit_blocks(self, blocks: BlockList, local: Any, remote: Any, op: Op = Op.WRITE, *,
                      priority: Priority = Priority.MEDIUM, timeout: Optional[float] = None,
                      transport: Optional[str] = None, policy: Optional[str] = None, intent: Optional[str] = None,
                      no_merge: bool = False) -> range:
        """Submit block pairs ``local[k] -> remote[k]`` (index sequences of
        equal length, or numpy uint32 arrays: no copy) of a prepared list;
        pairs whose blocks follow on both sides merge into one task unless
        ``no_merge``. Returns the tasks it added."""
        keep: List[Any] = []
        r = self._block_request(op, priority, timeout, transport, policy, intent, no_merge, keep)
        li, n = _u32(local, "submit_blocks: local")
        ri, m = _u32(remote, "submit_blocks: remote")
        if n != m or n == 0:
            raise errors.InvalidRequest(f"submit_blocks: {n} local and {m} remote indices; give as many of each, at least one")
        first, count = ffi.new("size_t *"), ffi.new("size_t *")
        h, b = self._handle()
        self._engine._call(f"submit {n} block pairs", self._lib.ferry_submit_blocks, h, b, blocks._handle(), r, li, ri, n, first, count)
        return range(first[0], first[0] + count[0])

    def submit_block_range(self, blocks: BlockList, local_first: int, remote_first: int, n: int, op: Op = Op.WRITE, *,
                           priority: Priority = Priority.MEDIUM, timeout: Optional[float] = None,
                           transport: Optional[str] = None, policy: Optional[str] = None,
                           intent: Optional[str] = None, no_merge: bool = False) -> range:
        """Submit the ``n`` pairs ``(local_first + k, remote_first + k)``,
        as :meth:`submit_blocks` does."""
        if n <= 0:
            raise errors.InvalidRequest(f"submit_block_range: n {n} must be positive")
        keep: List[Any] = []
        r = self._block_request(op, priority, timeout, transport, policy, intent, no_merge, keep)
        first, count = ffi.new("size_t *"), ffi.new("size_t *")
        h, b = self._handle()
        self._engine._call(f"submit block range of {n}", self._lib.ferry_submit_block_range, h, b, blocks._handle(), r,
                           local_first, remote_first, n, first, count)
        return range(first[0], first[0] + count[0])

    def _status(self, st: Any) -> TaskStatus:
        err = None
        if st.error != 0:
            err = _ffi.error(st.error)
        return TaskStatus(State(st.state), int(st.transferred_bytes), int(st.attempts), err)

    def status(self, task: int) -> TaskStatus:
        """Task ``task``'s state; ``error`` says why it did not complete."""
        h, b = self._handle()
        st = ffi.new("ferry_task_status_t *")
        self._engine._call(f"status of task {task}", self._lib.ferry_task_status, h, b, task, st)
        return self._status(st)

    def statuses(self, first: int = 0, count: Optional[int] = None) -> List[TaskStatus]:
        """The states of tasks ``first`` on (``count`` of them, or to the
        end). A failed task's ``error`` carries its code; read
        :meth:`status` for its message."""
        h, b = self._handle()
        if count is None:
            count = max(self.summary().tasks - first, 0)
        if count == 0:
            return []
        out = ffi.new("ferry_task_status_t[]", count)
        filled = ffi.new("size_t *")
        self._engine._call("status list", self._lib.ferry_task_status_list, h, b, first, out, count, filled)
        res = []
        for i in range(filled[0]):
            st = out[i]
            err = errors.error_for(st.error, f"task {first + i}: {State(st.state).name}", _ffi._classes) if st.error else None
            res.append(TaskStatus(State(st.state), int(st.transferred_bytes), int(st.attempts), err))
        return res

    def summary(self) -> BatchStatus:
        """The batch's tasks, summed."""
        h, b = self._handle()
        s = ffi.new("ferry_batch_status_t *")
        self._engine._call("batch status", self._lib.ferry_batch_status, h, b, s)
        return BatchStatus(int(s.tasks), int(s.pending), int(s.completed), int(s.failed), int(s.transferred_bytes))

    def wait(self, timeout: Optional[float] = None, check: bool = True) -> BatchStatus:
        """Block until every task has ended, or ``timeout`` seconds passed
        (then the pending ones are canceled, TIMEOUT, and
        DeadlineExceeded is raised once they ended). With ``check``, raise
        the first failed task's exception when not all completed."""
        h, b = self._handle()
        ns = 0 if timeout is None else int(timeout * 1e9)
        if timeout is not None and ns <= 0:
            raise errors.InvalidRequest(f"wait: timeout {timeout} must be positive (None: no limit)")
        self._engine._call("wait", self._lib.ferry_wait, h, b, ns)
        s = self.summary()
        if check and s.failed:
            self.check()
        return s

    def check(self) -> None:
        """Raise the exception of the first task that ended other than
        COMPLETED; nothing when none did."""
        for i, st in enumerate(self.statuses()):
            if st.state not in (State.PENDING, State.COMPLETED):
                full = self.status(i)
                raise full.error or errors.FerryError(f"task {i}: {full.state.name}")

    def cancel(self, task: Optional[int] = None) -> None:
        """Cancel task ``task``, or every pending task; best effort, does
        not wait."""
        h, b = self._handle()
        if task is None:
            self._engine._call("cancel batch", self._lib.ferry_cancel_batch, h, b)
        else:
            self._engine._call(f"cancel task {task}", self._lib.ferry_cancel_task, h, b, task)

    def free(self) -> None:
        """Free the batch: pending tasks are canceled; its local memory may
        be reused once this returns. Idempotent."""
        b, self._h = self._h, 0
        if b and not self._engine.closed:
            self._engine._call("free batch", self._lib.ferry_free_batch, self._engine._handle(), b)
        self._keep = []

    def __len__(self) -> int:
        return self.summary().tasks

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.free()
