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


def planned_operator(sg, op) -> str:
    """``operator N (NAME)``: an operator of the planned subgraph, on the shapes the runtime planned.

    The planned subgraph is ``info.subgraphs[0]``; for another subgraph's
    plan (a signature runner's, moved there), ``sg.index`` is its index in
    the model and the text starts ``subgraph S, `` (an "operator 3" alone
    would be read as subgraph 0's).  :mod:`~opaque_ops.model.shapes` and
    :mod:`~opaque_ops.model.runtime_ops`, below this package, spell the same
    form.
    """
    return f"{planned_subgraph(sg.index)}operator {op.index} ({op.op_name})"


def planned_tensor(sg, t: int, what: str = "tensor") -> str:
    """``tensor N ('name')`` (or ``output tensor``): a tensor of the planned subgraph, as :func:`planned_operator`."""
    return f"{planned_subgraph(sg.index)}{what} {t} ({sg.tensors[t].name!r})"


def planned_subgraph(index: int) -> str:
    """What a planned-shape message starts with: nothing for subgraph 0, ``subgraph S, `` for another."""
    return f"subgraph {index}, " if index else ""
