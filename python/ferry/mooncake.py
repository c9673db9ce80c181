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
:attr:`TransferEngine.last_error`. An argument of the wrong type raises
TypeError, as Mooncake's pybind module does: addresses and lengths are
ints or anything with ``__index__`` (numpy integers), lists of them any
sequence (a numpy array too). docs/mooncake.md lists every call with its
status: supported, supported with a difference, or not supported.

Ferry's engine underneath is :class:`ferry.Engine`;
:meth:`TransferEngine.get_engine` (or :attr:`TransferEngine.engine`) gives
it to code that wants Ferry's own API (block lists, priorities).
"""

from __future__ import annotations

import enum
import ipaddress
import json
import logging
import operator
import os
import socket
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
    """A notification: ``name`` and ``msg`` (str), as Mooncake's. Each
    may be given as str or bytes (UTF-8); anything else raises TypeError,
    as Mooncake's std::string fields do."""

    def __init__(self, name: str = "", msg: str = "") -> None:
        self.name = _text(name, "TransferNotify", "name")
        self.msg = _text(msg, "TransferNotify", "msg")

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


def _numeric_host(h: str) -> bool:
    """Whether h is a numeric IPv4 or IPv6 address (an IPv6 one may carry
    a scope, "fe80::1%eth0"), as Mooncake's isNumericAddress."""
    pct = h.find("%")
    if pct >= 0:
        if ":" in h[pct:]:
            return False
        h = h[:pct]
    try:
        ipaddress.ip_address(h)
        return True
    except ValueError:
        return False


def _host_port(name: str) -> Tuple[str, str]:
    """(host, port) of "host", "host:port", "[v6]", "[v6]:port", a bare
    IPv6 address ("::1", as SGLang passes it) or a bare IPv6 address with
    a port ("fe80::1%eth0:15773"): Mooncake's parseHostNameWithPort, whose
    rules say which. port is "" when there is none."""
    h = name.strip()
    if _numeric_host(h):
        return h, ""
    end = h.rfind("]")
    if h.startswith("[") and end > 0:
        host = h[1:end]
        if not _numeric_host(host):
            raise errors.InvalidRequest(f"{name!r}: {host!r} in brackets is not an IPv6 address")
        return host, h[end + 2:] if h[end + 1:end + 2] == ":" else ""
    host, sep, port = h.rpartition(":")
    if not sep:
        return h, ""
    if ":" in host and not _numeric_host(host):
        raise errors.InvalidRequest(f"{name!r}: {host!r} is not an IPv6 address; write a host, host:port, or [IPv6]:port")
    return host, port


def _join(host: str, port: str) -> str:
    """host:port, with an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _free_port(host: str) -> int:
    """A TCP port free on host now: bound and released, as Mooncake's
    P2P handshake picks its rpc port (findAvailableTcpPort). The engine
    binds it next; another process may take it between, so the caller
    tries again when that bind fails."""
    try:
        addrs = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)
    except OSError as e:
        raise errors.InvalidRequest(f"initialize: host {host!r} of local_hostname does not resolve ({e}); "
                                    "give an address of this machine") from None
    last: Optional[OSError] = None
    for family, kind, proto, _, addr in addrs:
        try:
            with socket.socket(family, kind, proto) as s:
                s.bind(addr)
                return int(s.getsockname()[1])
        except OSError as e:
            last = e
    raise errors.InvalidRequest(f"initialize: no port can be bound on {host!r} (from local_hostname: {last}); "
                                "give an address of this machine")


#: How often initialize picks a P2P engine's port again when another
#: process bound it first.
_PORT_TRIES = 3


# ---- arguments, converted as Mooncake's pybind module converts them ----------
#
# pybind11 converts every argument to its C++ parameter's type before the
# call and raises TypeError when it cannot; these do the same for each
# type Mooncake's TransferEnginePy takes, so that a call Mooncake refuses
# with TypeError is refused so here, and one it accepts (a numpy integer
# as an address, a numpy array of addresses) is accepted.

_U64 = 1 << 64


def _uint(v: Any, fn: str, arg: str) -> int:
    """uintptr_t, size_t, batch_id_t: an int, or anything with __index__
    (numpy integers), in 0..2**64-1. A float, a str, a buffer or a
    negative number raises TypeError, as pybind's unsigned caster does."""
    if type(v) is int and 0 <= v < _U64:
        return v
    try:
        i = operator.index(v)
    except TypeError:
        raise TypeError(f"{fn}(): {arg} must be an unsigned integer (int or numpy integer), not {type(v).__name__}") from None
    if not 0 <= i < _U64:
        raise TypeError(f"{fn}(): {arg} {i} does not fit an unsigned 64-bit integer")
    return int(i)


def _uints(v: Any, fn: str, arg: str) -> List[int]:
    """std::vector<uintptr_t> and the like: a sequence (list, tuple,
    range, numpy array; not str, bytes or a dict) of what :func:`_uint`
    takes. A generator or set raises TypeError, as pybind's list caster."""
    if type(v) is not list:
        if isinstance(v, (str, bytes, dict)) or not hasattr(type(v), "__getitem__"):
            raise TypeError(f"{fn}(): {arg} must be a sequence of unsigned integers (list, tuple, numpy array), not {type(v).__name__}")
        kind = getattr(getattr(v, "dtype", None), "kind", None)
        v = v.tolist() if kind in ("i", "u") else list(v)  # numpy: Python ints in one call
    if all(type(x) is int for x in v) and (not v or (min(v) >= 0 and max(v) < _U64)):
        return v
    return [_uint(x, fn, f"{arg}[{i}]") for i, x in enumerate(v)]


def _text(v: Any, fn: str, arg: str, none: bool = False) -> str:
    """std::string: str, or bytes as UTF-8; with ``none`` (a const char *
    parameter, which pybind lets be None) None gives "". Anything else
    raises TypeError."""
    if type(v) is str:
        return v
    if isinstance(v, str):
        return str(v)
    if isinstance(v, bytes):
        return v.decode("utf-8", "surrogateescape")
    if v is None and none:
        return ""
    raise TypeError(f"{fn}(): {arg} must be str, not {type(v).__name__}")


def _opcode(v: Any, fn: str) -> Op:
    """A TransferOpcode (or an integer 0 or 1: Mooncake's module takes
    only its enum, see docs/mooncake.md)."""
    try:
        i = operator.index(v)
    except TypeError:
        i = -1
    if i not in (0, 1):
        raise TypeError(f"{fn}(): opcode must be TransferOpcode.Read or TransferOpcode.Write, not {v!r}")
    return Op(i)


def _notify(v: Any, fn: str) -> "Optional[TransferNotify]":
    if v is None or isinstance(v, TransferNotify):
        return v
    raise TypeError(f"{fn}(): notify must be a TransferNotify or None, not {type(v).__name__}")


_P2P_BLOCK = 'kind = "none"'


def _metastore_block(metadata_server: str, metadata_type: Optional[str]) -> str:
    """The HCL metastore block for Mooncake's connection string."""
    s = (metadata_server or "").strip()
    if s == P2PHANDSHAKE or metadata_type in ("p2p", "P2PHANDSHAKE"):
        return _P2P_BLOCK
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
        self._p2p = False  # no metadata server: peers are named by their control address

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
        name = target
        if self._p2p:
            # A peer is its control address: Mooncake names an IPv6 one
            # "[v6]:port" or, unbracketed, "v6:port"; Ferry dials the first.
            host, port = _host_port(target)
            if port and ":" in host:
                name = _join(host, port)
        s = self._e().open_segment(name)
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
        """Start the engine on ``local_hostname``: "host", "host:port", a
        bare IPv6 address ("::1") or "[v6]:port"; its host is where the
        control service and tcp listen, on free ports.
        ``metadata_server``: "P2PHANDSHAKE" (no metadata server; the
        engine is named "host:rpc_port" or "[v6]:rpc_port", as Mooncake
        names it, and peers open it so; a port in local_hostname is not
        used), or a metadata server, where the engine is named
        local_hostname: "http://host:port/metadata" (Mooncake's HTTP
        metadata server, or Ferry's), "etcd://host:port" or "host:port"
        (etcd), "redis://host:port". ``protocol`` "tcp" starts only Ferry's tcp
        transport; any other starts shm and tcp, and Ferry picks per
        request. ``device_name`` is not used: Ferry reads the machine's
        NICs itself. 0 on success, negative on failure."""
        return self.initialize_ext(local_hostname, metadata_server, protocol, device_name, None)

    def initialize_ext(self, local_hostname: str, metadata_server: str, protocol: str, device_name: str,
                       metadata_type: Optional[str]) -> int:
        """:meth:`initialize` with Mooncake's ``metadata_type`` ("etcd",
        "redis", "http") for a ``metadata_server`` without a scheme
        ("127.0.0.1:2379"); a server with one, or "P2PHANDSHAKE", keeps
        its own."""
        fn = "initialize"
        local_hostname = _text(local_hostname, fn, "local_hostname", none=True)
        metadata_server = _text(metadata_server, fn, "metadata_server", none=True)
        protocol = _text(protocol, fn, "protocol", none=True)
        _text(device_name, fn, "device_name", none=True)
        metadata_type = _text(metadata_type, fn, "metadata_type", none=True) or None
        try:
            if self._engine is not None:
                raise errors.InvalidRequest("initialize: the engine is already initialized")
            if not local_hostname:
                raise errors.InvalidRequest("initialize: local_hostname is empty")
            host, _ = _host_port(local_hostname)
            meta = _metastore_block(metadata_server, metadata_type)
            self._p2p = meta == _P2P_BLOCK
            attempt = 0
            while True:
                attempt += 1
                # A P2P engine is named host:rpc_port, as Mooncake names
                # it (its port in local_hostname is not used): the name
                # peers open it by, unique on the machine, so that engines
                # of one host are each their own segment. With a metadata
                # server it keeps local_hostname.
                port = str(_free_port(host)) if self._p2p else "0"
                name = _join(host, port) if self._p2p else local_hostname
                self.config_text = self._config(name, host, port, meta, protocol)
                try:
                    self._engine = Engine(config_text=self.config_text)
                    return 0
                except errors.FerryError as e:
                    if not self._p2p or attempt >= _PORT_TRIES or "address already in use" not in str(e):
                        raise
        except (errors.FerryError, ValueError) as e:
            return self._fail(f"initialize {local_hostname!r} with {metadata_server!r}", e)

    def _config(self, name: str, host: str, port: str, meta: str, protocol: str) -> str:
        """The engine's HCL: named name, its control service on
        host:port, tcp on a free port of host."""
        listen = json.dumps(_join(host, "0"))
        plugins = self._plugins or (("tcp",) if protocol == "tcp" else ("shm", "tcp"))
        blocks = []
        for p in plugins:
            body = f'config {{\n    listen = [{listen}]\n  }}' if p == "tcp" else ""
            blocks.append(f'plugin "{p}" {{\n  {body}\n}}')
        lines = [f"name = {json.dumps(name)}"]
        plugin_dir = _ffi.plugin_dir()  # $FERRY_PLUGIN_DIR, else the library's (bin/, or the wheel's)
        if plugin_dir:
            lines.append(f"plugin_dir = {json.dumps(plugin_dir)}")
        if self._secret:
            lines.append(f"cluster_secret_file = {json.dumps(self._secret)}")
        lines.append(f"metastore {{\n  {meta}\n}}")
        lines.append(f"control {{\n  listen = {json.dumps(_join(host, port))}\n}}")
        return "\n".join(lines + blocks) + "\n" + self._extra

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
        _text(device_name, "get_local_topology", "device_name", none=True)
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
        buffer_addr = _uint(buffer_addr, "register_memory", "buffer_addr")
        capacity = _uint(capacity, "register_memory", "capacity")
        location = _text(location, "register_memory", "location")
        try:
            r = self._register(self._e(), buffer_addr, capacity, location)
            with self._lock:
                self._regs[r.address] = r
            return 0
        except errors.FerryError as e:
            return self._fail(f"register_memory {capacity} bytes at {buffer_addr:#x} ({location})", e)

    def unregister_memory(self, buffer_addr: int) -> int:
        """Remove the registration that starts at ``buffer_addr``."""
        buffer_addr = _uint(buffer_addr, "unregister_memory", "buffer_addr")
        try:
            self._e().unregister(buffer_addr)
            with self._lock:
                self._regs.pop(buffer_addr, None)
            return 0
        except errors.FerryError as e:
            return self._fail(f"unregister_memory {buffer_addr!r}", e)

    def batch_register_memory(self, buffer_addresses: Sequence[int], capacities: Sequence[int], location: str = "*") -> int:
        """Register many ranges in one call, all or nothing."""
        buffer_addresses = _uints(buffer_addresses, "batch_register_memory", "buffer_addresses")
        capacities = _uints(capacities, "batch_register_memory", "capacities")
        location = _text(location, "batch_register_memory", "location")
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
        buffer_addresses = _uints(buffer_addresses, "batch_unregister_memory", "buffer_addresses")
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
        length = _uint(length, "allocate_managed_buffer", "length")
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
        buffer_addr = _uint(buffer_addr, "free_managed_buffer", "buffer_addr")
        length = _uint(length, "free_managed_buffer", "length")
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
        """Copy ``length`` bytes of ``src_ptr`` (bytes, or a str as UTF-8,
        as Mooncake's char * takes; any other buffer too) to
        ``dest_address`` (raw memory, as Mooncake's: the caller answers
        for the address)."""
        dest_address = _uint(dest_address, "write_bytes_to_buffer", "dest_address")
        length = _uint(length, "write_bytes_to_buffer", "length")
        if isinstance(src_ptr, str):
            src_ptr = src_ptr.encode()
        elif src_ptr is not None:
            try:
                src_ptr = memoryview(src_ptr).cast("B")
            except TypeError:
                raise TypeError(f"write_bytes_to_buffer(): src_ptr must be bytes or str, not {type(src_ptr).__name__}") from None
        if src_ptr is None or length > len(src_ptr) or not dest_address:
            return self._fail("write_bytes_to_buffer", errors.InvalidRequest(
                f"write_bytes_to_buffer: length {length} of {0 if src_ptr is None else len(src_ptr)} bytes to {dest_address:#x}"))
        ffi.memmove(ffi.cast("void *", dest_address), src_ptr, length)
        return 0

    def read_bytes_from_buffer(self, source_address: int, length: int) -> bytes:
        """``length`` bytes at ``source_address`` (raw memory)."""
        source_address = _uint(source_address, "read_bytes_from_buffer", "source_address")
        length = _uint(length, "read_bytes_from_buffer", "length")
        if length <= 0 or not source_address:
            return b""
        return bytes(ffi.buffer(ffi.cast("char *", source_address), length))

    # ---- segments -------------------------------------------------------------

    def get_first_buffer_address(self, segment_name: str) -> int:
        """The address of the first buffer the segment registered; 0 when
        it cannot be opened or has none."""
        segment_name = _text(segment_name, "get_first_buffer_address", "segment_name")
        try:
            s = self._segment(segment_name).refresh()
            return s.buffers[0].base if s.buffers else 0
        except errors.FerryError as e:
            self._fail(f"get_first_buffer_address {segment_name!r}", e)
            return 0

    def send_probe(self, peer_server_name: str) -> int:
        """0 when the peer's segment can be opened afresh (its descriptor
        read), negative when not."""
        peer_server_name = _text(peer_server_name, "send_probe", "peer_server_name")
        try:
            self._forget_segment(peer_server_name)
            self._segment(peer_server_name)
            return 0
        except errors.FerryError as e:
            return self._fail(f"send_probe {peer_server_name!r}", e)

    def warmup_efa_segment(self, segment_name: str) -> int:
        """A no-op, as Mooncake's without EFA: returns 0."""
        _text(segment_name, "warmup_efa_segment", "segment_name")
        return 0

    # ---- synchronous transfers -------------------------------------------------

    @staticmethod
    def _one(fn: str, target: Any, buffer: Any, peer: Any, length: Any, hint: Any) -> Tuple[str, List[int], List[int], List[int], str]:
        """The arguments of a one-transfer call, converted (TypeError as
        Mooncake's): target, [buffer], [peer], [length], transport_hint."""
        return (_text(target, fn, "target_hostname", none=True), [_uint(buffer, fn, "buffer")],
                [_uint(peer, fn, "peer_buffer_address")], [_uint(length, fn, "length")], _text(hint, fn, "transport_hint"))

    @staticmethod
    def _many(fn: str, target: Any, buffers: Any, peers: Any, lengths: Any, hint: Any) -> Tuple[str, List[int], List[int], List[int], str]:
        """The arguments of a batch call, converted."""
        return (_text(target, fn, "target_hostname", none=True), _uints(buffers, fn, "buffers"),
                _uints(peers, fn, "peer_buffer_addresses"), _uints(lengths, fn, "lengths"), _text(hint, fn, "transport_hint"))

    def _requests(self, op: Op, seg: Segment, buffers: List[int], peers: List[int], lengths: List[int],
                  transport_hint: str) -> List[Request]:
        if not (len(buffers) == len(peers) == len(lengths)):
            raise errors.InvalidRequest(
                f"{len(buffers)} buffers, {len(peers)} peer_buffer_addresses and {len(lengths)} lengths: give as many of each")
        hint = transport_hint if transport_hint and transport_hint != "unspec" else None
        total = sum(lengths)
        t = _timeout_s(total)
        return [Request(op, b, seg, p, n, timeout=t, transport=hint) for b, p, n in zip(buffers, peers, lengths)]

    def _sync(self, what: str, target: str, op: Op, buffers: List[int], peers: List[int], lengths: List[int],
              notify: Optional[TransferNotify], transport_hint: str) -> int:
        try:
            seg = self._segment(target)
            reqs = self._requests(op, seg, buffers, peers, lengths, transport_hint)
            e = self._e()
            e.transfer(reqs)
        except errors.FerryError as e:
            if isinstance(e, (errors.SegmentNotFound, errors.Unavailable)):
                self._forget_segment(target)
            return self._fail(f"{what} to {target!r}", e)
        if notify is not None:
            # As Mooncake's: sent once the transfer landed, and delivered
            # before the call returns, so that the notifications of
            # successive calls arrive in their order; one that is not
            # delivered is logged and the call still returns 0, as
            # Mooncake's does (its bytes landed).
            try:
                e.notify(seg, notify.name, notify.msg.encode("utf-8", "surrogateescape"))
            except errors.FerryError as err:
                if isinstance(err, (errors.SegmentNotFound, errors.Unavailable)):
                    self._forget_segment(target)
                self._fail(f"{what} to {target!r}: the transfer landed, but its notification {notify.name!r} was not delivered", err)
        return 0

    def transfer_sync_write(self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int,
                            transport_hint: str = "") -> int:
        """Write ``length`` bytes at local ``buffer`` to
        ``peer_buffer_address`` of the segment; return once landed. 0 on
        success."""
        fn = "transfer_sync_write"
        t, b, p, n, h = self._one(fn, target_hostname, buffer, peer_buffer_address, length, transport_hint)
        return self._sync(fn, t, Op.WRITE, b, p, n, None, h)

    def transfer_sync_read(self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int,
                           transport_hint: str = "") -> int:
        """Read ``length`` bytes at ``peer_buffer_address`` of the segment
        into local ``buffer``. 0 on success."""
        fn = "transfer_sync_read"
        t, b, p, n, h = self._one(fn, target_hostname, buffer, peer_buffer_address, length, transport_hint)
        return self._sync(fn, t, Op.READ, b, p, n, None, h)

    def transfer_sync(self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int,
                      opcode: int, notify: Optional[TransferNotify] = None, transport_hint: str = "") -> int:
        """One transfer of ``opcode``; with ``notify``, the segment's engine
        gets it once the transfer landed."""
        fn = "transfer_sync"
        t, b, p, n, h = self._one(fn, target_hostname, buffer, peer_buffer_address, length, transport_hint)
        return self._sync(fn, t, _opcode(opcode, fn), b, p, n, _notify(notify, fn), h)

    def batch_transfer_sync_write(self, target_hostname: str, buffers: Sequence[int], peer_buffer_addresses: Sequence[int],
                                  lengths: Sequence[int], transport_hint: str = "") -> int:
        """Many writes to one segment; return once all landed. 0 when all
        did, negative when one failed."""
        fn = "batch_transfer_sync_write"
        t, b, p, n, h = self._many(fn, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint)
        return self._sync(fn, t, Op.WRITE, b, p, n, None, h)

    def batch_transfer_sync_read(self, target_hostname: str, buffers: Sequence[int], peer_buffer_addresses: Sequence[int],
                                 lengths: Sequence[int], transport_hint: str = "") -> int:
        """Many reads from one segment."""
        fn = "batch_transfer_sync_read"
        t, b, p, n, h = self._many(fn, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint)
        return self._sync(fn, t, Op.READ, b, p, n, None, h)

    def batch_transfer_sync(self, target_hostname: str, buffers: Sequence[int], peer_buffer_addresses: Sequence[int],
                            lengths: Sequence[int], opcode: int, notify: Optional[TransferNotify] = None,
                            transport_hint: str = "") -> int:
        """Many transfers of ``opcode``; with ``notify``, the segment's
        engine gets it once every one landed (not at all if one fails)."""
        fn = "batch_transfer_sync"
        t, b, p, n, h = self._many(fn, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint)
        return self._sync(fn, t, _opcode(opcode, fn), b, p, n, _notify(notify, fn), h)

    # ---- asynchronous transfers -------------------------------------------------

    def _async(self, what: str, target: str, op: Op, buffers: List[int], peers: List[int], lengths: List[int],
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
        fn = "batch_transfer_async_write"
        t, b, p, n, h = self._many(fn, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint)
        return self._async(fn, t, Op.WRITE, b, p, n, h)

    def batch_transfer_async_read(self, target_hostname: str, buffers: Sequence[int], peer_buffer_addresses: Sequence[int],
                                  lengths: Sequence[int], transport_hint: str = "") -> int:
        """Start many reads; return a batch id (0 on failure)."""
        fn = "batch_transfer_async_read"
        t, b, p, n, h = self._many(fn, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint)
        return self._async(fn, t, Op.READ, b, p, n, h)

    def batch_transfer_async(self, target_hostname: str, buffers: Sequence[int], peer_buffer_addresses: Sequence[int],
                             lengths: Sequence[int], opcode: int, transport_hint: str = "") -> int:
        """Start many transfers of ``opcode``; return a batch id."""
        fn = "batch_transfer_async"
        t, b, p, n, h = self._many(fn, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint)
        return self._async(fn, t, _opcode(opcode, fn), b, p, n, h)

    def transfer_submit_write(self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int,
                              transport_hint: str = "") -> int:
        """Start one write; return a batch id for
        :meth:`transfer_check_status` (0 on failure)."""
        fn = "transfer_submit_write"
        t, b, p, n, h = self._one(fn, target_hostname, buffer, peer_buffer_address, length, transport_hint)
        return self._async(fn, t, Op.WRITE, b, p, n, h)

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
        batch_ids = _uints(batch_ids, "get_batch_transfer_status", "batch_ids")
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
        batch_id = _uint(batch_id, "transfer_check_status", "batch_id")
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

    # ---- the engine underneath --------------------------------------------------

    def get_engine(self) -> Optional[Engine]:
        """The :class:`ferry.Engine` underneath (None before
        :meth:`initialize`, as Mooncake's gives None before it), for
        Ferry's own API: block lists, priorities, deadlines. It is the
        same as :attr:`engine`. Mooncake's returns its inner C++ engine,
        which Mooncake Store takes; a Ferry engine is no use to Mooncake
        Store (see docs/mooncake.md)."""
        return self._engine

    def get_engine_ptr(self) -> int:
        """Not supported: the address of Mooncake's C++ engine, which only
        Mooncake's native code can use; an address of anything else would
        crash it. Raises NotImplementedError."""
        raise NotImplementedError("ferry.mooncake: get_engine_ptr is not supported: it is the address of Mooncake's C++ "
                                  "engine; use get_engine() for Ferry's (see docs/mooncake.md)")

    # ---- transfers ordered with a CUDA stream ------------------------------------

    def _on_cuda(self, what: str, target: str, op: Op, buffers: List[int], peers: List[int],
                 lengths: List[int], stream_ptr: Any, transport_hint: str) -> None:
        # Mooncake enqueues the transfer as a host function on the stream
        # (cudaLaunchHostFunc) and returns; here the stream's queued work
        # is waited for first, then the transfer runs to the end before
        # the call returns. The order is the same: after what the stream
        # had queued, before what is queued after the call.
        stream = _uint(stream_ptr, what, "stream_ptr")
        try:
            _cuda.synchronize(stream)
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
        fn = "transfer_write_on_cuda"
        t, b, p, n, h = self._one(fn, target_hostname, buffer, peer_buffer_address, length, transport_hint)
        self._on_cuda(fn, t, Op.WRITE, b, p, n, stream_ptr, h)

    def transfer_read_on_cuda(self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int,
                              stream_ptr: int = 0, transport_hint: str = "") -> None:
        """Read into local (GPU) memory, ordered as transfer_write_on_cuda."""
        fn = "transfer_read_on_cuda"
        t, b, p, n, h = self._one(fn, target_hostname, buffer, peer_buffer_address, length, transport_hint)
        self._on_cuda(fn, t, Op.READ, b, p, n, stream_ptr, h)

    def batch_transfer_write_on_cuda(self, target_hostname: str, buffers: Sequence[int], peer_buffer_addresses: Sequence[int],
                                     lengths: Sequence[int], stream_ptr: int = 0, transport_hint: str = "") -> None:
        """Many writes, ordered as transfer_write_on_cuda."""
        fn = "batch_transfer_write_on_cuda"
        t, b, p, n, h = self._many(fn, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint)
        self._on_cuda(fn, t, Op.WRITE, b, p, n, stream_ptr, h)

    def batch_transfer_read_on_cuda(self, target_hostname: str, buffers: Sequence[int], peer_buffer_addresses: Sequence[int],
                                    lengths: Sequence[int], stream_ptr: int = 0, transport_hint: str = "") -> None:
        """Many reads, ordered as transfer_write_on_cuda."""
        fn = "batch_transfer_read_on_cuda"
        t, b, p, n, h = self._many(fn, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint)
        self._on_cuda(fn, t, Op.READ, b, p, n, stream_ptr, h)


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
