"""The hosted interpreter's inputs and outputs in shared memory, where the parent reads and writes them."""

from __future__ import annotations

import numpy as np

from ..errors import TensorMemoryError
from . import protocol as P


class Placement:
    """Puts the hosted interpreter's input and output tensors in shared segments.

    Each one gets a ``TfLiteInterpreterSetCustomAllocationForTensor`` buffer
    in a segment the parent maps too, so ``set_tensor`` / ``get_tensor`` /
    ``tensor()`` in the parent read and write the very memory TFLite uses:
    no copy and no message per call.

    TFLite checks a custom buffer's size only when it allocates, after every
    kernel's Prepare has computed the shapes.  So :meth:`wrap` goes around
    each native ``allocate`` of the hosted interpreter (its own, and its
    signature runners'): if it failed because a shared buffer is now too
    small (an input was resized), the tensor gets a larger one and allocation
    runs again; after a success, inputs and outputs not yet shared get a
    buffer (and allocation runs again, as TFLite requires after setting one).
    The wrappers are put in place as the native objects are created (by
    :class:`~opaque_ops.isolate.instrumentation.HostedHooks`, for the hosted
    interpreter only), so every path of the Interpreter that allocates goes
    through them.
    Tensors TFLite will not place in a custom buffer (dynamic ones, strings)
    stay in its arena and are reached through messages instead.
    """

    def __init__(self, worker, native):
        self.w = worker
        self.native = native
        self.slots: dict[int, tuple] = {}  # index -> (segment, offset, capacity)
        # Inputs and outputs left in TFLite's arena (dynamic ones): their
        # shapes may change in invoke, which the parent's details must follow.
        self.watch: list = []  # (tensor index, shape when last reported)
        self.moved = _never  # did a shared output leave its buffer during invoke? (see layout)
        self.resized: set = set()  # inputs resized since the last allocation (see Server._stale)
        self.new_segments: list = []
        # Bytes charged to the worker's budget for each segment, by segment
        # id, while a slot still uses it (see _release).
        self.charged: dict[int, int] = {}
        self.changed = True

    def wrap(self, orig):
        """``orig`` (a native allocate) with the shared buffers kept in place around it."""
        sink = self.native.sink

        def allocate() -> int:
            self.resized.clear()
            status = orig()
            if status != 0 and self._grow():
                sink.take()  # "Custom allocation is too small": handled here
                status = orig()
            if status == 0 and self._place():
                status = orig()
            self.changed = True
            return status

        return allocate

    def wrap_resize(self, orig):
        """``orig`` (the native resize_input) noting which input it resized."""

        def resize_input(position, shape) -> int:
            status = orig(position, shape)
            if status == 0:
                self.resized.add(self.native.input_indices()[position])
            return status

        return resize_input

    def wrap_in_arena(self, orig):
        """``orig`` (the native in_arena) with the shared inputs and outputs counted as in the arena.

        The growing-arena guard (``interpreter.arena_guard.refuse_unaffordable``) bounds
        what an allocation after a resize needs from the tensors it is told
        are in TFLite's arena.  The shared ones are not, so they counted
        nothing, yet a resized one gets a new segment here (:meth:`_grow`),
        charged to the same ``memory_limit``.  With XNNPACK, whose partitions
        keep the other tensors out of the arena too, the bound was 0: an
        input resized to 8 GiB reached XNNPACK's reshape, whose failure
        closes the interpreter, where in process (the same tensors in the
        arena) the guard refused it first and the interpreter stayed usable.
        (``arena_guard._arena_shortfall``, which explains a failed allocation, counts
        them so too.)
        """
        slots = self.slots

        def in_arena(index: int, placed: bool = True) -> bool:
            return index in slots or orig(index, placed)

        return in_arena

    def wrap_arena_room(self, orig):
        """``orig`` (the native arena_room) plus the shared buffers already held.

        The guard lets an allocation go ahead when its bound fits the memory
        already held (a smaller shape after a larger one needs nothing new):
        a shared tensor that still fits its buffer keeps it (:meth:`_grow`
        gives new ones only to those that outgrew theirs), so that buffer is
        room as much as the arena is.
        """
        slots = self.slots

        def arena_room(indices) -> int:
            return orig(indices) + sum(capacity for _seg, _off, capacity in slots.values())

        return arena_room

    def _io(self) -> list[int]:
        seen = []
        for i in self.native.input_indices() + self.native.output_indices():
            if i >= 0 and i not in seen:
                seen.append(i)
        return seen

    def _grow(self) -> bool:
        small = [i for i, (_s, _o, cap) in self.slots.items() if self.native.tensor(i).nbytes > cap]
        return bool(small) and self._assign(small, grown=True)

    def _place(self) -> bool:
        fresh = []
        for i in self._io():
            if i in self.slots:
                continue
            t = self.native.tensor(i)
            if t is None or t.nbytes == 0 or t.dtype is None or t.dtype.hasobject or t.is_dynamic():
                continue
            # Left without memory by a successful allocation: TFLite defers
            # it to invoke (a node after a dynamic tensor is prepared there).
            # A buffer now would give the hosted interpreter data that
            # in-process does not exist yet (NotAllocatedError).
            if not t.has_data():
                continue
            # Only tensors whose byte size is their shape's: a model may declare otherwise.
            if t.nbytes != t.dtype.itemsize * int(np.prod(t.shape, dtype=np.int64)):
                continue
            fresh.append(i)
        return bool(fresh) and self._assign(fresh)

    def _assign(self, indices, grown: bool = False) -> bool:
        sizes = {i: P.align(self.native.tensor(i).nbytes) for i in indices}
        total = sum(sizes.values())
        try:
            self.w.budget.charge(total)
        except MemoryError as exc:
            if grown:
                raise self._refusal(indices, total, exc) from None
            return False  # they stay in TFLite's arena, under RLIMIT_DATA
        seg = P.Segment(next(self.w.ids), max(total, 1))
        self.charged[seg.id] = total
        self.new_segments.append(seg)
        off = 0
        done = False
        for i in indices:
            buf = np.frombuffer(seg.map, np.uint8, sizes[i], off)
            if self.native.set_custom_allocation(i, buf) == 0:
                self.slots[i] = (seg, off, sizes[i])
                done = True
            else:
                self.native.sink.take()
                self.slots.pop(i, None)
            off += sizes[i]
        self._release()
        return done

    def _release(self) -> None:
        """Give back to the budget the charge of the segments no slot uses any more.

        A tensor that outgrew its buffer (:meth:`_grow`) gets one in a new
        segment; the old one, once no other tensor lives in it, is dropped
        here (and unmapped by the parent when the next layout leaves it out),
        so it no longer counts against memory_limit.  Kept charged, the old
        buffers of a series of growing resizes added up past the limit.
        """
        used = {seg.id for seg, _off, _cap in self.slots.values()}
        used.update(seg.id for seg in self.new_segments)
        for seg_id in [k for k in self.charged if k not in used]:
            self.w.budget.release(self.charged.pop(seg_id))

    def _refusal(self, indices, total: int, why: MemoryError) -> TensorMemoryError:
        """What to raise when tensors that outgrew their shared buffers cannot have larger ones.

        Such a tensor cannot go back to TFLite's arena (its custom allocation
        stays), so the runtime said only "Custom allocation is too small" (a
        KernelError) for shapes the memory_limit cannot hold.  The guard
        before the allocation counts these tensors (:meth:`wrap_in_arena`),
        but knows an output's new size only from the shape rules (a custom
        op has none); the runtime's Prepare has set it now.  Nothing new is
        allocated: resized back, the tensors fit their buffers again.
        """
        self.native.sink.take()  # (the runtime's "too small", explained here)
        tensors = ", ".join(f"{t.name!r} {list(t.shape)}" for t in map(self.native.tensor, indices))
        return TensorMemoryError(
            f"the inputs and outputs as resized ({tensors}) need new shared buffers of "
            f"{total} bytes ({total / 2**30:.2f} GiB), and {why}. Nothing was allocated and the interpreter "
            "is still usable: resize the input to a smaller shape and call allocate_tensors() again, or "
            "raise the Interpreter's memory_limit=..."
        )

    def layout(self) -> dict:
        """``{tensor index: (segment id, offset, dtype, shape)}`` of the tensors that live in a shared buffer now."""
        from .._native.isolation_helper import moved_probe

        out, placed = {}, []
        for i, (seg, off, cap) in self.slots.items():
            t = self.native.tensor(i)
            try:
                v = t.view() if t is not None else None
            except Exception:  # noqa: BLE001 - a tensor whose bytes do not match its shape: not shared
                v = None
            if v is None or v.nbytes > cap or v.ctypes.data != _address(seg, off):
                continue
            out[i] = (seg.id, off, v.dtype.str, v.shape)
            placed.append((i, v.ctypes.data, v.nbytes))
        # By index, never by TensorRef: an invoke may move the TfLiteTensor
        # structs themselves (TFLite 2.23 grows its tensor table while it
        # prepares a dynamic model's ops), leaving a kept pointer dangling.
        self.watch = [(i, t.shape) for i, t in ((i, self.native.tensor(i)) for i in self._io() if i not in out) if t]
        outputs = set(self.native.output_indices())
        probed = [p for p in placed if p[0] in outputs]
        self.moved = moved_probe(self.native, probed) if probed else _never
        return out

    def reshaped(self) -> bool:
        """True if an input or output outside the shared buffers changed shape (after an invoke)."""
        tensor = self.native.tensor
        return any(getattr(tensor(i), "shape", None) != shape for i, shape in self.watch)

    def take_new_segments(self) -> list:
        segs, self.new_segments = self.new_segments, []
        return segs


class NoMemory:
    """A tensor presented as having no memory (see Server._stale); everything else is the tensor's."""

    def __init__(self, t):
        self._t = t

    def __getattr__(self, name):
        return getattr(self._t, name)

    def has_data(self) -> bool:
        return False

    def read(self):
        return None


def _never() -> bool:
    return False


def _address(seg, off) -> int:
    return np.frombuffer(seg.map, np.uint8, 1, off).ctypes.data
