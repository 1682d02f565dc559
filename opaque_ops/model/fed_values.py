"""Operators whose kernel's Eval trusts a value the user feeds as a graph input.

The shape rules (:mod:`~opaque_ops.model.shapes`) and the version rules
(:mod:`~opaque_ops.model.checks.version_rules`) refuse a REVERSE_SEQUENCE
length, a TOPK_V2 ``k``, a BROADCAST_TO shape or a REVERSE_V2 axis that
would crash TFLite's kernel in Eval when it is a constant.  When it is an
input of subgraph 0, its value is known only when ``invoke()`` is called:
each of those kernels reads it in Eval, not in Prepare (reverse_sequence.cc
and reverse.cc read it only in Eval; topk_v2.cc and broadcast_to.cc make
their outputs dynamic for a non-constant k or shape and read it in Eval's
ResizeOutput), so the interpreter checks the current value before each
invoke (:mod:`opaque_ops.interpreter.fed_values`).  A value computed by
another operator exists only in the middle of the invoke, after the last
moment a check could run: it is not checked.

:func:`nodes_of` finds those operators; the answer is kept in the model's
record (:func:`~opaque_ops.model.cache.fed_value_nodes`), so a later start
does not read the operators for it.  A signature runner of another subgraph
asks :func:`nodes_of` that subgraph when it is made
(``interpreter.signature_runner._fed_nodes``) and checks its call's values
the same way; those answers are not kept (only models used through such a
runner pay for them).
"""

from __future__ import annotations

# op name -> the index of the fed value among the operator's inputs (the data is input 0)
_VALUE_INPUT = {"REVERSE_SEQUENCE": 1, "TOPK_V2": 1, "REVERSE_V2": 1, "BROADCAST_TO": 1}

# Checked on every runtime; the others only where runtime_versions.affected says
# the runtime has the defect (2.23.0 runs TOPK_V2 with k = 0 and those
# BROADCAST_TO shapes right).
EVERY_RUNTIME = frozenset({"REVERSE_SEQUENCE", "REVERSE_V2"})


def nodes_of(sg) -> tuple:
    """``(operator index, op name, value tensor, data tensor, seq_dim, batch_dim)`` of each such operator of ``sg``.

    Only operators whose value input is one of ``sg``'s inputs (what
    ``set_tensor`` feeds); ``seq_dim`` and ``batch_dim`` are
    REVERSE_SEQUENCE's options (0 for the other ops).
    """
    if sg is None:
        return ()
    fed = set(sg.inputs)
    found = []
    for op in sg.operators:
        k = None if op.is_custom else _VALUE_INPUT.get(op.op_name)
        if k is None or len(op.inputs) <= k or op.inputs[0] < 0 or op.inputs[k] not in fed:
            continue
        seq_dim = batch_dim = 0
        if op.op_name == "REVERSE_SEQUENCE":
            # (The options the runtime reads: zeros under another table's tag.)
            from .checks.options import effective_options

            o = effective_options(op)
            seq_dim, batch_dim = int(o.get("seq_dim", 0)), int(o.get("batch_dim", 0))
        found.append((op.index, op.op_name, op.inputs[k], op.inputs[0], seq_dim, batch_dim))
    return tuple(found)


def for_runtime(nodes: tuple, version: str | None) -> tuple:
    """The nodes whose value can crash a runtime of this ``TfLiteVersion()``."""
    if all(n[1] in EVERY_RUNTIME for n in nodes):
        return nodes
    from .runtime_versions import affected  # (only a model with such an operator gets here)

    old = affected(version)
    return tuple(n for n in nodes if old or n[1] in EVERY_RUNTIME)
