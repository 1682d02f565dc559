"""The C text that ``opaque-ops scaffold`` writes: one kernel file per op.

Kept apart from :mod:`opaque_ops.cli.scaffold` (which gathers the model's
facts and writes the project) because it is mostly C: the helpers every
generated file carries, and the generator of each op's options struct,
Init, Free, Prepare and Invoke.  Every generated file is self-contained
(static inline helpers only), so one file is one library and its digest in a
wheel's manifest covers all of its code.
"""

from __future__ import annotations

import re

# How many entries of a vector the "not implemented yet" message shows.
SHOW = 8

# TFLite tensor type names (schema) -> the C enum of opaque_ops.h.
C_TYPES = {
    "FLOAT32": "kTfLiteFloat32",
    "INT32": "kTfLiteInt32",
    "UINT8": "kTfLiteUInt8",
    "INT64": "kTfLiteInt64",
    "STRING": "kTfLiteString",
    "BOOL": "kTfLiteBool",
    "INT16": "kTfLiteInt16",
    "COMPLEX64": "kTfLiteComplex64",
    "INT8": "kTfLiteInt8",
    "FLOAT16": "kTfLiteFloat16",
    "FLOAT64": "kTfLiteFloat64",
    "COMPLEX128": "kTfLiteComplex128",
    "UINT64": "kTfLiteUInt64",
    "RESOURCE": "kTfLiteResource",
    "VARIANT": "kTfLiteVariant",
    "UINT32": "kTfLiteUInt32",
    "UINT16": "kTfLiteUInt16",
    "INT4": "kTfLiteInt4",
    "BFLOAT16": "kTfLiteBFloat16",
}

# ------------------------------------------------------------ C helpers --

HELPERS = r"""
#define OO_SC_SHOW @SHOW@ /* vector entries shown in messages */

/* Appends printf-style text to msg[0..cap); what does not fit is dropped. */
static inline void oo_sc_append(char* msg, size_t cap, size_t* pos, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static inline void oo_sc_append(char* msg, size_t cap, size_t* pos, const char* fmt, ...) {
  va_list ap;
  int n;
  if (*pos >= cap) return;
  va_start(ap, fmt);
  n = vsnprintf(msg + *pos, cap - *pos, fmt, ap);
  va_end(ap);
  if (n > 0) *pos = (size_t)n >= cap - *pos ? cap : *pos + (size_t)n;
}

/* " [a, b, ...]" of a vector, its first OO_SC_SHOW entries. */
static inline void oo_sc_append_ints(char* msg, size_t cap, size_t* pos, const int64_t* v, size_t n,
                                     int as_bool) {
  size_t i;
  oo_sc_append(msg, cap, pos, "[");
  for (i = 0; i < n && i < OO_SC_SHOW; ++i) {
    if (as_bool)
      oo_sc_append(msg, cap, pos, "%s%s", i ? ", " : "", v[i] ? "true" : "false");
    else
      oo_sc_append(msg, cap, pos, "%s%lld", i ? ", " : "", (long long)v[i]);
  }
  if (n > OO_SC_SHOW) oo_sc_append(msg, cap, pos, ", ... (%zu values)", n);
  oo_sc_append(msg, cap, pos, "]");
}

static inline void oo_sc_append_doubles(char* msg, size_t cap, size_t* pos, const double* v, size_t n) {
  size_t i;
  oo_sc_append(msg, cap, pos, "[");
  for (i = 0; i < n && i < OO_SC_SHOW; ++i) oo_sc_append(msg, cap, pos, "%s%g", i ? ", " : "", v[i]);
  if (n > OO_SC_SHOW) oo_sc_append(msg, cap, pos, ", ... (%zu values)", n);
  oo_sc_append(msg, cap, pos, "]");
}

static inline void oo_sc_append_strings(char* msg, size_t cap, size_t* pos, const char* const* v,
                                        size_t n) {
  size_t i;
  oo_sc_append(msg, cap, pos, "[");
  for (i = 0; i < n && i < OO_SC_SHOW; ++i) oo_sc_append(msg, cap, pos, "%s%s", i ? ", " : "", v[i]);
  if (n > OO_SC_SHOW) oo_sc_append(msg, cap, pos, ", ... (%zu values)", n);
  oo_sc_append(msg, cap, pos, "]");
}

/* ---- tensor shapes: what Prepare accepts (the rule: opaque_ops/cli/scaffold.py, _shape_rule) ---- */

/* What a shape message tells the author to do. */
#define OO_SC_FIXED_HOW                                                     \
  "this kernel sets its outputs to the shapes the model records; derive " \
  "them from the inputs in Prepare to take other shapes"
#define OO_SC_FOLLOW_HOW                                                         \
  "this kernel gives its outputs the shape of input 0 and takes other sizes " \
  "only in the dims the model marks -1; derive the outputs' shapes from the "  \
  "inputs in Prepare to take other shapes"

/* Input `index` of the node, or NULL where it has none: omitted (-1), or at or past the node's
   input count (nodes of one op may have different counts: a trailing optional input left out
   entirely).  The count is checked here because c_api_opaque.h promises nothing for an index
   past it; upstream's TfLiteOpaqueNodeGetInput does answer NULL there (tflite::GetInput's index
   check), but a kernel should not read past the node's inputs on the strength of that. */
static inline const TfLiteOpaqueTensor* oo_sc_input(const TfLiteOpaqueContext* context,
                                                    const TfLiteOpaqueNode* node, int index) {
  if (index < 0 || index >= TfLiteOpaqueNodeNumberOfInputs(node)) return NULL;
  return TfLiteOpaqueNodeGetInput(context, node, index);
}

/* The node must have n_min to n_max inputs (the counts of the model's nodes) and n_out outputs. */
static inline TfLiteStatus oo_sc_check_io_range(TfLiteOpaqueContext* context, const TfLiteOpaqueNode* node,
                                                int n_min, int n_max, int n_out) {
  int got_in = TfLiteOpaqueNodeNumberOfInputs(node), got_out = TfLiteOpaqueNodeNumberOfOutputs(node);
  if (got_in >= n_min && got_in <= n_max && got_out == n_out) return kTfLiteOk;
  TfLiteOpaqueContextReportError(context,
                                 "%s: needs %d to %d inputs (the model's nodes have that many) and %d output%s, "
                                 "got %d and %d",
                                 OP_NAME, n_min, n_max, n_out, n_out == 1 ? "" : "s", got_in, got_out);
  return kTfLiteError;
}

/* 1 when `t` has rank `rank` and dims[i] in each dim (a -1 in dims: any size). */
static inline int oo_sc_has_shape(const TfLiteOpaqueTensor* t, int rank, const int* dims) {
  int i;
  if (t == NULL || TfLiteOpaqueTensorNumDims(t) != rank) return 0;
  for (i = 0; i < rank; ++i)
    if (dims[i] >= 0 && TfLiteOpaqueTensorDim(t, i) != dims[i]) return 0;
  return 1;
}

/* "[a, b]": the current shape of `t`; "omitted" for NULL (an input the node leaves out). */
static inline void oo_sc_append_shape(char* msg, size_t cap, size_t* pos, const TfLiteOpaqueTensor* t) {
  int i, rank;
  if (t == NULL) {
    oo_sc_append(msg, cap, pos, "omitted");
    return;
  }
  rank = TfLiteOpaqueTensorNumDims(t);
  oo_sc_append(msg, cap, pos, "[");
  for (i = 0; i < rank; ++i) oo_sc_append(msg, cap, pos, "%s%d", i ? ", " : "", (int)TfLiteOpaqueTensorDim(t, i));
  oo_sc_append(msg, cap, pos, "]");
}

/* Input `index` must have the shape `dims` (`records`: the same, as the message shows it).
   The outputs were sized for it: a larger input would let Invoke write past them. */
static inline TfLiteStatus oo_sc_check_input(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node, int index,
                                             int rank, const int* dims, const char* records, const char* how) {
  const TfLiteOpaqueTensor* t = oo_sc_input(context, node, index);
  char msg[512];
  size_t pos = 0;
  if (oo_sc_has_shape(t, rank, dims)) return kTfLiteOk;
  oo_sc_append(msg, sizeof msg, &pos, "%s: input %d has shape ", OP_NAME, index);
  oo_sc_append_shape(msg, sizeof msg, &pos, t);
  oo_sc_append(msg, sizeof msg, &pos, ", the model records %s: %s", records, how);
  TfLiteOpaqueContextReportError(context, "%s", msg);
  return kTfLiteError;
}

/* Input `index` must have the shape of input 0, which the outputs take. */
static inline TfLiteStatus oo_sc_check_like_first(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node,
                                                  int index) {
  const TfLiteOpaqueTensor* t = oo_sc_input(context, node, index);
  const TfLiteOpaqueTensor* first = oo_sc_input(context, node, 0);
  char msg[512];
  size_t pos = 0;
  int i, rank = TfLiteOpaqueTensorNumDims(first), same = TfLiteOpaqueTensorNumDims(t) == rank;
  for (i = 0; same && i < rank; ++i) same = TfLiteOpaqueTensorDim(t, i) == TfLiteOpaqueTensorDim(first, i);
  if (same) return kTfLiteOk;
  oo_sc_append(msg, sizeof msg, &pos, "%s: input %d has shape ", OP_NAME, index);
  oo_sc_append_shape(msg, sizeof msg, &pos, t);
  oo_sc_append(msg, sizeof msg, &pos, " and input 0 ");
  oo_sc_append_shape(msg, sizeof msg, &pos, first);
  oo_sc_append(msg, sizeof msg, &pos, ": this kernel gives its outputs the shape of input 0, so every input must "
               "have it; derive the outputs' shapes from the inputs in Prepare to take other shapes");
  TfLiteOpaqueContextReportError(context, "%s", msg);
  return kTfLiteError;
}

/* The inputs match none of the sets of shapes the model's nodes record (`records`). */
static inline TfLiteStatus oo_sc_shapes_error(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node, int n_in,
                                              const char* records) {
  char msg[1024];
  size_t pos = 0;
  int i;
  /* The node's own inputs: it may have fewer than n_in (the most a node of the model has). */
  if (n_in > TfLiteOpaqueNodeNumberOfInputs(node)) n_in = TfLiteOpaqueNodeNumberOfInputs(node);
  oo_sc_append(msg, sizeof msg, &pos, "%s: the inputs have shapes ", OP_NAME);
  for (i = 0; i < n_in; ++i) {
    if (i) oo_sc_append(msg, sizeof msg, &pos, ", ");
    oo_sc_append_shape(msg, sizeof msg, &pos, oo_sc_input(context, node, i));
  }
  oo_sc_append(msg, sizeof msg, &pos, "; the model's nodes record %s: %s", records, OO_SC_FIXED_HOW);
  TfLiteOpaqueContextReportError(context, "%s", msg);
  return kTfLiteError;
}

/* A vector option as a malloc'd array (*out stays NULL for an empty vector). */
static inline int oo_sc_get_ints(const uint8_t* buf, size_t len, const char* key, int64_t** out,
                                 size_t* n) {
  int rc = oo_flex_get_ints(buf, len, key, NULL, 0, n);
  if (rc != OO_FLEX_OK && rc != OO_FLEX_ERR_CAPACITY) return rc;
  if (*n == 0) return OO_FLEX_OK;
  *out = (int64_t*)malloc(*n * sizeof **out);
  if (*out == NULL) return OO_FLEX_ERR_CAPACITY;
  return oo_flex_get_ints(buf, len, key, *out, *n, n);
}

static inline int oo_sc_get_doubles(const uint8_t* buf, size_t len, const char* key, double** out,
                                    size_t* n) {
  int rc = oo_flex_get_floats(buf, len, key, NULL, 0, n);
  if (rc != OO_FLEX_OK && rc != OO_FLEX_ERR_CAPACITY) return rc;
  if (*n == 0) return OO_FLEX_OK;
  *out = (double*)malloc(*n * sizeof **out);
  if (*out == NULL) return OO_FLEX_ERR_CAPACITY;
  return oo_flex_get_floats(buf, len, key, *out, *n, n);
}

static inline int oo_sc_get_strings(const uint8_t* buf, size_t len, const char* key, const char*** out,
                                    size_t* n) {
  oo_flex_ref v, e;
  size_t i, slen;
  int rc = oo_flex_get(buf, len, key, &v);
  if (rc == OO_FLEX_OK) rc = oo_flex_vector_size(v, n);
  if (rc != OO_FLEX_OK || *n == 0) return rc;
  *out = (const char**)malloc(*n * sizeof **out);
  if (*out == NULL) return OO_FLEX_ERR_CAPACITY;
  for (i = 0; i < *n; ++i) {
    rc = oo_flex_vector_at(v, i, &e);
    if (rc == OO_FLEX_OK) rc = oo_flex_as_string(e, &(*out)[i], &slen);
    if (rc != OO_FLEX_OK) return rc;
  }
  return OO_FLEX_OK;
}
"""

# A Flex op's NodeDef, read in C: the protobuf wire format of TensorFlow's
# node_def.proto / attr_value.proto (the fields opaque_ops.model.nodedef reads).
NODEDEF_HELPERS = r"""
/* ---- a Flex op's NodeDef: protobuf wire format, bounds-checked ---- */
enum { OO_ND_MISSING, OO_ND_INT, OO_ND_FLOAT, OO_ND_BOOL, OO_ND_TYPE, OO_ND_STRING, OO_ND_LIST_INT,
       OO_ND_LIST_FLOAT, OO_ND_LIST_BOOL, OO_ND_LIST_TYPE, OO_ND_OTHER };
#define OO_ND_CAP 64 /* list entries kept */

typedef struct {
  int kind;
  int64_t i; /* int, bool, type */
  double f;
  const char* s; size_t s_len;
  int64_t ints[OO_ND_CAP]; double floats[OO_ND_CAP]; size_t n; /* lists: n may exceed OO_ND_CAP */
} OoNdValue;

static inline int oo_nd_varint(const uint8_t* b, size_t end, size_t* pos, uint64_t* out) {
  uint64_t v = 0;
  unsigned shift = 0;
  while (*pos < end && shift < 64) {
    uint8_t byte = b[(*pos)++];
    v |= (uint64_t)(byte & 0x7f) << shift;
    if (!(byte & 0x80)) { *out = v; return 0; }
    shift += 7;
  }
  return -1;
}

/* Reads one field's header and value span: LEN values as [*vs, *ve), others in *v. */
static inline int oo_nd_field(const uint8_t* b, size_t end, size_t* pos, unsigned* field, unsigned* wire,
                              uint64_t* v, size_t* vs, size_t* ve) {
  uint64_t tag, n;
  if (oo_nd_varint(b, end, pos, &tag)) return -1;
  *field = (unsigned)(tag >> 3);
  *wire = (unsigned)(tag & 7);
  switch (*wire) {
    case 0: return oo_nd_varint(b, end, pos, v);
    case 1: if (end - *pos < 8) return -1; *v = 0; memcpy(v, b + *pos, 8); *pos += 8; return 0;
    case 5: { uint32_t u; if (end - *pos < 4) return -1; memcpy(&u, b + *pos, 4); *v = u; *pos += 4; return 0; }
    case 2:
      if (oo_nd_varint(b, end, pos, &n) || n > end - *pos) return -1;
      *vs = *pos; *ve = *pos + (size_t)n; *pos = *ve; return 0;
    default: return -1;
  }
}

static inline float oo_nd_f32(uint64_t bits) {
  uint32_t u = (uint32_t)bits;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline void oo_nd_push(OoNdValue* out, int kind, int64_t i, double f) {
  if (out->kind != kind && out->n) out->kind = OO_ND_OTHER;
  else if (out->kind != OO_ND_OTHER) out->kind = kind;
  if (out->n < OO_ND_CAP) { out->ints[out->n] = i; out->floats[out->n] = f; }
  out->n++;
}

static inline int oo_nd_list(const uint8_t* b, size_t pos, size_t end, OoNdValue* out) {
  static const int kinds[7] = {0, 0, 0, OO_ND_LIST_INT, OO_ND_LIST_FLOAT, OO_ND_LIST_BOOL, OO_ND_LIST_TYPE};
  out->kind = OO_ND_LIST_INT; /* an empty list */
  out->n = 0;
  while (pos < end) {
    unsigned field, wire; uint64_t v = 0; size_t vs = 0, ve = 0;
    if (oo_nd_field(b, end, &pos, &field, &wire, &v, &vs, &ve)) return -1;
    if (field < 3 || field > 6) { out->kind = OO_ND_OTHER; continue; }
    if (wire == 2) { /* packed */
      while (vs < ve) {
        if (field == 4) {
          uint32_t u; if (ve - vs < 4) return -1; memcpy(&u, b + vs, 4); vs += 4;
          oo_nd_push(out, kinds[field], 0, oo_nd_f32(u));
        } else {
          if (oo_nd_varint(b, ve, &vs, &v)) return -1;
          oo_nd_push(out, kinds[field], (int64_t)v, (double)(int64_t)v);
        }
      }
    } else {
      oo_nd_push(out, kinds[field], (int64_t)v, field == 4 ? oo_nd_f32(v) : (double)(int64_t)v);
    }
  }
  return 0;
}

static inline int oo_nd_value(const uint8_t* b, size_t pos, size_t end, OoNdValue* out) {
  while (pos < end) {
    unsigned field, wire; uint64_t v = 0; size_t vs = 0, ve = 0;
    if (oo_nd_field(b, end, &pos, &field, &wire, &v, &vs, &ve)) return -1;
    if (field == 3 && wire == 0) { out->kind = OO_ND_INT; out->i = (int64_t)v; }
    else if (field == 4 && wire == 5) { out->kind = OO_ND_FLOAT; out->f = oo_nd_f32(v); }
    else if (field == 5 && wire == 0) { out->kind = OO_ND_BOOL; out->i = v != 0; }
    else if (field == 6 && wire == 0) { out->kind = OO_ND_TYPE; out->i = (int64_t)v; }
    else if (field == 2 && wire == 2) { out->kind = OO_ND_STRING; out->s = (const char*)b + vs; out->s_len = ve - vs; }
    else if (field == 1 && wire == 2) { if (oo_nd_list(b, vs, ve, out)) return -1; }
    else out->kind = OO_ND_OTHER;
  }
  return 0;
}

/* Attribute `key` of a NodeDef (field 5: map entries {1: key, 2: AttrValue}). */
static inline int oo_nd_attr(const uint8_t* b, size_t len, const char* key, OoNdValue* out) {
  size_t pos = 0, klen = strlen(key);
  memset(out, 0, sizeof *out);
  while (pos < len) {
    unsigned field, wire; uint64_t v = 0; size_t vs = 0, ve = 0;
    if (oo_nd_field(b, len, &pos, &field, &wire, &v, &vs, &ve)) return -1;
    if (field == 5 && wire == 2) {
      size_t p = vs, avs = 0, ave = 0; int match = 0, has_value = 0;
      while (p < ve) {
        unsigned f2, w2; uint64_t v2 = 0; size_t s2 = 0, e2 = 0;
        if (oo_nd_field(b, ve, &p, &f2, &w2, &v2, &s2, &e2)) return -1;
        if (f2 == 1 && w2 == 2) match = e2 - s2 == klen && memcmp(b + s2, key, klen) == 0;
        if (f2 == 2 && w2 == 2) { avs = s2; ave = e2; has_value = 1; }
      }
      if (match && has_value) return oo_nd_value(b, avs, ave, out);
    }
  }
  return 0; /* not there: kind stays OO_ND_MISSING */
}

/* TensorFlow's DataType enum (types.proto) by name. */
static inline const char* oo_nd_type_name(int64_t t) {
  static const char* names[] = {"invalid", "float32", "float64", "int32", "uint8", "int16", "int8", "string",
                                "complex64", "int64", "bool", "qint8", "quint8", "qint32", "bfloat16",
                                "qint16", "quint16", "uint16", "complex128", "float16", "resource",
                                "variant", "uint32", "uint64"};
  if (t >= 0 && t < (int64_t)(sizeof names / sizeof names[0])) return names[t];
  if (t > 100 && t - 100 < (int64_t)(sizeof names / sizeof names[0])) return "ref type";
  return "unknown type";
}

static inline void oo_nd_append(char* msg, size_t cap, size_t* pos, const OoNdValue* v) {
  size_t i;
  switch (v->kind) {
    case OO_ND_INT: oo_sc_append(msg, cap, pos, "%lld", (long long)v->i); return;
    case OO_ND_FLOAT: oo_sc_append(msg, cap, pos, "%g", v->f); return;
    case OO_ND_BOOL: oo_sc_append(msg, cap, pos, "%s", v->i ? "true" : "false"); return;
    case OO_ND_TYPE: oo_sc_append(msg, cap, pos, "%s", oo_nd_type_name(v->i)); return;
    case OO_ND_STRING: oo_sc_append(msg, cap, pos, "%.*s", (int)v->s_len, v->s); return;
    case OO_ND_LIST_INT: case OO_ND_LIST_BOOL: case OO_ND_LIST_TYPE: case OO_ND_LIST_FLOAT:
      oo_sc_append(msg, cap, pos, "[");
      for (i = 0; i < v->n && i < OO_SC_SHOW && i < OO_ND_CAP; ++i) {
        const char* sep = i ? ", " : "";
        if (v->kind == OO_ND_LIST_FLOAT) oo_sc_append(msg, cap, pos, "%s%g", sep, v->floats[i]);
        else if (v->kind == OO_ND_LIST_TYPE) oo_sc_append(msg, cap, pos, "%s%s", sep, oo_nd_type_name(v->ints[i]));
        else if (v->kind == OO_ND_LIST_BOOL) oo_sc_append(msg, cap, pos, "%s%s", sep, v->ints[i] ? "true" : "false");
        else oo_sc_append(msg, cap, pos, "%s%lld", sep, (long long)v->ints[i]);
      }
      if (v->n > OO_SC_SHOW) oo_sc_append(msg, cap, pos, ", ... (%zu values)", v->n);
      oo_sc_append(msg, cap, pos, "]");
      return;
    case OO_ND_MISSING: oo_sc_append(msg, cap, pos, "<missing>"); return;
    default: oo_sc_append(msg, cap, pos, "<not read by the generated code>"); return;
  }
}
"""

# NodeDef attribute kinds (opaque_ops.model.nodedef) -> the C reader's kinds.
_ND_KINDS = {
    "int": "OO_ND_INT",
    "float": "OO_ND_FLOAT",
    "bool": "OO_ND_BOOL",
    "type": "OO_ND_TYPE",
    "string": "OO_ND_STRING",
    "list(int)": "OO_ND_LIST_INT",
    "list(float)": "OO_ND_LIST_FLOAT",
    "list(bool)": "OO_ND_LIST_BOOL",
    "list(type)": "OO_ND_LIST_TYPE",
}


def c_string(text: str) -> str:
    """A C string literal for ``text`` (any bytes escaped)."""
    out = []
    for byte in text.encode("utf-8"):
        ch = chr(byte)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 32 <= byte < 127 and ch != "?":
            out.append(ch)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def comment_text(text: str) -> str:
    """``text`` from the model (an op name, an option key, a file name) as it may stand inside a C comment.

    Why: the model is untrusted input, and a name that holds ``*/`` would
    end the comment and put the rest of the name in the generated C as code
    (which ran at load time, through ``__attribute__((constructor))``).  A
    backslash, a control character or ``??`` could splice or change lines as
    well (line splicing, trigraphs).  Those are written as ``\\xNN``-style
    escapes, which read as what they stand for and are never code.
    """
    out = []
    for ch in str(text):
        if ch == "\\" or not ch.isprintable():
            o = ord(ch)
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}")
        else:
            out.append(ch)
    return "".join(out).replace("*/", "*\\x2f").replace("/*", "\\x2f*").replace("??", "?\\x3f")


# Keywords of C (C11 and C23) and names the generated code or its headers
# use as macros: an option key of one of these names would not compile as a field.
_MACRO_PREFIXES = ("OO_", "OPAQUE_OPS", "OP_NAME", "TfLite", "TF_LITE_", "TFLITE_", "kTfLite")
_C_RESERVED = frozenset(
    """auto break case char const continue default do double else enum extern float for goto if inline int long
    register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
    alignas alignof bool constexpr false nullptr static_assert thread_local true typeof typeof_unqual
    _Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary _Noreturn _Static_assert _Thread_local
    asm typeof NULL errno""".split()
)


def c_ident(text: str, used: set) -> str:
    """A C identifier from ``text``, unique within ``used``, never a C keyword."""
    base = re.sub(r"\W", "_", text, flags=re.ASCII).strip("_") or "value"
    if base[0].isdigit():
        base = "_" + base
    elif base in _C_RESERVED or base.startswith(_MACRO_PREFIXES):
        base += "_"
    name, k = base, 2
    while name in used:
        name, k = f"{base}_{k}", k + 1
    used.add(name)
    return name


# ------------------------------------------------------ flexbuffer maps --


def value_class(entry_type: str, value) -> str:
    """What C reads a flexbuffer map entry as: int, float, bool, string, ints, floats, bools, strings or ref."""
    t = entry_type.split(" [")[0]
    if t in ("int", "uint"):
        return "int"
    if t == "float":
        return "float"
    if t == "bool":
        return "bool"
    if t in ("string", "key"):
        return "string"
    if t in ("vector of int", "vector of uint"):
        return "ints"
    if t == "vector of float":
        return "floats"
    if t == "vector of bool":
        return "bools"
    if t in ("vector", "vector of key", "vector of string") and isinstance(value, list):
        if all(isinstance(x, str) for x in value):
            return "strings"
        if all(isinstance(x, bool) for x in value):
            return "bools"
        if all(isinstance(x, int) and not isinstance(x, bool) for x in value):
            return "ints"
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value):
            return "floats"
    return "ref"


def merge_classes(classes: set) -> str:
    """One C reading that accepts every node's value of a key (their union)."""
    if len(classes) == 1:
        return next(iter(classes))
    for wide, narrow in (
        ("float", {"int", "float", "bool"}),
        ("floats", {"ints", "floats", "bools"}),
        ("int", {"int", "bool"}),
        ("ints", {"ints", "bools"}),
    ):
        if classes <= narrow:
            return "int" if classes == {"int", "bool"} else "ints" if classes == {"ints", "bools"} else wide
    return "ref"


def _flex_map_parts(keys: dict, n_sets: int) -> tuple[list, list, list, list]:
    """Struct fields, Init code, Free code and Invoke's message code for a flexbuffer map's keys.

    ``keys``: {key: (class, number of option sets that have it)}.
    """
    fields, init, free, show = [], [], [], []
    used = {"opts", "buffer", "length"}
    for key, (cls, count) in keys.items():
        f = c_ident(key, used)
        k = c_string(key)
        optional = count < n_sets
        what = {
            "int": "an int",
            "float": "a number",
            "bool": "a bool",
            "string": "a string",
            "ints": "a vector of ints",
            "floats": "a vector of numbers",
            "bools": "a vector of bools",
            "strings": "a vector of strings",
            "ref": "a value",
        }[cls]
        if cls == "int":
            fields.append(f"int64_t {f};")
            call = f"oo_flex_get_int(d->buffer, d->length, {k}, &d->{f})"
            fmt = [f'oo_sc_append(msg, sizeof msg, &pos, " %s=%lld", {k}, (long long)d->{f});']
        elif cls == "float":
            fields.append(f"double {f};")
            call = f"oo_flex_get_double(d->buffer, d->length, {k}, &d->{f})"
            fmt = [f'oo_sc_append(msg, sizeof msg, &pos, " %s=%g", {k}, d->{f});']
        elif cls == "bool":
            fields.append(f"int {f};")
            call = f"oo_flex_get_bool(d->buffer, d->length, {k}, &d->{f})"
            fmt = [f'oo_sc_append(msg, sizeof msg, &pos, " %s=%s", {k}, d->{f} ? "true" : "false");']
        elif cls == "string":
            fields.append(f"const char* {f}; /* NUL-terminated, inside buffer */")
            fields.append(f"size_t {f}_len;")
            call = f"oo_flex_get_string(d->buffer, d->length, {k}, &d->{f}, &d->{f}_len)"
            fmt = [f'oo_sc_append(msg, sizeof msg, &pos, " %s=%s", {k}, d->{f});']
        elif cls in ("ints", "bools"):
            fields.append(f"int64_t* {f}; /* malloc'd */")
            fields.append(f"size_t {f}_n;")
            call = f"oo_sc_get_ints(d->buffer, d->length, {k}, &d->{f}, &d->{f}_n)"
            free.append(f"free(d->{f});")
            fmt = [
                f'oo_sc_append(msg, sizeof msg, &pos, " %s=", {k});',
                f"oo_sc_append_ints(msg, sizeof msg, &pos, d->{f}, d->{f}_n, {int(cls == 'bools')});",
            ]
        elif cls == "floats":
            fields.append(f"double* {f}; /* malloc'd */")
            fields.append(f"size_t {f}_n;")
            call = f"oo_sc_get_doubles(d->buffer, d->length, {k}, &d->{f}, &d->{f}_n)"
            free.append(f"free(d->{f});")
            fmt = [
                f'oo_sc_append(msg, sizeof msg, &pos, " %s=", {k});',
                f"oo_sc_append_doubles(msg, sizeof msg, &pos, d->{f}, d->{f}_n);",
            ]
        elif cls == "strings":
            fields.append(f"const char** {f}; /* malloc'd array of strings inside buffer */")
            fields.append(f"size_t {f}_n;")
            call = f"oo_sc_get_strings(d->buffer, d->length, {k}, &d->{f}, &d->{f}_n)"
            free.append(f"free((void*)d->{f});")
            fmt = [
                f'oo_sc_append(msg, sizeof msg, &pos, " %s=", {k});',
                f"oo_sc_append_strings(msg, sizeof msg, &pos, d->{f}, d->{f}_n);",
            ]
        else:  # the nodes disagree on its type, or a nested map: kept as a reference
            fields.append(f"oo_flex_ref {f}; /* the model's nodes give it different types: read it as needed */")
            call = f"oo_flex_get(d->buffer, d->length, {k}, &d->{f})"
            fmt = [f'oo_sc_append(msg, sizeof msg, &pos, " %s=<flexbuffer type %d>", {k}, oo_flex_type(d->{f}));']
        if optional:
            fields.append(f"int has_{f}; /* not every node of the model gives {comment_text(repr(key))} */")
        init.append(f"/* {comment_text(repr(key))}: {what}{', optional' if optional else ''} */")
        init.append(f"rc = {call};")
        if optional:
            init.append(f"d->has_{f} = rc == OO_FLEX_OK;")
            init.append("if (rc != OO_FLEX_OK && rc != OO_FLEX_NOT_FOUND)")
        else:
            init.append("if (rc != OO_FLEX_OK)")
        init.append(f"  oo_opts_fail(&d->opts, OP_NAME, \"option '%s' ({what}): %s\", {k}, oo_flex_strerror(rc));")
        if optional:
            show.append(f"if (d->has_{f}) {{")
            show += ["  " + line for line in fmt]
            show.append("} else {")
            show.append(f'  oo_sc_append(msg, sizeof msg, &pos, " %s=<absent>", {k});')
            show.append("}")
        else:
            show += fmt
    return fields, init, free, show


# ------------------------------------------------------------- shapes --


def _dims(shape) -> str:
    return "[" + ", ".join(str(int(n)) for n in shape) + "]"


def _c_dims(name: str, shape) -> str:
    """``static const int name[n] = {...};`` (C has no empty arrays: a scalar's is one 0, never read)."""
    return f"static const int {name}[{len(shape) or 1}] = {{{', '.join(str(int(n)) for n in shape) or '0'}}};"


def _get_input(op, i) -> str:
    """The C expression for input ``i`` of the node in Prepare.

    A position every node has: ``TfLiteOpaqueNodeGetInput``.  One past
    some node's input count: ``oo_sc_input``, which checks the count first
    (NULL past it), so the kernel never reads past a node's inputs.
    """
    if i < op.min_inputs:
        return f"TfLiteOpaqueNodeGetInput(context, node, {i})"
    return f"oo_sc_input(context, node, {i})"


def _counts_doc(op) -> list[str]:
    """The header comment's lines on the nodes' input counts (one count: no lines)."""
    if op.min_inputs == op.max_inputs:
        return []
    per = {n: sum(1 for ins, _ in op.nodes if len(ins) == n) for n in sorted(op.input_counts)}
    return [
        " *",
        " * Input counts: the model's nodes have "
        + ", ".join(f"{n} (in {k} node{'s' if k > 1 else ''})" for n, k in per.items())
        + " inputs:",
        " * a node may leave a trailing optional input out entirely, not even as -1, and",
        f" * TfLiteOpaqueNodeNumberOfInputs is then smaller.  Prepare takes {op.min_inputs} to {op.max_inputs};",
        f" * input(s) {', '.join(map(str, range(op.min_inputs, op.max_inputs)))} may be past the node's count.",
        " * c_api_opaque.h says nothing of TfLiteOpaqueNodeGetInput past the count (upstream",
        " * answers NULL, through tflite::GetInput's index check), so check the count before",
        " * asking, as oo_sc_input does: it gives NULL there, as for an omitted input.",
    ]


def _omitted_doc(op) -> list[str]:
    """The header comment's lines on the inputs the model's nodes omit (none: no lines)."""
    if not any(op.omitted):  # no -1 in any node (a position past a count: _counts_doc)
        return []
    # Here only the positions some node gives as -1; one only past some nodes' count is in _counts_doc.
    optional = [i for i in range(len(op.inputs)) if op.input_state(i) == "optional" and op.omitted[i]]
    never = [i for i in range(len(op.inputs)) if op.input_state(i) == "omitted"]
    count = (
        f"{op.max_inputs} here"
        if op.min_inputs == op.max_inputs
        else f"{op.min_inputs} to {op.max_inputs} here: see Input counts"
    )
    out = [
        " *",
        " * Omitted inputs: a node may leave an optional input out (-1, kTfLiteOptionalTensor).",
        f" * The node still counts it (TfLiteOpaqueNodeNumberOfInputs is {count}) and keeps",
        " * the inputs after it at their positions; TfLiteOpaqueNodeGetInput returns NULL for it",
        " * (upstream's c_api_opaque.cc answers through tflite::GetInput, whose index check gives",
        " * no tensor for -1), so test for NULL before reading one of these:",
    ]
    if optional:
        out.append(f" *   input(s) {', '.join(map(str, optional))}: omitted in some of the model's nodes and given in")
        out.append(" *   others: optional.  Prepare takes either; Invoke must too.")
    if never:
        out.append(f" *   input(s) {', '.join(map(str, never))}: omitted in every node.  Prepare refuses a tensor")
        out.append(" *   there (the model says nothing of its type or shape).")
    return out


def _shape_checks(op) -> list[str]:
    """Prepare's shape block: the rule of :func:`opaque_ops.cli.scaffold._shape_rule`, in C."""
    n_in, n_out = len(op.inputs), len(op.outputs)
    if op.follow is not None:
        rank = len(op.follow_shape)
        dims = ", ".join(map(str, op.follow))
        return [
            f"  {{ /* Every tensor of this op has one shape in the model, and dim(s) {dims} may change:",
            "       the outputs take input 0's shape, and every input must have it, so that a loop",
            "       over any one tensor's elements stays inside all of them. */",
            f"    {_c_dims('model', op.follow_shape)} /* -1: any size */",
            "    int i;",
            *(
                [f"    for (i = 0; i < {n_in}; ++i) {{"]
                if op.min_inputs == op.max_inputs
                else [
                    "    /* The node's own inputs: nodes of the op have different counts (checked above). */",
                    "    for (i = 0; i < TfLiteOpaqueNodeNumberOfInputs(node); ++i) {",
                ]
            ),
            *(
                [
                    "      /* An omitted input (NULL: the checks above allow it only where the model omits it)",
                    "         has no shape to check. */",
                    "      if (TfLiteOpaqueNodeGetInput(context, node, i) == NULL) continue;",
                ]
                if any(op.omitted)
                else []
            ),
            f"      TF_LITE_OPAQUE_ENSURE_STATUS(oo_sc_check_input(context, node, i, {rank}, model, "
            f"{c_string(_dims(op.follow_shape))}, OO_SC_FOLLOW_HOW));",
            "      TF_LITE_OPAQUE_ENSURE_STATUS(oo_sc_check_like_first(context, node, i));",
            "    }",
            f"    for (i = 0; i < {n_out}; ++i)",
            "      TF_LITE_OPAQUE_ENSURE_STATUS(oo_resize_like(context, TfLiteOpaqueNodeGetOutput(context, node, i),",
            "                                                  TfLiteOpaqueNodeGetInput(context, node, 0)));",
            "  }",
        ]
    sets = op.shape_sets
    out = [
        "  { /* The shapes the model records.  The outputs get them, so every input must have its",
        "       recorded shape too: an input resized at run time (resize_tensor_input, or",
        "       opaque-ops run --input with a file of another shape) would be larger than what the",
        "       outputs were sized for.  To take other shapes, compute the outputs' from the inputs",
        "       here (oo_resize). */",
    ]
    if len(sets) == 1:
        ins, outs = sets[0]
        # (An omitted position, None, is omitted in every node: the checks above refuse a tensor there.)
        out += ["    " + _c_dims(f"in{i}", sh) for i, sh in enumerate(ins) if sh is not None]
        out += ["    " + _c_dims(f"out{j}", sh) for j, sh in enumerate(outs)]
        out += [
            f"    TF_LITE_OPAQUE_ENSURE_STATUS(oo_sc_check_input(context, node, {i}, {len(sh)}, in{i}, "
            f"{c_string(_dims(sh))}, OO_SC_FIXED_HOW));"
            for i, sh in enumerate(ins)
            if sh is not None
        ]
        out += [
            f"    TF_LITE_OPAQUE_ENSURE_STATUS(oo_resize(context, TfLiteOpaqueNodeGetOutput(context, node, {j}), "
            f"{len(sh)}, out{j}));"
            for j, sh in enumerate(outs)
        ]
        return out + ["  }"]
    # Several nodes, several sets of shapes: the inputs must match one set, and the outputs get
    # that set's shapes, unless another set has the same input shapes and other output shapes
    # (the model's own output shape then stands: this Prepare cannot tell the nodes apart).
    out.append(f"    /* The model's nodes record {len(sets)} sets of shapes. */")
    if any(sh is None for ins, _ in sets for sh in ins):
        out.append("    /* (An input a set omits must be omitted, NULL, for the set to match.) */")
    for k, (ins, outs) in enumerate(sets):
        out += ["    " + _c_dims(f"s{k}_in{i}", sh) for i, sh in enumerate(ins) if sh is not None]
        out += ["    " + _c_dims(f"s{k}_out{j}", sh) for j, sh in enumerate(outs)]
    varies = op.min_inputs != op.max_inputs
    if varies:
        out.append("    /* (A set matches only a node of its input count: checked first, so no input past the")
        out.append("       node's count is asked for.) */")
    for k, (ins, outs) in enumerate(sets):
        cond = (
            " &&\n        ".join(
                ([f"TfLiteOpaqueNodeNumberOfInputs(node) == {len(ins)}"] if varies else [])
                + [
                    f"TfLiteOpaqueNodeGetInput(context, node, {i}) == NULL"
                    if sh is None
                    else f"oo_sc_has_shape(TfLiteOpaqueNodeGetInput(context, node, {i}), {len(sh)}, s{k}_in{i})"
                    for i, sh in enumerate(ins)
                ]
            )
            or "1"
        )
        out.append(f"    {'if' if k == 0 else '} else if'} ({cond}) {{")
        for j, sh in enumerate(outs):
            if any(o_ins == ins and o_outs[j] != sh for o_ins, o_outs in sets if j < len(o_outs)):
                out.append(f"      /* output {j}: the nodes with these input shapes record other shapes for it */")
            else:
                out.append(
                    f"      TF_LITE_OPAQUE_ENSURE_STATUS(oo_resize(context, TfLiteOpaqueNodeGetOutput(context, node, {j}), "
                    f"{len(sh)}, s{k}_out{j}));"
                )
    records = " or ".join(
        "(" + ", ".join("omitted" if sh is None else _dims(sh) for sh in ins) + ")" for ins, _ in sets
    )
    out += [
        "    } else {",
        f"      return oo_sc_shapes_error(context, node, {n_in}, {c_string(records)});",
        "    }",
        "  }",
    ]
    return out


# ----------------------------------------------------------------- a file --


def kernel_source(op, model_name: str, command: str) -> str:
    """The C file of one op: the options it parses, its checks and its placeholder Invoke.

    Parameters
    ----------
    op : opaque_ops.cli.scaffold.OpFacts
        What the model says about the op.
    model_name : str
        The model's file name (for the header comment).
    command : str
        The scaffold command line (for the header comment).
    """
    p = op.c_prefix
    kind = op.options_kind
    lines_doc = [
        f"/* {comment_text(op.name)} v{', v'.join(map(str, sorted(op.versions)))}: written by `{comment_text(command)}`.",
        " *",
        f" * {comment_text(model_name)} uses it in {op.count} node(s), with these tensors:",
    ]
    for i, (t, shape) in enumerate(op.inputs):
        state, n = op.input_state(i), op.omitted[i]
        if state == "omitted":
            lines_doc.append(
                f" *   input {i}: omitted in every node (-1, an optional input left out"
                + (", or past the node's input count)" if op.short_of(i) else ")")
            )
            continue
        lines_doc.append(f" *   input {i}: {t.lower()} {list(shape) if shape is not None else 'shapes differ'}")
        short = op.short_of(i)
        if state == "optional" and not short:
            lines_doc[-1] += f", omitted in {n} of {op.position_count(i)} nodes: optional"
        elif state == "optional":
            lines_doc[-1] += (
                f", absent in {op.absent(i)} of {len(op.nodes)} nodes ({n} omitted, {short} with fewer inputs): optional"
            )
    for i, (t, shape) in enumerate(op.outputs):
        lines_doc.append(f" *   output {i}: {t.lower()} {list(shape) if shape is not None else 'shapes differ'}")
    lines_doc.append(f" * Options: {comment_text(op.options_summary)}.")
    lines_doc += [
        " *",
        " * As generated: Init reads every option the model gives (each one checked;",
        " * a problem is reported by Prepare), Prepare checks the node's tensors and",
        *(
            [
                " * gives the outputs the shape of input 0 (every tensor has one shape, and the",
                f" * model lets dim(s) {', '.join(map(str, op.follow))} change), and Invoke fails with",
            ]
            if op.follow is not None
            else [
                " * sets the output shapes the model records (the inputs must have theirs),",
                " * and Invoke fails with",
            ]
        ),
        ' * "not implemented yet" and the options as parsed here.  Write the op in',
        f" * {p}Invoke, and its numpy reference in the test file.",
        *_omitted_doc(op),
        *_counts_doc(op),
        " */",
    ]
    out = [
        "\n".join(lines_doc),
        "",
        "#include <stdarg.h>",
        "#include <stdint.h>",
        "#include <stdio.h>",
        "#include <stdlib.h>",
        "#include <string.h>",
        "",
        '#include "opaque_ops.h"',
        '#include "opaque_ops/flex.h"',
        '#include "opaque_ops/kernel_util.h"',
        '#include "opaque_ops/rawopts.h"',
        "",
        f"#define OP_NAME {c_string(op.name)}",
        HELPERS.replace("@SHOW@", str(SHOW)),
    ]
    if kind == "flex":
        out.append(NODEDEF_HELPERS)

    fields = [
        "OoOptsStatus opts; /* the first problem with the options, reported by Prepare */",
        "uint8_t* buffer;   /* a copy of the options: what is read points into it */",
        "size_t length;",
    ]
    init, free, show = [], [], []
    if kind == "flexbuffer map":
        f, init, free, show = _flex_map_parts(op.map_keys, len(op.option_sets))
        fields += f
    elif kind == "raw":
        lengths = sorted(op.raw_lengths)
        cond = " && ".join(f"d->length != {n}" for n in lengths)
        fields.append(f"int32_t i32[{max(lengths) // 4 or 1}]; /* the bytes as little-endian int32s */")
        fields.append("size_t n_i32;")
        init += [
            f"/* raw bytes: {' or '.join(map(str, lengths))} in the model */",
            f"if ({cond})",
            (
                f'  oo_opts_fail(&d->opts, OP_NAME, "options must be {" or ".join(map(str, lengths))} bytes '
                f'(as in the model), got %zu", d->length);'
            ),
            "d->n_i32 = d->length / 4;",
            "if (d->n_i32 > sizeof d->i32 / sizeof d->i32[0]) d->n_i32 = sizeof d->i32 / sizeof d->i32[0];",
            "if (oo_raw_i32s(d->buffer, d->length, d->i32, d->n_i32) != OO_RAW_OK)",
            '  oo_opts_fail(&d->opts, OP_NAME, "cannot read the options as int32s");',
        ]
        show += [
            'oo_sc_append(msg, sizeof msg, &pos, " %zu bytes ", d->length);',
            "{",
            "  size_t i;",
            "  for (i = 0; i < d->length && i < 4 * OO_SC_SHOW; ++i)",
            '    oo_sc_append(msg, sizeof msg, &pos, "%02x", d->buffer[i]);',
            '  if (d->length > 4 * OO_SC_SHOW) oo_sc_append(msg, sizeof msg, &pos, "...");',
            '  oo_sc_append(msg, sizeof msg, &pos, " int32=[");',
            "  for (i = 0; i < d->n_i32 && i < OO_SC_SHOW; ++i)",
            '    oo_sc_append(msg, sizeof msg, &pos, "%s%d", i ? ", " : "", (int)d->i32[i]);',
            '  oo_sc_append(msg, sizeof msg, &pos, "%s]", d->n_i32 > OO_SC_SHOW ? ", ..." : "");',
            "}",
        ]
    elif kind == "flex":
        fields += [
            "const char* tf_op; /* the TensorFlow op name */",
            "size_t tf_op_len;",
            "const uint8_t* node_def; /* the serialized NodeDef */",
            "size_t node_def_len;",
        ]
        used = set()
        attr_fields = []
        for name, akind in op.flex_attrs.items():
            f = "attr_" + c_ident(name, used)
            attr_fields.append((name, akind, f))
            fields.append(f"OoNdValue {f}; /* {comment_text(name)}: {akind} */")
        init += [
            "/* a Flex op: a flexbuffer vector [TensorFlow op name, NodeDef] */",
            "{",
            "  oo_flex_ref root, e;",
            "  size_t n = 0;",
            "  rc = oo_flex_root(d->buffer, d->length, &root);",
            "  if (rc == OO_FLEX_OK) rc = oo_flex_vector_size(root, &n);",
            "  if (rc == OO_FLEX_OK && n != 2) rc = OO_FLEX_ERR_MALFORMED;",
            "  if (rc == OO_FLEX_OK) rc = oo_flex_vector_at(root, 0, &e);",
            "  if (rc == OO_FLEX_OK) rc = oo_flex_as_string(e, &d->tf_op, &d->tf_op_len);",
            "  if (rc == OO_FLEX_OK) rc = oo_flex_vector_at(root, 1, &e);",
            "  if (rc == OO_FLEX_OK) rc = oo_flex_as_blob(e, &d->node_def, &d->node_def_len);",
            "  if (rc != OO_FLEX_OK)",
            (
                '    oo_opts_fail(&d->opts, OP_NAME, "options must be [TensorFlow op name, NodeDef]: %s", '
                "oo_flex_strerror(rc));"
            ),
            f"  else if (strcmp(d->tf_op, {c_string(op.tf_op)}) != 0)",
            (
                f'    oo_opts_fail(&d->opts, OP_NAME, "the TensorFlow op must be %s, got %s", {c_string(op.tf_op)}, '
                "d->tf_op);"
            ),
            "}",
        ]
        for name, akind, f in attr_fields:
            ckind = _ND_KINDS.get(akind, "OO_ND_OTHER")
            init += [
                f"if (!d->opts.failed) {{ /* {comment_text(name)}: {akind} in the model */",
                f"  if (oo_nd_attr(d->node_def, d->node_def_len, {c_string(name)}, &d->{f}) != 0)",
                '    oo_opts_fail(&d->opts, OP_NAME, "malformed NodeDef");',
                f"  else if (d->{f}.kind != {ckind})",
                (
                    f'    oo_opts_fail(&d->opts, OP_NAME, "attribute %s must be {akind} (as in the model)", '
                    f"{c_string(name)});"
                ),
                "}",
            ]
            show += [
                f'oo_sc_append(msg, sizeof msg, &pos, " %s=", {c_string(name)});',
                f"oo_nd_append(msg, sizeof msg, &pos, &d->{f});",
            ]
        show.insert(0, 'oo_sc_append(msg, sizeof msg, &pos, " op=%s", d->tf_op ? d->tf_op : "?");')
    elif kind == "none":
        show.append('oo_sc_append(msg, sizeof msg, &pos, " none");')
    else:  # a flexbuffer vector, or bytes some nodes give as a map and others not: kept as bytes
        show.append('oo_sc_append(msg, sizeof msg, &pos, " %zu bytes, kept as they are", d->length);')

    out.append("typedef struct {\n" + "\n".join("  " + f for f in fields) + f"\n}} {p}Data;\n")

    body = "\n".join("  " + line for line in init)
    out.append(f"""static void* {p}Init(TfLiteOpaqueContext* context, const char* buffer, size_t length) {{
  {p}Data* d = ({p}Data*)calloc(1, sizeof *d);
  int rc = OO_FLEX_OK;
  (void)context;
  (void)rc;
  if (d == NULL) return NULL; /* Prepare reports it */
  d->buffer = (uint8_t*)malloc(length ? length : 1);
  if (d->buffer == NULL) {{
    oo_opts_fail(&d->opts, OP_NAME, "out of memory copying %zu bytes of options", length);
    return d;
  }}
  if (length) memcpy(d->buffer, buffer, length);
  d->length = length;
{body}
  return d;
}}
""")
    frees = "\n".join("  " + line for line in free)
    out.append(f"""static void {p}Free(TfLiteOpaqueContext* context, void* data) {{
  {p}Data* d = ({p}Data*)data;
  (void)context;
  if (d == NULL) return;
{frees}
  free(d->buffer);
  free(d);
}}
""")
    checks = []
    for i in range(len(op.inputs)):
        state = op.input_state(i)
        if state == "omitted":
            checks += [
                f"  /* input {i}: omitted in every node of the model.  As generated, this kernel refuses a",
                "     tensor there (it knows no type or shape for one); to take it, check it here. */",
                f"  if ({_get_input(op, i)} != NULL) {{",
                (
                    f'    TF_LITE_OPAQUE_KERNEL_LOG(context, "%s: input {i} is given, and the model omits it in '
                    "every node: this kernel as generated does not read it; check its type and shape in "
                    'Prepare to take it", OP_NAME);'
                ),
                "    return kTfLiteError;",
                "  }",
            ]
            continue
        types = sorted(op.input_types[i])
        cond = " && ".join(f"ty != {C_TYPES.get(x, 'kTfLiteNoType')}" for x in types)
        if state == "optional":
            why = (
                "omitted (-1) or past the node's input count"
                if op.omitted[i] and op.short_of(i)
                else "past the node's input count"
                if op.short_of(i)
                else "omitted (-1)"
            )
            missing = [
                "    if (t == NULL) {",
                f"      /* {why}: some of the model's nodes leave this input out */",
                "    } else {",
            ]
        else:
            missing = [
                "    if (t == NULL) {",
                (
                    f'      TF_LITE_OPAQUE_KERNEL_LOG(context, "%s: input {i} is missing (omitted), and every node '
                    'of the model gives it", OP_NAME);'
                ),
                "      return kTfLiteError;",
                "    }",
            ]
        body = [
            "    ty = TfLiteOpaqueTensorType(t);",
            f"    if ({cond}) {{",
            (
                f'      TF_LITE_OPAQUE_KERNEL_LOG(context, "%s: input {i} must be {" or ".join(x.lower() for x in types)}'
                ', got %s", OP_NAME, TfLiteTypeGetName(ty));'
            ),
            "      return kTfLiteError;",
            "    }",
        ]
        if state == "optional":
            body = ["  " + line for line in body] + ["    }"]
        checks += [
            f"  {{ /* input {i}: {' or '.join(x.lower() for x in types)} in the model"
            + (", optional */" if state == "optional" else " */"),
            f"    const TfLiteOpaqueTensor* t = {_get_input(op, i)};",
            "    TfLiteType ty;",
            *missing,
            *body,
            "  }",
        ]
    for i in range(len(op.outputs)):
        types = sorted(op.output_types[i])
        cond = " && ".join(f"ty != {C_TYPES.get(x, 'kTfLiteNoType')}" for x in types)
        checks += [
            f"  {{ /* output {i}: {' or '.join(x.lower() for x in types)} in the model */",
            f"    TfLiteOpaqueTensor* t = TfLiteOpaqueNodeGetOutput(context, node, {i});",
            "    TfLiteType ty;",
            "    if (t == NULL) {",
            f'      TF_LITE_OPAQUE_KERNEL_LOG(context, "%s: output {i} is missing", OP_NAME);',
            "      return kTfLiteError;",
            "    }",
            "    ty = TfLiteOpaqueTensorType(t);",
            f"    if ({cond}) {{",
            (
                f'      TF_LITE_OPAQUE_KERNEL_LOG(context, "%s: output {i} must be {" or ".join(x.lower() for x in types)}'
                ', got %s", OP_NAME, TfLiteTypeGetName(ty));'
            ),
            "      return kTfLiteError;",
            "    }",
        ]
        checks.append("  }")
    checks += _shape_checks(op)
    checks_text = "\n".join(checks)
    if op.min_inputs == op.max_inputs:
        io_check = (
            f"  TF_LITE_OPAQUE_ENSURE_STATUS(oo_check_io(context, OP_NAME, node, {op.max_inputs}, {len(op.outputs)}));"
        )
    else:
        # Nodes of the op have different input counts: any of them is the model's, so the check
        # takes the range (a position past the node's count is then absent, as if omitted).
        io_check = (
            f"  /* The model's nodes have {op.min_inputs} to {op.max_inputs} inputs (see the comment at the top). */\n"
            f"  TF_LITE_OPAQUE_ENSURE_STATUS(oo_sc_check_io_range(context, node, {op.min_inputs}, {op.max_inputs}, "
            f"{len(op.outputs)}));"
        )
    out.append(f"""static TfLiteStatus {p}Prepare(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {{
  const {p}Data* d = (const {p}Data*)TfLiteOpaqueNodeGetUserData(node);
  TF_LITE_OPAQUE_ENSURE_STATUS(oo_opts_check(context, OP_NAME, d ? &d->opts : NULL));
{io_check}
{checks_text}
  return kTfLiteOk;
}}
""")
    show_text = "\n".join("  " + line for line in show)
    maybe = [i for i in range(len(op.inputs)) if op.input_state(i) == "optional" and i < op.min_inputs]
    past = [i for i in range(op.min_inputs, op.max_inputs) if op.input_state(i) == "optional"]
    omitted_note = (
        f"\n     Input(s) {', '.join(map(str, maybe))} may be omitted: NULL from TfLiteOpaqueNodeGetInput."
        if maybe
        else ""
    )
    if past:
        omitted_note += (
            f"\n     Input(s) {', '.join(map(str, past))} may be past the node's input count"
            + (" (or omitted)" if any(op.omitted[i] for i in past) else "")
            + ": read them with oo_sc_input, NULL then."
        )
    out.append(f"""static TfLiteStatus {p}Invoke(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {{
  const {p}Data* d = (const {p}Data*)TfLiteOpaqueNodeGetUserData(node);
  char msg[2048];
  size_t pos = 0;
  (void)d; /* (an op with no options shows none: no unused-variable warning) */
  /* Write the op here: read the inputs (TfLiteOpaqueNodeGetInput, TfLiteOpaqueTensorData),
     write the outputs, and return kTfLiteOk.  Until then it reports what Init parsed.{omitted_note} */
  oo_sc_append(msg, sizeof msg, &pos, "%s: not implemented yet (options:", OP_NAME);
{show_text}
  oo_sc_append(msg, sizeof msg, &pos, ")");
  TfLiteOpaqueContextReportError(context, "%s", msg);
  return kTfLiteError;
}}
""")
    for v in sorted(op.versions):
        out.append(
            f"OPAQUE_OP(OP_NAME, {v}, .init = {p}Init, .free = {p}Free, .prepare = {p}Prepare,\n"
            f"          .invoke = {p}Invoke);"
        )
    return "\n".join(out) + "\n"
