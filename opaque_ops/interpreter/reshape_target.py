"""What :meth:`Interpreter._reshape` works on: a subgraph's tensors, and the shapes it is given.

Shared by :mod:`.core` (the interpreter's own inputs) and
:mod:`.signature_runner` (a signature's), so neither imports the other
for them.
"""

from __future__ import annotations

import numpy as np

from ..errors import ResizeError


class Graph:
    """How :meth:`Interpreter._reshape` reaches the tensors of one subgraph.

    The interpreter's own inputs (subgraph 0, by position) and each signature
    runner (its subgraph, by input name) provide the same four operations.
    """

    def __init__(
        self,
        subgraph: int,
        names: dict[int, object],
        resize,
        allocate,
        tensor,
        shape_of=None,
        strict: bool | frozenset = False,
        arena=None,
    ):
        self.subgraph = subgraph
        self.names = names  # tensor index -> what the resize call takes (position or name)
        self.resize = resize  # (handle, shape) -> status
        self.allocate = allocate  # () -> status
        self.tensor = tensor  # handle -> TensorRef
        self.shape_of = shape_of  # tensor index -> planned shape or None (subgraphs other than 0)
        # Whether ``resize`` changes only the dimensions that are -1 in the
        # input's shape signature, whatever the caller asked: the C API's
        # signature runner resizes strictly (TfLiteSignatureRunnerResizeInputTensor
        # calls ResizeInputTensorStrict).  True for every input, or the set of
        # handles that resize so (a runner of subgraph 0 resizes the others
        # through the interpreter, which is not strict).
        self.strict = strict
        # What the growing-arena guard (arena_guard.refuse_unaffordable) sees
        # of a subgraph other than 0, whose tensors the C API reaches only
        # through a signature: an object with ``in_arena(index, placed)``,
        # ``room(indices)`` and ``stops()`` (signature_runner.SignatureArena).
        # None for subgraph 0, which the guard sees whole through the interpreter.
        self.arena = arena

    def is_strict(self, handle) -> bool:
        """Whether ``resize(handle, ...)`` may change only the -1 dimensions of the input's shape signature."""
        return self.strict if isinstance(self.strict, bool) else handle in self.strict


def as_shape(tensor_size, what: str) -> tuple[int, ...]:
    """A shape from a sequence of ints: non-negative, each fitting a C int."""
    arr = np.asarray(tensor_size)
    if arr.ndim > 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ResizeError(f"{what}: the shape must be a sequence of ints, got {tensor_size!r}")
    shape = tuple(int(d) for d in arr.reshape(-1))
    if any(d < 0 or d > 2**31 - 1 for d in shape):
        raise ResizeError(f"{what}: shape {list(shape)} has a dimension outside 0..2**31-1")
    return shape
