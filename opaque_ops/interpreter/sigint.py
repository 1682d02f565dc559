"""Ctrl-C during a long ``invoke()``: the watcher that turns SIGINT into TfLiteInterpreterCancel."""

from __future__ import annotations

import _signal
import _thread
import os

# The watcher is a bare _thread with a pipe, not a threading.Thread with a
# socket pair, and it calls _signal, the C module that signal re-exports
# (``from _signal import *``): importing socket, threading and signal (which
# builds its IntEnums at import) cost a process's first invoke, always
# watched, 3 ms.  On POSIX, set_wakeup_fd takes a pipe.

# An invoke that took longer than this arms Ctrl-C cancellation for the
# next ones (the first invoke after each allocation is always armed).
WATCH_AFTER_S = 0.02


class _SigintWatcher:
    """Turns Ctrl-C during a long ``invoke()`` in the main thread into TfLiteInterpreterCancel.

    CPython runs Python signal handlers only between bytecodes, so a SIGINT
    that arrives while the main thread is inside ``TfLiteInterpreterInvoke``
    waits until the whole model has run.  While armed, the C-level handler's
    wakeup byte goes to a pipe that a thread reads; that thread cancels
    the interpreter that is invoking, TFLite stops between nodes, and
    KeyboardInterrupt surfaces as soon as invoke returns.  The wakeup fd is
    borrowed only when nobody else uses it (asyncio does), and given back
    after every invoke (:func:`invoke_watched`).

    The thread and its pipe live for one armed invoke only (the first
    after each allocation, and those slower than ``WATCH_AFTER_S``; starting
    and joining it costs about 0.1 ms).  A thread kept between invokes would
    be alive at every later ``fork()``: Python 3.12+ warns that the process
    is multi-threaded, and the child, which has the pipe but not the
    thread, would never see its Ctrl-C.
    """

    def arm(self, native):
        """Start watching; return a token for the end of :func:`invoke_watched` (None: not armed).

        A KeyboardInterrupt may rise right after any call into C here (Python
        runs signal handlers there): what was set up so far is then undone
        before it propagates, the thread included, which would otherwise
        live on with the interpreter and keep the wakeup fd, so that no later
        invoke could be watched.  (Right after ``os.pipe()`` returns, its two
        descriptors are lost with its answer: the one leak left.)

        Nothing is watched unless Ctrl-C means KeyboardInterrupt here
        (Python's default SIGINT handler): an application that set its own
        handler (an event loop's, one that ignores SIGINT) decides what
        Ctrl-C does, and its invokes run to their end.  Where the fast calls
        module is loaded, its Ctrl-C guard (``c/src/sigint_guard.c``) does
        the watching instead, for every invoke of the main thread, not only
        the armed ones: arming puts its handler in place (again, if an
        application's ``signal.signal`` replaced it since) and starts no
        thread.  The watcher serves where the guard steps aside (another C
        handler took SIGINT: faulthandler's, say).
        """
        watch = native.sigint_watch
        if not means_keyboard_interrupt():
            if watch is not None:
                watch(False)  # (the main thread has decided: see decide())
            return None
        if watch is not None and watch(True):
            return None
        r, w = os.pipe()
        phase = "pipe"  # how far it got, for _undo
        ended = None
        try:
            os.set_blocking(w, False)  # set_wakeup_fd requires it
            phase = "wakeup"  # (set before the call: whether it ran is lost with its answer)
            try:
                # ValueError outside the main thread, where no Python signal handler runs.
                old = _signal.set_wakeup_fd(w, warn_on_full_buffer=False)
            except (ValueError, OSError):
                old = None
            if old != -1:
                # Someone (an event loop) owns the wakeup fd, or it cannot be set: leave it.
                phase = "pipe"
                if old is not None:
                    _signal.set_wakeup_fd(old)
                raise _GiveUp
            # Held until the thread ends: invoke_watched waits on it, as Thread.join would.
            ended = _thread.allocate_lock()
            ended.acquire()
            phase = "thread"  # (as above: from the call on, the thread runs, and owns r)
            try:
                _thread.start_new_thread(_watch, (r, native, ended))
            except RuntimeError:  # no new thread now (interpreter shutdown): run unwatched
                phase = "wakeup"
                raise _GiveUp from None
            return ended, w
        except _GiveUp:
            _undo(phase, r, w, ended)
            return None
        except BaseException:
            _undo(phase, r, w, ended)
            raise


def means_keyboard_interrupt() -> bool:
    """True if SIGINT has Python's default handler, which raises KeyboardInterrupt."""
    return _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler


def decide(watch) -> None:
    """What the fast calls module runs at the main thread's first invoke, until one decided.

    ``watch`` is the module's ``sigint_watch``: the guard goes in place, or
    steps aside, as :meth:`_SigintWatcher.arm` would decide.  An interpreter
    whose first invokes (the armed ones) ran on another thread gets its
    main-thread invokes guarded this way.
    """
    watch(means_keyboard_interrupt())


class _GiveUp(Exception):
    """arm() leaves Ctrl-C unwatched: undo, and run the invoke without it."""


def _undo(phase: str, r: int, w: int, ended) -> None:
    """Undo an arm() that stopped in ``phase``."""
    if phase != "pipe":
        # Ours, or not set yet (the exception came before the call): then it
        # is the owner's, and stays.
        current = _signal.set_wakeup_fd(-1)
        if current != w:
            _signal.set_wakeup_fd(current)
    os.close(w)
    if phase == "thread":
        ended.acquire()  # the thread saw the end of the stream, closed r, and ended
    else:
        os.close(r)


def _watch(r: int, native, ended) -> None:
    """The watcher thread: cancel ``native`` on each SIGINT byte, until the write end closes."""
    try:
        while True:
            try:
                data = os.read(r, 64)
            except InterruptedError:  # pragma: no cover - read is retried by Python (PEP 475)
                continue
            except OSError:  # pragma: no cover
                return
            if not data:
                return
            if _signal.SIGINT in data:
                native.cancel()
    finally:
        os.close(r)
        ended.release()


sigint = _SigintWatcher()


def invoke_watched(native, invoke):
    """Run ``invoke()`` (a C call on ``native``) with Ctrl-C cancellation armed.

    Returns ``(status, seconds)``; the caller re-arms for its next invoke
    while they stay slower than ``WATCH_AFTER_S``.
    """
    import time

    t0 = time.perf_counter()
    token = sigint.arm(native)
    try:
        status = invoke()
    finally:
        # The watcher's end, spelled out here: a Python function's entry is a point where a
        # signal handler runs, before it has done anything.
        if token is not None:
            try:
                _signal.set_wakeup_fd(-1)
            finally:
                try:
                    os.close(token[1])
                finally:
                    token[0].acquire()
    return status, time.perf_counter() - t0
