"""A builtin's parameter input that is empty while the model runs is refused or runs; it never crashes.

Each model computes one parameter input (an axis, a shape, paddings, a size)
as a CAST of WHERE's output on a constant of zeros: its declared shape is one
value, and while the model runs it has no element at all, a shape that
check_model cannot see (it is decided in Prepare or Eval).  TFLite's own
kernels check most such inputs (the refusals below quote them); SPLIT's and
SPLIT_V's axis they read unchecked, which model.checks.allocated refuses
(fuzz_structured 84:19809).  Run in an isolated worker, so that a crash is a
failed test, not a dead test run.
"""

from __future__ import annotations

import numpy as np
import pytest

from opaque_ops.isolate.run import run_model
from opaque_ops.model import ModelBuilder


def _model(
    op, x_shape, param, n_in, out_shape, opts=None, extra=None, n_out=1, x_dtype=np.float32, out_dtype=np.float32
):
    b = ModelBuilder()
    x = b.add_tensor("x", list(x_shape), x_dtype)
    zeros = b.add_constant("zeros", np.zeros((2,), np.float32))
    where = b.add_tensor("where", [1, 1], np.int64, shape_signature=[-1, 1])
    p = b.add_tensor("param", [], np.int32)
    b.add_op("WHERE", [zeros], [where])
    b.add_op("CAST", [where], [p])
    if param == 0:  # SPLIT: the axis first, then the tensor split
        ins = [p, x]
    else:
        ins = [x if k == 0 else p if k == param else extra[k](b) for k in range(n_in)]
    outs = [b.add_tensor(f"y{i}", list(out_shape), out_dtype) for i in range(n_out)]
    b.add_op(op, ins, outs, opts or {})
    b.set_inputs([x])
    b.set_outputs(outs)
    return b.build()


def _const(name, value, dtype=np.int32):
    return lambda b: b.add_constant(name, np.array(value, dtype))


CASES = {
    "SPLIT": dict(x_shape=(2, 6), param=0, n_in=2, out_shape=(2, 3), n_out=2, opts={"num_splits": 2}),
    "SPLIT_V": dict(
        x_shape=(2, 6),
        param=2,
        n_in=3,
        out_shape=(2, 3),
        n_out=2,
        opts={"num_splits": 2},
        extra={1: _const("s", [3, 3])},
    ),
    "SPLIT_V sizes": dict(
        x_shape=(2, 6), param=1, n_in=3, out_shape=(2, 3), n_out=2, opts={"num_splits": 2}, extra={2: _const("a", 1)}
    ),
    "EXPAND_DIMS": dict(x_shape=(2, 3), param=1, n_in=2, out_shape=(1, 2, 3)),
    "CUMSUM": dict(x_shape=(2, 3), param=1, n_in=2, out_shape=(2, 3)),
    "REVERSE_V2": dict(x_shape=(2, 3), param=1, n_in=2, out_shape=(2, 3)),
    "TILE": dict(x_shape=(2, 3), param=1, n_in=2, out_shape=(2, 3)),
    "RESHAPE": dict(x_shape=(2, 3), param=1, n_in=2, out_shape=(6,)),
    "MEAN": dict(x_shape=(2, 3), param=1, n_in=2, out_shape=(3,), opts={"keep_dims": False}),
    "SUM": dict(x_shape=(2, 3), param=1, n_in=2, out_shape=(3,), opts={"keep_dims": False}),
    "REDUCE_MAX": dict(x_shape=(2, 3), param=1, n_in=2, out_shape=(3,), opts={"keep_dims": False}),
    "PAD": dict(x_shape=(2, 3), param=1, n_in=2, out_shape=(2, 3)),
    "RESIZE_BILINEAR": dict(x_shape=(1, 2, 2, 1), param=1, n_in=2, out_shape=(1, 2, 2, 1)),
    "RESIZE_NEAREST_NEIGHBOR": dict(x_shape=(1, 2, 2, 1), param=1, n_in=2, out_shape=(1, 2, 2, 1)),
    "SPACE_TO_BATCH_ND": dict(
        x_shape=(1, 2, 2, 1), param=1, n_in=3, out_shape=(1, 2, 2, 1), extra={2: _const("p", [[0, 0], [0, 0]])}
    ),
    "BATCH_TO_SPACE_ND": dict(
        x_shape=(1, 2, 2, 1), param=1, n_in=3, out_shape=(1, 2, 2, 1), extra={2: _const("c", [[0, 0], [0, 0]])}
    ),
    "GATHER": dict(x_shape=(2, 3), param=1, n_in=2, out_shape=(3,), opts={"axis": 0}),
    "GATHER_ND": dict(x_shape=(2, 3), param=1, n_in=2, out_shape=(3,)),
    "SLICE": dict(x_shape=(2, 3), param=1, n_in=3, out_shape=(1, 1), extra={2: _const("size", [1, 1])}),
    "STRIDED_SLICE": dict(
        x_shape=(2, 3), param=1, n_in=4, out_shape=(1, 1), extra={2: _const("e", [1, 1]), 3: _const("s", [1, 1])}
    ),
    "RANGE": dict(x_shape=(), param=1, n_in=3, out_shape=(3,), x_dtype=np.int32, extra={2: _const("d", 1)}),
    "SEGMENT_SUM": dict(x_shape=(2, 3), param=1, n_in=2, out_shape=(2, 3)),
    "ARG_MAX": dict(x_shape=(2, 3), param=1, n_in=2, out_shape=(2,), opts={"output_type": "INT32"}, out_dtype=np.int32),
    "ARG_MIN": dict(x_shape=(2, 3), param=1, n_in=2, out_shape=(2,), opts={"output_type": "INT32"}, out_dtype=np.int32),
    "MIRROR_PAD": dict(x_shape=(2, 3), param=1, n_in=2, out_shape=(2, 3), opts={"mode": 0}),
    "REVERSE_SEQUENCE": dict(x_shape=(2, 3), param=1, n_in=2, out_shape=(2, 3), opts={"seq_dim": 1, "batch_dim": 0}),
    # indices, depth (the parameter), on and off values
    "ONE_HOT": dict(
        x_shape=(2,),
        param=1,
        n_in=4,
        out_shape=(2, 3),
        opts={"axis": -1},
        x_dtype=np.int32,
        extra={2: _const("on", 1.0, np.float32), 3: _const("off", 0.0, np.float32)},
    ),
    "UNSORTED_SEGMENT_SUM": dict(x_shape=(2, 3), param=1, n_in=3, out_shape=(2, 3), extra={2: _const("n", 2)}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_empty_run_time_parameter_is_refused_or_runs(case):
    spec = dict(CASES[case])
    out = run_model(_model(case.split()[0], **spec), use_xnnpack=False, timeout=30)
    assert out.status in ("ok", "rejected"), (out.status, out.reason)
    if case.startswith("SPLIT"):
        # The kernels that would read it unchecked: refused before the first invoke.
        assert out.status == "rejected" and out.stage == "allocate", (out.stage, out.error)
