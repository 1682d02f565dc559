"""Interpreters inherited through ``fork()``: refused where they would hang, with the reason.

A forked child gets a copy of the parent's memory but only the thread that
called ``fork()``.  An interpreter created with ``num_threads > 1`` has
worker threads (XNNPACK's pool, TFLite's CPU backend) that the copy still
counts on: its first ``invoke()`` in the child would wait for them forever.
An interpreter whose call lock was held by another thread at the fork would
wait forever too.  After a fork, in the child, such an interpreter is
marked unusable: every call raises ``ClosedError`` saying why and what to do
(re-create it in the worker, or send it pickled with the ``spawn`` or
``forkserver`` start method).  Its C objects are kept, never freed, in the
child: freeing them would join the threads that are not there.

Single-threaded interpreters that no thread was using keep working in the
child, as they do with tflite_runtime.
"""

from __future__ import annotations

import os
import weakref

_live = weakref.WeakSet()
# Native objects of refused interpreters, kept for the child's lifetime (see above).
_kept: list = []


def track(interpreter) -> None:
    """Called by every Interpreter at creation."""
    _live.add(interpreter)


def _after_fork_in_child() -> None:
    parent = os.getppid()
    for it in list(_live):
        native = getattr(it, "_native", None)
        if native is None:
            continue
        threads = (getattr(it, "_init_args", None) or {}).get("num_threads") or 1
        lock = getattr(it, "_lock", None)
        busy = lock is not None and lock.locked()
        if threads <= 1 and not busy:
            continue
        why = (
            f"it runs {threads} threads, which a fork does not copy"
            if threads > 1
            else "another thread was using it at the fork"
        )
        it._forked(
            native,
            (
                f"this Interpreter was created in process {parent} and reached this process through a "
                f"fork; {why}, so it would hang here. Create the interpreter in the worker (a pool's "
                "initializer), or send it pickled: multiprocessing.get_context('spawn') or 'forkserver' "
                "re-creates it in the worker"
            ),
        )


def _keep(native) -> None:
    _kept.append(native)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
