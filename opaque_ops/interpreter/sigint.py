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
    after every invoke.

    The thread and its pipe live for one armed invoke only (the first
    after each allocation, and those slower than ``WATCH_AFTER_S``; starting
    and joining it costs about 0.1 ms).  A thread kept between invokes would
    be alive at every later ``fork()``: Python 3.12+ warns that the process
    is multi-threaded, and the child, which has the pipe but not the
    thread, would never see its Ctrl-C.
    """

    def arm(self, native):
        """Start watching; return a token for :meth:`disarm` (None: not armed)."""
        r, w = os.pipe()
        os.set_blocking(w, False)  # set_wakeup_fd requires it
        try:
            # ValueError outside the main thread, where no Python signal handler runs.
            old = _signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except (ValueError, OSError):
            old = None
        if old != -1:
            # Someone (an event loop) owns the wakeup fd, or it cannot be set: leave it.
            if old is not None:
                _signal.set_wakeup_fd(old)
            os.close(r)
            os.close(w)
            return None
        # Held until the thread ends: disarm() waits on it, as Thread.join would.
        ended = _thread.allocate_lock()
        ended.acquire()
        try:
            _thread.start_new_thread(_watch, (r, native, ended))
        except RuntimeError:  # no new thread now (interpreter shutdown): run unwatched
            _signal.set_wakeup_fd(-1)
            os.close(r)
            os.close(w)
            return None
        return ended, w

    def disarm(self, token) -> None:
        """Stop watching: give the wakeup fd back, and end the thread (it is gone when this returns)."""
        if token is None:
            return
        ended, w = token
        _signal.set_wakeup_fd(-1)
        os.close(w)  # the reader sees the end of the stream and returns
        ended.acquire()


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
        sigint.disarm(token)
    return status, time.perf_counter() - t0
