"""The engine: :class:`Engine` and the remote :class:`Segment` it opens."""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import struct
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _cuda, _ffi, errors
from ._ffi import ffi
from .device import DeviceHandle, DeviceMemory, DeviceSpan, device_range, is_device
from .memory import Memory, Registration, contiguous
from .values import BlockLayout, BufferInfo, Notification, Perm, Priority, Request

if TYPE_CHECKING:
    from .batch import Batch, BlockList

__all__ = ["Engine", "Segment"]

log = logging.getLogger("ferry")

# ferry_request_t up to its transport_hint: opcode, priority, source,
# target_id, reserved, target_offset, length, deadline_ns, transport_hint.
_REQ_HEAD = struct.Struct("=iiQIIQQqQ")
_MEDIUM = int(Priority.MEDIUM)  # an int default: cffi converts it faster than the enum


def _cstr(s: Optional[str]) -> Any:
    return ffi.NULL if not s else ffi.new("char[]", s.encode())


_PLUGIN_DIR_SET = re.compile(r"(?m)^\s*plugin_dir\s*=")


def new_cluster_secret() -> bytes:
    """A new cluster secret: 64 hex digits from the OS's random source, for
    ``Engine(cluster_secret=...)``. Every engine of a cluster needs the same
    one; write it to a file (mode 0600) for engines of other processes."""
    return secrets.token_hex(32).encode()


def _with_plugin_dir(text: str, plugin_dir: Optional[str]) -> str:
    """text with a plugin_dir line first, unless it has one."""
    if _PLUGIN_DIR_SET.search(text):
        if plugin_dir is not None:
            raise errors.InvalidRequest("Engine: plugin_dir is given twice, as an argument and in config_text")
        return text
    d = plugin_dir if plugin_dir is not None else _ffi.plugin_dir()
    if not d:
        return text
    return f"plugin_dir = {json.dumps(os.path.abspath(d))}\n" + text


#: One past the highest address: a pointer and a length must end at or
#: below it (a 64-bit address space; ``ptr=-1`` is not an address).
_ADDRESS_END = 1 << 64


def _span(ptr: int, length: int, what: str) -> None:
    """Refuse a raw address range that is not one: a negative or too large
    address, or one whose length runs past the end of the address space.
    The library refuses it too; checked here, the message names Python's
    arguments."""
    if ptr < 0 or ptr >= _ADDRESS_END:
        raise errors.InvalidRequest(f"{what}: ptr {ptr:#x} is not an address (0 < ptr < 2**64); pass the address of memory you own")
    if ptr + length > _ADDRESS_END:
        raise errors.InvalidRequest(
            f"{what}: {length} bytes from {ptr:#x} run past the end of the address space; pass the address and length of memory you own"
        )


_self_mem: Optional[int] = None


def _host_mapped(ptr: int) -> bool:
    """Whether the byte at ptr is host memory of this process (a device
    address is not): one pread of /proc/self/mem, which fails (EIO) for
    an unmapped address instead of faulting."""
    global _self_mem
    if ptr >= 1 << 63:
        return False
    try:
        if _self_mem is None:
            _self_mem = os.open("/proc/self/mem", os.O_RDONLY | os.O_CLOEXEC)
        return len(os.pread(_self_mem, 1, ptr)) == 1
    except OSError:
        return _self_mem is None  # no /proc: take it as host memory, as before


def _deadline(timeout: Optional[float]) -> int:
    if timeout is None:
        return 0
    if timeout <= 0:
        raise errors.InvalidRequest(f"timeout {timeout}: must be a positive number of seconds (None: the engine's default)")
    return time.time_ns() + int(timeout * 1e9)


class Segment:
    """An open remote segment (another engine's registered memory, or this
    engine's own). ``buffers`` lists what it exposes as it was last read;
    :meth:`refresh` reads it again. Close it with :meth:`close` or
    ``with``."""

    def __init__(self, engine: "Engine", sid: int) -> None:
        self._engine = engine
        self.id = sid
        self.name = ""
        self.machine_id = ""
        self.incarnation = 0
        self.buffers: List[BufferInfo] = []
        self.transports: List[str] = []
        self.closed = False
        self.refresh()

    def __repr__(self) -> str:
        return f"<ferry.Segment {self.name!r} id={self.id} buffers={len(self.buffers)}>"

    def __int__(self) -> int:
        return self.id

    def refresh(self) -> "Segment":
        """Read the segment's description again (its buffers, transports)."""
        e = self._engine
        out = ffi.new("ferry_segment_info_t **")
        e._call("segment info", e._lib.ferry_segment_info, e._handle(), self.id, out)
        info = out[0]
        try:
            self.name = ffi.string(info.name).decode()
            self.machine_id = ffi.string(info.machine_id).decode()
            self.incarnation = int(info.incarnation)
            self.buffers = [
                BufferInfo(int(b.base), int(b.length), Perm(b.perm), bool(b.foreign))
                for b in (info.buffers[i] for i in range(info.num_buffers))
            ]
            self.transports = [ffi.string(info.transports[i]).decode() for i in range(info.num_transports)]
        finally:
            e._lib.ferry_free_segment_info(info)
        return self

    def close(self) -> None:
        """Forget the segment; its transports close their peers."""
        if self.closed:
            return
        self._engine._close_segment(self)

    def __enter__(self) -> "Segment":
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.closed and not self._engine.closed:
            self.close()


Local = Union[Any, int]  # a buffer-protocol object, a Memory, a GPU buffer or DeviceSpan, or an address


class Engine:
    """One Ferry endpoint: its segment, its transport plugins, its memory.

    Start it from a configuration file (``config``) or text
    (``config_text``), HCL as docs/config.md describes; use it as a context
    manager or call :meth:`close`. Methods are safe to call from several
    threads; :meth:`close` must not run while another thread is inside a
    call. Every failure raises a :class:`ferry.FerryError` subclass with
    the library's message.

    The plugin executables are found where the configuration says
    (``plugin_dir``, a plugin block's ``path``). Configuration text that
    names no ``plugin_dir`` gets ``plugin_dir`` (the argument), else
    ``$FERRY_PLUGIN_DIR`` as ``os.environ`` has it now, else the library's
    directory when it holds the plugins (``bin/`` after ``make build``,
    the package's ``bin/`` when installed from the wheel). A configuration
    file is taken as it is; the library gives one that names none the
    same: ``$FERRY_PLUGIN_DIR``, else its own directory when the plugins
    are there, else the running executable's (the interpreter's).

    ``cluster_secret`` (bytes or str, at least 16 bytes, the same on every
    engine of the cluster) replaces the configuration's
    ``cluster_secret_file``: the engine signs its descriptor, authenticates
    its control service, and its plugins authenticate their peers with it.
    :func:`ferry.new_cluster_secret` makes one; engines in other processes
    need the same (through a file their ``cluster_secret_file`` names, or
    this argument). An engine without any secret warns once, at start, of
    what it leaves open.
    """

    def __init__(self, config: Union[str, "os.PathLike[str]", None] = None, *, config_text: Optional[str] = None,
                 plugin_dir: Optional[str] = None, cluster_secret: Union[bytes, str, None] = None) -> None:
        self._lib = _ffi.lib()
        self._h = 0
        self.name = ""
        if (config is None) == (config_text is None):
            raise errors.InvalidRequest("Engine: give exactly one of config (a file path) or config_text (HCL text)")
        self._lock = threading.Lock()
        self._mem: Dict[int, Memory] = {}
        self._regs: Dict[int, Registration] = {}
        self._readonly: List[Registration] = []  # registered read-only objects: never read into
        self._segs: Dict[int, Segment] = {}
        # transport/policy/intent names as C strings; None and "" are NULL
        self._cstrs: Dict[Optional[str], Any] = {None: ffi.NULL, "": ffi.NULL}
        self._hints: Dict[str, int] = {}  # and their addresses
        self._tls = threading.local()  # each thread's request struct for write/read
        # What write and read look up instead of exporting a buffer per
        # call: id(obj) -> (obj, address, size, writable, export) of each
        # Memory and each registered object, while it is allocated or
        # registered. A call holds its entry, and so the registration's
        # export of the object, until it returns.
        self._locals: Dict[int, Tuple[Any, int, int, bool, Any]] = {}
        self._xfer = _ffi.transfer_sync()
        out = ffi.new("ferry_engine_t *")
        secret = cluster_secret.encode() if isinstance(cluster_secret, str) else cluster_secret
        if secret is not None and not isinstance(secret, (bytes, bytearray)):
            raise TypeError(f"Engine: cluster_secret must be bytes or str, not {type(cluster_secret).__name__}")
        if config is not None:
            if plugin_dir is not None:
                raise errors.InvalidRequest("Engine: plugin_dir goes with config_text; a configuration file names its own plugin_dir")
            path = os.fsencode(config)
            if not path:
                raise errors.InvalidRequest("Engine: config is an empty path")
            if secret is not None:
                rc = self._lib.ferry_create_engine_with_secret(path, ffi.NULL, bytes(secret), len(secret), out)
            else:
                rc = self._lib.ferry_create_engine_from_file(path, out)
        else:
            if not config_text:
                raise errors.InvalidRequest("Engine: config_text is empty")
            text = _with_plugin_dir(config_text, plugin_dir).encode()
            if secret is not None:
                rc = self._lib.ferry_create_engine_with_secret(ffi.NULL, text, bytes(secret), len(secret), out)
            else:
                rc = self._lib.ferry_create_engine_from_text(text, out)
        _ffi.check(rc, "start engine")
        self._h = int(out[0])
        self.name = self._string(self._lib.ferry_segment_name)
        #: host:port of the control service: peers open this engine by it
        #: when there is no metastore.
        self.rpc_address = self._string(self._lib.ferry_rpc_addr)
        #: the metastore's URL ("" for none): a second engine joins an
        #: embedded one with metastore { kind = "http" url = "<this>" }.
        self.metastore_url = self._string(self._lib.ferry_metastore_url)

    # ---- plumbing ---------------------------------------------------------

    def _handle(self) -> int:
        h = self._h
        if h == 0:
            raise errors.Closed("ferry engine: it was closed; start a new Engine")
        return h

    def _call(self, what: str, fn: Any, *args: Any) -> None:
        rc = fn(*args)
        if rc != 0:
            raise _ffi.error(rc, what)

    def _string(self, fn: Any) -> str:
        cap = 256
        n = ffi.new("size_t *")
        while True:
            buf = ffi.new("char[]", cap)
            rc = fn(self._handle(), buf, cap, n)
            if rc == self._lib.FERRY_ERR_TOO_SMALL and n[0] + 1 > cap:
                cap = n[0] + 1
                continue
            _ffi.check(rc)
            return ffi.string(buf, n[0]).decode()

    def __repr__(self) -> str:
        return f"<ferry.Engine {self.name!r}{' closed' if self.closed else ''}>"

    @property
    def closed(self) -> bool:
        return self._h == 0

    def close(self) -> None:
        """Stop the engine: tasks in flight end, plugins stop, the segment
        is unpublished, and every :class:`Memory` it allocated is unmapped
        (views of it must not be used after). Closing twice is a no-op.
        A metastore that cannot be reached to unpublish the segment
        (stopped before the engine) is logged as a warning on the
        ``ferry`` logger, not raised: the engine is closed all the same,
        and the descriptor expires with its lease."""
        with self._lock:
            h, self._h = self._h, 0
            mem = list(self._mem.values())
            regs = list(self._regs.values())
            segs = list(self._segs.values())
            self._mem.clear()
            self._regs.clear()
            self._locals.clear()
            self._readonly.clear()
            self._segs.clear()
        if h == 0:
            return
        alive = sum(m.views() for m in mem)
        if alive:
            warnings.warn(
                f"ferry engine {self.name!r} closed with {alive} view(s) of its memory alive: they now point "
                "at unmapped memory; drop them before close",
                ResourceWarning,
                stacklevel=2,
            )
        rc = self._lib.ferry_destroy_engine(h)
        for m in mem:
            m._drop()
        for r in regs:
            r._drop()
        for s in segs:
            s.closed = True
        if rc == self._lib.FERRY_ERR_UNAVAILABLE:
            # The engine is closed; only its descriptor's key, which the
            # metastore (stopped, restarting, cut off) could not be asked
            # to delete, is left to expire with its lease. No error of the
            # caller's: said on the log, not raised.
            log.warning("%s", _ffi.error(rc, "close engine"))
            return
        _ffi.check(rc, "close engine")

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_h", 0):
            try:
                self.close()
            except Exception:
                pass

    # ---- memory -----------------------------------------------------------

    def allocate(self, size: int) -> Memory:
        """``size`` bytes the transport plugins map (zero copy on every
        transport), not yet registered."""
        self._handle()
        if not isinstance(size, int) or size <= 0:
            raise errors.InvalidRequest(f"allocate: size {size!r} must be a positive number of bytes")
        out = ffi.new("void **")
        self._call(f"allocate {size} bytes", self._lib.ferry_allocate, self._handle(), size, out)
        m = Memory(self, out[0], size)
        with self._lock:
            self._mem[m.address] = m
            self._locals[id(m)] = (m, m.address, size, True, None)
        return m

    def _free_memory(self, m: Memory) -> None:
        self._call(f"free memory at {m.address:#x}", self._lib.ferry_free, self._handle(), m._ptr)
        with self._lock:
            self._mem.pop(m.address, None)
            self._unlocal(m)
            gone = [r for r in self._regs.values() if m.address <= r.address < m.address + m.size]
            for r in gone:
                self._forget(r)
        m._drop()

    def _owner(self, address: int, length: int) -> Optional[Memory]:
        for m in self._mem.values():
            if m.address <= address and address + length <= m.address + m.size:
                return m
        return None

    def _resolve(self, buf: Any, ptr: Optional[int], length: Optional[int], writable: bool, what: str) -> Tuple[int, int, Any, Any]:
        """(address, length, object to keep, exported buffer to hold)."""
        if buf is None:
            if ptr is None:
                raise errors.InvalidRequest(f"{what}: give a buffer, or ptr and length")
            if not isinstance(ptr, int) or ptr == 0:
                raise errors.InvalidRequest(f"{what}: ptr {ptr!r} is NULL or not an integer address")
            if not isinstance(length, int) or length <= 0:
                raise errors.InvalidRequest(f"{what}: length {length!r} must be a positive number of bytes")
            _span(ptr, length, what)
            return ptr, length, None, None
        if ptr is not None:
            raise errors.InvalidRequest(f"{what}: give a buffer or ptr, not both")
        if isinstance(buf, Memory):
            buf._live()
            n = buf.size if length is None else length
            if n <= 0 or n > buf.size:
                raise errors.InvalidRequest(f"{what}: length {n} must be in 1..{buf.size} (the memory's size)")
            return buf.address, n, None, None
        c, address, n = contiguous(buf, writable, what)
        if length is not None:
            if length <= 0 or length > n:
                raise errors.InvalidRequest(f"{what}: length {length} must be in 1..{n} (the buffer's size)")
            n = length
        if self._owner(address, n) is not None:
            # A view of this engine's own memory: the engine keeps it;
            # holding the view would keep Memory.free refusing.
            ffi.release(c)
            return address, n, None, None
        return address, n, buf, c

    def register(
        self,
        buf: Any = None,
        perm: Perm = Perm.LOCAL,
        *,
        ptr: Optional[int] = None,
        length: Optional[int] = None,
    ) -> Registration:
        """Make memory usable in transfers and, per ``perm``, by peers.

        ``buf`` is a :class:`Memory` (or a view of part of it: zero copy
        on every transport) or any C-contiguous object with the buffer
        protocol (bytearray, memoryview, numpy array): the application's
        memory, which tcp reaches with one extra copy and shm cannot reach.
        Or give a raw ``ptr`` and ``length``. A read-only buffer cannot be
        registered for remote writes (REMOTE_READ_WRITE). See
        :mod:`ferry.memory` for who keeps what alive.

        A GPU buffer (a CUDA tensor, anything with
        ``__cuda_array_interface__`` or a CUDA/ROCm ``__dlpack_device__``,
        a :class:`~ferry.device.DeviceSpan` or :class:`DeviceMemory`) is
        registered as :meth:`register_device` does; so is a raw ``ptr``
        that the CUDA driver (when present) says is device memory, and one
        that is not host memory of this process (the engine's device
        plugins identify it)."""
        self._handle()
        perm = Perm(perm)
        if buf is not None and ptr is None and is_device(buf):
            return self.register_device(buf, length, perm=perm)
        device = False
        if buf is None and isinstance(ptr, int) and ptr > 0 and isinstance(length, int) and length > 0:
            if _cuda.export(ptr, length) is not None:
                # This process's own CUDA memory, which the device plugins
                # cannot look into: exported here.
                return self.register_device(ptr, length, perm=perm)
            # Not host memory of this process: the library asks the
            # engine's device plugins (or refuses it without any).
            device = not _host_mapped(ptr)
        writable = perm == Perm.REMOTE_READ_WRITE
        address, n, keep, hold = self._resolve(buf, ptr, length, writable, "register")
        if keep is not None and not writable:
            writable = not memoryview(keep).readonly
        elif keep is None:
            writable = True
        out = ffi.new("uint64_t *")
        try:
            self._call(
                f"register {n} bytes at {address:#x}",
                self._lib.ferry_register, self._handle(), ffi.cast("void *", address), n, int(perm), out,
            )
        except BaseException:
            if hold is not None:
                ffi.release(hold)
            raise
        r = Registration(self, address, n, perm, keep, hold, writable)
        if device:
            r.kind = "device"
        with self._lock:
            self._regs[address] = r
            if not writable:
                self._readonly.append(r)
            self._enlocal(r)
        return r

    def register_device(self, obj: Any, length: Optional[int] = None, kind: Optional[str] = None,
                        perm: Perm = Perm.LOCAL, *, handle: Optional[DeviceHandle] = None) -> Registration:
        """Register device (GPU) memory: ``obj`` is a GPU buffer (a CUDA
        tensor, anything with ``__cuda_array_interface__`` or a CUDA/ROCm
        ``__dlpack_device__``), a :class:`DeviceMemory`, a
        :class:`~ferry.device.DeviceSpan`, or a device address with
        ``length``. ``kind`` ("cuda", "cuda:1", "rocm:0") overrides what
        the object says; None lets the engine's device plugins find it.

        ``handle`` exports the range for the device plugin. Without one,
        memory of this process's own CUDA driver is exported here
        (cuIpcGetMemHandle, :mod:`ferry._cuda`) when libcuda is present;
        otherwise the device plugin identifies the memory itself (memory
        of :meth:`allocate_device`, the simulated device).

        The registration keeps ``obj`` referenced until unregistered;
        requests name the memory by the object (fast path), a slice of it
        that is a GPU buffer, a DeviceSpan or an address. Errors name what
        failed: memory that is not device memory, a device index that is
        not the memory's, a kind no device plugin serves here."""
        self._handle()
        perm = Perm(perm)
        keep = None
        if isinstance(obj, int) and not isinstance(obj, bool):
            if obj == 0:
                raise errors.InvalidRequest("register_device: ptr is NULL")
            if not isinstance(length, int) or length <= 0:
                raise errors.InvalidRequest(f"register_device: length {length!r}: an address needs a positive length")
            _span(obj, length, "register_device")
            address, n, okind = obj, length, None
        else:
            address, n, okind = device_range(obj, "register_device")
            if length is not None:
                if length <= 0 or length > n:
                    raise errors.InvalidRequest(f"register_device: length {length} must be in 1..{n} (the buffer's size)")
                n = length
            if not isinstance(obj, DeviceSpan):
                keep = obj
        kind = kind if kind is not None else okind
        if handle is None and not (isinstance(obj, DeviceMemory) and obj._engine is self):
            try:
                handle = _cuda.export(address, n)
            except (ValueError, RuntimeError) as e:
                raise errors.InvalidRequest(f"register_device {n} bytes at {address:#x}: {e}") from None
        ch = handle.to_c(ffi) if handle is not None else ffi.NULL
        out = ffi.new("uint64_t *")
        self._call(
            f"register_device {n} bytes at {address:#x} ({kind or 'kind unknown'})",
            self._lib.ferry_register_device, self._handle(), ffi.cast("void *", address), n,
            _cstr(kind), int(perm), ch, out,
        )
        r = Registration(self, int(out[0]), n, perm, keep, None, True)
        r.kind = kind or "device"
        with self._lock:
            self._regs[r.address] = r
            if keep is not None:
                self._locals[id(keep)] = (keep, r.address, n, True, None)
        return r

    def allocate_device(self, kind: str, size: int) -> DeviceMemory:
        """``size`` bytes of device memory from the device plugin of
        ``kind`` ("cuda", "cuda:1"), with the handle that exports it; not
        registered yet. :meth:`DeviceMemory.map` maps a simulated device's
        (tests); a real GPU's is mapped by the application's driver."""
        self._handle()
        if not isinstance(size, int) or size <= 0:
            raise errors.InvalidRequest(f"allocate_device: size {size!r} must be a positive number of bytes")
        if not kind:
            raise errors.InvalidRequest("allocate_device: name the kind (\"cuda\", \"cuda:0\", \"rocm:1\")")
        out = ffi.new("ferry_device_memory_t *")
        self._call(f"allocate_device {size} bytes of {kind}", self._lib.ferry_allocate_device, self._handle(),
                   kind.encode(), size, out)
        return DeviceMemory(self, int(ffi.cast("uintptr_t", out.addr)), int(out.size), ffi.string(out.kind).decode(),
                            DeviceHandle.from_c(ffi, out.handle))

    def _free_device(self, m: DeviceMemory) -> None:
        self._call(f"free_device {m.addr:#x}", self._lib.ferry_free_device, self._handle(), ffi.cast("void *", m.addr))
        m.freed = True

    def register_batch(self, bufs: Sequence[Any], perms: Union[Perm, Sequence[Perm]] = Perm.LOCAL) -> List[Registration]:
        """Register many buffers in one call, all or nothing. ``bufs`` are
        what :meth:`register` takes as ``buf``, or ``(ptr, length)``
        tuples; ``perms`` is one permission for all or one for each."""
        self._handle()
        if not bufs:
            raise errors.InvalidRequest("register_batch: no buffers")
        if isinstance(perms, (int, Perm)):
            plist = [Perm(perms)]
        else:
            plist = [Perm(p) for p in perms]
            if len(plist) != len(bufs):
                raise errors.InvalidRequest(f"register_batch: {len(plist)} perms for {len(bufs)} buffers; give one, or one each")
        resolved = []
        try:
            for i, b in enumerate(bufs):
                p = plist[0] if len(plist) == 1 else plist[i]
                w = p == Perm.REMOTE_READ_WRITE
                if isinstance(b, tuple):
                    resolved.append(self._resolve(None, b[0], b[1], w, f"register_batch: buffer {i}"))
                else:
                    resolved.append(self._resolve(b, None, None, w, f"register_batch: buffer {i}"))
            n = len(resolved)
            ptrs = ffi.new("void *[]", [ffi.cast("void *", r[0]) for r in resolved])
            lens = ffi.new("size_t[]", [r[1] for r in resolved])
            cperms = ffi.new("int[]", [int(p) for p in plist])
            self._call(f"register_batch of {n} buffers", self._lib.ferry_register_batch, self._handle(), ptrs, lens, n, cperms, len(plist))
        except BaseException:
            for r in resolved:
                if r[3] is not None:
                    ffi.release(r[3])
            raise
        out = []
        with self._lock:
            for i, (address, n, keep, hold) in enumerate(resolved):
                p = plist[0] if len(plist) == 1 else plist[i]
                writable = keep is None or not memoryview(keep).readonly
                r = Registration(self, address, n, p, keep, hold, writable)
                self._regs[address] = r
                if not writable:
                    self._readonly.append(r)
                self._enlocal(r)
                out.append(r)
        return out

    def _start(self, x: Any, what: str) -> int:
        if isinstance(x, Registration):
            if not x.registered:
                raise errors.NotRegistered(f"{what}: {x!r} is no longer registered")
            return x.address
        if isinstance(x, Memory):
            return x.address
        if isinstance(x, int):
            if x == 0:
                raise errors.InvalidRequest(f"{what}: NULL address")
            _span(x, 1, what)
            return x
        if is_device(x):
            return device_range(x, what)[0]
        c, address, _ = contiguous(x, False, what)
        ffi.release(c)
        return address

    def _forget(self, r: Registration) -> None:
        self._regs.pop(r.address, None)
        if r in self._readonly:
            self._readonly.remove(r)
        if r.obj is not None:
            self._unlocal(r.obj)
        r._drop()

    def _enlocal(self, r: Registration) -> None:
        """Let write and read find r's object by identity (called with the
        lock held): its address and whole size, as an export of it gives
        them. The registration holds the object's buffer exported, so the
        address stays valid until _forget."""
        o = r.obj
        if o is not None:
            with memoryview(o) as mv:
                self._locals[id(o)] = (o, r.address, mv.nbytes, r.writable, r._hold)

    def _unlocal(self, o: Any) -> None:
        x = self._locals.get(id(o))
        if x is not None and x[0] is o:
            del self._locals[id(o)]

    def unregister(self, x: Any) -> None:
        """Remove the registration that starts at ``x``: a
        :class:`Registration`, the object registered, a Memory or an
        address."""
        self._handle()
        address = self._start(x, "unregister")
        self._call(f"unregister {address:#x}", self._lib.ferry_unregister, self._handle(), ffi.cast("void *", address))
        with self._lock:
            r = self._regs.get(address)
            if r is not None:
                self._forget(r)

    def unregister_batch(self, xs: Sequence[Any]) -> None:
        """Unregister many, all or nothing: when one is not the start of a
        registration, none is removed."""
        self._handle()
        if not xs:
            raise errors.InvalidRequest("unregister_batch: nothing to unregister")
        starts = [self._start(x, f"unregister_batch: item {i}") for i, x in enumerate(xs)]
        ptrs = ffi.new("void *[]", [ffi.cast("void *", a) for a in starts])
        self._call(f"unregister_batch of {len(starts)}", self._lib.ferry_unregister_batch, self._handle(), ptrs, len(starts))
        with self._lock:
            for a in starts:
                r = self._regs.get(a)
                if r is not None:
                    self._forget(r)

    def registrations(self) -> List[Registration]:
        """What this engine registered through this package."""
        with self._lock:
            return list(self._regs.values())

    # ---- segments ---------------------------------------------------------

    def _segment(self, sid: int) -> Segment:
        with self._lock:
            s = self._segs.get(sid)
        if s is not None:
            s.refresh()
            return s
        s = Segment(self, sid)
        with self._lock:
            s = self._segs.setdefault(sid, s)
        return s

    def open_segment(self, name: str) -> Segment:
        """Open another engine's segment by its name (found through the
        metastore) or, without a metastore, by its ``rpc_address``.
        Opening an open segment returns the same one."""
        self._handle()
        if not name:
            raise errors.InvalidRequest("open_segment: empty segment name")
        out = ffi.new("ferry_segment_t *")
        self._call(f"open segment {name!r}", self._lib.ferry_open_segment, self._handle(), name.encode(), out)
        return self._segment(int(out[0]))

    def _close_segment(self, s: Segment) -> None:
        self._call(f"close segment {s.name!r}", self._lib.ferry_close_segment, self._handle(), s.id)
        s.closed = True
        with self._lock:
            self._segs.pop(s.id, None)

    def export_segment(self) -> bytes:
        """This engine's segment as a blob (checksummed; signed with a
        cluster secret) for the application's own side channel. Export
        after registering: later registrations are not in it."""
        blob = ffi.new("void **")
        n = ffi.new("size_t *")
        self._call("export segment", self._lib.ferry_export_segment, self._handle(), blob, n)
        try:
            return bytes(ffi.buffer(blob[0], n[0]))
        finally:
            self._lib.ferry_free_buffer(blob[0])

    def import_segment(self, blob: bytes, expect_name: Optional[str] = None) -> Segment:
        """Open the segment a peer's :meth:`export_segment` blob describes,
        without a metastore. ``expect_name`` refuses any other engine's."""
        self._handle()
        if not isinstance(blob, (bytes, bytearray, memoryview)) or len(blob) == 0:
            raise errors.InvalidRequest("import_segment: the blob is empty or not bytes")
        out = ffi.new("ferry_segment_t *")
        b = bytes(blob)
        self._call("import segment", self._lib.ferry_import_segment, self._handle(), b, len(b), _cstr(expect_name), out)
        return self._segment(int(out[0]))

    # ---- transfers --------------------------------------------------------

    def _local(self, local: Any, length: Optional[int], op: int, what: str) -> Tuple[int, int, Any]:
        """(address, length, keep-alive) of a request's local side."""
        if isinstance(local, int):
            if local == 0:
                raise errors.InvalidRequest(f"{what}: NULL local address")
            if not isinstance(length, int) or length <= 0:
                raise errors.InvalidRequest(f"{what}: length {length!r}: an address needs a positive length")
            _span(local, length, what)
            if op == 0 and self._readonly:
                for r in self._readonly:
                    if r.contains(local, length):
                        raise errors.InvalidRequest(
                            f"{what}: local {local:#x} lies in a read-only {type(r.obj).__name__} "
                            "registered here; a read writes into it: register a writable buffer"
                        )
            return local, length, None
        if isinstance(local, Memory):
            local._live()
            n = local.size if length is None else length
            if n <= 0 or n > local.size:
                raise errors.InvalidRequest(f"{what}: length {n} must be in 1..{local.size} (the memory's size)")
            return local.address, n, local
        if is_device(local):
            address, n, _ = device_range(local, what)
            if length is not None:
                if length <= 0 or length > n:
                    raise errors.InvalidRequest(f"{what}: length {length} must be in 1..{n} (the device range's size)")
                n = length
            return address, n, local
        c, address, n = contiguous(local, op == 0, what)
        if length is not None:
            if length <= 0 or length > n:
                raise errors.InvalidRequest(f"{what}: length {length} must be in 1..{n} (the buffer's size)")
            n = length
        return address, n, c

    def _hint(self, s: Optional[str]) -> Any:
        """A C string of a transport, policy or intent name, made once per
        name: requests borrow it only for the call, so a cached one is
        always alive."""
        if not s:
            return ffi.NULL
        c = self._cstrs.get(s)
        if c is None:
            c = self._cstrs.setdefault(s, ffi.new("char[]", s.encode()))
        return c

    def _fill(self, r: Any, op: int, local: Any, seg: Any, remote: int, length: Optional[int], priority: int,
              timeout: Optional[float], transport: Optional[str], policy: Optional[str], intent: Optional[str],
              keep: Optional[List[Any]], what: str) -> None:
        """Fill r, a ferry_request_py_t (ferry_request_t with integer
        addresses: no cast per field). A kept object goes in keep."""
        if type(local) is int and type(length) is int and length > 0 and local and not (op == 0 and self._readonly):
            address, n = local, length  # the fast path: an address in registered memory
        else:
            address, n, k = self._local(local, length, op, what)
            if k is not None and keep is not None:
                keep.append(k)
        if type(remote) is not int or remote < 0:
            raise errors.InvalidRequest(f"{what}: remote {remote!r} must be an address in the segment")
        r.opcode = op
        r.priority = priority
        r.source = address
        r.target_id = seg if type(seg) is int else seg.id
        r.target_offset = remote
        r.length = n
        r.deadline_ns = 0 if timeout is None else _deadline(timeout)
        r.transport_hint = self._hint(transport)
        r.policy_name = self._hint(policy) if policy else ffi.NULL
        r.intent = self._hint(intent) if intent else ffi.NULL

    def _requests(self, reqs: Sequence[Request], what: str) -> Tuple[Any, List[Any]]:
        """A ferry_request_t array of reqs and what must stay alive while
        their tasks run (the local buffers' exports)."""
        if not reqs:
            raise errors.InvalidRequest(f"{what}: no requests")
        arr = ffi.new("ferry_request_py_t[]", len(reqs))
        keep: List[Any] = []
        for i, q in enumerate(reqs):
            self._fill(arr[i], int(q.op), q.local, q.segment, q.remote, q.length, int(q.priority), q.timeout,
                       q.transport, q.policy, q.intent, keep, f"{what}: request {i}")
        return ffi.cast("ferry_request_t *", arr), [arr, keep]

    def transfer(self, requests: Sequence[Request]) -> None:
        """Run the requests to the end (one batch of their own); raise the
        first failure's exception unless all completed."""
        h = self._handle()
        arr, keep = self._requests(requests, "transfer")
        self._call("transfer", self._lib.ferry_transfer, h, arr, len(requests))
        del keep

    def _sync(self, op: int, local: Any, segment: Any, remote: int, length: Optional[int], timeout: Optional[float],
              transport: Optional[str], priority: int, what: str) -> None:
        # write's and read's every other case (a priority, a buffer export,
        # a value the fast path's conversion refused): each check with its
        # message, then ferry_transfer with a request struct per thread
        # written by one pack_into (the header's layout, test_abi.py).
        h = self._h
        if h == 0:
            raise errors.Closed("ferry engine: it was closed; start a new Engine")
        try:
            buf, rp = self._tls.req
        except AttributeError:
            r = ffi.new("ferry_request_t *")  # policy_name and intent stay NULL
            buf, rp = self._tls.req = (ffi.buffer(r), r)
        address, n, keep = self._local(local, length, op, what)
        if type(remote) is not int or remote < 0:
            raise errors.InvalidRequest(f"{what}: remote {remote!r} must be an address in the segment")
        hint = 0
        if transport:
            hint = self._hints.get(transport) or self._hint_addr(transport)
        _REQ_HEAD.pack_into(buf, 0, op, priority, address, segment if type(segment) is int else segment.id, 0,
                            remote, n, 0 if timeout is None else _deadline(timeout), hint)
        rc = self._lib.ferry_transfer(h, rp, 1)
        del keep  # the local buffer's export, held through the call
        if rc != 0:
            raise _ffi.error(rc, what)

    def _hint_addr(self, s: str) -> int:
        a = int(ffi.cast("uintptr_t", self._hint(s)))
        self._hints[s] = a
        return a

    def _failed(self, rc: int, what: str) -> errors.FerryError:
        """The exception of a failed fast call (checks done only now)."""
        if self._h == 0:
            return errors.Closed("ferry engine: it was closed; start a new Engine")
        return _ffi.error(rc, what)

    def _timeout_ns(self, timeout: float) -> int:
        if timeout <= 0:
            raise errors.InvalidRequest(f"timeout {timeout}: must be a positive number of seconds (None: the engine's default)")
        return max(1, int(timeout * 1e9))

    def write(self, local: Local, segment: Union[Segment, int], remote: int, length: Optional[int] = None, *,
              timeout: Optional[float] = None, transport: Optional[str] = None,
              priority: int = _MEDIUM) -> None:
        """Copy local registered memory to ``remote`` of the segment and
        return once it landed. ``local`` is a buffer inside registered
        memory, a :class:`Memory`, or an address with ``length``.

        The fast cases, one ferry_transfer_sync call with integers: an
        address, a Memory, or the very object registered (not a new view
        of it), at the default priority."""
        # The hot path (cost.py measures it): O(1) checks of what is
        # known since allocate or register; the library checks the rest
        # (NULL, zero length, registration, bounds) and the messages are
        # built only on failure. read below is its twin.
        if type(local) is int:
            address, n = local, length
        else:
            o = self._locals.get(id(local))
            if o is None or o[0] is not local or (length is not None and length > o[2]):
                return self._sync(1, local, segment, remote, length, timeout, transport, priority, "write")
            address, n = o[1], o[2] if length is None else length
        hint = self._cstrs.get(transport)
        if hint is None or priority != _MEDIUM:
            return self._sync(1, local, segment, remote, length, timeout, transport, priority, "write")
        try:
            rc = self._xfer(self._h, 1, segment if type(segment) is int else segment.id, address, remote, n,
                            0 if timeout is None else self._timeout_ns(timeout), hint)
        except (TypeError, OverflowError):  # refused before the call: say why
            return self._sync(1, local, segment, remote, length, timeout, transport, priority, "write")
        if rc:
            raise self._failed(rc, "write")

    def read(self, local: Local, segment: Union[Segment, int], remote: int, length: Optional[int] = None, *,
             timeout: Optional[float] = None, transport: Optional[str] = None,
             priority: int = _MEDIUM) -> None:
        """Copy ``remote`` of the segment into local registered memory
        (which must be writable) and return once it is there. The fast
        cases are write's."""
        if type(local) is int:
            if self._readonly:  # is it inside a read-only object registered here?
                return self._sync(0, local, segment, remote, length, timeout, transport, priority, "read")
            address, n = local, length
        else:
            o = self._locals.get(id(local))
            if o is None or o[0] is not local or not o[3] or (length is not None and length > o[2]):
                return self._sync(0, local, segment, remote, length, timeout, transport, priority, "read")
            address, n = o[1], o[2] if length is None else length
        hint = self._cstrs.get(transport)
        if hint is None or priority != _MEDIUM:
            return self._sync(0, local, segment, remote, length, timeout, transport, priority, "read")
        try:
            rc = self._xfer(self._h, 0, segment if type(segment) is int else segment.id, address, remote, n,
                            0 if timeout is None else self._timeout_ns(timeout), hint)
        except (TypeError, OverflowError):
            return self._sync(0, local, segment, remote, length, timeout, transport, priority, "read")
        if rc:
            raise self._failed(rc, "read")

    def batch(self, capacity: int) -> "Batch":
        """A batch for up to ``capacity`` asynchronous tasks."""
        from .batch import Batch

        return Batch(self, capacity)

    # ---- plugins ------------------------------------------------------------

    def upgrade_plugin(self, name: str, path: Union[str, "os.PathLike[str]", None] = None,
                       sha256: Optional[str] = None, drain: Optional[float] = None) -> None:
        """Replace the running plugin ``name`` ("tcp") with the binary at
        ``path``, with no restart of the engine: the new binary starts
        beside the old one, gets the registrations and open peers and takes
        all new work; the old one drains and stops. No transfer fails
        because of it.

        ``path``: a relative path is taken from the configuration file's
        directory (the current directory for ``config_text``); None looks
        the plugin up in the plugin directory again. ``sha256``: the
        binary's hex sha256 (as ``sha256sum`` prints it), checked before it
        starts; None checks nothing. ``drain``: seconds the old binary may
        take to finish what it holds before that fails over to the new one
        (None: the config's ``supervise.upgrade_drain``, 30 s by default).

        Blocks (without the GIL) until the old binary has stopped: up to
        ``drain`` past the new one's start. Raises :class:`PluginFailed`
        when the new binary does not start (missing, a wrong sha256, a
        crash at start): the old one keeps serving, and the message says
        why; :class:`InvalidRequest` for an unknown plugin or a malformed
        argument; :class:`Busy` while another upgrade of it runs;
        :class:`Unavailable` when the plugin is not running."""
        h = self._handle()
        if not isinstance(name, str) or not name:
            raise errors.InvalidRequest("upgrade_plugin: name must be a plugin block's name (\"tcp\")")
        p = ffi.NULL
        if path is not None:
            b = os.fsencode(path)
            if not b:
                raise errors.InvalidRequest("upgrade_plugin: path is empty; give the new binary's path, or None for the plugin directory's")
            if b"\0" in b:
                raise errors.InvalidRequest("upgrade_plugin: path contains a NUL byte")
            p = ffi.new("char[]", b)
        if sha256 is not None and not isinstance(sha256, str):
            raise errors.InvalidRequest(f"upgrade_plugin: sha256 must be a hex string or None, not {type(sha256).__name__}")
        ms = 0
        if drain is not None:
            if not isinstance(drain, (int, float)) or isinstance(drain, bool) or not drain > 0 or drain == float("inf"):
                raise errors.InvalidRequest(f"upgrade_plugin: drain {drain!r} must be a positive number of seconds (None: the default)")
            ms = max(1, int(drain * 1000))
            if ms >= 1 << 63:
                raise errors.InvalidRequest(f"upgrade_plugin: drain {drain!r} is too large")
        self._call(f"upgrade plugin {name!r}", self._lib.ferry_upgrade_plugin, h, name.encode(), p,
                   _cstr(sha256), ms)

    # ---- notifications ----------------------------------------------------

    def notify(self, segment: Union[Segment, int], name: str, msg: bytes = b"") -> None:
        """Send a notification to the segment's engine and return once it
        is delivered (exactly once). ``name``: 1 to 255 bytes; ``msg``: at
        most 64 KiB."""
        self._handle()
        if not name:
            raise errors.InvalidRequest("notify: empty notification name")
        m = bytes(msg)
        sid = segment if isinstance(segment, int) else segment.id
        self._call(f"notify {name!r}", self._lib.ferry_send_notif, self._handle(), sid, name.encode(), m or ffi.NULL, len(m))

    def notifications(self, max: int = 64, timeout: float = 0.0) -> List[Notification]:
        """Take up to ``max`` received notifications, oldest first, waiting
        up to ``timeout`` seconds for the first; [] when none came."""
        if max <= 0:
            raise errors.InvalidRequest(f"notifications: max {max} must be positive")
        out = ffi.new("ferry_notif_list_t **")
        rc = self._lib.ferry_recv_notifs(self._handle(), max, int(timeout * 1e9), out)
        if rc == self._lib.FERRY_ERR_AGAIN:
            return []
        _ffi.check(rc, "receive notifications")
        lst = out[0]
        try:
            return [
                Notification(ffi.string(getattr(n, "from")).decode(),  # "from" is a Python keyword
                             ffi.string(n.name).decode(), bytes(ffi.buffer(n.msg, n.msg_len)))
                for n in (lst.notifs[i] for i in range(lst.count))
            ]
        finally:
            self._lib.ferry_free_notifs(lst)

    # ---- prepared block lists ----------------------------------------------

    def prepare_blocks(self, segment: Union[Segment, int], local: Local, local_layout: BlockLayout,
                       remote: int, remote_layout: BlockLayout) -> "BlockList":
        """Check once that local blocks laid out as ``local_layout`` from
        ``local`` and remote blocks laid out as ``remote_layout`` from
        address ``remote`` of the segment lie in registered buffers on both
        sides; submit index pairs with :meth:`Batch.submit_blocks`."""
        from .batch import BlockList

        return BlockList(self, segment, local, local_layout, remote, remote_layout)
