"""Freeing a C object that interpreters point to, in an order TFLite survives.

Operators of Python ops and delegates from plugins are referenced by raw
pointer from every interpreter they were given to, and TFLite calls into them
while it deletes such an interpreter (a node's ``free``, a delegate kernel's
teardown).  The garbage collector finalizes the objects of a reference cycle
in any order, so "the Python wrapper died" does not mean "no interpreter
uses it".  :class:`Shared` frees the C object only once both have happened:
its owner was abandoned, and every interpreter that held it was deleted.
"""

from __future__ import annotations

import _thread  # threading's locks, without importing threading (CONTRIBUTING.md, "The start-up path")

from .._records import renew_after_fork

# Reentrant: a garbage collection can run finalizers (which abandon other
# objects) on this thread while it holds the lock.
_lock = _thread.RLock()


# A fork while another thread held _lock left the child's copy held by a
# thread the child does not have: the child's next interpreter with a
# Python op or a plugin delegate (hold()), or the closing of one it
# inherited (release()), waited forever.  Re-created, not taken around
# the fork: finalizers take it, and a lock the fork holds while it waits
# for others (the import lock) must be one no finalizer takes (see
# python_operator._delete).  A count the other thread was changing is at
# worst one too high in the child (an interpreter it was adding to is not
# there), which keeps the object alive for the child's lifetime: never
# freed early, never twice.
# tests/native/test_lifetime.py forks inside Shared.hold.
renew_after_fork(globals(), _lock=_thread.RLock)


class Shared:
    """Use count of one C object; ``free()`` runs once, when it is abandoned and unused."""

    __slots__ = ("users", "abandoned", "_free")

    def __init__(self, free):
        self.users = 0  # interpreters (not yet deleted) that point at it
        self.abandoned = False  # its Python owner is gone
        self._free = free

    def hold(self) -> None:
        """An interpreter now points at the object (it was added to its options)."""
        with _lock:
            self.users += 1

    def release(self) -> None:
        """An interpreter that pointed at the object has been deleted."""
        with _lock:
            self.users -= 1
        self._maybe_free()

    def abandon(self) -> None:
        """The Python owner is gone; free as soon as no interpreter uses it."""
        self.abandoned = True
        self._maybe_free()

    def _maybe_free(self) -> None:
        with _lock:
            if not self.abandoned or self.users > 0 or self._free is None:
                return
            free, self._free = self._free, None
        free()
