/* Clamp v1 in C: y = min(max(x, 0), 1) elementwise on float32.
 * The Python prototype in check.py (np.clip) defines the behaviour this must
 * match, including NaN passing through and +-inf going to 1 and 0. */
#include <stddef.h>

#include "opaque_ops.h"

static TfLiteStatus ExClampPrepare(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  TF_LITE_OPAQUE_ENSURE_EQ(context, TfLiteOpaqueNodeNumberOfInputs(node), 1);
  TF_LITE_OPAQUE_ENSURE_EQ(context, TfLiteOpaqueNodeNumberOfOutputs(node), 1);
  const TfLiteOpaqueTensor* input = TfLiteOpaqueNodeGetInput(context, node, 0);
  TfLiteOpaqueTensor* output = TfLiteOpaqueNodeGetOutput(context, node, 0);
  TF_LITE_OPAQUE_ENSURE(context, input != NULL && output != NULL);
  TF_LITE_OPAQUE_ENSURE_TYPES_EQ(context, TfLiteOpaqueTensorType(input), kTfLiteFloat32);
  TF_LITE_OPAQUE_ENSURE_TYPES_EQ(context, TfLiteOpaqueTensorType(output), kTfLiteFloat32);
  int rank = TfLiteOpaqueTensorNumDims(input);
  TfLiteIntArray* shape = TfLiteIntArrayCreate(rank);
  if (shape == NULL) return kTfLiteError;
  for (int i = 0; i < rank; ++i) shape->data[i] = TfLiteOpaqueTensorDim(input, i);
  /* The runtime owns `shape` from here on, even if the resize fails. */
  return TfLiteOpaqueContextResizeTensor(context, output, shape);
}

static TfLiteStatus ExClampInvoke(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  const TfLiteOpaqueTensor* input = TfLiteOpaqueNodeGetInput(context, node, 0);
  TfLiteOpaqueTensor* output = TfLiteOpaqueNodeGetOutput(context, node, 0);
  const float* in = (const float*)TfLiteOpaqueTensorData(input);
  float* out = (float*)TfLiteOpaqueTensorData(output);
  size_t n = TfLiteOpaqueTensorByteSize(input) / sizeof(float);
  for (size_t i = 0; i < n; ++i) {
    float v = in[i];
    /* Both comparisons are false for NaN, so NaN is copied unchanged. */
    if (v < 0.0f) v = 0.0f;
    if (v > 1.0f) v = 1.0f;
    out[i] = v;
  }
  return kTfLiteOk;
}

OPAQUE_OP("Clamp", 1, .prepare = ExClampPrepare, .invoke = ExClampInvoke);
