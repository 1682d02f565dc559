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
"""

from __future__ import annotations

import math

from ..errors import ShapeError


def picks_rows(condition, x) -> bool:
    """Whether Prepare sets the row-wise flag for a condition and x of these shapes (not all one shape)."""
    return not condition or (len(condition) == 1 and len(x) >= 1 and condition[0] == x[0])


def overruns(shape) -> bool:
    """Whether RankOneSelect, run on three inputs of ``shape``, writes past the output."""
    return bool(shape) and shape[0] > 0 and math.prod(shape[1:]) > 1


def nodes_of(sg) -> tuple:
    """``(operator index, condition, x, y)`` of each SELECT (v1) operator of ``sg`` (SELECT_V2 has no such mode)."""
    return tuple(
        (op.index, *op.inputs[:3])
        for op in sg.operators
        if op.op_name == "SELECT" and len(op.inputs) >= 3 and min(op.inputs[:3]) >= 0
    )


def note_and_check(nodes, shape_of, rows: set, subgraph: int, check: bool = True) -> ShapeError | None:
    """After an allocation: remember which nodes took the row-wise mode; the error for a stale one.

    Parameters
    ----------
    nodes : tuple
        :func:`nodes_of` the allocated subgraph.
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

    Returns
    -------
    ShapeError or None
        For the first node whose three inputs have one shape whose rows hold
        more than one value, after an earlier allocation took the row-wise
        mode (Eval would write past the output).
    """
    for index, c, x, y in nodes:
        sc, sx, sy = shape_of(c), shape_of(x), shape_of(y)
        if sc is None or sx is None or sy is None:
            continue
        sc, sx, sy = tuple(sc), tuple(sx), tuple(sy)
        if sc != sx or sx != sy:
            if picks_rows(sc, sx):
                rows.add(index)
        elif check and index in rows and overruns(sx):
            return ShapeError(
                f"subgraph {subgraph} operator {index} (SELECT): its condition, x and y would all have shape "
                f"{list(sx)}, but an earlier allocation of this Interpreter gave it a scalar or 1-D condition, "
                "so TFLite's SELECT still picks whole rows of x and y (its kernel never leaves that mode) and "
                "would write past its output. Create a new Interpreter for these shapes, or keep the condition "
                f"a scalar or one value per row ([{sx[0]}]) here (it still runs those), or use SELECT_V2"
            )
    return None
