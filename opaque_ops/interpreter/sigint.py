"""Ctrl-C during a long ``invoke()``: the watcher that turns SIGINT into TfLiteInterpreterCancel."""

from __future__ import annotations

import threading

# An invoke that took longer than this arms Ctrl-C cancellation for the
# next ones (the first invoke after each allocation is always armed).
WATCH_AFTER_S = 0.02


class _SigintWatcher:
    """Turns Ctrl-C during a long ``invoke()`` in the main thread into TfLiteInterpreterCancel.

    CPython runs Python signal handlers only between bytecodes, so a SIGINT
    that arrives while the main thread is inside ``TfLiteInterpreterInvoke``
    waits until the whole model has run.  While armed, the C-level handler's
    wakeup byte goes to a socket that a thread reads; that thread cancels
    the interpreter that is invoking, TFLite stops between nodes, and
    KeyboardInterrupt surfaces as soon as invoke returns.  The wakeup fd is
    borrowed only when nobody else uses it (asyncio does), and given back
    after every invoke.

    The thread and its sockets live for one armed invoke only (the first
    after each allocation, and those slower than ``WATCH_AFTER_S``; starting
    and joining it costs about 0.1 ms).  A thread kept between invokes would
    be alive at every later ``fork()``: Python 3.12+ warns that the process
    is multi-threaded, and the child, which has the socket but not the
    thread, would never see its Ctrl-C.
    """

    def arm(self, native):
        """Start watching; return a token for :meth:`disarm` (None: not armed)."""
        import signal
        import socket

        if threading.current_thread() is not threading.main_thread():
            return None
        r, w = socket.socketpair()
        w.setblocking(False)
        try:
            old = signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)
        except (ValueError, OSError):
            old = None
        if old != -1:
            # Someone (an event loop) owns the wakeup fd, or it cannot be set: leave it.
            if old is not None:
                signal.set_wakeup_fd(old)
            r.close()
            w.close()
            return None
        t = threading.Thread(target=_watch, args=(r, native), name="opaque_ops-sigint", daemon=True)
        try:
            t.start()
        except RuntimeError:  # no new thread now (interpreter shutdown): run unwatched
            signal.set_wakeup_fd(-1)
            r.close()
            w.close()
            return None
        return t, w

    def disarm(self, token) -> None:
        """Stop watching: give the wakeup fd back, and end the thread (it is gone when this returns)."""
        import signal

        if token is None:
            return
        t, w = token
        signal.set_wakeup_fd(-1)
        w.close()  # the reader sees the end of the stream and returns
        t.join()


def _watch(r, native) -> None:
    """The watcher thread: cancel ``native`` on each SIGINT byte, until the write end closes."""
    import signal

    try:
        while True:
            try:
                data = r.recv(64)
            except InterruptedError:  # pragma: no cover - recv is retried by Python (PEP 475)
                continue
            except OSError:  # pragma: no cover
                return
            if not data:
                return
            if signal.SIGINT in data:
                native.cancel()
    finally:
        r.close()


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
