"""Where a refusal points: the one place the rules' message prefixes are spelled.

Every :class:`~opaque_ops.errors.ModelError` of :mod:`~opaque_ops.model.checks`
starts by naming what is at fault, in one of these forms; the corpus
(``tests/corpus/index.json``) compares whole messages, so a prefix changes
here or nowhere.
"""

from __future__ import annotations


def operator(sg, op) -> str:
    """``subgraph S operator N (NAME)``: an operator of the model as stored."""
    return operator_at(sg.index, op.index, op.op_name)


def operator_at(subgraph: int, index: int, name: str) -> str:
    """:func:`operator` from the indices and the name alone (a verdict record keeps no more)."""
    return f"subgraph {subgraph} operator {index} ({name})"


def tensor(sg, t) -> str:
    """``subgraph S tensor N ('name')``: a tensor of the model as stored."""
    return f"subgraph {sg.index} tensor {t.index} ({t.name!r})"


def subgraph_io(sg, what: str, t: int) -> str:
    """``subgraph S input N ('name')`` (or ``output tensor``): one of a subgraph's inputs or outputs."""
    return f"subgraph {sg.index} {what} {t} ({sg.tensors[t].name!r})"


def planned_operator(op) -> str:
    """``operator N (NAME)``: an operator of subgraph 0, on the shapes the runtime planned."""
    return f"operator {op.index} ({op.op_name})"


def planned_tensor(sg, t: int, what: str = "tensor") -> str:
    """``tensor N ('name')`` (or ``output tensor``): a tensor of subgraph 0, on the planned shapes."""
    return f"{what} {t} ({sg.tensors[t].name!r})"
