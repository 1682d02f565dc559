"""The subgraphs that WHILE, IF and CALL_ONCE run, followed from the shapes the runtime planned for the caller.

Those kernels prepare the subgraphs they run themselves, out of the
interpreter's sight (tensorflow/lite/kernels/while.cc, if.cc,
call_once.cc): a branch on the shapes the caller planned for the IF's
inputs, a WHILE's condition and body on the loop variables' shapes, again at
each turn whose body changed them.  :func:`follow_called` walks them with
:func:`~opaque_ops.model.shapes.infer_shapes`, so that the rules on planned
shapes reach them: SELECT_V2's broadcast on an older runtime
(:mod:`.version_rules`) and tensors deeper than :data:`~.limits.MAX_RANK`
(:mod:`.allocated`).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

from ...errors import ShapeError
from ..select_rows import SELECT_V2_BROADCAST_RANK
from ..shapes import infer_shapes
from . import messages
from .limits import ANY_RANK_OPS, MAX_RANK
from .options import SUBGRAPH_FIELDS, effective_options

# The WHILE turns followed before a loop whose loop variables keep changing
# shape (and rank) counts as one whose shapes are not known.
MAX_TURNS = 8

# The builtins whose called subgraphs' shapes are worth following: only a
# model with one of them outside subgraph 0 pays for it.
_FOLLOWED_OPS = frozenset({"SELECT_V2", *ANY_RANK_OPS})


class Followed:
    """What :func:`follow_called` found.

    Attributes
    ----------
    subgraphs : dict
        The model's subgraphs by their index in the model as stored.
    selects : dict
        ``{(subgraph, operator): [(condition, x, y, output) or None, ...]}``
        for each SELECT_V2 met, in the order the runtime prepares it (None:
        its shapes are not known there).
    callers : dict
        ``{subgraph: "subgraph S operator N (NAME)"}``: the first caller met.
    deep : list
        ``(subgraph, tensor, shape, operator)``: a tensor that would have more
        than :data:`~.limits.MAX_RANK` dimensions and the operator (not
        GATHER_ND) that reads or writes it.
    unfollowed : set
        ``(subgraph, operator)`` of each SELECT_V2 in a subgraph whose shapes
        did not fit (its Prepare fails, maybe after preparing that node).
    """

    # (A plain class: the checks are imported at a first start, which must
    # not pull in dataclasses.)
    __slots__ = ("subgraphs", "selects", "callers", "deep", "unfollowed")

    def __init__(self, subgraphs: dict) -> None:
        self.subgraphs = subgraphs
        self.selects: dict[tuple[int, int], list] = {}
        self.callers: dict[int, str] = {}
        self.deep: list = []
        self.unfollowed: set[tuple[int, int]] = set()


def follow_called(info, known) -> Followed | None:
    """Follow every subgraph that control flow runs from ``info.subgraphs[0]``, on its planned shapes.

    Parameters
    ----------
    info : ModelInfo
        The model; ``info.subgraphs[0]`` is the planned subgraph.
    known : callable
        ``known(tensor index) -> tuple or None``: its planned shapes.

    Returns
    -------
    Followed or None
        None for a model with no SELECT_V2 or GATHER_ND outside subgraph 0
        (nothing there for the rules; one pass over the operators).
    """
    root = info.subgraphs[0]
    if not any(
        op.op_name in _FOLLOWED_OPS and not op.is_custom
        for sg in info.subgraphs
        if sg is not root
        for op in sg.operators
    ):
        return None
    found = Followed({sg.index: sg for sg in info.subgraphs})
    _follow_callers(found, root, known)
    return found


def _follow_callers(found: Followed, sg, shape_of) -> dict:
    """Follow every WHILE, IF and CALL_ONCE of ``sg`` into what it runs; the shapes their outputs may take.

    A caller's output takes a branch's output shape, or a loop variable's
    after any turn: the deepest one met is returned for it (None: one of
    them is not known), and an output deeper than MAX_RANK in any of them
    that ``sg`` passes to an operator other than GATHER_ND is noted (the
    first such shape).  (One of ``sg``'s own outputs
    goes on to its caller, which judges it there; subgraph 0's to the user,
    who reads any rank.)
    """
    outputs: dict = {}
    for op in sg.operators:
        if op.is_custom or op.op_name not in SUBGRAPH_FIELDS:
            continue
        options = effective_options(op)
        called = [options.get(f, 0) for f in SUBGRAPH_FIELDS[op.op_name]]
        if not all(k in found.subgraphs and k != sg.index for k in called):
            continue  # (refused by check_model's control-flow rules)
        for k in called:
            found.callers.setdefault(k, messages.operator(sg, op))
        ins = [shape_of(t) if t >= 0 else None for t in op.inputs]
        if op.op_name == "IF":
            results = [_run(found, k, ins[1:]) for k in called]
        elif op.op_name == "CALL_ONCE":
            results = [_run(found, called[0], [])]
        else:
            results = _turns(found, *called, ins)
        for n, t in enumerate(op.outputs):
            shapes = [r[n] if r is not None and n < len(r) else None for r in results]
            met = [shape for shape in shapes if shape is not None]
            outputs[t] = None if None in shapes or not met else max(met, key=len)
            # (A WHILE's turns are followed whatever its count: any of them
            # may be its last.  The first deep shape met is the one named.)
            deep = next((shape for shape in met if len(shape) > MAX_RANK), None)
            if deep is not None:
                _note_deep(found, sg, t, deep, writer=op.index)
    return outputs


def _turns(found: Followed, cond: int, body: int, loop) -> list:
    """A WHILE's turns, until its loop variables keep their shapes: the loop variables' shapes of each."""
    seen = [loop]
    for _ in range(MAX_TURNS):
        before = {key: len(v) for key, v in found.selects.items()}
        if _run(found, cond, loop) is None:
            return seen  # (Prepare fails there: an error, not a crash)
        out = _run(found, body, loop)
        if out is None:
            return seen
        seen.append(out)
        if out == loop:
            return seen  # every later turn is prepared on these shapes again (or not at all)
        ranks = [None if s is None else len(s) for s in out]
        if None not in ranks and ranks == [None if s is None else len(s) for s in loop]:
            # The same ranks from here on: a SELECT_V2 of this turn at 5
            # dimensions or fewer stays there; one deeper meets shapes not
            # followed (whether it broadcast by then is not known).
            for key, v in found.selects.items():
                if len(v) > before.get(key, 0) and any(
                    s is None or max(map(len, s)) > SELECT_V2_BROADCAST_RANK for s in v
                ):
                    v.append(None)
            return seen
        loop = out
    for v in found.selects.values():
        v.append(None)  # (ranks still changing: not followed further)
    return [*seen, [None] * len(loop)]


def _run(found: Followed, k: int, inputs) -> list | None:
    """Subgraph ``k`` prepared on these input shapes, its rules' findings noted: its output shapes (None: fails)."""
    sg = found.subgraphs[k]
    given = dict(zip(sg.inputs, inputs))
    try:
        shapes = infer_shapes(SimpleNamespace(subgraphs=[sg]), given.get)
    except ShapeError:
        # The runtime's Prepare refuses these shapes too, but only at the operator they do not fit:
        # a SELECT_V2 before it was prepared, and may have been left broadcasting (measured: an IF
        # branch's SELECT_V2 of [2, 1] and [2, 4] before an ADD of [3] that fails; the next
        # allocation, of one shape of 6 dimensions, aborted 2.17.1 in invoke).
        found.unfollowed.update((k, op.index) for op in sg.operators if op.op_name == "SELECT_V2" and not op.is_custom)
        return None

    def shape_of(t):
        if t < 0:
            return None
        if t in shapes:
            return shapes[t]
        # (Read by no operator: an input passed through, or a constant.)
        return given.get(t, tuple(sg.tensors[t].shape) if sg.tensors[t].data is not None else None)

    for op in sg.operators:
        if op.op_name == "SELECT_V2" and not op.is_custom and len(op.inputs) >= 3 and op.outputs:
            four = [shape_of(t) for t in (*op.inputs[:3], op.outputs[0])]
            c, x, y, out = four
            declared = tuple(sg.tensors[op.outputs[0]].shape) if op.outputs[0] >= 0 else None
            if out is None and x is not None and c == x == y and math.prod(x) == 1 and declared is not None:
                # Three inputs of one shape of one value (scalars, [1]): the shape rules give no
                # output for them (shapes._one_element_each: an early return in select.cc keeps
                # the output's own shape), but a Prepare on one shape never sets the broadcast
                # flag, early return or not.  Its output is x's shape when the declared one holds
                # more than one value (no early return) or is x's; a loop variable it becomes is
                # followed on it.  A declared output of one value of another shape is kept by the
                # early return (a wrong shape, not followed here): left not known.
                if math.prod(declared) != 1 or declared == x:
                    four[3] = shapes[op.outputs[0]] = x
            found.selects.setdefault((k, op.index), []).append(None if None in four else tuple(four))
    for t, shape in shapes.items():
        if shape is not None and len(shape) > MAX_RANK:
            _note_deep(found, sg, t, shape)
    passed_up = _follow_callers(found, sg, shape_of)
    return [passed_up[t] if t in passed_up else shape_of(t) for t in sg.outputs]


def _note_deep(found: Followed, sg, t: int, shape, writer: int | None = None) -> None:
    """Note tensor ``t`` of ``sg``, of more than MAX_RANK dimensions, if an operator but GATHER_ND touches it.

    ``writer``: for a caller's output, that control-flow operator (its
    kernel copies the subgraph's output, of any rank, to it).
    """
    for op in sg.operators:
        if op.index == writer or (op.op_name in ANY_RANK_OPS and not op.is_custom):
            continue
        if t in op.inputs or t in op.outputs:
            found.deep.append((sg.index, t, tuple(shape), op))
            return
