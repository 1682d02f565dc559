/* MaxPoolingWithArgmax2D v1 (MediaPipe).
 *
 * Input:   [N, H, W, C] float32.
 * Outputs: max values and argmax, both [N, OH, OW, C] float32.
 * Options: a raw TfLitePoolParams: little-endian int32 padding (1 = SAME,
 *          2 = VALID), stride_w, stride_h, filter_w, filter_h, activation
 *          (0 none, 1 relu, 2 relu_n1_to_1, 3 relu6).  Only these six fields
 *          are read; files carry 32 or 40 bytes.
 *
 * Output size: SAME ceil(in / s), VALID floor((in - f + s) / s).
 * Padding before the image: max(0, ((out - 1) s + f - in) / 2) (integer
 * division, so any odd extra goes after).  Windows are clipped to the image;
 * padded positions never win.  The argmax is the position inside the window,
 * ky * filter_w + kx, of the first maximum in row-major order, stored as a
 * float plus 0.1 so that truncation back to int is exact.  The activation
 * clamps the max value only.
 */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>

#include "opaque_ops.h"
#include "opaque_ops/kernel_util.h"
#include "opaque_ops/rawopts.h"

#define MPA_OP "MaxPoolingWithArgmax2D"

typedef struct {
  OoOptsStatus opts;
  int padding, stride_w, stride_h, filter_w, filter_h, activation;
  int pad_h, pad_w; /* set in Prepare */
} MpaData;

static void* MpaInit(TfLiteOpaqueContext* context, const char* buffer, size_t length) {
  MpaData* d = (MpaData*)calloc(1, sizeof *d);
  int32_t f[6];
  (void)context;
  if (d == NULL) return NULL;
  if (oo_raw_i32s(buffer, length, f, 6) != OO_RAW_OK) {
    oo_opts_fail(&d->opts, MPA_OP,
                 "options must be a TfLitePoolParams struct of at least 24 bytes, got %zu", length);
    return d;
  }
  if (f[0] != 1 && f[0] != 2) {
    oo_opts_fail(&d->opts, MPA_OP, "padding must be 1 (SAME) or 2 (VALID), got %d", (int)f[0]);
    return d;
  }
  if (f[1] < 1 || f[2] < 1 || f[3] < 1 || f[4] < 1 || f[1] > 65536 || f[2] > 65536 ||
      f[3] > 65536 || f[4] > 65536) {
    oo_opts_fail(&d->opts, MPA_OP,
                 "strides and filter sizes must be in [1, 65536], got stride %dx%d filter %dx%d "
                 "(w x h)",
                 (int)f[1], (int)f[2], (int)f[3], (int)f[4]);
    return d;
  }
  if (f[5] < 0 || f[5] > 3) {
    oo_opts_fail(&d->opts, MPA_OP,
                 "unsupported activation %d (0 none, 1 relu, 2 relu_n1_to_1, 3 relu6)", (int)f[5]);
    return d;
  }
  d->padding = f[0];
  d->stride_w = f[1];
  d->stride_h = f[2];
  d->filter_w = f[3];
  d->filter_h = f[4];
  d->activation = f[5];
  return d;
}

static void MpaFree(TfLiteOpaqueContext* context, void* data) {
  (void)context;
  free(data);
}

/* Output length along one axis (0 if the filter does not fit) and its padding. */
static int MpaOutSize(int same, int in, int filter, int stride, int* pad) {
  long long out, p;
  if (same)
    out = ((long long)in + stride - 1) / stride;
  else
    out = ((long long)in - filter + stride) / stride;
  if (out <= 0) {
    *pad = 0;
    return 0;
  }
  p = ((out - 1) * stride + filter - in) / 2;
  *pad = p > 0 ? (int)p : 0;
  return (int)out;
}

static TfLiteStatus MpaPrepare(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  MpaData* d = (MpaData*)TfLiteOpaqueNodeGetUserData(node);
  const TfLiteOpaqueTensor* in;
  TfLiteOpaqueTensor *out, *arg;
  int n, h, w, c, oh, ow, i;
  TF_LITE_OPAQUE_ENSURE_STATUS(oo_opts_check(context, MPA_OP, d ? &d->opts : NULL));
  TF_LITE_OPAQUE_ENSURE_STATUS(oo_check_io(context, MPA_OP, node, 1, 2));
  in = TfLiteOpaqueNodeGetInput(context, node, 0);
  out = TfLiteOpaqueNodeGetOutput(context, node, 0);
  arg = TfLiteOpaqueNodeGetOutput(context, node, 1);
  TF_LITE_OPAQUE_ENSURE(context, in != NULL && out != NULL && arg != NULL);
  TF_LITE_OPAQUE_ENSURE_STATUS(oo_check_float32(context, MPA_OP, "input, output and argmax",
                                                (const TfLiteOpaqueTensor*[]){in, out, arg}, 3));
  if (TfLiteOpaqueTensorNumDims(in) != 4) {
    TF_LITE_OPAQUE_KERNEL_LOG(context, "MaxPoolingWithArgmax2D: input must be [N, H, W, C], got rank %d",
                              (int)TfLiteOpaqueTensorNumDims(in));
    return kTfLiteError;
  }
  for (i = 0; i < 4; i++) {
    if (TfLiteOpaqueTensorDim(in, i) <= 0) {
      TF_LITE_OPAQUE_KERNEL_LOG(context, "MaxPoolingWithArgmax2D: input has an empty dimension");
      return kTfLiteError;
    }
  }
  n = TfLiteOpaqueTensorDim(in, 0);
  h = TfLiteOpaqueTensorDim(in, 1);
  w = TfLiteOpaqueTensorDim(in, 2);
  c = TfLiteOpaqueTensorDim(in, 3);
  oh = MpaOutSize(d->padding == 1, h, d->filter_h, d->stride_h, &d->pad_h);
  ow = MpaOutSize(d->padding == 1, w, d->filter_w, d->stride_w, &d->pad_w);
  if (oh <= 0 || ow <= 0) {
    TF_LITE_OPAQUE_KERNEL_LOG(context,
                              "MaxPoolingWithArgmax2D: VALID filter %dx%d does not fit input %dx%d "
                              "(h x w)",
                              d->filter_h, d->filter_w, h, w);
    return kTfLiteError;
  }
  {
    const int dims[4] = {n, oh, ow, c};
    TF_LITE_OPAQUE_ENSURE_STATUS(oo_resize(context, out, 4, dims));
    return oo_resize(context, arg, 4, dims);
  }
}

static TfLiteStatus MpaInvoke(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  const MpaData* d = (const MpaData*)TfLiteOpaqueNodeGetUserData(node);
  const TfLiteOpaqueTensor* in = TfLiteOpaqueNodeGetInput(context, node, 0);
  TfLiteOpaqueTensor* out = TfLiteOpaqueNodeGetOutput(context, node, 0);
  TfLiteOpaqueTensor* arg = TfLiteOpaqueNodeGetOutput(context, node, 1);
  const float* src = (const float*)TfLiteOpaqueTensorData(in);
  float* dst = (float*)TfLiteOpaqueTensorData(out);
  float* idx = (float*)TfLiteOpaqueTensorData(arg);
  const int n = TfLiteOpaqueTensorDim(in, 0), h = TfLiteOpaqueTensorDim(in, 1);
  const int w = TfLiteOpaqueTensorDim(in, 2), c = TfLiteOpaqueTensorDim(in, 3);
  const int oh = TfLiteOpaqueTensorDim(out, 1), ow = TfLiteOpaqueTensorDim(out, 2);
  float lo = -FLT_MAX, hi = FLT_MAX;
  int b, oy, ox, ch;
  TF_LITE_OPAQUE_ENSURE(context, d != NULL && src != NULL && dst != NULL && idx != NULL);
  switch (d->activation) {
    case 1: lo = 0.0f; break;
    case 2: lo = -1.0f; hi = 1.0f; break;
    case 3: lo = 0.0f; hi = 6.0f; break;
    default: break;
  }
  for (b = 0; b < n; ++b) {
    for (oy = 0; oy < oh; ++oy) {
      const int y0 = oy * d->stride_h - d->pad_h;
      const int ky0 = y0 < 0 ? -y0 : 0;
      const int ky1 = d->filter_h < h - y0 ? d->filter_h : h - y0;
      for (ox = 0; ox < ow; ++ox) {
        const int x0 = ox * d->stride_w - d->pad_w;
        const int kx0 = x0 < 0 ? -x0 : 0;
        const int kx1 = d->filter_w < w - x0 ? d->filter_w : w - x0;
        const size_t o = (((size_t)b * oh + oy) * ow + ox) * c;
        for (ch = 0; ch < c; ++ch) {
          float best = -FLT_MAX;
          int best_k = 0, ky, kx;
          for (ky = ky0; ky < ky1; ++ky) {
            const float* row = src + (((size_t)b * h + (y0 + ky)) * w) * c + ch;
            for (kx = kx0; kx < kx1; ++kx) {
              const float v = row[(size_t)(x0 + kx) * c];
              if (v > best) {
                best = v;
                best_k = ky * d->filter_w + kx;
              }
            }
          }
          dst[o + ch] = best < lo ? lo : (best > hi ? hi : best);
          idx[o + ch] = (float)best_k + 0.1f;
        }
      }
    }
  }
  return kTfLiteOk;
}

OPAQUE_OP("MaxPoolingWithArgmax2D", 1, .init = MpaInit, .free = MpaFree, .prepare = MpaPrepare,
          .invoke = MpaInvoke);
