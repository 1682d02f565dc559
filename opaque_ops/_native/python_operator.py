"""Python ops: ``TfLiteOperator`` objects whose callbacks are Python functions.

Ownership
---------
Every Python op's operator calls the same four C trampolines, created once
per process; the operator's ``user_data`` is a small integer key into
``_records``.  A record refers to its Python op *weakly*, so the op (and the
callables it owns, with everything they capture) goes away with its last
reference.  An interpreter keeps the op alive for as long as it may call it:
it holds the :class:`PyOperator`, which holds the op.

The C operator itself is deleted once nothing can call it any more: its
:class:`PyOperator` is gone *and* every interpreter it was added to has been
deleted (``NativeInterpreter.close`` calls :meth:`PyOperator.release`).  Both
events are counted explicitly because the garbage collector finalizes
objects in a reference cycle in any order, and TFLite calls an operator's
``free`` while it deletes an interpreter.
"""

from __future__ import annotations

import _thread  # threading's locks, without importing threading (CONTRIBUTING.md, "The start-up path")
import itertools
import os
import weakref

import numpy as _np

from ..errors import OpLibraryError
from . import runtime_loader as _rtmod
from .ffi import ffi
from .kernel_library import Operator
from .lifetime import Shared
from .native_interpreter import TFLITE_TO_NUMPY
from .pending import stash_exception
from .runtime_loader import load_runtime

# kTfLiteBuiltinCustom: the builtin code of every custom operator.
_BUILTIN_CUSTOM = 32
_K_ERROR = 1


class OpaqueNodeView:
    """What a Python op's callbacks may do with one node (valid during the callback only)."""

    __slots__ = ("_ctx", "_node")

    def __init__(self, ctx, node):
        self._ctx = ctx
        self._node = node

    def num_inputs(self) -> int:
        return int(_rtmod._runtime.lib.TfLiteOpaqueNodeNumberOfInputs(self._node))

    def user_key(self) -> int:
        """The integer the op's init() returned for this node."""
        return int(ffi.cast("intptr_t", _rtmod._runtime.lib.TfLiteOpaqueNodeGetUserData(self._node)))

    def num_outputs(self) -> int:
        return int(_rtmod._runtime.lib.TfLiteOpaqueNodeNumberOfOutputs(self._node))

    def _input(self, i):
        t = _rtmod._runtime.lib.TfLiteOpaqueNodeGetInput(self._ctx, self._node, i)
        if t == ffi.NULL:
            raise ValueError(f"input {i} is missing (optional input not given)")
        return t

    def _output(self, i):
        t = _rtmod._runtime.lib.TfLiteOpaqueNodeGetOutput(self._ctx, self._node, i)
        if t == ffi.NULL:
            raise ValueError(f"output {i} is missing")
        return t

    @staticmethod
    def _meta(t):
        lib = _rtmod._runtime.lib
        ttype = int(lib.TfLiteOpaqueTensorType(t))
        n = lib.TfLiteOpaqueTensorNumDims(t)
        shape = tuple(int(lib.TfLiteOpaqueTensorDim(t, d)) for d in range(max(n, 0)))
        return ttype, shape

    @classmethod
    def _array(cls, t, writable: bool, what: str):
        lib = _rtmod._runtime.lib
        ttype, shape = cls._meta(t)
        dtype = TFLITE_TO_NUMPY.get(ttype)
        if dtype is None or dtype == object:
            raise TypeError(f"{what} has TfLiteType {ttype}, which has no numpy equivalent")
        nbytes = int(lib.TfLiteOpaqueTensorByteSize(t))
        data = lib.TfLiteOpaqueTensorData(t)
        if nbytes == 0 or data == ffi.NULL:
            return _np.zeros(shape, dtype)
        arr = _np.frombuffer(ffi.buffer(data, nbytes), dtype=dtype).reshape(shape)
        if not writable:
            arr.flags.writeable = False
        return arr

    def input_meta(self, i):
        """``(numpy dtype or None, shape)`` of input ``i``."""
        ttype, shape = self._meta(self._input(i))
        return TFLITE_TO_NUMPY.get(ttype), shape

    def input_array(self, i):
        """A read-only numpy view of input ``i``'s memory."""
        return self._array(self._input(i), False, f"input {i}")

    def output_array(self, i):
        """A writable numpy view of output ``i``'s memory."""
        return self._array(self._output(i), True, f"output {i}")

    def resize_output(self, i, shape) -> int:
        dims = [int(d) for d in shape]
        arr = _rtmod._runtime.lib.TfLiteIntArrayCreate(len(dims))
        if arr == ffi.NULL:
            return 1
        for k, d in enumerate(dims):
            arr.data[k] = d
        # The runtime owns ``arr`` from here on, whatever the result.
        return int(_rtmod._runtime.lib.TfLiteOpaqueContextResizeTensor(self._ctx, self._output(i), arr))

    def report(self, message: str) -> None:
        """Send ``message`` to the interpreter's error reporter."""
        text = ffi.new("char[]", message.encode("utf-8", "replace"))
        _rtmod._runtime.lib.TfLiteOpaqueContextReportError(self._ctx, b"%s", ffi.cast("char*", text))


class _Record:
    """What the trampolines need to reach one operator's Python op."""

    __slots__ = ("key", "ptr", "cname", "target", "shared", "callbacks")

    def __init__(self, key, cname, target):
        self.key = key
        self.ptr = None
        # Keep-alive: TfLiteOperatorCreate does not copy the custom name.
        self.cname = cname
        self.target = weakref.ref(target)
        self.shared = Shared(lambda: _delete(self))
        self.callbacks = ()  # per-operator closures (registration-external runtimes only)


_records: dict[int, _Record] = {}
# Guards the check-and-create of _trampolines and the state a fork copies.
# Never taken by a finalizer (see _delete).  Reentrant, so that code that
# forks on a thread inside that region (a signal handler) does not wait for
# itself in _before_fork.
_records_lock = _thread.RLock()
_keys = itertools.count(1)


# A fork while another thread held _records_lock left the child's copy held
# by a thread the child does not have: the child's first Python op waited
# forever.  The lock is held only for a few dict operations or the four
# callbacks' creation, so a fork takes it for its duration: the child starts
# with _records and _trampolines as no thread was changing them, and with the
# lock held by the forking thread, which releases it there as in the parent
# (a reentrant lock knows its holder by thread id, and fork keeps that
# thread's id).  tests/native/test_python_operator.py forks while a thread is
# inside _static_trampolines.
def _before_fork() -> None:
    _records_lock.acquire()


def _after_fork() -> None:
    _records_lock.release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork)


def _target(user_data):
    rec = _records.get(int(ffi.cast("intptr_t", user_data)))
    return None if rec is None else rec.target()


def _on_init(user_data, ctx, buf, length):
    target = _target(user_data)
    if target is None:
        return ffi.NULL  # TFLite then calls no free() for the node
    data = ffi.unpack(buf, length) if buf != ffi.NULL and length else b""
    return ffi.cast("void*", target._on_init(data))


def _on_free(user_data, ctx, data):
    target = _target(user_data)
    if target is not None:
        target._on_free(int(ffi.cast("intptr_t", data)))


def _on_prepare(user_data, ctx, node):
    target = _target(user_data)
    return _K_ERROR if target is None else target._on_prepare(OpaqueNodeView(ctx, node))


def _on_invoke(user_data, ctx, node):
    target = _target(user_data)
    return _K_ERROR if target is None else target._on_invoke(OpaqueNodeView(ctx, node))


def _init_failed(exc_type, exc_value, tb):
    # Only a signal (Ctrl-C) can raise here: park it for the Interpreter.
    if exc_value is not None:
        stash_exception(exc_value)


_trampolines = None


def _static_trampolines():
    """The four C entry points every Python op shares, created once per process."""
    global _trampolines
    # Made and read under the lock: two threads making their first Python ops
    # at once each made a set, and the set that the other's assignment
    # replaced was freed when its maker returned, while the operator it was
    # given to still pointed at it (TFLite then called freed closures:
    # SIGSEGV; tests/native/test_python_operator.py).
    with _records_lock:
        if _trampolines is None:
            _trampolines = (
                ffi.callback("oo_py_init_wd", _on_init, onerror=_init_failed),
                ffi.callback("oo_py_free_wd", _on_free, onerror=_init_failed),
                ffi.callback("oo_py_step_wd", _on_prepare, error=_K_ERROR, onerror=_init_failed),
                ffi.callback("oo_py_step_wd", _on_invoke, error=_K_ERROR, onerror=_init_failed),
            )
        return _trampolines


def _key_closures(key: int):
    """Callbacks for runtimes without operator ``user_data`` (the
    registration-external generation, TFLite <= 2.16): one set per operator,
    holding only the key, released with the operator."""
    ud = ffi.cast("void*", key)
    return (
        ffi.callback("oo_py_init", lambda ctx, buf, n: _on_init(ud, ctx, buf, n), onerror=_init_failed),
        ffi.callback("oo_py_free", lambda ctx, data: _on_free(ud, ctx, data), onerror=_init_failed),
        ffi.callback("oo_py_step", lambda ctx, node: _on_prepare(ud, ctx, node), error=_K_ERROR, onerror=_init_failed),
        ffi.callback("oo_py_step", lambda ctx, node: _on_invoke(ud, ctx, node), error=_K_ERROR, onerror=_init_failed),
    )


def _create(rt, rec: _Record, version: int):
    """Create the C operator for ``rec``; return its pointer (NULL on failure)."""
    ud = ffi.cast("void*", rec.key)
    lib = rt.lib
    if rt.has("TfLiteOperatorCreateWithData"):  # TFLite 2.17
        ptr = lib.TfLiteOperatorCreateWithData(_BUILTIN_CUSTOM, rec.cname, int(version), ud)
    elif rt.create_takes_user_data:  # 2.18+: Create takes the user data as a 4th argument
        create4 = ffi.cast("TfLiteOperator*(*)(int, const char*, int, void*)", lib.TfLiteOperatorCreate)
        ptr = create4(_BUILTIN_CUSTOM, rec.cname, int(version), ud)
    else:
        # No user data to carry the key: per-operator closures hold it.
        if rt.generation == "operator":
            create = lib.TfLiteOperatorCreate
            setters = (
                lib.TfLiteOperatorSetInit,
                lib.TfLiteOperatorSetFree,
                lib.TfLiteOperatorSetPrepare,
                lib.TfLiteOperatorSetInvoke,
            )
        else:
            create = lib.TfLiteRegistrationExternalCreate
            setters = (
                lib.TfLiteRegistrationExternalSetInit,
                lib.TfLiteRegistrationExternalSetFree,
                lib.TfLiteRegistrationExternalSetPrepare,
                lib.TfLiteRegistrationExternalSetInvoke,
            )
        ptr = create(_BUILTIN_CUSTOM, rec.cname, int(version))
        if ptr != ffi.NULL:
            rec.callbacks = _key_closures(rec.key)
            for setter, cb in zip(setters, rec.callbacks):
                setter(ptr, cb)
        return ptr
    if ptr != ffi.NULL:
        init, free, prepare, invoke = _static_trampolines()
        lib.TfLiteOperatorSetInitWithData(ptr, init)
        lib.TfLiteOperatorSetFreeWithData(ptr, free)
        lib.TfLiteOperatorSetPrepareWithData(ptr, prepare)
        lib.TfLiteOperatorSetInvokeWithData(ptr, invoke)
    return ptr


def _delete(rec: _Record) -> None:
    """Delete the C operator: no PyOperator and no interpreter can reach it any more."""
    # No lock: this runs in finalizers (PyOperator.__del__, an interpreter's
    # deletion), on whatever thread a collection starts, and a finalizer must
    # not wait for a lock that its holder keeps while it waits for something
    # else.  os.fork() holds _records_lock (_before_fork) and then takes the
    # import lock; a thread that held the import lock (importlib allocates
    # under it) and collected a garbage operator waited here for
    # _records_lock: a deadlock (tests/native/test_python_operator.py).  One
    # dict.pop is atomic on its own (the GIL; a free-threaded dict locks
    # itself), so the lock added nothing here.
    _records.pop(rec.key, None)
    ptr, rec.ptr = rec.ptr, None
    rt = _rtmod._runtime
    if ptr is not None and rt is not None and rt.has("TfLiteOperatorDelete"):
        rt.lib.TfLiteOperatorDelete(ptr)


class PyOperator(Operator):
    """The operator of one Python op, as handed to interpreters.

    It holds the Python op (so an interpreter that holds this keeps the op's
    callables alive) and counts the interpreters it was added to.
    """

    def __init__(self, rec: _Record, owner):
        self._record = rec
        super().__init__(rec.ptr, owner=owner)

    def hold(self) -> None:
        """An interpreter now points at this operator (called when it is added to options)."""
        self._record.shared.hold()

    def release(self) -> None:
        """An interpreter that pointed at this operator has been deleted."""
        self._record.shared.release()

    def __del__(self):
        rec = getattr(self, "_record", None)
        if rec is None:
            return
        try:
            rec.shared.abandon()
        except Exception:  # pragma: no cover - interpreter shutdown: the process frees it
            pass


def make_python_operator(name: str, version: int, target) -> PyOperator:
    """Create a ``TfLiteOperator`` whose callbacks are ``target``'s methods.

    ``target`` is held weakly here and strongly by the returned operator.
    It provides ``_on_init(options: bytes) -> int`` (a non-zero key for the
    node's state), ``_on_free(key)``, ``_on_prepare(node_view) -> int status``
    and ``_on_invoke(node_view) -> int status``.  They must not raise: they
    run inside C frames (exceptions go through :func:`stash_exception`).
    """
    rt = load_runtime()
    rt.require_custom_ops(f"python_op {name!r}")
    rec = _Record(next(_keys), ffi.new("char[]", name.encode("utf-8")), target)
    with _records_lock:
        _records[rec.key] = rec
    ptr = _create(rt, rec, version)
    if ptr == ffi.NULL:
        with _records_lock:
            _records.pop(rec.key, None)
        raise OpLibraryError(f"TFLite could not create an operator for Python op {name!r}")
    rec.ptr = ptr
    return PyOperator(rec, target)


def live_python_operators() -> int:
    """How many Python-op operators exist in C right now (for leak tests)."""
    return len(_records)
