"""The isolated worker's hooks into the native interpreters it creates, by composition.

The worker passes one of these to each :class:`~opaque_ops.interpreter.core.Interpreter`
it creates (``Interpreter._with_hooks``), which hands it to its
:class:`~opaque_ops._native.NativeInterpreter`; the hooks wrap that
interpreter's (and its signature runners') calls, and no other object's:

- :class:`StageHooks`: every call records its stage (create / allocate /
  invoke) in the crash record, so a crash report says where it happened
  (``run_op``'s interpreters get these);
- :class:`HostedHooks`: the hosted interpreter's stages, plus its inputs and
  outputs in shared buffers (:class:`~.placement.Placement` around every
  ``allocate`` and ``resize_input``).  Wrapping at creation means the
  Interpreter holds the wrapped functions from the start, whichever of its
  paths allocates.
"""

from __future__ import annotations

from .._native import NativeHooks
from . import protocol as P
from .placement import Placement

# The marker for a wrapped attribute that was the class's method (release deletes the wrapper).
_CLASS_ATTRIBUTE = object()


class StageHooks(NativeHooks):
    """Record each call's stage in the crash record (see :mod:`opaque_ops.isolate.crash`).

    Every wrapper is installed through :meth:`_install` and removed by
    :meth:`release`.  A wrapper closes over the bound method it wraps, so a
    native object holding it refers to itself: left in place, a closed
    interpreter's native objects (and TFLite's threads with them) lived until
    the next garbage collection, and a worker that had run 300 interpreters
    held 20 to 64 threads and 1.4 to 1.7 GB of address space where an
    in-process loop holds 3 threads.
    """

    def __init__(self, server):
        self.server = server
        self._installed: list = []

    def _install(self, obj, name: str, wrapper) -> None:
        own = name in vars(obj)
        self._installed.append((obj, name, getattr(obj, name) if own else _CLASS_ATTRIBUTE))
        setattr(obj, name, wrapper)

    def release(self) -> None:
        """Take every wrapper off again, once the interpreter is closed (or failed to be created)."""
        installed, self._installed = self._installed, []
        for obj, name, original in reversed(installed):
            if original is _CLASS_ATTRIBUTE:
                vars(obj).pop(name, None)
            else:
                setattr(obj, name, original)

    def creating(self) -> None:
        self.server.stage("create")

    def created(self, native) -> None:
        self._install(native, "invoke", self.staged_invoke(native.invoke))
        self._install(native, "allocate", self.staged_allocate(native.allocate))

    def runner_created(self, runner) -> None:
        self._install(runner, "allocate", self.staged_allocate(runner.allocate))
        self._install(runner, "invoke", self.staged_invoke(runner.invoke))

    def staged_allocate(self, alloc):
        """``alloc`` marked as the allocate stage; the stage before it is put back afterwards
        (invoke() may allocate first)."""
        words = self.server.words
        stage = self.server.stage

        def allocate() -> int:
            before = words[P.STAGE // 4]
            stage("allocate")
            try:
                return alloc()
            finally:
                # (Also when it raises: the placement's TensorMemoryError.)
                words[P.STAGE // 4] = before

        return allocate

    def staged_invoke(self, inner):
        stage = self.server.stage

        def invoke() -> int:
            stage("invoke")
            return inner()

        return invoke


class HostedHooks(StageHooks):
    """The hosted interpreter: stages, and its inputs and outputs in shared buffers.

    Attributes
    ----------
    placement : Placement or None
        Set once the native interpreter exists.
    """

    def __init__(self, server):
        super().__init__(server)
        self.placement: Placement | None = None

    def created(self, native) -> None:
        if not native.ok:
            return  # the Interpreter raises; nothing to place
        # The hosted interpreter's invoke is marked by Server.fast_invoke itself
        # (no wrapper on the hot path).
        self.placement = Placement(self.server, native)
        self._install(native, "allocate", self.staged_allocate(self.placement.wrap(native.allocate)))
        self._install(native, "resize_input", self.placement.wrap_resize(native.resize_input))
        # What the growing-arena guard sees: the shared tensors count (see Placement.wrap_in_arena).
        self._install(native, "in_arena", self.placement.wrap_in_arena(native.in_arena))
        self._install(native, "arena_room", self.placement.wrap_arena_room(native.arena_room))

    def runner_created(self, runner) -> None:
        allocate = runner.allocate
        # Only a runner of subgraph 0 plans the tensors the placement shares
        # (subgraph 0's inputs and outputs).  Around another subgraph's
        # allocation it would give them buffers while subgraph 0 was never
        # allocated, so the hosted interpreter would read and write them as
        # if it had been (in-process they have no memory: NotAllocatedError),
        # and it would forget which inputs were resized since subgraph 0's
        # last allocation.  (None: a subgraph the model does not record; as
        # before, wrapped.)
        if runner.subgraph in (0, None):
            allocate = self.placement.wrap(allocate)
        self._install(runner, "allocate", self.staged_allocate(allocate))
        self._install(runner, "invoke", self.staged_invoke(runner.invoke))

    def release(self) -> None:
        super().release()
        self.placement = None  # (it holds the native interpreter too)
