"""Rules per builtin: input counts, options the runtime parses unchecked, shapes XNNPACK trusts at creation."""

from __future__ import annotations

from ...errors import ModelError
from ..schema import _OP_OPTIONS
from . import messages
from .limits import MAX_ELEMENTS, MAX_RANK, MAX_RANK_2_23, MAX_WINDOW_PARAM, elements
from .options import SUBGRAPH_FIELDS, effective_options, has_own_options

# Fewest inputs each builtin takes (the ones the XNNPACK delegate handles).
_MIN_INPUTS = {
    **dict.fromkeys(
        "ABS AVERAGE_POOL_2D CEIL CONCATENATION DEPTH_TO_SPACE DEQUANTIZE ELU EXP FLOOR GELU HARD_SWISH "
        "LEAKY_RELU LOG LOGISTIC L2_NORMALIZATION MAX_POOL_2D NEG QUANTIZE RELU RELU6 RELU_N1_TO_1 "
        "RESHAPE ROUND RSQRT SOFTMAX SPACE_TO_DEPTH SQRT SQUARE TANH SIN COS SQUEEZE".split(),
        1,
    ),
    **dict.fromkeys(
        "ADD BATCH_MATMUL CONV_2D DEPTHWISE_CONV_2D DIV FULLY_CONNECTED MAXIMUM MEAN MINIMUM MUL PAD "
        "PRELU RESIZE_BILINEAR RESIZE_NEAREST_NEIGHBOR SPLIT SQUARED_DIFFERENCE SUB SUM TRANSPOSE "
        "REDUCE_MAX REDUCE_MIN REDUCE_PROD EXPAND_DIMS GATHER POW ASSIGN_VARIABLE".split(),
        2,
    ),
    **dict.fromkeys("PADV2 SLICE SPLIT_V TRANSPOSE_CONV".split(), 3),
    # The XNNPACK delegate reads a convolution's bias slot unconditionally (a
    # two-input DEPTHWISE_CONV_2D crashes it); an absent bias is written -1.
    **dict.fromkeys("CONV_2D DEPTHWISE_CONV_2D".split(), 3),
    # One-input concatenations (never emitted by the converter) crash its
    # concatenation visitor.
    "CONCATENATION": 2,
    "STRIDED_SLICE": 4,
    "READ_VARIABLE": 1,
}

# Most inputs, where it differs from the fewest (None: no limit).
_MAX_INPUTS = {
    "CONCATENATION": None,
    "RESHAPE": 2,
    "CONV_2D": 3,
    "DEPTHWISE_CONV_2D": 3,
    "FULLY_CONNECTED": 3,
    "TRANSPOSE_CONV": 4,
}

# Window options that must be positive, per op.
_WINDOW_OPTIONS = {
    "CONV_2D": ("stride_w", "stride_h", "dilation_w_factor", "dilation_h_factor"),
    "DEPTHWISE_CONV_2D": ("stride_w", "stride_h", "dilation_w_factor", "dilation_h_factor"),
    "TRANSPOSE_CONV": ("stride_w", "stride_h"),
    "AVERAGE_POOL_2D": ("stride_w", "stride_h", "filter_width", "filter_height"),
    "MAX_POOL_2D": ("stride_w", "stride_h", "filter_width", "filter_height"),
    "L2_POOL_2D": ("stride_w", "stride_h", "filter_width", "filter_height"),
}

# Where SPLIT and SPLIT_V read their axis.
SPLIT_AXIS = {"SPLIT": 0, "SPLIT_V": 2}

_QUANTIZED = ("INT8", "UINT8", "INT16")


def check_quantized_bias(sg, op) -> None:
    """Quantized CONV_2D / DEPTHWISE_CONV_2D have a bias."""
    if op.op_name not in ("CONV_2D", "DEPTHWISE_CONV_2D") or not op.inputs or op.inputs[0] < 0:
        return
    x = sg.tensors[op.inputs[0]].type_name
    if x in _QUANTIZED and (len(op.inputs) < 3 or op.inputs[2] < 0):
        # The quantized kernels add the bias without checking it exists.
        raise ModelError(
            f"{messages.operator(sg, op)} is quantized ({x}) but has no bias input; quantized convolutions need one"
        )


def check_input_count(sg, op) -> None:
    """Common builtins have their number of inputs."""
    need = _MIN_INPUTS.get(op.op_name)
    if need is None or op.is_custom:
        return
    most = _MAX_INPUTS.get(op.op_name, need)
    # The XNNPACK delegate reads a node's inputs while it builds its graph,
    # before any kernel's Prepare counts them.
    if len(op.inputs) < need:
        raise ModelError(
            f"{messages.operator(sg, op)} has {len(op.inputs)} input(s); {op.op_name} takes at least {need}"
        )
    if most is not None and len(op.inputs) > most:
        raise ModelError(f"{messages.operator(sg, op)} has {len(op.inputs)} inputs; {op.op_name} takes at most {most}")


def check_window_options(sg, op) -> None:
    """Strides, dilations and pooling windows at least 1 (and bounded); padding SAME or VALID."""
    keys = _WINDOW_OPTIONS.get(op.op_name)
    if keys is None:
        return
    # (The message prefix is built only for a refusal.)
    opts = effective_options(op)
    if not has_own_options(op):
        # Without its own table the runtime zero-fills the params: padding
        # "unknown" and strides 0.
        raise ModelError(
            f"{messages.operator(sg, op)} has no {_OP_OPTIONS[op.op_name]} (options type "
            f"{op.builtin_options_type}); the runtime would run it with strides of 0"
        )
    pad = opts.get("padding")
    if pad not in ("SAME", "VALID"):
        # An unknown padding enum leaves the output size undefined.
        raise ModelError(f"{messages.operator(sg, op)} has padding {pad!r}; it must be SAME or VALID")
    # Kernels divide by strides and multiply by dilations unchecked.
    for key in keys:
        v = opts.get(key)
        if v is not None and not 1 <= v <= MAX_WINDOW_PARAM:
            raise ModelError(f"{messages.operator(sg, op)} has {key}={v}; it must be between 1 and {MAX_WINDOW_PARAM}")


def check_builtin(info, sg, op, producer) -> None:
    """Per-builtin rules on the options the runtime will parse (see :func:`effective_options`)."""
    if not op.is_custom and op.op_name.startswith("STABLEHLO_"):
        # Most have no kernel in the runtime (an unresolved op), but 2.17.1
        # registers seven and 2.23 nine (ADD, MULTIPLY, MAXIMUM, MINIMUM,
        # SCATTER, GATHER, RNG_BIT_GENERATOR; AND, SHIFT_LEFT), and they trust
        # their inputs: a STABLEHLO_GATHER of two scalars in a WHILE condition
        # threw std::length_error through the C API (fuzz_structured 46:51604).
        raise ModelError(
            f"{messages.operator(sg, op)} is a StableHLO operator: opaque_ops has no rules for those, and "
            "the runtime's kernels for them do not check their inputs. Convert the model to TFLite's "
            "builtin operators"
        )
    rule = None if op.is_custom else _RULES.get(op.op_name)
    if rule is not None:
        # (Each rule spells its message prefix only when it refuses.)
        rule(info, sg, op, producer, effective_options(op))


def _split(info, sg, op, producer, opts) -> None:
    # The reference kernel refuses a mismatch in Prepare; the XNNPACK
    # delegate writes num_splits outputs while it builds its graph.
    if opts.get("num_splits") != len(op.outputs):
        raise ModelError(
            f"{messages.operator(sg, op)} has {len(op.outputs)} outputs but num_splits={opts.get('num_splits')}; they must be equal"
        )
    k = SPLIT_AXIS[op.op_name]
    ax = op.inputs[k] if len(op.inputs) > k else -1
    axis = sg.tensors[ax] if ax >= 0 else None
    if axis is not None and (axis.type_name != "INT32" or elements(axis.shape) != 1):
        # The kernels read the axis as one int32 (GetTensorData<int>(axis)[0]),
        # checking neither its type nor its size: an empty one is a null read.
        raise ModelError(
            f"{messages.operator(sg, op)} reads its axis from tensor {ax}, a {axis.type_name} of shape "
            f"{list(axis.shape)}; the axis must be one INT32 value"
        )


def _transpose(info, sg, op, producer, opts) -> None:
    if len(op.inputs) < 2 or op.inputs[1] < 0:
        return
    # 2.17.1's XNNPACK delegate copies the permutation into a fixed array of
    # XNN_MAX_TENSOR_DIMS (6) entries while the interpreter is created: a
    # longer one overruns the stack (from 15 entries, SIGSEGV).  The reference
    # kernel (tensorflow/lite/kernels/transpose.cc) takes a 1-D integer
    # permutation, one entry per input dimension: at most 6 before 2.23, 8
    # from 2.23 on.  Up to 8 pass here; more than 6 are refused before the
    # creation on an older runtime (interpreter/core.py).
    perm = sg.tensors[op.inputs[1]]
    if perm.type_name not in ("INT32", "INT64") or len(perm.shape) != 1 or perm.shape[0] > MAX_RANK_2_23:
        raise ModelError(
            f"{messages.operator(sg, op)} takes its permutation from tensor {op.inputs[1]}, a {perm.type_name} "
            f"of shape {list(perm.shape)}; it must be a 1-D INT32 or INT64 tensor of at most "
            f"{MAX_RANK_2_23} entries (at most {MAX_RANK} before TFLite 2.23)"
        )


def _reshape(info, sg, op, producer, opts) -> None:
    # The XNNPACK delegate plans a RESHAPE from its new shape (the constant
    # shape input, else the options' new_shape) when the interpreter is
    # created (tensorflow/lite/delegates/xnnpack/xnnpack_delegate.cc), and its
    # shapes stop at 6 dimensions.  Measured in child processes, a new shape
    # of 7 entries whose output is declared at rank 6 or 4 (declared at rank
    # 7, the delegate leaves the node alone) takes the process down there:
    # 2.17.1 aborts (std::out_of_range), 2.23.0 dies of SIGILL.  Without
    # XNNPACK the output has 7 dimensions, which the rules on planned shapes
    # refuse in subgraph 0 anyway (RESHAPE is not in limits.ANY_RANK_OPS).
    shape = op.inputs[1] if len(op.inputs) > 1 else -1
    if shape >= 0 and sg.tensors[shape].data is not None:
        entries, where = elements(sg.tensors[shape].shape), f"its shape input (tensor {shape})"
    else:
        entries, where = len(opts.get("new_shape") or ()), "its options' new_shape"
    if entries > MAX_RANK:
        raise ModelError(
            f"{messages.operator(sg, op)} reshapes to {entries} dimensions ({where}); the runtime supports at "
            f"most {MAX_RANK} (its XNNPACK delegate crashes on more while the interpreter is created). Reshape "
            f"to at most {MAX_RANK} dimensions"
        )


def _concatenation(info, sg, op, producer, opts) -> None:
    if not op.inputs or op.inputs[0] < 0:
        return
    rank = len(sg.tensors[op.inputs[0]].shape)
    ax = opts.get("axis", 0)
    # The XNNPACK delegate indexes the shape with the axis at creation.
    if not -rank <= ax < max(rank, 1):
        raise ModelError(f"{messages.operator(sg, op)} has axis={ax}, outside the inputs' rank {rank}")


def _dequantize(info, sg, op, producer, opts) -> None:
    if not op.inputs or not op.outputs or min(op.inputs[0], op.outputs[0]) < 0:
        return
    src, dst = sg.tensors[op.inputs[0]], sg.tensors[op.outputs[0]]
    if _is_static(sg, op.inputs[0], producer) and dst.shape != src.shape:
        # The XNNPACK delegate turns DEQUANTIZE of a constant (float16
        # weights) into static weights of the *declared* output shape, and
        # reads that many values from the constant.
        raise ModelError(
            f"{messages.operator(sg, op)} turns constant {op.inputs[0]} of shape {list(src.shape)} into tensor "
            f"{op.outputs[0]} declared {list(dst.shape)}; the shapes must be equal"
        )


def _strided_slice(info, sg, op, producer, opts) -> None:
    if opts.get("offset"):
        # With offset=True, end is relative to begin; the XNNPACK delegate of
        # the runtimes in use ignores the flag and slices another shape than
        # the one planned.  Refused until a runtime handles it everywhere.
        raise ModelError(
            f"{messages.operator(sg, op)} has offset=True (end relative to begin), which the runtime's "
            "XNNPACK path does not honour; re-export the model without it"
        )


def _block_size(info, sg, op, producer, opts) -> None:
    # The kernels divide by block_size and compute block_size**2 in an int:
    # 65536 wraps to 0 and the XNNPACK delegate's channel check divides by
    # it (SIGFPE while the interpreter is created).  Above sqrt(MAX_ELEMENTS)
    # no tensor could hold block_size**2 channels, so such a model can never
    # run.
    bs = opts.get("block_size", 0)
    if bs < 1 or bs * bs > MAX_ELEMENTS:
        raise ModelError(
            f"{messages.operator(sg, op)} has block_size={bs}; it must be at least 1 and its square at most {MAX_ELEMENTS}"
        )


def _variable(info, sg, op, producer, opts) -> None:
    if not op.inputs or op.inputs[0] < 0:
        return
    # The kernels look the variable up by the handle VAR_HANDLE wrote into
    # the resource tensor; a tensor nobody wrote holds garbage.
    res = op.inputs[0]
    p = producer.get(res)
    if res not in sg.inputs and (p is None or sg.operators[p].op_name != "VAR_HANDLE"):
        raise ModelError(
            f"{messages.operator(sg, op)} reads resource tensor {res}, which no VAR_HANDLE of subgraph "
            f"{sg.index} writes (and which is not a subgraph input)"
        )


def _control_flow(info, sg, op, producer, opts) -> None:
    name = op.op_name
    for field in SUBGRAPH_FIELDS[name]:
        k = opts.get(field, 0)
        if not 0 < k < len(info.subgraphs) or k == sg.index:
            raise ModelError(
                f"{messages.operator(sg, op)} has {field}={k}; it must name another subgraph "
                f"(1 to {len(info.subgraphs) - 1}, not {sg.index} itself)"
            )
    # The kernels copy tensors between the caller and the called subgraph by
    # position, trusting that the types agree (a float copied into a
    # RESOURCE handle crashes).
    pairs = []  # (our tensor indices, callee subgraph, its tensor indices, what)
    if name == "IF":
        for field in SUBGRAPH_FIELDS[name]:
            callee = info.subgraphs[opts[field]]
            pairs += [(op.inputs[1:], callee, callee.inputs, "input"), (op.outputs, callee, callee.outputs, "output")]
    elif name == "WHILE":
        body = info.subgraphs[opts["body_subgraph_index"]]
        cond = info.subgraphs[opts["cond_subgraph_index"]]
        pairs += [
            (op.inputs, body, body.inputs, "input"),
            (op.outputs, body, body.outputs, "output"),
            (op.inputs, cond, cond.inputs, "input"),
        ]
    for ours, callee, theirs, what in pairs:
        for k, (a, b) in enumerate(zip(ours, theirs)):
            if a < 0:
                continue
            ta, tb = sg.tensors[a].type_name, callee.tensors[b].type_name
            if ta != tb:
                raise ModelError(
                    f"{messages.operator(sg, op)}: {what} {k} (tensor {a}) is {ta}, but subgraph "
                    f"{callee.index}'s {what} {k} is {tb}; they must have the same type"
                )


# The builtins check_builtin has a rule for.
_RULES = {
    "SPLIT": _split,
    "SPLIT_V": _split,
    "TRANSPOSE": _transpose,
    "RESHAPE": _reshape,
    "CONCATENATION": _concatenation,
    "DEQUANTIZE": _dequantize,
    "DENSIFY": _dequantize,
    "STRIDED_SLICE": _strided_slice,
    "DEPTH_TO_SPACE": _block_size,
    "SPACE_TO_DEPTH": _block_size,
    "READ_VARIABLE": _variable,
    "ASSIGN_VARIABLE": _variable,
    **dict.fromkeys(SUBGRAPH_FIELDS, _control_flow),
}


def _is_static(sg, t, producer) -> bool:
    """A constant, or DENSIFY / DEQUANTIZE of one (the chains XNNPACK folds into static weights)."""
    for _ in range(3):
        if sg.tensors[t].data is not None:
            return True
        p = producer.get(t)
        if p is None:
            return False
        op = sg.operators[p]
        if op.op_name not in ("DENSIFY", "DEQUANTIZE") or not op.inputs or op.inputs[0] < 0:
            return False
        t = op.inputs[0]
    return False


def check_static_concatenations(sg) -> None:
    """The XNNPACK delegate sizes a concatenation from the declared shapes when the
    interpreter is created, before any Prepare: static shapes that do not
    concatenate are refused (checked last, after the rules on the data flow)."""
    tensors = sg.tensors
    for op in sg.operators:
        if (
            op.op_name != "CONCATENATION"
            or op.is_custom
            or not op.inputs
            or min(op.inputs) < 0
            or len(op.outputs) != 1
            or op.outputs[0] < 0
        ):
            continue
        ts = [tensors[t] for t in op.inputs + op.outputs]
        if any(_has_unknown_dims(t) for t in ts):
            continue  # placeholders: checked on the allocated shapes instead
        rank = len(tensors[op.inputs[0]].shape)
        ax = effective_options(op).get("axis", 0)
        a = ax + rank if ax < 0 else ax
        shapes = [tensors[t].shape for t in op.inputs]
        out = tensors[op.outputs[0]].shape
        fits = (
            len(out) == rank
            and 0 <= a < rank
            and sum(sh[a] for sh in shapes if len(sh) == rank) == out[a]
            and all(len(sh) == rank and all(x == y for k, (x, y) in enumerate(zip(sh, out)) if k != a) for sh in shapes)
        )
        if not fits:
            raise ModelError(
                f"{messages.operator(sg, op)}: inputs {[list(x) for x in shapes]} do not "
                f"concatenate on axis {ax} into its output {list(out)}"
            )


def _has_unknown_dims(t) -> bool:
    """A tensor whose declared shape is a placeholder for dimensions known only later."""
    return t.shape_signature is not None and any(d < 0 for d in t.shape_signature)
