"""A drop-in for Mooncake's classic Python ``TransferEngine``
(``mooncake.engine``), on Ferry.

A connector written for Mooncake switches to Ferry by changing its import::

    from ferry.mooncake import TransferEngine    # was: from mooncake.engine import TransferEngine

    te = TransferEngine()
    te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "")
    te.register_memory(ptr, length)
    session = f"127.0.0.1:{peer.get_rpc_port()}"
    if te.batch_transfer_sync_write(session, srcs, dsts, lens) != 0: ...

The calls have Mooncake's names, arguments and defaults, and return what
Mooncake returns: ``0`` for success and a negative number for failure
(here the Ferry error code, ``ferry.errors``' ``FERRY_ERR_*``), batch ids
(``0`` for failure), ``1/0/-1/-2`` from :meth:`TransferEngine.transfer_check_status`.
They do not raise for a failed transfer, as Mooncake's do not; the reason
is logged on the ``ferry.mooncake`` logger and kept in
:attr:`TransferEngine.last_error`. docs/mooncake.md lists every call with
its status: supported, supported with a difference, or not supported.

Ferry's engine underneath is :class:`ferry.Engine`; :attr:`TransferEngine.engine`
gives it to code that wants Ferry's own API (block lists, priorities).
"""

from __future__ import annotations

import enum
import logging
import os
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _cuda, _ffi, errors
from ._ffi import ffi
from .engine import Engine, Segment
from .memory import Memory, Registration
from .values import Op, Perm, Request, State

__all__ = ["TransferEngine", "TransferOpcode", "TransferNotify", "P2PHANDSHAKE"]

log = logging.getLogger("ferry.mooncake")

#: Mooncake's metadata_server for peer-to-peer handshakes: no metadata
#: server; peers name each other "host:rpc_port".
P2PHANDSHAKE = "P2PHANDSHAKE"

_FAILED = -1  # FERRY_ERR_INVALID: for a failure the Python layer itself found


class TransferOpcode(enum.IntEnum):
    """Mooncake's opcode enum (``Read``/``Write``; ``READ``/``WRITE`` as
    its documentation spells them)."""

    Read = 0
    Write = 1
    READ = 0
    WRITE = 1


#: Mooncake exports the opcode values at module level too.
Read = TransferOpcode.Read
Write = TransferOpcode.Write


class TransferNotify:
    """A notification: ``name`` and ``msg`` (str), as Mooncake's."""

    def __init__(self, name: str = "", msg: str = "") -> None:
        self.name = name
        self.msg = msg

    def __repr__(self) -> str:
        return f"TransferNotify(name={self.name!r}, msg={self.msg!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TransferNotify) and (self.name, self.msg) == (other.name, other.msg)


def _timeout_s(length: int) -> float:
    """Mooncake's transfer timeout: MC_TRANSFER_TIMEOUT seconds (at least
    5, default 30) plus one second per GiB."""
    base = 30
    env = os.environ.get("MC_TRANSFER_TIMEOUT")
    if env:
        try:
            base = max(5, int(env))
        except ValueError:
            pass
    return base + length / 1e9


def _split_host(local_hostname: str) -> str:
    """The host of "host[:port]" (an IPv6 host in brackets stays so)."""
    h = local_hostname.strip()
    if h.startswith("["):
        end = h.find("]")
        return h[: end + 1] if end > 0 else h
    if h.count(":") == 1:
        return h.split(":", 1)[0]
    return h


def _metastore_block(metadata_server: str, metadata_type: Optional[str]) -> str:
    """The HCL metastore block for Mooncake's connection string."""
    s = (metadata_server or "").strip()
    if s == P2PHANDSHAKE or metadata_type in ("p2p", "P2PHANDSHAKE"):
        return 'kind = "none"'
    proto, _, rest = s.partition("://")
    if not rest:  # no scheme: Mooncake's default is etcd
        proto, rest = (metadata_type or "etcd"), s
    if proto in ("http", "https"):
        return f'kind = "http"\n  url = "{proto}://{rest}"'
    if proto == "etcd":
        eps = ", ".join(f'"http://{e.strip()}"' for e in rest.split(",") if e.strip())
        return f"kind = \"etcd\"\n  endpoints = [{eps}]"
    if proto == "redis":
        return f'kind = "redis"\n  address = "{rest}"'
    raise errors.InvalidRequest(
        f"metadata_server {metadata_server!r}: Ferry joins P2PHANDSHAKE, http://host:port/metadata, "
        "etcd://host:port (or host:port) and redis://host:port"
    )


class TransferEngine:
    """Mooncake's ``TransferEngine`` on Ferry. Call :meth:`initialize`
    first; every other call returns a failure code before it.

    The keyword arguments, which Mooncake's constructor does not have, set
    what Mooncake's API has no place for: ``plugins`` (Ferry's transports
    to start; default shm and tcp, or tcp alone with protocol "tcp"),
    ``cluster_secret_file`` (default ``$FERRY_CLUSTER_SECRET_FILE``: every
    engine of a cluster must name the same one) and ``extra_config`` (HCL
    appended to the generated configuration, e.g. a ``transfer`` block).
    """

    def __init__(self, *, plugins: Optional[Sequence[str]] = None, cluster_secret_file: Optional[str] = None,
                 extra_config: str = "") -> None:
        self._engine: Optional[Engine] = None
        self._plugins = tuple(plugins) if plugins else None
        self._secret = cluster_secret_file if cluster_secret_file is not None else os.environ.get("FERRY_CLUSTER_SECRET_FILE")
        self._extra = extra_config
        self._lock = threading.Lock()
        self._segments: Dict[str, Segment] = {}
        self._regs: Dict[int, Registration] = {}
        self._managed: Dict[int, Tuple[Memory, Registration]] = {}
        self._batches: Dict[int, Tuple[Any, int]] = {}  # id -> (ferry.Batch, bytes)
        self._next_batch = 1
        self._tls = threading.local()
        #: The configuration text initialize started the engine with.
        self.config_text = ""

    # ---- plumbing -----------------------------------------------------------

    @property
    def engine(self) -> Optional[Engine]:
        """The :class:`ferry.Engine` underneath (None before initialize)."""
        return self._engine

    @property
    def last_error(self) -> str:
        """The message of this thread's last failed call ("" if none)."""
        return getattr(self._tls, "err", "")

    def _fail(self, what: str, e: BaseException) -> int:
        code = getattr(e, "code", 0) or _FAILED
        msg = f"{what}: {e}"
        self._tls.err = msg
        log.warning("%s", msg)
        return int(code)

    def _e(self) -> Engine:
        e = self._engine
        if e is None or e.closed:
            raise errors.Closed("ferry.mooncake: the TransferEngine is not initialized (call initialize first) or was closed")
        return e

    def _segment(self, target: str) -> Segment:
        with self._lock:
            s = self._segments.get(target)
        if s is not None and not s.closed:
            return s
        s = self._e().open_segment(target)
        with self._lock:
            self._segments[target] = s
        return s

    def _forget_segment(self, target: str) -> None:
        """After a transfer failed because the peer is gone or restarted,
        the next call opens the segment again, as Mooncake drops its
        handle. The handle is not closed: other threads may be using it,
        and opening the name again replaces a retired one."""
        with self._lock:
            self._segments.pop(target, None)

    def close(self) -> None:
        """Stop the engine (Mooncake's does when it is destroyed): its
        registrations, managed buffers and open segments go with it."""
        e, self._engine = self._engine, None
        with self._lock:
            self._segments.clear()
            self._regs.clear()
            self._managed.clear()
            self._batches.clear()
        if e is not None:
            e.close()

    def __enter__(self) -> "TransferEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # ---- initialization -----------------------------------------------------

    def initialize(self, local_hostname: str, metadata_server: str, protocol: str, device_name: str) -> int:
        """Start the engine as ``local_hostname`` (its segment name; its
        host is where the control service and tcp listen, on free ports).
        ``metadata_server``: "P2PHANDSHAKE" (no metadata server; peers
        open each other as "host:rpc_port"), "http://host:port/metadata"
        (Mooncake's HTTP metadata server, or Ferry's), "etcd://host:port"
        or "host:port" (etcd), "redis://host:port". ``protocol`` "tcp"
        starts only Ferry's tcp transport; any other starts shm and tcp,
        and Ferry picks per request. ``device_name`` is not used: Ferry
        reads the machine's NICs itself. 0 on success, negative on
        failure."""
        return self.initialize_ext(local_hostname, metadata_server, protocol, device_name, None)

    def initialize_ext(self, local_hostname: str, metadata_server: str, protocol: str, device_name: str,
                       metadata_type: Optional[str]) -> int:
        """:meth:`initialize` with Mooncake's ``metadata_type`` ("etcd",
        "redis", "http", "p2p") for a ``metadata_server`` without a
        scheme."""
        try:
            if self._engine is not None:
                raise errors.InvalidRequest("initialize: the engine is already initialized")
            if not local_hostname:
                raise errors.InvalidRequest("initialize: local_hostname is empty")
            host = _split_host(local_hostname)
            meta = _metastore_block(metadata_server, metadata_type)
            plugins = self._plugins or (("tcp",) if protocol == "tcp" else ("shm", "tcp"))
            blocks = []
            for p in plugins:
                body = f'config {{\n    listen = ["{host}:0"]\n  }}' if p == "tcp" else ""
                blocks.append(f'plugin "{p}" {{\n  {body}\n}}')
            lines = [f'name = "{local_hostname}"']
            plugin_dir = _ffi.plugin_dir()  # $FERRY_PLUGIN_DIR, else the library's bin/
            if plugin_dir:
                lines.append(f'plugin_dir = "{plugin_dir}"')
            if self._secret:
                lines.append(f'cluster_secret_file = "{self._secret}"')
            lines.append(f"metastore {{\n  {meta}\n}}")
            lines.append(f'control {{\n  listen = "{host}:0"\n}}')
            self.config_text = "\n".join(lines + blocks) + "\n" + self._extra
            self._engine = Engine(config_text=self.config_text)
            return 0
        except (errors.FerryError, ValueError) as e:
            return self._fail(f"initialize {local_hostname!r} with {metadata_server!r}", e)

    def get_rpc_port(self) -> int:
        """The port of the engine's control service: a peer-to-peer peer
        opens this engine as "host:port"."""
        try:
            return int(self._e().rpc_address.rsplit(":", 1)[1])
        except errors.FerryError as e:
            return self._fail("get_rpc_port", e)

    def get_local_topology(self, device_name: Optional[str] = None) -> str:
        """Not supported: Mooncake's JSON of its RDMA devices has no
        counterpart; returns "{}" (as Mooncake's does when it has none)."""
        return "{}"

    # ---- memory ---------------------------------------------------------------

    def _register(self, e: Engine, ptr: int, n: int, location: str) -> Registration:
        kind = _device_kind(location)
        if kind is None:
            return e.register(ptr=ptr, length=n, perm=Perm.REMOTE_READ_WRITE)
        return e.register_device(ptr, n, kind=kind, perm=Perm.REMOTE_READ_WRITE)

    def register_memory(self, buffer_addr: int, capacity: int, location: str = "*") -> int:
        """Register ``capacity`` bytes at ``buffer_addr`` for local use and
        for peers' reads and writes (Mooncake's buffers are remote
        read-write). ``location`` is Mooncake's: "cpu" / "cpu:N" for host
        memory, "cuda:N" (or "rocm:N") for GPU memory of that device, "*"
        to find out: a pointer the CUDA driver knows as device memory, or
        one that is not host memory of this process, is registered as
        device memory (the engine needs a ``device`` block, passed in
        ``extra_config``). The range must stay allocated until
        :meth:`unregister_memory`. 0 on success."""
        try:
            r = self._register(self._e(), buffer_addr, capacity, location)
            with self._lock:
                self._regs[r.address] = r
            return 0
        except errors.FerryError as e:
            return self._fail(f"register_memory {capacity} bytes at {buffer_addr:#x} ({location})" if isinstance(buffer_addr, int) else "register_memory", e)

    def unregister_memory(self, buffer_addr: int) -> int:
        """Remove the registration that starts at ``buffer_addr``."""
        try:
            self._e().unregister(buffer_addr)
            with self._lock:
                self._regs.pop(buffer_addr, None)
            return 0
        except errors.FerryError as e:
            return self._fail(f"unregister_memory {buffer_addr!r}", e)

    def batch_register_memory(self, buffer_addresses: Sequence[int], capacities: Sequence[int], location: str = "*") -> int:
        """Register many ranges in one call, all or nothing."""
        try:
            if len(buffer_addresses) != len(capacities):
                raise errors.InvalidRequest(f"batch_register_memory: {len(buffer_addresses)} addresses and {len(capacities)} capacities")
            e = self._e()
            if _device_kind(location) is not None or (location in ("*", "") and any(
                    _cuda.export(a, n) is not None for a, n in zip(buffer_addresses, capacities))):
                # Device memory: one registration each, undone on a refusal.
                rs = []
                try:
                    for a, n in zip(buffer_addresses, capacities):
                        rs.append(self._register(e, a, n, location))
                except errors.FerryError:
                    for r in rs:
                        e.unregister(r)
                    raise
            else:
                rs = e.register_batch(list(zip(buffer_addresses, capacities)), Perm.REMOTE_READ_WRITE)
            with self._lock:
                for r in rs:
                    self._regs[r.address] = r
            return 0
        except errors.FerryError as e:
            return self._fail(f"batch_register_memory of {len(buffer_addresses)}", e)

    def batch_unregister_memory(self, buffer_addresses: Sequence[int]) -> int:
        """Unregister many, all or nothing."""
        try:
            self._e().unregister_batch(list(buffer_addresses))
            with self._lock:
                for a in buffer_addresses:
                    self._regs.pop(a, None)
            return 0
        except errors.FerryError as e:
            return self._fail(f"batch_unregister_memory of {len(buffer_addresses)}", e)

    def allocate_managed_buffer(self, length: int) -> int:
        """``length`` bytes of Ferry memory (shared with the transports:
        zero copy on shm and tcp), registered for peers. Returns its
        address, 0 on failure."""
        try:
            e = self._e()
            m = e.allocate(length)
            try:
                r = e.register(m, Perm.REMOTE_READ_WRITE)
            except BaseException:
                m.free()
                raise
            with self._lock:
                self._managed[m.address] = (m, r)
            return m.address
        except errors.FerryError as e:
            self._fail(f"allocate_managed_buffer {length}", e)
            return 0

    def free_managed_buffer(self, buffer_addr: int, length: int) -> int:
        """Unregister and free a buffer of :meth:`allocate_managed_buffer`."""
        try:
            with self._lock:
                got = self._managed.get(buffer_addr)
            if got is None:
                raise errors.InvalidRequest(f"free_managed_buffer: {buffer_addr!r} is not a managed buffer of this engine")
            m, _ = got
            if length != m.size:
                raise errors.InvalidRequest(f"free_managed_buffer: length {length} is not the buffer's {m.size}")
            m.free()
            with self._lock:
                self._managed.pop(buffer_addr, None)
            return 0
        except errors.FerryError as e:
            return self._fail(f"free_managed_buffer {buffer_addr!r}", e)

    def write_bytes_to_buffer(self, dest_address: int, src_ptr: bytes, length: int) -> int:
        """Copy ``length`` bytes of ``src_ptr`` to ``dest_address`` (raw
        memory, as Mooncake's: the caller answers for the address)."""
        if length < 0 or length > len(src_ptr) or not dest_address:
            return self._fail("write_bytes_to_buffer", errors.InvalidRequest(
                f"write_bytes_to_buffer: length {length} of {len(src_ptr)} bytes to {dest_address!r}"))
        ffi.memmove(ffi.cast("void *", dest_address), src_ptr, length)
        return 0

    def read_bytes_from_buffer(self, source_address: int, length: int) -> bytes:
        """``length`` bytes at ``source_address`` (raw memory)."""
        if length <= 0 or not source_address:
            return b""
        return bytes(ffi.buffer(ffi.cast("char *", source_address), length))

    # ---- segments -------------------------------------------------------------

    def get_first_buffer_address(self, segment_name: str) -> int:
        """The address of the first buffer the segment registered; 0 when
        it cannot be opened or has none."""
        try:
            s = self._segment(segment_name).refresh()
            return s.buffers[0].base if s.buffers else 0
        except errors.FerryError as e:
            self._fail(f"get_first_buffer_address {segment_name!r}", e)
            return 0

    def send_probe(self, peer_server_name: str) -> int:
        """0 when the peer's segment can be opened afresh (its descriptor
        read), negative when not."""
        try:
            self._forget_segment(peer_server_name)
            self._segment(peer_server_name)
            return 0
        except errors.FerryError as e:
            return self._fail(f"send_probe {peer_server_name!r}", e)

    def warmup_efa_segment(self, segment_name: str) -> int:
        """A no-op, as Mooncake's without EFA: returns 0."""
        return 0

    # ---- synchronous transfers -------------------------------------------------

    def _requests(self, op: Op, seg: Segment, buffers: Sequence[int], peers: Sequence[int], lengths: Sequence[int],
                  transport_hint: str) -> List[Request]:
        if not (len(buffers) == len(peers) == len(lengths)):
            raise errors.InvalidRequest(
                f"{len(buffers)} buffers, {len(peers)} peer_buffer_addresses and {len(lengths)} lengths: give as many of each")
        hint = transport_hint if transport_hint and transport_hint != "unspec" else None
        total = sum(lengths)
        t = _timeout_s(total)
        return [Request(op, b, seg, p, n, timeout=t, transport=hint) for b, p, n in zip(buffers, peers, lengths)]

    def _sync(self, what: str, target: str, op: Op, buffers: Sequence[int], peers: Sequence[int], lengths: Sequence[int],
              notify: Optional[TransferNotify], transport_hint: str) -> int:
        try:
            seg = self._segment(target)
            reqs = self._requests(op, seg, buffers, peers, lengths, transport_hint)
            e = self._e()
            if notify is None:
                e.transfer(reqs)
            else:
                with e.batch(len(reqs)) as b:
                    b.submit(reqs, notify=(notify.name, notify.msg.encode() if isinstance(notify.msg, str) else bytes(notify.msg)))
                    b.wait()
            return 0
        except errors.FerryError as e:
            if isinstance(e, (errors.SegmentNotFound, errors.Unavailable)):
                self._forget_segment(target)
            return self._fail(f"{what} to {target!r}", e)

    def transfer_sync_write(self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int,
                            transport_hint: str = "") -> int:
        """Write ``length`` bytes at local ``buffer`` to
        ``peer_buffer_address`` of the segment; return once landed. 0 on
        success."""
        return self._sync("transfer_sync_write", target_hostname, Op.WRITE, [buffer], [peer_buffer_address], [length], None, transport_hint)

    def transfer_sync_read(self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int,
                           transport_hint: str = "") -> int:
        """Read ``length`` bytes at ``peer_buffer_address`` of the segment
        into local ``buffer``. 0 on success."""
        return self._sync("transfer_sync_read", target_hostname, Op.READ, [buffer], [peer_buffer_address], [length], None, transport_hint)

    def transfer_sync(self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int,
                      opcode: int, notify: Optional[TransferNotify] = None, transport_hint: str = "") -> int:
        """One transfer of ``opcode``; with ``notify``, the segment's engine
        gets it once the transfer landed."""
        return self._sync("transfer_sync", target_hostname, Op(int(opcode)), [buffer], [peer_buffer_address], [length], notify, transport_hint)

    def batch_transfer_sync_write(self, target_hostname: str, buffers: Sequence[int], peer_buffer_addresses: Sequence[int],
                                  lengths: Sequence[int], transport_hint: str = "") -> int:
        """Many writes to one segment; return once all landed. 0 when all
        did, negative when one failed."""
        return self._sync("batch_transfer_sync_write", target_hostname, Op.WRITE, buffers, peer_buffer_addresses, lengths, None, transport_hint)

    def batch_transfer_sync_read(self, target_hostname: str, buffers: Sequence[int], peer_buffer_addresses: Sequence[int],
                                 lengths: Sequence[int], transport_hint: str = "") -> int:
        """Many reads from one segment."""
        return self._sync("batch_transfer_sync_read", target_hostname, Op.READ, buffers, peer_buffer_addresses, lengths, None, transport_hint)

    def batch_transfer_sync(self, target_hostname: str, buffers: Sequence[int], peer_buffer_addresses: Sequence[int],
                            lengths: Sequence[int], opcode: int, notify: Optional[TransferNotify] = None,
                            transport_hint: str = "") -> int:
        """Many transfers of ``opcode``; with ``notify``, the segment's
        engine gets it once every one landed (not at all if one fails)."""
        return self._sync("batch_transfer_sync", target_hostname, Op(int(opcode)), buffers, peer_buffer_addresses, lengths, notify, transport_hint)

    # ---- asynchronous transfers -------------------------------------------------

    def _async(self, what: str, target: str, op: Op, buffers: Sequence[int], peers: Sequence[int], lengths: Sequence[int],
               transport_hint: str) -> int:
        b = None
        try:
            seg = self._segment(target)
            reqs = self._requests(op, seg, buffers, peers, lengths, transport_hint)
            b = self._e().batch(len(reqs))
            b.submit(reqs)
            if b.summary().failed:
                b.check()  # a request the engine refused: Mooncake's submit fails (0)
            with self._lock:
                bid = self._next_batch
                self._next_batch += 1
                self._batches[bid] = (b, sum(lengths))
            return bid
        except errors.FerryError as e:
            if b is not None:
                b.free()
            self._fail(f"{what} to {target!r}", e)
            return 0

    def batch_transfer_async_write(self, target_hostname: str, buffers: Sequence[int], peer_buffer_addresses: Sequence[int],
                                   lengths: Sequence[int], transport_hint: str = "") -> int:
        """Start many writes; return a batch id (0 on failure) for
        :meth:`get_batch_transfer_status`."""
        return self._async("batch_transfer_async_write", target_hostname, Op.WRITE, buffers, peer_buffer_addresses, lengths, transport_hint)

    def batch_transfer_async_read(self, target_hostname: str, buffers: Sequence[int], peer_buffer_addresses: Sequence[int],
                                  lengths: Sequence[int], transport_hint: str = "") -> int:
        """Start many reads; return a batch id (0 on failure)."""
        return self._async("batch_transfer_async_read", target_hostname, Op.READ, buffers, peer_buffer_addresses, lengths, transport_hint)

    def batch_transfer_async(self, target_hostname: str, buffers: Sequence[int], peer_buffer_addresses: Sequence[int],
                             lengths: Sequence[int], opcode: int, transport_hint: str = "") -> int:
        """Start many transfers of ``opcode``; return a batch id."""
        return self._async("batch_transfer_async", target_hostname, Op(int(opcode)), buffers, peer_buffer_addresses, lengths, transport_hint)

    def transfer_submit_write(self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int,
                              transport_hint: str = "") -> int:
        """Start one write; return a batch id for
        :meth:`transfer_check_status` (0 on failure)."""
        return self._async("transfer_submit_write", target_hostname, Op.WRITE, [buffer], [peer_buffer_address], [length], transport_hint)

    def _take(self, bid: int) -> Tuple[Any, int]:
        with self._lock:
            got = self._batches.get(bid)
        if got is None:
            raise errors.InvalidRequest(f"batch id {bid!r} is unknown (never returned, or already finished)")
        return got

    def _drop(self, bid: int) -> None:
        with self._lock:
            got = self._batches.pop(bid, None)
        if got is not None:
            got[0].free()

    def get_batch_transfer_status(self, batch_ids: Sequence[int]) -> int:
        """Wait for the batches; 0 when every task of every one completed,
        -1-like codes when one failed or timed out. Completed batches are
        finished (their ids are no longer valid); after a failure all of
        them are."""
        try:
            batches = [(bid,) + self._take(bid) for bid in batch_ids]
        except errors.FerryError as e:
            return self._fail("get_batch_transfer_status", e)
        code = 0
        for bid, b, n in batches:
            try:
                s = b.wait(timeout=_timeout_s(n), check=False)
                if s.failed:
                    b.check()
            except errors.FerryError as e:
                code = self._fail(f"get_batch_transfer_status: batch {bid}", e)
                break
            self._drop(bid)
        if code != 0:
            for bid, _, _ in batches:
                self._drop(bid)
        return code

    def transfer_check_status(self, batch_id: int) -> int:
        """1: completed (the id is finished), 0: in progress, -1: failed
        (finished), -2: timed out."""
        try:
            b, _ = self._take(batch_id)
            st = b.status(0)
        except errors.FerryError as e:
            self._fail("transfer_check_status", e)
            return -1
        if st.state == State.PENDING:
            return 0
        if st.state == State.COMPLETED:
            self._drop(batch_id)
            return 1
        if st.state == State.TIMEOUT:
            return -2
        self._tls.err = f"transfer_check_status: batch {batch_id}: {st.error}"
        log.warning("%s", self._tls.err)
        self._drop(batch_id)
        return -1

    # ---- notifications -----------------------------------------------------------

    def get_notifies(self) -> List[TransferNotify]:
        """The notifications received since the last call (oldest first)."""
        try:
            e = self._e()
            out: List[TransferNotify] = []
            while True:
                got = e.notifications(max=256, timeout=0.0)
                out.extend(TransferNotify(n.name, n.msg.decode("utf-8", "replace")) for n in got)
                if len(got) < 256:
                    return out
        except errors.FerryError as e:
            self._fail("get_notifies", e)
            return []

    # ---- not supported -------------------------------------------------------------

    def _unsupported(self, name: str) -> Any:
        raise NotImplementedError(f"ferry.mooncake: {name} is not supported (see docs/mooncake.md)")

    def get_engine(self) -> Any:
        """Not supported: Mooncake's inner C++ engine, for Mooncake Store."""
        return self._unsupported("get_engine")

    def get_engine_ptr(self) -> int:
        """Not supported: a pointer to Mooncake's C++ engine."""
        return self._unsupported("get_engine_ptr")

    # ---- transfers ordered with a CUDA stream ------------------------------------

    def _on_cuda(self, what: str, target: str, op: Op, buffers: Sequence[int], peers: Sequence[int],
                 lengths: Sequence[int], stream_ptr: int, transport_hint: str) -> None:
        # Mooncake enqueues the transfer as a host function on the stream
        # (cudaLaunchHostFunc) and returns; here the stream's queued work
        # is waited for first, then the transfer runs to the end before
        # the call returns. The order is the same: after what the stream
        # had queued, before what is queued after the call.
        try:
            _cuda.synchronize(int(stream_ptr))
        except RuntimeError as e:
            self._tls.err = f"{what}: {e}"
            raise
        if self._sync(what, target, op, buffers, peers, lengths, None, transport_hint) != 0:
            # Mooncake raises for a segment it cannot open and ends the
            # process for a failed transfer; raising lets the caller decide.
            raise RuntimeError(self.last_error)

    def transfer_write_on_cuda(self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int,
                               stream_ptr: int = 0, transport_hint: str = "") -> None:
        """Write ``length`` bytes of local (GPU) memory after the work
        queued on CUDA stream ``stream_ptr`` (0: the default stream; with
        no CUDA driver only 0). Blocks until the bytes landed (Mooncake's
        returns at once); raises RuntimeError on a failure."""
        self._on_cuda("transfer_write_on_cuda", target_hostname, Op.WRITE, [buffer], [peer_buffer_address], [length],
                      stream_ptr, transport_hint)

    def transfer_read_on_cuda(self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int,
                              stream_ptr: int = 0, transport_hint: str = "") -> None:
        """Read into local (GPU) memory, ordered as transfer_write_on_cuda."""
        self._on_cuda("transfer_read_on_cuda", target_hostname, Op.READ, [buffer], [peer_buffer_address], [length],
                      stream_ptr, transport_hint)

    def batch_transfer_write_on_cuda(self, target_hostname: str, buffers: Sequence[int], peer_buffer_addresses: Sequence[int],
                                     lengths: Sequence[int], stream_ptr: int = 0, transport_hint: str = "") -> None:
        """Many writes, ordered as transfer_write_on_cuda."""
        self._on_cuda("batch_transfer_write_on_cuda", target_hostname, Op.WRITE, buffers, peer_buffer_addresses, lengths,
                      stream_ptr, transport_hint)

    def batch_transfer_read_on_cuda(self, target_hostname: str, buffers: Sequence[int], peer_buffer_addresses: Sequence[int],
                                    lengths: Sequence[int], stream_ptr: int = 0, transport_hint: str = "") -> None:
        """Many reads, ordered as transfer_write_on_cuda."""
        self._on_cuda("batch_transfer_read_on_cuda", target_hostname, Op.READ, buffers, peer_buffer_addresses, lengths,
                      stream_ptr, transport_hint)


def _device_kind(location: str) -> Optional[str]:
    """The device kind of a Mooncake location ("cuda:0" -> "cuda:0"), None
    for host memory or "*" (found when registering); InvalidRequest for
    one Ferry has no device for."""
    loc = (location or "*").strip()
    if loc == "*" or loc == "cpu" or loc.startswith("cpu:"):
        return None
    for prefix, kind in (("cuda", "cuda"), ("rocm", "rocm"), ("hip", "rocm")):
        if loc == prefix or loc.startswith(prefix + ":"):
            return kind + loc[len(prefix):]
    raise errors.InvalidRequest(f"location {location!r}: Ferry registers \"cpu[:N]\", \"cuda[:N]\", \"rocm[:N]\" or \"*\"")


TransferEngine.TransferOpcode = TransferOpcode  # type: ignore[attr-defined]
