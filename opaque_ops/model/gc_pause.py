"""The cyclic garbage collector paused while the model layer builds its many small objects.

Reading and checking a model makes tens of thousands of tuples, dicts and
records, none of them in a reference cycle: each 700 allocations the
collector would walk the young objects for nothing.  On MediaPipe's selfie
model that was about a tenth of a first creation (1.2 of 12 ms of CPU).

The pause is shared: sections may overlap (threads creating interpreters at
once, a check inside a read), and the collector comes back when the last one
ends, and only if it was on when the first one began: a program that turned
it off keeps it off.  A fork while another thread is inside a section would
leave the child with no such thread to end it; the child therefore starts
with no section open and the collector as it was before the first one.
"""

from __future__ import annotations

import _thread  # threading's locks, without importing threading (CONTRIBUTING.md, "The start-up path")
import contextlib
import gc
import os

_lock = _thread.allocate_lock()
_open = 0  # sections running now
_resume = False  # whether the collector was on when the first of them began


@contextlib.contextmanager
def gc_paused():
    """Run the ``with`` body with the cyclic garbage collector off (see the module's notes)."""
    global _open, _resume
    # A KeyboardInterrupt may rise right after any call into C here (Python
    # runs signal handlers there): after gc.disable(), or as the lock's with
    # ends.  Everything is inside the try, and the section counts from the
    # increment on, so the collector is never left off by an interrupted
    # section (tests/model/test_gc_pause.py interrupts each point).
    counted = False
    try:
        with _lock:
            _open += 1
            counted = True
            if _open == 1:
                _resume = False  # until known: an interrupted isenabled() must not turn on a collector left off
                _resume = gc.isenabled()
                gc.disable()
        yield
    finally:
        if counted:
            with _lock:
                _open -= 1
                if _open == 0 and _resume:
                    gc.enable()


def _before_fork() -> None:
    _lock.acquire()


def _after_fork_in_parent() -> None:
    _lock.release()


def _after_fork_in_child() -> None:
    global _lock, _open
    # Only the forking thread exists here, and it holds _lock (taken before
    # the fork): sections of other threads will never end.
    if _open and _resume:
        gc.enable()
    _open = 0
    _lock = _thread.allocate_lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)
