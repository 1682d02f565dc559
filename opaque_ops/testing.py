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

from collections.abc import Sequence
from typing import Any

import numpy as np

# The in-process core lives in the interpreter layer (the isolated worker runs it too).
from .interpreter.one_op import GUARD_BYTES, GuardError, build_op_model, run_one_op  # noqa: F401


def _input_list(inputs: Any) -> list:
    """``inputs`` as a list, one entry per op input; a bare array is refused.

    An array is itself a sequence: taken as the list, its rows (or, for a
    vector, its scalars) would become the op's inputs, and the op would run
    on the wrong data without a word.
    """
    if isinstance(inputs, (list, tuple)):
        return list(inputs)
    if _array_like(inputs):
        shape = getattr(inputs, "shape", None)
        what = f"{type(inputs).__name__} of shape {tuple(shape)}" if shape is not None else type(inputs).__name__
        raise TypeError(
            f"run_op: inputs must be a list with one array per op input, got {what}; for an op with "
            "one input, pass inputs=[x]"
        )
    try:
        return list(inputs)
    except TypeError:
        raise TypeError(
            f"run_op: inputs must be a list with one array per op input, got {type(inputs).__name__}"
        ) from None


def _array_like(x: Any) -> bool:
    """One array (or scalar), not a list of them: numpy's, a buffer (array.array), or anything numpy converts (torch)."""
    if np.isscalar(x) or any(hasattr(x, a) for a in ("__array__", "__array_interface__", "__array_struct__")):
        return True
    try:
        memoryview(x)
    except TypeError:
        return False
    return True


def _as_op_list(ops: Any) -> list:
    if isinstance(ops, (list, tuple)):
        return list(ops)
    return [ops]


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
    input_quantization: Sequence[Any] = (),
    output_quantization: Sequence[Any] = (),
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
    inputs : sequence of array_like or None
        The op's inputs, in order.  Each becomes a model input fed at run time
        (or a constant, see ``constant_inputs``).  None leaves that position
        out, as a model omits an optional input: the node's input there is
        -1 (``kTfLiteOptionalTensor``) and the kernel's
        ``TfLiteOpaqueNodeGetInput`` returns NULL for it, while the node
        still counts it in ``TfLiteOpaqueNodeNumberOfInputs``.
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
        a kernel may read in Prepare); not a position given as None.
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
    input_quantization, output_quantization : sequence of mapping or None
        One entry per input (output) position, None for an unquantized
        tensor (and for an omitted input); a shorter list leaves the rest
        unquantized.  A mapping is
        ``{"scale": ..., "zero_point": ...}`` (lists for per-channel, with
        ``quantized_dimension``), as :meth:`opaque_ops.model.ModelBuilder.add_tensor`
        takes it: what a kernel reads with ``TfLiteOpaqueTensorGetQuantizationParams``.

    Returns
    -------
    list of numpy.ndarray
        Copies of the outputs.

    Raises
    ------
    TypeError
        ``inputs`` is one array (numpy's, a buffer such as ``array.array``,
        or anything with ``__array__``) or a scalar, not a list of them.
    ValueError
        A bad output spec or quantization list, or ``constant_inputs`` or
        ``input_quantization`` naming an input given as None.
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
    from .isolate import wants_isolation

    inputs = _input_list(inputs)
    if wants_isolation(isolate):
        from .isolate.run import run_op as run_isolated

        return run_isolated(
            _as_op_list(ops),
            dict(
                op_name=op_name,
                inputs=[None if a is None else np.asarray(a) for a in inputs],
                options=options,
                num_outputs=num_outputs,
                version=version,
                guard=guard,
                constant_inputs=constant_inputs,
                num_threads=num_threads,
                input_quantization=input_quantization,
                output_quantization=output_quantization,
            ),
            isolate=isolate,
            timeout=timeout,
        )
    return run_one_op(
        _as_op_list(ops),
        op_name,
        inputs,
        options=options,
        num_outputs=num_outputs,
        version=version,
        guard=guard,
        constant_inputs=constant_inputs,
        num_threads=num_threads,
        input_quantization=input_quantization,
        output_quantization=output_quantization,
    )


__all__ = ["run_op", "build_op_model", "GuardError", "GUARD_BYTES"]
