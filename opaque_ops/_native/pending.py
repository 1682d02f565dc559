"""Python exceptions raised inside C callbacks, parked until the C call returns.

A Python op, or a signal handler, runs inside a TFLite call made by this
thread.  An exception cannot cross the C frames, so it is parked here and
re-raised by the Interpreter once the C call has returned.
"""

from __future__ import annotations

import _thread  # threading's locks, without importing threading (CONTRIBUTING.md, "The start-up path")

_pending = _thread._local()


def stash_exception(exc: BaseException) -> None:
    """Park ``exc`` for the current thread (the first one wins until popped)."""
    if getattr(_pending, "exc", None) is None:
        # The frames' locals include numpy views of tensor memory, which the
        # interpreter may free before anyone looks at the traceback; drop the
        # locals and keep the lines.
        _clear_traceback(exc.__traceback__)
        _pending.exc = exc


def _clear_traceback(tb) -> None:
    # What traceback.clear_frames does; spelled out because importing
    # traceback cost every process's start-up half a millisecond for this.
    while tb is not None:
        try:
            tb.tb_frame.clear()
        except RuntimeError:  # a frame still running (this callback's caller)
            pass
        tb = tb.tb_next


def clear_frames(exc: BaseException, outer: BaseException | None) -> None:
    """Drop the local variables of the finished frames of ``exc``'s traceback and of those it chains to.

    The chain (``__cause__``, else ``__context__``) is followed up to
    ``outer``, the exception being handled when the callback began (if
    any): that one, and what it chains to, is the caller's, raised before
    the callback, and keeps its frames.  The lines stay.
    """
    seen = set()
    while exc is not None and exc is not outer and id(exc) not in seen:
        seen.add(id(exc))
        _clear_traceback(exc.__traceback__)
        exc = exc.__cause__ or exc.__context__


def pop_pending_exception() -> BaseException | None:
    """Return and clear the exception a callback parked on this thread, if any."""
    exc = getattr(_pending, "exc", None)
    _pending.exc = None
    return exc
