/* Clamp v1: elementwise clamp of float32 to [0, 1], with np.clip's results:
 * NaN passes through unchanged, -0 stays -0, subnormals in range are kept.
 *
 * The comparisons are done on the IEEE bit patterns as integers rather than
 * as floats: the runtime may invoke kernels with denormals-are-zero set, and
 * float min/max would then flush small positive values to 0.  For
 * non-negative floats the integer order is the float order, so two integer
 * compares do the work, and the loop still vectorises. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "opaque_ops.h"
#include "opaque_ops/kernel_util.h"

/* GCC vectorises loops only from -O3 (at -O2 its cost model gives up on a
 * loop of unknown length), so ask for it on the hot loop; on x86-64 with
 * glibc also build an AVX2 clone, picked at load time, since the SSE2
 * baseline lacks the 32-bit integer min/max and blends.  Clang vectorises at
 * -O2 and gets the plain function. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)
#define CLAMP_FAST __attribute__((optimize("O3"), target_clones("avx2", "default")))
#elif defined(__GNUC__) && !defined(__clang__)
#define CLAMP_FAST __attribute__((optimize("O3")))
#else
#define CLAMP_FAST
#endif

CLAMP_FAST
static void ClampLoop(const float* in, float* out, size_t n) {
  size_t i;
  for (i = 0; i < n; ++i) {
    int32_t u, a, r;
    memcpy(&u, &in[i], sizeof u);
    a = u & 0x7fffffff;
    r = u > 0x3f800000 ? 0x3f800000 : u; /* above 1.0 (incl. +inf) -> 1.0 */
    r = (u < 0 && a != 0) ? 0 : r;       /* negative, except -0 -> +0 */
    r = a > 0x7f800000 ? u : r;          /* NaN of either sign: unchanged */
    memcpy(&out[i], &r, sizeof r);
  }
}

static TfLiteStatus ClampPrepare(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  return oo_prepare_unary_float32(context, node, "Clamp");
}

static TfLiteStatus ClampInvoke(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  const float* in;
  float* out;
  size_t n;
  TF_LITE_OPAQUE_ENSURE_STATUS(oo_unary_float32_buffers(context, node, &in, &out, &n));
  if (n == 0) return kTfLiteOk;
  ClampLoop(in, out, n);
  return kTfLiteOk;
}

OPAQUE_OP("Clamp", 1, .prepare = ClampPrepare, .invoke = ClampInvoke);
