"""Rules on the shapes the runtime will really use: a requested resize, and what an allocation planned."""

from __future__ import annotations

from ...errors import InvalidInputError, ModelError
from ..flex import decode_flex_options
from ..runtime_ops import RUNTIME_CUSTOM_OPS, check_runtime_op_shapes
from ..shapes import infer_shapes
from . import messages
from .builtin_rules import SPLIT_AXIS
from .called import follow_called
from .graph import stores_seen, variable_assignments, variable_names
from .limits import MAX_ELEMENTS, MAX_RANK, adds_dimensions, any_rank_tensors, elements
from .tensor_rules import deeper_allowed
from .version_rules import affected, check_select_v2_in_control_flow, check_version_rules


def check_resize(info, tensor_index: int, shape) -> None:
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
    :data:`MAX_RANK` dimensions (unless only operators of any rank, such as
    GATHER_ND, read the input: :func:`~.limits.any_rank_tensors`), more
    than :data:`MAX_ELEMENTS` elements; and a deep shape that those
    operators pass on to one that takes fewer dimensions (:func:`deep_reach`:
    the allocation would prepare it at that depth first).
    Whether the model's operators accept the shape is otherwise decided
    after the allocation, on the shapes TFLite plans
    (:func:`check_allocated_shapes`); the inputs' shapes together, before it
    (:func:`check_resized_reach`: a resize within :data:`MAX_RANK` may still
    make a deep tensor, one input with another).
    """
    if len(shape) > MAX_RANK:
        deep = any_rank_tensors(info, info.subgraphs[0])
        if tensor_index not in deep:
            raise InvalidInputError(
                f"cannot resize {_input(info, tensor_index)} to rank {len(shape)} (shape {list(shape)[:8]}...): "
                f"the runtime supports at most {MAX_RANK} dimensions"
            )
        sg = info.subgraphs[0]
        reach = deep_reach(info, lambda t: tuple(shape) if t == tensor_index else tuple(sg.tensors[t].shape))
        if reach is not None:
            op, t, rank = reach
            raise InvalidInputError(
                f"cannot resize {_input(info, tensor_index)} to rank {len(shape)} (shape {list(shape)[:8]}...): "
                f"{messages.planned_operator(sg, op)} would get an input of rank {rank} (tensor {t}), more "
                f"dimensions than it takes (at most {MAX_RANK} here); resize it to at most "
                f"{len(shape) - (rank - MAX_RANK)} dimensions"
            )
    if elements(shape) > MAX_ELEMENTS:
        raise InvalidInputError(
            f"cannot resize {_input(info, tensor_index)} to {list(shape)}: more than {MAX_ELEMENTS} elements"
        )


def deep_reach(info, shape_of) -> tuple | None:
    """The first operator that a deep tensor's depth reaches though it takes at most :data:`MAX_RANK` dimensions.

    A tensor may be deep where only operators of any rank read it
    (:func:`~.limits.any_rank_tensors`), but what they make of it may be
    deep too: EXPAND_DIMS and PACK add a dimension, and a tensor declared
    shallow that another operator reads is planned at the depth they give.
    The allocation then runs that operator's prepare at that depth before
    :func:`check_allocated_shapes` can look: measured on TFLite 2.23.0 with
    XNNPACK, EXPAND_DIMS of a rank-12 input into ADD (rank 13) takes the
    process down with SIGSEGV while allocating, whether the input was
    declared deep or resized deep.  So the shapes are followed from the
    inputs' before any allocation.

    Parameters
    ----------
    info : ModelInfo
        The model; its subgraph 0 is the one followed.
    shape_of : callable
        ``shape_of(tensor index)``: the shape of an input (or variable) of
        subgraph 0 for the next allocation.

    Returns
    -------
    tuple or None
        ``(operator, tensor index, rank)``: the first operator that would
        read a tensor deeper than it takes (as
        :func:`~.tensor_rules.deeper_allowed` judges the declared shapes);
        None when there is none, or when the shapes cannot be followed
        (shapes that do not fit fail the allocation cleanly, and a
        value-dependent output's shape is left to the allocation, as before).
    """
    sg = info.subgraphs[0]
    try:
        shapes = infer_shapes(info, shape_of)
    except ModelError:
        return None
    allowed = deeper_allowed(info, sg)
    for op in sg.operators:
        for t in op.inputs:
            found = shapes.get(t) if t >= 0 else None
            if found is not None and len(found) > MAX_RANK and not allowed(t, len(found)):
                return op, t, len(found)
    return None


def check_resized_reach(info, input_shapes: dict) -> None:
    """Before an allocation after a resize: refuse the inputs' shapes, together, when their depth reaches too far.

    :func:`check_resize` judges one input at a time, with the others at
    their declared shapes, and follows the shapes only for a resize deeper
    than :data:`MAX_RANK`.  Operators of any rank that add dimensions
    (:data:`~.limits.ADDS_DIMENSIONS`) make a deep tensor from shallow
    inputs too: GATHER of an input resized to 6 dimensions by indices of 6
    dimensions gives 11, EXPAND_DIMS one more, and an ADD that reads it
    (declared [2, 3], so the XNNPACK delegate kept the node when the
    interpreter was created) was prepared at rank 12 inside the allocation:
    SIGSEGV on TFLite 2.23.0 with XNNPACK (found while writing
    tools/fuzz_deep_shapes.py, whose deepening chains aim at it), before :func:`check_allocated_shapes`
    could refuse the rank-12 tensor, as it does on every other runtime.

    Parameters
    ----------
    info : ModelInfo
        The model; its subgraph 0 is the one about to be allocated.
    input_shapes : dict
        ``{tensor index: shape}`` of subgraph 0's inputs as the allocation
        will see them (resized or not); a tensor left out keeps its
        declared shape.

    Raises
    ------
    ModelError
        The operator that would get too deep a tensor, the inputs' shapes
        and the fix.  Only what :func:`check_allocated_shapes` would refuse
        after the allocation is refused (the same depth rule,
        :func:`~.tensor_rules.deeper_allowed`), so nothing that runs is.
    """
    sg = info.subgraphs[0]
    if all(s is None or len(s) <= MAX_RANK for s in input_shapes.values()) and not adds_dimensions(info):
        return  # (no tensor deeper than its inputs: most models)

    def shape_of(t):
        given = input_shapes.get(t)
        return tuple(given) if given is not None else tuple(sg.tensors[t].shape)

    reach = deep_reach(info, shape_of)
    if reach is not None:
        op, t, rank = reach
        shapes = ", ".join(f"{_input(info, i)}: {list(shape_of(i))}" for i in sg.inputs if i >= 0)
        raise ModelError(
            f"with the inputs as resized ({shapes}), {messages.planned_operator(sg, op)} would get an input of "
            f"rank {rank} ({messages.planned_tensor(sg, t)}), more dimensions than it takes (at most {MAX_RANK} "
            "here); resize the inputs to fewer dimensions"
        )


def _input(info, tensor_index: int) -> str:
    """``input N``, of the planned subgraph (named when it is not subgraph 0)."""
    return f"{messages.planned_subgraph(info.subgraphs[0].index)}input {tensor_index}"


def check_allocated_shapes(info, shape_of, planned=None, version=None, xnnpack=False) -> None:
    """The rules of :func:`~opaque_ops.model.check_allocated`, run every time (nothing is kept).

    Parameters
    ----------
    info : ModelInfo
        The model; its subgraph 0 is the one checked.
    shape_of : callable
        ``shape_of(tensor_index) -> tuple of int or None``, as for
        :func:`~opaque_ops.model.check_allocated`.
    planned : callable, optional
        As for :func:`~opaque_ops.model.check_allocated`.
    version : str, optional
        The runtime's ``TfLiteVersion()``, for the rules of one runtime's
        kernels (:mod:`.version_rules`); None runs none of them.
    xnnpack : bool, optional
        Whether the XNNPACK delegate is applied (for a rule of 2.17.1's
        XNNPACK: :func:`_check_called_sizes`).

    Raises
    ------
    ModelError
        The message names the operator and tensor at fault and the fix.
    """
    sg = info.subgraphs[0]
    shapes = infer_shapes(info, shape_of, planned)
    _check_sizes(info, sg, shapes)
    # What the caller will read: the runtime's output shapes must be the ones
    # the operators give (with an empty batch, XNNPACK 2.17.1 leaves garbage
    # dimensions in its outputs, e.g. [0, 549846668, 1491629428, 4]).
    for t in sg.outputs:
        want, got = shapes.get(t), shape_of(t)
        if want is not None and got is not None and tuple(got) != tuple(want):
            raise ModelError(
                f"{messages.planned_tensor(sg, t, 'output tensor')} was planned as {list(got)}, but the "
                f"model's operators give {list(want)}; the runtime would return wrong data. Resize the "
                "input to a shape without empty dimensions"
            )

    def known(t):
        return shapes.get(t) if t >= 0 else None

    for op in sg.operators:
        if op.op_name in ("CONV_2D", "DEPTHWISE_CONV_2D") and len(op.inputs) >= 2 and min(op.inputs[:2]) >= 0:
            _check_convolution(sg, op, known)
        elif op.op_name in SPLIT_AXIS:
            _check_split_axis(sg, op, known)
        elif op.is_custom and op.op_name in RUNTIME_CUSTOM_OPS and op.custom_options:
            check_runtime_op_shapes(op, _runtime_options(op), known, sg.index)
    # The subgraphs that control flow runs are followed for rules of affected runtimes only, once for both.
    found = follow_called(info, known) if affected(version) else None
    if found is not None and xnnpack:
        _check_called_sizes(found, version)
    # (2.23's XNNPACK keeps the buffer and shape of a variable's first value, across allocations and
    # subgraphs: the interpreter's run-time rule, model.variable_buffers, compares the stores of each
    # allocation with what its earlier invokes may have stored first.)
    _check_variable_reads(info, sg, shape_of, known, through_others_only=xnnpack and not affected(version))
    check_version_rules(sg, known, version)
    if found is not None:
        check_select_v2_in_control_flow(info, known, version, found)


def _check_variable_reads(info, sg, shape_of, known, through_others_only: bool = False) -> None:
    """READ_VARIABLE's planned output has the shape ASSIGN_VARIABLE stores in its variable after this allocation.

    tensorflow/lite/kernels/read_variable.cc: Prepare makes the output
    dynamic only when it is declared with rank 0; otherwise the output keeps
    the shape it is planned with, and Eval copies that many bytes from the
    variable, whatever shape the variable holds.  A resize that changes the
    tensor an ASSIGN_VARIABLE stores (the variable takes that tensor's
    shape and size at each assignment:
    tensorflow/lite/experimental/resource/resource_variable.cc, AssignFrom)
    leaves the read with the old shape: a larger value comes back
    truncated to its first values, a smaller one is read past its end
    (measured on 2.17.1, and on 2.23.0 and ai-edge-litert without XNNPACK:
    x [2, 6] resized to [2, 9] gives its first twelve values, to [2, 3]
    six values then heap bytes).  check_model refuses declared shapes that
    disagree (:func:`~.graph.check_variable_reads`); this is the same rule on
    the shapes of each allocation.  2.23's XNNPACK delegate runs the
    variable operators itself and gives the read the shape of a value
    stored through the read's own handle tensor, so there
    (``through_others_only``, the caller's condition) only values stored
    through another VAR_HANDLE of the same name are compared: with those,
    2.23's XNNPACK truncates the read as the other runtimes do (x [2, 6]
    resized to [2, 9] reads x's first twelve values as [2, 6]).

    Variables are matched as TFLite matches them: VAR_HANDLEs of one
    (container, shared_name) are one variable (:func:`~.graph.variable_names`),
    and a read is compared with the values it may see
    (:func:`~.graph.stores_seen`).  Only this subgraph's assignments are
    compared here with the values the subgraphs that its control flow runs
    store (an IF's branch, a WHILE's body, a CALL_ONCE's init), on the shapes
    this allocation gives their inputs (:func:`~..variable_buffers.store_plan`):
    a branch that stores its input x follows x's resize (found by
    tools/fuzz_variables.py with resizes: x resized to [1, 6] and stored by
    an IF's branch, then read as declared [2, 6], gives six values and then
    heap bytes on 2.17.1 and 2.23.0, with XNNPACK and without, and on
    ai-edge-litert).  The constants of subgraphs no control flow of this one
    runs (another signature's) keep their shape, which check_model compared
    with the read's (a read not declared with rank 0 keeps its declared
    shape at every allocation).
    """
    reads = [op for op in sg.operators if op.op_name == "READ_VARIABLE" and not op.is_custom]
    if not reads:
        return
    names = variable_names(sg)
    here = variable_assignments(sg, names, known)
    called: dict = {}
    if len(info.subgraphs) > 1:
        from ..variable_buffers import store_plan  # (only a model with a read and another subgraph)

        for s in store_plan(info, 0, shape_of).stores:
            if s.segment is None:  # (a store of a subgraph this one's control flow runs)
                called.setdefault(s.key, []).append((s.sg, s.op, s.shape))
    for op in reads:
        if not op.inputs or not op.outputs or min(op.outputs) < 0 or op.inputs[0] < 0:
            continue
        out = shape_of(op.outputs[0])
        if not out:  # dynamic (declared with rank 0: it follows the variable), or not planned
            continue
        for where, assign, shape in stores_seen(sg, op, names, here, called):
            if through_others_only and where is sg and assign.inputs[0] == op.inputs[0]:
                continue
            if shape != tuple(out):
                value = where.tensors[assign.inputs[1]].name
                have, want = elements(shape), elements(out)
                how = "its first values only" if have > want else "past its end" if have < want else "in another shape"
                store = messages.planned_operator(sg, assign) if where is sg else messages.operator(where, assign)
                raise ModelError(
                    f"{messages.planned_operator(sg, op)} gives its output {messages.planned_tensor(sg, op.outputs[0])} "
                    f"the shape {list(out)} it was planned with, but {store} stores "
                    f"{value!r} of shape {list(shape)} in the same variable; TFLite's READ_VARIABLE would copy "
                    f"{want} values out of a variable of {have} ({how}) "
                    f"and return wrong data. Resize the inputs so that {value!r} keeps the shape {list(out)}"
                )


def _runtime_options(op) -> dict:
    """The op's decoded options, or ``{}`` when a registered kernel of the same name owns other ones.

    check_model has refused undecodable options for the runtime's own kernel;
    a kernel registered under its name (custom_ops) may use any format.
    """
    try:
        return decode_flex_options(op.custom_options)
    except ModelError:
        return {}


def _check_sizes(info, sg, shapes) -> None:
    """No planned tensor beyond the rank and element count the runtime can handle."""
    any_rank = deeper_allowed(info, sg)
    for t, shape in shapes.items():
        if shape is None:
            continue
        if len(shape) > MAX_RANK and not any_rank(t):
            raise ModelError(
                f"{messages.planned_tensor(sg, t)} would have rank {len(shape)}; the "
                f"runtime supports at most {MAX_RANK} dimensions"
            )
        if (not shape or min(shape) >= 0) and elements(shape) > MAX_ELEMENTS:  # (min's default= costs a call's worth)
            raise ModelError(
                f"{messages.planned_tensor(sg, t)} would have shape {list(shape)}: more "
                f"than {MAX_ELEMENTS} elements. Resize the input to a smaller shape"
            )


def _check_called_sizes(found, version) -> None:
    """No tensor beyond MAX_RANK dimensions in a subgraph that control flow runs, unless GATHER_ND alone has it.

    :func:`_check_sizes` for the subgraphs that WHILE, IF and CALL_ONCE run,
    on the shapes :func:`~.called.follow_called` gives them.  Their declared
    tensors are at most MAX_RANK deep (:func:`~.limits.any_rank_tensors`
    allows none deeper there), but GATHER_ND's output takes
    rank(indices) - 1 + rank(params) - depth dimensions whatever is
    declared, and the control-flow kernel copies a subgraph's output shape
    to the caller's tensor.  Measured in child processes, a GATHER_ND
    output of rank 7 in an IF branch, read by RELU or RESHAPE (in the
    branch, or after the IF): TFLite 2.17.1 with XNNPACK returns a wrong
    shape ([1, 1, 2, 2, 2, 2, 12288] for [1, 1, 2, 2, 2, 2, 3], RESHAPE
    [3072] for [48]: read past the tensor).  2.23.0 and ai-edge-litert fail
    to prepare the XNNPACK partition (an error, not a crash: ADD, RELU) or
    run it right (RESHAPE); without XNNPACK every runtime gives numpy's
    values (ADD, RELU, RESHAPE).  So this is refused on an affected runtime
    with XNNPACK only.  Returned to the user, or read by GATHER_ND only, the
    tensor is right everywhere and never refused.
    """
    for k, t, shape, op in found.deep:
        sg = found.subgraphs[k]
        caller = found.callers.get(k)
        where = f"{messages.tensor(sg, sg.tensors[t])}" + (f", in a subgraph that {caller} runs," if caller else "")
        raise ModelError(
            f"{where} would have rank {len(shape)} ({list(shape)}): GATHER_ND's output takes its dimensions from "
            f"its inputs' shapes, whatever the model declares; only GATHER_ND reads and writes tensors of more "
            f"than {MAX_RANK} dimensions, but {messages.operator(sg, op)} takes it, and TFLite {version}'s XNNPACK "
            f"delegate handles at most {MAX_RANK} (it would return a wrong shape and read past the tensor). Give "
            f"that GATHER_ND params and indices whose output has at most {MAX_RANK} dimensions, or turn XNNPACK "
            "off (use_xnnpack=False), or use TFLite 2.23"
        )


def _check_convolution(sg, op, known) -> None:
    """A convolution's input channels still match its filter after a resize."""
    x, w = known(op.inputs[0]), known(op.inputs[1])
    declared = sg.tensors[op.inputs[0]].shape
    if x is None or w is None or len(x) != 4 or len(w) != 4 or len(declared) != 4:
        return
    where = messages.planned_operator(sg, op)
    want = w[3] if op.op_name == "CONV_2D" else declared[3]
    if x[3] != want and declared[3] == want:
        # XNNPACK keeps the filter's channel count and reads past the input.
        raise ModelError(
            f"{where} takes {want} input channels, but its input {op.inputs[0]} has shape {list(x)}. "
            "Resize the model's input with the channel count it was built for"
        )
    if op.op_name == "CONV_2D" and w[3] > 0 and (x[3] <= 0 or x[3] % w[3]):
        # The kernels divide by the group count x[3] / w[3]: zero input
        # channels is a division by zero (SIGFPE, fuzz_structured 31:41157).
        raise ModelError(
            f"{where} has a filter of {w[3]} input channels, but its input "
            f"{op.inputs[0]} has shape {list(x)}: the input channels must be a positive multiple "
            "of the filter's. Resize the model's input with the channel count it was built for"
        )


def _check_split_axis(sg, op, known) -> None:
    """SPLIT's and SPLIT_V's axis holds one value in the shape the runtime will use.

    Their kernels read the axis as ``GetTensorData<int>(axis)[0]`` without
    checking its size (check_model refuses a declared shape of another
    size).  A resized input, or a tensor whose shape is only decided while
    the model runs (an operator after WHERE, say), can still make it empty
    there: a read through a null pointer (SIGSEGV in fuzz_structured
    84:19809, a CAST of WHERE's output as the axis).
    """
    k = SPLIT_AXIS[op.op_name]
    ax = op.inputs[k] if len(op.inputs) > k else -1
    if ax < 0 or sg.tensors[ax].data is not None:
        return  # no axis, or a constant one: check_model's rule
    shape = known(ax)
    where = messages.planned_operator(sg, op)
    if shape is None:
        raise ModelError(
            f"{where} reads its axis from tensor {ax}, whose shape is only decided while the model runs "
            f"(it depends on the input values); TFLite's {op.op_name} reads one INT32 value there without "
            "checking its size, and an empty tensor would crash the process. The axis must be a constant "
            "or a model input"
        )
    if elements(shape) != 1:
        fix = f". Resize input {ax} to one value" if ax in sg.inputs else ""
        raise ModelError(
            f"{where} reads its axis from tensor {ax}, planned as {list(shape)}; the axis must be one INT32 value{fix}"
        )
