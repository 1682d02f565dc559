/* Convolution2DTransposeBias v1 -- MediaPipe's transposed convolution with
 * bias, as used by the selfie-segmentation models.
 *
 * Inputs:  0 data    float32 [N, H, W, I]   (NHWC)
 *          1 weights float32 [O, kH, kW, I] (OHWI)
 *          2 bias    float32 [O]
 * Output:  0         float32 [N, H_out, W_out, O]
 * Options: 12 raw bytes, three little-endian int32: padding (1 = SAME,
 *          2 = VALID), stride_w, stride_h.  Longer buffers are accepted and
 *          the extra bytes ignored; shorter ones are an error.
 *
 * In the real models the weights and bias are produced at run time by
 * DEQUANTIZE nodes (float16 constants), so their data may not exist during
 * Prepare: Prepare checks only types and shapes, Invoke reads the values.
 *
 * Numerics: every output starts at its bias and products are added one at a
 * time in the order input y, input x, input channel, filter y, filter x,
 * output channel.  That is the order MediaPipe's reference kernel uses, and
 * with FMA contraction disabled (-ffp-contract=off) each addition rounds the
 * same way, so results match MediaPipe bit for bit.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opaque_ops.h"
#include "opaque_ops/kernel_util.h"
#include "opaque_ops/rawopts.h"

#define CTB_OP "Convolution2DTransposeBias"

#define CTB_PADDING_SAME 1
#define CTB_PADDING_VALID 2

typedef struct CtbData {
  OoOptsStatus opts;
  int32_t padding;
  int32_t stride_w;
  int32_t stride_h;
  /* Filled in by Prepare for Invoke. */
  int pad_top;
  int pad_left;
} CtbData;

static void* CtbInit(TfLiteOpaqueContext* context, const char* buffer, size_t length) {
  (void)context;
  CtbData* d = (CtbData*)calloc(1, sizeof(CtbData));
  if (d == NULL) return NULL;
  int32_t f[3];
  if (buffer == NULL || length < 12 || oo_raw_i32s(buffer, length, f, 3) != OO_RAW_OK) {
    oo_opts_fail(&d->opts, CTB_OP,
                 "options must be at least 12 bytes (int32 padding, stride_w, stride_h), got %zu "
                 "bytes",
                 buffer == NULL ? (size_t)0 : length);
    return d;
  }
  d->padding = f[0];
  d->stride_w = f[1];
  d->stride_h = f[2];
  if (f[0] != CTB_PADDING_SAME && f[0] != CTB_PADDING_VALID) {
    oo_opts_fail(&d->opts, CTB_OP, "padding must be 1 (SAME) or 2 (VALID), got %d", (int)f[0]);
    return d;
  }
  if (f[1] <= 0 || f[2] <= 0) {
    oo_opts_fail(&d->opts, CTB_OP, "strides must be positive, got stride_w=%d stride_h=%d",
                 (int)f[1], (int)f[2]);
    return d;
  }
  return d;
}

static void CtbFree(TfLiteOpaqueContext* context, void* data) {
  (void)context;
  free(data);
}

/* Output size along one axis and the padding in front of it; -1 when the
 * result would not fit an int32 or is not positive. */
static int64_t CtbOutSize(int64_t in, int64_t k, int64_t s, int same, int* pad_front) {
  int64_t pad = 0;
  if (same) {
    pad = k - ((in - 1) % s) - 1;
    if (pad < 0) pad = 0;
  }
  int64_t out = s * (in - 1) + k - pad;
  *pad_front = (int)(pad / 2);
  if (out <= 0 || out > INT32_MAX) return -1;
  return out;
}

static TfLiteStatus CtbPrepare(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  CtbData* d = (CtbData*)TfLiteOpaqueNodeGetUserData(node);
  TF_LITE_OPAQUE_ENSURE_STATUS(oo_opts_check(context, CTB_OP, d ? &d->opts : NULL));
  int nin = TfLiteOpaqueNodeNumberOfInputs(node);
  int nout = TfLiteOpaqueNodeNumberOfOutputs(node);
  if (nin != 3 || nout != 1) {
    TF_LITE_OPAQUE_KERNEL_LOG(context,
                              "Convolution2DTransposeBias: expected 3 inputs (data, weights, "
                              "bias) and 1 output, got %d inputs and %d outputs",
                              nin, nout);
    return kTfLiteError;
  }
  const TfLiteOpaqueTensor* in = TfLiteOpaqueNodeGetInput(context, node, 0);
  const TfLiteOpaqueTensor* w = TfLiteOpaqueNodeGetInput(context, node, 1);
  const TfLiteOpaqueTensor* b = TfLiteOpaqueNodeGetInput(context, node, 2);
  TfLiteOpaqueTensor* out = TfLiteOpaqueNodeGetOutput(context, node, 0);
  if (in == NULL || w == NULL || b == NULL || out == NULL) {
    TF_LITE_OPAQUE_KERNEL_LOG(context, "Convolution2DTransposeBias: missing input or output tensor");
    return kTfLiteError;
  }
  static const char* const names[4] = {"data", "weights", "bias", "output"};
  const TfLiteOpaqueTensor* all[4] = {in, w, b, out};
  static const int ranks[4] = {4, 4, 1, -1};
  for (int i = 0; i < 4; i++) {
    TfLiteType t = TfLiteOpaqueTensorType(all[i]);
    if (t != kTfLiteFloat32) {
      TF_LITE_OPAQUE_KERNEL_LOG(context, "Convolution2DTransposeBias: %s must be float32, got %s",
                                names[i], TfLiteTypeGetName(t));
      return kTfLiteError;
    }
    if (ranks[i] > 0 && TfLiteOpaqueTensorNumDims(all[i]) != ranks[i]) {
      TF_LITE_OPAQUE_KERNEL_LOG(context, "Convolution2DTransposeBias: %s must have rank %d, got %d",
                                names[i], ranks[i], (int)TfLiteOpaqueTensorNumDims(all[i]));
      return kTfLiteError;
    }
  }
  int32_t n = TfLiteOpaqueTensorDim(in, 0), h = TfLiteOpaqueTensorDim(in, 1);
  int32_t wd = TfLiteOpaqueTensorDim(in, 2), ic = TfLiteOpaqueTensorDim(in, 3);
  int32_t oc = TfLiteOpaqueTensorDim(w, 0), kh = TfLiteOpaqueTensorDim(w, 1);
  int32_t kw = TfLiteOpaqueTensorDim(w, 2), wic = TfLiteOpaqueTensorDim(w, 3);
  int32_t bc = TfLiteOpaqueTensorDim(b, 0);
  if (n <= 0 || h <= 0 || wd <= 0 || ic <= 0) {
    TF_LITE_OPAQUE_KERNEL_LOG(context,
                              "Convolution2DTransposeBias: data shape [%d,%d,%d,%d] must be positive",
                              n, h, wd, ic);
    return kTfLiteError;
  }
  if (oc <= 0 || kh <= 0 || kw <= 0) {
    TF_LITE_OPAQUE_KERNEL_LOG(context,
                              "Convolution2DTransposeBias: weights shape [%d,%d,%d,%d] must be positive",
                              oc, kh, kw, wic);
    return kTfLiteError;
  }
  if (wic != ic) {
    TF_LITE_OPAQUE_KERNEL_LOG(context,
                              "Convolution2DTransposeBias: weights have %d input channels (last "
                              "dim of OHWI) but data has %d",
                              wic, ic);
    return kTfLiteError;
  }
  if (bc != oc) {
    TF_LITE_OPAQUE_KERNEL_LOG(context,
                              "Convolution2DTransposeBias: bias has %d elements but weights have "
                              "%d output channels",
                              bc, oc);
    return kTfLiteError;
  }
  int same = d->padding == CTB_PADDING_SAME;
  int pad_top = 0, pad_left = 0;
  int64_t oh = CtbOutSize(h, kh, d->stride_h, same, &pad_top);
  int64_t ow = CtbOutSize(wd, kw, d->stride_w, same, &pad_left);
  if (oh < 0 || ow < 0 || (int64_t)n * oh * ow * oc > INT32_MAX / (int64_t)sizeof(float)) {
    TF_LITE_OPAQUE_KERNEL_LOG(context,
                              "Convolution2DTransposeBias: output size is too large (input %dx%d, "
                              "kernel %dx%d, strides %d,%d)",
                              h, wd, kh, kw, d->stride_h, d->stride_w);
    return kTfLiteError;
  }
  d->pad_top = pad_top;
  d->pad_left = pad_left;
  return oo_resize(context, out, 4, (const int[]){n, (int)oh, (int)ow, oc});
}

static TfLiteStatus CtbInvoke(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  const CtbData* d = (const CtbData*)TfLiteOpaqueNodeGetUserData(node);
  const TfLiteOpaqueTensor* in = TfLiteOpaqueNodeGetInput(context, node, 0);
  const TfLiteOpaqueTensor* w = TfLiteOpaqueNodeGetInput(context, node, 1);
  const TfLiteOpaqueTensor* b = TfLiteOpaqueNodeGetInput(context, node, 2);
  TfLiteOpaqueTensor* out = TfLiteOpaqueNodeGetOutput(context, node, 0);
  const float* x = (const float*)TfLiteOpaqueTensorData(in);
  const float* wt = (const float*)TfLiteOpaqueTensorData(w);
  const float* bias = (const float*)TfLiteOpaqueTensorData(b);
  float* y = (float*)TfLiteOpaqueTensorData(out);
  if (x == NULL || wt == NULL || bias == NULL || y == NULL) {
    TF_LITE_OPAQUE_KERNEL_LOG(context, "Convolution2DTransposeBias: a tensor has no data at Invoke");
    return kTfLiteError;
  }
  const int n = TfLiteOpaqueTensorDim(in, 0), ih = TfLiteOpaqueTensorDim(in, 1);
  const int iw = TfLiteOpaqueTensorDim(in, 2), ic = TfLiteOpaqueTensorDim(in, 3);
  const int oc = TfLiteOpaqueTensorDim(w, 0), kh = TfLiteOpaqueTensorDim(w, 1);
  const int kw = TfLiteOpaqueTensorDim(w, 2);
  const int oh = TfLiteOpaqueTensorDim(out, 1), ow = TfLiteOpaqueTensorDim(out, 2);
  const int sh = d->stride_h, sw = d->stride_w;
  const int pt = d->pad_top, pl = d->pad_left;

  /* Prepare bounds the output below 2 GiB; indexes are size_t so that
   * intermediate products never overflow int. */
  const size_t out_img = (size_t)oh * ow * oc;
  const size_t in_img = (size_t)ih * iw * ic;
  for (int bi = 0; bi < n; bi++) {
    float* yb = y + (size_t)bi * out_img;
    for (size_t p = 0; p < (size_t)oh * ow; p++) {
      memcpy(yb + p * oc, bias, (size_t)oc * sizeof(float));
    }
    const float* xb = x + (size_t)bi * in_img;
    for (int iy = 0; iy < ih; iy++) {
      for (int ix = 0; ix < iw; ix++) {
        const float* xp = xb + ((size_t)iy * iw + ix) * ic;
        for (int c = 0; c < ic; c++) {
          const float v = xp[c];
          for (int ky = 0; ky < kh; ky++) {
            const int oy = iy * sh - pt + ky;
            if (oy < 0 || oy >= oh) continue;
            for (int kx = 0; kx < kw; kx++) {
              const int ox = ix * sw - pl + kx;
              if (ox < 0 || ox >= ow) continue;
              float* yp = yb + ((size_t)oy * ow + ox) * oc;
              /* weights[o, ky, kx, c]: stride between output channels is
               * kh*kw*ic. */
              const float* wp = wt + ((size_t)ky * kw + kx) * ic + c;
              const size_t wstride = (size_t)kh * kw * ic;
              for (int o = 0; o < oc; o++) {
                yp[o] += v * wp[(size_t)o * wstride];
              }
            }
          }
        }
      }
    }
  }
  return kTfLiteOk;
}

OPAQUE_OP("Convolution2DTransposeBias", 1, .init = CtbInit, .free = CtbFree,
          .prepare = CtbPrepare, .invoke = CtbInvoke);
