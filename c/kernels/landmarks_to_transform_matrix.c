/* Landmarks2TransformMatrix v2 (MediaPipe face attention mesh).
 *
 * Input:  landmarks [1, N, 3] float32.   Output: [1, 4, 4] float32 (row-major).
 * Options (flexbuffer map): subset_idxs (int vector, read as pairs; an odd
 * count repeats the last index), left_rotation_idx, right_rotation_idx,
 * output_height, output_width (ints), target_rotation_radians, scale_x,
 * scale_y (floats).
 *
 *   r  = target - atan2(yR - yL, xR - xL)
 *   rotate the subset points by R(r), take their axis-aligned box there
 *   (size w x h, centre c'), rotate the centre back: c = R(-r) c'
 *   M  = T(c) . Rot(-r) . S(scale_x w / out_w, scale_y h / out_h) . T(-out_w/2, -out_h/2)
 *
 * The arithmetic is float32, in the order MediaPipe's kernel uses (4x4
 * products accumulated left to right), so results agree to rounding.
 * Only v2 is provided: v1 has a different options schema (input_hw,
 * landmarks_range, ...) that no model at hand uses, so it could not be verified.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opaque_ops.h"
#include "opaque_ops/flex.h"
#include "opaque_ops/kernel_util.h"

#define L2T_OP "Landmarks2TransformMatrix"

typedef struct {
  OoOptsStatus opts;
  int left, right, out_h, out_w;
  float target, scale_x, scale_y;
  int n_idx;    /* entries in idx (always even: pairs) */
  int max_idx;  /* largest landmark index used, checked against N in Prepare */
  int32_t* idx;
} L2tData;

static int L2tInt(L2tData* d, const char* buf, size_t len, const char* key, int lo, int* out) {
  int64_t v = 0;
  int rc = oo_flex_get_int(buf, len, key, &v);
  if (rc != OO_FLEX_OK) {
    oo_opts_fail(&d->opts, L2T_OP, "option '%s': %s", key, oo_flex_strerror(rc));
    return 0;
  }
  if (v < lo || v > 0x7fffffff) {
    oo_opts_fail(&d->opts, L2T_OP, "option '%s' must be >= %d, got %lld", key, lo, (long long)v);
    return 0;
  }
  *out = (int)v;
  return 1;
}

static int L2tFloat(L2tData* d, const char* buf, size_t len, const char* key, int positive,
                    float* out) {
  double v = 0;
  int rc = oo_flex_get_double(buf, len, key, &v);
  if (rc != OO_FLEX_OK) {
    oo_opts_fail(&d->opts, L2T_OP, "option '%s': %s", key, oo_flex_strerror(rc));
    return 0;
  }
  if (!isfinite(v) || fabs(v) > 3.0e38 || (positive && !(v > 0))) {
    oo_opts_fail(&d->opts, L2T_OP, "option '%s' must be a %s float, got %g", key,
                 positive ? "positive finite" : "finite", v);
    return 0;
  }
  *out = (float)v;
  return 1;
}

static int L2tSubset(L2tData* d, const char* buf, size_t len) {
  oo_flex_ref vec, e;
  size_t n, i;
  int rc = oo_flex_get(buf, len, "subset_idxs", &vec);
  if (rc == OO_FLEX_OK) rc = oo_flex_vector_size(vec, &n);
  if (rc != OO_FLEX_OK) {
    oo_opts_fail(&d->opts, L2T_OP, "option 'subset_idxs': %s", oo_flex_strerror(rc));
    return 0;
  }
  if (n == 0) {
    oo_opts_fail(&d->opts, L2T_OP, "option 'subset_idxs' is empty");
    return 0;
  }
  /* n is bounded by the options length (every element takes >= 1 byte). */
  if (n > len) return 0;
  d->n_idx = (int)(n + (n & 1));
  d->idx = (int32_t*)malloc(sizeof(int32_t) * (size_t)d->n_idx);
  if (d->idx == NULL) {
    oo_opts_fail(&d->opts, L2T_OP, "out of memory");
    return 0;
  }
  for (i = 0; i < n; i++) {
    int64_t v = 0;
    rc = oo_flex_vector_at(vec, i, &e);
    if (rc == OO_FLEX_OK) rc = oo_flex_as_int64(e, &v);
    if (rc != OO_FLEX_OK) {
      oo_opts_fail(&d->opts, L2T_OP, "subset_idxs[%zu]: %s", i, oo_flex_strerror(rc));
      return 0;
    }
    if (v < 0 || v > 0x7fffffff) {
      oo_opts_fail(&d->opts, L2T_OP, "subset_idxs[%zu] = %lld is not a valid index", i,
                   (long long)v);
      return 0;
    }
    d->idx[i] = (int32_t)v;
    if (d->idx[i] > d->max_idx) d->max_idx = d->idx[i];
  }
  if (n & 1) d->idx[n] = d->idx[n - 1]; /* odd count: last index pairs with itself */
  return 1;
}

static void* L2tInit(TfLiteOpaqueContext* context, const char* buffer, size_t length) {
  L2tData* d = (L2tData*)calloc(1, sizeof *d);
  (void)context;
  if (d == NULL) return NULL;
  if (buffer == NULL || length == 0) {
    oo_opts_fail(&d->opts, L2T_OP, "missing custom options");
    return d;
  }
  if (!L2tInt(d, buffer, length, "left_rotation_idx", 0, &d->left)) return d;
  if (!L2tInt(d, buffer, length, "right_rotation_idx", 0, &d->right)) return d;
  if (!L2tInt(d, buffer, length, "output_height", 1, &d->out_h)) return d;
  if (!L2tInt(d, buffer, length, "output_width", 1, &d->out_w)) return d;
  if (!L2tFloat(d, buffer, length, "target_rotation_radians", 0, &d->target)) return d;
  if (!L2tFloat(d, buffer, length, "scale_x", 1, &d->scale_x)) return d;
  if (!L2tFloat(d, buffer, length, "scale_y", 1, &d->scale_y)) return d;
  if (!L2tSubset(d, buffer, length)) {
    /* Only reached without a message when the vector claims more elements
     * than the buffer holds; otherwise the first message stands. */
    oo_opts_fail(&d->opts, L2T_OP, "malformed subset_idxs");
    return d;
  }
  if (d->left > d->max_idx) d->max_idx = d->left;
  if (d->right > d->max_idx) d->max_idx = d->right;
  return d;
}

static void L2tFree(TfLiteOpaqueContext* context, void* data) {
  L2tData* d = (L2tData*)data;
  (void)context;
  if (d != NULL) free(d->idx);
  free(d);
}

static TfLiteStatus L2tPrepare(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  const L2tData* d = (const L2tData*)TfLiteOpaqueNodeGetUserData(node);
  const TfLiteOpaqueTensor* in;
  TfLiteOpaqueTensor* out;
  TF_LITE_OPAQUE_ENSURE_STATUS(oo_opts_check(context, L2T_OP, d ? &d->opts : NULL));
  TF_LITE_OPAQUE_ENSURE_STATUS(oo_check_io(context, L2T_OP, node, 1, 1));
  in = TfLiteOpaqueNodeGetInput(context, node, 0);
  out = TfLiteOpaqueNodeGetOutput(context, node, 0);
  TF_LITE_OPAQUE_ENSURE(context, in != NULL && out != NULL);
  TF_LITE_OPAQUE_ENSURE_STATUS(oo_check_float32(context, L2T_OP, "tensors",
                                                (const TfLiteOpaqueTensor*[]){in, out}, 2));
  if (TfLiteOpaqueTensorNumDims(in) != 3 || TfLiteOpaqueTensorDim(in, 0) != 1 ||
      TfLiteOpaqueTensorDim(in, 2) != 3) {
    TF_LITE_OPAQUE_KERNEL_LOG(context, "Landmarks2TransformMatrix: input must have shape [1, N, 3]");
    return kTfLiteError;
  }
  if (d->max_idx >= TfLiteOpaqueTensorDim(in, 1)) {
    TF_LITE_OPAQUE_KERNEL_LOG(context,
                              "Landmarks2TransformMatrix: landmark index %d out of range for %d "
                              "landmarks",
                              d->max_idx, (int)TfLiteOpaqueTensorDim(in, 1));
    return kTfLiteError;
  }
  return oo_resize(context, out, 3, (const int[]){1, 4, 4});
}

/* a = a * b for row-major 4x4, each entry summed k = 0..3 from 0. */
static void L2tMul4(float* a, const float* b) {
  float r[16];
  int i, j, k;
  for (i = 0; i < 4; i++)
    for (j = 0; j < 4; j++) {
      float s = 0.0f;
      for (k = 0; k < 4; k++) s += a[i * 4 + k] * b[k * 4 + j];
      r[i * 4 + j] = s;
    }
  memcpy(a, r, sizeof r);
}

static TfLiteStatus L2tInvoke(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  const L2tData* d = (const L2tData*)TfLiteOpaqueNodeGetUserData(node);
  const float* lm = (const float*)TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetInput(context, node, 0));
  float* out = (float*)TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetOutput(context, node, 0));
  float rot, c, s, ci, si, minx = 0, maxx = 0, miny = 0, maxy = 0, mx, my, cx, cy, w, h;
  float t[16] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  float step[16];
  int i;
  TF_LITE_OPAQUE_ENSURE(context, d != NULL && lm != NULL && out != NULL);
  {
    const float* l = lm + (size_t)d->left * 3;
    const float* r = lm + (size_t)d->right * 3;
    rot = d->target - atan2f(r[1] - l[1], r[0] - l[0]);
  }
  c = cosf(rot);
  s = sinf(rot);
  for (i = 0; i < d->n_idx; i++) {
    const float* p = lm + (size_t)d->idx[i] * 3;
    /* Row of R(r) times (x, y, 1), accumulated from 0 like a 3x3 product. */
    const float x = ((0.0f + c * p[0]) + (-s) * p[1]) + 0.0f * 1.0f;
    const float y = ((0.0f + s * p[0]) + c * p[1]) + 0.0f * 1.0f;
    if (i == 0) {
      minx = maxx = x;
      miny = maxy = y;
    } else {
      if (maxx < x) maxx = x;
      if (maxy < y) maxy = y;
      if (minx > x) minx = x;
      if (miny > y) miny = y;
    }
  }
  w = maxx - minx;
  h = maxy - miny;
  mx = (minx + maxx) / 2;
  my = (miny + maxy) / 2;
  ci = cosf(-rot);
  si = sinf(-rot);
  cx = ((0.0f + ci * mx) + (-si) * my) + 0.0f * 1.0f;
  cy = ((0.0f + si * mx) + ci * my) + 0.0f * 1.0f;

  /* T(c) */
  memcpy(step, t, sizeof step);
  step[3] = cx;
  step[7] = cy;
  L2tMul4(t, step);
  /* Rot(-r) */
  {
    const float rc = cosf(-rot), rs = sinf(-rot);
    float m[16] = {rc, -rs, 0, 0, rs, rc, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
    L2tMul4(t, m);
  }
  /* S(scale_x w / out_w, scale_y h / out_h) */
  {
    float m[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
    m[0] = d->scale_x * w / (float)d->out_w;
    m[5] = d->scale_y * h / (float)d->out_h;
    L2tMul4(t, m);
  }
  /* T(-out_w/2, -out_h/2) */
  {
    float m[16] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
    m[3] = (float)(-1.0 * (d->out_w / 2.0));
    m[7] = (float)(-1.0 * (d->out_h / 2.0));
    L2tMul4(t, m);
  }
  memcpy(out, t, sizeof t);
  return kTfLiteOk;
}

OPAQUE_OP("Landmarks2TransformMatrix", 2, .init = L2tInit, .free = L2tFree, .prepare = L2tPrepare,
          .invoke = L2tInvoke);
