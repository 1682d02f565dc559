"""The builtin options the runtime will really use for an operator (what the rules reason on)."""

from __future__ import annotations

from ..schema import _OP_OPTIONS, _OPTION_FIELDS, _OPTIONS_TYPE

# What the zero-filled params mean for the enum fields when a table is absent.
_ZERO_DEFAULTS = {"pad": "UNKNOWN", "act": "NONE", "i32": 0, "bool": False, "f32": 0.0}

# Builtins whose options pick a subgraph: (options field, ...).
SUBGRAPH_FIELDS = {
    "WHILE": ("cond_subgraph_index", "body_subgraph_index"),
    "IF": ("then_subgraph_index", "else_subgraph_index"),
    "CALL_ONCE": ("init_subgraph_index",),
}


def called_subgraphs(op, count: int | None = None) -> list[int]:
    """The subgraphs that a WHILE, IF or CALL_ONCE ``op`` calls, read from its effective options.

    Parameters
    ----------
    op : OpInfo
        Any operator; one whose name is not in :data:`SUBGRAPH_FIELDS` calls
        none, and nor does a custom operator whose custom code is one of
        those names (it is the kernel registered under that name; its
        options, read as the builtin's, would be all zeros: a call of
        subgraph 0, which the call-graph rule refused as a cycle).
    count : int, optional
        The model's number of subgraphs: an index outside ``0 .. count - 1``
        is left out.  None keeps every index as the options give it, for a
        caller that must know one is out of range.

    Returns
    -------
    list of int
        The indexes in the order of the operator's fields in
        :data:`SUBGRAPH_FIELDS` (a WHILE's cond before its body, an IF's
        then before its else), an index named by two fields twice.
    """
    fields = SUBGRAPH_FIELDS.get(op.op_name)
    if fields is None or op.is_custom:
        return []
    options = effective_options(op)
    called = [options.get(f, 0) for f in fields]
    return called if count is None else [k for k in called if 0 <= k < count]


def effective_options(op) -> dict:
    """The builtin options the runtime will use for ``op``.

    The runtime reads an op's table only when the options type tag is the
    one its op expects (``builtin_options_as_Conv2DOptions()`` and so on);
    under any other tag, or with no table, every field takes its zero
    default.  Checks must reason on these, not on whatever table is stored.
    """
    table = _OP_OPTIONS.get(op.op_name)
    if table is None:
        return {}
    if op.builtin_options_type == _OPTIONS_TYPE[table] and op.builtin_options is not None:
        return op.builtin_options
    return {f: _ZERO_DEFAULTS.get(kind, d) for f, _slot, kind, d in _OPTION_FIELDS[table]}


def has_own_options(op) -> bool:
    """Whether ``op`` carries the options table its builtin expects (else the runtime zero-fills them)."""
    return op.builtin_options is not None and op.builtin_options_type == _OPTIONS_TYPE[_OP_OPTIONS[op.op_name]]
