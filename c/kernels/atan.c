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
#include "opaque_ops/kernel_util.h"

static TfLiteStatus AtanPrepare(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  return oo_prepare_unary_float32(context, node, "Atan");
}

static TfLiteStatus AtanInvoke(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  const float* in;
  float* out;
  size_t n, i;
  TF_LITE_OPAQUE_ENSURE_STATUS(oo_unary_float32_buffers(context, node, &in, &out, &n));
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
