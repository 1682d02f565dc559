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
operator order, nor any control-flow operator that might run one (a
subgraph that WHILE, IF or CALL_ONCE runs counts as assigning every name it
assigns anywhere; an assignment through a handle that is not a VAR_HANDLE of
its own subgraph, or a StableHLO control-flow operator, counts as assigning
every variable).
"""

from __future__ import annotations

# StableHLO control flow runs subgraphs this analysis does not follow: after
# one, any variable may have been assigned.
_UNFOLLOWED_CALLERS = frozenset({"STABLEHLO_WHILE", "STABLEHLO_CASE", "STABLEHLO_COMPOSITE"})


def reads_before_assignment(info) -> tuple:
    """``((subgraph, reads, assigns, any), ...)`` per invocable subgraph, or ``()`` when no read comes first.

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
        its invoke may assign (itself and the subgraphs its control flow
        runs), ``any`` whether it may assign a variable not known by name
        (then every variable counts as assigned after it runs).  An empty
        tuple when no entry has a read that comes first, which is every
        model the converters write (a CALL_ONCE init assigns first).
    """
    # (model.cache asks only for a model with a READ_VARIABLE: one without has no read to find.)
    from .checks.graph import variable_names
    from .checks.options import SUBGRAPH_FIELDS, effective_options

    count = len(info.subgraphs)
    memo: dict[int, tuple[frozenset, bool]] = {}

    def effect(op, names: dict, seen: frozenset) -> tuple:
        """What builtin ``op`` of a subgraph with VAR_HANDLEs ``names`` may assign: (names, whether any other too)."""
        if op.op_name == "ASSIGN_VARIABLE" and op.inputs:
            key = names.get(op.inputs[0])
            return ((), True) if key is None else ((key,), False)  # (a handle from a caller: any variable)
        if op.op_name in SUBGRAPH_FIELDS:
            found: set = set()
            anything = False
            opts = effective_options(op)
            for j in (k for f in SUBGRAPH_FIELDS[op.op_name] if 0 <= (k := opts.get(f, 0)) < count):
                more, other = may_assign(j, seen)
                found |= more
                anything |= other
            return found, anything
        return (), op.op_name in _UNFOLLOWED_CALLERS

    def may_assign(k: int, seen: frozenset = frozenset()) -> tuple[frozenset, bool]:
        """What an invoke of subgraph ``k`` may assign: (names, whether any other variable too)."""
        if k in memo:
            return memo[k]
        if k in seen:  # (a cycle, refused by check_call_graph: nothing more to add)
            return frozenset(), False
        sg = info.subgraphs[k]
        names = variable_names(sg)
        found: set = set()
        anything = False
        for op in sg.operators:
            if not op.is_custom:
                more, other = effect(op, names, seen | {k})
                found.update(more)
                anything |= other
        memo[k] = (frozenset(found), anything)
        return memo[k]

    entries = []
    for k in sorted({0} | {s.subgraph_index for s in info.signatures}):
        if not 0 <= k < count:
            continue
        sg = info.subgraphs[k]
        names = variable_names(sg)
        assigned: set = set()
        anything = False
        reads = []
        for op in sg.operators:
            if anything:
                break  # (every later read may see a value: none is certain)
            if op.is_custom:
                continue
            if op.op_name == "READ_VARIABLE" and op.inputs:
                key = names.get(op.inputs[0])
                if key is not None and key not in assigned:
                    reads.append((*key, op.index))
            else:
                more, other = effect(op, names, frozenset())
                assigned.update(more)
                anything |= other
        names_assigned, other = may_assign(k)
        entries.append((k, tuple(reads), tuple(sorted(names_assigned)), other))
    if not any(reads for _k, reads, _a, _o in entries):
        return ()
    return tuple(entries)
