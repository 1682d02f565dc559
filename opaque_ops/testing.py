"""Test one custom op in isolation: ``run_op`` builds a one-op model and runs it.

::

    from opaque_ops.testing import run_op
    (y,) = run_op(lib, "Clamp", inputs=[x])

The op runs in the real runtime (:class:`opaque_ops.Interpreter`), and by
default every output lives in a buffer of our own with guard bytes on both
sides, so a kernel that writes past (or before) its output fails the call
with :class:`GuardError` instead of silently corrupting a neighbour.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from . import _native
from .errors import OpaqueOpsError

# Bytes of known pattern on each side of every guarded output.
GUARD_BYTES = 64
# Not a repeating single byte, so a kernel writing a constant (0, 0xFF, a
# float 1.0) over the guard is seen, and odd offsets are caught too.
_PATTERN = np.frombuffer(bytes([0xDE, 0xAD, 0xBE, 0xEF, 0x5A, 0xC3, 0x3C, 0xA5]), np.uint8)


class GuardError(OpaqueOpsError):
    """A kernel wrote outside its output buffer (into the guard bytes around it)."""


def _as_op_list(ops: Any) -> list:
    if isinstance(ops, (list, tuple)):
        return list(ops)
    return [ops]


def _norm_spec(spec: Any, default_shape: Sequence[int], default_dtype: Any) -> tuple[list[int], np.dtype]:
    if isinstance(spec, dict):
        unknown = set(spec) - {"shape", "dtype"}
        if unknown:
            raise ValueError(f"output spec keys are 'shape' and 'dtype'; unknown: {sorted(unknown)}")
        shape = spec.get("shape", default_shape)
        dtype = spec.get("dtype", default_dtype)
    else:
        try:
            shape, dtype = spec
        except (TypeError, ValueError):
            raise ValueError(
                f"output spec {spec!r} is not (shape, dtype) or a dict with 'shape'/'dtype'"
            ) from None
    return [int(d) for d in shape], np.dtype(dtype)


def _fill_pattern(buf: np.ndarray) -> None:
    reps = -(-buf.size // _PATTERN.size)
    buf[:] = np.tile(_PATTERN, reps)[: buf.size]


def _aligned_guarded(nbytes: int) -> tuple[np.ndarray, int]:
    """A pattern-filled uint8 buffer and the offset of a 64-byte aligned data region in it."""
    align = _native.TENSOR_ALIGNMENT
    raw = np.empty(nbytes + 2 * GUARD_BYTES + align, np.uint8)
    addr = raw.ctypes.data
    start = (-(addr + GUARD_BYTES)) % align + GUARD_BYTES
    _fill_pattern(raw)
    return raw, start


def _check_guards(op_name: str, pos: int, raw: np.ndarray, start: int, nbytes: int, expected: np.ndarray) -> None:
    before = np.nonzero(raw[:start] != expected[:start])[0]
    after = np.nonzero(raw[start + nbytes:] != expected[start + nbytes:])[0]
    if after.size:
        raise GuardError(
            f"kernel {op_name!r} wrote past the end of output {pos} (bytes {int(after[0])}..{int(after[-1])} "
            f"after the {nbytes}-byte buffer changed)"
        )
    if before.size:
        raise GuardError(
            f"kernel {op_name!r} wrote before the start of output {pos} (bytes "
            f"{start - int(before[-1])}..{start - int(before[0])} before the {nbytes}-byte buffer changed)"
        )


def build_op_model(
    op_name: str,
    inputs: Sequence[np.ndarray],
    outputs: Sequence[tuple[Sequence[int], Any]],
    options: dict | bytes | None = None,
    version: int = 1,
    constant_inputs: Sequence[int] = (),
) -> bytes:
    """Serialise a model made of one custom op.

    Parameters
    ----------
    op_name : str
        The custom op.
    inputs : sequence of numpy.ndarray
        One per op input; their shapes and dtypes become the model's.
    outputs : sequence of (shape, dtype)
        The declared output tensors (a kernel's Prepare may resize them).
    options : dict or bytes or None
        Custom options (a dict is flexbuffer-encoded).
    version : int
        The op version recorded in the model.
    constant_inputs : sequence of int
        Positions in ``inputs`` stored as constants in the model instead of
        being model inputs.

    Returns
    -------
    bytes
    """
    from .model import ModelBuilder

    b = ModelBuilder(description=f"opaque_ops.testing: one {op_name} op")
    const = {int(i) for i in constant_inputs}
    bad = [i for i in const if not 0 <= i < len(inputs)]
    if bad:
        raise ValueError(f"constant_inputs {bad} out of range for {len(inputs)} inputs")
    in_idx, model_inputs = [], []
    for i, arr in enumerate(inputs):
        if i in const:
            in_idx.append(b.add_constant(f"const{i}", arr))
        else:
            t = b.add_tensor(f"input{i}", list(arr.shape), arr.dtype)
            in_idx.append(t)
            model_inputs.append(t)
    out_idx = [b.add_tensor(f"output{i}", shape, dtype) for i, (shape, dtype) in enumerate(outputs)]
    b.add_custom_op(op_name, in_idx, out_idx, options=options, version=version)
    b.set_inputs(model_inputs)
    b.set_outputs(out_idx)
    return b.build()


def run_op(
    ops: Any,
    op_name: str,
    inputs: Sequence[Any],
    options: dict | bytes | None = None,
    num_outputs: int | Sequence[Any] = 1,
    version: int = 1,
    guard: bool = True,
    constant_inputs: Sequence[int] = (),
    num_threads: int | None = None,
    isolate: Any = None,
    timeout: float | None = None,
) -> list[np.ndarray]:
    """Run one custom op on the given inputs and return its outputs.

    Parameters
    ----------
    ops : op library or list of them
        What provides the op (:func:`opaque_ops.compile_ops`,
        :func:`opaque_ops.load_ops`, :func:`opaque_ops.python_op`, a kernels
        bundle, or a path to a prebuilt library).
    op_name : str
        The custom op name.
    inputs : sequence of array_like
        The op's inputs, in order.  Each becomes a model input fed at run time
        (or a constant, see ``constant_inputs``).
    options : dict, bytes or None
        The op's custom options; a dict is encoded as a flexbuffer map.
    num_outputs : int or sequence
        Either a count (shapes come from the kernel's Prepare; dtype defaults
        to the first input's), or one spec per output: ``(shape, dtype)`` or
        ``{"shape": ..., "dtype": ...}`` (either key may be left out).
    version : int
        The op version written into the model.
    guard : bool
        Put each output in a buffer with guard bytes around it and check them
        after the run (default).  False runs with TFLite's own allocation.
    constant_inputs : sequence of int
        Input positions stored as constant tensors in the model (e.g. weights
        a kernel may read in Prepare).
    num_threads : int, optional
        Passed to the Interpreter.
    isolate : bool or opaque_ops.isolate.Worker, optional
        Run the whole call in a worker process: a kernel that crashes raises
        :class:`opaque_ops.RuntimeCrashError` (with the C backtrace) instead
        of killing this process.  None: False, unless
        :func:`opaque_ops.isolate.isolate_by_default` (or the pytest
        plugin's ``isolate`` marker) is in effect.  The ops must be able to
        travel (libraries by path; Python ops with importable functions).
    timeout : float, optional
        With ``isolate``: seconds before the worker is stopped
        (:class:`opaque_ops.RuntimeTimeoutError`).

    Returns
    -------
    list of numpy.ndarray
        Copies of the outputs.

    Raises
    ------
    GuardError
        The kernel wrote outside an output's buffer.
    KernelError, UnresolvedOpsError
        As raised by the Interpreter (the kernel failed, or ``ops`` lacks the op).
    RuntimeCrashError, RuntimeTimeoutError
        With ``isolate``: the kernel crashed the worker, or ran past ``timeout``.

    Notes
    -----
    Guarding uses ``TfLiteInterpreterSetCustomAllocationForTensor``: the model
    is allocated once so that Prepare sets the output shapes, then each output
    gets a 64-byte aligned buffer of exactly its size with ``GUARD_BYTES`` of a
    fixed pattern before and after, and tensors are allocated again.  Writes
    within the guard distance are detected; wilder writes may corrupt other
    memory before anything can notice.
    """
    from .interpreter.core import Interpreter
    from .isolate import wants_isolation

    if wants_isolation(isolate):
        from .isolate.run import run_op as run_isolated

        return run_isolated(_as_op_list(ops), dict(
            op_name=op_name, inputs=[np.asarray(a) for a in inputs], options=options, num_outputs=num_outputs,
            version=version, guard=guard, constant_inputs=constant_inputs, num_threads=num_threads,
        ), isolate=isolate, timeout=timeout)
    arrays = [np.asarray(a) for a in inputs]
    if isinstance(num_outputs, (bool, np.bool_)):
        raise TypeError("num_outputs must be an int or a list of output specs")
    default_shape = list(arrays[0].shape) if arrays else [1]
    default_dtype = arrays[0].dtype if arrays else np.dtype(np.float32)
    if isinstance(num_outputs, (int, np.integer)):
        if num_outputs < 1:
            raise ValueError("num_outputs must be at least 1")
        specs = [(default_shape, default_dtype)] * int(num_outputs)
    else:
        specs = [_norm_spec(s, default_shape, default_dtype) for s in num_outputs]
        if not specs:
            raise ValueError("num_outputs must name at least one output")
    data = build_op_model(op_name, arrays, specs, options=options, version=version,
                          constant_inputs=constant_inputs)
    it = Interpreter(model_content=data, custom_ops=_as_op_list(ops), num_threads=num_threads)
    it.allocate_tensors()
    native = it._live()
    out_indices = native.output_indices()
    guards = []
    if guard:
        for pos, idx in enumerate(out_indices):
            t = native.tensor(idx)
            nbytes = t.nbytes
            raw, start = _aligned_guarded(nbytes)
            status = native.set_custom_allocation(idx, raw[start:start + max(nbytes, 1)])
            if status != 0:
                msgs = native.sink.take()
                raise OpaqueOpsError(
                    f"could not attach a guarded buffer to output {pos} of {op_name!r}: "
                    + ("; ".join(msgs) or f"status {status}")
                    + " (pass guard=False to run without guard bytes)"
                )
            guards.append((pos, idx, raw, start, nbytes, raw.copy()))
        # Prepare runs again; the tensors now point into our buffers.
        it.allocate_tensors()
    for det, arr in zip(it.get_input_details(), [a for i, a in enumerate(arrays)
                                                 if i not in {int(c) for c in constant_inputs}]):
        it.set_tensor(det["index"], arr)
    it.invoke()
    results = []
    for pos, idx in enumerate(out_indices):
        t = native.tensor(idx)
        if guard:
            _, _, raw, start, nbytes, expected = guards[pos]
            if t.nbytes != nbytes:
                raise GuardError(
                    f"output {pos} of {op_name!r} changed size from {nbytes} to {t.nbytes} bytes "
                    "during invoke (resize outputs in Prepare, not Invoke)"
                )
            view = t.view()
            if nbytes and (view is None or view.ctypes.data != raw.ctypes.data + start):
                raise OpaqueOpsError(
                    f"output {pos} of {op_name!r} no longer lives in its guarded buffer "
                    "(the runtime reallocated it); pass guard=False"
                )
            _check_guards(op_name, pos, raw, start, nbytes, expected)
        results.append(it.get_tensor(idx))
    # Drop the interpreter before the buffers it points into.
    it.close()
    del native, it
    return results


__all__ = ["run_op", "build_op_model", "GuardError", "GUARD_BYTES"]
