"""One lock per interpreter: every public call holds it, and re-entry is an error.

The contract: the calls of one :class:`~opaque_ops.Interpreter` (and of its
signature runners and ``tensor()`` accessors) are serialized.  Two threads
may share an interpreter; each call waits for the one before it.

A call made by the thread that already holds the lock can only come from
inside a call: a ``python_op`` callback running during ``invoke()`` or
``allocate_tensors()``, or a Python signal handler.  Waiting would hang
forever, so it raises :class:`~opaque_ops.ReentrantCallError` instead.
"""

from __future__ import annotations

import _thread  # threading's locks, without importing threading (CONTRIBUTING.md, "The start-up path")
from contextlib import contextmanager

from ..errors import ReentrantCallError

get_ident = _thread.get_ident

_POLL_S = 0.05
_UNOWNED_S = 1.0


def _main_thread_ident() -> int | None:
    # Only a contended call gets here; threading is not imported at start-up.
    import threading

    return threading.main_thread().ident


def reentered_error(what: str) -> ReentrantCallError:
    return ReentrantCallError(
        f"{what} was called on an Interpreter from inside one of its own calls "
        "(a python_op callback, or a signal handler, running during one of its calls). "
        "The interpreter is busy with that call; compute what the op needs from its inputs, "
        "do the work after the call returns (a signal handler can set a flag), or use a second Interpreter."
    )


class CallLock:
    """A non-reentrant lock that knows its owner thread.

    Every call takes it with :meth:`try_acquire` and, when that fails,
    :meth:`wait` (spelled out on the hot paths, ``set_tensor``, ``invoke``,
    ``get_tensor``, where a ``with`` costs more than the lock);
    :meth:`held` is the readable form for everything else.
    """

    __slots__ = ("lock", "owner", "taking")

    def __init__(self, lock=None):
        # threading.Lock's interface; the fast calls' own Lock when given
        # (interpreter.fast_calls): their C methods take the same lock.
        self.lock = lock if lock is not None else _thread.allocate_lock()
        # Thread id of the holder (None when free).  Set after acquiring and
        # cleared before releasing, so a thread that sees its own id here
        # holds the lock.
        self.owner = None
        # Thread id of a thread inside try_acquire: marked before its attempt
        # and cleared once it is the owner or has failed.  A Python signal
        # handler runs between two bytecodes of the main thread, also between
        # the lock's acquire() returning and the owner's mark; a call it makes
        # finds this mark, its own, and is refused at once.  (Without it, it
        # found the lock held with no owner and could only tell its own
        # thread from another by waiting a second: see wait().)
        self.taking = None

    def try_acquire(self) -> bool:
        """Take the lock if it is free, as its owner; False if it is held, or being taken by this very thread."""
        me = get_ident()
        if self.taking == me:
            return False  # a signal handler inside this thread's own try_acquire: wait() refuses it
        self.taking = me
        if self.lock.acquire(False):
            self.owner = me
            self.taking = None
            return True
        self.taking = None
        return False

    def wait(self, what: str) -> None:
        """Acquire, as the owner, after a failed :meth:`try_acquire`: refuse re-entry, else block."""
        me = get_ident()
        if self.owner == me or self.taking == me:
            raise reentered_error(what)
        if me != _main_thread_ident():
            self.lock.acquire()
            self.owner = me
            return
        # The main thread, where Python signal handlers run.  A handler that
        # interrupted one of this interpreter's calls where neither mark is
        # its own finds no owner: between clearing the owner and releasing,
        # or in try_acquire when another thread overwrote the taking mark
        # (only the thread's last attempt is marked).  It would wait forever
        # for a lock its own thread holds.  Another thread holding the lock
        # unmarked (the fast calls' C set_tensor and get_tensor do not mark
        # it, and never run Python code while they hold it) needs only the
        # GIL, which this wait releases, to finish; a lock held with no owner
        # for a whole second is this thread's own.
        unowned = 0.0
        while not self.lock.acquire(timeout=_POLL_S):
            owner = self.owner
            if owner == me:
                raise reentered_error(what)
            unowned = unowned + _POLL_S if owner is None else 0.0
            if unowned >= _UNOWNED_S:
                raise reentered_error(what)
        self.owner = me

    def acquire(self, what: str) -> None:
        if not self.try_acquire():
            self.wait(what)

    def release(self) -> None:
        self.owner = None
        self.lock.release()

    @contextmanager
    def held(self, what: str):
        self.acquire(what)
        try:
            yield
        finally:
            self.release()
