"""One custom op in a model of its own: the in-process core of ``opaque_ops.testing.run_op``.

:func:`build_op_model` writes the one-op model; :func:`run_one_op` runs it
in an :class:`~opaque_ops.interpreter.core.Interpreter`, by default with
every output in a buffer of our own with guard bytes on both sides, so a
kernel that writes past (or before) its output fails the call with
:class:`GuardError`.  ``opaque_ops.testing.run_op`` (the public face) and
the isolated worker both call it, so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import _native
from ..errors import OpaqueOpsError
from .core import Interpreter

# Bytes of known pattern on each side of every guarded output.
GUARD_BYTES = 64
# Not a repeating single byte, so a kernel writing a constant (0, 0xFF, a
# float 1.0) over the guard is seen, and odd offsets are caught too.
_PATTERN = np.frombuffer(bytes([0xDE, 0xAD, 0xBE, 0xEF, 0x5A, 0xC3, 0x3C, 0xA5]), np.uint8)


class GuardError(OpaqueOpsError):
    """A kernel wrote outside its output buffer (into the guard bytes around it)."""

    # Public as opaque_ops.testing.GuardError, where users catch it.
    __module__ = "opaque_ops.testing"


def _norm_spec(spec, default_shape, default_dtype) -> tuple[list[int], np.dtype]:
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
            raise ValueError(f"output spec {spec!r} is not (shape, dtype) or a dict with 'shape'/'dtype'") from None
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
    after = np.nonzero(raw[start + nbytes :] != expected[start + nbytes :])[0]
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


def _per_position(what: str, values: Sequence[Any], count: int) -> list:
    """``values`` padded with None to ``count`` entries; more entries than tensors is a ValueError."""
    if isinstance(values, Mapping):
        raise ValueError(
            f"{what} takes a list with one entry per tensor position (a mapping, or None for an "
            f"unquantized tensor), e.g. [{{'scale': 0.5, 'zero_point': 3}}]; got one mapping"
        )
    values = list(values or ())
    if len(values) > count:
        raise ValueError(f"{what} has {len(values)} entries for {count} tensors (one per position, None for none)")
    return values + [None] * (count - len(values))


def build_op_model(
    op_name: str,
    inputs: Sequence[np.ndarray],
    outputs: Sequence[tuple[Sequence[int], Any]],
    options=None,
    version: int = 1,
    constant_inputs: Sequence[int] = (),
    input_quantization: Sequence[Any] = (),
    output_quantization: Sequence[Any] = (),
) -> bytes:
    """Serialise a model made of one custom op.

    Parameters
    ----------
    op_name : str
        The custom op.
    inputs : sequence of numpy.ndarray or None
        One per op input; their shapes and dtypes become the model's.  None
        at a position leaves that input out: the node's input there is -1
        (``kTfLiteOptionalTensor``, an omitted optional input), as a
        converter writes it, and the kernel's ``TfLiteOpaqueNodeGetInput``
        returns NULL for it.
    outputs : sequence of (shape, dtype)
        The declared output tensors (a kernel's Prepare may resize them).
    options : dict or bytes or None
        Custom options (a dict is flexbuffer-encoded).
    version : int
        The op version recorded in the model.
    constant_inputs : sequence of int
        Positions in ``inputs`` stored as constants in the model instead of
        being model inputs.
    input_quantization, output_quantization : sequence of mapping or None
        Per position (a shorter list leaves the rest unquantized): the
        tensor's quantization as :meth:`ModelBuilder.add_tensor` takes it
        (``scale``, ``zero_point``, optionally ``quantized_dimension``).

    Returns
    -------
    bytes

    Raises
    ------
    ValueError
        A position of ``constant_inputs`` out of range, or one that
        ``inputs`` omits (None), or a quantization given for an omitted input.
    """
    from ..model import ModelBuilder

    b = ModelBuilder(description=f"opaque_ops.testing: one {op_name} op")
    const = {int(i) for i in constant_inputs}
    bad = [i for i in const if not 0 <= i < len(inputs)]
    if bad:
        raise ValueError(f"constant_inputs {bad} out of range for {len(inputs)} inputs")
    in_q = _per_position("input_quantization", input_quantization, len(inputs))
    out_q = _per_position("output_quantization", output_quantization, len(outputs))
    omitted = [i for i, arr in enumerate(inputs) if arr is None]
    # An omitted input has no tensor: nothing to store as a constant or to quantize.
    # Either was a mistake about which position is left out; said rather than dropped.
    if const & set(omitted):
        raise ValueError(
            f"constant_inputs {sorted(const & set(omitted))} names input(s) given as None (omitted); an omitted "
            "input has no tensor to store: drop those positions from constant_inputs, or give their arrays"
        )
    quantized = [i for i in omitted if in_q[i] is not None]
    if quantized:
        raise ValueError(
            f"input_quantization gives input(s) {quantized} a quantization, but they are None (omitted): put None "
            "at those positions of input_quantization, or give their arrays"
        )
    in_idx, model_inputs = [], []
    for i, arr in enumerate(inputs):
        if arr is None:
            in_idx.append(-1)  # kTfLiteOptionalTensor
        elif i in const:
            in_idx.append(b.add_constant(f"const{i}", arr, quantization=in_q[i]))
        else:
            t = b.add_tensor(f"input{i}", list(arr.shape), arr.dtype, quantization=in_q[i])
            in_idx.append(t)
            model_inputs.append(t)
    out_idx = [
        b.add_tensor(f"output{i}", shape, dtype, quantization=out_q[i]) for i, (shape, dtype) in enumerate(outputs)
    ]
    b.add_custom_op(op_name, in_idx, out_idx, options=options, version=version)
    b.set_inputs(model_inputs)
    b.set_outputs(out_idx)
    return b.build()


def run_one_op(
    ops: list,
    op_name: str,
    inputs: Sequence[Any],
    options: dict | bytes | None = None,
    num_outputs: int | Sequence[Any] = 1,
    version: int = 1,
    guard: bool = True,
    constant_inputs: Sequence[int] = (),
    num_threads: int | None = None,
    hooks=None,
    input_quantization: Sequence[Any] = (),
    output_quantization: Sequence[Any] = (),
) -> list[np.ndarray]:
    """:func:`opaque_ops.testing.run_op` in this process (see there for the parameters).

    ``hooks`` is passed to the :class:`Interpreter` (the isolated worker's
    instrumentation).  The guarded buffers are attached through
    ``Interpreter._reshape``, the one path that moves tensor memory.
    """
    arrays = [None if a is None else np.asarray(a) for a in inputs]  # None: an omitted input
    if isinstance(num_outputs, (bool, np.bool_)):
        raise TypeError("num_outputs must be an int or a list of output specs")
    given = [a for a in arrays if a is not None]
    default_shape = list(given[0].shape) if given else [1]
    default_dtype = given[0].dtype if given else np.dtype(np.float32)
    if isinstance(num_outputs, (int, np.integer)):
        if num_outputs < 1:
            raise ValueError("num_outputs must be at least 1")
        specs = [(default_shape, default_dtype)] * int(num_outputs)
    else:
        specs = [_norm_spec(s, default_shape, default_dtype) for s in num_outputs]
        if not specs:
            raise ValueError("num_outputs must name at least one output")
    data = build_op_model(
        op_name,
        arrays,
        specs,
        options=options,
        version=version,
        constant_inputs=constant_inputs,
        input_quantization=input_quantization,
        output_quantization=output_quantization,
    )
    it = Interpreter._with_hooks(hooks, model_content=data, custom_ops=list(ops), num_threads=num_threads)
    it.allocate_tensors()
    native = it._live()
    out_indices = native.output_indices()
    guards = []

    def attach(native) -> None:
        # Prepare has set the output shapes: each output gets a guarded
        # buffer of exactly its size; _reshape then allocates again, so the
        # tensors point into our buffers.
        for pos, idx in enumerate(out_indices):
            nbytes = native.tensor(idx).nbytes
            raw, start = _aligned_guarded(nbytes)
            status = native.set_custom_allocation(idx, raw[start : start + max(nbytes, 1)])
            if status != 0:
                msgs = native.sink.take()
                raise OpaqueOpsError(
                    f"could not attach a guarded buffer to output {pos} of {op_name!r}: "
                    + ("; ".join(msgs) or f"status {status}")
                    + " (pass guard=False to run without guard bytes)"
                )
            guards.append((pos, idx, raw, start, nbytes, raw.copy()))

    if guard:
        it._reshape(f"run_op({op_name!r}): guarded outputs", allocate=True, redirect=attach)
    fed = [a for i, a in enumerate(arrays) if a is not None and i not in {int(c) for c in constant_inputs}]
    for det, arr in zip(it.get_input_details(), fed):
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
