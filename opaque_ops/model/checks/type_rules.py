"""Type rules per builtin: which inputs and outputs must share a dtype, which take a fixed one.

The runtime leaves dtype agreement to each kernel, and many never check it:
RESHAPE and the other type-agnostic copies move ``input->bytes`` into a
buffer the memory planner sized from the *output's* declared type (an
openWakeWord classifier whose float32 input is retyped int64 has RESHAPE
copy 49,152 bytes into a 6,144-byte output: SIGSEGV, SIGABRT or a hang;
microWakeWord's int8 input retyped int32 overwrites the heap and reports
success).  Value-dependent builtins go further and rewrite the output's
type in Prepare (WHERE sets ``output->type = kTfLiteInt64`` whatever the
file says), after the XNNPACK delegate has already planned the consumer
on the declared type.

:data:`TYPE_RULES` is the table: for each builtin, the groups of slots that
must share a dtype and the slots whose dtype is fixed, as the reference
kernels in ``tensorflow/lite/kernels/`` compute or require them (the
``TF_LITE_ENSURE_TYPES_EQ`` lines, the ``output->type = ...`` lines, and what
``Eval`` reads through ``GetTensorData<T>``).  Slots are written ``i0``,
``o1`` (one input, one output), ``i:`` / ``o:`` (every input / output),
``i1:`` (input 1 and the ones after it).  In a group, the inputs must have
exactly the first slot's type; an output may also take one of the types
``widen`` allows for that input type (the quantized kernels' own
combinations: an int8 SOFTMAX may write int16, an int16 MUL int8).

:data:`LEFT_TO_KERNELS` lists every other builtin with why no rule is
needed here: each either checks its types in Prepare (and refuses with a
``KernelError``), is handled by another rule group (variables, control
flow), or is not a TFLite kernel at all (StableHLO ops, which the runtime
does not register).  A test checks that the two cover every builtin of the
schema.

:data:`VALUE_SHAPES` gives the declared output rank of the builtins whose
output *shape* depends on input values (their kernel resizes the output at
invoke): the file cannot know the extent, but it must declare the rank the
kernel writes, so that no consumer (a convolution the XNNPACK delegate
plans at creation) is built for a tensor of another rank.
"""

from __future__ import annotations

from ..._records import FACTORY, Record, field, record
from ...errors import ModelError
from ..schema import _BUILTIN_OPERATOR_LIST
from ..shapes import _BINARY, _UNARY
from . import messages
from .options import effective_options, has_own_options

_INDEX = ("INT32", "INT64")
_BOOL = ("BOOL",)
_F32 = ("FLOAT32",)


@record
class TypeRule(Record):
    """One builtin's dtype rule.

    same : tuple of str
        Groups of slots (``"i0 o0"``) that share a dtype; the first slot's
        type is the one the others must have.
    fixed : dict
        Slot -> the dtypes allowed there (never changed: the rules are shared).
    widen : dict
        For the *outputs* of the first group: first slot's dtype -> the
        output dtypes the kernel also accepts (quantized combinations).
    """

    # (A lazy dataclass (opaque_ops._records): the rules are defined at a
    # first start, where a NamedTuple cost 0.13 ms to define and a
    # dataclass four times that.)

    same: tuple = ()
    fixed: dict = field(default_factory=dict)
    widen: dict = field(default_factory=dict)

    def __init__(self, same: tuple = (), fixed: dict = FACTORY, widen: dict = FACTORY):
        self.same = same
        self.fixed = {} if fixed is FACTORY else fixed
        self.widen = {} if widen is FACTORY else widen


def _rule(same: str = "", widen=None, **fixed) -> TypeRule:
    groups = tuple(g.split() for g in same.split(";") if g.strip())
    return TypeRule(groups, {k: v for k, v in fixed.items()}, widen or {})


def _rules(names: str, rule: TypeRule) -> dict:
    return dict.fromkeys(names.split(), rule)


TYPE_RULES: dict[str, TypeRule] = {
    # Elementwise, one input: the output has the input's type (the quantized
    # kernels keep the type and change only the scale).
    **_rules(
        "ABS CEIL COS ELU EXP FLOOR GELU HARD_SWISH LEAKY_RELU LOG LOGISTIC NEG RELU RELU6 "
        "RELU_N1_TO_1 RELU_0_TO_1 ROUND RSQRT SIN SQRT SQUARE TANH ZEROS_LIKE SIGN "
        "L2_NORMALIZATION LOCAL_RESPONSE_NORMALIZATION LOG_SOFTMAX REVERSE_SEQUENCE MATRIX_DIAG "
        "DENSIFY",
        _rule("i0 o0"),
    ),
    # An int8 softmax may write int16 (softmax.cc: kTfLiteInt8 -> Int8 or Int16).
    "SOFTMAX": _rule("i0 o0", widen={"INT8": ("INT8", "INT16")}),
    "CUMSUM": _rule("i0 o0", i1=("INT32",)),
    # Elementwise, two inputs (TF_LITE_ENSURE_TYPES_EQ on the inputs; the
    # output is written as the inputs' type).
    **_rules(
        "ADD SUB DIV MAXIMUM MINIMUM SQUARED_DIFFERENCE POW FLOOR_DIV FLOOR_MOD ATAN2 PRELU",
        _rule("i0 i1 o0"),
    ),
    # mul.cc: an int16 multiplication may requantize to int8 / uint8.
    "MUL": _rule("i0 i1 o0", widen={"INT16": ("INT16", "INT8", "UINT8")}),
    "ADD_N": _rule("i: o0"),
    **_rules("LESS LESS_EQUAL GREATER GREATER_EQUAL EQUAL NOT_EQUAL", _rule("i0 i1", o0=_BOOL)),
    **_rules("LOGICAL_AND LOGICAL_OR", _rule(i0=_BOOL, i1=_BOOL, o0=_BOOL)),
    "LOGICAL_NOT": _rule(i0=_BOOL, o0=_BOOL),
    **_rules("SELECT SELECT_V2", _rule("i1 i2 o0", i0=_BOOL)),
    # Type-agnostic copies: the kernels move bytes (memcpy of input->bytes,
    # or a copy templated on one of the two types) and check nothing.
    "RESHAPE": _rule("i0 o0", i1=_INDEX),
    "SQUEEZE": _rule("i0 o0"),
    "EXPAND_DIMS": _rule("i0 o0", i1=_INDEX),
    "CONCATENATION": _rule("i: o0"),
    "PACK": _rule("i: o0"),
    "UNPACK": _rule("i0 o:"),
    "SPLIT": _rule("i1 o:", i0=("INT32",)),
    "SPLIT_V": _rule("i0 o:", i1=_INDEX, i2=("INT32",)),
    "GATHER": _rule("i0 o0", i1=("INT16", "INT32", "INT64")),
    "GATHER_ND": _rule("i0 o0", i1=("INT16", "INT32", "INT64")),
    "TRANSPOSE": _rule("i0 o0"),
    "PAD": _rule("i0 o0", i1=_INDEX),
    "PADV2": _rule("i0 i2 o0", i1=_INDEX),
    "MIRROR_PAD": _rule("i0 o0", i1=_INDEX),
    "SLICE": _rule("i0 o0; i1 i2", i1=_INDEX),
    "STRIDED_SLICE": _rule("i0 o0; i1 i2 i3", i1=_INDEX),
    "TILE": _rule("i0 o0", i1=_INDEX),
    "BROADCAST_TO": _rule("i0 o0", i1=_INDEX),
    "REVERSE_V2": _rule("i0 o0", i1=_INDEX),
    **_rules("DEPTH_TO_SPACE SPACE_TO_DEPTH", _rule("i0 o0")),
    **_rules("BATCH_TO_SPACE_ND SPACE_TO_BATCH_ND", _rule("i0 o0", i1=("INT32",), i2=("INT32",))),
    **_rules("RESIZE_BILINEAR RESIZE_NEAREST_NEIGHBOR", _rule("i0 o0", i1=("INT32",))),
    **_rules("MAX_POOL_2D AVERAGE_POOL_2D L2_POOL_2D", _rule("i0 o0")),
    **_rules("MEAN SUM REDUCE_MAX REDUCE_MIN REDUCE_PROD", _rule("i0 o0", i1=_INDEX)),
    **_rules("REDUCE_ANY REDUCE_ALL", _rule(i0=_BOOL, i1=_INDEX, o0=_BOOL)),
    "MATRIX_SET_DIAG": _rule("i0 i1 o0"),
    "DYNAMIC_UPDATE_SLICE": _rule("i0 i1 o0"),
    "FILL": _rule("i1 o0", i0=_INDEX),
    "ONE_HOT": _rule("i2 i3 o0", i0=_INDEX, i1=("INT32",)),
    "RANGE": _rule("i0 i1 i2 o0"),
    "SCATTER_ND": _rule("i1 o0", i0=_INDEX, i2=_INDEX),
    "SEGMENT_SUM": _rule("i0 o0", i1=("INT32",)),
    **_rules(
        "UNSORTED_SEGMENT_SUM UNSORTED_SEGMENT_PROD UNSORTED_SEGMENT_MAX UNSORTED_SEGMENT_MIN",
        _rule("i0 o0", i1=("INT32",), i2=("INT32",)),
    ),
    "BROADCAST_ARGS": _rule("i0 i1 o0", i0=_INDEX),
    # bitwise_xor.cc / right_shift.cc check their two inputs against each
    # other and then give the output their type, whatever the file declares
    # (as WHERE does): a declared int8 output came back int32, and consumers
    # planned on int8 would misread it.
    **_rules("BITWISE_XOR RIGHT_SHIFT", _rule("i0 i1 o0")),
    # bucketize.cc's Prepare sets the output's type to int32 itself, whatever
    # the file declares: consumers planned on the declared type (as for WHERE)
    # would read it as another one.
    "BUCKETIZE": _rule(o0=("INT32",)),
    # fake_quant.cc's Prepare likewise gives the output the input's type.
    "FAKE_QUANT": _rule("i0 o0"),
    # embedding_lookup.cc copies rows of the value's type (EvalSimple), unless
    # int8 / uint8 / int4 values are dequantized into a float32 output
    # (EvalHybrid); its Prepare checks only the lookup's type: float32 rows
    # were copied into a declared int8 output, 4 times its size.
    "EMBEDDING_LOOKUP": _rule(
        "i1 o0", widen={"INT8": ("INT8", "FLOAT32"), "UINT8": ("UINT8", "FLOAT32"), "INT4": ("FLOAT32",)}, i0=("INT32",)
    ),
    # Index outputs (the kernels switch on the output type, INT32 or INT64).
    **_rules("ARG_MAX ARG_MIN", _rule(o0=_INDEX)),
    "SHAPE": _rule(o0=_INDEX),
    "RANK": _rule(o0=("INT32",)),
    "TOPK_V2": _rule("i0 o0", i1=("INT32",), o1=("INT16", "INT32", "INT64")),
    # Value-dependent outputs (see VALUE_SHAPES for their ranks).
    # where.cc Prepare: output->type = kTfLiteInt64, whatever the file says.
    "WHERE": _rule(o0=("INT64",)),
    # unique.cc: values of the input's type; indices of the options' idx_out_type
    # (checked in check_types, which reads the options).
    "UNIQUE": _rule("i0 o0", o1=_INDEX),
    # non_max_suppression.cc: float boxes and scores, int32 max_output_size,
    # int32 selected indices and count (V5 also float selected scores).
    "NON_MAX_SUPPRESSION_V4": _rule(i0=_F32, i1=_F32, i2=("INT32",), i3=_F32, i4=_F32, o0=("INT32",), o1=("INT32",)),
    "NON_MAX_SUPPRESSION_V5": _rule(
        i0=_F32, i1=_F32, i2=("INT32",), i3=_F32, i4=_F32, i5=_F32, o0=("INT32",), o1=_F32, o2=("INT32",)
    ),
    # Weighted ops: the data input and the output share a type (float with
    # float or hybrid int8 weights; int8/uint8/int16 quantized end to end).
    **_rules("CONV_2D DEPTHWISE_CONV_2D", _rule("i0 o0")),
    # fully_connected.cc / batch_matmul.cc: int8 inputs may give int16 / int32 outputs.
    "FULLY_CONNECTED": _rule("i0 o0", widen={"INT8": ("INT8", "INT16")}),
    "BATCH_MATMUL": _rule("i0 o0", widen={"INT8": ("INT8", "INT32")}),
    "TRANSPOSE_CONV": _rule("i2 o0", i0=("INT32",)),
    "QUANTIZE": _rule(i0=("FLOAT32", "FLOAT16", "INT8", "UINT8", "INT16"), o0=("INT8", "UINT8", "INT16")),
    "DEQUANTIZE": _rule(o0=_F32),
    "RFFT2D": _rule(i0=_F32, i1=("INT32",), o0=("COMPLEX64",)),
}

# Every other builtin, and why no rule is needed here.
LEFT_TO_KERNELS: dict[str, str] = {
    **dict.fromkeys(
        "CAST BITCAST".split(),
        "converts between any two types it declares (the kernel switches on both and refuses the rest)",
    ),
    **dict.fromkeys(
        "HASHTABLE_LOOKUP LSH_PROJECTION LSTM RNN SVDF CONCAT_EMBEDDINGS SKIP_GRAM "
        "EMBEDDING_LOOKUP_SPARSE UNIDIRECTIONAL_SEQUENCE_RNN UNIDIRECTIONAL_SEQUENCE_LSTM "
        "BIDIRECTIONAL_SEQUENCE_RNN BIDIRECTIONAL_SEQUENCE_LSTM SPARSE_TO_DENSE CONV_3D "
        "CONV_3D_TRANSPOSE IMAG REAL COMPLEX_ABS RANDOM_STANDARD_NORMAL RANDOM_UNIFORM "
        "MULTINOMIAL REDUCE_WINDOW DILATE".split(),
        "its Prepare checks the input and output types itself (TF_LITE_ENSURE_TYPES_EQ or a switch that refuses)",
    ),
    **dict.fromkeys(
        "CALL_ONCE VAR_HANDLE READ_VARIABLE ASSIGN_VARIABLE IF WHILE CALL".split(),
        "variables and control flow: the graph rules check the types against the variable or subgraph",
    ),
    **dict.fromkeys(
        "HASHTABLE HASHTABLE_FIND HASHTABLE_IMPORT HASHTABLE_SIZE".split(),
        "handles: only the builtins that make and take them may touch them (the graph rules)",
    ),
    **dict.fromkeys(
        "CUSTOM DELEGATE PLACEHOLDER_FOR_GREATER_OP_CODES".split(),
        "not a kernel of its own (custom ops are their library's business)",
    ),
}
# StableHLO ops: refused by the checks before the runtime sees them
# (builtin_rules.check_builtin): some have kernels there that trust their inputs.
LEFT_TO_KERNELS.update(
    (name, "refused before the runtime sees it (builtin_rules: StableHLO operators)")
    for name in _BUILTIN_OPERATOR_LIST
    if name.startswith("STABLEHLO_")
)

# Declared output rank of value-dependent builtins: output slot -> (rank,
# "in0" if the last dimension is the rank of input 0).  A declared rank 0
# (no shape at all) means "unknown" and is accepted.
VALUE_SHAPES: dict[str, dict[int, tuple]] = {
    "WHERE": {0: (2, "in0")},
    "UNIQUE": {0: (1, None), 1: (1, None)},
    "NON_MAX_SUPPRESSION_V4": {0: (1, None)},
    "NON_MAX_SUPPRESSION_V5": {0: (1, None), 1: (1, None)},
}


def value_dependent_feed(info):
    """The first value-dependent operator (:data:`VALUE_SHAPES`) whose output another operator takes.

    Returns ``(subgraph, operator, consumer)`` or None.  Such an output's
    extent is known only at invoke; the reference kernels prepare the
    operators after it again with the real shape, but the XNNPACK delegate
    plans them when the interpreter is created, and a WHERE whose result
    went on through CAST and EXPAND_DIMS into melspectrogram's convolution
    made it read and write outside its buffers (SIGSEGV; fuzz_structured
    44:10417) where the reference kernels refused the shape cleanly.
    """
    for sg in info.subgraphs:
        if not any(op.op_name in VALUE_SHAPES and not op.is_custom for op in sg.operators):
            continue  # (most subgraphs: no consumer map to build)
        consumers: dict[int, object] = {}
        for op in sg.operators:
            for t in op.inputs:
                if t >= 0:
                    consumers.setdefault(t, op)
        for op in sg.operators:
            if op.op_name in VALUE_SHAPES and not op.is_custom:
                for t in op.outputs:
                    if t >= 0 and t in consumers:
                        return sg, op, consumers[t]
    return None


def _positions(spec: str, n_in: int, n_out: int) -> list[tuple[str, int]]:
    """(``"input"`` / ``"output"``, position) of the slots ``spec`` names, for an op of that arity."""
    kind, rest = spec[0], spec[1:]
    n = n_in if kind == "i" else n_out
    what = "input" if kind == "i" else "output"
    if rest == ":":
        positions = range(n)
    elif rest.endswith(":"):
        positions = range(int(rest[:-1]), n)
    else:
        positions = [int(rest)] if int(rest) < n else []
    return [(what, k) for k in positions]


# (op name, input count, output count) -> the rule's slots at that arity:
# ([(i, allowed, what, k)], [[(i, widen, what, k), ...] per group]), where i
# is the slot's place in inputs + outputs and widen the rule's widen table
# where it applies (a first group's outputs), else None.  The specs are
# parsed once per arity, not once per operator: a model has hundreds of
# operators and a handful of arities.
_PLANS: dict[tuple[str, int, int], tuple[list, list]] = {}


def _plan(op) -> tuple[list, list]:
    key = (op.op_name, len(op.inputs), len(op.outputs))
    plan = _PLANS.get(key)
    if plan is None:
        n_in = key[1]
        rule = TYPE_RULES.get(op.op_name, _NO_RULE)
        fixed = [
            (k if w == "input" else n_in + k, allowed, w, k)
            for spec, allowed in rule.fixed.items()
            for w, k in _positions(spec, *key[1:])
        ]
        groups = [
            [
                (k if w == "input" else n_in + k, None if (g or w == "input" or not rule.widen) else rule.widen, w, k)
                for spec in group
                for w, k in _positions(spec, *key[1:])
            ]
            for g, group in enumerate(rule.same)
        ]
        plan = _PLANS[key] = (fixed, groups)
    return plan


_NO_RULE = TypeRule()


def _tensor(op, what, k):
    return (op.inputs if what == "input" else op.outputs)[k]


def check_types(sg, op) -> None:
    """The operator's input and output dtypes are the ones its kernel reads and writes."""
    if op.is_custom:
        return
    fixed, groups = _plan(op)
    tensors = sg.tensors
    io = (*op.inputs, *op.outputs)
    for i, allowed, what, k in fixed:
        t = io[i]
        if t >= 0 and tensors[t].type_name not in allowed:
            raise ModelError(
                f"{messages.operator(sg, op)}: {_typed(sg, op, what, k)}; {op.op_name} "
                f"{'reads' if what == 'input' else 'writes'} {' or '.join(allowed)} there. Convert the model "
                "again (or fix the tensor's type)"
            )
    for group in groups:
        # The first slot present (not an omitted -1) sets the type the others must have.
        first = lead = None
        for i, widen, what, k in group:
            t = io[i]
            if t < 0:
                continue
            got = tensors[t].type_name
            if lead is None:
                first, lead = got, (what, k)
                continue
            if widen is None:
                if got == first:
                    continue
                ok: tuple = (first,)
            else:
                ok = widen.get(first, (first,))
                if got in ok:
                    continue
            verb = "reads" if what == "input" else "writes"
            raise ModelError(
                f"{messages.operator(sg, op)}: {_typed(sg, op, what, k)}, but {_typed(sg, op, *lead)}; "
                f"{op.op_name} {verb} {' or '.join(ok)} there (the type of its {lead[0]} {lead[1]}). Convert "
                "the model again (or fix the tensor's type)"
            )
    if op.op_name == "UNIQUE" and len(op.outputs) > 1 and op.outputs[1] >= 0 and has_own_options(op):
        # The kernel writes indices of the options' type (anything but INT64 means INT32).
        want = "INT64" if effective_options(op).get("idx_out_type") in ("INT64", 4) else "INT32"
        got = tensors[op.outputs[1]].type_name
        if got != want:
            raise ModelError(
                f"{messages.operator(sg, op)}: output 1 (tensor {op.outputs[1]}) is {got}, but its options' "
                f"idx_out_type makes the kernel write {want} indices there. Convert the model again (or fix "
                "the tensor's type)"
            )
    if op.op_name in VALUE_SHAPES:
        _check_value_shapes(sg, op)
    _check_elementwise_rank(sg, op)


def _typed(sg, op, what, k) -> str:
    """``input K (tensor T) is TYPE``, for a message."""
    t = _tensor(op, what, k)
    return f"{what} {k} (tensor {t}) is {sg.tensors[t].type_name}"


def _declared_rank(t):
    """A tensor's declared rank, or None when the file declares no shape (rank unknown)."""
    shape = t.shape_signature if t.shape_signature is not None else t.shape
    return len(shape) if shape else None


_UNARY_RANK = frozenset(_UNARY | {"CAST"})
_BINARY_RANK = frozenset(_BINARY | {"PRELU"}) - _UNARY_RANK


def _check_elementwise_rank(sg, op) -> None:
    """An elementwise op's output keeps its inputs' rank (the broadcast rank for two inputs).

    A value-dependent tensor ([N, rank] out of WHERE) has its extent known
    only at invoke, but not its rank: a CAST of it declared [1, 128, 128, 16]
    lets the XNNPACK delegate plan the convolution after it for a 4-D input
    that will be 2-D (SIGSEGV at invoke).  Only ranks are compared: dims may
    be placeholders.
    """
    name = op.op_name
    if name in _UNARY_RANK:
        ins = op.inputs[:1]
    elif name in _BINARY_RANK:
        ins = op.inputs[:2]
    else:
        return
    if not ins or min(ins) < 0 or len(op.outputs) != 1 or op.outputs[0] < 0:
        return
    tensors = sg.tensors
    out = _declared_rank(tensors[op.outputs[0]])
    if out is None:
        return
    rank = _declared_rank(tensors[ins[0]])
    if rank is None:
        return
    if len(ins) > 1:
        second = _declared_rank(tensors[ins[1]])
        if second is None:
            return
        rank = max(rank, second)
    if out == rank:
        return
    t = sg.tensors[op.outputs[0]]
    shapes = ", ".join(f"input {k} (tensor {i}) is {list(sg.tensors[i].shape)}" for k, i in enumerate(ins))
    raise ModelError(
        f"{messages.operator(sg, op)}: {shapes}, but output 0 (tensor {op.outputs[0]}) is declared {list(t.shape)}; "
        f"{name} writes a rank-{rank} tensor there. Convert the model again (or fix the declared shape)"
    )


def _check_value_shapes(sg, op) -> None:
    """A value-dependent output declares the rank its kernel writes (see :data:`VALUE_SHAPES`)."""
    for k, (rank, last) in VALUE_SHAPES.get(op.op_name, {}).items():
        if k >= len(op.outputs) or op.outputs[k] < 0:
            continue
        t = sg.tensors[op.outputs[k]]
        shape = list(t.shape_signature if t.shape_signature is not None else t.shape)
        if not shape and not t.shape:
            continue  # no declared shape: nothing to trust
        want = None
        if last == "in0" and op.inputs and op.inputs[0] >= 0:
            x = sg.tensors[op.inputs[0]]
            if x.shape or x.shape_signature:
                want = len(x.shape_signature if x.shape_signature is not None else x.shape)
        if len(shape) != rank or (want is not None and shape[-1] not in (want, -1)):
            what = f"[N, {want}]" if want is not None else f"rank {rank}"
            raise ModelError(
                f"{messages.operator(sg, op)}: output {k} (tensor {op.outputs[k]}) is declared {list(t.shape)}, but the kernel "
                f"writes a {what} tensor whose size depends on the input values; declare it {what} "
                "(and let the operators after it take a shape known only at invoke)"
            )
