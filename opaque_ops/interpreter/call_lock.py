"""One lock per interpreter: every public call holds it, and re-entry is an error.

The contract: the calls of one :class:`~opaque_ops.Interpreter` (and of its
signature runners and ``tensor()`` accessors) are serialized.  Two threads
may share an interpreter; each call waits for the one before it.

A call made by the thread that already holds the lock can only come from
inside a call: a ``python_op`` callback running during ``invoke()`` or
``allocate_tensors()``, or a Python signal handler.  Waiting would hang
forever, so it raises :class:`~opaque_ops.ReentrantCallError` instead.

Ctrl-C must not leave the lock held.  Python runs a signal handler, whose
exception (KeyboardInterrupt) then rises from that point, between two
bytecodes, and only at some of them: at the entry of a Python function,
right after a call into C returns, at a loop's backward jump.  So:

- the lock knows the thread holding it (``_is_owned()``, as
  ``threading.RLock`` has it): the fast calls module's ``Lock``, or
  :class:`Lock` here without it, both in C.  An exception raised right after
  ``acquire()`` returned loses its answer, not the lock: the ``except``
  around it asks the lock, and releases;
- from the moment the lock is taken to the ``try`` whose ``finally``
  releases it, no Python function is entered (``try_acquire`` returns
  straight into the caller's ``try``);
- a ``finally`` releases with two statements, ``owner = None`` then
  ``lock.release()``, not by calling a Python function: the function's
  entry is a point where a handler runs, before it has released anything.

``tests/interpreter/test_interrupted_calls.py`` raises KeyboardInterrupt at
each of those points in turn and checks that the interpreter still works.
"""

from __future__ import annotations

import _thread  # threading's locks, without importing threading (CONTRIBUTING.md, "The start-up path")
from contextlib import contextmanager

from ..errors import ReentrantCallError

get_ident = _thread.get_ident

_POLL_S = 0.05


class Lock(_thread.RLock):
    """The call lock without the fast calls module: threading.RLock's C lock, which knows its holder.

    Its ``acquire``, ``release`` and ``_is_owned`` are C functions: no point
    inside them where a signal handler runs, and ``release()``'s entry is
    none either (a Python method's entry is one, before it has released
    anything).  It is never taken twice by one thread: :class:`CallLock`
    asks ``_is_owned()`` first, and refuses.  The fast calls module's
    ``Lock`` has the same methods.
    """

    __slots__ = ()

    def locked(self) -> bool:
        """Whether a thread holds the lock (threading.RLock has no ``locked()`` before 3.14)."""
        if self._is_owned():
            return True
        if self.acquire(False):
            self.release()
            return False
        return True


def try_take(lock) -> bool:
    """``lock.acquire(False)``, let go again if a signal handler raises as it returns.

    For a lock with ``_is_owned()`` (:class:`Lock`, ``threading.RLock``) that
    is released in a ``finally`` when taken: a KeyboardInterrupt right after
    ``acquire()`` returned would otherwise leave it held with nobody to
    release it.  Taking an RLock this thread already holds adds one level,
    which the ``except`` takes off again.
    """
    try:
        return lock.acquire(False)
    except BaseException:
        if lock._is_owned():
            lock.release()
        raise


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

    __slots__ = ("lock", "owner")

    def __init__(self, lock=None):
        # A lock that knows its holder (``_is_owned()``): the fast calls' own
        # Lock when given (interpreter.fast_calls: their C methods take the
        # same lock), else :class:`Lock`.
        self.lock = lock if lock is not None else Lock()
        # Thread id of the holder (None when free), for readers of the state
        # (the fast calls' C invoke sets it too).  Set after acquiring and
        # cleared before releasing.  Who holds the lock is the lock's own
        # answer, _is_owned(): it is right also between acquire() returning
        # and this mark, where a signal handler may run.
        self.owner = None

    def try_acquire(self) -> bool:
        """Take the lock if it is free, as its owner; False if it is held (by this very thread, too)."""
        lock = self.lock
        me = get_ident()  # (before acquiring: each call after it is one more point for a handler)
        if lock._is_owned():
            return False  # a signal handler or a Python op inside this thread's own call: wait() refuses it
        # try_take(lock), inlined: this is every Python call's way in, and a
        # function call more costs more than the lock.
        try:
            got = lock.acquire(False)
        except BaseException:
            # A signal handler's (Ctrl-C), raised right after the attempt
            # took the lock, or before it: the answer is lost, the lock knows.
            if lock._is_owned():
                lock.release()
            raise
        if got:
            self.owner = me
            return True
        return False

    def wait(self, what: str) -> None:
        """Acquire, as the owner, after a failed :meth:`try_acquire`: refuse re-entry, else block."""
        lock = self.lock
        if lock._is_owned():
            raise reentered_error(what)
        me = get_ident()
        if me != _main_thread_ident():
            lock.acquire()
            self.owner = me
            return
        # The main thread, where Python signal handlers run: wait in slices,
        # so that a Ctrl-C during a long wait (another thread's invoke) is
        # handled, as threading.Lock's own waits let it be.
        while True:
            try:
                if lock.acquire(timeout=_POLL_S):
                    break
            except BaseException:  # as in try_acquire
                if lock._is_owned():
                    lock.release()
                raise
        self.owner = me

    def acquire(self, what: str) -> None:
        if not self.try_acquire():
            self.wait(what)

    def release(self) -> None:
        """Clear the owner and release.  Callers spell these two statements out instead (see the module's docstring)."""
        self.owner = None
        self.lock.release()

    @contextmanager
    def held(self, what: str):
        self.acquire(what)
        try:
            yield
        finally:
            self.owner = None  # (release() spelled out: see the module's docstring)
            self.lock.release()
