"""SELECT's row-wise mode, which TFLite's kernel never leaves once an allocation chose it.

tensorflow/lite/kernels/select.cc (kVersionOne), SelectPrepare: when the
condition, x and y do not all have one shape, it sets OpData's
``has_low_rank_input_condition`` for a scalar condition or a 1-D one of x's
first dimension; when they do, it leaves the flag as it was.  SelectEval
runs ``RankOneSelect`` (kernels/internal/reference/reference_ops.h) while
the flag is set: for three inputs of one shape [n, ...] that copies
``prod(shape[1:])`` values for each of the condition's ``prod(shape)``
elements, past the output unless a row holds one value (wrong values at
[2, 3], SIGSEGV at [20, 30] on 2.17.1, 2.23.0 and ai-edge-litert alike).

Prepare returns before it sets the flag when the condition, x, y and the
output (as the previous Prepare left it) all hold one value (see
``_kept_output``), so a scalar condition there leaves the flag as it was
(``_returned_early``).

The flag lives in the runtime's node, so what counts is every allocation
that node has seen: the model's own shapes at creation
(:func:`~opaque_ops.model.shapes.infer_shapes`' SELECT rule refuses those,
a verdict of the model alone) and every later one in *this* interpreter,
which only the interpreter can remember (:func:`note_and_check`, called by
``Interpreter._allocate_locked``; never a kept verdict: the same model and
shapes are safe in an interpreter that never took the row-wise mode).

A SELECT in a subgraph that a WHILE or IF runs is prepared by that kernel,
out of the interpreter's sight: again at each allocation of the caller
(after a resize), and during ``invoke()`` at each turn of a WHILE whose loop
variables change shape (tensorflow/lite/kernels/while.cc re-allocates its
body and condition then; if.cc re-allocates a branch whose inputs changed
shape).  Its node, and so the flag, lives as long as the interpreter.
:func:`~opaque_ops.model.checks.graph.check_select_in_control_flow` refuses
such a SELECT from the model alone.

SELECT_V2 has a mode of the same kind on runtimes older than 2.23: the same
Prepare (kVersionTwo) sets ``requires_broadcast`` when the condition, x and
y do not all have one shape and never clears it, so every later Eval of
that node broadcasts, even for three inputs of one shape.  2.17.1's
broadcasting Eval handles at most 5 dimensions and aborts the process on 6
(:mod:`~opaque_ops.model.checks.version_rules` refuses a broadcast of 6
dimensions itself, a verdict of the shapes alone): after any broadcast, at
any rank, a later allocation of one shape of 6 dimensions aborts in Eval
(measured: condition [2, 1] and x [2, 3], then all three
[2, 2, 2, 2, 2, 3]; 2.23.0 and ai-edge-litert run it).  The same memory
keeps those nodes (:func:`broadcast_nodes_of`; the interpreter passes
``broadcast_rank`` only on such a runtime).

The same Prepare, on every runtime, returns before resizing the output when
the condition, x, y and the output all hold one value, before it looks at
which version it is: the output of a SELECT_V2 or a SELECT keeps the shape
it had (SELECT_V2's condition [1, 1], x [1] and y [1], then all three
resized to [1, 1, 1], leave the output [1, 1]; SELECT's three [1, 1], then
three [1], leave it [1, 1] too).  Which shape it had is the interpreter's
past again (the previous allocation's, or the model's declared one), so the
planned shapes are checked after every allocation (``_kept_output``), never
in a kept verdict.  A SELECT or SELECT_V2 in a subgraph that WHILE, IF or
CALL_ONCE runs is prepared by that kernel, out of the interpreter's sight:
its output is followed from subgraph 0's planned shapes with the
interpreter's memory of it
(:func:`~opaque_ops.model.checks.called.note_called_kept`).
"""

from __future__ import annotations

import math

from ..errors import ShapeError

# The most dimensions 2.17.1's SELECT_V2 broadcasts through: it aborts on
# more (checks.version_rules' _select_v2 says why).  Here, not with that
# rule, because the interpreter passes it to note_and_check at every
# allocation of a model with SELECT_V2, which must not import the checks.
SELECT_V2_BROADCAST_RANK = 5


def picks_rows(condition, x) -> bool:
    """Whether Prepare sets the row-wise flag for a condition and x of these shapes (not all one shape)."""
    return not condition or (len(condition) == 1 and len(x) >= 1 and condition[0] == x[0])


def overruns(shape) -> bool:
    """Whether RankOneSelect, run on three inputs of ``shape``, writes past the output."""
    return bool(shape) and shape[0] > 0 and math.prod(shape[1:]) > 1


def nodes_of(sg) -> tuple:
    """``(operator index, condition, x, y, output)`` of each SELECT (v1) operator of ``sg``.

    SELECT_V2 has no row-wise mode (:func:`broadcast_nodes_of` gives its
    nodes).  The output is there for the shape Prepare's early return keeps
    (see :func:`note_and_check`); an operator without one is left out, as
    the model checks refuse it (``checks.graph.check_has_outputs``).
    """
    return tuple(
        (op.index, *op.inputs[:3], op.outputs[0])
        for op in sg.operators
        if op.op_name == "SELECT"
        and len(op.inputs) >= 3
        and min(op.inputs[:3]) >= 0
        and op.outputs
        and op.outputs[0] >= 0
    )


def broadcast_nodes_of(sg) -> tuple:
    """``(operator index, condition, x, y, output, one)`` of each SELECT_V2 operator of ``sg``.

    ``one`` is 1 when the output is declared with one value, else 0: what
    the first Prepare finds in it (see :func:`note_and_check`).
    """
    return tuple(
        (op.index, *op.inputs[:3], op.outputs[0], int(math.prod(sg.tensors[op.outputs[0]].shape) == 1))
        for op in sg.operators
        if op.op_name == "SELECT_V2"
        and len(op.inputs) >= 3
        and min(op.inputs[:3]) >= 0
        and op.outputs
        and op.outputs[0] >= 0
    )


def kept_nodes_of(sg) -> tuple:
    """:func:`nodes_of` then :func:`broadcast_nodes_of` ``sg``: what the interpreter remembers modes of.

    A SELECT's node has 5 values, a SELECT_V2's 6: how :func:`note_and_check`
    (and the model's record, ``cache._is_select``) tell them apart.
    """
    return nodes_of(sg) + broadcast_nodes_of(sg)


def note_and_check(
    nodes,
    shape_of,
    rows: set,
    subgraph: int,
    check: bool = True,
    outputs: dict | None = None,
    broadcast_rank: int | None = None,
    declared=None,
) -> ShapeError | None:
    """After an allocation: remember which nodes took a mode they never leave; the error for a stale one.

    Parameters
    ----------
    nodes : tuple
        :func:`kept_nodes_of` the allocated subgraph (or :func:`nodes_of`).
    shape_of : callable
        ``shape_of(tensor_index) -> shape or None``: the shapes the runtime
        planned (None: unknown; that node is skipped).
    rows : set
        The operator indices that took the row-wise mode in an earlier
        allocation of this interpreter's subgraph; updated here.
    subgraph : int
        The subgraph's index, for the message.
    check : bool
        False after a failed allocation: only remember.  Its shapes may be
        the ones a Prepare that did not run would have seen; remembering them
        can only refuse more.
    outputs : dict, optional
        For SELECT and SELECT_V2: operator index -> whether its output held
        one value after the last allocation (updated here).
    broadcast_rank : int, optional
        The most dimensions the runtime's SELECT_V2 broadcasting Eval
        handles (:data:`SELECT_V2_BROADCAST_RANK`
        on a runtime older than 2.23); None: it handles any, and SELECT_V2's
        broadcast mode is not remembered (its kept output shape is still
        checked, on every runtime).
    declared : callable, optional
        ``declared(tensor_index) -> shape``: the model's declared shape of a
        tensor of this subgraph, asked only before a SELECT or SELECT_V2's
        kept output is refused (the model's own shapes keep their declared
        output), and at the first allocation of a SELECT whose inputs of one
        value each, of different shapes, Prepare may have returned early for
        (the declared output tells whether it did).

    Returns
    -------
    ShapeError or None
        For the first node left in a mode its Eval cannot run these shapes
        in: a SELECT whose three inputs have one shape whose rows hold more
        than one value, after an earlier allocation took the row-wise mode
        (Eval would write past the output); a SELECT_V2 of more than
        ``broadcast_rank`` dimensions in the broadcasting mode (Eval would
        abort the process); a SELECT_V2 whose output kept a one-value shape
        that is not its inputs' broadcast, or a SELECT whose output kept one
        that is not x's shape (Prepare's early return: the output and what
        follows it would have the wrong shape).  Every node is noted first.
    """
    error = None
    for node in nodes:
        kept = _kept_output(node, shape_of, subgraph, declared) if check else None
        if len(node) == 6:  # SELECT_V2 (kept_nodes_of)
            if broadcast_rank is not None:
                stale = _note_broadcast(node, shape_of, rows, outputs, broadcast_rank, subgraph, check)
                kept = kept or stale
            error = error or kept
            continue
        error = error or kept
        index, c, x, y, out = node
        memory = outputs if outputs is not None else {}
        sc, sx, sy, so = shape_of(c), shape_of(x), shape_of(y), shape_of(out)
        before = memory.get(index)
        # What this Prepare leaves in the output, for the next one (not known: as if it held more,
        # which can only refuse more; after a failed allocation too, as for SELECT_V2).
        memory[index] = check and so is not None and math.prod(so) == 1
        if sc is None or sx is None or sy is None:
            continue
        sc, sx, sy = tuple(sc), tuple(sx), tuple(sy)
        if sc != sx or sx != sy:
            if picks_rows(sc, sx) and not _returned_early(sc, sx, sy, before, out, declared):
                rows.add(index)
        elif check and index in rows and overruns(sx) and error is None:
            error = ShapeError(
                f"subgraph {subgraph} operator {index} (SELECT): its condition, x and y would all have shape "
                f"{list(sx)}, but an earlier allocation of this Interpreter gave it a scalar or 1-D condition, "
                "so TFLite's SELECT still picks whole rows of x and y (its kernel never leaves that mode) and "
                "would write past its output. Create a new Interpreter for these shapes, or keep the condition "
                f"a scalar or one value per row ([{sx[0]}]) here (it still runs those), or use SELECT_V2"
            )
    return error


def _returned_early(sc, sx, sy, before, out: int, declared) -> bool:
    """Whether a SELECT's Prepare returned before it could set the row-wise flag.

    tensorflow/lite/kernels/select.cc, SelectPrepare: its early return, for
    a condition, x, y and output of one value each, comes before the flag is
    set, so a scalar or [1] condition there leaves it as it was (measured:
    three [1, 1], then a scalar condition with x and y [1, 1], then all
    three [2, 3], run with np.where's values on ai-edge-litert).  Whether
    the output held one value is ``before`` (as the previous allocation
    left it), or at this interpreter's first allocation (None) the model's
    declared output, asked of ``declared`` only here; without it, not known:
    no early return, which can only refuse more.
    """
    if not all(math.prod(s) == 1 for s in (sc, sx, sy)):
        return False
    if before is not None:
        return before
    return declared is not None and math.prod(declared(out)) == 1


def _kept_output(node, shape_of, subgraph: int, declared=None) -> ShapeError | None:
    """One SELECT or SELECT_V2 node after an allocation: the error if its output kept a shape from before.

    tensorflow/lite/kernels/select.cc, SelectPrepare: when the condition, x,
    y and the output (as the previous Prepare left it, the model's declared
    shape before the first) all hold one value, it returns before resizing
    the output, and before it tells SELECT from SELECT_V2, so the output
    keeps that shape whatever the inputs' ranks now are (measured on 2.17.1,
    2.23.0 and ai-edge-litert: SELECT_V2's condition [1, 1], x [1] and y [1],
    then all three [1, 1, 1], give an output of [1, 1]; SELECT's three
    [1, 1], then three [1] or three scalars, give [1, 1]).  Its value is
    right, its shape is not, and an operator after it broadcasts with the
    stale shape ([1, 1] + [2, 3] gives [2, 3] where [1, 1, 1] gives
    [1, 2, 3]).  Every other Prepare gives SELECT_V2's output the inputs'
    broadcast shape, and SELECT's output x's shape (or fails: SELECT does
    not broadcast, and takes a condition of x's shape, a scalar or one value
    per row of x, with y of x's shape; measured the same, on a model whose
    declared output holds more than one value, so no early return).  So an
    output of one value whose shape is not that one can only be one the
    early return kept: that is refused, nothing else.  The planned shapes
    tell it alone, whatever this interpreter's past.  Except the model's own
    shapes: when the four are the ones the model declares, the output is the
    one the model was converted with (what upstream's early return is there
    to respect), and every runtime gives it.
    """
    index, c, x, y, out = node[:5]
    shapes = [shape_of(t) for t in (c, x, y, out)]
    if any(s is None for s in shapes):
        return None
    sc, sx, sy, so = (tuple(s) for s in shapes)
    if not all(math.prod(s) == 1 for s in (sc, sx, sy, so)):
        return None
    v2 = len(node) == 6
    # SELECT_V2: three shapes of one value each broadcast to all ones, of the largest rank.
    # SELECT: x's shape, also for inputs of one value it takes only through the early return
    # (without it Prepare refuses them, so no other shape is right either).
    want = (1,) * max(len(sc), len(sx), len(sy)) if v2 else sx
    if so == want:
        return None
    if declared is not None and all(tuple(declared(t)) == s for t, s in zip((c, x, y, out), (sc, sx, sy, so))):
        return None
    if v2:
        return ShapeError(
            f"subgraph {subgraph} operator {index} (SELECT_V2): its condition {list(sc)}, x {list(sx)} and y "
            f"{list(sy)} broadcast to {list(want)}, but TFLite's SELECT_V2 keeps the output shape {list(so)} it "
            "already had (its kernel does not resize an output of one value when each input holds one value), "
            "so the output and every operator after it would have the wrong shape. Resize the inputs so that "
            f"they broadcast to {list(so)}, or to shapes that are not all one value (after an allocation whose "
            "output holds more than one value, all-ones inputs get their broadcast shape again)"
        )
    return ShapeError(
        f"subgraph {subgraph} operator {index} (SELECT): its condition {list(sc)}, x {list(sx)} and y "
        f"{list(sy)} call for an output of x's shape {list(want)}, but TFLite's SELECT keeps the output shape "
        f"{list(so)} it already had (its kernel does not resize an output of one value when each input holds "
        "one value), so the output and every operator after it would have the wrong shape. Resize the "
        f"condition, x and y to {list(so)}, or to one shape that is not all one value (after an allocation "
        "whose output holds more than one value, all-ones inputs get x's shape again)"
    )


def _note_broadcast(node, shape_of, rows: set, outputs, rank: int, subgraph: int, check: bool) -> ShapeError | None:
    """One SELECT_V2 node after an allocation: its broadcast mode noted; the error if Eval would abort.

    tensorflow/lite/kernels/select.cc (kVersionTwo), SelectPrepare: when the
    condition, x and y all hold one value and so does the output as the
    previous Prepare left it (the model's declared shape before the first),
    it returns early and changes nothing; otherwise inputs of different
    shapes set ``requires_broadcast``, and nothing clears it.  The
    broadcasting Eval of a runtime older than 2.23 aborts on any of the four
    shapes beyond ``rank`` dimensions.
    """
    index, c, x, y, out, declared_one = node
    memory = outputs if outputs is not None else {}
    shapes = [shape_of(t) for t in (c, x, y, out)]
    if any(s is None for s in shapes):
        memory[index] = False  # (not known: as if it held more, which can only refuse more)
        return None
    sc, sx, sy, so = (tuple(s) for s in shapes)
    held_one = memory.get(index, bool(declared_one))
    if not sc == sx == sy and not (held_one and all(math.prod(s) == 1 for s in (sc, sx, sy))):
        rows.add(index)
    # (After a failed allocation the output may not be what a Prepare left: as above.)
    memory[index] = check and math.prod(so) == 1
    if not check or index not in rows or max(len(sc), len(sx), len(sy), len(so)) <= rank:
        return None
    return ShapeError(
        f"subgraph {subgraph} operator {index} (SELECT_V2): an allocation of this Interpreter gave its "
        f"condition, x and y shapes that differ, so its kernel broadcasts in every later run (it never leaves "
        f"that mode), and this runtime's broadcast handles at most {rank} dimensions: condition {list(sc)}, "
        f"x {list(sx)} and y {list(sy)} to {list(so)} would abort the process (TFLite 2.23 runs it). Create a "
        f"new Interpreter for these shapes, or keep at most {rank} dimensions here, or use TFLite 2.23"
    )
