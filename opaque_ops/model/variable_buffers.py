"""What an invoke stores in each resource variable, in run order, for TFLite 2.23's XNNPACK delegate.

TFLite's own ASSIGN_VARIABLE gives the variable the shape and size of each
value it stores (tensorflow/lite/kernels/assign_variable.cc, and
tensorflow/lite/experimental/resource/resource_variable.cc, AssignFrom).
TFLite 2.23's XNNPACK delegate does not: it gives a variable one buffer, and
one shape, those of the first value stored in it, and keeps them for the
interpreter's life, across allocations and subgraphs.  Measured in child
processes on 2.23.0 with XNNPACK (glibc's checking allocator preloaded):

- x stored in a variable at [2, 3], then x resized to [2, 6], allocated and
  stored again: the heap is corrupted ("free(): invalid pointer").
- x stored at [2, 6], then at [2, 3], [3, 4] or [1, 12]: a READ_VARIABLE
  declared with rank 0 (it takes the variable's shape) gives [2, 6] each
  time, x's values first and then what the buffer held: wrong data, with no
  error.
- a CALL_ONCE init that stores a [1, 6] constant, then an IF's branch that
  stores x [2, 6] (or a [2, 6] constant) in the same variable: the heap
  corruption, though subgraph 0 itself never touches that variable.
- an IF whose then-branch stores a [1, 6] constant and whose else-branch
  stores x [2, 6]: cond true first and then false corrupts the heap; cond
  false first runs cleanly.
- two values of two sizes stored in one variable by the invoked subgraph,
  one after the other: x [2, 6] then a [1, 6] constant, a [2, 6] constant
  then a [1, 6] one, corrupt the heap at the first invoke, also with an
  ASSIGN_VARIABLE of another variable between them; with a READ_VARIABLE
  (of any variable) or an IF between them they run cleanly, and so do two
  such stores in an IF's branch, and values of one size and two shapes
  ([2, 6] and [3, 4]).  (A smaller value first and a larger one after it
  corrupt the heap with a read between them too: the first value's buffer.)

2.17.1 (with XNNPACK or without) and every runtime without XNNPACK run all
of these with numpy's values.  The allocated-shape rules
(:mod:`~opaque_ops.model.checks.allocated`) compare the values one plan
stores; which value came first is known only while the interpreter runs,
across allocations and subgraphs.  So the model's part is here: the values
an invoke of one subgraph stores, in the order they may run, with their
shapes on the current allocation (:func:`store_plan`); and the rule on them,
given what earlier invokes may have stored first (:func:`check_stores`).
The interpreter keeps the rest (:mod:`opaque_ops.interpreter.variable_buffers`).
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

from ..errors import ModelError, ShapeError
from .checks import messages
from .checks.graph import _named, running_subgraphs, variable_names
from .checks.limits import elements
from .checks.options import called_subgraphs
from .shapes import infer_shapes

# The operators after which a store of the invoked subgraph is not compared
# with the ones before it for the two-sizes rule (measured as separating
# them: check_stores); a custom operator counts too.
_SEPARATORS = frozenset({"READ_VARIABLE", "IF", "WHILE", "CALL_ONCE"})
# Decided IFs beyond this many in one subgraph are taken as undecided (the
# allocation looks at every combination of their conditions).
MAX_DECIDED = 6


class Store:
    """One ASSIGN_VARIABLE an invoke may run.

    Attributes
    ----------
    key : tuple
        The variable: its ``(container, shared_name)``, or ``(subgraph,
        handle tensor)`` for a handle no VAR_HANDLE names.
    shape : tuple
        The value's shape on this allocation.
    size : int
        Its bytes.
    certain : bool
        Whether it runs at every invoke that gets that far (given its
        ``cond``): an operator of the invoked subgraph itself, a CALL_ONCE's
        init, a WHILE's cond.  A branch of an IF not decided, and a WHILE's
        body, may not run.
    cond : tuple or None
        ``(condition tensor, branch)`` for a store in a branch of a decided
        IF: an IF of the invoked subgraph whose condition is one of its bool
        inputs, read before the invoke (``branch``: True for then).
    where : str
        The operator and the value, for messages.
    sg, op : SubgraphInfo, OpInfo
        Where the ASSIGN_VARIABLE is, in the model as stored.
    segment : int or None
        For a store of the invoked subgraph itself: which stretch of its
        operators it is in, between two READ_VARIABLEs, control-flow or
        custom operators (see :func:`check_stores`); None for a store of a
        subgraph that control flow runs.
    """

    __slots__ = ("key", "shape", "size", "certain", "cond", "where", "segment", "sg", "op")

    def __init__(
        self, key: tuple, shape: tuple, size: int, certain: bool, cond, where: str, segment=None, sg=None, op=None
    ) -> None:
        self.key = key
        self.shape = shape
        self.size = size
        self.certain = certain
        self.cond = cond
        self.where = where
        self.segment = segment
        self.sg = sg
        self.op = op

    def __repr__(self) -> str:  # (for test failures)
        return f"Store({self.key!r}, {self.shape}, certain={self.certain}, cond={self.cond})"


class Plan:
    """:func:`store_plan`'s answer: the stores in run order, and the variables read with rank 0.

    Attributes
    ----------
    stores : tuple of Store
    dynamic : frozenset
        The variables some READ_VARIABLE declared with rank 0 reads (it
        takes the variable's shape: there a store of another shape than the
        first is read back in the first one's).
    conds : tuple of int
        The condition tensors of the decided IFs whose branches store.
    """

    __slots__ = ("stores", "dynamic", "conds")

    def __init__(self, stores: tuple, dynamic: frozenset) -> None:
        self.stores = stores
        self.dynamic = dynamic
        self.conds = tuple(sorted({s.cond[0] for s in stores if s.cond is not None}))

    def resolved(self, values: dict) -> tuple:
        """The stores when the decided IFs' conditions hold ``values`` (``{tensor: bool or None}``; None: not known)."""
        out = []
        for s in self.stores:
            if s.cond is None:
                out.append(s)
                continue
            t, branch = s.cond
            value = values.get(t)
            if value is None:
                out.append(Store(s.key, s.shape, s.size, False, None, s.where, s.segment, s.sg, s.op))
            elif value == branch:
                out.append(s)
        return tuple(out)


def store_plan(info, subgraph: int, shape_of) -> Plan:
    """Every ASSIGN_VARIABLE an invoke of ``subgraph`` may run, in run order, with its value's shape.

    Parameters
    ----------
    info : ModelInfo
        The model, its subgraphs at their stored indices.
    subgraph : int
        The invoked subgraph (0, or a signature's).
    shape_of : callable
        ``shape_of(tensor index)``: the shape the current allocation gives
        that subgraph's tensor, or None.

    Returns
    -------
    Plan
        A value whose shape is not known here (a dynamic tensor; a WHILE
        whose loop variables change shape) is left out, and not compared.
    """
    count = len(info.subgraphs)
    stores: list = []
    dynamic: set = set()
    segment = 0

    def walk(k: int, names: dict, known, certain: bool, cond, seen: frozenset) -> None:
        nonlocal segment
        sg = info.subgraphs[k]
        decided = 0
        for op in sg.operators:
            if k == subgraph and (op.is_custom or op.op_name in _SEPARATORS):
                segment += 1
            if op.is_custom:
                continue
            if op.op_name == "READ_VARIABLE" and op.inputs and op.outputs and min(op.outputs) >= 0:
                if not sg.tensors[op.outputs[0]].shape:
                    dynamic.add(names.get(op.inputs[0]) or (k, op.inputs[0]))
                continue
            if op.op_name == "ASSIGN_VARIABLE" and len(op.inputs) == 2 and min(op.inputs) >= 0:
                shape = known(op.inputs[1])
                value = sg.tensors[op.inputs[1]]
                if shape is not None:
                    shape = tuple(shape)
                    key = names.get(op.inputs[0]) or (k, op.inputs[0])
                    size = elements(shape) * (value.dtype.itemsize if value.dtype is not None else 1)
                    where = f"{messages.operator(sg, op)} storing {value.name!r} of shape {list(shape)} ({size} bytes)"
                    stores.append(
                        Store(key, shape, size, certain, cond, where, segment if k == subgraph else None, sg, op)
                    )
                continue
            called = called_subgraphs(op, count)
            if not called or any(j in seen for j in called):
                continue  # (a cycle is refused by check_call_graph before any of this runs)
            if op.op_name == "IF":
                # The branches get the IF's inputs after the condition, handles (variables) included.
                given = [known(t) if t >= 0 else None for t in op.inputs[1:]]
                passed = [names.get(t) for t in op.inputs[1:]]
                c = op.inputs[0] if op.inputs else -1
                # Decided: the invoked subgraph's own IF on one of its bool inputs (if.cc reads its one
                # value), whose value the interpreter reads before the invoke.
                sure = (
                    k == subgraph
                    and c in sg.inputs
                    and sg.tensors[c].type_name == "BOOL"
                    and decided < MAX_DECIDED
                    and len(called) == 2
                )
                decided += sure
                for j, branch in zip(called, (True, False)):
                    enter(j, given, passed, certain and sure, (c, branch) if sure else cond, seen)
            elif op.op_name == "WHILE":
                given = [known(t) if t >= 0 else None for t in op.inputs]
                loop_cond, body = (called + called)[:2]
                # The cond runs at least once; the body perhaps never (tensorflow/lite/kernels/while.cc).
                if enter(loop_cond, given, [None] * len(given), certain, cond, seen) is not None:
                    before = len(stores)
                    out = enter(body, given, [None] * len(given), False, cond, seen)
                    if out is not None and list(out) != list(given):
                        # The loop variables change shape: later turns store other sizes, not followed.
                        del stores[before:]
            else:  # CALL_ONCE: its init runs once, at the interpreter's first invoke that reaches it
                enter(called[0], [], [], certain, cond, seen)

    def enter(j: int, given: list, passed: list, certain: bool, cond, seen: frozenset):
        """Walk subgraph ``j`` on ``given`` input shapes (handles ``passed``); its output shapes, None if it fails."""
        sg = info.subgraphs[j]
        inputs = dict(zip(sg.inputs, given))
        try:
            shapes = infer_shapes(SimpleNamespace(subgraphs=[sg]), inputs.get)
        except ShapeError:
            return None  # (its Prepare fails: nothing it stores runs)

        def known(t: int):
            if t in shapes:
                return shapes[t]
            if t in inputs:
                return inputs[t]
            tensor = sg.tensors[t]
            return tuple(tensor.shape) if tensor.data is not None else None

        names = {**{t: key for t, key in zip(sg.inputs, passed) if key is not None}, **variable_names(sg)}
        walk(j, names, known, certain, cond, seen | {j})
        return [known(t) if t >= 0 else None for t in sg.outputs]

    root = info.subgraphs[subgraph]
    inferred: list = []

    def known_root(t: int):
        """The allocation's shape; for a tensor it does not give (another subgraph's runner sees only its
        signature's tensors; a dynamic tensor), the one the shape rules give, worked out when first asked."""
        if t < 0:
            return None
        shape = shape_of(t)
        if shape is None:
            if not inferred:
                try:
                    inferred.append(infer_shapes(SimpleNamespace(subgraphs=[root]), shape_of))
                except ShapeError:
                    inferred.append({})
            shape = inferred[0].get(t)
        return shape

    walk(subgraph, variable_names(root), known_root, True, None, frozenset({subgraph}))
    # A read with rank 0 in another subgraph that runs (a signature's, or one control flow calls from
    # there) reads the same variable by name.
    for k in running_subgraphs(info):
        sg = info.subgraphs[k]
        names = variable_names(sg)
        for op in sg.operators:
            if op.op_name == "READ_VARIABLE" and not op.is_custom and op.inputs and op.outputs:
                key = names.get(op.inputs[0])
                if key is not None and min(op.outputs) >= 0 and not sg.tensors[op.outputs[0]].shape:
                    dynamic.add(key)
    return Plan(tuple(stores), frozenset(dynamic))


def check_stores(stores: tuple, dynamic: frozenset, capacity: dict, version: str) -> dict:
    """Refuse a store past its variable's buffer, or read back in another shape; the buffers after this invoke.

    Parameters
    ----------
    stores : tuple of Store
        The stores of one invoke (:meth:`Plan.resolved`).
    dynamic : frozenset
        :attr:`Plan.dynamic`.
    capacity : dict
        ``{key: (size, shape, where, settled)}``: for each variable an earlier
        invoke may have stored in, the least size its buffer may have (the
        smallest value that may have been stored first), the first value's
        shape (None: it may be one of several), where that value comes from,
        and whether a store certainly ran (then no later one is the first).
    version : str
        The runtime's ``TfLiteVersion()``, for the message.

    Returns
    -------
    dict
        The entries of ``capacity`` this invoke changes (not settled: the
        caller settles those :func:`settles` names once the invoke succeeded).

    Raises
    ------
    ModelError
        A store that may be larger than its variable's buffer, or of another
        shape than the first where a read takes the variable's shape.

    Notes
    -----
    For a variable no store has certainly reached, any of this invoke's
    stores up to its first certain one may be the first (a branch runs or
    not), so the buffer may be as small as the smallest of them; no store of
    the invoke may be larger.  That refuses an IF not decided whose branches
    store values of two sizes, even when the larger one would run first.
    """
    changed: dict = {}
    by_key: dict = {}
    for s in stores:
        by_key.setdefault(s.key, []).append(s)
    for key, found in by_key.items():
        named = _named(key) if isinstance(key[0], str) else ""
        in_segment: dict = {}
        for s in found:
            if s.segment is None:
                continue
            other = in_segment.setdefault(s.segment, s)
            if other.size != s.size:
                raise ModelError(
                    f"{other.where} and {s.where} store values of two sizes in one variable{named}, with no "
                    f"READ_VARIABLE or control-flow operator between them: TFLite {version}'s XNNPACK delegate "
                    "then corrupts the heap. Turn XNNPACK off (use_xnnpack=False), or store values of one size "
                    "in the variable"
                )
        size, shape, where, settled = capacity.get(key, (None, None, None, False))
        if not settled:
            first = []
            for s in found:
                first.append(s)
                if s.certain:
                    break
            shapes = {s.shape for s in first} | ({shape} if size is not None else set())
            small = min(first, key=lambda s: s.size)
            if size is None or small.size < size:
                size, where = small.size, small.where
            shape = next(iter(shapes)) if len(shapes) == 1 else None
            changed[key] = (size, shape, where, False)
        for s in found:
            if s.size > size:
                raise ModelError(
                    f"{s.where} would write past the buffer of its variable{named}: TFLite {version}'s XNNPACK "
                    "delegate gives a variable one buffer, of the size of the first value stored in it, for the "
                    f"interpreter's life, and here that first value may be {where}. Turn XNNPACK off "
                    "(use_xnnpack=False), or keep every value stored in the variable within the size of the "
                    "first (resize the inputs back, or store the largest value first)"
                )
            if key in dynamic and shape is None:
                raise ModelError(
                    f"{s.where} may be the first value of its variable{named} or come after one of another "
                    "shape (an IF's branches, or a WHILE's body, store values of other shapes, and which runs "
                    "first is known only while the invoke runs), and a READ_VARIABLE declared with rank 0 "
                    f"reads that variable: TFLite {version}'s XNNPACK delegate keeps the first value's shape for "
                    "the interpreter's life, so the read may return another shape than the value's, with values "
                    "that are not the variable's. Turn XNNPACK off (use_xnnpack=False), or store values of one "
                    "shape in the variable"
                )
            if key in dynamic and s.shape != shape:
                raise ModelError(
                    f"{s.where} stores another shape than the first value of its variable{named} (which may be "
                    f"{where}), and a READ_VARIABLE declared with rank 0 reads that variable: TFLite {version}'s "
                    "XNNPACK delegate keeps the first value's shape for the interpreter's life, so the read would "
                    f"return the first value's shape {list(shape)}, with values that are not the variable's. Turn "
                    "XNNPACK off (use_xnnpack=False), or keep the values stored in the variable at one shape"
                )
    return changed


def combinations(plan: Plan):
    """Each combination of the decided IFs' conditions: ``{tensor: bool}`` dicts (one empty one without any)."""
    for values in itertools.product((True, False), repeat=len(plan.conds)):
        yield dict(zip(plan.conds, values))


def settles(stores: tuple) -> set:
    """The variables a successful invoke of ``stores`` (:meth:`Plan.resolved`) certainly stored in."""
    return {s.key for s in stores if s.certain}
