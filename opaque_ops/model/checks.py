"""Checks that keep a model from crashing the TFLite runtime, each rule next to its table.

Three entry points:

- :func:`check_model` runs on the parsed model before TFLite sees it;
- :func:`check_resize` runs before an input is resized, on the new shape;
- :func:`check_allocated` runs after every (re)allocation, on the tensor
  shapes TFLite actually computed, through the Interpreter's one guarded
  path for anything that can move tensor memory.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import InvalidInputError, ModelError
from .metadata import check_metadata
from .reader import ModelInfo
from .runtime_ops import RUNTIME_CUSTOM_OPS, check_runtime_op, check_runtime_op_shapes
from .schema import _OP_OPTIONS, _OPTION_FIELDS, _OPTIONS_TYPE
from .shapes import infer_shapes


def check_model(info: ModelInfo, registered=()) -> None:
    """Reject graph structures that the TFLite runtime does not verify but trusts.

    TFLite's own verifier checks the flatbuffer layout and tensor byte sizes,
    but not the data flow between operators: a tensor written by two
    operators, or an operator writing its own input, makes the memory planner
    give two live tensors the same arena bytes (or a resource tensor a bogus
    handle), and ``invoke()`` then corrupts the heap or segfaults.  Each rule
    here was added for a crash that model fuzzing (tools/fuzz_models.py)
    found in the 2.17.1 runtime or its XNNPACK delegate:

    - at least one subgraph; constant data no longer than its shape says;
    - quantization scales finite, positive and normal; zero points inside
      the tensor type's range;
    - every tensor written by at most one operator, never by the operator
      that reads it, never a subgraph input or a constant; no omitted (-1)
      outputs; omitted inputs only on builtins whose schema allows them;
    - no operator reads a tensor before the operator that writes it runs;
      every subgraph output is written, an input, or a constant;
    - common builtins have their number of inputs, and an output;
    - quantized CONV_2D / DEPTHWISE_CONV_2D have a bias; strides, dilations
      and pooling windows are at least 1, padding is SAME or VALID;
    - READ_VARIABLE's declared output shape matches what ASSIGN_VARIABLE
      stores in the same variable;
    - each signature names exactly its subgraph's inputs and outputs;
    - the ``CONVERSION_METADATA`` entry, which the runtime parses unverified,
      lies inside its buffer (:mod:`~opaque_ops.model.metadata`).

    All are linear in the size of the model.

    Parameters
    ----------
    info : ModelInfo
        From :func:`read_model`.
    registered : collection of str, optional
        Names of the custom ops registered by the caller's op libraries: a
        registered kernel replaces the runtime's own op of the same name, so
        the runtime ops' option rules do not apply to it.

    Raises
    ------
    ModelError
        The message names the subgraph, operator and tensor at fault.
    """
    if not info.subgraphs:
        # The XNNPACK delegate indexes subgraph 0 unconditionally.
        raise ModelError("the model has no subgraphs")
    check_metadata(info)
    for sg in info.subgraphs:
        tensors = sg.tensors
        sg_inputs = set(sg.inputs)
        for t in sg.inputs:
            if tensors[t].data is not None:
                # TFLite plans an input in the arena and lets set_tensor write
                # it, but a constant's buffer is the model's read-only bytes.
                raise ModelError(
                    f"subgraph {sg.index} input {t} ({tensors[t].name!r}) is a constant (it has data "
                    "in the model); a subgraph input must be a tensor without data")
        handles = set()  # RESOURCE and VARIANT tensors
        for t in tensors:
            shape, sig, data = t.shape, t.shape_signature, t.data
            if len(shape) > MAX_RANK or (sig is not None and len(sig) > MAX_RANK):
                raise ModelError(
                    f"subgraph {sg.index} tensor {t.index} ({t.name!r}) has rank {len(shape)}; "
                    f"the runtime supports at most {MAX_RANK} dimensions")
            count = 1
            if shape:
                if min(shape) < 0:
                    # Unknown dimensions belong in shape_signature (-1); the shape
                    # itself is what TFLite allocates, and it trusts it.
                    raise ModelError(
                        f"subgraph {sg.index} tensor {t.index} ({t.name!r}) has shape {list(shape)}; "
                        "dimensions must be >= 0 (-1 belongs in shape_signature)")
                count = _elements(shape)
                if count > MAX_ELEMENTS:
                    raise ModelError(
                        f"subgraph {sg.index} tensor {t.index} ({t.name!r}) has shape {list(shape)}: "
                        f"more than {MAX_ELEMENTS} elements")
            if t.is_sparse:
                if data is None:
                    # Only constants can be stored sparse (DENSIFY expands them
                    # once); the XNNPACK delegate trusts the flag on any tensor.
                    raise ModelError(
                        f"subgraph {sg.index} tensor {t.index} ({t.name!r}) has sparsity parameters but no "
                        "data; only constant tensors can be sparse")
                _check_sparsity(sg, t)
            elif data is not None and (t.dtype is not None or t.type_name in _WHOLE_BYTE_TYPES):
                # TFLite only checks that dense data is not shorter than the
                # shape (sparse tensors are legitimately shorter, so that is
                # left to it); a longer buffer with a zero dimension (a
                # 1x0x1x32 filter holding 160 bytes) divides by zero in the
                # kernels, and an int32 constant retyped BFLOAT16 (twice the
                # bytes its shape says) crashed XNNPACK's TRANSPOSE.
                want = count * (t.dtype.itemsize if t.dtype is not None else _WHOLE_BYTE_TYPES[t.type_name])
                if len(data) > want:
                    raise ModelError(
                        f"subgraph {sg.index} tensor {t.index} ({t.name!r}) has shape {list(shape)} "
                        f"({want} bytes of {t.type_name}) but {len(data)} bytes of data")
            quant = t.quantization
            scales = quant["scales"]
            # XNNPACK derives requantization multipliers from the scales when
            # the interpreter is created; a NaN or infinite one crashes it.
            # Subnormal scales overflow the same multipliers.
            if len(scales):
                good = np.isfinite(scales) & (scales >= _F32_TINY)
                if not good.all():
                    raise ModelError(
                        f"subgraph {sg.index} tensor {t.index} ({t.name!r}) has quantization scale(s) "
                        f"{scales[~good][:4].tolist()}: scales must be finite and positive (normal floats)")
            zps = quant["zero_points"]
            if len(zps):
                lim = _ZERO_POINT_RANGE.get(t.type_name)
                if lim is not None and ((zps < lim[0]) | (zps > lim[1])).any():
                    bad = zps[(zps < lim[0]) | (zps > lim[1])][:4].tolist()
                    raise ModelError(
                        f"subgraph {sg.index} tensor {t.index} ({t.name!r}) has zero point(s) {bad} outside "
                        f"the {t.type_name} range [{lim[0]}, {lim[1]}]")
            if t.type_name in _HANDLE_TYPES:
                handles.add(t.index)
        producer: dict[int, int] = {}
        for op in sg.operators:
            if handles and not op.is_custom and op.op_name not in _HANDLE_CONSUMERS:
                for t in op.inputs:
                    if t in handles:
                        # A handle read as data (a RESOURCE constant as conv
                        # weights) has no shape or bytes the kernel expects.
                        raise ModelError(
                            f"subgraph {sg.index} operator {op.index} ({op.op_name}) reads tensor {t} of type "
                            f"{tensors[t].type_name}; only {sorted(_HANDLE_CONSUMERS)} take handles")
            for t in op.outputs:
                if t < 0:
                    if not op.is_custom:
                        # No builtin has optional outputs; kernels write them unchecked.
                        raise ModelError(
                            f"subgraph {sg.index} operator {op.index} ({op.op_name}) has an omitted "
                            "(-1) output")
                    continue
                if t in producer:
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) writes tensor {t}, "
                        f"which operator {producer[t]} already writes: each tensor may have one producer")
                if t in op.inputs:
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) writes tensor {t}, "
                        "which is also one of its own inputs")
                if t in sg_inputs:
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) writes tensor {t}, "
                        "which is an input of the subgraph")
                if tensors[t].data is not None:
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) writes tensor {t}, "
                        "which is a constant (it has data in the model)")
                if t in handles and not op.is_custom and op.op_name not in _HANDLE_PRODUCERS:
                    # Resource and variant tensors hold handles, not arena
                    # data: a kernel writing its values there corrupts them.
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) writes tensor {t} of "
                        f"type {tensors[t].type_name}; only {sorted(_HANDLE_PRODUCERS)} produce those")
                if tensors[t].type_name == "STRING" and not op.is_custom and op.op_name not in _STRING_PRODUCERS:
                    # A string tensor gets no arena memory: the kernels that
                    # produce strings allocate it themselves.  Any other kernel
                    # writes its numbers through a null pointer (SOFTMAX: SIGSEGV).
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) writes tensor {t} of type "
                        f"STRING, which {op.op_name} cannot produce; only {sorted(_STRING_PRODUCERS)} write strings")
                if tensors[t].is_variable:
                    # Variable tensors are state that stateful ops update in
                    # place through an *input*; planned as an output, the
                    # arena gives the same bytes two lifetimes.
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) writes tensor {t}, "
                        "which is marked as a variable (is_variable); variables are inputs of the ops "
                        "that update them")
                producer[t] = op.index
        # An operator reading a tensor that only a later operator writes
        # reads arena memory planned for someone else.
        assigned: dict[int, tuple] = {}
        for op in sg.operators:
            if op.is_custom and op.op_name in RUNTIME_CUSTOM_OPS and op.op_name not in registered:
                check_runtime_op(sg.index, op)
            if op.op_name in _BUILTIN_RULES and not op.is_custom:
                _check_builtin(info, sg, op, producer)
            if -1 in op.inputs and not op.is_custom:
                # Builtin kernels fetch their inputs without a null check
                # unless the schema makes the input optional.
                pos = [k for k, t in enumerate(op.inputs) if t == -1]
                allowed = _OPTIONAL_POSITIONS.get(op.op_name)
                if op.op_name not in _OPTIONAL_INPUT_OPS:
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) has an omitted (-1) input "
                        f"at position {pos[0]}, but {op.op_name} has no optional inputs")
                if allowed is not None and not set(pos) <= allowed:
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) has an omitted (-1) input "
                        f"at position {min(set(pos) - allowed)}; only input(s) {sorted(allowed)} may be omitted")
            if (op.op_name in ("CONV_2D", "DEPTHWISE_CONV_2D") and op.inputs and op.inputs[0] >= 0
                    and tensors[op.inputs[0]].type_name in ("INT8", "UINT8", "INT16")
                    and (len(op.inputs) < 3 or op.inputs[2] < 0)):
                # The quantized kernels add the bias without checking it exists.
                raise ModelError(
                    f"subgraph {sg.index} operator {op.index} ({op.op_name}) is quantized "
                    f"({tensors[op.inputs[0]].type_name}) but has no bias input; quantized "
                    "convolutions need one")
            need = _MIN_INPUTS.get(op.op_name)
            if need is not None and not op.is_custom:
                most = _MAX_INPUTS.get(op.op_name, need)
                # The XNNPACK delegate reads a node's inputs while it builds
                # its graph, before any kernel's Prepare counts them.
                if len(op.inputs) < need:
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) has {len(op.inputs)} "
                        f"input(s); {op.op_name} takes at least {need}")
                if most is not None and len(op.inputs) > most:
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) has {len(op.inputs)} "
                        f"inputs; {op.op_name} takes at most {most}")
            if not op.outputs and not op.is_custom and op.op_name not in ("ASSIGN_VARIABLE", "CALL_ONCE"):
                raise ModelError(
                    f"subgraph {sg.index} operator {op.index} ({op.op_name}) has no outputs")
            if op.op_name in _WINDOW_OPTIONS:
                opts = effective_options(op)
                pad = opts.get("padding")
                if op.builtin_options is None or op.builtin_options_type != _OPTIONS_TYPE[_OP_OPTIONS[op.op_name]]:
                    # Without its own table the runtime zero-fills the params:
                    # padding "unknown" and strides 0.
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) has no "
                        f"{_OP_OPTIONS[op.op_name]} (options type {op.builtin_options_type}); the runtime "
                        "would run it with strides of 0")
                if pad not in ("SAME", "VALID"):
                    # An unknown padding enum leaves the output size undefined.
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) has padding {pad!r}; "
                        "it must be SAME or VALID")
                # Kernels divide by strides and multiply by dilations unchecked.
                for key in _WINDOW_OPTIONS[op.op_name]:
                    v = opts.get(key)
                    if v is not None and not 1 <= v <= MAX_WINDOW_PARAM:
                        raise ModelError(
                            f"subgraph {sg.index} operator {op.index} ({op.op_name}) has {key}={v}; "
                            f"it must be between 1 and {MAX_WINDOW_PARAM}")
            if op.op_name == "ASSIGN_VARIABLE" and len(op.inputs) == 2 and min(op.inputs) >= 0:
                assigned.setdefault(op.inputs[0], tensors[op.inputs[1]].shape)
            for t in op.inputs:
                p = producer.get(t)
                if p is not None and p >= op.index:
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} ({op.op_name}) reads tensor {t} "
                        f"before operator {p} writes it (operators must be in execution order)")
        for t in sg.outputs:
            if t not in producer and t not in sg_inputs and tensors[t].data is None and not tensors[t].is_variable:
                raise ModelError(
                    f"subgraph {sg.index} output tensor {t} ({tensors[t].name!r}) is written by no "
                    "operator and is neither an input nor a constant")
        # READ_VARIABLE's output is planned with its declared shape, but at
        # run time it takes the stored value's: a disagreement makes the next
        # operator read past the value's memory.
        for op in sg.operators:
            if op.op_name == "READ_VARIABLE" and op.inputs and op.outputs and op.inputs[0] in assigned:
                out = tensors[op.outputs[0]].shape
                val = assigned[op.inputs[0]]
                if out != val and -1 not in out and -1 not in val:
                    raise ModelError(
                        f"subgraph {sg.index} operator {op.index} (READ_VARIABLE) declares output shape "
                        f"{list(out)}, but the variable it reads holds values of shape {list(val)}")

        _check_static_concatenations(sg)
    _check_call_graph(info)
    _check_signatures(info)


# Builtins whose outputs may be RESOURCE or VARIANT handles (the control-flow
# ops pass their subgraphs' handles through).
_HANDLE_PRODUCERS = frozenset({"VAR_HANDLE", "HASHTABLE", "WHILE", "IF", "CALL_ONCE", "STABLEHLO_WHILE",
                               "STABLEHLO_CASE", "STABLEHLO_COMPOSITE"})

# Builtins that may read RESOURCE or VARIANT handles.
_HANDLE_CONSUMERS = frozenset({"READ_VARIABLE", "ASSIGN_VARIABLE", "HASHTABLE_FIND", "HASHTABLE_IMPORT",
                               "HASHTABLE_SIZE", "WHILE", "IF", "CALL_ONCE", "STABLEHLO_WHILE",
                               "STABLEHLO_CASE", "STABLEHLO_COMPOSITE"})

# Element sizes of the fixed-size types numpy has no dtype for (sub-byte
# types are packed and left out).
_WHOLE_BYTE_TYPES = {"BFLOAT16": 2, "FLOAT8_E4M3FN": 1, "FLOAT8_E5M2": 1}

# Builtins whose kernels can write STRING outputs (they allocate them), as
# TFLite's kernels do: gather.cc, gather_nd.cc, slice.cc, strided_slice.cc,
# tile.cc, fill.cc, reshape-like ops that share the input's buffer, the
# hash tables, and control flow that passes tensors through.
_STRING_PRODUCERS = frozenset(
    "GATHER GATHER_ND SLICE STRIDED_SLICE TILE FILL RESHAPE SQUEEZE EXPAND_DIMS HASHTABLE_FIND "
    "HASHTABLE_LOOKUP WHILE IF CALL_ONCE".split())

# Tensor types that hold handles, not data.
_HANDLE_TYPES = frozenset({"RESOURCE", "VARIANT"})

# Zero points a quantized tensor of each type can hold.
_ZERO_POINT_RANGE = {"INT8": (-128, 127), "UINT8": (0, 255), "INT16": (-32768, 32767), "INT4": (-8, 7)}

# Fewest inputs each builtin takes (the ones the XNNPACK delegate handles).
_MIN_INPUTS = {
    **dict.fromkeys(
        "ABS AVERAGE_POOL_2D CEIL CONCATENATION DEPTH_TO_SPACE DEQUANTIZE ELU EXP FLOOR GELU HARD_SWISH "
        "LEAKY_RELU LOG LOGISTIC L2_NORMALIZATION MAX_POOL_2D NEG QUANTIZE RELU RELU6 RELU_N1_TO_1 "
        "RESHAPE ROUND RSQRT SOFTMAX SPACE_TO_DEPTH SQRT SQUARE TANH SIN COS SQUEEZE".split(), 1),
    **dict.fromkeys(
        "ADD BATCH_MATMUL CONV_2D DEPTHWISE_CONV_2D DIV FULLY_CONNECTED MAXIMUM MEAN MINIMUM MUL PAD "
        "PRELU RESIZE_BILINEAR RESIZE_NEAREST_NEIGHBOR SPLIT SQUARED_DIFFERENCE SUB SUM TRANSPOSE "
        "REDUCE_MAX REDUCE_MIN REDUCE_PROD EXPAND_DIMS GATHER POW ASSIGN_VARIABLE".split(), 2),
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
_MAX_INPUTS = {"CONCATENATION": None, "RESHAPE": 2, "CONV_2D": 3, "DEPTHWISE_CONV_2D": 3,
               "FULLY_CONNECTED": 3, "TRANSPOSE_CONV": 4}

# Strides, dilations and pooling windows above this are refused.  1 is the
# schema's floor (kernels divide by strides); the ceiling is measured: on
# TFLite 2.17.1 the reference CONV_2D kernel dies (SIGFPE, or bad_alloc)
# from a stride of 2**15 on, and no real model comes near 4096.
MAX_WINDOW_PARAM = 4096

# Window options that must be positive, per op.
_WINDOW_OPTIONS = {
    "CONV_2D": ("stride_w", "stride_h", "dilation_w_factor", "dilation_h_factor"),
    "DEPTHWISE_CONV_2D": ("stride_w", "stride_h", "dilation_w_factor", "dilation_h_factor"),
    "TRANSPOSE_CONV": ("stride_w", "stride_h"),
    "AVERAGE_POOL_2D": ("stride_w", "stride_h", "filter_width", "filter_height"),
    "MAX_POOL_2D": ("stride_w", "stride_h", "filter_width", "filter_height"),
    "L2_POOL_2D": ("stride_w", "stride_h", "filter_width", "filter_height"),
}

# Where the conv-like ops allow an omitted input: the bias only.
_OPTIONAL_POSITIONS = {"CONV_2D": {2}, "DEPTHWISE_CONV_2D": {2}, "FULLY_CONNECTED": {2},
                       "TRANSPOSE_CONV": {3}, "CONV_3D": {2}, "CONV_3D_TRANSPOSE": {3}}

# Builtin ops whose schema allows an omitted (-1) input, e.g. a missing bias.
_OPTIONAL_INPUT_OPS = {
    "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "CONV_3D",
    "CONV_3D_TRANSPOSE", "LSTM", "UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM",
    "BIDIRECTIONAL_SEQUENCE_RNN", "RNN", "UNIDIRECTIONAL_SEQUENCE_RNN", "SVDF", "LSH_PROJECTION",
    "STABLEHLO_COMPOSITE",
}
# (WHILE, IF and CALL_ONCE copy every input into the subgraph they call:
# an omitted one is dereferenced as tensor -1.)


# XNNPACK's tensors have at most XNN_MAX_TENSOR_DIMS (6) dimensions; a deeper
# shape overruns its fixed-size shape arrays (rank 64 crashes the process, a
# rank-7 FULLY_CONNECTED silently gets a wrong output shape), and TFLite's
# own kernels handle at most 6 (most at most 4 or 5).
MAX_RANK = 6

# TFLite's kernels count elements in an ``int`` (RuntimeShape::FlatSize,
# NumElements used as int): beyond this the count wraps and they index
# outside their buffers.
MAX_ELEMENTS = 2**31 - 1


_F32_TINY = float(np.finfo(np.float32).tiny)


def _elements(shape) -> int:
    return math.prod(map(int, shape))


def effective_options(op) -> dict:
    """The builtin options the runtime will use for ``op``.

    The runtime reads an op's table only when the options type tag is the
    one its op expects (``builtin_options_as_Conv2DOptions()`` and so on);
    under any other tag, or with no table, every field takes its zero
    default.  Checks must reason on these, not on whatever table is stored.
    """
    table = _OP_OPTIONS.get(op.op_name)
    if table is None:
        return {}
    if op.builtin_options_type == _OPTIONS_TYPE[table] and op.builtin_options is not None:
        return op.builtin_options
    return {f: _ZERO_DEFAULTS.get(kind, d) for f, _slot, kind, d in _OPTION_FIELDS[table]}


# What the zero-filled params mean for the enum fields when a table is absent.
_ZERO_DEFAULTS = {"pad": "UNKNOWN", "act": "NONE", "i32": 0, "bool": False, "f32": 0.0}

# Builtins whose options pick a subgraph: (options field, ...).
_SUBGRAPH_FIELDS = {"WHILE": ("cond_subgraph_index", "body_subgraph_index"),
                    "IF": ("then_subgraph_index", "else_subgraph_index"),
                    "CALL_ONCE": ("init_subgraph_index",)}


# The builtins _check_builtin has a rule for.
_BUILTIN_RULES = frozenset({"SPLIT", "SPLIT_V", "CONCATENATION", "DEQUANTIZE", "DENSIFY", "STRIDED_SLICE",
                            "READ_VARIABLE", "ASSIGN_VARIABLE", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH",
                            "TRANSPOSE", *_SUBGRAPH_FIELDS})

# Where SPLIT and SPLIT_V read their axis.
_SPLIT_AXIS = {"SPLIT": 0, "SPLIT_V": 2}


def _check_builtin(info, sg, op, producer) -> None:
    """Per-builtin rules on the options the runtime will parse (see effective_options)."""
    if op.is_custom:
        return
    where = f"subgraph {sg.index} operator {op.index} ({op.op_name})"
    name = op.op_name
    opts = effective_options(op)
    tensors = sg.tensors
    if name in ("SPLIT", "SPLIT_V"):
        # The reference kernel refuses a mismatch in Prepare; the XNNPACK
        # delegate writes num_splits outputs while it builds its graph.
        if opts.get("num_splits") != len(op.outputs):
            raise ModelError(f"{where} has {len(op.outputs)} outputs but num_splits="
                             f"{opts.get('num_splits')}; they must be equal")
        k = _SPLIT_AXIS[name]
        ax = op.inputs[k] if len(op.inputs) > k else -1
        if ax >= 0 and (tensors[ax].type_name != "INT32" or _elements(tensors[ax].shape) != 1):
            # The kernels read the axis as one int32 (GetTensorData<int>(axis)[0]),
            # checking neither its type nor its size: an empty one is a null read.
            raise ModelError(f"{where} reads its axis from tensor {ax}, a {tensors[ax].type_name} of shape "
                             f"{list(tensors[ax].shape)}; the axis must be one INT32 value")
    elif name == "TRANSPOSE" and len(op.inputs) > 1 and op.inputs[1] >= 0:
        # The XNNPACK delegate copies the permutation into a fixed array of
        # XNN_MAX_TENSOR_DIMS entries while the interpreter is created: a
        # longer one overruns the stack.  The reference kernel takes a 1-D
        # integer permutation of at most 6 entries (one per input dimension).
        perm = tensors[op.inputs[1]]
        if perm.type_name not in ("INT32", "INT64") or len(perm.shape) != 1 or perm.shape[0] > MAX_RANK:
            raise ModelError(f"{where} takes its permutation from tensor {op.inputs[1]}, a {perm.type_name} "
                             f"of shape {list(perm.shape)}; it must be a 1-D INT32 or INT64 tensor of at most "
                             f"{MAX_RANK} entries")
    elif name == "CONCATENATION" and op.inputs and op.inputs[0] >= 0:
        rank = len(tensors[op.inputs[0]].shape)
        ax = opts.get("axis", 0)
        # The XNNPACK delegate indexes the shape with the axis at creation.
        if not -rank <= ax < max(rank, 1):
            raise ModelError(f"{where} has axis={ax}, outside the inputs' rank {rank}")
    elif (name in ("DEQUANTIZE", "DENSIFY") and op.inputs and op.outputs and min(op.inputs[0], op.outputs[0]) >= 0
          and _is_static(sg, op.inputs[0], producer)
          and tensors[op.outputs[0]].shape != tensors[op.inputs[0]].shape):
        # The XNNPACK delegate turns DEQUANTIZE of a constant (float16
        # weights) into static weights of the *declared* output shape, and
        # reads that many values from the constant.
        raise ModelError(f"{where} turns constant {op.inputs[0]} of shape "
                         f"{list(tensors[op.inputs[0]].shape)} into tensor {op.outputs[0]} declared "
                         f"{list(tensors[op.outputs[0]].shape)}; the shapes must be equal")
    elif name == "STRIDED_SLICE" and opts.get("offset"):
        # With offset=True, end is relative to begin; the XNNPACK delegate of
        # the runtimes in use ignores the flag and slices another shape than
        # the one planned.  Refused until a runtime handles it everywhere.
        raise ModelError(f"{where} has offset=True (end relative to begin), which the runtime's "
                         "XNNPACK path does not honour; re-export the model without it")
    elif name in ("DEPTH_TO_SPACE", "SPACE_TO_DEPTH"):
        # The kernels divide by block_size and compute block_size**2 in an
        # int: 65536 wraps to 0 and the XNNPACK delegate's channel check
        # divides by it (SIGFPE while the interpreter is created).  Above
        # sqrt(MAX_ELEMENTS) no tensor could hold block_size**2 channels, so
        # such a model can never run.
        bs = opts.get("block_size", 0)
        if bs < 1 or bs * bs > MAX_ELEMENTS:
            raise ModelError(f"{where} has block_size={bs}; it must be at least 1 and its square at most "
                             f"{MAX_ELEMENTS}")
    elif name in ("READ_VARIABLE", "ASSIGN_VARIABLE") and op.inputs and op.inputs[0] >= 0:
        # The kernels look the variable up by the handle VAR_HANDLE wrote
        # into the resource tensor; a tensor nobody wrote holds garbage.
        res = op.inputs[0]
        p = producer.get(res)
        if res not in sg.inputs and (p is None or sg.operators[p].op_name != "VAR_HANDLE"):
            raise ModelError(f"{where} reads resource tensor {res}, which no VAR_HANDLE of subgraph "
                             f"{sg.index} writes (and which is not a subgraph input)")
    elif name in _SUBGRAPH_FIELDS:
        for field in _SUBGRAPH_FIELDS[name]:
            k = opts.get(field, 0)
            if not 0 < k < len(info.subgraphs) or k == sg.index:
                raise ModelError(f"{where} has {field}={k}; it must name another subgraph "
                                 f"(1 to {len(info.subgraphs) - 1}, not {sg.index} itself)")
        # The kernels copy tensors between the caller and the called subgraph
        # by position, trusting that the types agree (a float copied into a
        # RESOURCE handle crashes).
        pairs = []  # (our tensor indices, callee subgraph, its tensor indices, what)
        if name == "IF":
            for field in _SUBGRAPH_FIELDS[name]:
                callee = info.subgraphs[opts[field]]
                pairs += [(op.inputs[1:], callee, callee.inputs, "input"),
                          (op.outputs, callee, callee.outputs, "output")]
        elif name == "WHILE":
            body = info.subgraphs[opts["body_subgraph_index"]]
            cond = info.subgraphs[opts["cond_subgraph_index"]]
            pairs += [(op.inputs, body, body.inputs, "input"), (op.outputs, body, body.outputs, "output"),
                      (op.inputs, cond, cond.inputs, "input")]
        for ours, callee, theirs, what in pairs:
            for k, (a, b) in enumerate(zip(ours, theirs)):
                if a < 0:
                    continue
                ta, tb = tensors[a].type_name, callee.tensors[b].type_name
                if ta != tb:
                    raise ModelError(f"{where}: {what} {k} (tensor {a}) is {ta}, but subgraph "
                                     f"{callee.index}'s {what} {k} is {tb}; they must have the same type")


def _check_sparsity(sg, t) -> None:
    """The structure TFLite's DENSIFY and the XNNPACK delegate walk without checking.

    The rules are those of the schema's SparsityParameters (the ones
    TFLite's optional model verifier applies, which TfLiteModelCreate does
    not run): the traversal order is a permutation covering the tensor's
    dimensions then its block dimensions, each block dimension names a
    tensor dimension, one metadata entry per traversed dimension; a dense
    entry's size is that dimension's, a sparse (CSR) entry has segments
    that start at 0, never decrease and end at its index count, and indices
    inside the dimension; and the stored values are exactly the data.
    """
    where = f"subgraph {sg.index} tensor {t.index} ({t.name!r}): sparsity"
    sp = t.sparsity or {}
    rank = len(t.shape)
    order, blocks, dims = sp.get("traversal_order", []), sp.get("block_map", []), sp.get("dim_metadata", [])
    n = rank + len(blocks)
    if sorted(order) != list(range(n)) or sorted(order[:rank]) != list(range(rank)):
        raise ModelError(f"{where} traversal_order {order} is not a permutation of the {rank} dimensions "
                         f"followed by the {len(blocks)} block dimensions")
    if any(not 0 <= b < rank for b in blocks) or len(set(blocks)) != len(blocks):
        raise ModelError(f"{where} block_map {blocks} must name distinct dimensions of the rank-{rank} tensor")
    if len(dims) != n:
        raise ModelError(f"{where} has {len(dims)} dim_metadata entries for {n} traversed dimensions")
    if t.data is None or t.dtype is None or min(t.shape, default=1) < 0:
        raise ModelError(f"{where} is on a tensor without data (or of a type without fixed size)")
    # Sizes of the traversed dimensions: blocked dimensions are counted in
    # blocks, and each block dimension holds the block size (the dense size
    # stored for it).
    sizes = []
    block_size = {}
    for k in range(rank, n):
        fmt, dense, _seg, _idx = dims[k]
        if fmt != 0 or dense < 1:
            raise ModelError(f"{where} block dimension {k} must be dense with a positive size")
        block_size[blocks[k - rank]] = dense
    for k in range(n):
        d = order[k]
        if d < rank:
            full = t.shape[d]
            b = block_size.get(d, 1)
            if full % b:
                raise ModelError(f"{where} dimension {d} ({full}) is not a multiple of its block {b}")
            sizes.append(full // b)
        else:
            sizes.append(block_size[blocks[d - rank]])
    count = 1  # entries reached so far (product of the traversed sizes)
    for k in range(n):
        fmt, dense, seg, idx = dims[k]
        if fmt == 0:
            if dense != sizes[k]:
                raise ModelError(f"{where} dense dimension {k} has size {dense}, expected {sizes[k]}")
            count *= dense
        elif fmt == 1:
            if seg is None or idx is None or len(seg) != count + 1:
                raise ModelError(f"{where} sparse dimension {k} needs {count + 1} segments and its indices")
            seg = seg.astype(np.int64)
            if seg[0] != 0 or (np.diff(seg) < 0).any() or seg[-1] != len(idx):
                raise ModelError(f"{where} sparse dimension {k} has segments that do not partition its "
                                 f"{len(idx)} indices")
            if len(idx) and (idx.astype(np.int64) >= sizes[k]).any():
                raise ModelError(f"{where} sparse dimension {k} has indices beyond its size {sizes[k]}")
            count = len(idx)
        else:
            raise ModelError(f"{where} dimension {k} has unknown format {fmt}")
    if count * t.dtype.itemsize != len(t.data):
        raise ModelError(f"{where} describes {count} stored values but the tensor has {len(t.data)} bytes "
                         f"of {t.type_name}")


def _check_static_concatenations(sg) -> None:
    """The XNNPACK delegate sizes a concatenation from the declared shapes when the
    interpreter is created, before any Prepare: static shapes that do not
    concatenate are refused (checked last, after the rules on the data flow)."""
    tensors = sg.tensors
    for op in sg.operators:
        if (op.op_name != "CONCATENATION" or op.is_custom or not op.inputs or min(op.inputs) < 0
                or len(op.outputs) != 1 or op.outputs[0] < 0):
            continue
        ts = [tensors[t] for t in op.inputs + op.outputs]
        if any(_has_unknown_dims(t) for t in ts):
            continue  # placeholders: checked on the allocated shapes instead
        rank = len(tensors[op.inputs[0]].shape)
        ax = effective_options(op).get("axis", 0)
        a = ax + rank if ax < 0 else ax
        shapes = [tensors[t].shape for t in op.inputs]
        out = tensors[op.outputs[0]].shape
        fits = (len(out) == rank and 0 <= a < rank and sum(sh[a] for sh in shapes if len(sh) == rank) == out[a]
                and all(len(sh) == rank and all(x == y for k, (x, y) in enumerate(zip(sh, out)) if k != a)
                        for sh in shapes))
        if not fits:
            raise ModelError(f"subgraph {sg.index} operator {op.index} (CONCATENATION): inputs "
                             f"{[list(x) for x in shapes]} do not concatenate on axis {ax} into its output "
                             f"{list(out)}")


def _has_unknown_dims(t) -> bool:
    """A tensor whose declared shape is a placeholder for dimensions known only later."""
    return t.shape_signature is not None and any(d < 0 for d in t.shape_signature)


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


def _check_call_graph(info) -> None:
    """Subgraphs calling each other in a cycle recurse until the stack overflows."""
    calls = {}
    for sg in info.subgraphs:
        calls[sg.index] = {effective_options(op).get(f, 0) for op in sg.operators if op.op_name in _SUBGRAPH_FIELDS
                           for f in _SUBGRAPH_FIELDS[op.op_name]}
    state: dict[int, int] = {}

    def visit(n, path):
        if state.get(n) == 1:
            raise ModelError(f"subgraphs call each other in a cycle: {' -> '.join(map(str, path + [n]))}")
        if state.get(n) == 2 or n not in calls:
            return
        state[n] = 1
        for m in sorted(calls[n]):
            visit(m, path + [n])
        state[n] = 2

    for n in calls:
        visit(n, [])


def _check_signatures(info) -> None:
    """A signature names each input and each output of its subgraph exactly once.

    The runtime's signature runner counts its inputs from the subgraph and
    looks their names up in the signature by position
    (``tensorflow/lite/core/signature_runner.h``: ``input_size()`` is
    ``subgraph_->inputs().size()``, ``input_names()`` the signature's), so a
    signature with fewer names is read past its end.
    """
    for s in info.signatures:
        sg = info.subgraphs[s.subgraph_index]
        for what, named, real in (("inputs", s.inputs, sg.inputs), ("outputs", s.outputs, sg.outputs)):
            if sorted(named.values()) != sorted(real):
                raise ModelError(
                    f"signature {s.key!r} names tensors {sorted(named.values())} as its {what}, but subgraph "
                    f"{s.subgraph_index}'s {what} are {list(real)}; a signature must name each of them once")


def check_resize(info: ModelInfo, tensor_index: int, shape) -> None:
    """Refuse a new input shape that the runtime would not survive.

    Parameters
    ----------
    info : ModelInfo
        The model.
    tensor_index : int
        The input tensor (an index into subgraph 0's tensors).
    shape : sequence of int
        The requested shape.

    Raises
    ------
    InvalidInputError
        The message names the input, the shape and the limit.

    Notes
    -----
    Only what is wrong whatever the model does is refused here: more than
    :data:`MAX_RANK` dimensions, more than :data:`MAX_ELEMENTS` elements.
    Whether the model's operators accept the shape is decided after the
    allocation, on the shapes TFLite plans (:func:`check_allocated`).
    """
    if len(shape) > MAX_RANK:
        raise InvalidInputError(
            f"cannot resize input {tensor_index} to rank {len(shape)} (shape {list(shape)[:8]}...): "
            f"the runtime supports at most {MAX_RANK} dimensions"
        )
    if _elements(shape) > MAX_ELEMENTS:
        raise InvalidInputError(
            f"cannot resize input {tensor_index} to {list(shape)}: more than {MAX_ELEMENTS} elements")


def check_allocated(info: ModelInfo, shape_of, config=()) -> None:
    """Reject what only the allocated shapes reveal, before anything is invoked.

    Parameters
    ----------
    info : ModelInfo
        The model, from :func:`~opaque_ops.model.read_model`.
    shape_of : callable
        ``shape_of(tensor_index) -> tuple of int or None``: the shape TFLite
        planned for a tensor of subgraph 0, or None when it is not known
        until invoke (a dynamic tensor) or the index does not exist.  It may
        be called after a *failed* allocation: shapes are then what the
        runtime had computed when it stopped.
    config : tuple, optional
        What else the planned shapes depend on (the runtime library, whether
        XNNPACK is applied): part of the key under which the verdict is kept
        for a model the Interpreter holds (:mod:`~opaque_ops.model.cache`).

    Raises
    ------
    ModelError
        The message names the operator and tensor at fault and the fix.

    Notes
    -----
    The shapes reasoned on are :func:`~opaque_ops.model.shapes.infer_shapes`'s:
    the runtime's own where it computed them, and the op's shape rule where
    the runtime's report is stale (inside an XNNPACK partition, after a
    dynamic tensor).  Refused:

    - input shapes an operator cannot combine (VALID windows larger than
      their input -- the XNNPACK delegate computes that output size with
      unsigned arithmetic and reads far outside the input; mismatched
      concatenations, reshapes that change the element count, ...): the
      reference kernels refuse these in Prepare, XNNPACK crashes or returns
      garbage;
    - a convolution whose input channels no longer match its filter after a
      resize (XNNPACK keeps the filter's count and reads past the input);
    - tensors of more than :data:`MAX_RANK` dimensions or
      :data:`MAX_ELEMENTS` elements;
    - runtime-provided ops whose inputs do not have the shapes their kernels
      assume (see :mod:`~opaque_ops.model.runtime_ops`).
    """
    verdicts = info.verdicts
    if not verdicts.get("cacheable"):
        _check_allocated(info, info.subgraphs[0], shape_of)
        return
    # The verdict depends on the model, the configuration, the input shapes
    # and what custom kernels and delegates planned (the rest the runtime
    # derives from those).  The outputs' shapes are part of the key: a
    # delegate may plan them differently from the reference kernels.
    store = verdicts.get("store")
    if store is not None and store.owner() is info:
        # The model itself: its verdicts live in model.cache's store (and on
        # disk), keyed without reading the model again.
        ins, outs, customs = store.io
        key = (config, tuple(shape_of(t) for t in ins), tuple(shape_of(t) for t in outs),
               tuple(shape_of(t) for t in customs))
        known, err = store.allocated(key)
        if known:
            if err is not None:
                raise type(err)(str(err))
            return
        try:
            _check_allocated(info, info.subgraphs[0], shape_of)
        except ModelError as exc:
            store.remember(key, exc)
            raise
        store.remember(key, None)
        return
    # A copy with another subgraph first (the interpreter checks signature
    # runners' subgraphs that way); it shares the verdicts dict, so the
    # subgraph is part of the key.
    sg = info.subgraphs[0]
    key = ("allocated", id(sg), config, tuple(shape_of(t) for t in sg.inputs),
           tuple(shape_of(t) for t in sg.outputs), tuple(shape_of(t) for t in _custom_outputs(info)))
    if key in verdicts:
        err = verdicts[key]
        if err is not None:
            raise type(err)(str(err))
        return
    try:
        _check_allocated(info, sg, shape_of)
    except ModelError as exc:
        _remember(info, key, exc)
        raise
    _remember(info, key, None)


def _remember(info, key, verdict) -> None:
    if len(info.verdicts) > 64:  # a long-running app resizing to many shapes
        keep = {k: info.verdicts[k] for k in ("cacheable", "store") if k in info.verdicts}
        info.verdicts.clear()
        info.verdicts.update(keep)
    info.verdicts[key] = verdict


def _custom_outputs(info) -> list:
    key = ("custom_outputs", id(info.subgraphs[0]))
    out = info.verdicts.get(key)
    if out is None:
        out = [t for op in info.subgraphs[0].operators if op.is_custom for t in op.outputs if t >= 0]
        info.verdicts[key] = out
    return out


def _check_allocated(info, sg, shape_of) -> None:
    shapes = infer_shapes(info, shape_of)

    def known(t):
        return shapes.get(t) if t >= 0 else None

    for t, shape in shapes.items():
        if shape is None:
            continue
        if len(shape) > MAX_RANK:
            raise ModelError(f"tensor {t} ({sg.tensors[t].name!r}) would have rank {len(shape)}; the "
                             f"runtime supports at most {MAX_RANK} dimensions")
        if min(shape, default=0) >= 0 and _elements(shape) > MAX_ELEMENTS:
            raise ModelError(f"tensor {t} ({sg.tensors[t].name!r}) would have shape {list(shape)}: more "
                             f"than {MAX_ELEMENTS} elements. Resize the input to a smaller shape")
    # What the caller will read: the runtime's output shapes must be the ones
    # the operators give (with an empty batch, XNNPACK 2.17.1 leaves garbage
    # dimensions in its outputs, e.g. [0, 549846668, 1491629428, 4]).
    for t in sg.outputs:
        want, got = shapes.get(t), shape_of(t)
        if want is not None and got is not None and tuple(got) != tuple(want):
            raise ModelError(
                f"output tensor {t} ({sg.tensors[t].name!r}) was planned as {list(got)}, but the model's "
                f"operators give {list(want)}; the runtime would return wrong data. Resize the input to "
                "a shape without empty dimensions")
    for op in sg.operators:
        if op.op_name in ("CONV_2D", "DEPTHWISE_CONV_2D") and len(op.inputs) >= 2 and min(op.inputs[:2]) >= 0:
            x, w = known(op.inputs[0]), known(op.inputs[1])
            declared = sg.tensors[op.inputs[0]].shape
            if x is None or w is None or len(x) != 4 or len(w) != 4 or len(declared) != 4:
                continue
            want = w[3] if op.op_name == "CONV_2D" else declared[3]
            if x[3] != want and declared[3] == want:
                raise ModelError(
                    f"operator {op.index} ({op.op_name}) takes {want} input channels, but its input "
                    f"{op.inputs[0]} has shape {list(x)}. Resize the model's input with the channel "
                    "count it was built for")
            if op.op_name == "CONV_2D" and w[3] > 0 and (x[3] <= 0 or x[3] % w[3]):
                # The kernels divide by the group count x[3] / w[3]: zero input
                # channels is a division by zero (SIGFPE, fuzz_structured 31:41157).
                raise ModelError(
                    f"operator {op.index} (CONV_2D) has a filter of {w[3]} input channels, but its input "
                    f"{op.inputs[0]} has shape {list(x)}: the input channels must be a positive multiple "
                    "of the filter's. Resize the model's input with the channel count it was built for")
        elif op.is_custom and op.op_name in RUNTIME_CUSTOM_OPS and op.custom_options:
            check_runtime_op_shapes(op, {}, known)
