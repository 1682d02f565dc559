"""A model of one builtin operator whose outputs are the graph's outputs (the shape and version rules' tests)."""

from __future__ import annotations

import numpy as np

from opaque_ops.model import ModelBuilder


def single_op_model(op, inputs, consts, outputs, options=None, order=None, version=1, signature=None) -> bytes:
    """One ``op``: ``inputs`` {name: (shape, dtype)} are graph inputs, ``consts`` {name: array},
    ``outputs`` [(shape, dtype)]; ``order`` names the op's inputs (default: inputs then consts);
    ``signature``: the key of a signature of the inputs by name and the outputs as ``out0``, ``out1``..."""
    b = ModelBuilder()
    ids = {n: b.add_tensor(n, list(s), d) for n, (s, d) in inputs.items()}
    ids.update({n: b.add_constant(n, np.asarray(v)) for n, v in consts.items()})
    outs = [b.add_tensor(f"out{k}", list(s), d) for k, (s, d) in enumerate(outputs)]
    b.add_op(op, [ids[n] for n in (order or [*inputs, *consts])], outs, options, version=version)
    b.set_inputs([ids[n] for n in inputs])
    b.set_outputs(outs)
    if signature is not None:
        b.add_signature(signature, {n: ids[n] for n in inputs}, {f"out{k}": t for k, t in enumerate(outs)})
    return b.build()
