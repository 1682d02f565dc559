"""Rules on the data flow: who writes which tensor, in what order, and how subgraphs and signatures connect."""

from __future__ import annotations

from ...errors import ModelError
from ..schema import BUILTIN_OPERATORS
from ..select_rows import nodes_of
from . import messages
from .options import called_subgraphs, effective_options

# Builtins whose outputs may be RESOURCE or VARIANT handles (the control-flow
# ops pass their subgraphs' handles through).
_HANDLE_PRODUCERS = frozenset(
    {"VAR_HANDLE", "HASHTABLE", "WHILE", "IF", "CALL_ONCE", "STABLEHLO_WHILE", "STABLEHLO_CASE", "STABLEHLO_COMPOSITE"}
)

# Builtins that may read RESOURCE or VARIANT handles.
_HANDLE_CONSUMERS = frozenset(
    {
        "READ_VARIABLE",
        "ASSIGN_VARIABLE",
        "HASHTABLE_FIND",
        "HASHTABLE_IMPORT",
        "HASHTABLE_SIZE",
        "WHILE",
        "IF",
        "CALL_ONCE",
        "STABLEHLO_WHILE",
        "STABLEHLO_CASE",
        "STABLEHLO_COMPOSITE",
    }
)

# Builtins whose kernels can write STRING outputs (they allocate them), as
# TFLite's kernels do: gather.cc, gather_nd.cc, slice.cc, strided_slice.cc,
# tile.cc, fill.cc, reshape-like ops that share the input's buffer, the
# hash tables, and control flow that passes tensors through.
_STRING_PRODUCERS = frozenset(
    "GATHER GATHER_ND SLICE STRIDED_SLICE TILE FILL RESHAPE SQUEEZE EXPAND_DIMS HASHTABLE_FIND "
    "HASHTABLE_LOOKUP WHILE IF CALL_ONCE".split()
)

# Where the conv-like ops allow an omitted input: the bias only.
_OPTIONAL_POSITIONS = {
    "CONV_2D": {2},
    "DEPTHWISE_CONV_2D": {2},
    "FULLY_CONNECTED": {2},
    "TRANSPOSE_CONV": {3},
    "CONV_3D": {2},
    "CONV_3D_TRANSPOSE": {3},
}

# Builtin ops whose schema allows an omitted (-1) input, e.g. a missing bias.
_OPTIONAL_INPUT_OPS = {
    "CONV_2D",
    "DEPTHWISE_CONV_2D",
    "FULLY_CONNECTED",
    "TRANSPOSE_CONV",
    "CONV_3D",
    "CONV_3D_TRANSPOSE",
    "LSTM",
    "UNIDIRECTIONAL_SEQUENCE_LSTM",
    "BIDIRECTIONAL_SEQUENCE_LSTM",
    "BIDIRECTIONAL_SEQUENCE_RNN",
    "RNN",
    "UNIDIRECTIONAL_SEQUENCE_RNN",
    "SVDF",
    "LSH_PROJECTION",
    "STABLEHLO_COMPOSITE",
}
# The builtins that prepare the subgraphs they run again whenever the shapes
# reaching them change (CALL_ONCE runs its subgraph once).
_RERUNNING_CALLERS = ("WHILE", "IF")

# (WHILE, IF and CALL_ONCE copy every input into the subgraph they call:
# an omitted one is dereferenced as tensor -1.)

# Builtins that may have no outputs (they only update state or run a subgraph).
_NO_OUTPUT_OPS = ("ASSIGN_VARIABLE", "CALL_ONCE")


def check_writes(sg, handles) -> dict[int, int]:
    """Each tensor written by at most one operator, and only where a write is harmless.

    Returns the producer of each written tensor (tensor index -> operator index).
    """
    producer: dict[int, int] = {}
    for op in sg.operators:
        if handles and not op.is_custom and op.op_name not in _HANDLE_CONSUMERS:
            _check_handle_reads(sg, op, handles)
        for t in op.outputs:
            if t < 0:
                if not op.is_custom:
                    # No builtin has optional outputs; kernels write them unchecked.
                    raise ModelError(f"{messages.operator(sg, op)} has an omitted (-1) output")
                continue
            _check_output(sg, op, t, handles, producer)
            producer[t] = op.index
    return producer


def _check_handle_reads(sg, op, handles) -> None:
    for t in op.inputs:
        if t in handles:
            # A handle read as data (a RESOURCE constant as conv weights) has
            # no shape or bytes the kernel expects.
            raise ModelError(
                f"{messages.operator(sg, op)} reads tensor {t} of type "
                f"{sg.tensors[t].type_name}; only {sorted(_HANDLE_CONSUMERS)} take handles"
            )


def _check_output(sg, op, t: int, handles, producer) -> None:
    """Operator ``op`` may write tensor ``t``."""
    tensor = sg.tensors[t]  # (the message prefix is built only for a refusal)
    if t in producer:
        raise ModelError(
            f"{messages.operator(sg, op)} writes tensor {t}, which operator {producer[t]} already writes: each tensor may have one producer"
        )
    if t in op.inputs:
        raise ModelError(f"{messages.operator(sg, op)} writes tensor {t}, which is also one of its own inputs")
    if t in sg.inputs:
        raise ModelError(f"{messages.operator(sg, op)} writes tensor {t}, which is an input of the subgraph")
    if tensor.data is not None:
        raise ModelError(
            f"{messages.operator(sg, op)} writes tensor {t}, which is a constant (it has data in the model)"
        )
    if t in handles and not op.is_custom and op.op_name not in _HANDLE_PRODUCERS:
        # Resource and variant tensors hold handles, not arena data: a
        # kernel writing its values there corrupts them.
        raise ModelError(
            f"{messages.operator(sg, op)} writes tensor {t} of type {tensor.type_name}; only {sorted(_HANDLE_PRODUCERS)} produce those"
        )
    if tensor.type_name == "STRING" and not op.is_custom and op.op_name not in _STRING_PRODUCERS:
        # A string tensor gets no arena memory: the kernels that produce
        # strings allocate it themselves.  Any other kernel writes its
        # numbers through a null pointer (SOFTMAX: SIGSEGV).
        raise ModelError(
            f"{messages.operator(sg, op)} writes tensor {t} of type STRING, which {op.op_name} cannot produce; "
            f"only {sorted(_STRING_PRODUCERS)} write strings"
        )
    if tensor.is_variable:
        # Variable tensors are state that stateful ops update in place
        # through an *input*; planned as an output, the arena gives the same
        # bytes two lifetimes.
        raise ModelError(
            f"{messages.operator(sg, op)} writes tensor {t}, which is marked as a variable (is_variable); "
            "variables are inputs of the ops that update them"
        )


def check_omitted_inputs(sg, op) -> None:
    """Omitted (-1) inputs only where the builtin's schema makes them optional."""
    if -1 not in op.inputs or op.is_custom:
        return
    # Builtin kernels fetch their inputs without a null check unless the
    # schema makes the input optional.
    pos = [k for k, t in enumerate(op.inputs) if t == -1]
    allowed = _OPTIONAL_POSITIONS.get(op.op_name)
    if op.op_name not in _OPTIONAL_INPUT_OPS:
        raise ModelError(
            f"{messages.operator(sg, op)} has an omitted (-1) input at position {pos[0]}, "
            f"but {op.op_name} has no optional inputs"
        )
    if allowed is not None and not set(pos) <= allowed:
        raise ModelError(
            f"{messages.operator(sg, op)} has an omitted (-1) input at position "
            f"{min(set(pos) - allowed)}; only input(s) {sorted(allowed)} may be omitted"
        )


def check_has_outputs(sg, op) -> None:
    """Builtins other than the state-only ones write something."""
    if not op.outputs and not op.is_custom and op.op_name not in _NO_OUTPUT_OPS:
        raise ModelError(f"{messages.operator(sg, op)} has no outputs")


def check_execution_order(sg, op, producer) -> None:
    """No operator reads a tensor before the operator that writes it runs.

    Reading a tensor that only a later operator writes reads arena memory
    planned for someone else.
    """
    for t in op.inputs:
        p = producer.get(t)
        if p is not None and p >= op.index:
            raise ModelError(
                f"{messages.operator(sg, op)} reads tensor {t} before operator {p} writes it "
                "(operators must be in execution order)"
            )


def check_subgraph_outputs(sg, producer) -> None:
    """Every subgraph output is written, an input, a constant or a variable."""
    for t in sg.outputs:
        tensor = sg.tensors[t]
        if t not in producer and t not in sg.inputs and tensor.data is None and not tensor.is_variable:
            raise ModelError(
                f"{messages.subgraph_io(sg, 'output tensor', t)} is written by no "
                "operator and is neither an input nor a constant"
            )


def check_variable_reads(sg, stores) -> None:
    """READ_VARIABLE declares the shape of the value it reads: the one ASSIGN_VARIABLE stores in its variable.

    READ_VARIABLE's output is planned with its declared shape, and the
    kernel copies that many bytes out of the variable whatever it holds
    (tensorflow/lite/kernels/read_variable.cc): a disagreement returns part
    of the value, or reads past its end (measured on 2.17.1, 2.23.0 and
    ai-edge-litert, with XNNPACK and without, for a value that subgraph 0
    stores, and for a constant that a CALL_ONCE init subgraph stores
    through a VAR_HANDLE of its own: tests/model/test_shared_variables.py).
    A read declared with rank 0 is dynamic and takes the variable's shape:
    never refused.  The variables are matched as TFLite matches them
    (:func:`variable_stores`), and a read is compared with the values it
    may see (:func:`stores_seen`).  The same comparison on the shapes of
    each allocation, after a resize, is :func:`~.allocated._check_variable_reads`.

    Parameters
    ----------
    sg : SubgraphInfo
        The subgraph whose reads are checked.
    stores : dict or None
        :func:`variable_stores` of the model (None: it has no READ_VARIABLE).
    """
    if stores is None:
        return
    names = variable_names(sg)
    here = variable_assignments(sg, names, lambda t: sg.tensors[t].shape)
    for op in sg.operators:
        if op.op_name != "READ_VARIABLE" or op.is_custom or not op.inputs or not op.outputs:
            continue
        if min(op.inputs[0], op.outputs[0]) < 0:
            continue
        out = sg.tensors[op.outputs[0]].shape
        if not out or -1 in out:  # rank 0: dynamic, it takes the variable's shape
            continue
        for where, assign, val in stores_seen(sg, op, names, here, stores):
            if out != val and -1 not in val:
                value = where.tensors[assign.inputs[1]]
                raise ModelError(
                    f"{messages.operator(sg, op)} declares output shape {list(out)}, but "
                    f"{messages.operator(where, assign)} stores {value.name!r} of shape {list(val)} in the "
                    f"variable it reads{_named(names.get(op.inputs[0]))}; TFLite's READ_VARIABLE copies as many "
                    "values as the declared shape holds, whatever the variable holds, and would return wrong data "
                    "(or read past the variable's end). Declare the read's output with the shape the variable "
                    "holds, or with rank 0 (it then takes the variable's shape)"
                )


def variable_stores(info, needs: str = "READ_VARIABLE") -> dict | None:
    """The constant values each named variable is given in the subgraphs that run; None without ``needs``.

    tensorflow/lite/kernels/var_handle.cc gives a VAR_HANDLE the resource
    id of its (container, shared_name) in a map that every subgraph of the
    interpreter shares (tensorflow/lite/interpreter.cc, AddSubgraphs): two
    VAR_HANDLEs of one name are one variable, in one subgraph or in two.
    The common converted form initializes a variable in a CALL_ONCE init
    subgraph (a VAR_HANDLE of its own and ASSIGN_VARIABLE of a constant)
    and reads it in subgraph 0.  Only constants are kept from the other
    subgraphs: their shape is the stored data's, whatever is resized (an
    assigned value of another shape there is not known here, and never
    refused).

    Parameters
    ----------
    info : ModelInfo
        The model.
    needs : str, optional
        The builtin whose rule needs these: a model without it gets None
        (one look at the operator codes, so a model without variables pays
        nothing more).

    Returns
    -------
    dict or None
        ``{(container, shared_name): [(subgraph, operator, shape), ...]}``:
        each ASSIGN_VARIABLE of a constant, through a VAR_HANDLE, in a
        subgraph that may run (:func:`running_subgraphs`); None without ``needs``.
    """
    wanted = BUILTIN_OPERATORS[needs]
    if not any(code == wanted for code, _custom, _version in info.operator_codes):
        return None
    constants: dict = {}
    for k in sorted(running_subgraphs(info)):
        sg = info.subgraphs[k]
        names = variable_names(sg)
        if not names:
            continue
        for key, found in variable_assignments(sg, names, lambda t, sg=sg: _constant_shape(sg, t)).items():
            if isinstance(key[0], str):  # (a handle of no VAR_HANDLE is known in its own subgraph only)
                constants.setdefault(key, []).extend((sg, op, shape) for op, shape in found)
    return constants


def _constant_shape(sg, t: int):
    tensor = sg.tensors[t]
    return tensor.shape if tensor.data is not None else None


def variable_names(sg) -> dict:
    """``{handle tensor: (container, shared_name)}`` for each builtin VAR_HANDLE of ``sg``.

    As var_handle.cc keys its map: an absent string (or an absent
    VarHandleOptions table, or one stored under another union type) is the
    empty name, and a name ends at its first NUL byte (the kernel makes a
    std::string of the C string).  So every VAR_HANDLE without a name shares
    one variable per container.
    """
    out = {}
    for op in sg.operators:
        if op.op_name == "VAR_HANDLE" and not op.is_custom and op.outputs and op.outputs[0] >= 0:
            opts = effective_options(op)
            out[op.outputs[0]] = tuple((opts.get(f) or "").split("\0", 1)[0] for f in ("container", "shared_name"))
    return out


def variable_assignments(sg, names, shape_of) -> dict:
    """``{variable: [(ASSIGN_VARIABLE, shape of the value), ...]}`` in ``sg``'s order, where ``shape_of`` knows it.

    A variable is its ``(container, shared_name)`` from ``names``
    (:func:`variable_names`), or ``(subgraph, handle tensor)`` for a handle
    that no VAR_HANDLE of ``sg`` makes (a subgraph input).
    """
    out: dict = {}
    for op in sg.operators:
        if op.op_name == "ASSIGN_VARIABLE" and not op.is_custom and len(op.inputs) == 2 and min(op.inputs) >= 0:
            shape = shape_of(op.inputs[1])
            if shape is not None:
                key = names.get(op.inputs[0]) or (sg.index, op.inputs[0])
                out.setdefault(key, []).append((op, tuple(shape)))
    return out


def stores_seen(sg, read, names, here, constants) -> list:
    """``[(subgraph, ASSIGN_VARIABLE, shape)]``: the stored values ``read`` (a READ_VARIABLE of ``sg``) may read.

    An assignment of its variable earlier in ``sg`` is what it reads, or a
    constant that a subgraph called by an operator between the two (an IF's
    branch, a WHILE's body) stores over it (the operators run in order).
    Without one it reads what was stored last: by an assignment later in
    ``sg`` (at an earlier invoke) or in another subgraph that runs
    (``constants``: a CALL_ONCE init subgraph's before the first invoke).
    """
    key = names.get(read.inputs[0]) or (sg.index, read.inputs[0])
    mine = here.get(key, ())
    before = [(sg, op, shape) for op, shape in mine if op.index < read.index]
    others = [c for c in constants.get(key, ()) if c[0] is not sg]
    if before:
        # An IF's branch that stores a [1, 6] constant between x [2, 6] and a read declared [2, 6]: the read
        # copies 12 values out of the branch's 6 (found by tools/fuzz_variables.py; ai-edge-litert reads past the
        # value too).  The operator's own callees only: a constant stored deeper is not looked for.
        last = before[-1][1].index
        count = 1 + max((c[0].index for c in others), default=0)
        called = {
            k
            for op in sg.operators
            if last < op.index < read.index and not op.is_custom
            for k in called_subgraphs(op, count)
        }
        return before[-1:] + [c for c in others if c[0].index in called]
    return [(sg, op, shape) for op, shape in mine] + others


def _named(key) -> str:
    """`` ('name')`` for a variable of a VAR_HANDLE, with its container if any; nothing for another handle."""
    if key is None:
        return ""
    container, name = key
    what = f"{name!r}" if name else "no shared_name"
    return f" ({what}" + (f" in container {container!r})" if container else ")")


def running_subgraphs(info) -> set:
    """The subgraphs that may run: subgraph 0, each signature's, and those their WHILE, IF and CALL_ONCE run."""
    count = len(info.subgraphs)
    todo = [0] + [g.subgraph_index for g in info.signatures]
    seen: set = set()
    while todo:
        k = todo.pop()
        if k in seen or not 0 <= k < count:
            continue
        seen.add(k)
        for op in info.subgraphs[k].operators:
            if not op.is_custom:
                todo.extend(called_subgraphs(op, count))
    return seen


def check_call_graph(info) -> None:
    """Subgraphs calling each other in a cycle recurse until the stack overflows."""
    count = len(info.subgraphs)
    calls = {sg.index: {k for op in sg.operators for k in called_subgraphs(op, count)} for sg in info.subgraphs}
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


def check_select_in_control_flow(info) -> None:
    """Refuse a SELECT (v1) with a non-constant condition in a subgraph that a WHILE or IF runs.

    tensorflow/lite/kernels/select.cc (kVersionOne) sets its row-wise flag
    when a Prepare sees a scalar or 1-D condition for x of higher rank and
    never clears it, so a later Prepare with the condition, x and y of one
    shape [n, m, ...] still runs the row-wise Eval, which writes past the
    output (:mod:`~opaque_ops.model.select_rows`).  In subgraph 0 the
    interpreter sees every Prepare's shapes; a subgraph that WHILE or IF
    runs is prepared by that kernel (tensorflow/lite/kernels/while.cc,
    if.cc): at each allocation of the caller, and during ``invoke()`` at
    each WHILE turn whose loop variables change shape.  Its shapes come
    from the caller at run time, so they are unknown here: only a constant
    condition keeps its shape, and a constant scalar or 1-D condition can
    equal x's shape only at rank 0 or 1, where the row-wise copy is the
    elementwise one.  Every other SELECT there is refused.  (No model in the
    installed packages has a SELECT v1 in such a subgraph: converters write
    SELECT_V2 for ``tf.where``.)
    """
    callers: dict[int, str] = {}  # called subgraph -> the first WHILE / IF met that runs it
    for sg in info.subgraphs:
        for op in sg.operators:
            if op.op_name in _RERUNNING_CALLERS:
                for k in called_subgraphs(op, len(info.subgraphs)):
                    callers.setdefault(k, messages.operator(sg, op))
    for k, caller in sorted(callers.items()):
        if k == 0:
            continue  # (refused before, by the control-flow rule, as is an index out of range)
        sg = info.subgraphs[k]
        for index, c, *_ in nodes_of(sg):
            if sg.tensors[c].data is not None:
                continue
            raise ModelError(
                f"{messages.operator_at(k, index, 'SELECT')} is in a subgraph that {caller} runs, which "
                "prepares it again whenever the shapes reaching it change (after a resize, or at a WHILE turn "
                "whose loop variables change shape); once prepared with a scalar or 1-D condition, TFLite's "
                "SELECT keeps picking whole rows after its condition takes x's shape, and writes past its "
                "output. Use SELECT_V2 there, which has no row-wise mode (reshape a condition of one value per "
                "row to [n, 1, ...]: SELECT_V2 broadcasts from the last dimension), or a constant condition"
            )


def check_signatures(info) -> None:
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
                    f"{s.subgraph_index}'s {what} are {list(real)}; a signature must name each of them once"
                )
