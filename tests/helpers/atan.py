"""The Atan seed model (examples/atan) and its reference, shared by the interpreter, op and CLI tests."""

from __future__ import annotations

import numpy as np

import opaque_ops as oo
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
