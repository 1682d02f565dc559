"""The Interpreter: tflite_runtime's API, on the TFLite C library, with custom ops.

Safety contract (what every public call of an Interpreter, its signature
runners and its ``tensor()`` accessors guarantees):

- **Serialized.**  All calls of one interpreter hold its lock (:mod:`.call_lock`);
  a call from inside one of its own calls raises ``ReentrantCallError``.
- **One path moves memory.**  Everything that can move or resize tensor
  memory (``allocate_tensors``, ``resize_tensor_input``, signature runners'
  calls, ``allocate_tensors`` and ``resize_tensor_input``, preserved-tensor
  buffers) goes through :meth:`Interpreter._reshape`, which refuses while
  ``tensor()`` views exist, runs ``model.check_resize`` on every new shape
  and ``model.check_allocated`` after every allocation (also a failed one,
  so that its ``ModelError`` does not depend on the runtime version: then on
  the shapes no Prepare left stale, with no verdict kept, see
  :func:`.arena_guard.failed_allocation`), and drops the cached views of the
  set/get fast path.
- **Constants are read-only.**  They live in the caller's model bytes.
"""

from __future__ import annotations

import enum
import functools
import os
import pickle
import weakref
from typing import TYPE_CHECKING

import numpy as np

from .. import _native
from ..errors import (
    ClosedError,
    InvalidArgumentError,
    InvalidInputError,
    KernelError,
    LiveViewsError,
    ModelError,
    NotAllocatedError,
    OpaqueOpsError,
    ResizeError,
    TensorMemoryError,
    TFLiteError,
    UnsupportedError,
)
from ..model import cache as model_cache
from ..model import check_allocated
from ..model.cache import checked_model
from ..model.reader import rooted, unusable_model
from ..model.runtime_versions import affected as _runtime_affected
from ..model.schema import BUILTIN_OPERATORS
from ..ops.provider import OpProvider, not_an_op_provider
from . import fast_calls as _fast
from . import fork_guard as _fork
from . import tensors as _tensors
from . import xnnpack as _xnnpack
from .call_lock import CallLock
from .isolation_default import isolated_class, wants_isolation
from .reshape_target import Graph as _Graph
from .reshape_target import as_shape as _as_shape
from .sigint import WATCH_AFTER_S, invoke_watched

if TYPE_CHECKING:  # imported where used: signature_runner imports this module
    from .signature_runner import SignatureRunner

# The most threads an interpreter may ask for.  XNNPACK and TFLite start
# one pool thread per requested thread, and each invoke wakes them all: more
# threads than cores only wait for one another (measured on 2 cores, a small
# model's invoke takes 2.6 s with 64 threads, 30 s with 1024, and more than a
# minute with 4096: num_threads=100000 looked like a hang).  64 covers every
# common machine, so a value valid on one is valid on the others (a pickled
# interpreter moves between machines); a machine with more cores may use them all.
MAX_NUM_THREADS = max(64, os.cpu_count() or 1)


def check_num_threads(num_threads) -> None:
    """Refuse a ``num_threads`` that is not None or an int in ``1..MAX_NUM_THREADS``.

    The references' rule (an int, bool included as there, of at least 1) plus
    the bound; one check for every entry point (Interpreter, compat, the CLI,
    isolated interpreters, ``run_op``).

    Raises
    ------
    InvalidArgumentError
        A ``ValueError``, as the references raise; the message gives the range.
    """
    if num_threads is None:
        return
    if not isinstance(num_threads, int):
        raise InvalidArgumentError(f"type of num_threads should be int, got {type(num_threads).__name__}")
    if num_threads < 1:
        raise InvalidArgumentError(f"num_threads should be >= 1, got {num_threads}")
    if num_threads > MAX_NUM_THREADS:
        raise InvalidArgumentError(
            f"num_threads={num_threads} is more than the {MAX_NUM_THREADS} this machine allows "
            f"(1..{MAX_NUM_THREADS}: 64, or the number of CPU cores if more); threads beyond the cores "
            "only wait for each other and so many can stall invoke() for minutes. Pass at most "
            f"{MAX_NUM_THREADS}, e.g. num_threads=os.cpu_count() ({os.cpu_count()} here)"
        )


_ndarray = np.ndarray  # one global load on the set_tensor fast path


class OpResolverType(enum.Enum):
    """tflite_runtime's ``experimental_op_resolver_type`` values (same names and numbers).

    ``AUTO`` and ``BUILTIN``: the builtin kernels, with XNNPACK as chosen by
    ``use_xnnpack``.  ``BUILTIN_WITHOUT_DEFAULT_DELEGATES``: no XNNPACK.
    ``BUILTIN_REF`` (TFLite's reference kernels) is not reachable through the
    C API and raises :class:`~opaque_ops.UnsupportedError`.
    """

    AUTO = 0
    BUILTIN = 1
    BUILTIN_REF = 2
    BUILTIN_WITHOUT_DEFAULT_DELEGATES = 3


def _resolver_type(value) -> OpResolverType:
    # Also accept tflite_runtime's / ai-edge-litert's own enum, by name.
    name = getattr(value, "name", value)
    try:
        return OpResolverType[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"Unrecognized passed in op resolver type: {value!r}; use one of {[m.name for m in OpResolverType]}"
        ) from None


def _as_op_libraries(custom_ops) -> list:
    """Accept op providers and what the CLI's ``--ops`` accepts, alone or in a list.

    An item is an op provider (compile_ops, load_ops, python_op,
    ``opaque_ops.kernels``) or a spec string/path (:func:`.ops.library.op_library_from_spec`):
    a prebuilt library, a ``.c`` file (compiled with compile_ops), or
    ``"kernels:NAME"``.  A single one need not be in a list: a string is one
    spec, not a sequence of one-character names.
    """
    from ..ops.library import op_library_from_spec

    if custom_ops is None:
        return []
    if isinstance(custom_ops, (str, bytes, os.PathLike, OpProvider)):
        custom_ops = [custom_ops]
    libs = []
    for item in custom_ops:
        if isinstance(item, (str, os.PathLike)):
            item = op_library_from_spec(item)
        if not isinstance(item, OpProvider):
            raise not_an_op_provider(item)
        libs.append(item)
    return libs


def _collect_operators(libs, needed) -> list:
    """The operators to register for a model whose custom ops are named ``needed``.

    Two libraries may not provide the same op (name and version), whether
    or not the model uses it: that is decided on what each declares
    (``lib.ops``), before anything is loaded.  Then each provider gives the
    operators for ``needed`` (:meth:`~opaque_ops.ops.provider.OpProvider.operators_for`):
    a bundle of kernel files loads only those the model uses.
    """
    seen: dict[tuple[str, int], object] = {}
    for lib in libs:
        for key in lib.ops:
            if key in seen and seen[key] is not lib:
                raise OpaqueOpsError(
                    f"op {key[0]} v{key[1]} is provided by both {seen[key]!r} and {lib!r}; "
                    "pass only one of them in custom_ops"
                )
            seen.setdefault(key, lib)
    ops = []
    taken: set[tuple[str, int]] = set()
    for lib in libs:
        for op in lib.operators_for(needed):
            key = (op.name, op.version)
            if key not in taken:
                taken.add(key)
                ops.append(op)
    return ops


def _as_delegates(experimental_delegates) -> list:
    if not experimental_delegates:
        return []  # (no import of the delegate module on the common path)
    from ..ops.delegates import Delegate

    out = list(experimental_delegates or ())
    for d in out:
        if not isinstance(d, Delegate):
            raise TypeError(
                "experimental_delegates must hold delegates from opaque_ops.load_delegate(), "
                f"not {type(d).__name__} (a delegate loaded by another runtime's load_delegate "
                "cannot be handed to this one)"
            )
    return out


# Tensors for which preserved buffers are made (kTfLiteArenaRw): what the
# arena planner would otherwise let later tensors overwrite.
_ARENA_RW = 2
# What TFLite says of a custom allocation too small for a new shape
# (experimental_preserve_all_tensors replaces it).
_TOO_SMALL = "custom allocation is too small"
# A SELECT_V2 in a subgraph that one of these runs keeps its broadcast mode
# across allocations (model.checks.version_rules.note_called_select_v2).
_SELECT_V2 = BUILTIN_OPERATORS["SELECT_V2"]
_RERUNNING = frozenset({BUILTIN_OPERATORS["WHILE"], BUILTIN_OPERATORS["IF"]})
# A SELECT or SELECT_V2 in a subgraph that one of these runs may keep an output
# shape from before (model.checks.called.note_called_kept), on every runtime.
_SELECTS = frozenset({BUILTIN_OPERATORS["SELECT"], _SELECT_V2})
_CALLING = _RERUNNING | {BUILTIN_OPERATORS["CALL_ONCE"]}


def _cond_reader(tensor_of):
    """``cond_of(index)``: the value of an IF's condition, input tensor ``index`` (``tensor_of(index)``: a TensorRef or None).

    True, False, or None when it is not known: if.cc reads the bool's one
    value, and an empty or unreadable one decides nothing here.
    """

    def cond_of(index: int) -> bool | None:
        t = tensor_of(index)
        value = None if t is None else t.read()
        return None if value is None or value.size != 1 else bool(value.reshape(-1)[0])

    return cond_of


class Interpreter:
    """Run a TFLite model, including custom ops from C or Python.

    The API follows ``tflite_runtime.interpreter.Interpreter`` (and
    ``ai_edge_litert.interpreter.Interpreter``), so swapping the import works.
    One interpreter may be shared by threads: its calls are serialized.
    It pickles (for process pools, Dask, Ray): the copy is re-created from
    the model bytes, the arguments and the op libraries, with the same input
    shapes and allocation, but not the tensor contents (``Interpreter.__reduce__``).

    Parameters
    ----------
    model_path : str or path-like, optional
        A ``.tflite`` file.
    model_content : bytes-like, optional
        The model itself.  It is kept (referenced, not copied) for as long as
        the interpreter lives, because TFLite reads it in place; its constants
        are never written.
    experimental_delegates : list of Delegate, optional
        Delegates from :func:`opaque_ops.load_delegate`, applied in order
        before XNNPACK (which takes the nodes they leave).
    num_threads : int, optional
        Threads for the builtin kernels: 1 to :data:`MAX_NUM_THREADS` (64, or the
        number of CPU cores if more); other values raise ``InvalidArgumentError``.
    experimental_op_resolver_type : OpResolverType, optional
        ``BUILTIN_WITHOUT_DEFAULT_DELEGATES`` turns XNNPACK off; ``AUTO`` and
        ``BUILTIN`` leave it to ``use_xnnpack``.  tflite_runtime's own enum is
        accepted too.
    experimental_preserve_all_tensors : bool, optional
        Keep every intermediate tensor readable with ``get_tensor`` after
        ``invoke()``: each gets its own buffer instead of sharing the arena.
        Turns XNNPACK off, since a delegated partition does not write its
        intermediates.  ai-edge-litert keeps XNNPACK with this flag (each
        node delegated on its own), so its outputs may differ from these in
        the last bits: XNNPACK's kernels against TFLite's own.  Debugging
        only: it costs the sum of all tensor sizes in memory.
    experimental_disable_delegate_clustering : bool, optional
        The C API cannot reorder delegate partitions, and without a delegate
        there is nothing to cluster: ``True`` turns XNNPACK off, so the nodes
        run in the model's order.  With ``experimental_delegates`` it raises.
    custom_ops : list, optional
        Op libraries (:func:`compile_ops`, :func:`load_ops`, :func:`python_op`,
        ``opaque_ops.kernels``), or what the command line's ``--ops`` takes: a
        prebuilt kernel library's path, a ``.c`` file (compiled with
        ``compile_ops``) or ``"kernels:NAME"``.  One of them may be passed
        alone, without a list.  Keyword only.
    library : str or path-like, optional
        The ``libtensorflowlite_c`` to use (see :func:`opaque_ops.runtime_info`).
    use_xnnpack : bool or None, optional
        Apply TFLite's XNNPACK delegate to the builtin ops.  The TFLite C API
        applies no delegate on its own, so opaque_ops adds it explicitly, with
        ``num_threads`` threads; it runs float builtins several times faster.
        A kernel in ``custom_ops`` always runs its op's nodes, even for the
        three MediaPipe ops XNNPACK also implements
        (``Convolution2DTransposeBias``, ``MaxPoolingWithArgmax2D``,
        ``MaxUnpooling2D``).  ``None`` (the default): XNNPACK on, and it
        never runs those three ops (without a kernel they are reported
        unresolved; XNNPACK's unpooling crashes on MediaPipe's float argmax
        indices).  ``True``: XNNPACK on, and its own copy runs those of the
        three that have no kernel (the argmax pair only together, and only
        where it cannot crash).  ``False``: XNNPACK off; TFLite's reference
        kernels run every builtin.  The attribute ``xnnpack`` tells whether
        XNNPACK was applied.  A model in which the output of a WHERE, UNIQUE
        or NON_MAX_SUPPRESSION (a shape known only while the model runs)
        feeds another operator gets no XNNPACK by default, and ``True`` is
        refused for it (``ModelError``): the delegate plans the operators
        after it at creation and crashed when the shape changed.

    isolate : bool or opaque_ops.isolate.Worker, optional
        Run the TFLite runtime in a worker process (see
        :mod:`opaque_ops.isolate`): a crash there raises
        :class:`RuntimeCrashError` instead of killing this process.  With it,
        ``timeout=`` and ``memory_limit=`` are accepted too.  None means False
        unless :func:`opaque_ops.isolate.isolate_by_default` is in effect.

    Raises
    ------
    ModelError
        The model file is missing, corrupt or truncated.
    ValueError
        Invalid arguments (as the references raise them).
    """

    def __new__(cls, *args, isolate=None, **kwargs):
        # isolate=True: the same API, backed by a worker process (the class
        # opaque_ops.isolate registered; this layer does not import that one).
        if wants_isolation(isolate):
            if cls is Interpreter:
                return super().__new__(isolated_class())
            if not issubclass(cls, isolated_class()):
                _not_isolated(cls, explicit=isolate is not None)
        return super().__new__(cls)

    # The isolated worker's instrumentation (a _native.NativeHooks), set per
    # instance by _with_hooks; None for every other interpreter.
    _hooks = None

    @classmethod
    def _with_hooks(cls, hooks, **kwargs) -> Interpreter:
        """An in-process interpreter whose native objects are created with ``hooks``.

        The isolated worker composes its instrumentation in this way, for
        that one interpreter; the public constructor keeps tflite_runtime's
        signature.
        """
        it = object.__new__(cls)
        it._hooks = hooks
        it.__init__(**kwargs, isolate=False)
        return it

    def __init__(
        self,
        model_path=None,
        model_content=None,
        experimental_delegates=None,
        num_threads=None,
        experimental_op_resolver_type=OpResolverType.AUTO,
        experimental_preserve_all_tensors=False,
        experimental_disable_delegate_clustering=False,
        *,
        custom_ops=None,
        library=None,
        use_xnnpack: bool | None = None,
        isolate=None,
    ):
        self._native = None
        if isolate is not None and wants_isolation(isolate):
            # Reached only by a subclass that asks for isolation from its own
            # __init__ (__new__ saw no isolate=): it would run in this process.
            _not_isolated(type(self), explicit=True)
        if (model_path is None) == (model_content is None):
            raise ValueError("pass exactly one of model_path= or model_content=")
        if model_content is not None:
            model_content = model_content_bytes(model_content)
        check_num_threads(num_threads)
        resolver = _resolver_type(experimental_op_resolver_type)
        if resolver is OpResolverType.BUILTIN_REF:
            raise UnsupportedError(
                "experimental_op_resolver_type=BUILTIN_REF (TFLite's reference kernels) is not "
                "available through the TFLite C API; BUILTIN_WITHOUT_DEFAULT_DELEGATES runs the "
                "builtin kernels without XNNPACK"
            )
        delegates = _as_delegates(experimental_delegates)
        no_xnnpack = {
            "experimental_op_resolver_type=BUILTIN_WITHOUT_DEFAULT_DELEGATES": resolver
            is OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
            "experimental_preserve_all_tensors=True": bool(experimental_preserve_all_tensors),
            "experimental_disable_delegate_clustering=True": bool(experimental_disable_delegate_clustering),
        }
        if experimental_disable_delegate_clustering and delegates:
            raise UnsupportedError(
                "experimental_disable_delegate_clustering=True cannot be honoured with "
                "experimental_delegates: the TFLite C API has no switch for delegate clustering"
            )
        # What __reduce__ sends to re-create this interpreter in another process
        # (custom_ops and delegates are added from what was loaded).
        self._init_args = {
            "num_threads": num_threads,
            "experimental_op_resolver_type": resolver,
            "experimental_preserve_all_tensors": bool(experimental_preserve_all_tensors),
            "experimental_disable_delegate_clustering": bool(experimental_disable_delegate_clustering),
            "library": library,
            "use_xnnpack": use_xnnpack,
        }
        reasons = [k for k, v in no_xnnpack.items() if v]
        if reasons:
            if use_xnnpack:
                raise ValueError(f"use_xnnpack=True contradicts {reasons[0]}, which runs without XNNPACK")
            use_xnnpack = False
        _native.load_runtime(library)
        if model_path is not None:
            try:
                with open(model_path, "rb") as f:
                    data = f.read()
            except OSError as exc:
                raise ModelError(f"cannot read model file {os.fspath(model_path)!r}: {exc.strerror}") from None
            self._model_name = os.fspath(model_path)
        else:
            data = model_content
            self._model_name = "<model_content>"
        # TFLite verifies the flatbuffer, but not everything it later indexes
        # with; our bounds-checked reader catches what would crash the process.
        self._libs = _as_op_libraries(custom_ops)
        # A plain Interpreter's three hot calls may run in C (fast_calls); a
        # subclass may override them, and hooks wrap the invoke C would skip.
        fast = type(self) in _FAST_CLASSES and self._hooks is None
        if fast:
            # The fast calls module (found once per process) holds the
            # compiled model reader: found before the read, not after it.
            _fast.module()
        try:
            # A registered kernel replaces the runtime's op of the same name.
            # Parsed and checked once per model content (model.cache).
            # The record of a new verdict is written after the first allocation (see _allocate_locked).
            self._info = checked_model(
                data, registered={op for lib in self._libs for op, _v in lib.ops}, defer_write=True
            )
        except ModelError as exc:
            raise unusable_model(self._model_name, exc) from None
        self._model_bytes = data
        operators = _collect_operators(self._libs, {n for n, _v in self._info.custom_ops()})
        # XNNPACK for the builtins; registered kernels keep their nodes (see _xnnpack).
        try:
            self.xnnpack, aliases = _xnnpack.plan(
                self._info, {op.name for op in operators}, use_xnnpack, _native.load_runtime()
            )
        except ModelError as exc:
            raise ModelError(f"{self._model_name} cannot run with XNNPACK: {exc}") from None
        private = _xnnpack.alias_model(data, aliases)
        # A BATCH_MATMUL by a constant matrix runs as FULLY_CONNECTED, and a
        # fixed unit-stride STRIDED_SLICE as SLICE, where that was measured
        # faster (see interpreter/matmul.py, interpreter/slices.py); only the
        # private copy changes.  Each rewrite is imported only for a model
        # with its operator (whose codes the model's record keeps): a start
        # would otherwise import modules it never runs.
        codes = model_cache.builtin_codes(self._info)
        version = _native.load_runtime().version
        if BUILTIN_OPERATORS["TRANSPOSE"] in codes and _runtime_affected(version):
            # Before 2.23, TRANSPOSE takes at most 6 dimensions (tensorflow/lite/kernels/transpose.cc),
            # and the XNNPACK delegate copies a permutation into a 6-entry array while the interpreter
            # is created (overrunning it; from 15 entries on, measured on 2.17.1, SIGSEGV).  The
            # model's checks let 8 entries through, for 2.23 (model.checks.limits.DEEP_OPS_2_23).
            for sg_index, op_index, entries in model_cache.deep_transposes(self._info)[:1]:
                raise unusable_model(
                    self._model_name,
                    ModelError(
                        f"subgraph {sg_index} operator {op_index} (TRANSPOSE) permutes {entries} dimensions; "
                        f"TFLite {version}'s TRANSPOSE takes at most 6 (and its XNNPACK delegate overruns an array "
                        "of 6 while the interpreter is created; TFLite 2.23 takes 8). Reshape to at most 6 "
                        "dimensions around the TRANSPOSE, or use TFLite 2.23"
                    ),
                )
        if BUILTIN_OPERATORS["BATCH_MATMUL"] in codes:
            from . import matmul as _matmul

            if _matmul.worth_it(version, self.xnnpack, len(delegates)):
                rewritten = _matmul.rewrite_model(private)
                if rewritten is not private:
                    # The copy's extra tensors follow the model's own: indices from here are not the caller's.
                    self._hidden_from = _matmul.main_tensor_count(data)
                    private = rewritten
        if BUILTIN_OPERATORS["STRIDED_SLICE"] in codes:
            from . import slices as _slices

            if _slices.worth_it(version, self.xnnpack, len(delegates)):
                # Which slices, kept in the model's record (model.fixed_slices).
                rewritten, self._fixed_slices = _slices.rewrite_model(private, model_cache.fixed_slices(self._info))
                if rewritten is not private:
                    self._hidden_from = _slices.main_tensor_count(data)  # (as above)
                    private = rewritten
        model = _native.NativeModel(private)
        if not model.ok:
            msgs = model.sink.take()
            raise ModelError(
                f"TFLite rejected the model {self._model_name}: "
                + ("; ".join(msgs) if msgs else "not a valid TFLite flatbuffer")
            )
        native = _native.NativeInterpreter(
            model,
            operators,
            num_threads=num_threads,
            use_xnnpack=self.xnnpack,
            aliases=aliases,
            rename_messages=(functools.partial(_xnnpack.real_names, aliases=dict(aliases)) if aliases else None),
            hooks=self._hooks,
            delegates=[d._native for d in delegates],
            guard=_fast.module(),
        )
        self.xnnpack = native.xnnpack
        if not native.ok:
            msgs = native.sink.take()
            raise TFLiteError(
                f"could not create an interpreter for {self._model_name}: " + "; ".join(msgs), messages=msgs
            )
        self._native = native
        self._delegates = delegates
        # What the planned shapes depend on besides the model and the input
        # shapes: part of the key of check_allocated's kept verdicts.
        self._check_config = (model_cache.runtime_identity(native.rt), bool(self.xnnpack), len(delegates))
        self._calls = CallLock(_fast.new_lock() if fast else None)
        self._lock = self._calls.lock  # the same lock, one attribute hop less on the hot paths
        self._views: weakref.WeakSet = weakref.WeakSet()
        self._input_positions = {idx: pos for pos, idx in enumerate(native.input_indices())}
        # String inputs of subgraph 0: each invoke checks they hold strings
        # (see strings.refuse_unset_strings), so such a model runs its invoke
        # in Python, never the C fast call.  Asked of the runtime: a start
        # whose verdict is on disk does not read the model's tensors.
        self._string_inputs = tuple(
            t for t in self._input_positions if (ref := native.tensor(t)) is not None and ref.type == _tensors.STRING
        )
        # Operators of subgraph 0 whose kernel reads an input's value in Eval
        # and crashes on some (model.fed_values): each invoke checks the value
        # first, so such a model too runs its invoke in Python.  The nodes
        # are kept in the model's record; a model without them pays nothing.
        fed = model_cache.fed_value_nodes(self._info)
        if fed:
            from ..model.fed_values import for_runtime

            self._fed_values = for_runtime(fed, native.rt.version)
        # A READ_VARIABLE of a variable nothing has assigned yet returns
        # uninitialised memory on 2.23 with XNNPACK (every other runtime
        # fails the invoke there): until every read that comes first in a
        # subgraph has its variable assigned, each invoke checks
        # (variable_state).  The model's part is kept in its record; a model
        # whose variables a CALL_ONCE init assigns first (the converters'
        # form) has nothing to check.
        if BUILTIN_OPERATORS["READ_VARIABLE"] in codes and self.xnnpack:
            from ..model.runtime_versions import affected

            found = () if affected(version) else model_cache.variable_reads(self._info)
            if found:
                from .variable_state import AssignedVariables

                signatures: dict = {}
                for sig in self._info.signatures:
                    signatures.setdefault(sig.subgraph_index, []).append(sig.key)
                self._variables = AssignedVariables(found, signatures)
        # On 2.23 with XNNPACK a variable's buffer is the size of the first
        # value stored in it, for the interpreter's life: each allocation's
        # stores are checked against what earlier invokes may have stored,
        # and the first invoke after it counts what it may store
        # (variable_buffers).  Other models and runtimes pay this one test.
        if BUILTIN_OPERATORS["ASSIGN_VARIABLE"] in codes and self.xnnpack and not _runtime_affected(version):
            from .variable_buffers import VariableBuffers

            self._buffers = VariableBuffers(self._info, version)
        # Whether invoke() has anything to check before it runs (string
        # inputs, fed values, variables): one test on the common path.
        self._set_prechecks()
        self._main = _Graph(0, dict(self._input_positions), native.resize_input, native.allocate, native.input_tensor)
        # Whether subgraph 0 is planned (allocated since the last change, and
        # the model checks passed on what was planned); other subgraphs that
        # signature runners planned; the native layout version it was for.
        self._allocated = False
        # Inputs resized since their subgraph's last allocation ({subgraph:
        # {tensor index: shape}}, a subgraph only while it has some): its next
        # allocation may grow its arena (arena_guard.refuse_unaffordable).  Each subgraph
        # has an arena of its own.
        self._resized: dict[int, dict[int, tuple]] = {}
        # (subgraph, input shapes) -> that arena's lower bound (arena_guard.refuse_unaffordable)
        self._bounds: dict[tuple, int] = {}
        self._planned: set[int] = set()
        # {subgraph: {input tensor index: shape}} at its last successful
        # allocation: after XNNPACK's reshape fails, whether any input grew
        # since (see arena_guard.failed_allocation).
        self._allocated_inputs: dict[int, dict[int, tuple | None]] = {}
        self._layout_version = -1
        # tensor index -> (numpy view, dtype, shape) of writable arena
        # tensors, valid until memory moves; the fast path of set/get_tensor.
        self._slots: dict = {}
        self._preserve = bool(experimental_preserve_all_tensors)
        self._preserved: dict[int, np.ndarray] = {}  # keep-alive: TFLite holds only the pointers
        self._rerooted: dict[int, object] = {}
        # {subgraph: (its SELECT and SELECT_V2 nodes, the ones an allocation
        # so far left in a mode they never leave, whether each SELECT_V2's
        # output last held one value)}: model.select_rows, per interpreter.
        self._select_rows: dict[int, tuple] = {}
        # (subgraph, operator) of the SELECT_V2s in subgraphs that WHILE or IF
        # run that an allocation left broadcasting; False for a model without
        # them (None: not asked yet).
        self._called_selects: set | bool | None = None
        # {(subgraph, operator): output shape} of the SELECTs and SELECT_V2s in
        # subgraphs that control flow runs, as their last Prepare left it; None
        # for a model without them (set with _called_selects).
        self._called_kept: dict | None = None
        # Current shape of each input of subgraph 0, as last resized here, and
        # the (input, shape) pairs a strict resize accepted: the per-frame
        # same-shape resize is then a dictionary lookup.
        self._input_shapes: dict[int, tuple] = {}
        self._strict_ok: set = set()
        # The state of the C set_tensor/invoke/get_tensor (fast_calls; None:
        # the methods below serve alone).  invoke runs in C only while it is
        # bound, which _fast_sync decides after every change of state.
        self._fast = _fast.attach(self, Interpreter) if fast else None
        _fork.track(self)  # refused in a forked child where it would hang (see _fork)

    # ------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Free the interpreter now.  Idempotent; views from ``tensor()`` stay valid.

        Waits for a call running in another thread (``cancel()`` first to
        stop a long ``invoke()``); that call keeps its own result or error.
        """
        calls = getattr(self, "_calls", None)
        if calls is None:
            return
        with calls.held("close"):
            self._let_go()

    def _let_go(self, reason: str | None = None) -> None:
        """Drop the C objects (they go when the last view or running call does); under the lock.

        ``reason``: what later calls' ClosedError says (default: closed by close()).
        """
        self._native = None
        self._slots.clear()
        if reason is not None:
            self._closed_reason = reason
        self._fast_sync()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __reduce__(self):
        # Pickled as what re-creates it (for process pools, Dask, Ray): the
        # model bytes, the constructor's arguments (op libraries and delegates
        # pickled by their own __reduce__), the input shapes it was resized to
        # and whether it was allocated.  Tensor contents and variable state
        # stay behind: the copy starts fresh.
        args = getattr(self, "_init_args", None)
        if args is None:
            raise pickle.PicklingError(f"{type(self).__name__} objects cannot be pickled")
        if self._native is None:
            raise ClosedError("a closed Interpreter cannot be pickled; pickle it before close()")
        sg = self._info.subgraphs[0]
        declared = {idx: tuple(sg.tensors[idx].shape) for idx in sg.inputs}
        resized = []
        for d in self.get_input_details():
            shape = tuple(int(n) for n in d["shape"])
            if declared.get(d["index"]) != shape:
                resized.append((d["index"], shape))
        state = {"allocated": bool(self._allocated), "resized": resized}
        return restore_interpreter, (
            self._model_bytes,
            dict(args, custom_ops=list(self._libs), experimental_delegates=list(self._delegates)),
            state,
        )

    def _live(self) -> _native.NativeInterpreter:
        native = self._native
        if native is None:
            raise ClosedError(self._closed_reason)
        return native

    _closed_reason = "this Interpreter is closed; create a new one"
    # Subgraph 0's tensor count in the model, when the private copy has more
    # (matmul.rewrite_model): higher native indices are refused as out of range.
    _hidden_from: int | None = None
    # ((tensor, shape), ...) of the STRIDED_SLICEs run as SLICE (slices.rewrite_model):
    # each allocation of subgraph 0 must give each that shape (slices.check_allocated).
    _fixed_slices: tuple = ()

    def _forked(self, native, reason: str) -> None:
        """In a forked child (see _fork): refuse every call with ``reason``; never free the C objects."""
        _fork._keep(native)
        self._calls = CallLock()  # the parent's may be held by a thread that is not here
        self._lock = self._calls.lock
        self._native = None
        self._slots = {}
        self._closed_reason = reason
        # The fast calls hold the parent's lock and slots: off, the methods refuse.
        if self._fast is not None:
            self._fast.unbind()
            self._fast = None

    _fast = None

    def _fast_sync(self) -> None:
        """Bind or unbind the C invoke (fast_calls) to match the state; called under the lock.

        It may run only what the Python ``invoke`` runs: allocated and
        planned, Ctrl-C watch not armed; on a model with dynamic tensors
        (``_moves``) it runs the live-view check before and drops moved
        cached views after, as the Python method does.
        """
        fast = self._fast
        if fast is not None:
            ready = self._allocated and not self._watch and not self._prechecks
            _fast.bind(
                fast,
                self._native if ready else None,
                moves=self._moves,
                views=self._views,
                before=_fast.python_function(Interpreter, "_before_moving_invoke"),
            )

    def _invoke_failed(self, status: int, native) -> None:
        """The C invoke's error path: what the Python ``invoke`` does with a failed status."""
        self._check(status, "invoke", native)

    # -------------------------------------------------------------- errors
    def _check(self, status: int, what: str, native) -> None:
        """Turn a TfLiteStatus into the matching exception, with the runtime's messages.

        ``native`` is the interpreter the call ran on (``close()`` from another
        thread may have cleared ``self._native`` meanwhile).
        """
        msgs = native.sink.take()
        # A Python op (pyop.python_op) that raised parked its exception on
        # this thread; it is the real error, with the op's own traceback.
        pending = _native.pop_pending_exception()
        if pending is not None:
            raise pending
        if status == 0:
            return
        if status == 7 or any("unresolved custom op" in m.lower() for m in msgs):
            from .unresolved_ops import unresolved_error  # only a model with a missing op needs it

            raise unresolved_error(self, msgs)
        detail = "\n  ".join(msgs) if msgs else _native.STATUS_NAMES.get(status, f"status {status}")
        if status == 8:
            raise KeyboardInterrupt(f"{what} was cancelled")
        raise KernelError(f"{what} failed: {detail}", status=status, messages=msgs)

    # ------------------------------------------------ the one path that moves memory
    def _reshape(
        self, what: str, graph: _Graph | None = None, resizes=(), allocate: bool = False, then=None, redirect=None
    ):
        """Resize inputs and/or allocate, for every public entry point that may move memory.

        Takes the lock, and while holding it: checks every new shape
        (``strict`` and ``model.check_resize``), skips what would not change
        anything (a same-shape resize; an allocation with nothing changed), refuses
        while ``tensor()`` views exist, drops the fast-path views, resizes,
        allocates, and runs ``model.check_allocated`` on the result.  ``then(native)``
        runs under the same lock (a signature runner's set-invoke-get).

        Parameters
        ----------
        resizes : iterable of (tensor index, shape, strict)
        redirect : callable, optional
            ``redirect(native)`` gives tensors buffers of the caller's
            (``set_custom_allocation``: ``testing.run_op``'s guarded outputs);
            it runs after the views check, and an allocation follows.
        """
        calls = self._calls
        calls.acquire(what)
        try:
            native = self._live()
            graph = graph or self._main
            todo = []
            for index, shape, strict in resizes:
                shape = tuple(shape)
                handle = graph.names[index]
                current = graph.tensor(handle).shape
                if strict:
                    self._check_strict(graph.subgraph, index, current, shape)
                self._check_resize(graph.subgraph, index, shape)
                if not strict and current != shape and graph.is_strict(handle):  # (the shape it has passes)
                    self._check_strict(graph.subgraph, index, current, shape, (what, handle))
                if current != shape:
                    todo.append((index, handle, shape))
                elif graph.subgraph == 0:
                    self._input_shapes[index] = shape
            planned = self._is_planned(graph.subgraph, native)
            if todo or redirect is not None or (allocate and not planned):
                self._no_views(what)
                self._slots.clear()
                if redirect is not None:
                    self._set_planned(graph.subgraph, False)
                    redirect(native)
                if todo:
                    self._set_planned(graph.subgraph, False)
                    for index, handle, shape in todo:
                        if graph.subgraph == 0:
                            self._input_shapes.pop(index, None)
                        self._check(graph.resize(handle, shape), what, native)
                        if graph.subgraph == 0:
                            self._input_shapes[index] = shape
                        self._resized.setdefault(graph.subgraph, {})[index] = shape
                if allocate:
                    self._allocate_locked(native, graph, what)
            return None if then is None else then(native)
        finally:
            calls.owner = None  # (release() spelled out: see call_lock)
            calls.lock.release()

    def _is_planned(self, subgraph: int, native) -> bool:
        if native.layout_version != self._layout_version:
            return False  # custom allocations changed in the worker's placement (isolate)
        return self._allocated if subgraph == 0 else subgraph in self._planned

    def _set_planned(self, subgraph: int, value: bool) -> None:
        if subgraph == 0:
            self._allocated = value
            if not value:
                self._fast_sync()
        elif value:
            self._planned.add(subgraph)
        else:
            self._planned.discard(subgraph)

    def _allocate_locked(self, native, graph: _Graph, what: str) -> None:
        self._set_planned(graph.subgraph, False)
        if self._resized:
            resized = self._resized.get(graph.subgraph)
            if resized:
                # The guard and the failed-allocation explanation are imported
                # when first needed (a resize, a failure), not at every start.
                from ..model.checks import check_resized_reach
                from . import arena_guard

                # The inputs together, as resized: what any-rank operators make of them must not reach
                # an operator deeper than it takes (the allocation prepares it there first).
                check_resized_reach(self._rooted(graph.subgraph), self._input_shapes_now(native, graph))
                arena_guard.refuse_unaffordable(self, native, graph, resized, what)
        status = graph.allocate()
        stale = self._select_row_mode(native, graph, status)
        if status == 0:
            self._refuse_unbacked(native, graph)
        preserve = self._preserve and graph.subgraph == 0
        # A failed allocation is explained before anything reads its shapes
        # (see arena_guard.failed_allocation).  The one failure
        # preserve_all_tensors repairs itself, a custom allocation too small
        # for a new shape, is left to it, and explained only if it stays.
        if status != 0 and not (preserve and any(_TOO_SMALL in m.lower() for m in native.sink)):
            from . import arena_guard  # (a failure: imported only now, as above)

            arena_guard.failed_allocation(self, native, graph, status, what)
        if preserve:
            status = self._preserve_tensors(native, status)
            if status != 0:
                from . import arena_guard  # (as above)

                arena_guard.failed_allocation(self, native, graph, status, what)
        # Which tensors of subgraph 0 are planned, in one C call, for the
        # checks and the dynamic-tensor flag below (a plain Interpreter with
        # the fast calls module; None: both ask the runtime tensor by tensor).
        planned = _fast.planned_tensors(native) if graph.subgraph == 0 and self._fast is not None else None
        try:
            self._check_allocated(native, graph, planned)
            if stale is not None:
                raise stale
            if self._buffers is not None and status == 0:
                self._buffers.allocated(graph.subgraph, self._seen(native, graph)[1])
                self._set_prechecks()  # (the first invoke after it counts its stores: _fast_sync below)
        except ModelError as err:
            native.sink.take()
            pending = _native.pop_pending_exception()
            if pending is not None and err.__context__ is None:
                err.__context__ = pending
            raise
        finally:
            # One write of the model's record, with this allocation's verdict
            # (check_allocated wrote it if it kept a new one).
            model_cache.write_pending(self._info)
        self._check(status, what, native)
        self._set_planned(graph.subgraph, True)
        self._allocated_inputs[graph.subgraph] = self._input_shapes_now(native, graph)
        self._resized.pop(graph.subgraph, None)
        self._layout_version = native.layout_version
        self._watch = True
        if graph.subgraph == 0:
            # It may be reallocated during invoke.
            self._moves = planned[1] if planned is not None else native.has_dynamic_tensor()
        self._fast_sync()

    def _seen(self, native, graph: _Graph) -> tuple:
        """``(model, shape_of, in_arena, room)``: ``graph``'s subgraph as the checks and the arena guard see it.

        Subgraph 0 is seen whole through the native interpreter.  The C API
        reaches another subgraph's tensors only through its signature
        (``graph.shape_of`` and ``graph.arena``): those shapes are known, the
        rest are "unknown" (None) and count as outside the arena.  ``model``
        is the model with that subgraph as subgraph 0 (:meth:`_rooted`);
        ``shape_of(t)`` the planned shape of tensor ``t`` or None;
        ``in_arena(t, placed)`` and ``room(indices)`` as
        ``NativeInterpreter.in_arena`` and ``NativeInterpreter.arena_room``.
        """
        k = graph.subgraph
        if k == 0:
            return self._info, native.allocated_shape, native.in_arena, native.arena_room
        return self._rooted(k), graph.shape_of, graph.arena.in_arena, graph.arena.room

    def _input_shapes_now(self, native, graph: _Graph) -> dict[int, tuple | None]:
        """``{input tensor index: shape}`` of ``graph``'s subgraph as the runtime holds them now.

        (From ``graph.names``, whose keys are the inputs: the model's
        subgraphs are not read on this path, which every successful
        allocation takes.)
        """
        shape_of = self._seen(native, graph)[1]
        return {t: shape_of(t) for t in graph.names}

    def _refuse_unbacked(self, native, graph: _Graph) -> None:
        """After an allocation TFLite called a success: TensorMemoryError if its arena got no memory.

        (See NativeInterpreter.unbacked_input; another subgraph's arena is
        seen through its signature's inputs, ``graph.arena``.)  The
        interpreter is closed: the arena keeps the failed buffer, and
        growing it later copies from address 0.  Called with the call lock held.
        """
        if graph.subgraph == 0:
            unbacked = native.unbacked_input()
            if unbacked is None:
                return
            position, name, nbytes = unbacked
            which = f"input {position} {name!r}"
        else:
            found = graph.arena.unbacked()
            if found is None:
                return
            name, nbytes = found
            which = f"subgraph {graph.subgraph}'s input {name!r}"
        # (Here, not in arena_guard: this process is out of memory, and
        # importing a module may then fail with a bare MemoryError.)
        reason = (
            "the runtime could not allocate the memory for this model's tensors (its arena allocation "
            f"failed, which TFLite does not report: {which}, {nbytes} bytes, was left at "
            "address 0). The model needs more memory than this process can get: resize its inputs to "
            "smaller shapes, or raise the process's memory limit"
        )
        native.sink.take()
        self._let_go(f"this Interpreter was closed: {reason}; create a new one")
        raise TensorMemoryError(reason)

    # True while the main subgraph has a dynamic tensor (kTfLiteDynamic, set by
    # the allocation): then invoke() itself may move memory.  A dynamic tensor
    # is reallocated when its shape changes, and TFLite then plans the arena
    # again, which may move every tensor in it (inputs included).  So on such
    # a model invoke() refuses while tensor() views exist, and drops the
    # set/get fast path's cached views after it runs.
    _moves = False
    _string_inputs: tuple = ()
    _fed_values: tuple = ()
    _made_shapes = None

    def _refuse_fed_values(self, native, what: str, how: str = "with set_tensor()") -> None:
        """Before an invoke of subgraph 0: refuse an input value its kernel would crash on (see fed_values)."""
        from .fed_values import MadeShapes, refuse_crashing_values  # (only a model with such an operator)

        # (What a dynamic data tensor's shape will be, from the fed values:
        # it reads the model only when a node's data is dynamic.)
        made = self._made_shapes
        if made is None:
            made = self._made_shapes = MadeShapes(self._info, self._allocated_inputs, 0)
        refuse_crashing_values(native, self._fed_values, native.rt.version, what, how=how, made=made)

    # The reads of variables waiting for an assignment (variable_state), None
    # when there are none (every model but those on 2.23 with XNNPACK that
    # read a variable before anything assigns it); _prechecks as set in __init__.
    _variables = None
    _prechecks = False
    # The variables' buffers on 2.23 with XNNPACK (variable_buffers), None on
    # every other runtime and for a model that stores in no variable.
    _buffers = None

    def _set_prechecks(self) -> None:
        """Set :attr:`_prechecks`: whether invoke() has anything to check before it runs (see __init__)."""
        buffers = self._buffers
        self._prechecks = bool(
            self._string_inputs or self._fed_values or self._variables or (buffers is not None and buffers.unchecked)
        )

    def _check_buffers(self, subgraph: int, what: str, tensor_of) -> tuple | None:
        """Just before an invoke of ``subgraph``: refuse a store past a variable's buffer (see variable_buffers).

        Called under the lock, when ``subgraph`` is in the buffers'
        ``unchecked``; ``tensor_of`` as for :meth:`_check_variables`.
        Returns what to pass to the buffers' ``after_invoke`` once the invoke
        has succeeded.  Once no subgraph is left to check, the C invoke
        (fast_calls) may take over again.
        """
        stores = self._buffers.before_invoke(subgraph, what, _cond_reader(tensor_of))
        self._set_prechecks()
        self._fast_sync()
        return stores

    def _check_variables(self, native, subgraph: int, what: str, tensor_of) -> tuple:
        """Just before an invoke of ``subgraph``: refuse a read of a variable nothing has assigned (see variable_state).

        ``tensor_of(index)``: the subgraph's input tensor ``index`` (a
        TensorRef), or None, for the conditions of its IFs.  Called under
        the lock.  Returns what to pass to :meth:`_count_variables` once the
        invoke has succeeded (and only then: a failed invoke assigns nothing
        that counts).
        """

        variables = self._variables
        return variables, variables.before_invoke(subgraph, what, native.rt.version, _cond_reader(tensor_of))

    def _count_variables(self, checked: tuple, subgraph: int) -> None:
        """After a successful invoke of ``subgraph`` checked by :meth:`_check_variables`: count its assignments.

        Called under the lock; when no read is left waiting the check is
        dropped, and the C invoke (fast_calls) may take over.
        """
        variables, taken = checked
        if variables.after_invoke(subgraph, taken) and self._variables is variables:
            self._variables = None
            self._set_prechecks()
            self._fast_sync()

    def _run_invoke(self, native, invoke, watched: bool, moves: bool) -> tuple[int, float | None]:
        """``(status, seconds)`` of one ``invoke()`` (a C call on ``native``; seconds None unless ``watched``).

        ``watched``: with Ctrl-C cancellation armed (:func:`.sigint.invoke_watched`);
        ``moves``: the model's invoke may move memory, so the run goes
        through :meth:`_run_moving`.  The interpreter's and its signature
        runners' Python invokes all run through here.
        """
        if watched:
            if moves:
                return self._run_moving(native, invoke_watched, native, invoke)
            return invoke_watched(native, invoke)
        return (self._run_moving(native, invoke) if moves else invoke()), None

    def _run_moving(self, native, fn, *args):
        """``fn(*args)``: an invoke of a model whose invoke may move memory; returns what it returns.

        The cached views leave ``_slots`` for the run and come back only
        where their tensors stayed (:meth:`_keep_unmoved_slots`): whatever
        stops the run or this function (an error, a KeyboardInterrupt
        between two bytecodes) leaves no view that may point into memory the
        run moved.  The next call that needs a view caches it again.
        """
        slots = self._slots
        held = dict(slots)
        slots.clear()  # (in place: the C calls share this dict)
        result = fn(*args)
        self._keep_unmoved_slots(native, held)
        slots.update(held)
        return result

    def _keep_unmoved_slots(self, native, slots=None) -> None:
        """After an invoke that may have moved memory: drop each fast-path view whose tensor moved.

        A moved tensor (a new address, shape or byte size) would leave its
        cached view pointing at freed memory; one still in place keeps its
        view, so a model whose shapes settle (a streaming front end) keeps
        the fast path instead of rebuilding its views on every call.  Each
        tensor is looked up again by its index: the invoke may have moved the
        TfLiteTensor structs themselves (TFLite 2.23 grows its tensor table
        while preparing a dynamic model's ops), leaving any pointer to one
        dangling.  ``slots``: the views to sort (default ``_slots``).
        """
        if slots is None:
            slots = self._slots
        if not slots:
            return
        drop = self._drop_moved
        if drop is False:  # (found once: the native interpreter is this object's for life)
            drop = self._drop_moved = _fast.moved_view_dropper(native) if self._fast is not None else None
        if drop is not None:
            drop(slots, native)  # the loop below, in C (fast_calls)
            return
        for index, slot in list(slots.items()):
            t = native.tensor(index)
            if t is None or t.placement() != slot[3]:
                del slots[index]

    # _keep_unmoved_slots' C routine (fast_calls.moved_view_dropper), None
    # without one, False until first asked.
    _drop_moved = False

    def _before_moving_invoke(self, what: str) -> None:
        """On a model whose invoke may move memory: refuse while writable ``tensor()`` views exist."""
        if not self._views:  # the usual case, checked first: this runs before every invoke
            return
        live = [h for h in list(self._views) if not h.__array_interface__["data"][1]]
        if live:
            raise LiveViewsError(
                f"cannot {what}: {len(live)} numpy view(s) from tensor() still point into the "
                "interpreter's memory, and this model has dynamic tensors (shapes computed while it "
                "runs), so invoke() may move that memory and leave the views pointing at freed memory. "
                "Delete the views before invoke() and take new ones after it (call the function "
                "tensor() returned again), or use get_tensor(), which copies."
            )

    def _preserve_tensors(self, native, status: int) -> int:
        """experimental_preserve_all_tensors: give every arena tensor a buffer of its own.

        TFLite's arena lets a tensor reuse the memory of one that is no
        longer needed; a custom allocation takes it out of that plan.  A
        buffer that is too small for a new shape makes the allocation fail;
        it is replaced and the allocation repeated.
        """
        for _ in range(3):
            grown = False
            for i in range(len(self._info.subgraphs[0].tensors)):
                t = native.tensor(i)
                if t is None or (t.allocation_type != _ARENA_RW and i not in self._preserved):
                    continue
                need = max(t.nbytes, 1)
                buf = self._preserved.get(i)
                if buf is not None and buf.nbytes >= need:
                    continue
                raw = np.zeros(need + _native.TENSOR_ALIGNMENT, np.uint8)
                start = (-raw.ctypes.data) % _native.TENSOR_ALIGNMENT
                buf = raw[start : start + need]
                if native.set_custom_allocation(i, buf) != 0:
                    return 1
                self._preserved[i] = buf
                grown = True
            if not grown:
                return status
            native.sink.take()  # "custom allocation is too small": about to be retried
            status = native.allocate()
        return status

    def _rooted(self, subgraph: int):
        """The model with ``subgraph`` as subgraph 0, for the checks (which look at subgraph 0)."""
        if subgraph == 0:
            return self._info
        info = self._rerooted.get(subgraph)
        if info is None:
            info = self._rerooted[subgraph] = rooted(self._info, subgraph)
        return info

    def _check_resize(self, subgraph: int, index: int, shape) -> None:
        from ..model.checks import check_resize  # the rules, imported on first use (model.cache._rules)

        try:
            check_resize(self._rooted(subgraph), index, shape)
        except ResizeError:
            raise
        except InvalidInputError as exc:
            raise ResizeError(str(exc)) from None

    def _check_strict(self, subgraph: int, index: int, current, shape, runner=None) -> None:
        """tflite_runtime's strict resize: only dimensions that are -1 in the signature may change.

        ``runner``: ``(what, input name)`` when the resize is a signature
        runner's that the C API makes strict whatever the caller asked (an
        input of a subgraph other than 0; see ``SignatureRunner.__init__``):
        the shape is refused here, before anything changed, in the runner's
        words (TFLite's own refusal comes after the interpreter gave up its
        allocation).
        """
        t = self._info.subgraphs[subgraph].tensors[index]
        sig = tuple(t.shape_signature) if t.shape_signature else tuple(current)
        if len(sig) == len(shape) and all(s == -1 or s == d for s, d in zip(sig, shape)):
            return
        if runner is not None:
            what, name = runner
            want = "[" + ", ".join("any" if s == -1 else str(s) for s in sig) + "]"
            raise ResizeError(
                f"{what}: input {name!r} cannot take an array of shape {list(shape)}: TFLite's C API "
                f"resizes a signature input of subgraph {subgraph} strictly, changing only the dimensions "
                f"that are -1 in its shape signature {[int(x) for x in sig]}, so it takes shape {want}. "
                f"Pass an array of that shape"
            )
        if len(sig) != len(shape):
            raise ResizeError(
                f"strict resize of tensor {index}: shape {list(shape)} has rank {len(shape)}, "
                f"the signature {list(sig)} has rank {len(sig)}"
            )
        for dim, (s, d) in enumerate(zip(sig, shape)):
            if s != -1 and s != d:
                raise ResizeError(
                    f"Attempting to resize dimension {dim} of tensor {index} with value {s} to {d}. "
                    f"ResizeInputTensorStrict only allows mutating unknown dimensions identified by -1 "
                    f"(the signature is {[int(x) for x in sig]})."
                )

    def _check_allocated(self, native, graph: _Graph, planned=None) -> None:
        """The allocated-shape checks (``model.check_allocated``) on what the runtime planned for ``graph``.

        After a successful allocation; a failed one is checked by
        ``arena_guard.failed_allocation``.  ``planned``: subgraph 0's planned
        tensors from ``fast_calls.planned_tensors`` (None: the runtime is
        asked tensor by tensor).
        """
        info, shape_of, _in_arena, _room = self._seen(native, graph)
        if graph.subgraph == 0:
            # (The shapes themselves are asked for a few tensors only.)
            is_planned = planned[0].__contains__ if planned is not None else native.is_planned
            check_allocated(info, shape_of, self._check_config, is_planned)
            if self._fixed_slices:
                from . import slices as _slices  # (imported already: the model was rewritten)

                _slices.check_allocated(self._fixed_slices, shape_of, is_planned)
        else:
            check_allocated(info, shape_of, self._check_config)

    def _select_row_mode(self, native, graph: _Graph, status: int):
        """After ``graph.allocate()``: SELECT's row-wise mode remembered, and the ShapeError of a stale one.

        TFLite's SELECT keeps the row-wise mode of an earlier allocation,
        SELECT_V2 before 2.23 its broadcast mode, and both an output shape
        of one value when each input holds one value
        (:mod:`opaque_ops.model.select_rows`): this interpreter remembers,
        per subgraph, which of its nodes took one, from the shapes of
        every allocation (a failed one too: its SELECT may have been
        prepared before another node failed).  Never in a kept verdict: it
        is this interpreter's past, not the model's.  A model without SELECT
        pays one lookup here per allocation (the nodes come from its record).
        """
        k = graph.subgraph
        known = self._select_rows.get(k)
        if known is None:
            known = self._select_rows[k] = (model_cache.select_nodes(self._rooted(k)), set(), {})
        nodes, rows, outputs = known
        if self._called_selects is None:
            # (The codes come from the model's record: a model without both reads no operators here.)
            codes = model_cache.builtin_codes(self._info)
            self._called_selects = set() if _SELECT_V2 in codes and not codes.isdisjoint(_RERUNNING) else False
            self._called_kept = {} if not codes.isdisjoint(_SELECTS) and not codes.isdisjoint(_CALLING) else None
        called = None
        if self._called_selects is not False or self._called_kept is not None:
            called = self._called_select_mode(native, graph, status)
        if not nodes:
            return called
        # Only a model with SELECT or SELECT_V2 needs these.
        # (Not from the checks: a start from the model's record imports none of them.)
        from ..model.runtime_versions import affected
        from ..model.select_rows import SELECT_V2_BROADCAST_RANK, note_and_check

        rank = SELECT_V2_BROADCAST_RANK if affected(self._check_config[0][0]) else None
        shape_of = self._seen(native, graph)[1]

        def declared(t):
            # (Asked only before a refusal, or when a SELECT's Prepare may have returned early at the first
            # allocation: reading the tensors costs a later start nothing otherwise.)
            return self._rooted(k).subgraphs[0].tensors[t].shape

        return note_and_check(nodes, shape_of, rows, k, status == 0, outputs, rank, declared) or called

    def _called_select_mode(self, native, graph: _Graph, status: int):
        """SELECT_V2's broadcast mode and SELECT's and SELECT_V2's kept outputs in called subgraphs: the error.

        Those nodes are prepared by the control-flow kernels, and keep the
        broadcast mode across this interpreter's allocations as subgraph 0's
        do (``model.checks.version_rules.note_called_select_v2``), on a
        runtime older than 2.23 only; and, on every runtime, an output shape
        of one value (``model.checks.called.note_called_kept``).  Their
        shapes are followed from the ones the runtime planned for ``graph``.
        """
        from ..model.runtime_versions import affected

        broadcast = (
            self._called_selects is not False and bool(self._check_config) and affected(self._check_config[0][0])
        )
        if not broadcast and self._called_kept is None:
            return None
        from ..errors import ShapeError
        from ..model.checks.called import note_called_kept
        from ..model.checks.version_rules import note_called_select_v2
        from ..model.shapes import infer_shapes

        info, shape_of = self._seen(native, graph)[:2]
        try:
            shapes = infer_shapes(info, shape_of)
        except ShapeError:
            return None  # (check_allocated refuses these shapes)

        def known(t):
            return shapes.get(t) if t >= 0 else None

        error = None
        if broadcast:
            assert isinstance(self._called_selects, set)
            error = note_called_select_v2(info, known, self._called_selects, status == 0)
        if self._called_kept is not None:
            kept = note_called_kept(info, known, self._called_kept, status == 0)  # (always: it remembers)
            error = error or kept
        return error

    # Views of this interpreter's memory held in another process: an isolated
    # interpreter's worker sets it, for the length of one call, to the count of
    # tensor() views its parent holds over the shared tensors (see
    # isolate.server.do_runner_call), so that every path that would move the
    # memory refuses as it does for views of its own.
    _foreign_views = 0

    def _no_views(self, what: str) -> None:
        n = len(self._views) + self._foreign_views
        if n:
            raise LiveViewsError(
                f"cannot {what}: {n} numpy view(s) from tensor() still point into "
                "the interpreter's memory, which this call would move. Delete them first "
                "(or use get_tensor(), which copies)."
            )

    # ---------------------------------------------------------- execution
    def allocate_tensors(self) -> None:
        """Plan and allocate tensor memory; runs every kernel's Prepare.

        With nothing changed since the last allocation it does nothing (and
        ``tensor()`` views and the set/get fast path stay valid).

        Raises
        ------
        UnresolvedOpsError
            A custom op in the model is provided by no library.
        KernelError
            A kernel's Prepare failed; the message is the kernel's own.
        ModelError
            The planned shapes would crash the runtime (also a ``RuntimeError``).
        LiveViewsError
            ``tensor()`` views exist and the memory would move.
        """
        calls = self._calls
        lock = self._lock
        if not calls.try_acquire():
            calls.wait("allocate_tensors")
        try:
            native = self._native
            # Nothing changed since the last allocation: nothing to do.
            if self._allocated and native is not None and native.layout_version == self._layout_version:
                return
        finally:
            calls.owner = None
            lock.release()
        self._reshape("allocate_tensors", allocate=True)

    def invoke(self) -> None:
        """Run the model.  The GIL is released while it runs.

        Raises
        ------
        NotAllocatedError
            ``allocate_tensors()`` has not run since creation or the last resize.
        KernelError
            A kernel reported an error; the message is the kernel's own.
        KeyboardInterrupt
            Ctrl-C, or ``cancel()`` from another thread, stopped it between nodes.
        """
        # The lock spelled out (see call_lock.CallLock) and the prebound C
        # call: a tiny model's whole invoke is ~1 µs, so each 0.1 µs shows.
        # The owner is marked: invoke() runs Python ops, and one of them
        # calling back into this interpreter is refused, not deadlocked.
        calls = self._calls
        lock = self._lock
        if not calls.try_acquire():
            calls.wait("invoke")
        try:
            native = self._native
            if native is None or not self._allocated:
                self._live()
                raise NotAllocatedError(
                    "invoke() needs allocate_tensors() first (after creating the interpreter "
                    "and after every resize_tensor_input)"
                )
            moves = self._moves
            if moves:
                self._before_moving_invoke("invoke()")
            variables = stores = None
            if self._prechecks:
                if self._string_inputs:
                    from .strings import refuse_unset_strings  # (only a model with string inputs: see strings)

                    refuse_unset_strings(
                        ((f"{t} ({native.tensor(t).name!r})", native.tensor(t)) for t in self._string_inputs),
                        "invoke()",
                    )
                if self._fed_values:
                    self._refuse_fed_values(native, "invoke()")
                if self._variables is not None:  # (counted after the invoke, once it succeeded)
                    variables = self._check_variables(native, 0, "invoke()", native.tensor)
                if self._buffers is not None and 0 in self._buffers.unchecked:
                    stores = self._check_buffers(0, "invoke()", native.tensor)
            if self._watch or moves:
                status, took = self._run_invoke(native, native.invoke, self._watch, moves)
                if self._watch:
                    self._watch = took > WATCH_AFTER_S
                    self._fast_sync()
            else:
                status = native.invoke()  # (the common case, spelled out: no call more)
            # A failing Python op returns an error status (and reports), so its
            # parked exception is always picked up by _check.
            if status or native.sink:
                self._check(status, "invoke", native)
            if variables is not None:
                self._count_variables(variables, 0)
            if stores is not None:
                self._buffers.after_invoke(stores)
        finally:
            calls.owner = None
            lock.release()

    # Arm Ctrl-C cancellation for this interpreter's next invoke (see _sigint).
    _watch = False

    def cancel(self) -> None:
        """Ask a running ``invoke()`` (in another thread) to stop; it raises KeyboardInterrupt.

        The one call that does not wait for the interpreter's lock.
        """
        native = self._native
        if native is not None:
            native.cancel()

    def reset_all_variables(self) -> None:
        """Reset every variable tensor to its initial value (``TfLiteInterpreterResetVariableTensors``).

        Before ``allocate_tensors()`` (or after a resize, before the next
        allocation) it does nothing, as ai-edge-litert accepts it there: the
        variables have no memory yet, and the allocation that gives them
        memory resets them (TFLite's ``AllocateTensors``).

        Raises
        ------
        NotAllocatedError
            An isolated worker moved the tensors since the last allocation:
            call ``allocate_tensors()`` again.
        """

        def reset(native):
            if not self._allocated:
                # Never allocated, or resized since: TFLite's reset would write
                # through a null (or stale) pointer, and the coming allocation
                # resets every variable tensor anyway.
                return
            if not self._is_planned(0, native):
                raise NotAllocatedError("reset_all_variables() needs allocate_tensors() first")
            self._check(native.reset_variables(), "reset_all_variables", native)

        self._reshape("reset_all_variables", then=reset)

    # ------------------------------------------------------------- details
    def _details(self, index: int, native, subgraph: int = 0) -> dict:
        tensors = self._info.subgraphs[subgraph].tensors
        info = tensors[index] if 0 <= index < len(tensors) else None
        if subgraph == 0:
            t = native.tensor(index)
            if t is None:
                raise InvalidInputError(f"tensor index {index} is out of range (the model has {len(tensors)} tensors)")
        else:
            t = None
        return _tensors.details(t, index, info)

    def get_input_details(self) -> list[dict]:
        """Details of the model's inputs (same keys as tflite_runtime)."""
        with self._calls.held("get_input_details"):
            native = self._live()
            return [self._details(i, native) for i in native.input_indices()]

    def get_output_details(self) -> list[dict]:
        """Details of the model's outputs (same keys as tflite_runtime)."""
        with self._calls.held("get_output_details"):
            native = self._live()
            return [self._details(i, native) for i in native.output_indices()]

    def get_tensor_details(self, subgraph_index: int = 0) -> list[dict]:
        """Details of every tensor of a subgraph (the main one by default).

        For subgraphs other than 0 the shapes are those stored in the model:
        the C API gives no access to those subgraphs' live tensors.
        """
        n = self.num_subgraphs()
        if not isinstance(subgraph_index, (int, np.integer)) or not 0 <= subgraph_index < n:
            raise InvalidInputError(
                f"subgraph_index is out of range: {subgraph_index} for the model, which has {n} subgraphs."
            )
        with self._calls.held("get_tensor_details"):
            native = self._live()
            return [
                self._details(i, native, int(subgraph_index))
                for i in range(len(self._info.subgraphs[subgraph_index].tensors))
            ]

    def _get_ops_details(self) -> list[dict]:
        """ai-edge-litert's ``_get_ops_details()``: one dict per operator of the main subgraph.

        Private there too, but read by model-inspection code (explorers,
        graph dumps), so it answers in the reference's form: ``index``,
        ``op_name`` (the builtin's name, or a custom op's code), ``inputs`` and
        ``outputs`` (int32 arrays of tensor indices, -1 for an omitted
        optional input) and ``operand_types`` / ``result_types`` (the numpy
        types of those tensors, as in their details, omitted inputs left out).

        Returns
        -------
        list of dict
            The operators as the model stores them.  The reference reads its
            interpreter's node list, which after ``allocate_tensors()`` also
            holds a ``DELEGATE`` node per partition a delegate (XNNPACK) took;
            the C API shows no nodes, so those are not listed here.  What is
            listed equals the reference's list before allocation, or with
            ``BUILTIN_WITHOUT_DEFAULT_DELEGATES``.
        """
        with self._calls.held("_get_ops_details"):
            native = self._live()
            types: dict[int, object] = {}

            def type_of(index: int):
                if index not in types:
                    types[index] = self._details(index, native)["dtype"]
                return types[index]

            return [
                {
                    "index": int(op.index),
                    "op_name": op.op_name,
                    "inputs": np.array(op.inputs, dtype=np.int32),
                    "outputs": np.array(op.outputs, dtype=np.int32),
                    "operand_types": [type_of(i) for i in op.inputs if i != -1],
                    "result_types": [type_of(i) for i in op.outputs if i != -1],
                }
                for op in self._info.subgraphs[0].operators
            ]

    def num_subgraphs(self) -> int:
        """How many subgraphs the model has."""
        return len(self._info.subgraphs)

    # -------------------------------------------------------------- tensors
    def _tensor_ref(self, index, native):
        _tensors.check_index(index)
        i = int(index)
        t = native.tensor(i) if -(2**31) <= i < 2**31 else None  # (a C int: cffi's OverflowError otherwise)
        if t is None or (self._hidden_from is not None and index >= self._hidden_from):
            raise InvalidInputError(
                f"tensor index {index} is out of range: the model has {len(self._info.subgraphs[0].tensors)} tensors"
            )
        return t

    def set_tensor(self, tensor_index: int, value: np.ndarray) -> None:
        """Copy ``value`` into a tensor.

        Parameters
        ----------
        tensor_index : int
            From ``get_input_details()[i]["index"]``.
        value : numpy.ndarray
            Must have the tensor's dtype and shape exactly (no silent casts).

        Raises
        ------
        InvalidInputError
            Wrong dtype or shape (a ``ValueError``); the message says what was
            expected, what was received, and how to fix it.
        ReadOnlyTensorError
            The tensor is a constant of the model.
        NotAllocatedError
            The tensor has no memory yet.
        """
        # The lock spelled out (see call_lock.CallLock), with the owner
        # marked: nothing here calls back into Python ops, but a Python
        # signal handler may run between two bytecodes of this call (even
        # inside try_acquire), and its call to this interpreter must find a
        # mark and be refused, not wait for a lock its own thread holds.
        calls = self._calls
        lock = self._lock
        if not calls.try_acquire():
            calls.wait("set_tensor")
        try:
            # (An exact int only: 1.0 and True would find tensor 1's entry too.)
            slot = self._slots.get(tensor_index) if type(tensor_index) is int else None
            # The cached view (_remember): an ndarray of exactly the
            # tensor's shape and dtype (builtin dtypes are singletons, so `is`
            # settles the usual case without numpy's slower dtype __eq__).
            if (
                slot is not None
                and type(value) is _ndarray
                and value.shape == slot[2]
                and (value.dtype is slot[1] or value.dtype == slot[1])
            ):
                slot[0][...] = value
                return
            native = self._live()
            t = self._tensor_ref(tensor_index, native)
            _tensors.write(t, value, f"tensor {tensor_index} ({t.name!r})")
            self._remember(tensor_index, t)
        finally:
            calls.owner = None
            lock.release()

    def _remember(self, index, t) -> None:
        """Cache a view of a writable arena tensor for the fast path (never a dynamic one: it may move)."""
        if self._allocated and not t.is_dynamic() and not t.is_read_only():
            v = t.view()
            if v is not None:
                # Its placement too: after an invoke that may move memory,
                # _keep_unmoved_slots (or the C invoke, fast_calls) asks where
                # the tensor is now and compares.
                self._slots[index] = (v, v.dtype, v.shape, t.placement())

    def get_tensor(self, tensor_index: int, subgraph_index: int = 0) -> np.ndarray:
        """Return a copy of a tensor's contents.

        Raises
        ------
        NotAllocatedError
            The tensor has no data yet (before ``allocate_tensors()``).
        UnsupportedError
            ``subgraph_index`` other than 0: the C API reads only the main
            subgraph's tensors (a signature runner returns its outputs).
        """
        calls = self._calls
        lock = self._lock  # as in set_tensor
        if not calls.try_acquire():
            calls.wait("get_tensor")
        try:
            slot = self._slots.get(tensor_index) if type(tensor_index) is int else None  # (as in set_tensor)
            if slot is not None and subgraph_index == 0:
                return slot[0].copy()
            native = self._live()
            if subgraph_index != 0:
                self._no_subgraph_tensors(subgraph_index)
            t = self._tensor_ref(tensor_index, native)
            out = _tensors.read(t, f"tensor {tensor_index} ({t.name!r})")
            self._remember(tensor_index, t)
            return out
        finally:
            calls.owner = None
            lock.release()

    def _no_subgraph_tensors(self, subgraph_index) -> None:
        n = len(self._info.subgraphs)
        if not isinstance(subgraph_index, (int, np.integer)) or not 0 <= subgraph_index < n:
            raise InvalidInputError(f"Invalid subgraph index {subgraph_index}: the model has {n} subgraphs")
        raise UnsupportedError(
            f"get_tensor(subgraph_index={subgraph_index}): the TFLite C API reads only the main "
            "subgraph's tensors; a signature runner (get_signature_runner) returns the outputs "
            "of a signature on another subgraph"
        )

    def tensor(self, tensor_index: int):
        """Return a function that gives a zero-copy numpy view of a tensor.

        As in tflite_runtime, call the function each time you need the array.
        While a view exists, calls that would move the memory
        (``allocate_tensors`` after a change, ``resize_tensor_input`` to a new
        shape, a signature runner that must resize) raise ``LiveViewsError``.
        Views of constants are read-only.
        """
        with self._calls.held("tensor"):
            native = self._live()
            self._tensor_ref(tensor_index, native)  # an int, in range: or the caller hears now
            index = int(tensor_index)

        def view():
            with self._calls.held("tensor() view"):
                # Looked up at each call: an allocation (or a dynamic model's
                # invoke) may move the TfLiteTensor structs (see _keep_unmoved_slots).
                t = native.tensor(index)
                v = t.view()
                if v is None and t.dtype == object:
                    # A string's buffer is TFLite's string layout, a handle's an opaque object: no array to map.
                    raise InvalidInputError(
                        f"tensor {tensor_index} is a {_tensors.type_name(t)} tensor, whose memory is not a numpy "
                        "array: it has no tensor() view"
                        + ("; get_tensor() returns a copy of its strings" if t.type == _tensors.STRING else "")
                    )
                if v is None:
                    raise NotAllocatedError(f"tensor {tensor_index} has no data yet: call allocate_tensors() first")
                # The holder keeps the native interpreter (the memory) alive.
                holder = _tensors.ViewHolder(v, t._owner)
                self._views.add(holder)
                return np.asarray(holder)

        return view

    def resize_tensor_input(
        self, input_index: int, tensor_size: list[int] | tuple[int, ...] | np.ndarray, strict: bool = False
    ) -> None:
        """Change an input's shape; call ``allocate_tensors()`` afterwards.

        Resizing to the current shape does nothing.

        Parameters
        ----------
        input_index : int
            The input tensor's index (from ``get_input_details``).
        tensor_size : sequence of int
            The new shape.
        strict : bool
            If True, only dimensions that are -1 in the shape signature may change.

        Raises
        ------
        ResizeError
            Not an input, a negative or non-integer dimension, a strict
            violation, or a shape the runtime cannot take (a ``RuntimeError``
            and a ``ValueError``).
        """
        # Fast path, openWakeWord's per-frame call: the shape the input
        # already has.  Still checked (strict, model.check_resize), under the lock.
        known = self._input_shapes.get(input_index)
        if known is not None and type(tensor_size) in (list, tuple) and len(tensor_size) == len(known):
            shape = tuple(tensor_size)
            if shape == known and all(type(d) is int for d in shape):
                calls = self._calls
                lock = self._lock
                if not calls.try_acquire():
                    calls.wait("resize_tensor_input")
                try:
                    if self._input_shapes.get(input_index) == shape:
                        if strict and (input_index, shape) not in self._strict_ok:
                            self._check_strict(0, input_index, shape, shape)
                            self._strict_ok.add((input_index, shape))
                        self._check_resize(0, input_index, shape)
                        self._live()
                        return
                finally:
                    calls.owner = None
                    lock.release()
        if isinstance(input_index, (bool, np.bool_)) or not isinstance(input_index, (int, np.integer)):
            raise TypeError(f"input_index must be an int, not {type(input_index).__name__}")
        input_index = int(input_index)
        if input_index not in self._input_positions:
            raise ResizeError(
                f"tensor {input_index} is not an input, so it cannot be resized; "
                f"the inputs are {sorted(self._input_positions)}"
            )
        shape = _as_shape(tensor_size, f"resize_tensor_input({input_index})")
        self._reshape("resize_tensor_input", resizes=[(input_index, shape, bool(strict))])

    # ---------------------------------------------------------- signatures
    def get_signature_list(self) -> dict:
        """``{signature key: {"inputs": [names], "outputs": [names]}}``."""
        out = {}
        for sig in self._info.signatures:
            out[sig.key] = {"inputs": sorted(sig.inputs), "outputs": sorted(sig.outputs)}
        return out

    def get_signature_runner(self, signature_key: str | None = None) -> SignatureRunner:
        """Return a runner for one signature (the only one if ``signature_key`` is None)."""
        from .signature_runner import SignatureRunner

        with self._calls.held("get_signature_runner"):
            native = self._live()
            keys = native.signature_keys()
            if signature_key is None:
                if len(keys) != 1:
                    raise ValueError(f"the model has {len(keys)} signatures {keys}; pass signature_key=")
                signature_key = keys[0]
            sig = next((s for s in self._info.signatures if s.key == signature_key), None)
            runner = native.signature_runner(signature_key, None if sig is None else sig.subgraph_index)
            if runner is None:
                raise ValueError(f"no signature {signature_key!r}; the model has {keys}")
            return SignatureRunner(self, runner, signature_key, sig)


_warned_not_isolated: set = set()


def _not_isolated(cls: type, explicit: bool) -> None:
    """A subclass asked to run isolated: refused (``isolate=``), or warned once (the default's).

    The isolated interpreter is opaque_ops' own proxy class, whose methods
    run in the worker: a subclass's overrides could not.  It used to run in
    this process without a word, with no crash protection.
    """
    where = f"{cls.__module__}.{cls.__qualname__} is a subclass of opaque_ops.Interpreter"
    if explicit:
        raise UnsupportedError(
            f"isolate=: {where}, which runs in this process (only opaque_ops.Interpreter itself and "
            "opaque_ops.compat's classes run isolated). Create opaque_ops.Interpreter(..., isolate=True) "
            "and wrap it instead of subclassing"
        )
    if cls not in _warned_not_isolated:
        import warnings

        warnings.warn(
            f"opaque_ops: {where}; it runs in this process despite isolate_by_default (only "
            "opaque_ops.Interpreter itself and opaque_ops.compat's classes run isolated)",
            RuntimeWarning,
            stacklevel=3,
        )
        # (Once warned: under -W error the warning raised, and is raised again next time.)
        _warned_not_isolated.add(cls)


# The classes whose instances take the fast calls: Interpreter, and the
# subclasses allow_fast_calls() admits.  An exact-type test: a subclass of
# these may override anything the fast calls skip, so it is not in the set.
_FAST_CLASSES = {Interpreter}


def allow_fast_calls(cls: type) -> type:
    """Let instances of ``cls``, a subclass that changes only ``__init__`` (and ``__new__``), take the fast calls.

    ``cls`` derives directly from Interpreter or from a class admitted before.

    The fast calls (``interpreter.fast_calls``) stand in for ``set_tensor``,
    ``get_tensor`` and ``invoke`` and skip the Python methods these call, so
    they serve a subclass only if it overrides none of Interpreter's methods:
    ``opaque_ops.compat``'s, which sets default arguments.

    Raises
    ------
    TypeError
        ``cls`` is not a direct subclass of an admitted class, or defines a
        method or an attribute other than ``__init__`` and ``__new__`` (and
        the data Python adds to a class).
    """
    if not isinstance(cls, type) or len(cls.__bases__) != 1 or cls.__bases__[0] not in _FAST_CLASSES:
        raise TypeError(f"allow_fast_calls takes a direct subclass of Interpreter, not {cls!r}")
    own = {
        name
        for name, value in vars(cls).items()
        if name not in ("__init__", "__new__")
        and (not (name.startswith("__") and name.endswith("__")) or callable(value))
    }
    if own:
        raise TypeError(f"{cls.__qualname__} defines {sorted(own)}: the fast calls would skip them")
    _FAST_CLASSES.add(cls)
    return cls


def model_content_bytes(content) -> bytes:
    """``model_content`` as bytes: any bytes-like object; a str or a number is refused.

    (``bytes(5)`` would be five zero bytes, and ``bytes("m.tflite")`` a
    TypeError about encodings.)
    """
    if type(content) is bytes:
        return content
    if isinstance(content, (str, os.PathLike)):
        raise TypeError(
            f"model_content takes the model's bytes, not a {type(content).__name__}; to read the file "
            f"{os.fspath(content)[:200]!r}, pass model_path= instead"
        )
    try:
        view = memoryview(content)
    except TypeError:
        view = None
    # (A numpy object array exports its PyObject pointers: format "O".)
    if view is None or "O" in view.format:
        what = f"{type(content).__name__} of Python objects" if view is not None else type(content).__name__
        raise TypeError(
            f"model_content takes the model's bytes (bytes, bytearray, memoryview or a numpy array), not {what}"
        )
    return view.tobytes()  # (a bytes subclass too: exact bytes, which pickle to an isolated worker)


def restore_interpreter(model_content, kwargs, state):
    """Re-create an interpreter in this process (the other half of ``Interpreter.__reduce__``).

    ``kwargs`` may hold ``isolate=True`` (an isolated interpreter re-created with its own worker).
    """
    it = Interpreter(model_content=model_content, **kwargs)
    for index, shape in state.get("resized", ()):
        it.resize_tensor_input(index, shape)
    if state.get("allocated"):
        it.allocate_tensors()
    return it
