/*
 * opaque_ops/rawopts.h -- read custom options stored as a raw C struct of
 * little-endian int32 fields (no FlexBuffer).
 *
 * Some producers put a plain struct in the custom-options bytes, e.g.
 * MediaPipe ops (12 bytes = 3 x int32) or a TfLitePoolParams copy (32 or 40
 * bytes, of which the first 6 int32 fields matter).  The bytes may be
 * unaligned and the host may be big-endian, so fields are assembled byte by
 * byte; no pointer is ever cast to int32_t*.
 *
 * C99, header-only, no allocation.  Return value: 0 on success, nonzero
 * (OO_RAW_ERR_*) on failure, in which case *out is left untouched.
 */
#ifndef OPAQUE_OPS_RAWOPTS_H_
#define OPAQUE_OPS_RAWOPTS_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  OO_RAW_OK = 0,
  OO_RAW_ERR_ARG = -2,   /* NULL pointer argument */
  OO_RAW_ERR_SHORT = -3  /* buffer too short for the requested field(s) */
};

static inline int32_t oo_raw__load_i32le(const uint8_t* p) {
  uint32_t u = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
               ((uint32_t)p[3] << 24);
  /* Two's-complement reinterpretation without implementation-defined casts. */
  if (u & 0x80000000u) return -(int32_t)(~u) - 1;
  return (int32_t)u;
}

/* Field `index` (0-based) of an int32 array; fails if 4*(index+1) > len. */
static inline int oo_raw_i32(const void* buf, size_t len, size_t index,
                             int32_t* out) {
  if (out == NULL || (buf == NULL && len != 0)) return OO_RAW_ERR_ARG;
  if (len / 4 <= index) return OO_RAW_ERR_SHORT; /* overflow-free form */
  *out = oo_raw__load_i32le((const uint8_t*)buf + index * 4);
  return OO_RAW_OK;
}

/* The first `count` int32 fields; requires len >= 4*count.  Extra trailing
 * bytes (e.g. padding or fields you do not need) are ignored. */
static inline int oo_raw_i32s(const void* buf, size_t len, int32_t* out,
                              size_t count) {
  size_t i;
  if ((out == NULL && count != 0) || (buf == NULL && len != 0))
    return OO_RAW_ERR_ARG;
  if (len / 4 < count) return OO_RAW_ERR_SHORT;
  for (i = 0; i < count; i++)
    out[i] = oo_raw__load_i32le((const uint8_t*)buf + i * 4);
  return OO_RAW_OK;
}

#ifdef __cplusplus
}
#endif

#endif /* OPAQUE_OPS_RAWOPTS_H_ */
