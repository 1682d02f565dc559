"""Which STRIDED_SLICEs of subgraph 0 are a SLICE of fixed bounds, whatever the caller resizes.

TFLite 2.17.1's XNNPACK delegate leaves STRIDED_SLICE to TFLite's own
kernel and takes SLICE; ``interpreter/slices.py`` writes each slice found
here as SLICE in the Interpreter's private model copy.  The finding depends
on the model only, so it is kept in the model's record
(:func:`opaque_ops.model.cache.fixed_slices`): a later start writes the
copy without reading the operators again.

A unit-stride STRIDED_SLICE is a SLICE once its bounds are resolved
against its input's shape (``tensorflow/lite/kernels/strided_slice.cc``: a
masked axis takes the whole extent, a negative index counts from the end,
both ends are then clamped to the axis).  SLICE's begin and size are
constants, so that shape must be the one the slice sees at every allocation
and every invoke.  A resize of a subgraph input could change it (a negative
begin would then name other rows, silently), so a slice is kept only where
:func:`_varying` proves that no resize can reach its input's shape: the
shape follows from constants through operators whose output shapes depend
on their inputs' shapes alone.  The Interpreter still checks after every
allocation that each rewritten slice's input has that shape, as far as
TFLite can tell it (a backstop; see below).

The stored shape must also be the one the operators give
(:func:`~opaque_ops.model.shapes.infer_shapes`): inside an XNNPACK
partition a tensor keeps its stored shape in TFLite's view, so a wrong one
would pass the allocation check while the delegate's SLICE read other rows.

Left out: another stride, an ellipsis, new-axis or shrink mask, ``offset``,
bounds or strides that are not int32 constant vectors, an empty result, a type
other than float32, int8 and uint8 (what the delegate takes), an output
quantized otherwise than its input, and slices in other subgraphs (whose
tensors the Interpreter sees only through a signature).
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from .checks.options import effective_options
from .schema import BUILTIN_OPERATORS
from .shapes import infer_shapes, slice_bounds

__all__ = ["plan_of"]

_STRIDED_SLICE = "STRIDED_SLICE"
_TYPES = ("FLOAT32", "INT8", "UINT8")

# Operators whose output shapes follow from their inputs' shapes alone, with
# the positions of the inputs that are operands of the shape (bounds, sizes,
# axes, a permutation...), which must then be constants.  Any other operator
# may make a shape from values (RESHAPE by a computed shape, WHERE, RANGE...)
# or from state, so its outputs count as varying.
_ELEMENTWISE = (
    "ADD SUB MUL DIV MAXIMUM MINIMUM SQUARED_DIFFERENCE POW LOGISTIC TANH RELU RELU6 RELU_N1_TO_1 "
    "LEAKY_RELU HARD_SWISH PRELU ELU GELU ABS NEG EXP LOG SQRT RSQRT SQUARE FLOOR CEIL ROUND SIN COS "
    "QUANTIZE DEQUANTIZE CAST SOFTMAX LOG_SOFTMAX L2_NORMALIZATION"
).split()
_SHAPE_OPERANDS: dict[str, tuple[int, ...]] = {
    **dict.fromkeys(_ELEMENTWISE, ()),
    # windows and products: their weights' shapes are stored constants
    **dict.fromkeys(("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "BATCH_MATMUL"), ()),
    **dict.fromkeys(("AVERAGE_POOL_2D", "MAX_POOL_2D", "CONCATENATION", "SQUEEZE"), ()),
    _STRIDED_SLICE: (1, 2, 3),
    "SLICE": (1, 2),
    "SPLIT": (0,),  # axis
    "SPLIT_V": (1, 2),  # sizes, axis
    "PAD": (1,),
    "PADV2": (1,),
    "TRANSPOSE": (1,),
    "MEAN": (1,),
    "SUM": (1,),
    "EXPAND_DIMS": (1,),
}
assert all(name in BUILTIN_OPERATORS for name in _SHAPE_OPERANDS)


def plan_of(info) -> tuple:
    """``(operator, input, output, input shape, begin, size)`` of each STRIDED_SLICE of subgraph 0 that is a fixed SLICE.

    Parameters
    ----------
    info : ModelInfo
        The model, from :func:`~opaque_ops.model.read_model`.

    Returns
    -------
    tuple
        One tuple of ints and tuples of ints per slice, in operator order;
        empty when no slice qualifies.
    """
    if not info.subgraphs:
        return ()
    sg = info.subgraphs[0]
    if not any(op.op_name == _STRIDED_SLICE and not op.is_custom for op in sg.operators):
        return ()
    tensors = sg.tensors
    consts = _constants(sg)
    varying = None  # worked out once, if any slice qualifies otherwise
    shapes = None  # (as varying)
    found = []
    for op in sg.operators:
        if op.op_name != _STRIDED_SLICE or op.is_custom:
            continue
        ins, outs = list(op.inputs), list(op.outputs)
        if len(ins) != 4 or len(outs) != 1 or min(ins + outs) < 0:
            continue
        # What the kernel reads: under another union type than its own, every mask is 0.
        opts = effective_options(op)
        if any(opts.get(k) for k in ("ellipsis_mask", "new_axis_mask", "shrink_axis_mask", "offset")):
            continue
        tx, ty = tensors[ins[0]], tensors[outs[0]]
        if tx.type_name not in _TYPES or ty.type_name != tx.type_name or tx.is_sparse or ty.is_sparse:
            continue
        if not _same_quantization(tx.quantization, ty.quantization):
            continue
        shape = [int(d) for d in tx.shape]
        if not 1 <= len(shape) <= 5 or min(shape) < 1:
            continue
        if tx.shape_signature is not None and list(tx.shape_signature) != shape:
            continue
        if not set(ins[1:]) <= consts:
            continue
        # strided_slice.cc refuses bounds that are not vectors at allocation:
        # such a model must keep failing there, not run as SLICE.
        if any(tuple(tensors[t].shape) != (len(shape),) for t in ins[1:]):
            continue
        bounds = [_int32_values(tensors[t]) for t in ins[1:]]
        if any(b is None or len(b) != len(shape) for b in bounds):
            continue
        begin, end, strides = bounds
        if any(s != 1 for s in strides):
            continue
        resolved = _resolve(shape, begin, end, int(opts.get("begin_mask", 0)), int(opts.get("end_mask", 0)))
        # The converter's own output shape must agree: a second opinion on the resolution.
        if resolved is None or [int(d) for d in ty.shape] != resolved[1]:
            continue
        if varying is None:
            varying = _varying(info, consts)
        if ins[0] in varying:
            continue
        # The stored shape is what the bounds are resolved against, so it must
        # be the one the operators give.  The allocation check cannot see a
        # wrong one: inside an XNNPACK partition a tensor keeps its stored
        # shape in TFLite's view, whatever the delegate computes.
        if shapes is None:
            shapes = _operator_shapes(info)
        if shapes.get(ins[0]) != tuple(shape):
            continue
        found.append((op.index, ins[0], outs[0], tuple(shape), tuple(resolved[0]), tuple(resolved[1])))
    return tuple(found)


def _operator_shapes(info) -> dict:
    """``{tensor: shape or None}``: what subgraph 0's operators give at the model's stored shapes (empty if they clash)."""
    tensors = info.subgraphs[0].tensors
    try:
        return infer_shapes(info, lambda t: tuple(tensors[t].shape))
    except ShapeError:
        return {}


def _constants(sg) -> set[int]:
    """Tensors of ``sg`` with data in the model that nothing writes: constants."""
    written = {t for op in sg.operators for t in op.outputs}
    io = set(sg.inputs) | set(sg.outputs)
    return {
        t.index
        for t in sg.tensors
        if t.data is not None and len(t.data) and not t.is_variable and t.index not in written and t.index not in io
    }


def _int32_values(tensor) -> list[int] | None:
    if tensor.type_name != "INT32" or tensor.data is None or len(tensor.data) % 4:
        return None
    return np.frombuffer(tensor.data, "<i4").tolist()


def _same_quantization(a, b) -> bool:
    """Whether two tensors' quantizations are the same (both kernels copy the bytes, and neither requantizes)."""
    a, b = a or {}, b or {}
    if a.keys() != b.keys():
        return False
    for k, v in a.items():
        w = b[k]
        if isinstance(v, np.ndarray) or isinstance(w, np.ndarray):
            if not np.array_equal(np.asarray(v), np.asarray(w)) or np.asarray(v).dtype != np.asarray(w).dtype:
                return False
        elif v != w:
            return False
    return True


def _resolve(shape: list[int], begin: list[int], end: list[int], begin_mask: int, end_mask: int):
    """``(begin, size)`` of the SLICE that a unit-stride STRIDED_SLICE of ``shape`` is, or None if empty."""
    starts, sizes = [], []
    for d, n in enumerate(shape):
        lo, hi = slice_bounds(begin[d], end[d], n, 1, bool(begin_mask >> d & 1), bool(end_mask >> d & 1))
        if hi <= lo:
            return None
        starts.append(lo)
        sizes.append(hi - lo)
    return starts, sizes


def _varying(info, consts: set[int]) -> set[int]:
    """Tensors of subgraph 0 whose shape a resize of an input could change (a superset).

    Every input of subgraph 0 varies, and so does every output of an
    operator that reads a varying tensor, or whose output shape may come
    from values (not in ``_SHAPE_OPERANDS``, or a shape operand that is not
    a constant).  Two exceptions stop it: a RESHAPE to a constant shape
    without -1, whose output has that shape whatever it reads; and
    READ_VARIABLE, whose output has its variable's shape, which varies only
    if some ASSIGN_VARIABLE writes a varying tensor (or, in another
    subgraph, anything but a constant).  ``consts``: subgraph 0's constants
    (:func:`_constants`).
    """
    sg = info.subgraphs[0]
    reads_vary = False
    for other in info.subgraphs[1:]:
        assigns = [op for op in other.operators if op.op_name == "ASSIGN_VARIABLE"]
        if assigns:
            other_consts = _constants(other)
            reads_vary = reads_vary or any(len(op.inputs) != 2 or op.inputs[1] not in other_consts for op in assigns)
    while True:
        varying = set(sg.inputs)
        for op in sg.operators:
            name, ins = op.op_name, list(op.inputs)
            where = _SHAPE_OPERANDS.get(name, ()) if not op.is_custom else ()
            if op.is_custom:
                vary = True
            elif name == "READ_VARIABLE":
                vary = reads_vary
            elif name == "RESHAPE" and len(ins) == 2 and ins[1] in consts and _fixed_shape(sg.tensors[ins[1]]):
                vary = False
            elif name not in _SHAPE_OPERANDS or any(
                t >= 0 and t not in consts for k, t in enumerate(ins) if k in where
            ):
                vary = True
            else:
                vary = any(t in varying for k, t in enumerate(ins) if k not in where)
            if vary:
                varying.update(op.outputs)
        if reads_vary or not any(
            op.op_name == "ASSIGN_VARIABLE" and len(op.inputs) == 2 and op.inputs[1] in varying for op in sg.operators
        ):
            return varying
        reads_vary = True


def _fixed_shape(tensor) -> bool:
    """Whether constant ``tensor`` is an int32 shape without -1 (RESHAPE's output then has exactly that shape).

    Only a vector: ``tensorflow/lite/kernels/reshape.cc`` takes its shape
    input only when that is 1-D, and otherwise the options' ``new_shape``,
    which may hold a -1 that a resize fills in.
    """
    if len(tensor.shape) != 1:
        return False
    values = _int32_values(tensor)
    return values is not None and all(v >= 0 for v in values)
