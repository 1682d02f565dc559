/*
 * opaque_ops/flex.h -- a small, bounds-checked, header-only FlexBuffers reader.
 *
 * Intended for TensorFlow Lite custom-operator kernels that need to parse the
 * custom options handed to `init(context, buffer, length)`.  Those bytes come
 * from the model file, so they are treated as untrusted: every read is checked
 * against [buf, buf + len) using overflow-safe arithmetic, and a malformed
 * buffer yields an error code, never an out-of-bounds read.
 *
 *   - C99, header-only, every function is `static inline`.
 *   - No allocation, no recursion, no libc beyond <string.h> (plus the
 *     freestanding <stddef.h>/<stdint.h>).
 *   - Values are read little-endian byte by byte; unaligned buffers are fine.
 *
 * Quick use in a kernel:
 *
 *   int64_t h; const char* pad; size_t pad_len; int64_t ks[4]; size_t nks;
 *   if (oo_flex_get_int(buffer, length, "output_height", &h) != OO_FLEX_OK) ...
 *   if (oo_flex_get_string(buffer, length, "padding", &pad, &pad_len) != 0) ...
 *   if (oo_flex_get_ints(buffer, length, "ksizes", ks, 4, &nks) != 0) ...
 *
 * Lower level: oo_flex_root() gives a reference to the root value; refs are
 * plain values (no ownership) that stay valid as long as the buffer does.
 *
 * Conversion rules (deliberately strict):
 *   oo_flex_as_int64  : INT, UINT (if <= INT64_MAX), INDIRECT_INT, INDIRECT_UINT,
 *                       BOOL (0/1).  FLOAT is rejected with OO_FLEX_ERR_TYPE.
 *   oo_flex_as_uint64 : as above; negative values give OO_FLEX_ERR_RANGE.
 *   oo_flex_as_double : FLOAT / INDIRECT_FLOAT (4 or 8 bytes wide; any other
 *                       width is OO_FLEX_ERR_MALFORMED), and integer types
 *                       (converted, may round above 2^53).
 *   oo_flex_as_bool   : BOOL, and integer types (nonzero == true).
 *   oo_flex_as_string : STRING or KEY.  The result is always NUL-terminated at
 *                       s[n] (a STRING whose trailing NUL is missing is
 *                       rejected); a STRING may contain embedded NULs, so trust n.
 *   oo_flex_as_blob   : BLOB (or STRING), raw bytes.
 */
#ifndef OPAQUE_OPS_FLEX_H_
#define OPAQUE_OPS_FLEX_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Value types (FlexBuffers type codes). */
enum {
  OO_FLEX_NULL = 0,
  OO_FLEX_INT = 1,
  OO_FLEX_UINT = 2,
  OO_FLEX_FLOAT = 3,
  OO_FLEX_KEY = 4,
  OO_FLEX_STRING = 5,
  OO_FLEX_INDIRECT_INT = 6,
  OO_FLEX_INDIRECT_UINT = 7,
  OO_FLEX_INDIRECT_FLOAT = 8,
  OO_FLEX_MAP = 9,
  OO_FLEX_VECTOR = 10,
  OO_FLEX_VECTOR_INT = 11,
  OO_FLEX_VECTOR_UINT = 12,
  OO_FLEX_VECTOR_FLOAT = 13,
  OO_FLEX_VECTOR_KEY = 14,
  OO_FLEX_VECTOR_STRING_DEPRECATED = 15,
  OO_FLEX_VECTOR_INT2 = 16,
  OO_FLEX_VECTOR_UINT2 = 17,
  OO_FLEX_VECTOR_FLOAT2 = 18,
  OO_FLEX_VECTOR_INT3 = 19,
  OO_FLEX_VECTOR_UINT3 = 20,
  OO_FLEX_VECTOR_FLOAT3 = 21,
  OO_FLEX_VECTOR_INT4 = 22,
  OO_FLEX_VECTOR_UINT4 = 23,
  OO_FLEX_VECTOR_FLOAT4 = 24,
  OO_FLEX_BLOB = 25,
  OO_FLEX_BOOL = 26,
  OO_FLEX_VECTOR_BOOL = 36
};

/* Status codes: 0 is success, everything else is negative. */
enum {
  OO_FLEX_OK = 0,
  OO_FLEX_NOT_FOUND = -1,     /* map has no such key */
  OO_FLEX_ERR_ARG = -2,       /* NULL pointer argument */
  OO_FLEX_ERR_BOUNDS = -3,    /* a read would leave [buf, buf+len) */
  OO_FLEX_ERR_MALFORMED = -4, /* bad width/type code, missing NUL, size mismatch */
  OO_FLEX_ERR_TYPE = -5,      /* value has the wrong type for this accessor */
  OO_FLEX_ERR_RANGE = -6,     /* value does not fit the requested C type */
  OO_FLEX_ERR_INDEX = -7,     /* vector index out of range */
  OO_FLEX_ERR_CAPACITY = -8   /* caller's output array is too small */
};

/* A reference to one value inside a buffer.  `pos` is the offset of the
 * value's slot (inline scalar or offset), `parent_width` the width of that
 * slot in bytes, `packed_type` is (type << 2) | log2(own byte width). */
typedef struct {
  const uint8_t* buf;
  size_t len;
  size_t pos;
  uint8_t parent_width;
  uint8_t packed_type;
} oo_flex_ref;

static inline const char* oo_flex_strerror(int code) {
  switch (code) {
    case OO_FLEX_OK: return "ok";
    case OO_FLEX_NOT_FOUND: return "key not found";
    case OO_FLEX_ERR_ARG: return "invalid argument";
    case OO_FLEX_ERR_BOUNDS: return "read out of bounds (truncated or corrupt buffer)";
    case OO_FLEX_ERR_MALFORMED: return "malformed flexbuffer";
    case OO_FLEX_ERR_TYPE: return "value has the wrong type";
    case OO_FLEX_ERR_RANGE: return "value out of range for the requested type";
    case OO_FLEX_ERR_INDEX: return "index out of range";
    case OO_FLEX_ERR_CAPACITY: return "output array too small";
    default: return "unknown error";
  }
}

/* ---------------------------------------------------------------- internals */

static inline int oo_flex__width_ok(uint64_t w) {
  return w == 1 || w == 2 || w == 4 || w == 8;
}

static inline unsigned oo_flex__width_code(unsigned w) {
  return w == 1 ? 0u : w == 2 ? 1u : w == 4 ? 2u : 3u;
}

/* Unsigned little-endian read of w (1/2/4/8) bytes at pos. */
static inline int oo_flex__read_u(const uint8_t* buf, size_t len, size_t pos,
                                  unsigned w, uint64_t* out) {
  uint64_t v = 0;
  unsigned i;
  if (!oo_flex__width_ok(w)) return OO_FLEX_ERR_MALFORMED;
  if (buf == NULL || w > len || pos > len - w) return OO_FLEX_ERR_BOUNDS;
  for (i = w; i-- > 0;) v = (v << 8) | buf[pos + i];
  *out = v;
  return OO_FLEX_OK;
}

/* Sign-extend a w-byte value to int64 without implementation-defined casts. */
static inline int64_t oo_flex__sext(uint64_t v, unsigned w) {
  if (w < 8) {
    uint64_t sign = (uint64_t)1 << (w * 8 - 1);
    if (v & sign) v |= ~((sign << 1) - 1);
  }
  if (v >> 63) return -(int64_t)(~v) - 1;
  return (int64_t)v;
}

static inline unsigned oo_flex__own_width(oo_flex_ref r) {
  return 1u << (r.packed_type & 3u);
}

/* Follow the offset stored in r's slot: target = pos - offset. */
static inline int oo_flex__indirect(oo_flex_ref r, size_t* target) {
  uint64_t off;
  int rc = oo_flex__read_u(r.buf, r.len, r.pos, r.parent_width, &off);
  if (rc) return rc;
  if (off > (uint64_t)r.pos) return OO_FLEX_ERR_BOUNDS;
  *target = r.pos - (size_t)off;
  return OO_FLEX_OK;
}

/* Where a scalar lives: inline in the slot, or behind an offset. */
static inline int oo_flex__scalar_loc(oo_flex_ref r, int indirect, size_t* pos,
                                      unsigned* w) {
  if (!indirect) {
    *pos = r.pos;
    *w = r.parent_width;
    return OO_FLEX_OK;
  }
  *w = oo_flex__own_width(r);
  return oo_flex__indirect(r, pos);
}

/* Vector layout: data offset, element count, element width, and either a
 * fixed element type (typed vectors) or -1 (per-element type bytes follow
 * the elements: untyped VECTOR and MAP). */
static inline int oo_flex__vector(oo_flex_ref r, size_t* data, size_t* n,
                                  unsigned* bw, int* etype) {
  int t = r.packed_type >> 2;
  unsigned w = oo_flex__own_width(r);
  uint64_t count, per;
  size_t d;
  int rc;
  if (t == OO_FLEX_VECTOR || t == OO_FLEX_MAP) {
    *etype = -1;
  } else if (t >= OO_FLEX_VECTOR_INT && t <= OO_FLEX_VECTOR_STRING_DEPRECATED) {
    *etype = t - OO_FLEX_VECTOR_INT + OO_FLEX_INT;
  } else if (t == OO_FLEX_VECTOR_BOOL) {
    *etype = OO_FLEX_BOOL;
  } else if (t >= OO_FLEX_VECTOR_INT2 && t <= OO_FLEX_VECTOR_FLOAT4) {
    *etype = (t - OO_FLEX_VECTOR_INT2) % 3 + OO_FLEX_INT;
  } else {
    return OO_FLEX_ERR_TYPE;
  }
  rc = oo_flex__indirect(r, &d);
  if (rc) return rc;
  if (t >= OO_FLEX_VECTOR_INT2 && t <= OO_FLEX_VECTOR_FLOAT4) {
    count = (uint64_t)((t - OO_FLEX_VECTOR_INT2) / 3 + 2);
  } else {
    if (w > d) return OO_FLEX_ERR_BOUNDS;
    rc = oo_flex__read_u(r.buf, r.len, d - w, w, &count);
    if (rc) return rc;
  }
  per = (uint64_t)w + (*etype < 0 ? 1u : 0u);
  /* d < len always holds here (d <= slot pos < len). */
  if (count > (uint64_t)(r.len - d) / per) return OO_FLEX_ERR_BOUNDS;
  *data = d;
  *n = (size_t)count;
  *bw = w;
  return OO_FLEX_OK;
}

/* Locate a map's keys vector; checks it is in bounds and as long as the map. */
static inline int oo_flex__map_keys(oo_flex_ref map, size_t* kdata,
                                    unsigned* kw, size_t* n) {
  size_t data, kpos;
  unsigned bw;
  int et, rc;
  uint64_t koff, kwidth, kn;
  if ((map.packed_type >> 2) != OO_FLEX_MAP) return OO_FLEX_ERR_TYPE;
  rc = oo_flex__vector(map, &data, n, &bw, &et);
  if (rc) return rc;
  if (data < 3u * bw) return OO_FLEX_ERR_BOUNDS;
  kpos = data - 3u * bw;
  rc = oo_flex__read_u(map.buf, map.len, kpos, bw, &koff);
  if (rc) return rc;
  rc = oo_flex__read_u(map.buf, map.len, data - 2u * bw, bw, &kwidth);
  if (rc) return rc;
  if (!oo_flex__width_ok(kwidth)) return OO_FLEX_ERR_MALFORMED;
  if (koff > (uint64_t)kpos) return OO_FLEX_ERR_BOUNDS;
  *kdata = kpos - (size_t)koff;
  *kw = (unsigned)kwidth;
  if (*kw > *kdata) return OO_FLEX_ERR_BOUNDS;
  rc = oo_flex__read_u(map.buf, map.len, *kdata - *kw, *kw, &kn);
  if (rc) return rc;
  if (kn != (uint64_t)*n) return OO_FLEX_ERR_MALFORMED;
  if (kn > (uint64_t)(map.len - *kdata) / *kw) return OO_FLEX_ERR_BOUNDS;
  return OO_FLEX_OK;
}

/* Position of the i-th key's first character. */
static inline int oo_flex__key_pos(const uint8_t* buf, size_t len, size_t kdata,
                                   unsigned kw, size_t i, size_t* kp) {
  uint64_t off;
  size_t slot = kdata + i * kw; /* caller guarantees i < n, n*kw <= len-kdata */
  int rc = oo_flex__read_u(buf, len, slot, kw, &off);
  if (rc) return rc;
  if (off > (uint64_t)slot) return OO_FLEX_ERR_BOUNDS;
  *kp = slot - (size_t)off;
  return OO_FLEX_OK;
}

/* NUL-terminated string at pos; *n gets its length. */
static inline int oo_flex__cstr(const uint8_t* buf, size_t len, size_t pos,
                                size_t* n) {
  const void* z;
  if (pos >= len) return OO_FLEX_ERR_BOUNDS;
  z = memchr(buf + pos, 0, len - pos);
  if (z == NULL) return OO_FLEX_ERR_MALFORMED;
  *n = (size_t)((const uint8_t*)z - (buf + pos));
  return OO_FLEX_OK;
}

/* strcmp(key, buffer string at pos) as -1/0/1, or an error code in *rc. */
static inline int oo_flex__keycmp(const char* key, const uint8_t* buf,
                                  size_t len, size_t pos, int* rc) {
  size_t j;
  *rc = OO_FLEX_OK;
  for (j = 0;; j++) {
    unsigned a = (unsigned char)key[j], b;
    if (pos >= len || j >= len - pos) {
      *rc = OO_FLEX_ERR_MALFORMED; /* key runs off the end: no NUL */
      return 0;
    }
    b = buf[pos + j];
    if (a != b) return a < b ? -1 : 1;
    if (a == 0) return 0;
  }
}

/* ---------------------------------------------------------------- public API */

/* Reference to the root value (stored at the end of the buffer). */
static inline int oo_flex_root(const void* buf, size_t len, oo_flex_ref* out) {
  const uint8_t* b = (const uint8_t*)buf;
  uint8_t w;
  if (out == NULL || (buf == NULL && len != 0)) return OO_FLEX_ERR_ARG;
  if (len < 3) return OO_FLEX_ERR_BOUNDS;
  w = b[len - 1];
  if (!oo_flex__width_ok(w)) return OO_FLEX_ERR_MALFORMED;
  if ((size_t)w > len - 2) return OO_FLEX_ERR_BOUNDS;
  out->buf = b;
  out->len = len;
  out->pos = len - 2 - w;
  out->parent_width = w;
  out->packed_type = b[len - 2];
  return OO_FLEX_OK;
}

/* The value's type (OO_FLEX_INT, ...), or OO_FLEX_ERR_MALFORMED for an
 * unknown type code. */
static inline int oo_flex_type(oo_flex_ref r) {
  int t = r.packed_type >> 2;
  if (t <= OO_FLEX_BOOL || t == OO_FLEX_VECTOR_BOOL) return t;
  return OO_FLEX_ERR_MALFORMED;
}

static inline int oo_flex_as_uint64(oo_flex_ref r, uint64_t* out);

static inline int oo_flex_as_int64(oo_flex_ref r, int64_t* out) {
  int t = r.packed_type >> 2, rc;
  size_t pos;
  unsigned w;
  uint64_t v;
  if (out == NULL) return OO_FLEX_ERR_ARG;
  if (t == OO_FLEX_INT || t == OO_FLEX_INDIRECT_INT) {
    rc = oo_flex__scalar_loc(r, t == OO_FLEX_INDIRECT_INT, &pos, &w);
    if (rc) return rc;
    rc = oo_flex__read_u(r.buf, r.len, pos, w, &v);
    if (rc) return rc;
    *out = oo_flex__sext(v, w);
    return OO_FLEX_OK;
  }
  if (t == OO_FLEX_UINT || t == OO_FLEX_INDIRECT_UINT || t == OO_FLEX_BOOL) {
    rc = oo_flex_as_uint64(r, &v);
    if (rc) return rc;
    if (v > (uint64_t)INT64_MAX) return OO_FLEX_ERR_RANGE;
    *out = (int64_t)v;
    return OO_FLEX_OK;
  }
  return OO_FLEX_ERR_TYPE;
}

static inline int oo_flex_as_uint64(oo_flex_ref r, uint64_t* out) {
  int t = r.packed_type >> 2, rc;
  size_t pos;
  unsigned w;
  uint64_t v;
  if (out == NULL) return OO_FLEX_ERR_ARG;
  if (t == OO_FLEX_UINT || t == OO_FLEX_INDIRECT_UINT || t == OO_FLEX_BOOL) {
    rc = oo_flex__scalar_loc(r, t == OO_FLEX_INDIRECT_UINT, &pos, &w);
    if (rc) return rc;
    rc = oo_flex__read_u(r.buf, r.len, pos, w, &v);
    if (rc) return rc;
    *out = (t == OO_FLEX_BOOL) ? (v != 0) : v;
    return OO_FLEX_OK;
  }
  if (t == OO_FLEX_INT || t == OO_FLEX_INDIRECT_INT) {
    int64_t s;
    rc = oo_flex_as_int64(r, &s);
    if (rc) return rc;
    if (s < 0) return OO_FLEX_ERR_RANGE;
    *out = (uint64_t)s;
    return OO_FLEX_OK;
  }
  return OO_FLEX_ERR_TYPE;
}

static inline int oo_flex_as_double(oo_flex_ref r, double* out) {
  int t = r.packed_type >> 2, rc;
  size_t pos;
  unsigned w;
  uint64_t v;
  if (out == NULL) return OO_FLEX_ERR_ARG;
  if (t == OO_FLEX_FLOAT || t == OO_FLEX_INDIRECT_FLOAT) {
    rc = oo_flex__scalar_loc(r, t == OO_FLEX_INDIRECT_FLOAT, &pos, &w);
    if (rc) return rc;
    if (w != 4 && w != 8) return OO_FLEX_ERR_MALFORMED;
    rc = oo_flex__read_u(r.buf, r.len, pos, w, &v);
    if (rc) return rc;
    if (w == 4) {
      uint32_t u = (uint32_t)v;
      float f;
      memcpy(&f, &u, sizeof f);
      *out = (double)f;
    } else {
      memcpy(out, &v, sizeof *out);
    }
    return OO_FLEX_OK;
  }
  if (t == OO_FLEX_INT || t == OO_FLEX_INDIRECT_INT) {
    int64_t s;
    rc = oo_flex_as_int64(r, &s);
    if (rc) return rc;
    *out = (double)s;
    return OO_FLEX_OK;
  }
  if (t == OO_FLEX_UINT || t == OO_FLEX_INDIRECT_UINT) {
    rc = oo_flex_as_uint64(r, &v);
    if (rc) return rc;
    *out = (double)v;
    return OO_FLEX_OK;
  }
  return OO_FLEX_ERR_TYPE;
}

static inline int oo_flex_as_bool(oo_flex_ref r, int* out) {
  int t = r.packed_type >> 2, rc;
  uint64_t v;
  if (out == NULL) return OO_FLEX_ERR_ARG;
  if (t == OO_FLEX_BOOL || t == OO_FLEX_UINT || t == OO_FLEX_INDIRECT_UINT) {
    rc = oo_flex_as_uint64(r, &v);
    if (rc) return rc;
    *out = v != 0;
    return OO_FLEX_OK;
  }
  if (t == OO_FLEX_INT || t == OO_FLEX_INDIRECT_INT) {
    int64_t s;
    rc = oo_flex_as_int64(r, &s);
    if (rc) return rc;
    *out = s != 0;
    return OO_FLEX_OK;
  }
  return OO_FLEX_ERR_TYPE;
}

/* STRING or KEY.  *s is NUL-terminated at (*s)[*n]. */
static inline int oo_flex_as_string(oo_flex_ref r, const char** s, size_t* n) {
  int t = r.packed_type >> 2, rc;
  size_t d;
  if (s == NULL || n == NULL) return OO_FLEX_ERR_ARG;
  if (t != OO_FLEX_STRING && t != OO_FLEX_KEY) return OO_FLEX_ERR_TYPE;
  rc = oo_flex__indirect(r, &d);
  if (rc) return rc;
  if (t == OO_FLEX_KEY) {
    rc = oo_flex__cstr(r.buf, r.len, d, n);
    if (rc) return rc;
  } else {
    unsigned w = oo_flex__own_width(r);
    uint64_t sz;
    if (w > d) return OO_FLEX_ERR_BOUNDS;
    rc = oo_flex__read_u(r.buf, r.len, d - w, w, &sz);
    if (rc) return rc;
    if (sz >= (uint64_t)(r.len - d)) return OO_FLEX_ERR_BOUNDS; /* + NUL */
    if (r.buf[d + (size_t)sz] != 0) return OO_FLEX_ERR_MALFORMED;
    *n = (size_t)sz;
  }
  *s = (const char*)(r.buf + d);
  return OO_FLEX_OK;
}

/* BLOB (or STRING, without its NUL): raw bytes. */
static inline int oo_flex_as_blob(oo_flex_ref r, const uint8_t** p, size_t* n) {
  int t = r.packed_type >> 2, rc;
  size_t d;
  unsigned w = oo_flex__own_width(r);
  uint64_t sz;
  if (p == NULL || n == NULL) return OO_FLEX_ERR_ARG;
  if (t != OO_FLEX_BLOB && t != OO_FLEX_STRING) return OO_FLEX_ERR_TYPE;
  rc = oo_flex__indirect(r, &d);
  if (rc) return rc;
  if (w > d) return OO_FLEX_ERR_BOUNDS;
  rc = oo_flex__read_u(r.buf, r.len, d - w, w, &sz);
  if (rc) return rc;
  if (sz > (uint64_t)(r.len - d)) return OO_FLEX_ERR_BOUNDS;
  *p = r.buf + d;
  *n = (size_t)sz;
  return OO_FLEX_OK;
}

/* Element count of VECTOR, MAP (its values), VECTOR_<T>, VECTOR_<T><N>,
 * VECTOR_BOOL. */
static inline int oo_flex_vector_size(oo_flex_ref r, size_t* n) {
  size_t d;
  unsigned bw;
  int et;
  if (n == NULL) return OO_FLEX_ERR_ARG;
  return oo_flex__vector(r, &d, n, &bw, &et);
}

/* Element i of a vector (or value i of a map). */
static inline int oo_flex_vector_at(oo_flex_ref r, size_t i, oo_flex_ref* out) {
  size_t d, n;
  unsigned bw;
  int et, rc;
  if (out == NULL) return OO_FLEX_ERR_ARG;
  rc = oo_flex__vector(r, &d, &n, &bw, &et);
  if (rc) return rc;
  if (i >= n) return OO_FLEX_ERR_INDEX;
  out->buf = r.buf;
  out->len = r.len;
  out->pos = d + i * bw; /* in bounds: n * bw <= len - d was checked */
  out->parent_width = (uint8_t)bw;
  if (et < 0)
    out->packed_type = r.buf[d + n * bw + i];
  else
    out->packed_type = (uint8_t)(((unsigned)et << 2) | oo_flex__width_code(bw));
  return OO_FLEX_OK;
}

/* Key i of a map (keys are sorted; value i belongs to key i). */
static inline int oo_flex_map_key_at(oo_flex_ref map, size_t i, const char** s,
                                     size_t* n) {
  size_t kdata, count, kp;
  unsigned kw;
  int rc;
  if (s == NULL || n == NULL) return OO_FLEX_ERR_ARG;
  rc = oo_flex__map_keys(map, &kdata, &kw, &count);
  if (rc) return rc;
  if (i >= count) return OO_FLEX_ERR_INDEX;
  rc = oo_flex__key_pos(map.buf, map.len, kdata, kw, i, &kp);
  if (rc) return rc;
  rc = oo_flex__cstr(map.buf, map.len, kp, n);
  if (rc) return rc;
  *s = (const char*)(map.buf + kp);
  return OO_FLEX_OK;
}

/* Binary search for `key` (NUL-terminated) in a map.  On corrupt, unsorted
 * keys the search stays in bounds and may report OO_FLEX_NOT_FOUND. */
static inline int oo_flex_map_lookup(oo_flex_ref map, const char* key,
                                     oo_flex_ref* out) {
  size_t kdata, n, lo, hi;
  unsigned kw;
  int rc;
  if (key == NULL || out == NULL) return OO_FLEX_ERR_ARG;
  rc = oo_flex__map_keys(map, &kdata, &kw, &n);
  if (rc) return rc;
  lo = 0;
  hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2, kp;
    int c;
    rc = oo_flex__key_pos(map.buf, map.len, kdata, kw, mid, &kp);
    if (rc) return rc;
    c = oo_flex__keycmp(key, map.buf, map.len, kp, &rc);
    if (rc) return rc;
    if (c == 0) return oo_flex_vector_at(map, mid, out);
    if (c < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return OO_FLEX_NOT_FOUND;
}

/* ------------------------------------------------------------ conveniences */

/* Root must be a map; look up `key` in it. */
static inline int oo_flex_get(const void* buf, size_t len, const char* key,
                              oo_flex_ref* out) {
  oo_flex_ref root;
  int rc = oo_flex_root(buf, len, &root);
  if (rc) return rc;
  return oo_flex_map_lookup(root, key, out);
}

static inline int oo_flex_get_int(const void* buf, size_t len, const char* key,
                                  int64_t* out) {
  oo_flex_ref v;
  int rc = oo_flex_get(buf, len, key, &v);
  return rc ? rc : oo_flex_as_int64(v, out);
}

static inline int oo_flex_get_double(const void* buf, size_t len,
                                     const char* key, double* out) {
  oo_flex_ref v;
  int rc = oo_flex_get(buf, len, key, &v);
  return rc ? rc : oo_flex_as_double(v, out);
}

static inline int oo_flex_get_bool(const void* buf, size_t len, const char* key,
                                   int* out) {
  oo_flex_ref v;
  int rc = oo_flex_get(buf, len, key, &v);
  return rc ? rc : oo_flex_as_bool(v, out);
}

static inline int oo_flex_get_string(const void* buf, size_t len,
                                     const char* key, const char** s,
                                     size_t* n) {
  oo_flex_ref v;
  int rc = oo_flex_get(buf, len, key, &v);
  return rc ? rc : oo_flex_as_string(v, s, n);
}

/* Shared body of the two vector getters: look the key up, check the length
 * against cap, then convert element i with `conv` into slot i of `out`
 * (elements of `elem_size` bytes). */
static inline int oo_flex__get_vector(const void* buf, size_t len, const char* key,
                                      void* out, size_t elem_size, size_t cap, size_t* n,
                                      int (*conv)(oo_flex_ref, void*)) {
  oo_flex_ref v, e;
  size_t i, count;
  int rc;
  if (n == NULL || (out == NULL && cap != 0)) return OO_FLEX_ERR_ARG;
  rc = oo_flex_get(buf, len, key, &v);
  if (rc) return rc;
  rc = oo_flex_vector_size(v, &count);
  if (rc) return rc;
  *n = count;
  if (count > cap) return OO_FLEX_ERR_CAPACITY;
  for (i = 0; i < count; i++) {
    rc = oo_flex_vector_at(v, i, &e);
    if (rc) return rc;
    rc = conv(e, (unsigned char*)out + i * elem_size);
    if (rc) return rc;
  }
  return OO_FLEX_OK;
}

static inline int oo_flex__conv_int64(oo_flex_ref r, void* out) {
  return oo_flex_as_int64(r, (int64_t*)out);
}

static inline int oo_flex__conv_double(oo_flex_ref r, void* out) {
  return oo_flex_as_double(r, (double*)out);
}

/* Copy an integer vector (any vector kind whose elements all convert with
 * oo_flex_as_int64) into out[0..cap).  *n receives the vector's length even
 * when OO_FLEX_ERR_CAPACITY is returned; out may be NULL if cap == 0. */
static inline int oo_flex_get_ints(const void* buf, size_t len, const char* key,
                                   int64_t* out, size_t cap, size_t* n) {
  return oo_flex__get_vector(buf, len, key, out, sizeof *out, cap, n, oo_flex__conv_int64);
}

/* Same for numbers as doubles (float and integer elements accepted). */
static inline int oo_flex_get_floats(const void* buf, size_t len,
                                     const char* key, double* out, size_t cap,
                                     size_t* n) {
  return oo_flex__get_vector(buf, len, key, out, sizeof *out, cap, n, oo_flex__conv_double);
}

#ifdef __cplusplus
}
#endif

#endif /* OPAQUE_OPS_FLEX_H_ */
