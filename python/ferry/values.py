"""The values of Ferry's API: operations, permissions, priorities, task
states, requests and statuses. Plain data; nothing here calls the library.
The numbers are the C ABI's (include/ferry.h), which are TENT's."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional, Tuple

__all__ = [
    "Op",
    "Perm",
    "Priority",
    "State",
    "Request",
    "TaskStatus",
    "BatchStatus",
    "BufferInfo",
    "Notification",
    "BlockLayout",
]


class Op(enum.IntEnum):
    """What a request does."""

    READ = 0  #: remote segment -> local memory
    WRITE = 1  #: local memory -> remote segment


class Perm(enum.IntEnum):
    """What peers may do with a registered buffer."""

    LOCAL = 0  #: this engine only
    REMOTE_READ = 1  #: peers may read it
    REMOTE_READ_WRITE = 2  #: peers may read and write it


class Priority(enum.IntEnum):
    """TENT's numbering: HIGH=0, MEDIUM=1 (the engine's normal), LOW=2."""

    HIGH = 0
    MEDIUM = 1
    LOW = 2


class State(enum.IntEnum):
    """A task's state."""

    PENDING = 0
    COMPLETED = 1
    FAILED = 2
    CANCELED = 3
    TIMEOUT = 4
    INVALID = 5


@dataclass
class Request:
    """One transfer between local registered memory and a remote segment.

    ``local`` is the local range: an object with the buffer protocol that
    lies inside registered memory (a slice of a registered array, a
    :class:`ferry.Memory` or a slice of its view), or an integer address
    inside registered memory, with ``length``. ``remote`` is the address
    in the segment, as its buffers list it (``segment.buffers[i].base +
    offset``). ``length`` defaults to the local buffer's length.
    ``timeout``, in seconds, sets the task's deadline from now; None
    leaves the engine's ``transfer.default_deadline``. ``transport`` pins
    the plugin ("tcp", "shm"): a hint that cannot reach the segment fails
    the task, never falls back silently.
    """

    op: Op
    local: Any
    segment: Any  # a Segment or its integer id
    remote: int
    length: Optional[int] = None
    priority: Priority = Priority.MEDIUM
    timeout: Optional[float] = None
    transport: Optional[str] = None
    policy: Optional[str] = None
    intent: Optional[str] = None


class TaskStatus(NamedTuple):
    """One task's state. ``error`` is the exception saying why, when the
    task ended other than COMPLETED; None otherwise."""

    state: State
    transferred_bytes: int
    attempts: int
    error: Optional[Exception]

    @property
    def done(self) -> bool:
        """The task has ended (whatever the outcome)."""
        return self.state != State.PENDING

    @property
    def ok(self) -> bool:
        """The task completed."""
        return self.state == State.COMPLETED


class BatchStatus(NamedTuple):
    """A batch's tasks, summed. ``failed`` counts FAILED, CANCELED, TIMEOUT
    and INVALID together."""

    tasks: int
    pending: int
    completed: int
    failed: int
    transferred_bytes: int

    @property
    def done(self) -> bool:
        """Every task has ended."""
        return self.pending == 0


class BufferInfo(NamedTuple):
    """One buffer of a segment: ``base`` is the address requests use."""

    base: int
    length: int
    perm: Perm
    foreign: bool  #: application memory: shm (zero copy) cannot reach it


class Notification(NamedTuple):
    """A message from a peer engine: its name (``sender``), a name and a
    small payload."""

    sender: str
    name: str
    msg: bytes


@dataclass(frozen=True)
class BlockLayout:
    """Where one side's blocks lie, from block 0 of layer 0: block ``i`` is
    block ``i % blocks`` of layer ``i // blocks``. ``stride`` 0 means
    packed blocks (``block_size``), ``layers`` 0 means one, and
    ``layer_stride`` 0 means packed layers (``blocks * stride``)."""

    block_size: int
    blocks: int
    stride: int = 0
    layers: int = 0
    layer_stride: int = 0

    def span(self) -> int:
        """Bytes from block 0 of layer 0 to the end of the last block."""
        stride = self.stride or self.block_size
        layers = self.layers or 1
        lstride = self.layer_stride or self.blocks * stride
        return (layers - 1) * lstride + (self.blocks - 1) * stride + self.block_size

    def as_tuple(self) -> Tuple[int, int, int, int, int]:
        return (self.block_size, self.blocks, self.stride, self.layers, self.layer_stride)
