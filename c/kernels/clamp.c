/* Clamp v1: elementwise clamp of float32 to [0, 1].
 *
 * Written with comparisons that are false for NaN, so NaN passes through
 * unchanged (as np.clip does), and the branch-free form lets the compiler
 * vectorise the loop. */
#include <stddef.h>

#include "opaque_ops.h"

static TfLiteStatus ClampPrepare(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  const TfLiteOpaqueTensor* input;
  TfLiteOpaqueTensor* output;
  TfLiteIntArray* shape;
  int i, rank;
  TF_LITE_OPAQUE_ENSURE_EQ(context, TfLiteOpaqueNodeNumberOfInputs(node), 1);
  TF_LITE_OPAQUE_ENSURE_EQ(context, TfLiteOpaqueNodeNumberOfOutputs(node), 1);
  input = TfLiteOpaqueNodeGetInput(context, node, 0);
  output = TfLiteOpaqueNodeGetOutput(context, node, 0);
  TF_LITE_OPAQUE_ENSURE(context, input != NULL && output != NULL);
  if (TfLiteOpaqueTensorType(input) != kTfLiteFloat32 ||
      TfLiteOpaqueTensorType(output) != kTfLiteFloat32) {
    TF_LITE_OPAQUE_KERNEL_LOG(context, "Clamp: only FLOAT32 is supported, got input %s, output %s",
                              TfLiteTypeGetName(TfLiteOpaqueTensorType(input)),
                              TfLiteTypeGetName(TfLiteOpaqueTensorType(output)));
    return kTfLiteError;
  }
  rank = TfLiteOpaqueTensorNumDims(input);
  shape = TfLiteIntArrayCreate(rank);
  if (shape == NULL) return kTfLiteError;
  for (i = 0; i < rank; ++i) shape->data[i] = TfLiteOpaqueTensorDim(input, i);
  /* The runtime owns `shape` from here on, whatever the result. */
  return TfLiteOpaqueContextResizeTensor(context, output, shape);
}

static TfLiteStatus ClampInvoke(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  const TfLiteOpaqueTensor* input = TfLiteOpaqueNodeGetInput(context, node, 0);
  TfLiteOpaqueTensor* output = TfLiteOpaqueNodeGetOutput(context, node, 0);
  const float* in = (const float*)TfLiteOpaqueTensorData(input);
  float* out = (float*)TfLiteOpaqueTensorData(output);
  size_t n = TfLiteOpaqueTensorByteSize(input) / sizeof(float), i;
  TF_LITE_OPAQUE_ENSURE(context, TfLiteOpaqueTensorByteSize(output) >= n * sizeof(float));
  if (n == 0) return kTfLiteOk;
  TF_LITE_OPAQUE_ENSURE(context, in != NULL && out != NULL);
  for (i = 0; i < n; ++i) {
    float v = in[i];
    v = v < 0.0f ? 0.0f : v;
    out[i] = v > 1.0f ? 1.0f : v;
  }
  return kTfLiteOk;
}

OPAQUE_OP("Clamp", 1, .prepare = ClampPrepare, .invoke = ClampInvoke);
