"""The subgraphs that WHILE, IF and CALL_ONCE run, followed from the shapes the runtime planned for the caller.

Those kernels prepare the subgraphs they run themselves, out of the
interpreter's sight (tensorflow/lite/kernels/while.cc, if.cc,
call_once.cc): a branch on the shapes the caller planned for the IF's
inputs, a WHILE's condition and body on the loop variables' shapes, again at
each turn whose body changed them.  :func:`follow_called` walks them with
:func:`~opaque_ops.model.shapes.infer_shapes`, so that the rules on planned
shapes reach them: SELECT_V2's broadcast on an older runtime
(:mod:`.version_rules`) and tensors deeper than :data:`~.limits.MAX_RANK`
(:mod:`.allocated`).  Given an interpreter's memory of its called SELECT and
SELECT_V2 output shapes, it also follows the output shape that their
Prepare keeps (:func:`note_called_kept`).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

from ...errors import ShapeError
from ..select_rows import SELECT_V2_BROADCAST_RANK
from ..shapes import infer_shapes
from . import messages
from .limits import MAX_RANK
from .options import called_subgraphs

# The WHILE turns followed before a loop whose loop variables keep changing
# shape (and rank) counts as one whose shapes are not known.
MAX_TURNS = 8

# The builtins whose called subgraphs' shapes are worth following: only a
# model with one of them outside subgraph 0 pays for it.
_FOLLOWED_OPS = frozenset({"SELECT_V2", "GATHER_ND"})
# The builtins that may read and write a tensor deeper than MAX_RANK in a
# subgraph that control flow runs: GATHER_ND only, as measured there
# (allocated._check_called_sizes).  The other builtins of
# limits.ANY_RANK_OPS were measured in subgraph 0 only: a deep tensor one of
# them reads or writes there is noted as before.
_CALLED_ANY_RANK_OPS = frozenset({"GATHER_ND"})
# The builtins whose output shape Prepare may keep from before (note_called_kept).
_KEPT_OPS = frozenset({"SELECT", "SELECT_V2"})


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
    held : dict or None
        ``{(subgraph, operator): shape or None}``: the output shape each
        called SELECT and SELECT_V2 holds after its last Prepare followed
        (None: not known; absent: the declared one, not prepared yet).  None
        when not followed (:func:`follow_called` without ``held``).
    kept : list
        ``(subgraph, operator, name, condition, x, y, right, kept)``: a
        Prepare that kept an output shape of one value that is not the
        op's right one.
    """

    # (A plain class: the checks are imported at a first start, which must
    # not pull in dataclasses.)
    __slots__ = ("subgraphs", "selects", "callers", "deep", "unfollowed", "held", "kept")

    def __init__(self, subgraphs: dict, held: dict | None = None) -> None:
        self.subgraphs = subgraphs
        self.selects: dict[tuple[int, int], list] = {}
        self.callers: dict[int, str] = {}
        self.deep: list = []
        self.unfollowed: set[tuple[int, int]] = set()
        self.held = held
        self.kept: list = []


def follow_called(info, known, held: dict | None = None) -> Followed | None:
    """Follow every subgraph that control flow runs from ``info.subgraphs[0]``, on its planned shapes.

    Parameters
    ----------
    info : ModelInfo
        The model; ``info.subgraphs[0]`` is the planned subgraph.
    known : callable
        ``known(tensor index) -> tuple or None``: its planned shapes.
    held : dict, optional
        An interpreter's :attr:`Followed.held` (updated here): the called
        SELECT and SELECT_V2 outputs are then followed through their
        Prepare's early return, and each WHILE through a second invoke
        when its loop variables change shape.

    Returns
    -------
    Followed or None
        None for a model with no SELECT_V2 or GATHER_ND outside subgraph 0
        (with ``held``: no SELECT or SELECT_V2 there), nothing there for the
        rules (one pass over the operators).
    """
    root = info.subgraphs[0]
    wanted = _FOLLOWED_OPS if held is None else _KEPT_OPS
    if not any(
        op.op_name in wanted and not op.is_custom for sg in info.subgraphs if sg is not root for op in sg.operators
    ):
        return None
    found = Followed({sg.index: sg for sg in info.subgraphs}, held)
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
        called = called_subgraphs(op)  # (every index: one out of range skips it)
        if not called:
            continue
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
            if found.held is not None and any(r != results[0] for r in results):
                # A WHILE whose loop variables change shape prepares its body again at each such
                # turn (while.cc), and the next invoke starts again from the caller's shapes with
                # what the last turn left in the body's outputs: followed once more from there.
                results += _turns(found, *called, ins)
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
        if found.held is not None:
            shapes = _follow_kept(found, sg, given, shapes)
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
                # early return (a wrong shape, not followed here): left not known, as the node's
                # past decides it; but in a subgraph without inputs (CALL_ONCE's init subgraph,
                # call_once.cc) every Prepare meets the same shapes, so the early return keeps the
                # declared shape each time (measured: a SELECT_V2 of three constants [1] there with
                # a scalar output runs on 2.17.1, 2.23.0 and ai-edge-litert).
                if math.prod(declared) != 1 or declared == x:
                    four[3] = shapes[op.outputs[0]] = x
                elif not sg.inputs:
                    four[3] = shapes[op.outputs[0]] = declared
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
        if op.index == writer or (op.op_name in _CALLED_ANY_RANK_OPS and not op.is_custom):
            continue
        if t in op.inputs or t in op.outputs:
            found.deep.append((sg.index, t, tuple(shape), op))
            return


def _follow_kept(found: Followed, sg, given: dict, shapes: dict) -> dict:
    """``sg``'s shapes with each SELECT and SELECT_V2 output as its Prepare leaves it, noted in ``found``.

    tensorflow/lite/kernels/select.cc, SelectPrepare: when the condition,
    x, y and the output (as the node's previous Prepare left it; the
    model's declared shape before the first) all hold one value, it returns
    before resizing the output (see
    :func:`~opaque_ops.model.select_rows._kept_output`).  The shape rules
    give no output then (it is the node's past): it is worked out here from
    ``found.held``, the subgraph's shapes inferred again from it, and a
    kept shape that is not the op's right one noted in ``found.kept``.
    """
    done: set = set()
    while True:
        for op in sg.operators:
            if (
                op.index in done
                or op.is_custom
                or op.op_name not in _KEPT_OPS
                or len(op.inputs) < 3
                or min(op.inputs[:3]) < 0
                or not op.outputs
                or op.outputs[0] < 0
            ):
                continue
            done.add(op.index)
            key, out = (sg.index, op.index), op.outputs[0]
            c, x, y = (shapes.get(t) for t in op.inputs[:3])
            if c is None or x is None or y is None or not all(math.prod(s) == 1 for s in (c, x, y)):
                found.held[key] = shapes.get(out)  # (None: not known, so never refused)
                continue
            before = found.held[key] if key in found.held else tuple(sg.tensors[out].shape)
            v2 = op.op_name == "SELECT_V2"
            # SELECT_V2: the inputs' broadcast, all ones at the largest rank; SELECT: x's shape.
            right = (1,) * max(len(c), len(x), len(y)) if v2 else x
            if before is None or math.prod(before) == 1:
                now = before  # the early return (or not known)
                declared = [tuple(sg.tensors[t].shape) for t in (*op.inputs[:3], out)]
                if now is not None and now != right and declared != [c, x, y, now]:
                    found.kept.append((sg.index, op.index, op.op_name, c, x, y, right, now))
            elif v2 or c == x == y or (x == y and (not c or c == x[:1])):
                now = right
            else:
                raise ShapeError(f"{messages.operator(sg, op)} does not take these shapes")  # (Prepare fails)
            found.held[key] = now
            if now is not None:
                given[out] = now
                break  # (inferred again from this output on)
        else:
            return shapes
        # (The shapes inferred so far stand for the runtime's plan there: given the subgraph's inputs
        # alone, infer_shapes would take the first output it infers as one the runtime did not plan.)
        shapes = infer_shapes(SimpleNamespace(subgraphs=[sg]), {**shapes, **given}.get)


def note_called_kept(info, known, held: dict, check: bool = True) -> ShapeError | None:
    """After an allocation: the called SELECT and SELECT_V2 output shapes remembered; the error for a kept one.

    The called-subgraph half of
    :func:`~opaque_ops.model.select_rows.note_and_check`'s kept-output
    rule, on every runtime.  Those nodes are prepared by WHILE, IF and
    CALL_ONCE (tensorflow/lite/kernels/while.cc, if.cc, call_once.cc), at
    the caller's allocation and, for a WHILE body whose loop variables
    change shape, again at each such turn of every invoke, and keep their
    output tensors as long as the interpreter: an output of one value kept
    by select.cc's early return (measured on 2.17.1, 2.23.0 and
    ai-edge-litert: an IF branch's SELECT_V2 allocated with condition
    [1, 1], x [1] and y [1], then all three [1, 1, 1], gives the IF output
    [1, 1]) reaches the caller's output with the wrong shape.

    Parameters
    ----------
    info : ModelInfo
        The model; its subgraph 0 is the allocated one.
    known : callable
        ``known(tensor index) -> tuple or None``: subgraph 0's planned shapes.
    held : dict
        :attr:`Followed.held`, this interpreter's memory; updated here.
    check : bool
        False after a failed allocation: only remember.

    Returns
    -------
    ShapeError or None
        For the first Prepare followed that keeps an output shape that is
        not the op's right one (the model's own declared shapes excepted,
        as in subgraph 0).
    """
    found = follow_called(info, known, held)
    if found is None or not check or not found.kept:
        return None
    k, index, name, c, x, y, right, kept = found.kept[0]
    where = f"{messages.operator_at(k, index, name)}, in a subgraph that {found.callers.get(k, '')} runs"
    if name == "SELECT_V2":
        wants, fix = f"broadcast to {list(right)}", f"broadcast to {list(kept)}"
    else:
        wants, fix = f"call for an output of x's shape {list(right)}", f"are all {list(kept)}"
    return ShapeError(
        f"{where}: its condition {list(c)}, x {list(x)} and y {list(y)} {wants}, but TFLite's {name} keeps "
        f"the output shape {list(kept)} it already had (its kernel does not resize an output of one value "
        "when each input holds one value), so that output and what the subgraph passes on from it would "
        "have the wrong shape. Give the condition, x and y that reach it (from the caller's inputs, and from "
        f"a WHILE's loop variables at each turn) shapes that {fix}, or that are not all of one value (after a "
        "Prepare whose output there holds more than one value, inputs of one value each get their right shape "
        "again)"
    )
