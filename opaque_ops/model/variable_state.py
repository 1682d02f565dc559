"""Which resource variables a subgraph reads before anything may have assigned them.

tensorflow/lite/kernels/read_variable.cc looks its variable up in the
interpreter's resource map and fails the invoke when nothing has assigned it
yet (``variable != nullptr``).  TFLite 2.23's XNNPACK delegate, which runs
subgraph 0's variable operators itself, has no such check: measured on
2.23.0 and ai-edge-litert with XNNPACK, the read returns uninitialised
memory, with no error (2.17.1, with XNNPACK or without, and every runtime
without XNNPACK fail the invoke at the read).  Whether a variable was
assigned is only known while the interpreter runs: a CALL_ONCE init
subgraph assigns it at the first invoke, before subgraph 0's operators; an
earlier invoke of the same subgraph assigns it after the read; a signature
runner of another subgraph (an "init" signature) may assign it first.  So
the model's part is worked out here, once (and kept in the model's record:
:func:`~opaque_ops.model.cache.variable_reads`), and the interpreter keeps
the run-time part (:mod:`opaque_ops.interpreter.variable_state`).

Only what is certain is reported as read first: a READ_VARIABLE of the
invoked subgraph itself, through a VAR_HANDLE of that subgraph, that no
earlier ASSIGN_VARIABLE of the same (container, shared_name) precedes in
operator order, nor any control-flow operator that might run one.  An
assignment through a handle that is not a VAR_HANDLE of its own subgraph
(nor, in an IF branch, a handle the IF passes on from a VAR_HANDLE), or a
StableHLO control-flow operator, counts as assigning every variable.

An IF runs one branch (tensorflow/lite/kernels/if.cc: its condition, one
bool, picks then or else): measured on 2.23.0 with XNNPACK (and
ai-edge-litert with XNNPACK), a read after ``IF(cond) {assign v} else {}``
is garbage when cond is false and v was never assigned, and reads the
branch's value when it is true (2.17.1 and the runtimes without XNNPACK fail
the first case at the read).  So an IF of the invoked subgraph whose
condition is one of that subgraph's own inputs is *decided*: its branches'
assignments are kept apart (each one what that branch certainly assigns,
when that is all it may assign), and a read after it that only its branches
may assign is reported with the IFs it waits on; at run time the condition
is read before the invoke, and the read is refused only when the branch that
runs assigns nothing it needs.  A condition the model computes cannot be
known before the invoke: such an IF (and WHILE, whose body may run zero
times, and an IF nested in a branch) still counts as assigning everything
it may, so a read after it is never refused, even when the branch that runs
assigns nothing (2.23 with XNNPACK then returns garbage; no check here can
see it in advance).
"""

from __future__ import annotations

# StableHLO control flow runs subgraphs this analysis does not follow: after
# one, any variable may have been assigned.
_UNFOLLOWED_CALLERS = frozenset({"STABLEHLO_WHILE", "STABLEHLO_CASE", "STABLEHLO_COMPOSITE"})


def reads_before_assignment(info) -> tuple:
    """``((subgraph, reads, assigns, any, ifs, waiting), ...)`` per invocable subgraph, or ``()`` when no read comes first.

    Parameters
    ----------
    info : ModelInfo
        The model.

    Returns
    -------
    tuple
        One entry per subgraph a caller can invoke (subgraph 0 and each
        signature's): ``reads`` are ``(container, shared_name, operator)``
        of its READ_VARIABLEs that nothing in it assigns first (see the
        module's notes), ``assigns`` the ``(container, shared_name)`` pairs
        its invoke may assign apart from its decided IFs' branches (itself
        and the subgraphs its other control flow runs), ``any`` whether it
        may assign a variable not known by name (then every variable counts
        as assigned after it runs).  ``ifs`` are its decided IFs, ``(cond,
        then, else)``: the condition (a tensor index, an input of the
        subgraph) and the pairs each branch assigns; ``waiting`` the reads
        that come first unless a decided IF's branch assigns them,
        ``(container, shared_name, operator, (position in ifs, ...))``.  An
        empty tuple when no entry has a read of either kind, which is every
        model the converters write (a CALL_ONCE init assigns first).
    """
    # (model.cache asks only for a model with a READ_VARIABLE: one without has no read to find.)
    from .checks.graph import variable_names
    from .checks.options import SUBGRAPH_FIELDS, called_subgraphs

    count = len(info.subgraphs)
    memo: dict[tuple, tuple[frozenset, bool, frozenset]] = {}

    def effect(op, names: dict, seen: frozenset) -> tuple[frozenset, bool, frozenset]:
        """What builtin ``op`` of a subgraph with handles ``names`` may assign, whether any other, what it must."""
        if op.op_name == "ASSIGN_VARIABLE" and op.inputs:
            key = names.get(op.inputs[0])
            return (frozenset(), True, frozenset()) if key is None else (frozenset({key}), False, frozenset({key}))
        if op.op_name in SUBGRAPH_FIELDS:
            # An IF's branch gets the IF's inputs after the condition: a
            # handle passed on is the caller's variable.  (Not WHILE's: its
            # body's outputs become the next iteration's inputs.)
            passed = tuple(names.get(t) for t in op.inputs[1:]) if op.op_name == "IF" else ()
            runs = [summary(j, passed, seen) if 0 <= j < count else None for j in called_subgraphs(op)]
            found: set = set()
            anything = False
            for r in runs:
                if r is not None:
                    found |= r[0]
                    anything |= r[1]
            musts = [r[2] if r is not None else frozenset() for r in runs]
            # What certainly ran once the operator did: IF runs one of its
            # branches (both must assign it); WHILE runs its cond at least
            # once and its body maybe never (tensorflow/lite/kernels/while.cc);
            # CALL_ONCE's init ran at this invoke or an earlier one, and a
            # variable stays assigned for the interpreter's life.
            if op.op_name == "IF":
                must = musts[0] & musts[1] if len(musts) == 2 else frozenset()
            else:
                must = musts[0] if musts else frozenset()
            return frozenset(found), anything, must
        return frozenset(), op.op_name in _UNFOLLOWED_CALLERS, frozenset()

    def summary(k: int, passed: tuple = (), seen: frozenset = frozenset()) -> tuple[frozenset, bool, frozenset]:
        """An invoke of subgraph ``k`` given handles ``passed``: (may assign, whether any other too, must assign)."""
        if (k, passed) in memo:
            return memo[k, passed]
        if k in seen:  # (a cycle, refused by check_call_graph: nothing more to add)
            return frozenset(), False, frozenset()
        sg = info.subgraphs[k]
        names = {**{t: key for t, key in zip(sg.inputs, passed) if key is not None}, **variable_names(sg)}
        found: set = set()
        must: set = set()
        anything = False
        for op in sg.operators:
            if not op.is_custom:
                more, other, certain = effect(op, names, seen | {k})
                found |= more
                must |= certain
                anything |= other
        memo[k, passed] = (frozenset(found), anything, frozenset(must))
        return memo[k, passed]

    def decided(op, sg, names: dict) -> tuple | None:
        """``(cond, then, else)`` of an IF whose condition is an input of ``sg`` and whose branches are exact."""
        if op.op_name != "IF" or not op.inputs or op.inputs[0] not in sg.inputs:
            return None
        cond = op.inputs[0]
        if not 0 <= cond < len(sg.tensors) or sg.tensors[cond].type_name != "BOOL":
            return None  # (if.cc takes one bool: anything else is refused before any invoke)
        passed = tuple(names.get(t) for t in op.inputs[1:])
        out = []
        for j in called_subgraphs(op):  # (each field's, in range or not: an IF's then and else)
            if not 0 <= j < count:
                return None
            may, other, must = summary(j, passed)
            if other or may != must:
                return None  # (a branch that may assign what it does not certainly assign: not decided)
            out.append(must)
        return (cond, *out) if len(out) == 2 else None

    entries = []
    for k in sorted({0} | {s.subgraph_index for s in info.signatures}):
        if not 0 <= k < count:
            continue
        sg = info.subgraphs[k]
        names = variable_names(sg)
        assigned: set = set()
        anything = False
        reads = []
        ifs: list = []
        waiting = []
        for op in sg.operators:
            if op.is_custom:
                continue
            if op.op_name == "READ_VARIABLE" and op.inputs:
                key = names.get(op.inputs[0])
                if key is not None and key not in assigned and not anything:
                    after = tuple(p for p, (_c, then, other) in enumerate(ifs) if key in then or key in other)
                    if after:
                        waiting.append((*key, op.index, after))
                    else:
                        reads.append((*key, op.index))
                continue
            found = decided(op, sg, names)
            if found is not None:
                ifs.append(found)
                assigned.update(found[1] & found[2])  # (what both branches assign: certain)
                continue
            more, other, _must = effect(op, names, frozenset())
            assigned.update(more)
            anything |= other
        entries.append(
            (
                k,
                tuple(reads),
                tuple(sorted(assigned)),
                anything,
                tuple((cond, tuple(sorted(then)), tuple(sorted(other))) for cond, then, other in ifs),
                tuple(waiting),
            )
        )
    if not any(e[1] or e[5] for e in entries):
        return ()
    return tuple(entries)
