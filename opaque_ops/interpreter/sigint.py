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
    wakeup byte goes to a socket that a daemon thread reads; that thread
    cancels the interpreter that is invoking, TFLite stops between nodes,
    and KeyboardInterrupt surfaces as soon as invoke returns.  The wakeup fd
    is borrowed only when nobody else uses it (asyncio does), and given back
    after every invoke.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._current = None
        self._sock_w = None

    def _start(self) -> None:
        import socket

        r, w = socket.socketpair()
        w.setblocking(False)
        self._sock_w = w
        t = threading.Thread(target=self._loop, args=(r,), name="opaque_ops-sigint", daemon=True)
        t.start()

    def _loop(self, r) -> None:
        import signal

        while True:
            try:
                data = r.recv(64)
            except OSError:  # pragma: no cover - socket closed at shutdown
                return
            if not data:  # pragma: no cover
                return
            if signal.SIGINT in data:
                native = self._current
                if native is not None:
                    native.cancel()

    def arm(self, native):
        """Start watching; return a token for :meth:`disarm` (None: not armed)."""
        import signal

        if threading.current_thread() is not threading.main_thread():
            return None
        with self._lock:
            if self._sock_w is None:
                self._start()
        try:
            old = signal.set_wakeup_fd(self._sock_w.fileno(), warn_on_full_buffer=False)
        except (ValueError, OSError):
            return None
        if old != -1:
            # Someone (an event loop) owns the wakeup fd: leave it to them.
            signal.set_wakeup_fd(old)
            return None
        self._current = native
        return native

    def disarm(self, token) -> None:
        import signal

        if token is None:
            return
        self._current = None
        signal.set_wakeup_fd(-1)


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
