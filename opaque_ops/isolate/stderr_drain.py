"""The workers' stderr and deaths: one daemon thread watches every worker (one per process: a forked child starts its own).

It drains each worker's stderr pipe, keeps the last bytes (for crash
reports) and forwards them to this process's fd 2 unless asked not to.  It
also watches each worker's pidfd, and calls the owner's ``on_exit`` when the
process ends (or, where pidfds are missing, when its stderr reaches end of
file): a parent waiting for a reply is woken at once, so it can wait without
a timeout.
"""

from __future__ import annotations

import os
import selectors
import threading

TAIL_BYTES = 64 * 1024
# TFLite prints this once per process; in-process that is once, with
# isolation it would be once per worker.  Kept in the tail, not forwarded.
_BANNER = b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\n"
# Where a crash report (or a dump asked for before a kill) starts: the
# exception raised in the parent carries it, so it is kept, not forwarded.
_REPORTS = (b"\nopaque_ops isolated worker: ", b"Fatal Python error: ")


class StderrTail:
    """The end of one worker's stderr."""

    def __init__(self, forward: bool, on_exit=None):
        self.forward = forward
        self.on_exit = on_exit
        self._buf = bytearray()
        self._held = b""
        self._lock = threading.Lock()
        self.eof = threading.Event()

    def feed(self, data: bytes) -> None:
        with self._lock:
            self._buf += data
            if len(self._buf) > 2 * TAIL_BYTES:
                del self._buf[:-TAIL_BYTES]
        if self.forward:
            # The runtime writes its banner in pieces; hold back what could
            # still become it.
            data = (self._held + data).replace(_BANNER, b"")
            cut = min((k for k in (data.find(m) for m in _REPORTS) if k >= 0), default=-1)
            if cut >= 0:
                data, self.forward = data[:cut], False
            self._held = b""
            for k in range(min(len(data), len(_BANNER) - 1), 0, -1):
                if _BANNER.startswith(data[-k:]):
                    data, self._held = data[:-k], data[-k:]
                    break
            if data:
                try:
                    os.write(2, data)
                except OSError:  # pragma: no cover - our own stderr is closed
                    pass

    def text(self) -> str:
        with self._lock:
            return bytes(self._buf[-TAIL_BYTES:]).decode("utf-8", "replace")

    def closed(self) -> None:
        if self.forward and self._held:
            try:
                os.write(2, self._held)
            except OSError:  # pragma: no cover
                pass
        self.eof.set()
        self.exited()

    def exited(self) -> None:
        if self.on_exit is not None:
            try:
                self.on_exit()
            except Exception:  # pragma: no cover - must not kill the pump
                pass


class _Pump:
    def __init__(self):
        self._lock = threading.Lock()
        self._pending: list = []
        self._thread = None
        self._wake_r = self._wake_w = -1
        self._owned: set = set()  # every descriptor the pump closes (for a forked child)

    def add(self, fd: int, tail: StderrTail, pidfd: int) -> None:
        """Drain ``fd`` (which the pump closes at end of file) into ``tail``; watch ``pidfd`` (closed on exit)."""
        with self._lock:
            self._pending.append((fd, tail, pidfd))
            self._owned.update(x for x in (fd, pidfd) if x >= 0)
            if self._thread is None:
                self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC)
                self._owned.update((self._wake_r, self._wake_w))
                self._thread = threading.Thread(target=self._loop, name="opaque_ops-stderr", daemon=True)
                self._thread.start()
        os.write(self._wake_w, b"x")

    def _loop(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._wake_r, selectors.EVENT_READ, None)
        while True:
            # One call per batch: no local outlives it, so nothing keeps an
            # ended worker's objects alive while select() waits.
            self._handle(sel, sel.select())

    def _handle(self, sel, events) -> None:
        for key, _ in events:
            if key.data is None:
                os.read(self._wake_r, 4096)
                with self._lock:
                    pending, self._pending = self._pending, []
                for fd, tail, pidfd in pending:
                    sel.register(fd, selectors.EVENT_READ, tail)
                    if pidfd >= 0:
                        sel.register(pidfd, selectors.EVENT_READ, ("exit", tail))
                continue
            if isinstance(key.data, tuple):  # a pidfd: the process has ended
                sel.unregister(key.fd)
                self._close(key.fd)
                key.data[1].exited()
                continue
            try:
                data = os.read(key.fd, 65536)
            except OSError:
                data = b""
            if data:
                key.data.feed(data)
            else:
                sel.unregister(key.fd)
                self._close(key.fd)
                key.data.closed()

    def _close(self, fd: int) -> None:
        with self._lock:
            self._owned.discard(fd)
        os.close(fd)

    def forsake(self) -> None:
        """In a forked child: the thread is gone, and these descriptors are the parent's workers'."""
        for fd in self._owned:
            try:
                os.close(fd)
            except OSError:
                pass
        self._owned.clear()


_pump = _Pump()


def _after_fork_in_child() -> None:
    # Threads do not survive fork(): the child starts its own pump with its
    # first worker (else nothing would notice that worker's death, and a
    # full stderr pipe would block it).
    global _pump
    old, _pump = _pump, _Pump()
    old.forsake()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def watch(fd: int, pid: int, forward: bool, on_exit=None) -> StderrTail:
    """Start draining a worker's stderr pipe and watching for its exit; return its tail."""
    tail = StderrTail(forward, on_exit)
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # Linux < 5.3 or Python < 3.9: end of file alone tells
        pidfd = -1
    _pump.add(fd, tail, pidfd)
    return tail
