"""Shapes and constants that an older runtime's builtin kernels mishandle in Eval, refused on those runtimes only.

Each rule is a defect of TFLite 2.17.1's kernels (the default runtime) that
2.23.0 and ai-edge-litert do not have: they run the same model and give the
right answer, so the model is refused only where it would crash.  2.23.0 is
the first runtime measured without them; a runtime older than that (one
opaque_ops does not know, such as 2.18 to 2.22) is treated as 2.17.1 is.
The rules read the shapes an allocation planned (after Prepare, before any
Eval), so a kept verdict is keyed by the runtime like every other verdict of
:func:`~opaque_ops.model.check_allocated`.

Values given only at run time (a TOPK_V2 ``k`` or a BROADCAST_TO shape fed
as an input) are not known here: the interpreter checks them before each
invoke (:mod:`opaque_ops.interpreter.fed_values`).  Nor is what an earlier
allocation of one interpreter left in a kernel: SELECT_V2's broadcast mode,
which outlives the shapes that chose it, is remembered per interpreter by
:mod:`opaque_ops.model.select_rows`.
"""

from __future__ import annotations

import math

from ...errors import ModelError, ShapeError
from ..runtime_versions import affected as affected  # (its home was here)
from ..runtime_versions import broadcast_writes_into_empty as broadcast_writes_into_empty
from ..select_rows import SELECT_V2_BROADCAST_RANK
from . import messages
from .called import follow_called
from .limits import DEEP_OPS_2_23, MAX_RANK, MAX_RANK_2_23
from .options import effective_options


def check_version_rules(sg, known, version: str | None) -> None:
    """Refuse, on an affected runtime, the operators of subgraph 0 whose Eval would crash it.

    Parameters
    ----------
    sg : SubgraphInfo
        Subgraph 0.
    known : callable
        ``known(tensor index) -> tuple or None``: the shape the rules infer.
    version : str or None
        The runtime's ``TfLiteVersion()``; None: not known, nothing refused
        but what :func:`check_deep_elementwise` refuses.
    """
    check_deep_elementwise(sg, known, version)
    if not affected(version):
        return
    for op in sg.operators:
        rule = None if op.is_custom else _RULES.get(op.op_name)
        if rule is not None and len(op.inputs) >= 2 and min(op.inputs[:2]) >= 0:
            rule(sg, op, known, version)


# The builtins of limits.DEEP_OPS_2_23 that broadcast (TRANSPOSE is the other:
# its permutation is checked before the interpreter is created, and its kernel
# refuses more than 8 dimensions in Prepare).
_DEEP_BROADCASTS = DEEP_OPS_2_23 - {"TRANSPOSE"}


def check_deep_elementwise(sg, known, version: str | None) -> None:
    """Refuse an ADD, SUB or MUL of subgraph 0 deeper than :data:`~.limits.MAX_RANK` that the runtime gets wrong.

    Parameters
    ----------
    sg : SubgraphInfo
        Subgraph 0.
    known : callable
        ``known(tensor index) -> tuple or None``: the shape the rules infer.
    version : str or None
        The runtime's ``TfLiteVersion()``; None: not known, and a deep
        broadcast is refused as on the oldest runtime.

    Notes
    -----
    The declared shapes let these operators' tensors through up to
    :data:`~.limits.MAX_RANK_2_23` dimensions
    (:func:`~.tensor_rules.deeper_allowed`); the kernels fail in Eval, after
    these planned shapes are known (measurements: :mod:`.limits`).  Inputs
    of one shape take the elementwise path at any rank on every runtime
    measured; a broadcast deeper than MAX_RANK runs right from TFLite 2.23
    on, up to MAX_RANK_2_23 dimensions.
    """
    for op in sg.operators:
        if op.is_custom or op.op_name not in _DEEP_BROADCASTS or len(op.inputs) < 2 or not op.outputs:
            continue
        x, y, out = (known(t) if t >= 0 else None for t in (*op.inputs[:2], op.outputs[0]))
        if x is None or y is None or out is None:
            continue
        rank = max(len(x), len(y), len(out))
        if rank <= MAX_RANK:
            continue
        if rank > MAX_RANK_2_23:
            # tensorflow/lite/kernels/internal/reference/add.h, mul.h (2.23): the
            # broadcast helpers take 8 dimensions and abort on more.
            raise ModelError(
                f"{messages.planned_operator(sg, op)} would take {list(x)} and {list(y)} to {list(out)}: "
                f"{rank} dimensions; TFLite's {op.op_name} takes at most {MAX_RANK_2_23} (2.23; "
                f"{MAX_RANK} before) and aborts the process on more. Reshape its inputs to at most "
                f"{MAX_RANK_2_23} dimensions"
            )
        if tuple(x) != tuple(y) and (version is None or affected(version)):
            # tensorflow/lite/kernels/add.cc, sub.cc, mul.cc: inputs of two shapes
            # broadcast, and 2.17.1's helpers (BroadcastAdd6DSlow,
            # kMaxMulBroadcastDim in internal/reference/add.h, mul.h) stop at 6.
            runtime = f"TFLite {version}" if version else "this TFLite runtime (its version is not known)"
            raise ModelError(
                f"{messages.planned_operator(sg, op)} broadcasts {list(x)} and {list(y)} to {list(out)}, "
                f"{rank} dimensions; {runtime}'s {op.op_name} broadcasts through at most {MAX_RANK} "
                "(deeper, ADD and SUB give wrong values and MUL aborts the process; TFLite 2.23 runs up to "
                f"{MAX_RANK_2_23}). Give both inputs one shape, or at most {MAX_RANK} dimensions, "
                "or use TFLite 2.23"
            )


def _select_v2(sg, op, known, version) -> None:
    # tensorflow/lite/kernels/select.cc (kVersionTwo): Prepare takes the
    # broadcasting Eval whenever the condition, x and y do not all have one
    # shape (unless all three and the output already hold one value each:
    # then it returns early and keeps the output as it is).  In 2.17.1 that
    # Eval is BroadcastSelect5DSlow
    # (tensorflow/lite/kernels/internal/reference/select.h), which pads every
    # shape out to 5 dimensions; padding a 6-D shape "to 5" fails a
    # TFLITE_CHECK and aborts the process (SIGABRT, any type, measured on
    # [2, 2, 2, 2, 2, 1] against [2, 2, 2, 2, 2, 3]).  2.23.0 broadcasts any
    # rank there.  One shape for all three takes the elementwise Eval, which
    # runs at any rank in a fresh node; one whose earlier allocation took the
    # broadcasting Eval is select_rows' (it never leaves it).
    if len(op.inputs) < 3 or op.inputs[2] < 0 or not op.outputs or op.outputs[0] < 0:
        return
    c, x, y, out = (known(t) for t in (*op.inputs[:3], op.outputs[0]))
    if c is None or x is None or y is None or out is None or tuple(c) == tuple(x) == tuple(y):
        return
    if all(math.prod(s) == 1 for s in (c, x, y)):
        return  # (the early return, if the output held one value before: only the interpreter knows)
    if max(len(c), len(x), len(y), len(out)) > SELECT_V2_BROADCAST_RANK:
        raise ModelError(
            f"{messages.planned_operator(sg, op)} broadcasts its condition {list(c)}, x {list(x)} and y "
            f"{list(y)} to {list(out)}; TFLite {version}'s SELECT_V2 broadcasts through at most "
            f"{SELECT_V2_BROADCAST_RANK} dimensions and aborts the process on more (TFLite 2.23 runs it). "
            "Give the condition, x and y one shape (broadcast them first), or at most "
            f"{SELECT_V2_BROADCAST_RANK} dimensions, or use TFLite 2.23"
        )


def _broadcast_to(sg, op, known, version) -> None:
    # tensorflow/lite/kernels/internal/reference/broadcast_to.h (BroadcastImpl)
    # recurses over the input's dimensions up to the last one that broadcasts
    # and copies output rows there; the output's dimensions are not looked
    # at on the way down.  An input dimension of 1 broadcast to 0 before that
    # last one still leads it to copy rows into the empty output (2.17.1:
    # SIGSEGV, [1, 3] to [0, 2, 3]; 2.23.0 writes nothing there).
    # (A shape fed as an input is checked before each invoke instead:
    # opaque_ops.interpreter.fed_values.)
    x, out = known(op.inputs[0]), known(op.outputs[0]) if op.outputs and op.outputs[0] >= 0 else None
    if x is not None and out is not None and broadcast_writes_into_empty(x, out):
        raise ModelError(
            f"{messages.planned_operator(sg, op)} broadcasts its input {op.inputs[0]} to {list(out)}, which is empty "
            f"in a dimension before the last one it broadcasts; TFLite {version}'s BROADCAST_TO still copies "
            "rows into that empty output and crashes the process (TFLite 2.23 runs it). Resize the input or "
            "the target shape so that the output is not empty, or use TFLite 2.23"
        )


def _top_k(sg, op, known, version) -> None:
    # tensorflow/lite/kernels/topk_v2.cc, TopContainer::push in 2.17.1: with
    # k = 0 the first value of a row fills and empties the heap, and the
    # second is compared with front() of the empty container and written
    # before its start (heap corruption: "double free or corruption",
    # SIGABRT).  A row of one value, or no rows, never gets there.
    x, k = known(op.inputs[0]), sg.tensors[op.inputs[1]].array()
    if x is None or not x or k is None or k.size != 1 or int(k.reshape(-1)[0]) != 0:
        return
    if x[-1] >= 2 and math.prod(x[:-1]) > 0:
        raise ModelError(
            f"{messages.planned_operator(sg, op)} takes the top k = 0 (constant tensor {op.inputs[1]}) of rows of "
            f"{x[-1]} values (input {op.inputs[0]} of shape {list(x)}); TFLite {version}'s TOPK_V2 corrupts "
            "memory for k = 0 (TFLite 2.23 runs it). Use k of at least 1, or drop the operator: its outputs "
            "are empty"
        )


def _conv_3d(sg, op, known, version) -> None:
    # tensorflow/lite/kernels/conv3d.cc takes any dilation factor other than
    # 1 to optimized_ops' DilatedIm2col3D
    # (tensorflow/lite/kernels/internal/optimized/im2col_utils.h), which in
    # 2.17.1 sizes what it copies or zeroes for each position by the input's
    # depth (dimension 1) instead of its channels (dimension 4), fixed
    # upstream since (im2col_utils_test.cc,
    # DepthGreaterThanChannelsDoesNotOverflow).  Measured on 2.17.1, with
    # SAME or VALID padding alike: a depth above the channels writes past the
    # buffer (valgrind: invalid writes; "double free or corruption" or
    # "free(): invalid next size", SIGABRT, e.g. VALID [1, 32, 7, 7, 1] with
    # dilation 3; smaller overruns go unnoticed), a depth below leaves
    # channels unset (wrong output, VALID [1, 2, 5, 5, 8] too).  Depth equal
    # to channels, or no dilation, runs right.
    x, w = known(op.inputs[0]), known(op.inputs[1])
    opts = effective_options(op)
    if x is None or w is None or len(x) != 5 or len(w) != 5 or x[1] == x[4]:
        return
    dilations = [opts.get(d, 1) for d in ("dilation_d_factor", "dilation_h_factor", "dilation_w_factor")]
    if all(d == 1 for d in dilations):
        return
    raise ModelError(
        f"{messages.planned_operator(sg, op)} has dilations {dilations} on an input {op.inputs[0]} of shape "
        f"{list(x)} whose depth ({x[1]}) is not its channel count ({x[4]}); TFLite {version}'s dilated CONV_3D "
        "then writes past its buffer or returns wrong values (TFLite 2.23 runs it). Resize the input so that "
        "its depth is its channel count, use dilations of 1 (a filter dilated with zeros), or use TFLite 2.23"
    )


def check_select_v2_in_control_flow(info, known, version: str | None, found=None) -> None:
    """Refuse, on an affected runtime, a SELECT_V2 that WHILE, IF or CALL_ONCE would run through 6 dimensions.

    Those kernels prepare the subgraphs they run themselves, out of the
    interpreter's sight (tensorflow/lite/kernels/while.cc, if.cc,
    call_once.cc): a branch with the shapes the caller planned for the IF's
    inputs, a WHILE's condition and body with the loop variables' shapes, at
    each turn whose body changed them.  The SELECT_V2 there is the one of
    :func:`_select_v2`: once a Prepare saw its condition, x and y differ in
    shape it broadcasts in every later Eval of that node, and 2.17.1's
    broadcasting Eval aborts the process on more than 5 dimensions (measured
    in child processes: a 6-D broadcast in an IF branch, a WHILE body or a
    WHILE condition; a broadcast of 2 dimensions in a WHILE body's first
    turn, then one shape of 6 in the next; 2.23.0 and ai-edge-litert run
    all of them).  The subgraphs are followed here from ``known``, subgraph
    0's planned shapes, turn by turn for a WHILE until its loop variables
    keep their shapes (or keep their ranks, with the SELECT_V2 at 5
    dimensions or fewer); a SELECT_V2 whose shapes cannot be followed
    (decided by values at run time, or a loop that keeps changing ranks)
    is refused only when it may see more than 5 dimensions, which is not
    known: so it is refused there.

    Parameters
    ----------
    info : ModelInfo
        The model; ``info.subgraphs[0]`` is the planned subgraph.
    known : callable
        ``known(tensor index) -> tuple or None``: subgraph 0's planned shapes.
    version : str or None
        The runtime's ``TfLiteVersion()``; None: nothing refused.
    found : Followed, optional
        :func:`~.called.follow_called` ``(info, known)``, if the caller has
        it already.
    """
    if not affected(version):
        return
    found = found or follow_called(info, known)
    if found is None:
        return
    for (k, index), shapes in found.selects.items():
        sg = found.subgraphs[k]
        _judge(sg.operators[index], sg, shapes, found.callers.get(k, ""), version)


def note_called_select_v2(info, known, memory: set, check: bool = True) -> ShapeError | None:
    """After an allocation: the called SELECT_V2s left broadcasting remembered; the error for a stale one.

    The per-interpreter half of :func:`check_select_v2_in_control_flow`,
    run by the interpreter on a runtime older than 2.23 (the same place as
    :func:`~opaque_ops.model.select_rows.note_and_check` for subgraph 0).  A
    node of a subgraph that WHILE or IF runs lives as long as the
    interpreter, and so does its broadcast mode: an allocation that
    broadcast it at any rank, then a later one that gives it one shape of 6
    dimensions, aborts 2.17.1 in Eval (measured: an IF branch and a WHILE
    body at [2, 1] against [2, 3], then all three [2, 2, 2, 2, 2, 3]; 2.23.0
    runs it).  Shapes that are not known are the model rule's (refused
    there), and remembered as broadcasting (that refusal comes after the
    kernel prepared the node); so is a broadcast of 6 dimensions itself.

    Parameters
    ----------
    info : ModelInfo
        The model; its subgraph 0 is the allocated one.
    known : callable
        ``known(tensor index) -> tuple or None``: subgraph 0's planned shapes.
    memory : set
        ``(subgraph, operator)`` of the called SELECT_V2s that an earlier
        allocation of this interpreter left broadcasting; updated here.
    check : bool
        False after a failed allocation: only remember.

    Returns
    -------
    ShapeError or None
        For the first remembered node that this allocation gives more than
        5 dimensions.
    """
    found = follow_called(info, known)
    if found is None:
        return None
    callers = found.callers
    error = None
    for (k, index), shapes in found.selects.items():
        stale = (k, index) in memory
        for four in shapes:
            if four is None:
                # Not known (the model rule refuses this allocation, but the control-flow
                # kernel prepared the node all the same): as if it broadcast, which can only
                # refuse more.  Forgotten, a refused allocation of [1, 1], [1] and [1] with a
                # declared output of 6 values left the node broadcasting, and a next one of one
                # shape of 6 dimensions aborted 2.17.1.
                memory.add((k, index))
                continue
            if _broadcasts(four):
                memory.add((k, index))
            elif check and stale and _rank(four) > SELECT_V2_BROADCAST_RANK and error is None:
                c, x, y, out = four
                error = ShapeError(
                    f"{messages.operator_at(k, index, 'SELECT_V2')}, in a subgraph that {callers.get(k, '')} "
                    f"runs: an earlier allocation of this Interpreter gave its condition, x and y shapes that "
                    "differ, so its kernel broadcasts in every later run (it never leaves that mode), and this "
                    f"runtime's broadcast handles at most {SELECT_V2_BROADCAST_RANK} dimensions: condition "
                    f"{list(c)}, x {list(x)} and y {list(y)} to {list(out)} would abort the process (TFLite 2.23 "
                    f"runs it). Create a new Interpreter for these shapes, or keep at most "
                    f"{SELECT_V2_BROADCAST_RANK} dimensions here, or use TFLite 2.23"
                )
            stale = stale or (k, index) in memory
    # (After the nodes followed: one not followed was prepared on shapes not known, perhaps
    # broadcasting, in a subgraph whose Prepare then failed; that allocation itself refuses nothing.)
    memory.update(found.unfollowed)
    return error


def _broadcasts(four) -> bool:
    """Whether a Prepare on these shapes sets SELECT_V2's broadcast flag (see :func:`_select_v2`)."""
    c, x, y, _out = four
    return not c == x == y and not all(math.prod(s) == 1 for s in (c, x, y))


def _rank(four) -> int:
    """The most dimensions among a SELECT_V2's condition, x, y and output."""
    return max(len(s) for s in four)


def _judge(op, sg, shapes, caller: str, version) -> None:
    """Refuse a SELECT_V2 whose successive Prepares (``shapes``; None: not known) lead 2.17.1 to abort."""
    where = f"{messages.operator(sg, op)}, in a subgraph that {caller} runs,"
    broadcasting = False
    for four in shapes:
        if four is None:
            # (Not known: shapes decided by values, a WHILE whose loop variables keep changing shape, or
            # inputs of one value each whose output shape is the node's past.  Only a WHILE has loop
            # variables to advise on; an IF or CALL_ONCE is told of the shapes reaching the SELECT_V2.)
            if "(WHILE)" in caller:
                why, fix = (
                    "by values, or by a WHILE whose loop variables keep changing shape",
                    "Give the loop variables shapes that stay the same",
                )
            else:
                why = "by values, or, for inputs of one value each, by the output shape the node held before"
                fix = (
                    "Give the condition, x and y reaching it one shape (broadcast them first), or shapes that do not "
                    "depend on values"
                )
            raise ModelError(
                f"{where} takes shapes there that are decided only while the model runs ({why}), so they may "
                f"reach 6 dimensions; TFLite {version}'s SELECT_V2 broadcasts through at most "
                f"{SELECT_V2_BROADCAST_RANK} dimensions and aborts the process on more, and once it has broadcast "
                f"it keeps broadcasting (TFLite 2.23 runs it). {fix}, or use TFLite 2.23"
            )
        c, x, y, out = four
        broadcasting = broadcasting or _broadcasts(four)
        if broadcasting and _rank(four) > SELECT_V2_BROADCAST_RANK:
            raise ModelError(
                f"{where} would run on its condition {list(c)}, x {list(x)} and y {list(y)} to {list(out)}"
                + ("" if not c == x == y else " after an earlier turn broadcast it")
                + f"; TFLite {version}'s SELECT_V2 broadcasts through at most {SELECT_V2_BROADCAST_RANK} "
                "dimensions and aborts the process on more, and once it has broadcast it keeps broadcasting "
                "(TFLite 2.23 runs it). Give the condition, x and y one shape there (broadcast them first), or "
                f"at most {SELECT_V2_BROADCAST_RANK} dimensions, or use TFLite 2.23"
            )


_RULES = {"BROADCAST_TO": _broadcast_to, "TOPK_V2": _top_k, "CONV_3D": _conv_3d, "SELECT_V2": _select_v2}
