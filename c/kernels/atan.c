/* Atan v1: elementwise arctangent of float32, the op TF's converter emits for
 * tf.atan with allow_custom_ops (the custom-operator guide's example).
 *
 * Each element is computed as atan in double and rounded once to float.
 * atan's double result is within an ulp of the exact value, far finer than a
 * float ulp, so the float result is the correctly rounded one except in the
 * (astronomically rare) case of a value within a double ulp of a float
 * rounding boundary. */
#include <float.h>
#include <math.h>
#include <stddef.h>

#include "opaque_ops.h"

static TfLiteStatus AtanPrepare(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
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
    TF_LITE_OPAQUE_KERNEL_LOG(context, "Atan: only FLOAT32 is supported, got input %s, output %s",
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

static TfLiteStatus AtanInvoke(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
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
    /* The runtime may run kernels with denormals-are-zero set, which would
     * turn a subnormal input into 0 before atan sees it.  For |x| < 2^-126,
     * atan(x) rounds to x itself, so pass those through bit for bit. */
    out[i] = fabsf(v) < FLT_MIN ? v : (float)atan((double)v);
  }
  return kTfLiteOk;
}

OPAQUE_OP("Atan", 1, .prepare = AtanPrepare, .invoke = AtanInvoke);
