"""``Worker``: an isolated worker process that hosts one interpreter at a time."""

from __future__ import annotations

import math
import re
import threading
import weakref

from .._records import renew_each_after_fork
from ..errors import InvalidInputError, OpaqueOpsError
from .process import WorkerProcess

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.I)


# The memory cap's bounds: below the minimum a worker cannot even load a model
# (TFLite's arena, numpy's buffers); above the maximum it is no cap at all
# (RLIMIT_DATA is a 64-bit count, and no machine has 2**48 bytes).
MIN_MEMORY_LIMIT = 16 * 1024 * 1024
MAX_MEMORY_LIMIT = 1 << 48
_SIZE_HELP = (
    f"give a number of bytes, or a string like '512M' or '2G', from {MIN_MEMORY_LIMIT // (1024 * 1024)}M "
    f"to {MAX_MEMORY_LIMIT // 1024**4}T (or None for no cap)"
)
# How long any call may be given: more than a year is a mistake, not a timeout.
MAX_TIMEOUT = 365 * 24 * 3600.0


def parse_size(value) -> int | None:
    """Bytes from an int or a string such as ``"512M"`` or ``"2GiB"`` (powers of 1024).

    Raises ``InvalidInputError`` (a ``ValueError``) naming the cap and its valid range.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InvalidInputError(f"memory_limit={value!r} is not a size: {_SIZE_HELP}")
    if isinstance(value, str):
        m = _SIZE.match(value)
        if not m:
            raise InvalidInputError(f"memory_limit={value!r} is not a size: {_SIZE_HELP}")
        n = float(m.group(1)) * 1024 ** " kmgt".index(m.group(2).lower() or " ")
    else:
        n = value
    if not math.isfinite(n) or n < MIN_MEMORY_LIMIT or n > MAX_MEMORY_LIMIT:
        raise InvalidInputError(f"memory_limit={value!r} is out of range: {_SIZE_HELP}")
    return int(n)


def check_timeout(value) -> float | None:
    """A call's ``timeout``: None, or seconds in (0, one year].  Raises ``InvalidInputError`` otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(
            f"timeout={value!r} is not a number of seconds: give a number greater than 0 and at most "
            f"{MAX_TIMEOUT:g} (one year), or None for no timeout"
        )
    if not math.isfinite(value) or not 0 < value <= MAX_TIMEOUT:
        raise InvalidInputError(
            f"timeout={value!r} is out of range: give a number of seconds greater than 0 and at most "
            f"{MAX_TIMEOUT:g} (one year), or None for no timeout"
        )
    return float(value)


class Worker:
    """A worker process for isolated interpreters, reusable across them.

    ``Interpreter(..., isolate=True)`` starts a private worker and ends it on
    ``close()``.  Pass a ``Worker`` instead (``isolate=worker``) to run many
    interpreters one after another in the same process and skip the start-up
    cost (about 0.1-0.3 s: a fresh Python that imports numpy and loads the
    runtime).  After a crash, the next interpreter starts a fresh process.
    Reuse trades some isolation for speed: a model that corrupts memory
    without crashing could affect the next one in the same process.

    Parameters
    ----------
    memory_limit : int or str, optional
        Bytes (or ``"512M"``, ``"2G"``) the hosted model may use beyond the
        worker's own baseline: its heap and TFLite's arena (enforced with
        ``RLIMIT_DATA``) plus the shared tensor buffers (counted by the worker).
    library : path-like, optional
        The ``libtensorflowlite_c`` the worker loads.
    forward_stderr : bool
        Copy what the worker prints on stderr to this process's stderr
        (default).  The last 64 KiB are kept for crash reports either way.

    Attributes
    ----------
    starts : int
        How many processes this worker has started.
    """

    def __init__(self, *, memory_limit=None, library=None, forward_stderr: bool = True):
        self.memory_limit = parse_size(memory_limit)
        self.library = library
        self.forward_stderr = forward_stderr
        self.starts = 0
        self._proc: WorkerProcess | None = None
        self._owner = None
        self._lock = threading.Lock()
        _workers.add(self)

    @property
    def pid(self) -> int | None:
        """The current process id, or None when no process is running."""
        p = self._proc
        return p.pid if p is not None and p.alive else None

    @property
    def alive(self) -> bool:
        p = self._proc
        return p is not None and p.alive

    def _attach(self, owner) -> WorkerProcess:
        """Give ``owner`` the process, starting a fresh one if there is none (or it died)."""
        with self._lock:
            current = self._owner() if self._owner is not None else None
            if current is not None and current is not owner:
                raise OpaqueOpsError(
                    "this Worker already hosts an isolated interpreter; close that one first, "
                    "or give each interpreter its own Worker (or isolate=True)"
                )
            if self._proc is None or not self._proc.alive:
                if self._proc is not None:
                    self._proc.close()
                self._proc = None
                self._proc = WorkerProcess(
                    memory_limit=self.memory_limit, library=self.library, forward_stderr=self.forward_stderr
                )
                self.starts += 1
            self._owner = weakref.ref(owner)
            return self._proc

    def _detach(self, owner, *, keep: bool) -> None:
        """``owner`` is done.  ``keep``: it closed cleanly and the process may host the next one."""
        with self._lock:
            current = self._owner() if self._owner is not None else None
            if current is not owner and current is not None:
                return
            self._owner = None
            proc = self._proc
            if proc is None:
                return
            if keep and proc.alive:
                try:
                    reply = proc.call("close", {}, stage="close", timeout=30.0)
                    if reply.error is None:
                        return
                except Exception:  # noqa: BLE001 - a worker that cannot close cleanly is ended
                    pass
            self._proc = None
        proc.close()

    def close(self) -> None:
        """End the worker process (an interpreter still using it is closed with it)."""
        with self._lock:
            proc, self._proc = self._proc, None
            self._owner = None
        if proc is not None:
            proc.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        return f"<opaque_ops.isolate.Worker pid={self.pid} starts={self.starts}>"


_workers: weakref.WeakSet = weakref.WeakSet()


# A thread the fork did not copy may have held a Worker's lock.  The
# process it holds is the parent's (see WorkerProcess._forsake): the next
# interpreter starts a fresh one here.
renew_each_after_fork(_workers, _lock=threading.Lock)
