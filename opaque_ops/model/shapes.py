"""The shapes TFLite will really use, computed from the inputs' allocated shapes.

After ``AllocateTensors`` the runtime knows every tensor's shape, but two cases
leave what it *reports* stale:

- the XNNPACK delegate replaces a run of nodes with one node: the tensors
  inside it keep the shapes written in the model, whatever the delegate
  computes from the real input shapes (a ``CONV_2D`` whose stride was edited
  still reports its declared output, while XNNPACK works on a smaller one);
- an operator with a dynamic output (a ``RESHAPE`` fed by ``SHAPE``, an
  ``RFFT2D``) stops Prepare there: every later tensor keeps its declared
  shape until ``invoke`` (BirdNET, word-activation-recognition).

:func:`infer_shapes` walks subgraph 0 in execution order and computes each
output shape from the input shapes with the op's shape rule (the rules of
TFLite's reference kernels), using constant inputs where a rule needs their
values (and SHAPE's outputs, whose values are its input's dimensions).
Where it has no rule, it takes the runtime's shape, but only for
operators the runtime prepared (before the first dynamic output); anything
after that, or depending on it, is *unknown* (None) and no check reasons
about it.  Inputs that cannot be combined (a concatenation of mismatched
shapes, a reshape that changes the element count) raise :class:`ShapeError`:
the reference kernels refuse them in Prepare, and the XNNPACK delegate, which
reshapes its own graph without those checks, must never see them.  So do the
few that Prepare accepts but Eval reads or writes outside the tensors with,
on every runtime (REVERSE_V2, MATRIX_SET_DIAG, REVERSE_SEQUENCE, SELECT: see
their rules).
"""

from __future__ import annotations

import math

from .._records import Record, record
from ..errors import ShapeError as ShapeError  # its home was here; raised by the rules below
from .select_rows import overruns, picks_rows

_UNARY = set(
    """
ABS CEIL COS ELU EXP FLOOR GELU HARD_SWISH LEAKY_RELU LOG LOGISTIC NEG RELU RELU6 RELU_N1_TO_1
RELU_0_TO_1 ROUND RSQRT SIN SQRT SQUARE TANH DEQUANTIZE QUANTIZE CAST SOFTMAX LOG_SOFTMAX
L2_NORMALIZATION ZEROS_LIKE SIGN LOCAL_RESPONSE_NORMALIZATION LOGICAL_NOT
""".split()
)

_BINARY = set(
    """
ADD SUB MUL DIV MAXIMUM MINIMUM SQUARED_DIFFERENCE POW FLOOR_DIV FLOOR_MOD LESS LESS_EQUAL
GREATER GREATER_EQUAL EQUAL NOT_EQUAL LOGICAL_AND LOGICAL_OR ATAN2
""".split()
)

_NHWC_OPS = {
    "CONV_2D",
    "DEPTHWISE_CONV_2D",
    "AVERAGE_POOL_2D",
    "MAX_POOL_2D",
    "L2_POOL_2D",
    "RESIZE_BILINEAR",
    "RESIZE_NEAREST_NEIGHBOR",
    "DEPTH_TO_SPACE",
    "SPACE_TO_DEPTH",
}

# Ops whose output shape can depend on the *values* of an input (a shape, a
# size, paddings, axes, begin/end, a count): without constants there, the
# shape is known only at invoke.
_VALUE_DEPENDENT = set(
    """
RESHAPE RESIZE_BILINEAR RESIZE_NEAREST_NEIGHBOR PAD PADV2 MIRROR_PAD SLICE STRIDED_SLICE TILE FILL
BROADCAST_TO RANGE TRANSPOSE EXPAND_DIMS SPLIT SPLIT_V MEAN SUM REDUCE_MAX REDUCE_MIN REDUCE_PROD
REDUCE_ANY REDUCE_ALL ONE_HOT TOPK_V2 WHERE UNIQUE NON_MAX_SUPPRESSION_V4 NON_MAX_SUPPRESSION_V5
RFFT2D SPARSE_TO_DENSE SCATTER_ND SEGMENT_SUM UNSORTED_SEGMENT_SUM UNSORTED_SEGMENT_PROD
UNSORTED_SEGMENT_MAX UNSORTED_SEGMENT_MIN TRANSPOSE_CONV DYNAMIC_UPDATE_SLICE BROADCAST_ARGS
MATRIX_DIAG GATHER_ND SHAPE ARG_MAX ARG_MIN DENSIFY WHILE IF SPACE_TO_BATCH_ND BATCH_TO_SPACE_ND
CONV_3D_TRANSPOSE
""".split()
)
# Not listed: CALL_ONCE has no outputs, so it cannot leave anything unknown
# (listing it made every tensor of a streaming model with state variables
# unknown, and a VALID window larger than its input went unchecked).
# READ_VARIABLE keeps its declared output shape: the kernel's Prepare marks
# the output dynamic only when it is declared with rank 0 (upstream
# tensorflow/lite/kernels/read_variable.cc), and then the runtime reports no
# shape for it, which stops the runtime's shapes being used below.


def fed_shape_inputs(sg) -> tuple:
    """The integer inputs of ``sg`` whose values a shape rule reads: an input of an op of :data:`_VALUE_DEPENDENT`.

    The tensors whose values a fed-value check passes to :func:`infer_shapes`
    (``values``) to know the shapes an invoke makes from them: a TILE's
    multiples, a RESHAPE's or BROADCAST_TO's shape, a FILL's dims... fed as
    inputs.  (An input that is such an op's data only costs a read.)
    """
    fed = set(sg.inputs)
    found = {
        t
        for op in sg.operators
        if not op.is_custom and op.op_name in _VALUE_DEPENDENT
        for t in op.inputs
        if t in fed and sg.tensors[t].type_name in ("INT32", "INT64")
    }
    return tuple(sorted(found))


_REDUCE = {"MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "REDUCE_ANY", "REDUCE_ALL"}


class _Known:
    """Subgraph 0 as the rules see it: its tensors, and the int values :func:`infer_shapes` computed.

    SHAPE's output is no constant in the model, but its values are the
    input's dimensions, known here before invoke: a RESHAPE, FILL or
    BROADCAST_TO fed by SHAPE (``tf.zeros(tf.shape(x))``) then gets its
    shape from them as from a constant.  The runtime marks that output
    dynamic all the same, which infer_shapes notices (the output is not
    planned), so the runtime's later shapes are still not used.
    """

    def __init__(self, sg):
        self.tensors = sg.tensors
        self.values: dict[int, list[int]] = {}


def _const(info_sg, t):
    """The constant value of tensor t as a flat list of ints (or its value computed by infer_shapes), or None."""
    if t < 0:
        return None
    if isinstance(info_sg, _Known) and t in info_sg.values:
        return list(info_sg.values[t])
    tensor = info_sg.tensors[t]
    arr = tensor.array()
    if arr is None or arr.dtype.kind not in "iu":
        return None
    return [int(v) for v in arr.reshape(-1)]


def _broadcast(a, b, where):
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)
    b = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise ShapeError(f"{where}: input shapes {list(a)} and {list(b)} do not broadcast")
    return tuple(out)


def _window(op, x, kh, kw, sh, sw, dh, dw, padding, where):
    """(out_h, out_w) of a 2-D window op on NHWC input x, or None for an unknown padding."""
    eh, ew = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    if padding == "SAME":
        return (x[1] + sh - 1) // sh, (x[2] + sw - 1) // sw
    if padding != "VALID":
        return None
    if x[1] < eh or x[2] < ew:
        raise ShapeError(
            f"{where} has VALID padding and a {eh}x{ew} window, but its input {op.inputs[0]} is "
            f"{x[1]}x{x[2]} (shape {list(x)}): the output would be empty. Resize the model's input "
            "(resize_tensor_input) to a larger size."
        )
    return (x[1] - eh + sh) // sh, (x[2] - ew + sw) // sw


def _axis(a, rank):
    return a + rank if a < 0 else a


def _op_shapes(sg, op, ins, where):  # noqa: C901 - one branch per op, on purpose
    """Output shapes of one op from its input shapes (a list of tuples / None), or None."""
    name = op.op_name
    o = op.builtin_options or {}
    x = ins[0] if ins else None
    if name in _UNARY:
        return [x] if x is not None else None
    if name == "PRELU":
        return [_broadcast(ins[0], ins[1], where)] if None not in ins[:2] else None
    if name in _BINARY:
        if len(ins) < 2 or None in ins[:2]:
            return None
        return [_broadcast(ins[0], ins[1], where)]
    if x is None:
        return None
    if name in _NHWC_OPS and len(x) != 4:
        # The reference kernels refuse other ranks in Prepare; the XNNPACK
        # delegate indexes four dimensions regardless.
        raise ShapeError(f"{where} needs a 4-D NHWC input, but its input {op.inputs[0]} has shape {list(x)}")
    if name in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        w = ins[1] if len(ins) > 1 else None
        if w is None or len(x) != 4 or len(w) != 4:
            return None
        pad = o.get("padding")
        sh, sw = o.get("stride_h", 1), o.get("stride_w", 1)
        dh, dw = o.get("dilation_h_factor", 1), o.get("dilation_w_factor", 1)
        if min(sh, sw, dh, dw) < 1:
            return None
        hw = _window(op, x, w[1], w[2], sh, sw, dh, dw, pad, where)
        if hw is None:
            return None
        h, wd = hw
        if name == "CONV_2D":
            if w[3] <= 0 or x[3] % w[3]:
                raise ShapeError(f"{where}: input has {x[3]} channels, the filter {list(w)} takes {w[3]}")
            return [(x[0], h, wd, w[0])]
        return [(x[0], h, wd, w[3])]
    if name in ("AVERAGE_POOL_2D", "MAX_POOL_2D", "L2_POOL_2D"):
        if len(x) != 4:
            return None
        fh, fw = o.get("filter_height", 1), o.get("filter_width", 1)
        sh, sw = o.get("stride_h", 1), o.get("stride_w", 1)
        if min(fh, fw, sh, sw) < 1:
            return None
        hw = _window(op, x, fh, fw, sh, sw, 1, 1, o.get("padding"), where)
        return None if hw is None else [(x[0], hw[0], hw[1], x[3])]
    if name in ("PAD", "PADV2", "MIRROR_PAD"):
        p = _const(sg, op.inputs[1]) if len(op.inputs) > 1 else None
        if p is not None and len(p) != 2 * len(x):
            # The reference kernels refuse this in Prepare (one row of paddings
            # per input dimension); the XNNPACK delegate keeps the shapes it
            # planned for the old rank and segfaults (embedding_model resized
            # from [1, 76, 32, 1] to [1, 76, 32]).
            raise ShapeError(
                f"{where} has {len(p) // 2} rows of paddings, but its input {op.inputs[0]} has shape "
                f"{list(x)} (rank {len(x)}); resize the input with the model's rank"
            )
        if p is None or min(p, default=0) < 0:
            return None
        return [tuple(d + p[2 * k] + p[2 * k + 1] for k, d in enumerate(x))]
    if name == "RESHAPE":
        new = None
        if len(op.inputs) > 1 and op.inputs[1] >= 0 and len(sg.tensors[op.inputs[1]].shape) == 1:
            # reshape.cc takes the shape tensor only when it is 1-D INT32
            # (ShapeIsVector); an INT64 one (SHAPE with out_type INT64) is
            # ignored for the options' new_shape, or a scalar without
            # options.  Its values are not the shape then: no rule.
            if sg.tensors[op.inputs[1]].type_name != "INT32":
                return None
            new = _const(sg, op.inputs[1])
        elif len(op.inputs) == 1:
            new = o.get("new_shape")
        if new is None:
            return None
        count = math.prod(x)
        if new.count(-1) > 1 or any(d < -1 for d in new):
            return None
        if -1 in new:
            rest = math.prod(d for d in new if d != -1)
            if rest == 0 or count % rest:
                raise ShapeError(f"{where}: cannot reshape {list(x)} ({count} elements) to {new}")
            new = [count // rest if d == -1 else d for d in new]
        if math.prod(new) != count:
            raise ShapeError(f"{where}: cannot reshape {list(x)} ({count} elements) to {new}")
        return [tuple(new)]
    if name == "CONCATENATION":
        if None in ins:
            return None
        rank = len(x)
        ax = _axis(o.get("axis", 0), rank)
        if not 0 <= ax < rank:
            raise ShapeError(f"{where}: axis {o.get('axis')} is outside the inputs' rank {rank}")
        total = 0
        for s in ins:
            if len(s) != rank or any(a != b for k, (a, b) in enumerate(zip(s, x)) if k != ax):
                raise ShapeError(f"{where}: inputs {[list(s) for s in ins]} do not concatenate on axis {ax}")
            total += s[ax]
        return [tuple(total if k == ax else d for k, d in enumerate(x))]
    if name == "FULLY_CONNECTED":
        w = ins[1] if len(ins) > 1 else None
        if w is None or len(w) != 2 or w[1] <= 0:
            return None
        count = math.prod(x)
        if count % w[1]:
            raise ShapeError(
                f"{where}: input {list(x)} has {count} elements, not a multiple of the weights' {w[1]} inputs"
            )
        if o.get("keep_num_dims"):
            if x[-1] != w[1]:
                raise ShapeError(f"{where}: input {list(x)} does not end in the weights' {w[1]} inputs")
            return [tuple(x[:-1]) + (w[0],)]
        return [(count // w[1], w[0])]
    if name in _REDUCE:
        axes = _const(sg, op.inputs[1]) if len(op.inputs) > 1 else None
        if axes is None:
            return None
        rank = len(x)
        axes = {_axis(a, rank) for a in axes}
        if any(not 0 <= a < rank for a in axes):
            raise ShapeError(f"{where}: reduction axes outside the input's rank {rank}")
        if o.get("keep_dims"):
            return [tuple(1 if k in axes else d for k, d in enumerate(x))]
        return [tuple(d for k, d in enumerate(x) if k not in axes)]
    if name == "TRANSPOSE":
        perm = _const(sg, op.inputs[1]) if len(op.inputs) > 1 else None
        if perm is None:
            return None
        if sorted(perm) != list(range(len(x))):
            raise ShapeError(f"{where}: permutation {perm} does not fit an input of rank {len(x)}")
        return [tuple(x[p] for p in perm)]
    if name == "SQUEEZE":
        dims = o.get("squeeze_dims") or []
        rank = len(x)
        if dims:
            dims = {_axis(a, rank) for a in dims}
            if any(not 0 <= a < rank or x[a] != 1 for a in dims):
                raise ShapeError(f"{where}: cannot squeeze dimensions {sorted(dims)} of {list(x)}")
            return [tuple(d for k, d in enumerate(x) if k not in dims)]
        return [tuple(d for d in x if d != 1)]
    if name == "EXPAND_DIMS":
        ax = _const(sg, op.inputs[1]) if len(op.inputs) > 1 else None
        if ax is None or len(ax) != 1:
            return None
        a = ax[0] + len(x) + 1 if ax[0] < 0 else ax[0]
        if not 0 <= a <= len(x):
            raise ShapeError(f"{where}: axis {ax[0]} is outside [-{len(x) + 1}, {len(x)}]")
        return [tuple(x[:a]) + (1,) + tuple(x[a:])]
    if name == "SPLIT":
        ax = _const(sg, op.inputs[0])
        v = ins[1] if len(ins) > 1 else None
        n = len(op.outputs)
        if ax is None or v is None or len(ax) != 1:
            return None
        a = _axis(ax[0], len(v))
        if not 0 <= a < len(v) or v[a] % n:
            raise ShapeError(f"{where}: cannot split {list(v)} in {n} along axis {ax[0]}")
        return [tuple(v[a] // n if k == a else d for k, d in enumerate(v))] * n
    if name == "SPLIT_V":
        sizes = _const(sg, op.inputs[1]) if len(op.inputs) > 2 else None
        ax = _const(sg, op.inputs[2]) if len(op.inputs) > 2 else None
        if sizes is None or ax is None or len(ax) != 1 or len(sizes) != len(op.outputs):
            return None
        a = _axis(ax[0], len(x))
        if not 0 <= a < len(x) or sizes.count(-1) > 1 or any(s < -1 for s in sizes):
            return None
        if -1 in sizes:
            rest = x[a] - sum(s for s in sizes if s != -1)
            sizes = [rest if s == -1 else s for s in sizes]
        if sum(sizes) != x[a] or min(sizes) < 0:
            raise ShapeError(f"{where}: sizes {sizes} do not split dimension {a} of {list(x)}")
        return [tuple(s if k == a else d for k, d in enumerate(x)) for s in sizes]
    if name == "SLICE":
        begin = _const(sg, op.inputs[1]) if len(op.inputs) > 2 else None
        size = _const(sg, op.inputs[2]) if len(op.inputs) > 2 else None
        if begin is None or size is None or len(begin) != len(x) or len(size) != len(x):
            return None
        out = []
        for d, b, s in zip(x, begin, size):
            s = d - b if s == -1 else s
            if b < 0 or s < 0 or b + s > d:
                raise ShapeError(f"{where}: slice begin {begin} size {size} is outside {list(x)}")
            out.append(s)
        return [tuple(out)]
    if name == "STRIDED_SLICE":
        return _strided_slice(sg, op, x, o, where)
    if name in ("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"):
        size = _const(sg, op.inputs[1]) if len(op.inputs) > 1 else None
        if size is None or len(size) != 2 or len(x) != 4:
            return None
        return [(x[0], size[0], size[1], x[3])]
    if name in ("DEPTH_TO_SPACE", "SPACE_TO_DEPTH"):
        bs = o.get("block_size")
        if not bs or bs < 1 or len(x) != 4:
            return None
        if name == "DEPTH_TO_SPACE":
            if x[3] % (bs * bs):
                raise ShapeError(f"{where}: {x[3]} channels is not a multiple of block_size**2 = {bs * bs}")
            return [(x[0], x[1] * bs, x[2] * bs, x[3] // (bs * bs))]
        if x[1] % bs or x[2] % bs:
            raise ShapeError(f"{where}: {x[1]}x{x[2]} is not a multiple of block_size {bs}")
        return [(x[0], x[1] // bs, x[2] // bs, x[3] * bs * bs)]
    if name == "BATCH_MATMUL":
        y = ins[1] if len(ins) > 1 else None
        # Every runtime refuses an operand of rank 0 or 1 (TFLite's kernel,
        # and XNNPACK's, which fails to reshape); refused here so that the
        # verdict is the same whichever kernel runs the node, including the
        # FULLY_CONNECTED the interpreter may run in its place
        # (interpreter/matmul.py), which would accept it.
        short = [list(s) for s in (x, y) if s is not None and len(s) < 2]
        if short:
            raise ShapeError(
                f"{where}: operand shape {short[0]} has rank {len(short[0])}; BATCH_MATMUL needs rank 2 or more"
            )
        if y is None:
            return None
        ax, ay = o.get("adj_x", False), o.get("adj_y", False)
        m, k = (x[-1], x[-2]) if ax else (x[-2], x[-1])
        k2, n = (y[-1], y[-2]) if ay else (y[-2], y[-1])
        if k != k2:
            raise ShapeError(f"{where}: {list(x)} and {list(y)} do not multiply")
        return [_broadcast(x[:-2], y[:-2], where) + (m, n)]
    if name == "TRANSPOSE_CONV":
        shape = _const(sg, op.inputs[0])
        return None if shape is None else [tuple(shape)]
    if name == "PACK":
        if None in ins or any(s != x for s in ins):
            if None not in ins:
                raise ShapeError(f"{where}: inputs {[list(s) for s in ins]} differ in shape")
            return None
        a = o.get("axis", 0)
        a = a + len(x) + 1 if a < 0 else a
        if not 0 <= a <= len(x):
            return None
        return [tuple(x[:a]) + (len(ins),) + tuple(x[a:])]
    if name in _VALUE_RULES:
        return _VALUE_RULES[name](sg, op, ins, x, o, where)
    if name == "GATHER":
        idx = ins[1] if len(ins) > 1 else None
        if idx is None or o.get("batch_dims", 0):
            return None
        a = _axis(o.get("axis", 0), len(x))
        if not 0 <= a < len(x):
            raise ShapeError(f"{where}: axis {o.get('axis')} is outside the input's rank {len(x)}")
        return [tuple(x[:a]) + tuple(idx) + tuple(x[a + 1 :])]
    return None


# Ops whose output has the first input's shape: the reference kernels' Prepare
# copies the input's dims to the output (cumsum.cc, dynamic_update_slice.cc:
# the operand's; add_n.cc after checking that every input has that shape).
# REVERSE_V2, MATRIX_SET_DIAG and REVERSE_SEQUENCE do too, and have rules of
# their own below for the inputs their Eval trusts.
_SAME_AS_FIRST = {"CUMSUM", "DYNAMIC_UPDATE_SLICE", "ADD_N"}


def _known_ints(values):
    """The values when every one fits TFLite's int dims (int32), else None: a rule gives no shape from the rest."""
    if values is None or any(not -(2**31) <= v < 2**31 for v in values):
        return None
    return values


def _tile(sg, op, ins, x, o, where):
    # tensorflow/lite/kernels/tile.cc: with constant multiples, Prepare sizes
    # the output as input dims times multiples, after checking that there is
    # one multiple per input dimension.
    m = _known_ints(_const(sg, op.inputs[1])) if len(op.inputs) > 1 else None
    if m is None:
        return None
    if len(m) != len(x):
        raise ShapeError(
            f"{where} has {len(m)} multiples, but its input {op.inputs[0]} has shape {list(x)} "
            f"(rank {len(x)}): TILE needs one multiple per dimension; resize the input with the model's rank"
        )
    if min(m, default=0) < 0:
        return None  # (no check upstream: the runtime's own business, not a shape to reason on)
    return [tuple(d * k for d, k in zip(x, m))]


def _fill(sg, op, ins, x, o, where):
    # tensorflow/lite/kernels/fill.cc: constant 1-D dims are the output's
    # shape; a negative one is refused ("Fill dimensions must be >= 0").
    dims = _known_ints(_const(sg, op.inputs[0]))
    if dims is None or len(x) != 1:
        return None
    if min(dims, default=0) < 0:
        raise ShapeError(f"{where}: dimensions {dims} from tensor {op.inputs[0]} must all be >= 0")
    return [tuple(dims)]


def _broadcast_to(sg, op, ins, x, o, where):
    # tensorflow/lite/kernels/broadcast_to.cc (ResizeOutputTensor): the
    # constant 1-D shape is the output's, of rank at most 8 and at least the
    # input's; each input dimension, aligned from the right, is 1 or equal.
    shape = _known_ints(_const(sg, op.inputs[1])) if len(op.inputs) > 1 else None
    if shape is None or ins[1] is None or len(ins[1]) != 1 or min(shape, default=0) < 0:
        return None
    ext = len(shape) - len(x)
    if ext < 0 or len(shape) > 8 or any(d != 1 and d != shape[ext + k] for k, d in enumerate(x)):
        raise ShapeError(
            f"{where}: input {op.inputs[0]} of shape {list(x)} does not broadcast to {shape} "
            "(TFLite's BROADCAST_TO takes 1 to 8 dimensions, each input dimension 1 or equal); "
            "resize the input to a shape that does"
        )
    return [tuple(shape)]


def _one_hot(sg, op, ins, x, o, where):
    # tensorflow/lite/kernels/one_hot.cc: axis -1 is the last of the output's
    # rank(indices) + 1 dimensions, any other must lie in [0, rank]; a
    # constant depth (one int32 value, >= 0) is inserted there.
    if len(op.inputs) < 2 or op.inputs[1] < 0 or sg.tensors[op.inputs[1]].type_name != "INT32":
        return None
    depth = _known_ints(_const(sg, op.inputs[1]))
    axis = o.get("axis", 0)
    a = len(x) if axis == -1 else axis
    if not 0 <= a <= len(x):
        raise ShapeError(f"{where}: axis {axis} is outside [-1, {len(x)}] for indices of shape {list(x)}")
    if depth is None or len(depth) != 1:
        return None
    if depth[0] < 0:
        raise ShapeError(f"{where}: depth {depth[0]} from tensor {op.inputs[1]} must be >= 0")
    return [tuple(x[:a]) + (depth[0],) + tuple(x[a:])]


def _gather_nd(sg, op, ins, x, o, where):
    # tensorflow/lite/kernels/gather_nd.cc: output is indices.shape[:-1] +
    # params.shape[indices.shape[-1]:], both of rank >= 1 and the index
    # depth at most the params' rank.  (Shapes only: not value-dependent.)
    idx = ins[1] if len(ins) > 1 else None
    if idx is None:
        return None
    if not x or not idx or idx[-1] > len(x):
        raise ShapeError(
            f"{where}: indices of shape {list(idx)} do not index params of shape {list(x)} (both need rank "
            "1 or more, and the indices' last dimension at most the params' rank); resize the inputs to match"
        )
    return [tuple(idx[:-1]) + tuple(x[idx[-1] :])]


def _arg_min_max(sg, op, ins, x, o, where):
    # tensorflow/lite/kernels/arg_min_max.cc: a constant axis (one value,
    # negative counts from the end, inside the input's rank >= 1) is removed.
    axis = _known_ints(_const(sg, op.inputs[1])) if len(op.inputs) > 1 else None
    if axis is None or len(axis) != 1:
        return None
    a = _axis(axis[0], len(x))
    if not 0 <= a < len(x):
        raise ShapeError(
            f"{where}: axis {axis[0]} is outside the input {op.inputs[0]} of shape {list(x)}; resize the "
            "input with the model's rank"
        )
    return [tuple(d for k, d in enumerate(x) if k != a)]


def _range(sg, op, ins, x, o, where):
    # tensorflow/lite/kernels/range.cc: constant scalar start, limit, delta
    # give ceil(|limit - start| / |delta|) values.  Only the integer case,
    # and only where every runtime agrees (versions differ on start == limit).
    vals = [_known_ints(_const(sg, t)) for t in op.inputs[:3]]
    if len(vals) != 3 or any(v is None or len(v) != 1 for v in vals):
        return None
    (s,), (lim,), (d,) = vals
    if not ((d > 0 and s < lim) or (d < 0 and s > lim)):
        return None
    return [((abs(lim - s) + abs(d) - 1) // abs(d),)]


def _top_k(sg, op, ins, x, o, where):
    # tensorflow/lite/kernels/topk_v2.cc: with a constant k, values and
    # indices are the input's shape with k last.
    k = _known_ints(_const(sg, op.inputs[1])) if len(op.inputs) > 1 else None
    if k is None or len(k) != 1 or not x or not 0 <= k[0] <= x[-1]:
        return None
    return [tuple(x[:-1]) + (k[0],)] * len(op.outputs)


def _unpack(sg, op, ins, x, o, where):
    # tensorflow/lite/kernels/unpack.cc: each output is the input without
    # the axis, one output per slice along it.
    a = _axis(o.get("axis", 0), len(x))
    if not 0 <= a < len(x) or x[a] != len(op.outputs):
        return None
    return [tuple(d for k, d in enumerate(x) if k != a)] * len(op.outputs)


def _select_v2(sg, op, ins, x, o, where):
    # tensorflow/lite/kernels/select.cc: SELECT_V2 broadcasts its three inputs.
    if len(ins) < 3 or None in ins[:3]:
        return None
    if _one_element_each(ins[:3]):
        return None
    return [_broadcast(_broadcast(ins[0], ins[1], where), ins[2], where)]


def _one_element_each(shapes):
    """Whether SELECT / SELECT_V2's three inputs have one element each, whatever their shapes.

    Every runtime measured (2.17.1, 2.23.0, ai-edge-litert) then keeps the
    output's own shape when it has one element too ([1, 1], [1], [1] give
    [1]; three scalars give the declared [1]), as the reference Select's
    one-element case reads it.  That shape is the model's, or what an
    earlier allocation left, which the rules are not given: no shape.  When
    it is not the inputs' broadcast, the interpreter refuses the allocation
    itself, from its planned shapes (:mod:`~opaque_ops.model.select_rows`).
    """
    return all(math.prod(s) == 1 for s in shapes)


def _block_rank(x, block, where, op):
    """Whether a SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND input of shape x gets a shape rule for M block sizes.

    The runtimes differ: the older kernels take inputs of rank 3 or 4 with
    rank - 2 block sizes, newer SPACE_TO_BATCH_ND kernels any rank above
    M + 1 (the dimensions after the M spatial ones are kept).  Both refuse a
    rank of M + 1 or less, so that is refused here; a shape is given only
    where both agree (rank M + 2, at most 4), anything else stays unknown.
    """
    if len(x) <= len(block) + 1:
        raise ShapeError(
            f"{where} has {len(block)} block sizes, so its input {op.inputs[0]} needs rank {len(block) + 2} "
            f"([batch, {len(block)} spatial dimensions, channels]), but it has shape {list(x)}; resize the input "
            "with the model's rank"
        )
    return len(x) == len(block) + 2 and len(x) in (3, 4)


def _space_to_batch_nd(sg, op, ins, x, o, where):
    # tensorflow/lite/kernels/space_to_batch_nd.cc: with constant block_shape
    # [M] and paddings [M, 2] (>= 0, blocks >= 1), each padded spatial
    # dimension must divide by its block; it is divided, and the batch
    # multiplied by every block size.
    block = _known_ints(_const(sg, op.inputs[1])) if len(op.inputs) > 2 else None
    pads = _known_ints(_const(sg, op.inputs[2])) if len(op.inputs) > 2 else None
    if not block or pads is None or len(pads) != 2 * len(block):
        return None
    if not _block_rank(x, block, where, op) or min(block) < 1 or min(pads) < 0:
        return None
    out = [x[0] * math.prod(block)]
    for k, b in enumerate(block):
        padded = x[k + 1] + pads[2 * k] + pads[2 * k + 1]
        if padded % b:
            raise ShapeError(
                f"{where}: dimension {k + 1} of its input {op.inputs[0]} (shape {list(x)}) is {padded} with its "
                f"paddings, not a multiple of the block size {b}; resize the input so that it is"
            )
        out.append(padded // b)
    return [tuple(out) + tuple(x[len(block) + 1 :])]


def _batch_to_space_nd(sg, op, ins, x, o, where):
    # tensorflow/lite/kernels/batch_to_space_nd.cc: with constant block_shape
    # [M] and crops [M, 2], crops must be >= 0 and the batch must divide by
    # the blocks' product; each spatial dimension is multiplied by its block
    # and cropped.
    block = _known_ints(_const(sg, op.inputs[1])) if len(op.inputs) > 2 else None
    crops = _known_ints(_const(sg, op.inputs[2])) if len(op.inputs) > 2 else None
    if not block or crops is None or len(crops) != 2 * len(block):
        return None
    if not _block_rank(x, block, where, op) or min(block) < 1:
        return None
    if min(crops) < 0:
        raise ShapeError(f"{where}: crops {crops} from tensor {op.inputs[2]} must all be >= 0")
    if x[0] % math.prod(block):
        raise ShapeError(
            f"{where}: the batch of its input {op.inputs[0]} (shape {list(x)}) is {x[0]}, not a multiple of the "
            f"block sizes' product {math.prod(block)}; resize the input so that it is"
        )
    spatial = [x[k + 1] * b - crops[2 * k] - crops[2 * k + 1] for k, b in enumerate(block)]
    if min(spatial) < 0:
        return None  # (cropped below zero: no check upstream, not a shape to reason on)
    return [(x[0] // math.prod(block), *spatial, *x[len(block) + 1 :])]


def _select(sg, op, ins, x, o, where):
    # tensorflow/lite/kernels/select.cc, kVersionOne: unlike SELECT_V2 there
    # is no broadcasting.  The output is x's shape; unless the condition, x
    # and y all have one shape, the condition must be a scalar or 1-D of x's
    # first dimension, and x and y must have the same shape.
    if len(ins) < 3 or None in ins[:3]:
        return None
    c, a, b = ins[:3]
    if _one_element_each(ins[:3]):
        return None
    if c == a == b:
        _stale_row_mode(sg, op, a, where)
        return [a]
    if len(c) == 1 and not a:
        # Prepare compares the condition's length with x's first dimension,
        # reading past a scalar's empty dims (whatever the heap holds there);
        # when that matches, Eval's RankOneSelect writes one value per
        # condition element into x's one-element output (heap corruption,
        # SIGSEGV or SIGABRT, on every runtime).
        raise ShapeError(
            f"{where}: its condition {op.inputs[0]} of shape {list(c)} is 1-D but x {op.inputs[1]} is a scalar; "
            "SELECT's 1-D condition picks rows of x and y, so x and y need a first dimension of the "
            f"condition's length {c[0]} (or give a scalar condition, or use SELECT_V2, which broadcasts)"
        )
    if not (len(c) == 0 or (len(c) == 1 and c[0] == a[0])) or a != b:
        raise ShapeError(
            f"{where}: condition {list(c)}, x {list(a)} and y {list(b)} do not fit SELECT, which does not "
            "broadcast: x and y need one shape, and the condition that shape, a scalar, or one value per row "
            "of x; resize the inputs to fit (or use SELECT_V2)"
        )
    return [a]


def _stale_row_mode(sg, op, shape, where):
    """Refuse one shape for SELECT's three inputs after its first Prepare took the row-wise mode.

    select.cc's Prepare sets OpData's has_low_rank_input_condition for a
    scalar or 1-D condition and never clears it when a later Prepare finds
    the three shapes equal: Eval then still runs RankOneSelect, copying
    x[1:]'s size for each of the condition's elements, past the output
    (SIGSEGV on 2.17.1, 2.23.0 and ai-edge-litert alike) unless x[1:] holds
    one value.  The first Prepare runs on the model's own shapes when the
    interpreter is created; a later allocation's shapes are not known here
    (the interpreter remembers those: :mod:`.select_rows`).
    """
    dc, dx, dy = (tuple(sg.tensors[t].shape) for t in op.inputs[:3])
    if dc != dx and dx == dy and picks_rows(dc, dx) and overruns(shape):
        raise ShapeError(
            f"{where}: its condition, x and y would all have shape {list(shape)}, but the model gives the "
            f"condition shape {list(dc)} for x of shape {list(dx)}, so TFLite's SELECT picks whole rows of x and "
            "y and keeps doing so after a resize (its kernel never leaves that mode) and would write past its "
            f"output. Keep the condition a scalar or one value per row ([{shape[0]}]), or use SELECT_V2"
        )


def _reverse_v2(sg, op, ins, x, o, where):
    # tensorflow/lite/kernels/reverse.cc copies the input's shape; its Eval
    # calls reference_ops::Reverse (kernels/internal/reference/reverse.h),
    # which reverses "upper" (the dimensions up to the last axis) times
    # "middle" runs of "lower" (the product of the dimensions after it)
    # elements, and takes lower <= 1 for one element per run: with lower = 0
    # (an empty dimension after the axes) and upper * middle > 0 it copies
    # that many elements out of an empty input into an empty output
    # (SIGSEGV on 2.17.1, 2.23.0 and ai-edge-litert alike).
    # (An axis fed as an input is checked before each invoke instead:
    # opaque_ops.interpreter.fed_values.)
    axes = _known_ints(_const(sg, op.inputs[1])) if len(op.inputs) > 1 else None
    last = reverse_reads_past(x, axes)
    if last is not None:
        raise ShapeError(
            f"{where}: its input {op.inputs[0]} of shape {list(x)} is empty after the reversed axis "
            f"{last}, which TFLite's REVERSE_V2 kernel cannot reverse (it reads past the empty tensor); "
            "resize the input without empty dimensions, or reverse the last axis"
        )
    return [x]


def reverse_reads_past(x, axes) -> int | None:
    """The last of ``axes`` when REVERSE_V2 of an ``x`` of this shape reads past it (see _reverse_v2), else None."""
    if not axes or not all(-len(x) <= a < len(x) for a in axes):
        return None
    last = max(_axis(a, len(x)) for a in axes)
    return last if math.prod(x[last + 1 :]) == 0 and math.prod(x[: last + 1]) > 0 else None


# A lazy record, not a NamedTuple: defining a NamedTuple costs every first
# start about 0.1 ms (it compiles its methods), and this one is needed only
# when a rule finds a fault.
@record
class SequenceFault(Record):
    """Why REVERSE_SEQUENCE's kernel would read past its tensors (:func:`reverse_sequence_fault`'s answer)."""

    #: The batch dimension is empty (and so are the lengths).
    empty_batch: bool
    #: The position of the first length past the sequence dimension (None for an empty batch).
    index: int | None

    def __init__(self, empty_batch: bool, index: int | None):
        self.empty_batch = empty_batch
        self.index = index


def reverse_sequence_fault(x, seq_dim: int, batch_dim: int, lengths) -> SequenceFault | None:
    """What makes REVERSE_SEQUENCE read or write past its tensors for this input and these lengths, if anything.

    tensorflow/lite/kernels/reverse_sequence.cc: Eval refuses bad options
    (dimensions out of the input's rank, or equal) and a count of lengths
    other than the batch dimension's size, then checks the lengths against
    the sequence dimension in a loop over NumDimensions(seq_lengths) (1),
    not its size: it reads the first length, and only that one.  So

    - an empty batch (with the empty lengths Eval's count check wants)
      still has a first length read, out of the empty tensor: SIGSEGV on
      2.17.1, 2.23.0 and ai-edge-litert alike, whatever the other dimensions
      (an empty tensor's data pointer is null);
    - a later length past the sequence makes reference_ops'
      ReverseSequence copy that far outside the tensors (garbage for one
      step too many, SIGSEGV for 10**8, the same three runtimes), unless the
      input is empty: each copy then moves nothing or none is made, and
      every runtime returns the (empty) output (measured for an empty
      sequence, inner, outer and middle dimension).

    A first length past the sequence is reported too where the input is
    not empty (Eval refuses it itself; the message says more); a negative
    length reverses nothing, as 0 does (measured).

    Parameters
    ----------
    x : sequence of int or None
        The input's shape (None: not known; no answer).
    seq_dim, batch_dim : int
        ReverseSequenceOptions' dimensions, as the runtime reads them.
    lengths : sequence of int or None
        The sequence lengths' values (None: not known; an empty sequence for
        lengths of shape [0], known without their values).

    Returns
    -------
    SequenceFault or None
        None when the kernel stays inside the tensors, or when Eval refuses
        the options or the count of lengths before it reads one.
    """
    if x is None or lengths is None or not (0 <= seq_dim < len(x) and 0 <= batch_dim < len(x) and seq_dim != batch_dim):
        return None
    if len(lengths) != x[batch_dim]:
        return None  # (Eval refuses the count before it reads a length)
    if x[batch_dim] == 0:
        return SequenceFault(True, None)
    if math.prod(x) == 0:
        return None
    if max(lengths) <= x[seq_dim]:
        return None
    return SequenceFault(False, next(i for i, n in enumerate(lengths) if n > x[seq_dim]))


def _matrix_set_diag(sg, op, ins, x, o, where):
    # tensorflow/lite/kernels/matrix_set_diag.cc: Prepare copies the input's
    # shape and never looks at the diagonal; Eval (FillDiagImpl) reads one
    # diagonal value per matrix row it sets, batch * min(rows, columns) in
    # all, from the diagonal's data whatever its size: a shorter diagonal is
    # read past its end (garbage, or SIGSEGV when it is empty).
    d = ins[1] if len(ins) > 1 else None
    if d is None or len(x) < 2:
        return [x]
    want = (*x[:-2], min(x[-2], x[-1]))
    if math.prod(d) < math.prod(want):
        raise ShapeError(
            f"{where}: its diagonal {op.inputs[1]} of shape {list(d)} has {math.prod(d)} values, but its input "
            f"{op.inputs[0]} of shape {list(x)} needs {math.prod(want)} (shape {list(want)}: the input's batch "
            "dimensions and min(rows, columns)); give the diagonal that shape, or resize the input to match it"
        )
    return [x]


def _reverse_sequence(sg, op, ins, x, o, where):
    # tensorflow/lite/kernels/reverse_sequence.cc: see reverse_sequence_fault
    # for what its Eval trusts.  Known here for constant lengths, and for
    # lengths of shape [0] whatever they are (an empty tensor has no values
    # to wait for); lengths fed at run time are checked before each invoke
    # (opaque_ops.interpreter.fed_values).
    lengths = ins[1] if len(ins) > 1 else None
    if lengths is None or len(lengths) != 1:
        return [x]  # (Prepare refuses lengths of another rank)
    # (All of a constant's values: int64 lengths beyond int32 reach the kernel
    # too, which keeps their low 32 bits.)
    seq = _const(sg, op.inputs[1]) if tuple(lengths) != (0,) else []
    s, b = o.get("seq_dim", 0), o.get("batch_dim", 0)
    fault = reverse_sequence_fault(x, s, b, seq)
    if fault is None:
        return [x]
    if fault.empty_batch:
        raise ShapeError(
            f"{where}: its input {op.inputs[0]} of shape {list(x)} has an empty batch dimension {b}, so its "
            f"sequence lengths {op.inputs[1]} are empty, and TFLite's REVERSE_SEQUENCE kernel reads a first "
            "length anyway (past the empty tensor); resize the input to at least one batch (its output would "
            "be empty: the operator can be skipped)"
        )
    raise ShapeError(
        f"{where}: its sequence lengths {seq} (tensor {op.inputs[1]}) go past the sequence dimension "
        f"{s} of its input {op.inputs[0]} (shape {list(x)}, {x[s]} steps); each length must be at most "
        f"{x[s]}: lower them, or resize the input to longer sequences"
    )


def _embedding_lookup(sg, op, ins, x, o, where):
    # tensorflow/lite/kernels/embedding_lookup.cc: 1-D ids, a table of rank
    # >= 2; one table row per id.
    value = ins[1] if len(ins) > 1 else None
    if value is None:
        return None
    if len(x) != 1 or len(value) < 2:
        raise ShapeError(
            f"{where}: ids {op.inputs[0]} of shape {list(x)} and table {op.inputs[1]} of shape {list(value)} do "
            "not fit: EMBEDDING_LOOKUP takes 1-D ids and a table of rank 2 or more; resize them to fit"
        )
    return [(x[0], *value[1:])]


def _shape_from_constant(index):
    """A rule for ops whose output shape is the constant input ``index``'s values, when all are >= 0."""

    def rule(sg, op, ins, x, o, where):
        # scatter_nd.cc (shape), sparse_to_dense.cc (output_shape),
        # conv3d_transpose.cc (output_shape, five values): Prepare resizes
        # the output to the constant's values and marks it dynamic otherwise.
        # Other checks of theirs are left to the runtime.
        shape = _known_ints(_const(sg, op.inputs[index])) if len(op.inputs) > index else None
        if shape is None or min(shape, default=0) < 0:
            return None
        if op.op_name == "CONV_3D_TRANSPOSE" and len(shape) != 5:
            return None
        return [tuple(shape)]

    return rule


def _unsorted_segment(sg, op, ins, x, o, where):
    # tensorflow/lite/kernels/unsorted_segment.cc: with constant segment_ids
    # and num_segments (one value), the output is [num_segments] followed by
    # the data's dimensions after those the segment ids cover, which must
    # equal the data's.  Only 1-D segment ids here: the older kernels take
    # no other.
    if len(op.inputs) < 3:
        return None
    ids = _known_ints(_const(sg, op.inputs[1]))
    num = _known_ints(_const(sg, op.inputs[2]))
    if ids is None or num is None or len(num) != 1 or len(sg.tensors[op.inputs[1]].shape) != 1 or not x:
        return None
    if len(ids) != x[0]:
        raise ShapeError(
            f"{where}: its {len(ids)} segment ids (tensor {op.inputs[1]}) need data with {len(ids)} rows, but "
            f"the data {op.inputs[0]} has shape {list(x)}; resize the data to {len(ids)} rows"
        )
    if max(ids, default=-1) >= num[0]:
        return None  # (refused upstream whatever the input shapes: not a shape to reason on)
    return [(num[0], *x[1:])]


def _broadcast_args(sg, op, ins, x, o, where):
    # tensorflow/lite/kernels/broadcast_args.cc: two 1-D shapes; the
    # output holds as many values as the longer (from their sizes alone:
    # Prepare needs no constant).
    y = ins[1] if len(ins) > 1 else None
    if y is None:
        return None
    if len(x) != 1 or len(y) != 1:
        raise ShapeError(
            f"{where}: its inputs have shapes {list(x)} and {list(y)}, but BROADCAST_ARGS takes two 1-D shapes; "
            "resize them to 1-D"
        )
    return [(max(x[0], y[0]),)]


def _conv_3d(sg, op, ins, x, o, where):
    # tensorflow/lite/kernels/conv3d.cc: a 5-D NDHWC input and a 5-D
    # [depth, height, width, in, out] filter whose input channels are the
    # input's; each spatial size as tensorflow/lite/kernels/padding.h's
    # ComputeOutSize gives it.
    w = ins[1] if len(ins) > 1 else None
    if w is None:
        return None
    if len(x) != 5 or len(w) != 5 or x[4] != w[3]:
        raise ShapeError(
            f"{where}: input {op.inputs[0]} of shape {list(x)} does not fit the filter of shape {list(w)}: "
            "CONV_3D takes a 5-D [batch, depth, height, width, channels] input with the filter's "
            f"{w[3] if len(w) == 5 else '?'} channels; resize the input to fit"
        )
    out = []
    for k, s, d in (
        (1, "stride_d", "dilation_d_factor"),
        (2, "stride_h", "dilation_h_factor"),
        (3, "stride_w", "dilation_w_factor"),
    ):
        stride, dil = o.get(s, 1), o.get(d, 1)
        if stride < 1 or dil < 1:
            return None
        eff = (w[k - 1] - 1) * dil + 1
        if o.get("padding") == "SAME":
            out.append((x[k] + stride - 1) // stride)
        elif o.get("padding") == "VALID" and x[k] >= eff:
            out.append((x[k] + stride - eff) // stride)
        else:
            return None  # (a window larger than a VALID input: not refused upstream, no shape to reason on)
    return [(x[0], *out, w[4])]


def _rfft2d(sg, op, ins, x, o, where):
    # tensorflow/lite/kernels/rfft2d.cc: an input of rank >= 2 (checked
    # before anything else); a constant fft_length [h, w] (powers of two)
    # replaces the last two dimensions by h and w / 2 + 1.
    if len(x) < 2:
        raise ShapeError(
            f"{where}: its input {op.inputs[0]} has shape {list(x)}, but RFFT2D needs rank 2 or more; resize "
            "the input to that"
        )
    n = _known_ints(_const(sg, op.inputs[1])) if len(op.inputs) > 1 else None
    if n is None or len(n) != 2 or any(v <= 0 or v & (v - 1) for v in n):
        return None
    return [(*x[:-2], n[0], n[1] // 2 + 1)]


# The rules of the value-dependent ops that only need constants (and of a few
# cheap ones whose shape follows their inputs'), so that the arena guard
# counts their outputs before an allocation after a resize.  Left without a
# rule (their outputs stay unknown): WHERE, UNIQUE, NON_MAX_SUPPRESSION_V4/V5
# and SEGMENT_SUM (shape decided by the data), WHILE, IF, DENSIFY, and the
# LSTM / RNN family (several layouts and optional state tensors per op).
_VALUE_RULES = {
    "TILE": _tile,
    "FILL": _fill,
    "BROADCAST_TO": _broadcast_to,
    "ONE_HOT": _one_hot,
    "GATHER_ND": _gather_nd,
    "ARG_MAX": _arg_min_max,
    "ARG_MIN": _arg_min_max,
    "RANGE": _range,
    "TOPK_V2": _top_k,
    "UNPACK": _unpack,
    "SELECT_V2": _select_v2,
    # matrix_diag.cc: the last dimension repeated, the input of rank >= 1.
    "MATRIX_DIAG": lambda sg, op, ins, x, o, where: [tuple(x) + (x[-1],)] if x else None,
    # shape.cc: one value per input dimension (whatever the values).
    "SHAPE": lambda sg, op, ins, x, o, where: [(len(x),)],
    # rank.cc: a scalar.
    "RANK": lambda sg, op, ins, x, o, where: [()],
    "SPACE_TO_BATCH_ND": _space_to_batch_nd,
    "BATCH_TO_SPACE_ND": _batch_to_space_nd,
    "SELECT": _select,
    "REVERSE_V2": _reverse_v2,
    "MATRIX_SET_DIAG": _matrix_set_diag,
    "REVERSE_SEQUENCE": _reverse_sequence,
    "EMBEDDING_LOOKUP": _embedding_lookup,
    "SCATTER_ND": _shape_from_constant(2),
    "SPARSE_TO_DENSE": _shape_from_constant(1),
    "CONV_3D_TRANSPOSE": _shape_from_constant(0),
    "BROADCAST_ARGS": _broadcast_args,
    "CONV_3D": _conv_3d,
    "RFFT2D": _rfft2d,
}
_VALUE_RULES.update(
    dict.fromkeys(
        ("UNSORTED_SEGMENT_SUM", "UNSORTED_SEGMENT_PROD", "UNSORTED_SEGMENT_MAX", "UNSORTED_SEGMENT_MIN"),
        _unsorted_segment,
    )
)
_VALUE_RULES.update(dict.fromkeys(_SAME_AS_FIRST, lambda sg, op, ins, x, o, where: [x]))


def slice_bounds(b: int, e: int, d: int, s: int, begin_masked: bool, end_masked: bool) -> tuple[int, int]:
    """Where STRIDED_SLICE starts and stops on one axis of size ``d`` with stride ``s`` (not 0).

    As ``tensorflow/lite/kernels/strided_slice.cc`` resolves them: a masked
    end takes the whole extent in the stride's direction, a negative index
    counts from the end, and both are then clamped to the axis ([0, d] for a
    positive stride, [-1, d - 1] for a negative one).
    """
    lo, hi = (0, d) if s > 0 else (-1, d - 1)
    b = (lo if s > 0 else hi) if begin_masked else (b + d if b < 0 else b)
    e = (hi if s > 0 else lo) if end_masked else (e + d if e < 0 else e)
    return min(max(b, lo), hi), min(max(e, lo), hi)


def _strided_slice(sg, op, x, o, where):
    """STRIDED_SLICE's output shape with TF's sparse-spec semantics (masks, ellipsis, new axes)."""
    if len(op.inputs) < 4 or o.get("offset"):
        return None
    begin, end, strides = (_const(sg, t) for t in op.inputs[1:4])
    if None in (begin, end, strides) or not (len(begin) == len(end) == len(strides)):
        return None
    bm, em = o.get("begin_mask", 0) or 0, o.get("end_mask", 0) or 0
    sm, nm, el = (o.get("shrink_axis_mask", 0) or 0, o.get("new_axis_mask", 0) or 0, o.get("ellipsis_mask", 0) or 0)
    if bin(el).count("1") > 1:
        return None
    n = len(begin)
    out = []
    dim = 0  # next input dimension
    for k in range(n):
        if el & (1 << k):
            # The ellipsis covers the input dimensions the later entries do not name.
            later = sum(1 for j in range(k + 1, n) if not nm & (1 << j))
            while dim < len(x) - later:
                out.append(x[dim])
                dim += 1
            continue
        if nm & (1 << k):
            out.append(1)
            continue
        if dim >= len(x):
            raise ShapeError(f"{where}: the slice names more dimensions than its input {list(x)} has")
        d = x[dim]
        dim += 1
        s = strides[k]
        if s == 0:
            return None
        b, e = begin[k], end[k]
        if sm & (1 << k):
            b = b + d if b < 0 else b
            if not 0 <= b < d:
                raise ShapeError(f"{where}: index {begin[k]} is outside dimension of size {d}")
            continue
        b, e = slice_bounds(b, e, d, s, bool(bm & (1 << k)), bool(em & (1 << k)))
        out.append(max((e - b + (s - 1 if s > 0 else s + 1)) // s, 0))
    out.extend(x[dim:])
    return [tuple(out)]


def infer_shapes(info, shape_of, planned=None, values=None, until=None) -> dict:
    """Shapes of subgraph 0's tensors as TFLite will use them (None: not known before invoke).

    Parameters
    ----------
    info : ModelInfo
    shape_of : callable
        ``shape_of(i)``: the runtime's shape for tensor i (None if dynamic).
    planned : callable, optional
        ``planned(i)``: whether ``shape_of(i)`` is not None, asked instead of
        ``shape_of`` for outputs whose shape the op's rule gives (only
        whether the runtime planned them matters there).
    values : dict, optional
        ``{tensor index: list of int}``: the values some inputs hold now
        (those :func:`fed_shape_inputs` names), which the rules then read as
        they read a constant's: the shapes the next invoke will make from
        them (a TILE's fed multiples, a RESHAPE's fed shape).
    until : int, optional
        Stop before the operator of this index (the shapes its inputs get):
        the rules of that operator and the later ones are not applied, so
        what they would refuse in the values does not hide those shapes.

    Raises
    ------
    ShapeError
        An operator's input shapes do not fit together.
    """
    sg = info.subgraphs[0]
    # Another subgraph's plan (a signature runner's, moved to index 0) keeps
    # its index: its messages say which subgraph, in the form of
    # checks.messages.planned_operator (which this module sits below).
    at = f"subgraph {sg.index}, " if sg.index else ""
    known: dict[int, tuple | None] = {}
    produced = {t for op in sg.operators for t in op.outputs}

    def get(t):
        if t < 0:
            return None
        if t in known:
            return known[t]
        tensor = sg.tensors[t]
        if t not in produced:
            if tensor.data is not None:
                # A constant's shape is the model's (and costs no runtime call).
                known[t] = tuple(tensor.shape)
                return known[t]
            # Graph inputs and variables: the runtime's view is right.
            s = shape_of(t)
            known[t] = None if s is None else tuple(s)
            if tensor.data is not None and s is None:
                known[t] = tuple(tensor.shape)
            return known[t]
        return None

    prepared = True
    view = _Known(sg)
    if values:
        view.values.update(values)
    for op in sg.operators:
        if op.index == until:
            break
        # (Most inputs are known already: the output of an earlier operator.)
        ins = [known[t] if t in known else get(t) for t in op.inputs]
        where = f"{at}operator {op.index} ({op.op_name})"
        # A custom op's output shape is its kernel's business (its Prepare
        # reports what is wrong better than a rule here could).
        outs = None if op.is_custom else _op_shapes(view, op, ins, where)
        if op.op_name == "SHAPE" and ins and ins[0] is not None and op.outputs[0] >= 0:
            view.values[op.outputs[0]] = list(ins[0])
        if outs is not None and len(outs) != len(op.outputs):
            outs = None
        if (
            outs is None
            and (op.op_name in _VALUE_DEPENDENT or op.is_custom)
            and None not in ins
            and any(t >= 0 for t in op.outputs)
        ):
            # The output shape depends on values only known at invoke: 2.17.1
            # marks it dynamic and stops preparing, 2.22+ plans a placeholder
            # in the arena and replans during invoke.  Either way, what the
            # runtime reports from here on is not what will run.
            if op.op_name in _VALUE_DEPENDENT:
                prepared = False
        for k, t in enumerate(op.outputs):
            if t < 0:
                continue
            # (Once preparing has stopped, the runtime's shapes are not used.)
            # A dynamic output (no shape planned): the runtime stops preparing here.
            if outs is not None and outs[k] is not None:
                if prepared and not (planned(t) if planned is not None else shape_of(t) is not None):
                    prepared = False
                known[t] = tuple(map(int, outs[k]))
                continue
            rt = shape_of(t) if prepared else None
            if rt is None:
                prepared = False
            if prepared and None not in ins and rt is not None:
                known[t] = tuple(rt)
            else:
                known[t] = None
    return known
