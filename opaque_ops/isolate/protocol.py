"""How the parent and the worker talk: the control page, messages, and arrays in shared memory.

Three channels connect a parent and its worker:

- the **control page**, one shared 4 KiB page: two process-shared
  semaphores (request, reply), the request code and reply status of the fast
  path, and the crash record the worker's signal handler fills in;
- a **Unix socket** carrying small pickled messages (method name, arguments,
  metadata, exceptions) and, as ``SCM_RIGHTS``, the file descriptors of new
  shared-memory segments;
- **shared-memory segments** (``memfd_create``: anonymous, never a
  ``/dev/shm`` name that could leak): the model's input and output tensors,
  which TFLite reads and writes in place, and one outbox per direction for
  any other array a message carries.  Pickle never sees array data: a
  message's arrays are replaced by references into the sender's outbox.

A call is: the parent writes its message to the socket (if any), stores the
request code, posts *request*; the worker takes it, does the work, writes its
reply, posts *reply*.
"""

from __future__ import annotations

import io
import mmap
import os
import pickle
import re
import socket
import struct
import traceback

import numpy as np

# ----------------------------------------------------------- the control page
PAGE = 4096
# The semaphores, 64 bytes apart (glibc's sem_t is 32 bytes on every LP64 target).
REQ_SEM = 0  # parent -> worker
REP_SEM = 64  # worker -> parent
OP = 128  # u32: the request code
STATUS = 132  # i32: the fast path's reply
CANCEL_ACK = 136  # i32: cancel requests the worker has carried out
CRASH = 256  # the crash record (c/src/isolate_helper.c, oo_crash_record)
CRASH_RECORD = struct.Struct("<iiiiiiQ64s")  # magic signo code node subgraph stage addr op
CRASH_MAGIC = 0x4F4F4352
STAGE = CRASH + 20  # the record's stage field, written by the worker

# Request codes.
OP_MESSAGE = 1  # a message waits on the socket
OP_INVOKE = 2  # the fast path: invoke the hosted interpreter

# Fast-path replies (STATUS).
ST_OK = 0  # invoked; the tensor layout did not change
ST_MESSAGE = 1  # the reply is a message on the socket (an error, or a new layout)

# Stages, as stored in the crash record and named in RuntimeCrashError.
STAGES = ["idle", "start", "create", "allocate", "invoke", "resize", "call", "run_op", "close"]
STAGE_CODES = {name: i for i, name in enumerate(STAGES)}


def read_crash_record(page) -> dict | None:
    """The crash record of a control page, or None if no fatal signal was recorded."""
    magic, signo, code, node, subgraph, stage, addr, op = CRASH_RECORD.unpack_from(page, CRASH)
    stage_name = STAGES[stage] if 0 <= stage < len(STAGES) else None
    if magic != CRASH_MAGIC:
        return {"signo": None, "stage": stage_name}
    return {
        "signo": signo,
        "code": code,
        "node": node if node >= 0 else None,
        "subgraph": subgraph if subgraph >= 0 else None,
        "op": op.split(b"\0", 1)[0].decode("utf-8", "replace") or None,
        "addr": addr,
        "stage": stage_name,
    }


def first_non_string(arr: np.ndarray) -> tuple[int, str] | None:
    """The flat position and type name of ``arr``'s first element that is neither bytes nor str; None if none.

    An array of Python objects that are all bytes or str is a string
    tensor's value: it crosses the process boundary (pickled element by
    element; each bytes object above ``Outbox.BYTES_INLINE`` goes through
    the shared segment).  Other object arrays do not cross.
    """
    for i, x in enumerate(arr.flat):
        if not isinstance(x, (bytes, str)):
            return i, type(x).__name__
    return None


class ObjectArray:
    """Stands in for an array of Python objects other than strings in ``set_tensor``, which always
    refuses one: the worker refuses the stand-in's array with the same error.

    In-process, a numeric tensor refuses any object array (by its dtype), and
    a string tensor names the first element that is not bytes or str: the
    stand-in keeps that element's position and type name, and its array has
    there an object of a class of that name (strings before it, None after).
    """

    __slots__ = ("shape", "first_bad")

    def __init__(self, shape, first_bad: tuple[int, str]):
        self.shape = tuple(shape)
        self.first_bad = first_bad

    def __reduce__(self):
        return ObjectArray, (self.shape, self.first_bad)

    def array(self) -> np.ndarray:
        out = np.empty(self.shape, dtype=object)
        k, name = self.first_bad
        flat = out.reshape(-1)  # (a view: out is contiguous)
        flat[:k] = b""
        if k < flat.size:
            flat[k] = type(name, (), {})()
        return out


# ------------------------------------------------------------------ segments
_ALIGN = 64  # TFLite's kDefaultTensorAlignment; pages are aligned far beyond it


def align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


class Segment:
    """One shared-memory segment: an anonymous memfd mapped ``MAP_SHARED``.

    The creator sends ``fd`` to the other side once and then closes it;
    the mapping lives as long as any numpy array made from it.
    """

    __slots__ = ("id", "size", "map", "fd")

    def __init__(self, seg_id: int, size: int, fd: int | None = None):
        self.id = seg_id
        self.size = size
        self.fd = fd
        if fd is None:
            self.fd = os.memfd_create(f"opaque_ops-isolate-{seg_id}", os.MFD_CLOEXEC)
            os.ftruncate(self.fd, size)
        self.map = mmap.mmap(self.fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        global _mapped
        _mapped = True

    def close_fd(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def array(self, offset: int, dtype, shape) -> np.ndarray:
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
        return np.frombuffer(self.map, dtype=dtype, count=count, offset=offset).reshape(shape)


_mapped = False  # has this process ever mapped a segment? (see detach_segments)
_SEGMENT_MAP = re.compile(
    r"^([0-9a-f]+)-([0-9a-f]+) [r-][w-][x-]s \S+ \S+ \S+ +/memfd:opaque_ops-isolate-\d+(?: \(deleted\))?$"
)


def detach_segments() -> None:
    """In a forked child: make this process's mappings of every segment private copies, in place.

    A segment is ``MAP_SHARED``: after ``fork()`` the child's mappings (under
    the ``tensor()`` views it inherited) still show what the parent's worker
    writes, and the child's writes reach it.  Each mapping is replaced, at the
    same address and with the same bytes, by a private anonymous one, so a
    view held across the fork keeps the values it had at the fork, as the
    copy-on-write arena of an in-process interpreter does.  The mmap objects
    stay valid: their later ``munmap`` of that range unmaps the private copy.
    """
    if not _mapped:
        return
    try:
        with open("/proc/self/maps") as f:
            ranges = [(int(m[1], 16), int(m[2], 16)) for m in map(_SEGMENT_MAP.match, f.read().splitlines()) if m]
    except OSError:  # pragma: no cover - no /proc
        return
    failed = 0
    for start, end in ranges:
        failed += not _privatize(start, end - start)
    if failed:  # pragma: no cover - out of memory at the fork
        os.write(
            2,
            f"opaque_ops: {failed} shared tensor mapping(s) could not be made private after fork(); "
            "tensor() views taken before the fork may show the parent's values\n".encode(),
        )


_libc = None
_MREMAP_MAYMOVE, _MREMAP_FIXED = 1, 2


def _privatize(addr: int, size: int) -> bool:
    """Replace the shared mapping at ``[addr, addr + size)`` with a private anonymous copy of it."""
    import ctypes

    global _libc
    if _libc is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
        libc.mremap.restype = ctypes.c_void_p
        libc.mremap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
        libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
        _libc = libc
    libc = _libc
    failed = ctypes.c_void_p(-1).value
    prot = mmap.PROT_READ | mmap.PROT_WRITE
    private = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    # A private copy elsewhere, then moved over the shared mapping in one step (mremap
    # with MREMAP_FIXED unmaps what was there): the range is never left unmapped.
    copy = libc.mmap(None, size, prot, private, -1, 0)
    if copy is not None and copy != failed:
        ctypes.memmove(copy, addr, size)
        if libc.mremap(copy, size, size, _MREMAP_MAYMOVE | _MREMAP_FIXED, addr) == addr:
            return True
        libc.munmap(copy, size)
    # Otherwise: the bytes, a private mapping over the same range, the bytes back.
    data = ctypes.string_at(addr, size)
    if libc.mmap(addr, size, prot, private | _MAP_FIXED, -1, 0) != addr:
        return False
    ctypes.memmove(addr, data, size)
    return True


_MAP_FIXED = getattr(mmap, "MAP_FIXED", 0x10)


# ------------------------------------------------------------------- framing
_HEADER = struct.Struct("<QI")  # payload length, number of fds
MAX_FDS = 16


def send_message(sock: socket.socket, obj, fds=()) -> None:
    """Send ``obj`` (already free of arrays, see :class:`Outbox`) and file descriptors."""
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    fds = list(fds)
    if len(fds) > MAX_FDS:
        raise ValueError("too many file descriptors in one message")
    head = _HEADER.pack(len(payload), len(fds))
    if fds:
        socket.send_fds(sock, [head], fds)
        sock.sendall(payload)
    else:
        sock.sendall(head + payload)


class PeerGone(ConnectionError):
    """The other side closed the socket (it exited or crashed)."""


def recv_message(sock: socket.socket):
    """Return ``(obj, fds)``; raise :class:`PeerGone` if the peer is gone."""
    head = b""
    fds: list[int] = []
    while len(head) < _HEADER.size:
        data, got, _flags, _addr = socket.recv_fds(sock, _HEADER.size - len(head), MAX_FDS)
        if not data:
            for fd in got:
                os.close(fd)
            raise PeerGone("the peer closed the connection")
        head += data
        fds.extend(got)
    size, nfds = _HEADER.unpack(head)
    if nfds != len(fds):
        for fd in fds:
            os.close(fd)
        raise PeerGone(f"expected {nfds} file descriptors, received {len(fds)}")
    buf = bytearray(size)
    view = memoryview(buf)
    got_bytes = 0
    while got_bytes < size:
        n = sock.recv_into(view[got_bytes:], size - got_bytes)
        if n == 0:
            for fd in fds:
                os.close(fd)
            raise PeerGone("the peer closed the connection mid-message")
        got_bytes += n
    return pickle.loads(buf), fds


# -------------------------------------------------- arrays in shared memory
class Outbox:
    """The sender's shared segment for the arrays (and large bytes) of its messages.

    :meth:`pack` turns a message into ``(pickled-free tree, table)``: each
    ndarray (and each bytes object above ``BYTES_INLINE``) is copied into the
    outbox and replaced by an index into ``table``.  The receiver's
    :class:`Inbox` turns the indices back into arrays.  The outbox grows
    (a new, larger segment whose fd travels with the message) when a message
    does not fit; one message at a time is in flight, so each message starts
    writing at offset 0.

    Parameters
    ----------
    ids : iterator of int
        Segment ids, unique per worker connection.
    budget : callable, optional
        ``budget(size, growth)`` is called before a new segment of ``size``
        bytes replaces one ``growth`` bytes smaller; it may raise (a memory cap).
    """

    BYTES_INLINE = 64 * 1024
    MIN_SIZE = 1 << 20

    def __init__(self, ids, budget=None):
        self._ids = ids
        self._budget = budget
        self.segment: Segment | None = None

    def pack(self, obj):
        """Return ``(obj with arrays replaced, new segment fds)``."""
        found: list = []
        out = io.BytesIO()
        p = _CollectingPickler(out, found, self.BYTES_INLINE)
        p.dump(obj)
        if not found:
            return (out.getvalue(), None), []
        sizes = [align(a.nbytes if isinstance(a, np.ndarray) else len(a)) for a in found]
        total = sum(sizes)
        fds = []
        if self.segment is None or self.segment.size < total:
            size = max(self.MIN_SIZE, 1 << max(total - 1, 1).bit_length())
            if self._budget is not None:
                self._budget(size, size - (self.segment.size if self.segment else 0))
            self.segment = Segment(next(self._ids), size)
            fds.append(self.segment.fd)
        table = []
        off = 0
        mm = self.segment.map
        for item, size in zip(found, sizes):
            if isinstance(item, np.ndarray):
                n = item.nbytes
                if n:
                    dst = np.frombuffer(mm, np.uint8, n, off)
                    dst[...] = np.ascontiguousarray(item).reshape(-1).view(np.uint8)
                table.append(("a", off, item.dtype.str, item.shape))
            else:
                mm[off : off + len(item)] = item
                table.append(("b", off, len(item)))
            off += size
        return (out.getvalue(), (self.segment.id, table)), fds

    def sent(self) -> None:
        """Close a new segment's fd once the message carrying it has gone."""
        if self.segment is not None:
            self.segment.close_fd()


class _CollectingPickler(pickle.Pickler):
    def __init__(self, file, found: list, inline: int):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._found = found
        self._inline = inline

    def persistent_id(self, obj):
        if isinstance(obj, np.ndarray):
            if obj.dtype.hasobject:
                if first_non_string(obj) is None:
                    return None  # numpy's own pickle: its elements, each through this pickler
                raise TypeError(
                    "arrays of Python objects other than bytes and str (dtype=object) cannot cross "
                    "the process boundary of an isolated interpreter"
                )
            self._found.append(obj)
            return len(self._found) - 1
        if type(obj) is bytes and len(obj) > self._inline:
            self._found.append(obj)
            return len(self._found) - 1
        return None


class Inbox:
    """The receiver's view of the sender's outbox.

    Parameters
    ----------
    copy : bool
        Return arrays that own their memory (the parent: results go to the
        user) or read-only views valid until the next message (the worker:
        arguments are consumed during the call).
    """

    def __init__(self, copy: bool):
        self.copy = copy
        self.segment: Segment | None = None

    def adopt(self, seg_id: int, fd: int, size: int | None = None) -> None:
        if size is None:
            size = os.fstat(fd).st_size
        self.segment = Segment(seg_id, size, fd)
        self.segment.close_fd()

    def unpack(self, packed):
        data, ref = packed
        if ref is None:
            return pickle.loads(data)
        seg_id, table = ref
        if self.segment is None or self.segment.id != seg_id:
            raise RuntimeError(f"message refers to shared segment {seg_id}, which was never received")
        mm = self.segment.map
        items = []
        for entry in table:
            if entry[0] == "a":
                _, off, dtype, shape = entry
                arr = self.segment.array(off, dtype, shape)
                if self.copy:
                    arr = arr.copy()
                else:
                    arr.flags.writeable = False
                items.append(arr)
            else:
                _, off, n = entry
                items.append(bytes(mm[off : off + n]))
        return _LoadingUnpickler(io.BytesIO(data), items).load()


class _LoadingUnpickler(pickle.Unpickler):
    def __init__(self, file, items):
        super().__init__(file)
        self._items = items

    def persistent_load(self, pid):
        return self._items[pid]


class Channel:
    """One side of the socket: messages out through an :class:`Outbox`, in through an :class:`Inbox`.

    Parameters
    ----------
    sock : socket.socket
    copy_in : bool
        See :class:`Inbox`.
    ids : iterator of int
        Ids for the segments this side creates.
    budget : callable, optional
        See :class:`Outbox`.
    """

    def __init__(self, sock, copy_in: bool, ids, budget=None):
        self.sock = sock
        self.outbox = Outbox(ids, budget)
        self.inbox = Inbox(copy_in)
        self.shared: dict[int, Segment] = {}

    def send(self, obj, share=()) -> None:
        """Send ``obj``; ``share`` lists new segments (tensor buffers) the other side must map."""
        self.transmit(self.pack(obj, share))

    def pack(self, obj, share=()) -> tuple:
        """The message for ``obj``, ready for :meth:`transmit`; nothing is sent yet.

        The errors of a message that cannot be sent (an argument that does not
        pickle, arrays past the outbox budget) come from here, before any byte
        is on its way.
        """
        packed, fds = self.outbox.pack(obj)
        segs = []
        if fds:
            segs.append(("outbox", self.outbox.segment.id, self.outbox.segment.size))
        fds = list(fds)
        for seg in share:
            segs.append(("shared", seg.id, seg.size))
            fds.append(seg.fd)
        return (packed, segs), fds, share

    def transmit(self, message: tuple) -> None:
        """Send a message made by :meth:`pack`."""
        body, fds, share = message
        send_message(self.sock, body, fds)
        self.outbox.sent()
        for seg in share:
            seg.close_fd()

    def release(self) -> None:
        """Drop every segment (the connection is over)."""
        self.shared.clear()
        self.outbox.segment = None
        self.inbox.segment = None

    def recv(self):
        (packed, segs), fds = recv_message(self.sock)
        for (role, seg_id, size), fd in zip(segs, fds):
            if role == "outbox":
                self.inbox.adopt(seg_id, fd, size)
            else:
                seg = Segment(seg_id, size, fd)
                seg.close_fd()
                self.shared[seg_id] = seg
        return self.inbox.unpack(packed)


# ---------------------------------------------------------------- exceptions
def pack_exception(exc: BaseException) -> dict:
    """Describe an exception so that :func:`unpack_exception` can rebuild it in the parent.

    Exceptions are not pickled as such: opaque_ops' own take keyword-only
    details in ``__init__`` that pickle's default protocol loses.  The class
    is sent by reference, with ``args``, the instance dict and the worker's
    traceback text.
    """
    cls = type(exc)
    state = {}
    for k, v in getattr(exc, "__dict__", {}).items():
        try:
            pickle.dumps(v)
        except Exception:  # noqa: BLE001 - keep what can travel
            continue
        state[k] = v
    try:
        args = exc.args
        pickle.dumps(args)
    except Exception:  # noqa: BLE001
        args = tuple(str(a) for a in exc.args)
    return {
        "module": cls.__module__,
        "qualname": cls.__qualname__,
        "args": args,
        "state": state,
        "text": str(exc),
        "traceback": "".join(traceback.format_exception(cls, exc, exc.__traceback__)),
    }


class RemoteTraceback(Exception):
    """The traceback of an exception raised in the isolated worker (set as ``__cause__``)."""

    def __init__(self, tb: str):
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return "\n\n--- raised in the isolated worker ---\n" + self.tb.rstrip()


def unpack_exception(info: dict) -> BaseException:
    """Rebuild an exception described by :func:`pack_exception`."""
    import importlib

    exc = None
    try:
        obj = importlib.import_module(info["module"])
        for part in info["qualname"].split("."):
            obj = getattr(obj, part)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            try:
                exc = obj.__new__(obj)
            except TypeError:  # a MemoryError subclass: only a call creates one
                exc = obj(*info["args"])
            exc.args = tuple(info["args"])
            exc.__dict__.update(info["state"])
            str(exc)  # a class whose __str__ needs what __init__ would have set
    except Exception:  # noqa: BLE001 - fall back to a generic error with the text
        exc = None
    if exc is None:
        from ..errors import OpaqueOpsError

        exc = OpaqueOpsError(f"{info['qualname']} raised in the isolated worker: {info['text']}")
    exc.__cause__ = RemoteTraceback(info["traceback"])
    return exc
