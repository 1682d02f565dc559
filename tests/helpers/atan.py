"""The Atan seed model (examples/atan) and its reference, shared by the interpreter, op and CLI tests."""

from __future__ import annotations

import json

import numpy as np

import opaque_ops as oo
from tests.helpers.fork_locks import fork_while_held
from tests.helpers.locations import ROOT, example_module

ATAN_INPUT = np.array([-8, 0.5, 2, 2.2, 201], np.float32)
OFFSET = np.float32(0.99999905)
ATAN_SOURCE = ROOT / "examples" / "atan" / "atan.c"


make_model = example_module("atan", "make_model")
"""examples/atan/make_model.py: ``make_model.build(offset=..., atan_version=...)`` writes the seed model."""

MACRO_ATAN = r"""
#include <math.h>
#include "opaque_ops.h"

static TfLiteStatus Prepare(TfLiteOpaqueContext* ctx, TfLiteOpaqueNode* node) {
  const TfLiteOpaqueTensor* in = TfLiteOpaqueNodeGetInput(ctx, node, 0);
  TF_LITE_OPAQUE_ENSURE_TYPES_EQ(ctx, TfLiteOpaqueTensorType(in), kTfLiteFloat32);
  int n = TfLiteOpaqueTensorNumDims(in);
  TfLiteIntArray* shape = TfLiteIntArrayCreate(n);
  for (int i = 0; i < n; ++i) shape->data[i] = TfLiteOpaqueTensorDim(in, i);
  return TfLiteOpaqueContextResizeTensor(ctx, TfLiteOpaqueNodeGetOutput(ctx, node, 0), shape);
}

static TfLiteStatus Invoke(TfLiteOpaqueContext* ctx, TfLiteOpaqueNode* node) {
  const TfLiteOpaqueTensor* in = TfLiteOpaqueNodeGetInput(ctx, node, 0);
  const float* x = TfLiteOpaqueTensorData(in);
  float* y = TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetOutput(ctx, node, 0));
  size_t n = TfLiteOpaqueTensorByteSize(in) / sizeof(float);
  for (size_t i = 0; i < n; ++i) y[i] = (float)atan((double)x[i]);
  return kTfLiteOk;
}

OPAQUE_OP("Atan", 1, .prepare = Prepare, .invoke = Invoke);
"""


# Setup code for fork_while_held (its prelude imports sys), with the Atan
# model's path as sys.argv[1]: interpreter() runs the model in a new
# interpreter with a Python op of atan (a new one, or the op given) and returns
# its output.  The start of the setup of assert_python_op_fork.
PYTHON_OP_INTERPRETER = """
import numpy as np
import opaque_ops as oo

model = sys.argv[1]

def interpreter(op=None, x=np.ones(5, np.float32), close=False):
    if op is None:
        op = oo.python_op("Atan", invoke=lambda ins, outs: np.arctan(ins[0], out=outs[0]))
    it = oo.Interpreter(model_path=model, custom_ops=[op])
    it.allocate_tensors()
    it.set_tensor(0, x)
    it.invoke()
    out = it.get_tensor(it.get_output_details()[0]["index"]).tolist()
    if close:
        it.close()
    return out
"""


def assert_python_op_fork(
    model_bytes, tmp_path, setup: str, *, code: str, lock: str, call: str = "interpreter()", x=None
) -> None:
    """Fork while a thread holds ``lock`` in ``call``; assert the child's own ``call`` gives atan(x + offset).

    Parameters
    ----------
    model_bytes : bytes
        The Atan model, written to ``tmp_path`` and given as ``sys.argv[1]``.
    tmp_path : pathlib.Path
    setup : str
        :data:`PYTHON_OP_INTERPRETER` and what the test adds to it.
    code, lock : str
        As for :func:`fork_while_held`.
    call : str, optional
        The ``interpreter(...)`` call both the thread and the forked child make.
    x : numpy.ndarray, optional
        The input ``call`` gives the model (five ones by default, as ``interpreter()``).
    """
    model = tmp_path / "atan.tflite"
    model.write_bytes(model_bytes)
    got = fork_while_held(setup, code=code, lock=lock, worker=call, child=call, args=[model])
    if x is None:
        x = np.ones(5, np.float32)
    assert got.startswith("ok "), got
    want = np.arctan(x + OFFSET)
    np.testing.assert_allclose(np.array(json.loads(got[3:]), np.float32), want, rtol=1e-6, atol=0)


def reference(x, offset=OFFSET):
    """y = atan(x + offset): float32 add (as TFLite's ADD), atan in float64 rounded once."""
    return np.arctan((x + offset).astype(np.float64)).astype(np.float32)


def run_atan(model_bytes, ops, x=ATAN_INPUT):
    """Run the seed model with ``ops`` on ``x`` and return its output."""
    it = oo.Interpreter(model_content=model_bytes, custom_ops=[ops])
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])
