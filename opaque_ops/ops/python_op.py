"""Custom ops written in Python with numpy, for prototyping kernels.

A Python op registers with TFLite like a C kernel and mixes freely with C ops
and builtins in one interpreter::

    def clamp(inputs, outputs):
        np.clip(inputs[0], 0.0, 1.0, out=outputs[0])

    it = opaque_ops.Interpreter(model_path="m.tflite",
                                custom_ops=[opaque_ops.python_op("Clamp", invoke=clamp)])

This path is for prototyping and testing: the op's Python code holds the GIL
while it runs (the rest of ``invoke()`` releases it), and each call pays the
Python callback cost (microseconds).  Port the op to C once it is right.
"""

from __future__ import annotations

import itertools
import pickle
import sys
import threading
import weakref
from collections import namedtuple
from typing import Callable

import numpy as np

from .. import _native
from .._records import renew_each_after_fork
from ..errors import KernelError
from .provider import OpProvider

TensorSpec = namedtuple("TensorSpec", ["shape", "dtype"])
TensorSpec.__doc__ = "Shape (tuple of int) and numpy dtype of one of the op's input tensors."

_K_OK = 0
_K_ERROR = 1
# sys.getrefcount of an array over TFLite's memory in _on_invoke's check when
# nothing else holds it: the owners list's tuple, the loop variable, the argument.
_OWNER_REFS = 3


class PythonOp(OpProvider):
    """One custom op implemented in Python; pass it in ``custom_ops=[...]``.

    Created by :func:`python_op`.  It behaves like an ``OpLibrary`` with a
    single op: ``.ops``, ``.names`` and ``.operators()``.

    Attributes
    ----------
    name : str
    version : int
    """

    def __init__(self, name: str, version: int, invoke: Callable, prepare: Callable | None, init: Callable | None):
        self.name = name
        self.version = version
        self._invoke = invoke
        self._prepare = prepare
        self._init = init
        # Node states from init(), keyed by a small integer that TFLite
        # carries as the node's user data (never a pointer into Python).
        self._states: dict[int, object] = {}
        self._keys = itertools.count(1)
        # Reentrant: deleting an interpreter (which a garbage collection can
        # do at any allocation) calls free() on this op's nodes.
        self._states_lock = threading.RLock()
        # Ownership: the op owns its callables.  Its C operator is shared by
        # the interpreters that use the op and refers back to it weakly, so
        # `del op` frees the callables (and what they capture) unless an
        # interpreter still holds the operator, which holds the op.  Cached
        # weakly for the same reason: op -> operator -> op would be a cycle.
        self._operator_ref = lambda: None
        self._operator_lock = threading.Lock()
        _python_ops.add(self)

    # ------------------------------------------------------------ library API
    def operators(self) -> list:
        """The op's operator (internal handle); interpreters keep it, and through it the op."""
        with self._operator_lock:
            op = self._operator_ref()
            if op is None:
                op = _native.make_python_operator(self.name, self.version, self)
                self._operator_ref = weakref.ref(op)
            return [op]

    @property
    def ops(self) -> list[tuple[str, int]]:
        """``[(name, version)]``."""
        return [(self.name, self.version)]

    @property
    def names(self) -> list[str]:
        """``[name]``."""
        return [self.name]

    def __repr__(self) -> str:
        return f"<PythonOp {self.name} v{self.version}>"

    def functions(self) -> dict:
        """``{"invoke": ..., "prepare": ..., "init": ...}``: the op's callables (None where not given)."""
        return {"invoke": self._invoke, "prepare": self._prepare, "init": self._init}

    def __reduce__(self):
        # By reference to its functions, which must be importable by module
        # and name in the receiving process (a pickle, a pool, the isolated worker).
        fns = self.functions()
        for what, fn in fns.items():
            if fn is None:
                continue
            try:
                pickle.dumps(fn)
            except Exception as exc:  # noqa: BLE001 - lambdas, closures, local classes
                raise pickle.PicklingError(
                    f"python_op {self.name!r} cannot be sent to another process: its {what} function "
                    f"{getattr(fn, '__qualname__', fn)!r} is not importable by module and name "
                    f"({type(exc).__name__}: {exc}). Define it at module level in a module the worker "
                    "can import, or create the op inside the worker"
                ) from None
        return python_op, (self.name, fns["invoke"], fns["prepare"], fns["init"], self.version)

    # ------------------------------------------------------- TFLite callbacks
    # These run inside TFLite's C frames: they never let an exception escape.
    # A failure is reported to TFLite (so the runtime sees kTfLiteError and
    # logs a line) and the exception itself is parked for Interpreter to
    # re-raise once the C call has returned.

    def _fail(self, node, stage: str, exc: BaseException) -> int:
        _native.stash_exception(exc)
        if node is not None:
            try:
                node.report(f"Python op {self.name!r} {stage}: {type(exc).__name__}: {exc}")
            except Exception:  # pragma: no cover - reporting must not fail the failure path
                pass
        return _K_ERROR

    def _on_init(self, options: bytes) -> int:
        with self._states_lock:
            key = next(self._keys)
        try:
            state = self._init(options) if self._init is not None else None
        except BaseException as exc:  # noqa: BLE001 - re-raised from Interpreter
            # init cannot fail in TFLite; prepare turns this into the error.
            state = _InitFailed(exc)
        with self._states_lock:
            self._states[key] = state
        return key

    def _on_free(self, key: int) -> None:
        with self._states_lock:
            state = self._states.pop(key, None)
        # Dropped after the lock: freeing a state runs its objects'
        # finalizers (an interpreter it owns is deleted, which takes
        # lifetime's lock).  Under _states_lock, that waited for a thread
        # that held lifetime's lock and had started a collection whose
        # finalizer (another interpreter with this op) called this free() and
        # waited for _states_lock: a deadlock (tests/ops/test_pyop.py).
        del state

    def _state(self, node):
        # The node's user data is the key init() returned.
        return self._states.get(node.user_key())

    def _on_prepare(self, node) -> int:
        try:
            state = self._state(node)
            if isinstance(state, _InitFailed):
                raise state.exc
            n_in, n_out = node.num_inputs(), node.num_outputs()
            specs = [TensorSpec(*reversed(node.input_meta(i))) for i in range(n_in)]
            if self._prepare is None:
                if n_in == 0:
                    raise ValueError("prepare=None copies input 0's shape, but the node has no inputs")
                shapes = [specs[0].shape] * n_out
            else:
                result = self._prepare(specs, state) if self._init is not None else self._prepare(specs)
                shapes = _as_shape_list(result, n_out)
            for i, shape in enumerate(shapes):
                if node.resize_output(i, shape) != 0:
                    raise ValueError(f"TFLite refused to resize output {i} to {shape}")
            return _K_OK
        except BaseException as exc:  # noqa: BLE001
            return self._fail(node, "prepare", exc)

    def _on_invoke(self, node) -> int:
        owners: list = []
        n_in = 0
        outer = None
        try:
            state = self._state(node)
            inputs = [node.input_array(i) for i in range(node.num_inputs())]
            outputs = [node.output_array(i) for i in range(node.num_outputs())]
            n_in = len(inputs)
            # The arrays over TFLite's memory (every view the callback makes of
            # one refers to it): counted again once the callback has returned.
            owners = [(k, a.base) for k, a in enumerate(inputs + outputs) if a.base is not None]
            outer = sys.exc_info()[1]  # (the caller's, if invoke() was called in an except block)
            self._call_invoke(inputs, outputs, state)
            del inputs, outputs
            kept = _kept(owners)
            if kept:  # (not raised: the except clause below is for what the op raised)
                return self._fail(node, "invoke", KernelError(self._kept_message(kept, n_in)))
            return _K_OK
        except BaseException as exc:  # noqa: BLE001
            inputs = outputs = None  # noqa: F841 - this frame's own, which its traceback keeps (see _failed_invoke)
            error = self._failed_invoke(exc, owners, n_in, outer)
            owners = None
            return self._fail(node, "invoke", error)

    def _failed_invoke(self, exc: BaseException, owners: list, n_in: int, outer) -> BaseException:
        """The exception an invoke that raised ``exc`` ends with: ``exc``, unless it leaves views behind.

        ``exc``'s traceback holds the frames of the op's code, and their
        local variables hold the views of TFLite's memory the op was given
        (its ``inputs`` and ``outputs`` arguments, at least).  The exception
        outlives the call (it is raised from ``invoke()``, kept by
        ``sys.last_value`` or a logger, read by a debugger), and the memory
        does not: TFLite reuses it, and frees it with the interpreter, so a
        debugger that reads those locals after ``close()`` reads freed
        memory.  So the frames' local variables are cleared (the traceback's
        lines stay; ``outer``, the exception the caller was handling when it
        called ``invoke()``, keeps its frames), and then the views are
        counted as on success: one kept anywhere else (in a global, in the
        op's state, in the exception's own arguments) makes the error a
        :class:`KernelError`, as it would be had the op returned.
        """
        _native.clear_frames(exc, outer)
        if owners:
            kept = _kept(owners)
            if kept:
                error = KernelError(
                    self._kept_message(kept, n_in) + f" (The op also raised {type(exc).__name__}: {exc})"
                )
                error.__cause__ = exc
                return error
        return exc

    def _call_invoke(self, inputs, outputs, state) -> None:
        result = self._invoke(inputs, outputs, state) if self._init is not None else self._invoke(inputs, outputs)
        if result is not None:
            results = [result] if isinstance(result, np.ndarray) or len(outputs) == 1 else list(result)
            if len(results) != len(outputs):
                raise ValueError(f"invoke returned {len(results)} arrays for {len(outputs)} outputs")
            for i, (out, res) in enumerate(zip(outputs, results)):
                res = np.asarray(res)
                if res.shape != out.shape:
                    raise ValueError(
                        f"invoke returned shape {res.shape} for output {i}, whose shape is {out.shape} (set in prepare)"
                    )
                np.copyto(out, res, casting="same_kind")

    def _kept_message(self, kept: list, n_in: int) -> str:
        names = ", ".join(f"inputs[{k}]" if k < n_in else f"outputs[{k - n_in}]" for k in kept)
        return (
            f"Python op {self.name!r}: its invoke kept {names} (or a view of it) after returning, e.g. in a "
            "list, in its state or in a global. Those arrays are views of the interpreter's memory, valid only "
            "during the call: TFLite reuses and frees that memory, so a kept array would later read other "
            "values or write into freed memory. Keep a copy instead (outputs[0].copy(), np.array(inputs[0]))."
        )


def _kept(owners: list) -> list:
    """The positions whose array over TFLite's memory is still referenced from elsewhere."""
    return [k for k, owner in owners if sys.getrefcount(owner) > _OWNER_REFS]


# Every PythonOp of the process, for the fork handler below.
_python_ops: weakref.WeakSet = weakref.WeakSet()


# A Python op made before a fork (a module-level python_op, then a
# process pool) reaches the child; if another thread was making its
# operator, or initializing or freeing one of its nodes, at the fork, the
# child's copy of that lock stayed held by a thread the child does not
# have, and the child's first interpreter with the op waited forever.
# Re-created: the operator is stored once made, and a node state is
# stored or removed in one step, so the child finds each done or not
# (a state the other thread's node was getting is never freed: that node
# does not exist here).  tests/ops/test_pyop.py forks inside both.
renew_each_after_fork(_python_ops, _operator_lock=threading.Lock, _states_lock=threading.RLock)


class _InitFailed:
    __slots__ = ("exc",)

    def __init__(self, exc):
        self.exc = exc


def _as_shape_list(result, n_out: int) -> list[tuple[int, ...]]:
    """Accept one shape (for a single output) or one shape per output."""
    if result is None:
        raise ValueError("prepare returned None; return the output shape(s)")
    seq = list(result)
    if all(isinstance(d, (int, np.integer)) for d in seq):
        seq = [seq]
    shapes = [tuple(int(d) for d in s) for s in seq]
    if len(shapes) != n_out:
        raise ValueError(f"prepare returned {len(shapes)} shapes for {n_out} outputs")
    for s in shapes:
        if any(d < 0 for d in s):
            raise ValueError(f"prepare returned a negative dimension in {s}")
    return shapes


def python_op(
    name: str, invoke: Callable, prepare: Callable | None = None, init: Callable | None = None, version: int = 1
) -> PythonOp:
    """Register a custom op implemented in Python (numpy).

    Parameters
    ----------
    name : str
        The custom op name the model uses (case-sensitive).
    invoke : callable
        ``invoke(inputs, outputs)`` where ``inputs`` are read-only numpy views
        of the input tensors and ``outputs`` writable views of the outputs
        (already shaped by prepare).  Either write into ``outputs`` and return
        None, or return the result: one array (single output) or a sequence of
        arrays, one per output, copied in (shape must match exactly; dtypes are
        cast with ``same_kind`` rules).  The views are valid only during the call.
    prepare : callable, optional
        ``prepare(inputs) -> shapes``; ``inputs`` is a list of
        :class:`TensorSpec` ``(shape, dtype)``.  Return one shape per output
        (a single shape is accepted for a one-output op).  None: every output
        gets input 0's shape.  Output dtypes come from the model.
    init : callable, optional
        ``init(options: bytes) -> state``, called once per node with the
        node's raw custom options (decode flexbuffers with
        :func:`opaque_ops.model.decode_flex_options`).  When given, ``state`` is
        passed as an extra last argument to ``prepare`` and ``invoke``.
    version : int
        The op version; it must equal the model's.

    Returns
    -------
    PythonOp
        Pass it in ``Interpreter(custom_ops=[...])``.

    Notes
    -----
    An exception raised by ``init``, ``prepare`` or ``invoke`` is re-raised
    by ``Interpreter.allocate_tensors()`` / ``invoke()`` with its original
    traceback.  The op holds the GIL while it runs: use it to prototype and
    to test C kernels against, not in production.  The op owns its
    callables: once neither your code nor an interpreter refers to it, they
    are released with everything they capture.  A callback that calls back
    into the interpreter running it (``invoke``, ``set_tensor``, ...) gets
    :class:`~opaque_ops.ReentrantCallError`.
    """
    if not isinstance(name, str) or not name:
        raise ValueError("python_op name must be a non-empty string")
    if not callable(invoke):
        raise TypeError("invoke must be callable: invoke(inputs, outputs)")
    for what, fn in (("prepare", prepare), ("init", init)):
        if fn is not None and not callable(fn):
            raise TypeError(f"{what} must be callable or None")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"version must be a positive int, got {version!r}")
    state = ", state" if init is not None else ""
    _check_arguments(name, "invoke", invoke, f"inputs, outputs{state}")
    _check_arguments(name, "prepare", prepare, f"inputs{state}")
    _check_arguments(name, "init", init, "options")
    return PythonOp(name, version, invoke, prepare, init)


def _check_arguments(op: str, what: str, fn: Callable | None, takes: str) -> None:
    """``fn`` can be called with the arguments ``takes`` names; TypeError now, not inside ``invoke()``.

    A callable whose signature Python cannot read (some builtins) is let through.
    """
    if fn is None:
        return
    import inspect

    try:
        # (Not through __wrapped__: a decorator's wrapper is what gets called.)
        sig = inspect.signature(fn, follow_wrapped=False)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(*takes.split(", "))
    except TypeError as exc:
        label = getattr(fn, "__qualname__", None) or type(fn).__name__
        raise TypeError(
            f"python_op {op!r}: {what} is called as {what}({takes}), but {label}{sig} cannot take that ({exc})"
        ) from None


__all__ = ["python_op", "PythonOp", "TensorSpec"]
