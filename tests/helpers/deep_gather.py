"""GATHER_ND models whose tensors are deeper than MAX_RANK (6), with a numpy reference from the op's definition.

Shared by tests/model/test_any_rank.py and the child processes it starts.
"""

from __future__ import annotations

import numpy as np

from tests.helpers.single_op import single_op_model

# name: (params shape, indices shape); the indices' last dimension is the
# index depth, and the output is indices.shape[:-1] + params.shape[depth:].
CASES = {
    "rank-7 output of rank-6 params": ((3, 2, 2, 2, 2, 2), (2, 2, 1)),
    "rank-8 output of rank-6 params": ((3, 4, 2, 2, 2, 2), (2, 2, 2, 1)),
    "rank-10 output": ((3, 2, 2, 2, 2, 2), (2, 1, 2, 1, 2, 1)),
    "rank-7 params and output": ((3, 4, 2, 2, 2, 2, 2), (2, 1)),
    "rank-8 params and output": ((3, 2, 2, 2, 2, 2, 2, 2), (2, 1)),
    "rank-8 indices": ((3, 2), (2, 1, 2, 1, 2, 1, 2, 1)),
    "index depth 7": ((2, 2, 2, 2, 2, 2, 2), (3, 7)),
}


def reference(params: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """GATHER_ND by its definition: ``out[i...] = params[indices[i...]]``, one index tuple at a time."""
    lead, depth = indices.shape[:-1], indices.shape[-1]
    out = np.empty(lead + params.shape[depth:], params.dtype)
    for at in np.ndindex(*lead):
        out[at] = params[tuple(indices[at])]
    return out


def case(name: str, declared_params=None):
    """``(model, params, indices)`` for ``CASES[name]``: params a float32 graph input, indices a constant.

    ``declared_params``: the params shape the model declares (default: the
    case's); the output is declared with the shape the case gives.
    """
    pshape, ishape = CASES[name]
    rng = np.random.default_rng(len(name))
    params = rng.standard_normal(pshape).astype(np.float32)
    depth = ishape[-1]
    indices = np.stack([rng.integers(0, pshape[k], ishape[:-1]) for k in range(depth)], axis=-1).astype(np.int32)
    out = reference(params, indices).shape
    model = single_op_model(
        "GATHER_ND", {"p": (declared_params or pshape, np.float32)}, {"i": indices}, [(out, np.float32)]
    )
    return model, params, indices
