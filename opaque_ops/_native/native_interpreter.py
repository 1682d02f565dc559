"""The TFLite model, interpreter, signature runners and tensors, as small wrappers.

Nothing here raises for a TFLite status: calls return the status, and
``opaque_ops.interpreter`` decides what it means.  Each wrapper keeps alive
what its C object points into (documented where the reference is taken) and
frees in the order TFLite needs: interpreter, then options, then model.
"""

from __future__ import annotations

import functools
import math

import numpy as _np

from ..errors import ModelError
from . import fast_calls as _fast_calls
from .ffi import dlopen, ffi
from .pending import pop_pending_exception, stash_exception
from .runtime_loader import Runtime, load_runtime

# kTfLiteCustomAllocationFlagsSkipAlignCheck is never passed: the buffers
# handed to set_custom_allocation are aligned to TFLite's kDefaultTensorAlignment.
TENSOR_ALIGNMENT = 64

# TfLiteType -> numpy dtype.  Types numpy has no match for map to None.
TFLITE_TO_NUMPY = {
    1: _np.dtype(_np.float32),
    2: _np.dtype(_np.int32),
    3: _np.dtype(_np.uint8),
    4: _np.dtype(_np.int64),
    5: _np.dtype(object),
    6: _np.dtype(_np.bool_),
    7: _np.dtype(_np.int16),
    8: _np.dtype(_np.complex64),
    9: _np.dtype(_np.int8),
    10: _np.dtype(_np.float16),
    11: _np.dtype(_np.float64),
    12: _np.dtype(_np.complex128),
    13: _np.dtype(_np.uint64),
    16: _np.dtype(_np.uint32),
    17: _np.dtype(_np.uint16),
    # kTfLiteResource / kTfLiteVariant: handles, reported as object like the
    # references do; never viewed or written as numpy data.
    14: _np.dtype(object),
    15: _np.dtype(object),
}

# TfLiteAllocationType values (c_api_types.h).
ALLOC_MMAP_RO = 1  # a constant, read in place from the model bytes
ALLOC_DYNAMIC = 4  # (re)allocated by its kernel during invoke
ALLOC_PERSISTENT_RO = 5  # computed once in Prepare, read-only afterwards
_READ_ONLY = (ALLOC_MMAP_RO, ALLOC_PERSISTENT_RO)
# TfLiteAllocationStrategy (None, MMap, Arena, Malloc) -> TfLiteAllocationType
# (MemNone, MmapRo, ArenaRw, Dynamic), per TfLiteTensorGetAllocationStrategy in common.cc.
_STRATEGY_TO_TYPE = {1: 0, 2: ALLOC_MMAP_RO, 3: 2, 4: ALLOC_DYNAMIC}

STATUS_NAMES = {
    0: "ok",
    1: "error",
    2: "delegate error",
    3: "application error",
    7: "unresolved ops",
    8: "cancelled",
    9: "output shape not known",
}


class TensorRef:
    """A tensor of a live interpreter: metadata and data access, no raw pointer outside.

    Valid until the interpreter's next allocation or invoke: either may move
    the ``TfLiteTensor`` structs themselves (TFLite 2.23 grows its tensor
    table while it prepares a dynamic model's ops), so a holder across them
    keeps the tensor's index and asks :meth:`NativeInterpreter.tensor` again.
    """

    __slots__ = ("_t", "_owner", "_lib")

    def __init__(self, ptr, owner):
        self._t = ptr
        # Keep-alive: the interpreter (or runner) whose memory the tensor lives in.
        self._owner = owner
        self._lib = owner.rt.lib

    @property
    def name(self) -> str:
        p = self._lib.TfLiteTensorName(self._t)
        return ffi.string(p).decode() if p != ffi.NULL else ""

    @property
    def type(self) -> int:
        return int(self._lib.TfLiteTensorType(self._t))

    @property
    def dtype(self):
        return TFLITE_TO_NUMPY.get(self.type)

    @property
    def shape(self) -> tuple[int, ...]:
        lib = self._lib
        n = lib.TfLiteTensorNumDims(self._t)
        return tuple(int(lib.TfLiteTensorDim(self._t, i)) for i in range(max(n, 0)))

    @property
    def nbytes(self) -> int:
        return int(self._lib.TfLiteTensorByteSize(self._t))

    @property
    def quantization(self) -> tuple[float, int]:
        q = self._lib.TfLiteTensorQuantizationParams(self._t)
        return float(q.scale), int(q.zero_point)

    @property
    def allocation_type(self) -> int:
        """The ``TfLiteAllocationType`` (approximated from the allocation strategy
        on builds without the opaque API, where ArenaRwPersistent reads as ArenaRw
        and PersistentRo/Custom as -1)."""
        rt = self._owner.rt
        if rt.has("TfLiteOpaqueTensorGetAllocationType"):
            # A TfLiteTensor* is what the opaque API's TfLiteOpaqueTensor* points to.
            return int(self._lib.TfLiteOpaqueTensorGetAllocationType(ffi.cast("TfLiteOpaqueTensor*", self._t)))
        return _STRATEGY_TO_TYPE.get(int(self._lib.TfLiteTensorGetAllocationStrategy(self._t)), -1)

    def is_dynamic(self) -> bool:
        """True if TFLite may move or resize the tensor during invoke (kTfLiteDynamic)."""
        # kTfLiteAllocationStrategyMalloc is reported for kTfLiteDynamic only
        # (common.cc).  Not the opaque API's GetAllocationType: builds without
        # the opaque API (pymicro-wakeword's armv7l) export this one.
        return int(self._lib.TfLiteTensorGetAllocationStrategy(self._t)) == 4

    def is_read_only(self) -> bool:
        """True for constants: their memory is the model's bytes (or fixed after Prepare)."""
        return self.allocation_type in _READ_ONLY

    def has_data(self) -> bool:
        return self._lib.TfLiteTensorData(self._t) != ffi.NULL

    def address(self) -> int:
        """Where the tensor's data is now (0 for none): tells whether it moved."""
        return int(ffi.cast("uintptr_t", self._lib.TfLiteTensorData(self._t)))

    def placement(self):
        """Where the tensor is and what it holds, as an opaque token: equal tokens mean it has not moved.

        The data pointer, the byte size and every dimension, read with as few
        C calls as there are dimensions plus three: the set/get fast path asks
        this after each invoke that may move memory, so its cost is per call.
        """
        lib, t = self._lib, self._t
        n = lib.TfLiteTensorNumDims(t)
        return (lib.TfLiteTensorData(t), lib.TfLiteTensorByteSize(t), *[lib.TfLiteTensorDim(t, i) for i in range(n)])

    def view(self):
        """A numpy array over the tensor's own memory (valid until the next allocate/resize).

        Read-only for constants: they live in the caller's model bytes, which
        every interpreter built from the same bytes reads.
        """
        dtype = self.dtype
        data = self._lib.TfLiteTensorData(self._t)
        if dtype is None or dtype == object:
            return None
        if data == ffi.NULL:
            shape = self.shape
            # A tensor with no elements has no buffer; it is still a valid (empty) array.
            return _np.empty(shape, dtype) if 0 in shape else None
        shape, nbytes = self.shape, self.nbytes
        want = dtype.itemsize * math.prod(shape)  # (exact: no int64 wrap-around on a hostile shape)
        if nbytes != want:
            # A sparse constant listed as a graph output (its buffer is the
            # compressed data), or a kernel that sized its output wrongly:
            # the bytes are not an array of this shape.
            raise ModelError(
                f"tensor {self.name!r} has shape {list(shape)} of {dtype} ({want} bytes), but the runtime "
                f"holds {nbytes} bytes for it; the model's tensor does not hold what its shape says"
            )
        arr = _np.frombuffer(ffi.buffer(data, nbytes), dtype=dtype).reshape(shape)
        if self.is_read_only():
            arr.flags.writeable = False
        return arr

    def read(self):
        """A copy of the tensor's contents."""
        v = self.view()
        return None if v is None else v.copy()

    def write(self, array) -> int:
        """Copy a C-contiguous array of exactly ``nbytes`` bytes in; return the status."""
        return int(self._lib.TfLiteTensorCopyFromBuffer(self._t, ffi.from_buffer(array), array.nbytes))

    def raw(self):
        """A copy of the tensor's buffer as bytes, or None while it has none."""
        data = self._lib.TfLiteTensorData(self._t)
        if data == ffi.NULL:
            return None
        return ffi.buffer(data, self.nbytes)[:]

    def string_count(self):
        """The string count at the head of a string tensor's buffer, or None while it has no such head.

        (string_util.h's layout starts with an int32 count; a buffer shorter
        than that is one nothing wrote strings into.)
        """
        data = self._lib.TfLiteTensorData(self._t)
        if data == ffi.NULL or self.nbytes < 4:
            return None
        return int(ffi.cast("int32_t *", data)[0])

    def can_resize(self) -> bool:
        """True if the runtime exports ``TfLiteTensorRealloc`` (what :meth:`write_resized` needs)."""
        return self._owner.rt.has("TfLiteTensorRealloc")

    def write_resized(self, data: bytes) -> int:
        """Make a kTfLiteDynamic tensor's buffer ``len(data)`` bytes and copy ``data`` in; return the status.

        For a string tensor, whose buffer's size depends on its strings.  The
        caller checks :meth:`is_dynamic` first: ``TfLiteTensorRealloc`` leaves
        any other buffer as it is and still returns kTfLiteOk, so the size is
        checked again before the copy (which also checks it).
        """
        lib = self._lib
        if lib.TfLiteTensorRealloc(len(data), self._t) != 0 or lib.TfLiteTensorByteSize(self._t) != len(data):
            return 1
        return int(lib.TfLiteTensorCopyFromBuffer(self._t, ffi.from_buffer(data), len(data)))


def _c_name(p, what: str, i: int) -> str:
    """A name the C API returned; NULL when a signature does not name each of its
    subgraph's inputs/outputs (check_model refuses those; this is the backstop)."""
    if p == ffi.NULL:
        raise ModelError(
            f"the signature has no name for its {what} {i}; a signature must name each {what} of its subgraph"
        )
    return ffi.string(p).decode()


class ErrorSink(list):
    """Messages the runtime reported through one interpreter's error reporter.

    ``rename``, when set, rewrites each message (the interpreter layer passes
    one that puts the model's op names back where XNNPACK's aliases stood,
    see :mod:`opaque_ops.interpreter.xnnpack`): policy comes in as an
    argument, this package imports none.
    """

    rename = None

    def take(self) -> list[str]:
        out = [m.strip() for m in self if m.strip()]
        self.clear()
        if self.rename is not None:
            out = [self.rename(m) for m in out]
        return out


class NativeModel:
    """``TfLiteModel`` plus the bytes it points into (TFLite does not copy them)."""

    def __init__(self, data: bytes):
        rt = load_runtime()
        self._lib = rt.lib
        self.sink = ErrorSink()
        self._handle = ffi.new_handle(self.sink)
        # Keep-alive: the model reads these bytes for as long as it exists.
        self._data = ffi.from_buffer(data)
        self._bytes = data
        self._ptr = rt.lib.TfLiteModelCreateWithErrorReporter(self._data, len(data), rt._reporter, self._handle)
        self.ok = self._ptr != ffi.NULL

    def close(self):
        if getattr(self, "_ptr", None) not in (None, ffi.NULL):
            self._lib.TfLiteModelDelete(self._ptr)
        self._ptr = None

    __del__ = close


def _xnnpack_delegate(rt: Runtime, num_threads):
    """Create an XNNPACK delegate, or return None if the runtime has none.

    The C API's ``TfLiteInterpreterCreate`` applies no default delegate (its
    op resolver is ``BuiltinOpResolverWithoutDefaultDelegates``), so XNNPACK
    runs only when added explicitly with ``TfLiteInterpreterOptionsAddDelegate``.
    """
    if not (rt.has("TfLiteXNNPackDelegateCreate") and rt.has("TfLiteXNNPackDelegateDelete")):
        return None
    if num_threads is not None and int(num_threads) > 1 and rt.has("TfLiteXNNPackDelegateOptionsDefault"):
        opts = ffi.new("oo_xnnpack_options*", rt.lib.TfLiteXNNPackDelegateOptionsDefault())
        opts.num_threads = int(num_threads)
        ptr = rt.lib.TfLiteXNNPackDelegateCreate(opts)
    else:
        ptr = rt.lib.TfLiteXNNPackDelegateCreate(ffi.NULL)  # library defaults: single-threaded
    return None if ptr == ffi.NULL else ptr


# A TfLiteTelemetryProfilerStruct* given to every interpreter created in this
# process, or None.  Only the isolated worker sets it (_native.isolate), to
# know which node was running when the process crashed.
PROCESS_PROFILER = None


def _closed_call(*_args):
    raise RuntimeError("the native interpreter is closed")


def _guarded_partial(invoke, interpreter: int, cancel: int, function, argument):
    """``function(argument)`` as a C-level partial through the Ctrl-C guard's ``invoke`` (see NativeInterpreter)."""
    return functools.partial(invoke, _fast_calls.address(function), _fast_calls.address(argument), interpreter, cancel)


class NativeHooks:
    """What a caller may do around one native interpreter's calls (the isolated worker's instrumentation).

    Passed to :class:`NativeInterpreter` at construction, it sees that
    interpreter and its signature runners only: it may replace their
    ``allocate`` / ``resize_input`` / ``invoke`` attributes with wrappers,
    and the interpreter's ``in_arena`` / ``arena_room`` (what the growing-arena
    guard counts; every caller reads them from the instance).  The default
    does nothing.
    """

    def creating(self) -> None:
        """Before ``TfLiteInterpreterCreate`` runs."""

    def created(self, native: NativeInterpreter) -> None:
        """After it ran (``native.ok`` tells whether it succeeded)."""

    def runner_created(self, runner: NativeSignatureRunner) -> None:
        """A signature runner of the interpreter was created."""


@functools.cache
def _libc():
    """The C library of this process (``malloc``, ``free``), loaded on first use."""
    return dlopen(None)


def _arena_address(lib, t) -> int | None:
    """A ``TfLiteTensor*``'s data address (0: no memory), or None when it is NULL or not an arena tensor."""
    if not t or lib.TfLiteTensorGetAllocationStrategy(t) != 3:  # 3: kTfLiteAllocationStrategyArena
        return None
    return int(ffi.cast("uintptr_t", lib.TfLiteTensorData(t)))


def mapping_room(address: int) -> int:
    """The size of the memory mapping in ``/proc/self/maps`` that holds ``address``.

    0 for address 0; ``2**64`` when the maps cannot be read or no mapping
    holds it (the callers take it as room enough: see
    :meth:`NativeInterpreter.arena_room`).
    """
    if not address:
        return 0
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                low, _, high = line.partition(" ")[0].partition("-")
                if int(low, 16) <= address < int(high, 16):
                    return int(high, 16) - int(low, 16)
    except (OSError, ValueError):
        pass
    return 1 << 64


class NativeInterpreter:
    """``TfLiteInterpreter`` with its options, model and operators, freed in order.

    Deleting goes interpreter -> options -> model: the interpreter reads the
    model and calls the operators' code until it is gone.
    """

    def __init__(
        self,
        model: NativeModel,
        operators,
        num_threads=None,
        cancellable=True,
        use_xnnpack=False,
        delegates=(),
        aliases=None,
        rename_messages=None,
        hooks: NativeHooks | None = None,
        guard=None,
    ):
        """Create the interpreter; ``ok`` tells whether TFLite did.

        ``delegates`` are user delegates (applied before XNNPACK).
        ``aliases`` maps op names to a second name each matching operator is
        also registered under (the model op codes were renamed to it, see
        :mod:`opaque_ops.interpreter.xnnpack`); ``rename_messages(message)``
        turns TFLite's messages back to the model's op names.  ``hooks``
        (a :class:`NativeHooks`) sees this interpreter and its runners.
        ``guard``: the fast calls module, whose ``invoke`` then runs this
        interpreter's and its runners' invokes, so that Ctrl-C on the main
        thread cancels them (``c/src/sigint_guard.c``); None: cffi calls.
        """
        self.hooks = hooks
        if hooks is not None:
            hooks.creating()
        rt = load_runtime()
        self.rt = rt
        self._xnnpack = None
        self._custom_buffers: dict = {}
        # Bumped whenever a tensor's memory is redirected (set_custom_allocation),
        # so that an Interpreter knows its allocation is no longer current.
        self.layout_version = 0
        self.sink = ErrorSink()
        self._handle = ffi.new_handle(self.sink)
        # Keep-alive: model bytes and the operators (and through them, the
        # kernel libraries and Python callbacks) must outlive the interpreter.
        self._model = model
        self._operators = list(operators)
        # Keep-alive: TFLite keeps the delegate pointers (they are applied at
        # creation and called on every allocate and invoke).
        self._delegates = list(delegates)
        self._interp = None
        self._options = rt.lib.TfLiteInterpreterOptionsCreate()
        rt.lib.TfLiteInterpreterOptionsSetErrorReporter(self._options, rt._reporter, self._handle)
        if num_threads is not None:
            rt.lib.TfLiteInterpreterOptionsSetNumThreads(self._options, int(num_threads))
        if cancellable and rt.has("TfLiteInterpreterOptionsEnableCancellation"):
            rt.lib.TfLiteInterpreterOptionsEnableCancellation(self._options, True)
        for op in self._operators:
            rt.add_operator(self._options, op._ptr)
            # A Python op's operator counts the interpreters that may call it
            # (see _native.pyop); released in close().
            op.hold()
        # User delegates first, XNNPACK last: it takes what they leave, as
        # tflite_runtime's default delegate does.
        for d in self._delegates:
            rt.lib.TfLiteInterpreterOptionsAddDelegate(self._options, d.pointer)
            d.hold()  # released in close(), after the interpreter is deleted
        # Keep-alive: TFLite keeps the alias string's pointer as the nodes'
        # custom_name (the registration struct itself is copied).
        self._aliased = []
        if aliases:
            self.sink.rename = rename_messages
            for op in self._operators:
                if op.name in aliases:
                    name = ffi.new("char[]", aliases[op.name].encode())
                    reg = ffi.new("oo_registration*")
                    reg.registration_external = op._ptr
                    rt.lib.TfLiteInterpreterOptionsAddCustomOp(self._options, name, reg, op.version, op.version)
                    self._aliased.append((name, reg))
        if PROCESS_PROFILER is not None:
            rt.lib.TfLiteInterpreterOptionsSetTelemetryProfiler(self._options, PROCESS_PROFILER)
        if use_xnnpack:
            # Applied inside TfLiteInterpreterCreate; it must outlive the interpreter.
            self._xnnpack = _xnnpack_delegate(rt, num_threads)
            if self._xnnpack is not None:
                rt.lib.TfLiteInterpreterOptionsAddDelegate(self._options, self._xnnpack)
        self.xnnpack = self._xnnpack is not None
        self._interp = rt.lib.TfLiteInterpreterCreate(model._ptr, self._options)
        self.ok = self._interp != ffi.NULL
        # invoke() is the hot path: a C-level partial, no Python frame between
        # the caller and TfLiteInterpreterInvoke.  close() swaps it out before
        # freeing the interpreter it points to.
        self.invoke = functools.partial(rt.lib.TfLiteInterpreterInvoke, self._interp) if self.ok else _closed_call
        # The Ctrl-C guard (None: none): its watch() puts the guard's handler
        # in place, sigint.arm calls it; ``_guarded(function, argument)``
        # is that function's partial through the guard's invoke.
        self.sigint_watch = None
        self._guarded = None
        # TfLiteInterpreterCancel's address (0: the runtime has none); the
        # fast calls' bind passes it on too.
        self.cancel_address = _fast_calls.cancel_address(rt)
        if guard is not None and self.cancel_address and self.ok:
            me = _fast_calls.address(self._interp)
            self._guarded = functools.partial(_guarded_partial, guard.invoke, me, self.cancel_address)
            self.sigint_watch = guard.sigint_watch
            self.invoke = self._guarded(rt.lib.TfLiteInterpreterInvoke, self._interp)
        if hooks is not None:
            hooks.created(self)

    # -- lifetime
    def close(self):
        # Never called while an Interpreter's fast calls are bound to this
        # object (fast_calls.entry_points): they hold a reference to it, and
        # the Interpreter unbinds them before it lets go of this object.
        rt = getattr(self, "rt", None)
        if rt is None:
            return
        lib = rt.lib
        self.invoke = _closed_call
        # Each C object leaves its attribute before it is deleted (no point
        # between the two where a signal handler runs): a KeyboardInterrupt
        # right after a delete returns cannot lead to a second delete.
        # Deleting the interpreter runs the Python ops' free() callbacks; an
        # exception one of them parks is this deletion's (raised below, from
        # here: as __del__, Python reports it), and one parked before, by
        # the call that a collection interrupted to run this __del__, is put
        # back for that call.
        earlier = pop_pending_exception()
        try:
            interp, self._interp = getattr(self, "_interp", None), None
            if interp not in (None, ffi.NULL):
                lib.TfLiteInterpreterDelete(interp)
            options, self._options = getattr(self, "_options", None), None
            if options not in (None, ffi.NULL):
                lib.TfLiteInterpreterOptionsDelete(options)
            xnnpack, self._xnnpack = getattr(self, "_xnnpack", None), None
            if xnnpack is not None:
                lib.TfLiteXNNPackDelegateDelete(xnnpack)
            # Nothing calls the operators or delegates any more.
            operators, self._operators = getattr(self, "_operators", ()), []
            for op in operators:
                op.release()
            delegates, self._delegates = getattr(self, "_delegates", ()), []
            for d in delegates:
                d.release()
        finally:
            during = pop_pending_exception()
            if earlier is not None:
                stash_exception(earlier)
        if during is not None:
            raise during

    __del__ = close

    # -- calls that return a status
    def allocate(self) -> int:
        return int(self.rt.lib.TfLiteInterpreterAllocateTensors(self._interp))

    def cancel(self) -> int:
        return int(self.rt.lib.TfLiteInterpreterCancel(self._interp))

    def reset_variables(self) -> int:
        return int(self.rt.lib.TfLiteInterpreterResetVariableTensors(self._interp))

    def resize_input(self, position: int, shape) -> int:
        dims = ffi.new("int[]", [int(d) for d in shape])
        return int(self.rt.lib.TfLiteInterpreterResizeInputTensor(self._interp, position, dims, len(shape)))

    def set_custom_allocation(self, tensor_index: int, buffer) -> int:
        """Make tensor ``tensor_index`` live in ``buffer`` (a writable, 64-byte aligned numpy array).

        TFLite keeps only the pointer, so the buffer is kept alive on this
        object for as long as the interpreter exists.  ``AllocateTensors`` must
        run afterwards; it checks that the buffer is large enough.
        """
        alloc = ffi.new("TfLiteCustomAllocation*")
        alloc.data = ffi.from_buffer(buffer, require_writable=True)
        alloc.bytes = buffer.nbytes
        status = int(
            self.rt.lib.TfLiteInterpreterSetCustomAllocationForTensor(self._interp, int(tensor_index), alloc, 0)
        )
        if status == 0:
            # Keep-alive: TFLite holds only the pointer.
            self._custom_buffers[int(tensor_index)] = buffer
            self.layout_version += 1
        return status

    # -- structure
    def input_indices(self) -> list[int]:
        lib = self.rt.lib
        n = lib.TfLiteInterpreterGetInputTensorCount(self._interp)
        p = lib.TfLiteInterpreterInputTensorIndices(self._interp)
        return [int(p[i]) for i in range(n)]

    def output_indices(self) -> list[int]:
        lib = self.rt.lib
        n = lib.TfLiteInterpreterGetOutputTensorCount(self._interp)
        p = lib.TfLiteInterpreterOutputTensorIndices(self._interp)
        return [int(p[i]) for i in range(n)]

    def tensor(self, index: int) -> TensorRef | None:
        t = self.rt.lib.TfLiteInterpreterGetTensor(self._interp, int(index))
        return None if t == ffi.NULL else TensorRef(t, self)

    def allocated_shape(self, index: int) -> tuple[int, ...] | None:
        """The shape TFLite planned for tensor ``index``, or None if it is not
        known before invoke (a dynamic tensor) or there is no such tensor.

        The same calls as ``tensor(index)``, ``is_dynamic()`` and ``shape``,
        without a TensorRef per tensor: the model checks ask this for every
        tensor after each allocation (a model's first creation).
        """
        t = self._planned(index)
        if t is None:
            return None
        lib = self.rt.lib
        n = lib.TfLiteTensorNumDims(t)
        if n == 4:  # most tensors: four calls without the list and range
            dim = lib.TfLiteTensorDim
            return (dim(t, 0), dim(t, 1), dim(t, 2), dim(t, 3))
        dim = lib.TfLiteTensorDim
        return tuple([dim(t, i) for i in range(n)])

    def _planned(self, index: int):
        """Tensor ``index`` (a TfLiteTensor*) if TFLite planned its shape, else None (no such tensor, or dynamic)."""
        lib = self.rt.lib
        t = lib.TfLiteInterpreterGetTensor(self._interp, int(index))
        if not t or lib.TfLiteTensorGetAllocationStrategy(t) == 4:  # NULL, or kTfLiteDynamic as is_dynamic()
            return None
        return t

    def is_planned(self, index: int) -> bool:
        """Whether ``allocated_shape(index)`` is a shape (not None), with two C calls instead of the shape's."""
        return self._planned(index) is not None

    def has_dynamic_tensor(self) -> bool:
        """True if a tensor of the main subgraph is dynamic (kTfLiteDynamic, as ``is_dynamic()``).

        The same C calls as ``tensor(i).is_dynamic()`` over every tensor,
        without a TensorRef per tensor: asked after every allocation.
        """
        lib = self.rt.lib
        get, strategy, interp = lib.TfLiteInterpreterGetTensor, lib.TfLiteTensorGetAllocationStrategy, self._interp
        i = 0
        while True:
            t = get(interp, i)  # NULL past the last tensor (the C API checks the index)
            if not t:
                return False
            if strategy(t) == 4:
                return True
            i += 1

    def unbacked_input(self) -> tuple[int, str, int] | None:
        """``(position, name, bytes)`` of an input the runtime planned in its arena but gave no memory, or None.

        Why: TFLite does not check what its arena's ``aligned_alloc`` returns
        (``simple_memory_arena.cc``), and ``AllocateTensors`` still reports
        success; every arena tensor then points at NULL plus its offset, and
        the first ``invoke`` writes there.  The planner places the graph's
        inputs first (they live through the whole run), so the input with
        the lowest index and any bytes sits at offset 0: NULL exactly.  Only
        inputs are asked: other tensors may be left unplanned on purpose
        (one that no node uses, or one inside a delegated partition).
        """
        lib, interp = self.rt.lib, self._interp
        for position in range(lib.TfLiteInterpreterGetInputTensorCount(interp)):
            t = lib.TfLiteInterpreterGetInputTensor(interp, position)
            if not t or lib.TfLiteTensorGetAllocationStrategy(t) != 3:  # 3: kTfLiteAllocationStrategyArena
                continue
            nbytes = int(lib.TfLiteTensorByteSize(t))
            if nbytes and not lib.TfLiteTensorData(t):
                name = lib.TfLiteTensorName(t)
                label = ffi.string(name).decode(errors="replace") if name else f"input {position}"
                return position, label, nbytes
        return None

    def in_arena(self, index: int, placed: bool = True) -> bool:
        """Whether tensor ``index`` has the arena strategy and (``placed``) the last allocation gave it memory.

        Tensors TFLite never planned (inside a delegated partition, or not
        used by any node) keep the arena strategy with no data.  A resized
        input loses its data until the next allocation: ask with ``placed=False``.
        """
        address = self._arena_address(index)
        return address is not None and (not placed or address != 0)

    def _arena_address(self, index: int) -> int | None:
        """Tensor ``index``'s data address (0: no memory), or None when it does not have the arena strategy."""
        lib = self.rt.lib
        return _arena_address(lib, lib.TfLiteInterpreterGetTensor(self._interp, int(index)))

    def arena_room(self, indices) -> int:
        """An upper bound of the bytes the tensor arena holds now: the memory mapping around its tensors.

        The first of ``indices`` (tensor indices of subgraph 0, which must
        leave out variables: TFLite keeps them in its other, persistent
        arena) with the arena strategy and memory locates the arena; the size
        of the mapping in ``/proc/self/maps`` holding that address is at least
        the arena's.  It may be much more: the kernel merges neighbouring
        mappings, and a small arena lives in the heap, which is then taken
        whole.  That errs on the side of never refusing what would run (a
        bound within it lets the allocation go ahead), not of catching
        every failure.  0 when no such tensor has memory; ``2**64`` when the
        maps cannot be read.
        """
        return mapping_room(next((a for a in map(self._arena_address, indices) if a), 0))

    @staticmethod
    def can_allocate(nbytes: int) -> bool:
        """Whether ``malloc(nbytes)`` succeeds now; the block is freed at once, never touched.

        Under Linux's overcommit heuristic and under ``RLIMIT_AS`` a size
        that cannot be had fails at once, and one that can costs an
        ``mmap`` and a ``munmap`` (no page is touched).
        """
        if nbytes >= 1 << 63:
            return False  # (no malloc takes it: size_t, and no machine has it)
        libc = _libc()
        p = libc.malloc(nbytes)
        if p == ffi.NULL:
            return False
        libc.free(p)
        return True

    def input_tensor(self, position: int) -> TensorRef:
        return TensorRef(self.rt.lib.TfLiteInterpreterGetInputTensor(self._interp, position), self)

    def output_tensor(self, position: int) -> TensorRef:
        return TensorRef(self.rt.lib.TfLiteInterpreterGetOutputTensor(self._interp, position), self)

    def signature_keys(self) -> list[str]:
        lib = self.rt.lib
        n = lib.TfLiteInterpreterGetSignatureCount(self._interp)
        return [ffi.string(lib.TfLiteInterpreterGetSignatureKey(self._interp, i)).decode() for i in range(n)]

    def signature_runner(self, key: str, subgraph: int | None = None) -> NativeSignatureRunner | None:
        """The runner of signature ``key`` (None: no such signature).

        ``subgraph``: the subgraph the signature runs, as the model records
        it; kept on the runner for the hooks, which must know whether its
        allocation plans subgraph 0 (the C API does not say).
        """
        ptr = self.rt.lib.TfLiteInterpreterGetSignatureRunner(self._interp, key.encode())
        if ptr == ffi.NULL:
            return None
        runner = NativeSignatureRunner(ptr, self, subgraph)
        if self.hooks is not None:
            self.hooks.runner_created(runner)
        return runner


class NativeSignatureRunner:
    """``TfLiteSignatureRunner``; keeps its interpreter alive and is deleted before it."""

    def __init__(self, ptr, interp: NativeInterpreter, subgraph: int | None = None):
        self._ptr = ptr
        self._interp = interp  # keep-alive: the runner points into it
        self.subgraph = subgraph  # (None: not known)
        self.rt = interp.rt
        # Through the interpreter's Ctrl-C guard when it has one (a C-level
        # partial holding the runner's address: close() swaps it out first).
        guarded = interp._guarded
        if guarded is not None:
            self.invoke = guarded(self.rt.lib.TfLiteSignatureRunnerInvoke, ptr)

    def close(self):
        self.invoke = _closed_call
        if getattr(self, "_ptr", None) is not None and self._interp._interp is not None:
            self.rt.lib.TfLiteSignatureRunnerDelete(self._ptr)
        self._ptr = None

    __del__ = close

    def input_names(self) -> list[str]:
        lib = self.rt.lib
        n = lib.TfLiteSignatureRunnerGetInputCount(self._ptr)
        return [_c_name(lib.TfLiteSignatureRunnerGetInputName(self._ptr, i), "input", i) for i in range(n)]

    def output_names(self) -> list[str]:
        lib = self.rt.lib
        n = lib.TfLiteSignatureRunnerGetOutputCount(self._ptr)
        return [_c_name(lib.TfLiteSignatureRunnerGetOutputName(self._ptr, i), "output", i) for i in range(n)]

    def input_tensor(self, name: str) -> TensorRef:
        return TensorRef(self.rt.lib.TfLiteSignatureRunnerGetInputTensor(self._ptr, name.encode()), self)

    def output_tensor(self, name: str) -> TensorRef:
        return TensorRef(self.rt.lib.TfLiteSignatureRunnerGetOutputTensor(self._ptr, name.encode()), self)

    def arena_address(self, name: str, output: bool = False) -> int | None:
        """The data address of input (or ``output``) ``name`` (0: no memory), or None when not an arena tensor.

        A signature runner's inputs and outputs are the only tensors of a
        subgraph other than 0 that the C API reaches: the growing-arena guard
        (``interpreter.arena_guard.refuse_unaffordable``) sees that subgraph through them.
        """
        lib = self.rt.lib
        get = lib.TfLiteSignatureRunnerGetOutputTensor if output else lib.TfLiteSignatureRunnerGetInputTensor
        return _arena_address(lib, get(self._ptr, name.encode()))

    def resize_input(self, name: str, shape) -> int:
        dims = ffi.new("int[]", [int(d) for d in shape])
        return int(self.rt.lib.TfLiteSignatureRunnerResizeInputTensor(self._ptr, name.encode(), dims, len(shape)))

    def allocate(self) -> int:
        return int(self.rt.lib.TfLiteSignatureRunnerAllocateTensors(self._ptr))

    def invoke(self) -> int:
        return int(self.rt.lib.TfLiteSignatureRunnerInvoke(self._ptr))
