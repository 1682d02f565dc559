"""A STRIDED_SLICE of fixed shape with unit strides, run as SLICE in the private model copy.

TFLite 2.17.1's XNNPACK delegate does not take STRIDED_SLICE, so each runs
in TFLite's own kernel between delegate partitions; it does take SLICE.
microWakeWord's okay_nabu has twelve unit-stride STRIDED_SLICEs, and on
2.17.1 with XNNPACK runs 55.1 K instructions per invoke against 34.2 K
with each written as SLICE (``bench/slice_rewrite.py``; ai-edge-litert
and TFLite 2.23.0, whose delegates take STRIDED_SLICE, run 41 K).

A unit-stride STRIDED_SLICE is a SLICE once its bounds are resolved
against its input's shape (``tensorflow/lite/kernels/strided_slice.cc``: a
masked axis takes the whole extent, a negative index counts from the end,
both ends are then clamped to the axis).  SLICE's begin and size are
constants, so that shape must be the one the slice sees at every
allocation and every invoke.  A resize of a subgraph input could change it
(a negative begin would then name other rows, silently), so a slice is
rewritten only where :func:`_varying` proves that no resize can reach its
input's shape: the shape follows from constants through operators whose
output shapes depend on their inputs' shapes only.  The Interpreter checks
after every allocation of subgraph 0 that each rewritten slice's input has
the shape it was resolved for (:func:`check_allocated`): a backstop that
refuses, should a model's stored shapes be wrong, before any invoke.

Everything else is left as it was: another stride, an ellipsis, new-axis
or shrink mask, ``offset``, bounds or strides that are not int32 constants,
an empty result, a type other than float32, int8 and uint8 (what the
delegate takes), an output quantized otherwise than its input, and
slices in other subgraphs (whose tensors the Interpreter sees only through
a signature).
"""

from __future__ import annotations

import struct

from ..errors import ModelError
from ..model.schema import BUILTIN_OPERATORS
from .model_copy import INT32, NewOperator, NewTensor, Opened, Plan, main_tensor_count, open_model, write_copy

__all__ = ["check_allocated", "main_tensor_count", "rewrite_model", "worth_it"]

_STRIDED_SLICE = BUILTIN_OPERATORS["STRIDED_SLICE"]
_SLICE = BUILTIN_OPERATORS["SLICE"]
_RESHAPE = BUILTIN_OPERATORS["RESHAPE"]
_READ_VARIABLE = BUILTIN_OPERATORS["READ_VARIABLE"]
_ASSIGN_VARIABLE = BUILTIN_OPERATORS["ASSIGN_VARIABLE"]
_STRIDED_SLICE_OPTIONS = 32  # BuiltinOptions union tag
# TensorTypes the rewrite covers: float32, and int8 and uint8 with the
# output's quantization equal to the input's (both kernels copy the bytes).
_TYPES = (0, 9, 3)  # FLOAT32, INT8, UINT8

# Operators whose output shapes follow from their inputs' shapes alone, with
# the inputs that are operands of the shape (bounds, sizes, axes, a
# permutation...), which must then be constants.  Any other operator may
# make a shape from values (RESHAPE by a computed shape, WHERE, RANGE...),
# so its outputs count as varying.
_ELEMENTWISE = (
    "ADD SUB MUL DIV MAXIMUM MINIMUM SQUARED_DIFFERENCE POW LOGISTIC TANH RELU RELU6 RELU_N1_TO_1 "
    "LEAKY_RELU HARD_SWISH PRELU ELU GELU ABS NEG EXP LOG SQRT RSQRT SQUARE FLOOR CEIL ROUND SIN COS "
    "QUANTIZE DEQUANTIZE CAST SOFTMAX LOG_SOFTMAX L2_NORMALIZATION"
).split()
_SHAPE_OPERANDS: dict[int, tuple[int, ...]] = {
    **{BUILTIN_OPERATORS[name]: () for name in _ELEMENTWISE},
    # windows and products (their weights' shapes are stored, and constant in every converted model)
    **{BUILTIN_OPERATORS[name]: () for name in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "BATCH_MATMUL")},
    **{BUILTIN_OPERATORS[name]: () for name in ("AVERAGE_POOL_2D", "MAX_POOL_2D", "CONCATENATION", "SQUEEZE")},
    _STRIDED_SLICE: (1, 2, 3),
    _SLICE: (1, 2),
    BUILTIN_OPERATORS["SPLIT"]: (0,),  # axis
    BUILTIN_OPERATORS["SPLIT_V"]: (1, 2),  # sizes, axis
    BUILTIN_OPERATORS["PAD"]: (1,),
    BUILTIN_OPERATORS["PADV2"]: (1,),
    BUILTIN_OPERATORS["TRANSPOSE"]: (1,),
    BUILTIN_OPERATORS["MEAN"]: (1,),
    BUILTIN_OPERATORS["SUM"]: (1,),
    BUILTIN_OPERATORS["EXPAND_DIMS"]: (1,),
}


def worth_it(version: str, xnnpack: bool, delegates: int = 0) -> bool:
    """Whether :func:`rewrite_model` makes the model faster on this runtime.

    Only 2.17 with XNNPACK (measured: ``bench/slice_rewrite.py``).  2.23's
    and ai-edge-litert's delegates take STRIDED_SLICE, and without XNNPACK
    both forms run in TFLite's kernels.  With a caller's delegate nothing is
    rewritten: it chooses nodes by operator, and must see the model's own.

    Parameters
    ----------
    version : str
        ``TfLiteVersion()`` of the loaded runtime, e.g. ``"2.17.1"``.
    xnnpack : bool
        Whether the XNNPACK delegate is applied.
    delegates : int, optional
        How many of the caller's delegates are applied.

    Returns
    -------
    bool
    """
    return not delegates and bool(xnnpack) and version.split(".")[:2] == ["2", "17"]


def _builtin(m: Opened, op: int) -> int:
    r = m.reader
    code = m.codes[r.scalar(op, 0, "<I")] if r.scalar(op, 0, "<I") < len(m.codes) else None
    if code is None or r.field(code, 1):  # custom_code
        return -1
    return max(r.scalar(code, 0, "<b"), r.scalar(code, 3, "<i"))


def _constants(m: Opened, sg: int, written: set[int]) -> set[int]:
    """Tensors of ``sg`` with data in the flatbuffer that nothing writes: constants."""
    r = m.reader
    found = set()
    io = set(r.ints(sg, 1)) | set(r.ints(sg, 2))
    for t, tensor in enumerate(r.tables(sg, 0)):
        if t in written or t in io or r.scalar(tensor, 5, "<B"):  # is_variable
            continue
        buf = r.scalar(tensor, 2, "<I")
        if 0 < buf < len(m.buffers) and r.vector(m.buffers[buf], 0)[0]:
            found.add(t)
    return found


def _varying(m: Opened) -> set[int]:
    """Tensors of subgraph 0 whose shape a resize of an input could change (a superset).

    Every input of subgraph 0 varies, and so does every output of an
    operator that reads a varying tensor, or whose output shape may come
    from values (not in ``_SHAPE_OPERANDS``, or a shape operand that is not
    a constant).  Two exceptions stop it: a RESHAPE to a constant shape
    without -1, whose output has that shape whatever it reads; and
    READ_VARIABLE, whose output has its variable's shape, which varies only
    if some ASSIGN_VARIABLE writes a varying tensor (or, in another
    subgraph, anything but a constant).
    """
    r = m.reader
    sg = m.subgraphs[0]
    tensors = r.tables(sg, 0)
    ops = r.tables(sg, 3)
    io = [(_builtin(m, op), r.ints(op, 1), r.ints(op, 2)) for op in ops]
    written = {t for _c, _i, outs in io for t in outs}
    consts = _constants(m, sg, written)
    reads_vary = False
    for s in range(1, len(m.subgraphs)):
        other = m.subgraphs[s]
        other_ops = r.tables(other, 3)
        other_written = {t for op in other_ops for t in r.ints(op, 2)}
        other_consts = _constants(m, other, other_written)
        for op in other_ops:
            if _builtin(m, op) == _ASSIGN_VARIABLE and not set(r.ints(op, 1)[1:2]) <= other_consts:
                reads_vary = True
    while True:
        varying = set(r.ints(sg, 1))
        for code, ins, outs in io:
            data = [t for k, t in enumerate(ins) if k not in _SHAPE_OPERANDS.get(code, ())]
            operands = [t for k, t in enumerate(ins) if k in _SHAPE_OPERANDS.get(code, ())]
            if code == _READ_VARIABLE:
                vary = reads_vary
            elif code == _RESHAPE and len(ins) == 2 and ins[1] in consts and _fixed_shape(m, tensors, ins[1]):
                vary = False
            elif code not in _SHAPE_OPERANDS or any(t >= 0 and t not in consts for t in operands):
                vary = True
            else:
                vary = any(t in varying for t in data)
            if vary:
                varying.update(outs)
        if reads_vary or not any(
            code == _ASSIGN_VARIABLE and len(ins) == 2 and ins[1] in varying for code, ins, _o in io
        ):
            return varying
        reads_vary = True


def _fixed_shape(m: Opened, tensors: list[int], t: int) -> bool:
    """Whether constant ``t`` is an int32 shape without -1 (RESHAPE's output then has exactly that shape)."""
    values = _int32_values(m, tensors, t)
    return values is not None and all(v >= 0 for v in values)


def _int32_values(m: Opened, tensors: list[int], t: int) -> list[int] | None:
    """The values of constant ``t`` (``tensors``: its subgraph's tensor tables), if int32."""
    r = m.reader
    tensor = tensors[t]
    if r.scalar(tensor, 1, "<B") != INT32:
        return None
    n, p = r.vector(m.buffers[r.scalar(tensor, 2, "<I")], 0)
    if n % 4:
        return None
    return list(struct.unpack_from(f"<{n // 4}i", r.buf, p))


def _quantization(r, tensor: int) -> tuple:
    """A tensor's quantization as comparable bytes: min, max, scale, zero point, details, quantized dimension."""
    q = r.ref(tensor, 4)
    if not q:
        return ()
    vectors = []
    for slot in range(4):
        n, p = r.vector(q, slot)
        vectors.append(bytes(r.buf[p : p + (8 if slot == 3 else 4) * n]) if n else b"")
    return (*vectors, r.scalar(q, 4, "<B"), r.scalar(q, 6, "<i"))


def _resolve(shape: list[int], begin: list[int], end: list[int], begin_mask: int, end_mask: int):
    """``(begin, size)`` of the SLICE that a unit-stride STRIDED_SLICE of ``shape`` is, or None if empty."""
    starts, sizes = [], []
    for d, n in enumerate(shape):
        lo = 0 if begin_mask >> d & 1 else begin[d] + (n if begin[d] < 0 else 0)
        hi = n if end_mask >> d & 1 else end[d] + (n if end[d] < 0 else 0)
        lo, hi = min(max(lo, 0), n), min(max(hi, 0), n)
        if hi <= lo:
            return None
        starts.append(lo)
        sizes.append(hi - lo)
    return starts, sizes


def _candidates(m: Opened) -> list[tuple[int, int, int, list[int], list[int], list[int]]]:
    """``(operator, input, output, input shape, begin, size)`` of each STRIDED_SLICE of subgraph 0 to rewrite."""
    r = m.reader
    sg = m.subgraphs[0]
    tensors = r.tables(sg, 0)
    ops = r.tables(sg, 3)
    written = {t for op in ops for t in r.ints(op, 2)}
    consts = _constants(m, sg, written)
    varying = None  # computed once, if any slice qualifies otherwise
    found = []
    for i, op in enumerate(ops):
        if _builtin(m, op) != _STRIDED_SLICE or not r.present(op) <= {0, 1, 2, 3, 4}:
            continue
        ins, outs = r.ints(op, 1), r.ints(op, 2)
        if len(ins) != 4 or len(outs) != 1 or min(ins + outs) < 0 or max(ins + outs) >= len(tensors):
            continue
        if r.scalar(op, 3, "<B") not in (0, _STRIDED_SLICE_OPTIONS):
            continue
        opts = r.ref(op, 4)
        masks = [r.scalar(opts, s, "<i") if opts else 0 for s in range(5)]
        if any(masks[2:]) or (opts and r.scalar(opts, 5, "<B")):  # ellipsis, new axis, shrink; offset
            continue
        x, y = ins[0], outs[0]
        tx, ty = tensors[x], tensors[y]
        kind = r.scalar(tx, 1, "<B")
        if kind not in _TYPES or r.scalar(ty, 1, "<B") != kind or r.field(tx, 6) or r.field(ty, 6):
            continue
        if _quantization(r, tx) != _quantization(r, ty):
            continue
        shape = r.ints(tx, 0)
        sig = r.ints(tx, 7)
        if not 1 <= len(shape) <= 5 or min(shape) < 1 or (sig and sig != shape):
            continue
        if not set(ins[1:]) <= consts:
            continue
        bounds = [_int32_values(m, tensors, t) for t in ins[1:]]
        if any(b is None or len(b) != len(shape) for b in bounds):
            continue
        begin, end, strides = bounds
        if any(s != 1 for s in strides):
            continue
        resolved = _resolve(shape, begin, end, masks[0], masks[1])
        # The converter's own output shape must agree: a second opinion on the resolution.
        if resolved is None or r.ints(ty, 0) != resolved[1]:
            continue
        if varying is None:
            varying = _varying(m)
        if x in varying:
            continue
        found.append((i, x, y, shape, *resolved))
    return found


def rewrite_model(data: bytes) -> tuple[bytes, tuple]:
    """``data`` with every qualifying STRIDED_SLICE of subgraph 0 replaced by SLICE.

    Parameters
    ----------
    data : bytes
        A model that :func:`~opaque_ops.model.read_model` accepted (or a
        private copy written from one).

    Returns
    -------
    bytes
        ``data`` itself when nothing qualifies, or the rewritten copy.
    tuple
        ``((input tensor, shape), ...)`` of the rewritten slices: the shapes
        :func:`check_allocated` holds each allocation to.
    """
    m = open_model(data)
    if m is None or not m.subgraphs or not m.copyable(0) or not m.builtin_codes(_STRIDED_SLICE):
        return data, ()
    found = _candidates(m)
    if not found:
        return data, ()
    n = len(m.reader.tables(m.subgraphs[0], 0))
    new_tensors, operators = [], {}
    for i, x, y, _shape, begin, size in found:
        first = n + len(new_tensors)
        for what, values in (("begin", begin), ("size", size)):
            name = f"strided_slice{i}/{what}@opaque_ops".encode()
            new_tensors.append(NewTensor((len(values),), INT32, struct.pack(f"<{len(values)}i", *values), name))
        operators[i] = NewOperator((x, first, first + 1), (y,))
    fixed = tuple(sorted({(x, tuple(shape)) for _i, x, _y, shape, _b, _s in found}))
    return write_copy(m, data, {0: Plan(tuple(new_tensors), operators)}, _SLICE), fixed


def check_allocated(fixed: tuple, shape_of, is_planned) -> None:
    """After an allocation of subgraph 0: ModelError unless each rewritten slice's input has its shape.

    Parameters
    ----------
    fixed : tuple
        ``((input tensor, shape), ...)`` from :func:`rewrite_model`.
    shape_of, is_planned : callable
        The allocated shape of a tensor, and whether it is planned (not
        dynamic), as the runtime says.

    Raises
    ------
    ModelError
        An input's shape is not the one its SLICE was written for.  Never
        seen: :func:`_varying` excludes every shape a resize can change.
        Raised before any invoke could read the wrong rows.
    """
    for t, shape in fixed:
        now = shape_of(t)
        if not is_planned(t) or now is None or tuple(now) != shape:
            raise ModelError(
                f"tensor {t}, read by a STRIDED_SLICE that opaque_ops runs as SLICE on TFLite 2.17 with "
                f"XNNPACK (resolved for shape {list(shape)}), has shape "
                f"{'unknown until invoke' if now is None or not is_planned(t) else list(now)} after this "
                "allocation, so the SLICE would read the wrong elements. Create the Interpreter with "
                "use_xnnpack=False to run the model's own STRIDED_SLICE, and please report this model"
            )
