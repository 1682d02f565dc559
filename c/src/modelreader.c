/*
 * opaque_ops compiled model reader: the common case of
 * opaque_ops/model/parser.py's _parse, in C, for the fast calls module.
 *
 * What it does: reads a .tflite flatbuffer (TFLite's schema.fbs: the model,
 * its buffers, operator codes, subgraphs with their tensors and operators,
 * builtin options, signatures and metadata) and builds the same objects the
 * Python reader builds: TensorInfo and OpInfo instances, tuples, lists,
 * dicts, str and bytes.  The Python side (reader._read_compiled) passes the
 * classes, tables and helpers to use ("spec", built once by
 * decoding._compiled_spec) and wraps the result in SubgraphInfo, SignatureInfo
 * and ModelInfo.
 *
 * What it refuses: anything unusual.  It returns None, and the Python reader
 * then reads the model and gives its own verdict and message, for every
 * bounds or layout problem, invalid UTF-8 where the Python reader requires
 * UTF-8, an index out of range, a model of 2 GB or more, buffers or custom
 * options stored outside the flatbuffer, sparse tensors, a work budget
 * exceeded (charged as the Python reader charges it, or more), and a
 * big-endian host.  So it never accepts a model the Python reader rejects:
 * its result is either None or the Python reader's result.  The Python
 * reader stays the reference (tests/model/test_compiled_reader.py compares
 * the two on every model of the corpus and on thousands of mutated ones).
 *
 * Why it exists: the Python reader is about 1.2 ms of a model's first
 * creation (face detection: 250 tensors, 164 operators), spread evenly over
 * per-field Python work; here it is a few tens of microseconds.  It is
 * written by hand, because the flatbuffers Python package is the slow kind
 * of reader being replaced, and no small, maintained C library reads
 * TFLite's schema without vendoring TensorFlow's generated code.
 *
 * Memory safety: every read goes through a check against the buffer length;
 * positions are int64_t computed from 32-bit fields on a buffer of less than
 * 2 GB, so no sum overflows; a vector's length is checked against the bytes
 * left before anything is allocated for it; there is no recursion.  It runs
 * with the GIL held and keeps the bytes object it reads alive (the caller's
 * reference) for the whole call; it has no global state.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

/* Return codes of the helpers: 0 fine; -1 refused or a Python error (then
 * PyErr_Occurred() says which). */
#define REFUSE (-1)

/* What the Python side passes in, by position (decoding._compiled_spec). */
enum {
    SPEC_TENSOR_CLASS,
    SPEC_TENSOR_FIELDS,
    SPEC_OP_CLASS,
    SPEC_OP_FIELDS,
    SPEC_DTYPES,      /* tuple of 256: numpy dtype or None, by tensor type + 128 */
    SPEC_TYPE_NAMES,  /* tuple of 256: type name, by tensor type + 128 */
    SPEC_NO_SCALES,
    SPEC_NO_ZERO_POINTS,
    SPEC_QUANT_KEYS,  /* ("scales", "zero_points", "quantized_dimension") */
    SPEC_QUANT,       /* quant(data, scale_start, scale_n, zp_start, zp_n, qdim) -> dict */
    SPEC_OP_NAMES,    /* {builtin code: name} */
    SPEC_OPTIONS,     /* tuple of 256, by union type: (slot sizes, readers or None) */
    SPEC_FLEX,        /* flex(custom_options bytes) -> dict or None */
    SPEC_CUSTOM_CODE, /* the CUSTOM builtin code */
    SPEC_LEN
};

#define N_FIELDS 12
#define MAX_SLOTS 64

typedef struct {
    const uint8_t *buf;
    int64_t size;
    int64_t budget;
    PyObject *data; /* the bytes object (borrowed: the caller holds it) */
    PyObject **spec;
    PyObject *empty_tuple;
    PyObject *empty_str;
} Reader;

/* ------------------------------------------------------------ raw reads */
/* Callers check the bounds first; these only load little-endian values. */

static inline uint8_t ld_u8(const Reader *r, int64_t p) { return r->buf[p]; }
static inline int8_t ld_i8(const Reader *r, int64_t p) { return (int8_t)r->buf[p]; }
static inline uint16_t ld_u16(const Reader *r, int64_t p) {
    uint16_t v;
    memcpy(&v, r->buf + p, 2);
    return v;
}
static inline uint32_t ld_u32(const Reader *r, int64_t p) {
    uint32_t v;
    memcpy(&v, r->buf + p, 4);
    return v;
}
static inline int32_t ld_i32(const Reader *r, int64_t p) {
    int32_t v;
    memcpy(&v, r->buf + p, 4);
    return v;
}
static inline uint64_t ld_u64(const Reader *r, int64_t p) {
    uint64_t v;
    memcpy(&v, r->buf + p, 8);
    return v;
}
static inline float ld_f32(const Reader *r, int64_t p) {
    float v;
    memcpy(&v, r->buf + p, 4);
    return v;
}

/* `n` bytes at `p` lie inside the buffer. */
static inline int fits(const Reader *r, int64_t p, int64_t n) { return p >= 0 && n >= 0 && p <= r->size - n; }

/* The Python reader's work budget: charged the same amounts (or more), so
 * that a model it refuses for too much work is refused here too. */
static inline int charge(Reader *r, int64_t n) {
    r->budget -= n;
    return r->budget < 0 ? REFUSE : 0;
}

/* ------------------------------------------------------------ structure */

/* The field offsets (0: absent) of the table at `pos` for each slot of
 * `layout` (byte sizes; 0: a slot never read), as _Flat.table checks them. */
static int table(Reader *r, int64_t pos, const uint8_t *layout, int nslots, uint16_t *offs) {
    if (charge(r, 1) < 0 || !fits(r, pos, 4)) return REFUSE;
    int64_t vt = pos - (int64_t)ld_i32(r, pos);
    if (!fits(r, vt, 4)) return REFUSE;
    uint16_t vt_size = ld_u16(r, vt), tbl_size = ld_u16(r, vt + 2);
    if (vt_size < 4 || vt_size % 2 || !fits(r, vt, vt_size) || tbl_size < 4) return REFUSE;
    int n = (vt_size - 4) / 2;
    for (int slot = 0; slot < nslots; slot++) {
        uint16_t off = (slot < n && layout[slot]) ? ld_u16(r, vt + 4 + 2 * (int64_t)slot) : 0;
        if (off && (int)off + (int)layout[slot] > (int)tbl_size) return REFUSE;
        offs[slot] = off;
    }
    return fits(r, pos, tbl_size) ? 0 : REFUSE;
}

/* Start and length of the vector whose offset is stored at `p`. */
static int vector(Reader *r, int64_t p, int64_t elem, int64_t *start, int64_t *count) {
    if (!fits(r, p, 4)) return REFUSE;
    int64_t t = p + (int64_t)ld_u32(r, p);
    if (!fits(r, t, 4)) return REFUSE;
    int64_t n = (int64_t)ld_u32(r, t);
    if (n * elem > r->size - t - 4) return REFUSE;
    if (charge(r, n) < 0) return REFUSE;
    *start = t + 4;
    *count = n;
    return 0;
}

/* The vector of table offsets at `p`: start and count, each entry checked
 * to point inside the buffer (the tables themselves by table()). */
static int tables(Reader *r, int64_t p, int64_t *start, int64_t *count) {
    if (vector(r, p, 4, start, count) < 0) return REFUSE;
    for (int64_t i = 0; i < *count; i++) {
        int64_t e = *start + 4 * i;
        if (e + (int64_t)ld_u32(r, e) >= r->size) return REFUSE;
    }
    return 0;
}

static inline int64_t table_at(const Reader *r, int64_t start, int64_t i) {
    int64_t e = start + 4 * i;
    return e + (int64_t)ld_u32(r, e);
}

/* Position of the table whose offset is stored at `p`. */
static int sub(Reader *r, int64_t p, int64_t *out) {
    if (!fits(r, p, 4)) return REFUSE;
    int64_t t = p + (int64_t)ld_u32(r, p);
    if (t >= r->size) return REFUSE;
    *out = t;
    return 0;
}

/* An int32 vector as a tuple (as_list: a list); NULL if refused. */
static PyObject *ints(Reader *r, int64_t p, int as_list) {
    int64_t start, n;
    if (vector(r, p, 4, &start, &n) < 0) return NULL;
    PyObject *out = as_list ? PyList_New((Py_ssize_t)n) : PyTuple_New((Py_ssize_t)n);
    if (out == NULL) return NULL;
    for (int64_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLong((long)ld_i32(r, start + 4 * i));
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        if (as_list)
            PyList_SET_ITEM(out, (Py_ssize_t)i, v);
        else
            PyTuple_SET_ITEM(out, (Py_ssize_t)i, v);
    }
    return out;
}

/* A string; NULL if refused (invalid UTF-8 is refused: the Python reader
 * raises on it, with its message). */
static PyObject *string(Reader *r, int64_t p, const char *errors) {
    int64_t start, n;
    if (vector(r, p, 1, &start, &n) < 0) return NULL;
    PyObject *s = PyUnicode_DecodeUTF8((const char *)r->buf + start, (Py_ssize_t)n, errors);
    if (s == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) PyErr_Clear();
    return s;
}

/* A new instance of a dataclass, its fields set as its __init__ sets them
 * (the Python side checks the class has no __post_init__). */
static PyObject *instance(Reader *r, PyObject *cls, PyObject *names, PyObject **vals) {
    PyTypeObject *tp = (PyTypeObject *)cls;
    PyObject *obj = tp->tp_new(tp, r->empty_tuple, NULL);
    if (obj == NULL) return NULL;
    for (Py_ssize_t i = 0; i < N_FIELDS; i++) {
        if (PyObject_SetAttr(obj, PyTuple_GET_ITEM(names, i), vals[i]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    }
    return obj;
}

static void release(PyObject **vals, int n) {
    for (int i = 0; i < n; i++) Py_XDECREF(vals[i]);
}

/* ------------------------------------------------------------ tensors */

static const uint8_t TENSOR[] = {4, 1, 4, 4, 4, 1, 4, 4};
static const uint8_t QUANT[] = {0, 0, 4, 4, 0, 0, 4};

static PyObject *quantization(Reader *r, int64_t tp, uint16_t o4) {
    int64_t s0 = 0, sn = 0, z0 = 0, zn = 0, qp;
    int32_t qdim = 0;
    if (o4) {
        uint16_t q[7];
        if (sub(r, tp + o4, &qp) < 0 || table(r, qp, QUANT, 7, q) < 0) return NULL;
        if (q[2] && vector(r, qp + q[2], 4, &s0, &sn) < 0) return NULL;
        if (q[3] && vector(r, qp + q[3], 8, &z0, &zn) < 0) return NULL;
        if (q[6]) qdim = ld_i32(r, qp + q[6]);
    }
    if (sn || zn) /* numpy arrays: made by the Python side, as the Python reader makes them */
        return PyObject_CallFunction(r->spec[SPEC_QUANT], "OLLLLi", r->data, (long long)s0, (long long)sn,
                                     (long long)z0, (long long)zn, (int)qdim);
    PyObject *keys = r->spec[SPEC_QUANT_KEYS];
    PyObject *d = PyDict_New(), *q = PyLong_FromLong(qdim);
    if (d == NULL || q == NULL || PyDict_SetItem(d, PyTuple_GET_ITEM(keys, 0), r->spec[SPEC_NO_SCALES]) < 0 ||
        PyDict_SetItem(d, PyTuple_GET_ITEM(keys, 1), r->spec[SPEC_NO_ZERO_POINTS]) < 0 ||
        PyDict_SetItem(d, PyTuple_GET_ITEM(keys, 2), q) < 0) {
        Py_XDECREF(d);
        d = NULL;
    }
    Py_XDECREF(q);
    return d;
}

static PyObject *tensor(Reader *r, int64_t tp, int64_t ti, PyObject *buffers) {
    uint16_t o[8];
    PyObject *v[N_FIELDS] = {NULL};
    if (table(r, tp, TENSOR, 8, o) < 0) return NULL;
    if (o[6]) return NULL; /* sparse: left to the Python reader */
    Py_ssize_t nbuf = PyList_GET_SIZE(buffers);
    int8_t ttype = o[1] ? ld_i8(r, tp + o[1]) : 0;
    uint32_t bidx = o[2] ? ld_u32(r, tp + o[2]) : 0;
    if ((int64_t)bidx >= (nbuf > 1 ? (int64_t)nbuf : 1)) return NULL;
    v[0] = PyLong_FromLongLong(ti);
    if (o[3]) {
        v[1] = string(r, tp + o[3], NULL);
    } else {
        v[1] = r->empty_str;
        Py_INCREF(v[1]);
    }
    if (v[0] == NULL || v[1] == NULL) goto fail;
    if (o[0]) {
        v[2] = ints(r, tp + o[0], 0);
    } else {
        v[2] = r->empty_tuple;
        Py_INCREF(v[2]);
    }
    if (v[2] == NULL) goto fail;
    if (o[7]) {
        if ((v[3] = ints(r, tp + o[7], 0)) == NULL) goto fail;
    } else {
        v[3] = Py_None;
        Py_INCREF(v[3]);
    }
    v[4] = PyTuple_GET_ITEM(r->spec[SPEC_DTYPES], ttype + 128);
    v[5] = PyTuple_GET_ITEM(r->spec[SPEC_TYPE_NAMES], ttype + 128);
    Py_INCREF(v[4]);
    Py_INCREF(v[5]);
    if ((v[6] = PyLong_FromUnsignedLong(bidx)) == NULL) goto fail;
    v[7] = nbuf ? PyList_GET_ITEM(buffers, bidx) : Py_None;
    Py_INCREF(v[7]);
    if ((v[8] = quantization(r, tp, o[4])) == NULL) goto fail;
    v[9] = (o[5] && ld_u8(r, tp + o[5])) ? Py_True : Py_False;
    Py_INCREF(v[9]);
    v[10] = Py_False;
    v[11] = Py_None;
    Py_INCREF(v[10]);
    Py_INCREF(v[11]);
    PyObject *t = instance(r, r->spec[SPEC_TENSOR_CLASS], r->spec[SPEC_TENSOR_FIELDS], v);
    release(v, N_FIELDS);
    return t;
fail:
    release(v, N_FIELDS);
    return NULL;
}

/* ------------------------------------------------------------ operators */

static const uint8_t OPERATOR[] = {4, 4, 4, 1, 4, 4, 0, 0, 0, 8, 8};
enum { K_INTS, K_I8, K_U8, K_I32, K_F32, K_BOOL, K_STR };

/* The builtin options dict of the table at `pos`, of union type `type`, as
 * parser._builtin_options builds it (from the same table,
 * decoding._OPTION_READERS); Py_None for a type it does not decode. */
static PyObject *builtin_options(Reader *r, int64_t pos, uint8_t type) {
    PyObject *entry = PyTuple_GET_ITEM(r->spec[SPEC_OPTIONS], type);
    PyObject *sizes = PyTuple_GET_ITEM(entry, 0), *readers = PyTuple_GET_ITEM(entry, 1);
    Py_ssize_t nslots = PyTuple_GET_SIZE(sizes);
    uint8_t layout[MAX_SLOTS];
    uint16_t offs[MAX_SLOTS];
    if (nslots > MAX_SLOTS) return NULL;
    for (Py_ssize_t i = 0; i < nslots; i++) layout[i] = (uint8_t)PyLong_AsLong(PyTuple_GET_ITEM(sizes, i));
    if (table(r, pos, layout, (int)nslots, offs) < 0) return NULL;
    if (readers == Py_None) {
        Py_INCREF(Py_None);
        return Py_None;
    }
    PyObject *out = PyDict_New();
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(readers); i++) {
        PyObject *rd = PyTuple_GET_ITEM(readers, i);
        PyObject *fname = PyTuple_GET_ITEM(rd, 0), *deflt = PyTuple_GET_ITEM(rd, 3), *names = PyTuple_GET_ITEM(rd, 4);
        long slot = PyLong_AsLong(PyTuple_GET_ITEM(rd, 1)), code = PyLong_AsLong(PyTuple_GET_ITEM(rd, 2));
        if (slot < 0 || slot >= nslots) goto fail; /* the spec is checked in Python; never here */
        int64_t p = pos + offs[slot];
        int present = offs[slot] != 0;
        PyObject *val = NULL;
        switch (code) {
        case K_INTS:
            if (present) {
                val = ints(r, p, 1);
            } else {
                val = Py_None;
                Py_INCREF(val);
            }
            break;
        case K_I8: {
            PyObject *raw = present ? PyLong_FromLong(ld_i8(r, p)) : (Py_INCREF(deflt), deflt);
            if (raw == NULL) goto fail;
            PyObject *named = PyDict_GetItemWithError(names, raw);
            if (named == NULL && PyErr_Occurred()) {
                Py_DECREF(raw);
                goto fail;
            }
            if (named != NULL) {
                Py_INCREF(named);
                Py_DECREF(raw);
                val = named;
            } else {
                val = raw;
            }
            break;
        }
        case K_U8:
            val = present ? PyLong_FromLong(ld_u8(r, p)) : (Py_INCREF(deflt), deflt);
            break;
        case K_I32:
            val = present ? PyLong_FromLong(ld_i32(r, p)) : (Py_INCREF(deflt), deflt);
            break;
        case K_F32:
            val = present ? PyFloat_FromDouble((double)ld_f32(r, p)) : (Py_INCREF(deflt), deflt);
            break;
        case K_BOOL: {
            int truth = present ? ld_u8(r, p) != 0 : PyObject_IsTrue(deflt);
            if (truth < 0) goto fail;
            val = truth ? Py_True : Py_False;
            Py_INCREF(val);
            break;
        }
        case K_STR: /* bytes that are not UTF-8 kept as surrogate escapes, as the Python reader keeps them */
            val = present ? string(r, p, "surrogateescape") : (Py_INCREF(deflt), deflt);
            break;
        default:
            goto fail;
        }
        if (val == NULL) goto fail;
        int rc = PyDict_SetItem(out, fname, val);
        Py_DECREF(val);
        if (rc < 0) goto fail;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* An operator's inputs or outputs: a list of tensor indices, each in
 * [-1, ntens) (-1: an omitted optional one); NULL if refused. */
static PyObject *op_tensors(Reader *r, int64_t p, uint16_t off, int64_t ntens) {
    if (!off) return PyList_New(0);
    PyObject *l = ints(r, p + off, 1);
    if (l == NULL) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(l); i++) {
        long v = PyLong_AsLong(PyList_GET_ITEM(l, i));
        if (v < -1 || v >= ntens) {
            Py_DECREF(l);
            return NULL;
        }
    }
    return l;
}

static PyObject *op(Reader *r, int64_t opos, int64_t oi, PyObject *opcodes, PyObject *op_names, int64_t ntens) {
    uint16_t o[11];
    PyObject *v[N_FIELDS] = {NULL};
    if (table(r, opos, OPERATOR, 11, o) < 0) return NULL;
    uint32_t idx = o[0] ? ld_u32(r, opos + o[0]) : 0;
    if ((int64_t)idx >= (int64_t)PyList_GET_SIZE(opcodes)) return NULL;
    PyObject *code = PyList_GET_ITEM(opcodes, idx); /* (code, custom name, version) */
    uint8_t opt_type = o[3] ? ld_u8(r, opos + o[3]) : 0;
    if (!o[5]) {
        /* Custom options stored after the flatbuffer (models over 2 GB). */
        uint64_t off = o[9] ? ld_u64(r, opos + o[9]) : 0;
        if (off > 1) return NULL;
    }
    v[0] = PyLong_FromLongLong(oi);
    v[1] = PyLong_FromUnsignedLong(idx);
    v[2] = PyTuple_GET_ITEM(code, 0);
    Py_INCREF(v[2]);
    v[3] = PyList_GET_ITEM(op_names, idx);
    Py_INCREF(v[3]);
    v[4] = PyObject_RichCompare(v[2], r->spec[SPEC_CUSTOM_CODE], Py_EQ);
    v[5] = PyTuple_GET_ITEM(code, 2);
    Py_INCREF(v[5]);
    if (v[0] == NULL || v[1] == NULL || v[4] == NULL) goto fail;
    if ((v[6] = op_tensors(r, opos, o[1], ntens)) == NULL) goto fail;
    if ((v[7] = op_tensors(r, opos, o[2], ntens)) == NULL) goto fail;
    if (o[5]) {
        int64_t start, n;
        if (vector(r, opos + o[5], 1, &start, &n) < 0) goto fail;
        if ((v[8] = PyBytes_FromStringAndSize((const char *)r->buf + start, (Py_ssize_t)n)) == NULL) goto fail;
    } else {
        v[8] = Py_None;
        Py_INCREF(v[8]);
    }
    if (v[8] != Py_None && PyBytes_GET_SIZE(v[8])) {
        if ((v[9] = PyObject_CallOneArg(r->spec[SPEC_FLEX], v[8])) == NULL) goto fail;
    } else {
        v[9] = Py_None;
        Py_INCREF(v[9]);
    }
    if ((v[10] = PyLong_FromLong(opt_type)) == NULL) goto fail;
    if (opt_type && o[4]) {
        int64_t pos;
        if (sub(r, opos + o[4], &pos) < 0 || (v[11] = builtin_options(r, pos, opt_type)) == NULL) goto fail;
    } else {
        v[11] = Py_None;
        Py_INCREF(v[11]);
    }
    PyObject *t = instance(r, r->spec[SPEC_OP_CLASS], r->spec[SPEC_OP_FIELDS], v);
    release(v, N_FIELDS);
    return t;
fail:
    release(v, N_FIELDS);
    return NULL;
}

/* ------------------------------------------------------------ the model */

static const uint8_t MODEL[] = {4, 4, 4, 4, 4, 0, 4, 4};
static const uint8_t OPCODE[] = {1, 4, 4, 4};
static const uint8_t SUBGRAPH[] = {4, 4, 4, 4, 4};
static const uint8_t BUFFER[] = {4, 8, 8};
static const uint8_t SIGDEF[] = {4, 4, 4, 0, 4};
static const uint8_t TENSORMAP[] = {4, 4};
static const uint8_t METADATA[] = {4, 4};

/* Appends `item` (stolen) to `list`; -1 if item is NULL or the append fails. */
static int append(PyObject *list, PyObject *item) {
    if (item == NULL) return REFUSE;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

static int read_buffers(Reader *r, int64_t start, int64_t n, PyObject *buffers) {
    for (int64_t i = 0; i < n; i++) {
        int64_t bp = table_at(r, start, i);
        uint16_t b[3];
        if (table(r, bp, BUFFER, 3, b) < 0) return REFUSE;
        PyObject *data = Py_None;
        if (b[0]) {
            int64_t ds, dn;
            /* Charged twice, as the Python reader charges a buffer's data
             * (its vector, then its copy; it skips the second for a data
             * vector shared with an earlier buffer, so this is never less). */
            if (vector(r, bp + b[0], 1, &ds, &dn) < 0 || charge(r, dn) < 0) return REFUSE;
            if (dn && (data = PyBytes_FromStringAndSize((const char *)r->buf + ds, (Py_ssize_t)dn)) == NULL)
                return REFUSE;
            if (!dn) Py_INCREF(data);
        } else {
            /* Data after the flatbuffer (models over 2 GB): left to Python. */
            uint64_t off = b[1] ? ld_u64(r, bp + b[1]) : 0;
            if (off > 1) return REFUSE;
            Py_INCREF(data);
        }
        if (append(buffers, data) < 0) return REFUSE;
    }
    return 0;
}

static PyObject *read_opcodes(Reader *r, int64_t p, PyObject **op_names) {
    int64_t start, n;
    PyObject *opcodes = PyList_New(0), *names = PyList_New(0);
    *op_names = names;
    if (opcodes == NULL || names == NULL) goto fail;
    if (p >= 0 && tables(r, p, &start, &n) < 0) goto fail;
    if (p < 0) n = 0;
    long custom_code = PyLong_AsLong(r->spec[SPEC_CUSTOM_CODE]);
    for (int64_t i = 0; i < n; i++) {
        int64_t cp = table_at(r, start, i);
        uint16_t c[4];
        if (table(r, cp, OPCODE, 4, c) < 0) goto fail;
        int dep = c[0] ? ld_i8(r, cp + c[0]) : 0;
        int32_t ver = c[2] ? ld_i32(r, cp + c[2]) : 1;
        int32_t code = c[3] ? ld_i32(r, cp + c[3]) : 0;
        if (dep > code) code = dep;
        PyObject *custom = Py_None, *name;
        if (c[1]) {
            if ((custom = string(r, cp + c[1], NULL)) == NULL) goto fail;
        } else {
            Py_INCREF(custom);
        }
        if (code == custom_code) {
            name = custom == Py_None ? r->empty_str : custom;
            Py_INCREF(name);
        } else {
            PyObject *key = PyLong_FromLong(code);
            if (key == NULL) {
                Py_DECREF(custom);
                goto fail;
            }
            name = PyDict_GetItemWithError(r->spec[SPEC_OP_NAMES], key);
            Py_DECREF(key);
            if (name != NULL)
                Py_INCREF(name);
            else if (!PyErr_Occurred())
                name = PyUnicode_FromFormat("BUILTIN_%d", (int)code);
        }
        if (name == NULL || append(names, name) < 0) {
            Py_DECREF(custom);
            goto fail;
        }
        if (append(opcodes, Py_BuildValue("(iNi)", (int)code, custom, (int)ver)) < 0) goto fail;
    }
    return opcodes;
fail:
    Py_XDECREF(opcodes);
    Py_XDECREF(names);
    *op_names = NULL;
    return NULL;
}

/* One subgraph as (name, tensors, inputs, outputs, operators). */
static PyObject *subgraph(Reader *r, int64_t sp, PyObject *buffers, PyObject *opcodes, PyObject *op_names) {
    uint16_t s[5];
    int64_t ts = 0, tn = 0, os = 0, on = 0;
    PyObject *name = NULL, *tens = NULL, *ins = NULL, *outs = NULL, *ops = NULL;
    if (table(r, sp, SUBGRAPH, 5, s) < 0) return NULL;
    if (s[4]) {
        if ((name = string(r, sp + s[4], NULL)) == NULL) return NULL;
    } else {
        name = r->empty_str;
        Py_INCREF(name);
    }
    if ((s[0] && tables(r, sp + s[0], &ts, &tn) < 0) || (s[3] && tables(r, sp + s[3], &os, &on) < 0)) goto fail;
    if ((tens = PyList_New(0)) == NULL || (ops = PyList_New(0)) == NULL) goto fail;
    for (int64_t i = 0; i < tn; i++)
        if (append(tens, tensor(r, table_at(r, ts, i), i, buffers)) < 0) goto fail;
    if ((ins = s[1] ? ints(r, sp + s[1], 1) : PyList_New(0)) == NULL) goto fail;
    if ((outs = s[2] ? ints(r, sp + s[2], 1) : PyList_New(0)) == NULL) goto fail;
    for (int k = 0; k < 2; k++) {
        PyObject *l = k ? outs : ins;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(l); i++) {
            long v = PyLong_AsLong(PyList_GET_ITEM(l, i));
            if (v < 0 || v >= tn) goto fail;
        }
    }
    for (int64_t i = 0; i < on; i++)
        if (append(ops, op(r, table_at(r, os, i), i, opcodes, op_names, tn)) < 0) goto fail;
    return Py_BuildValue("(NNNNN)", name, tens, ins, outs, ops);
fail:
    Py_XDECREF(name);
    Py_XDECREF(tens);
    Py_XDECREF(ins);
    Py_XDECREF(outs);
    Py_XDECREF(ops);
    return NULL;
}

/* One signature as (key, subgraph index, inputs {name: tensor}, outputs). */
static PyObject *signature(Reader *r, int64_t gp, PyObject *subgraphs) {
    uint16_t g[5];
    PyObject *key = NULL, *maps[2] = {NULL, NULL};
    if (table(r, gp, SIGDEF, 5, g) < 0) return NULL;
    if (g[2]) {
        if ((key = string(r, gp + g[2], NULL)) == NULL) return NULL;
    } else {
        key = r->empty_str;
        Py_INCREF(key);
    }
    uint32_t sg = g[4] ? ld_u32(r, gp + g[4]) : 0;
    if ((int64_t)sg >= (int64_t)PyList_GET_SIZE(subgraphs)) goto fail;
    int64_t ntens = PyList_GET_SIZE(PyTuple_GET_ITEM(PyList_GET_ITEM(subgraphs, sg), 1));
    for (int k = 0; k < 2; k++) {
        int64_t start, n = 0;
        if ((maps[k] = PyDict_New()) == NULL) goto fail;
        if (g[k] && tables(r, gp + g[k], &start, &n) < 0) goto fail;
        for (int64_t i = 0; i < n; i++) {
            int64_t tp = table_at(r, start, i);
            uint16_t t[2];
            PyObject *nm;
            if (table(r, tp, TENSORMAP, 2, t) < 0) goto fail;
            if (t[0]) {
                if ((nm = string(r, tp + t[0], NULL)) == NULL) goto fail;
            } else {
                nm = r->empty_str;
                Py_INCREF(nm);
            }
            uint32_t idx = t[1] ? ld_u32(r, tp + t[1]) : 0;
            PyObject *iv = (int64_t)idx < ntens ? PyLong_FromUnsignedLong(idx) : NULL;
            int rc = iv == NULL ? -1 : PyDict_SetItem(maps[k], nm, iv);
            Py_DECREF(nm);
            Py_XDECREF(iv);
            if (rc < 0) goto fail;
        }
    }
    return Py_BuildValue("(NINN)", key, (unsigned int)sg, maps[0], maps[1]);
fail:
    Py_XDECREF(key);
    Py_XDECREF(maps[0]);
    Py_XDECREF(maps[1]);
    return NULL;
}

static int read_metadata(Reader *r, int64_t p, int64_t bstart, int64_t bn, PyObject *metadata) {
    int64_t start, n;
    if (tables(r, p, &start, &n) < 0) return REFUSE;
    for (int64_t i = 0; i < n; i++) {
        int64_t mp = table_at(r, start, i);
        uint16_t t[2], b[3];
        if (table(r, mp, METADATA, 2, t) < 0) return REFUSE;
        uint32_t bidx = t[1] ? ld_u32(r, mp + t[1]) : 0;
        if (!t[0] || (int64_t)bidx >= bn) continue;
        int64_t ns, nn, ds, dn;
        if (vector(r, mp + t[0], 1, &ns, &nn) < 0) return REFUSE;
        int64_t bp = table_at(r, bstart, bidx);
        if (table(r, bp, BUFFER, 3, b) < 0) return REFUSE;
        if (!b[0]) continue;
        if (vector(r, bp + b[0], 1, &ds, &dn) < 0) return REFUSE;
        if (!dn) continue;
        /* Names are compared as bytes by TFLite: not required to be UTF-8. */
        PyObject *name = PyUnicode_DecodeUTF8((const char *)r->buf + ns, (Py_ssize_t)nn, "backslashreplace");
        PyObject *iv = name ? PyLong_FromUnsignedLong(bidx) : NULL;
        int rc = iv ? PyDict_SetItem(metadata, name, iv) : -1;
        Py_XDECREF(name);
        Py_XDECREF(iv);
        if (rc < 0) return REFUSE;
    }
    return 0;
}

static int spec_ok(PyObject *spec) {
    if (!PyTuple_CheckExact(spec) || PyTuple_GET_SIZE(spec) != SPEC_LEN) return 0;
    PyObject **s = &PyTuple_GET_ITEM(spec, 0);
    return PyType_Check(s[SPEC_TENSOR_CLASS]) && PyType_Check(s[SPEC_OP_CLASS]) &&
           PyTuple_CheckExact(s[SPEC_TENSOR_FIELDS]) && PyTuple_GET_SIZE(s[SPEC_TENSOR_FIELDS]) == N_FIELDS &&
           PyTuple_CheckExact(s[SPEC_OP_FIELDS]) && PyTuple_GET_SIZE(s[SPEC_OP_FIELDS]) == N_FIELDS &&
           PyTuple_CheckExact(s[SPEC_DTYPES]) && PyTuple_GET_SIZE(s[SPEC_DTYPES]) == 256 &&
           PyTuple_CheckExact(s[SPEC_TYPE_NAMES]) && PyTuple_GET_SIZE(s[SPEC_TYPE_NAMES]) == 256 &&
           PyTuple_CheckExact(s[SPEC_QUANT_KEYS]) && PyTuple_GET_SIZE(s[SPEC_QUANT_KEYS]) == 3 &&
           PyDict_CheckExact(s[SPEC_OP_NAMES]) && PyTuple_CheckExact(s[SPEC_OPTIONS]) &&
           PyTuple_GET_SIZE(s[SPEC_OPTIONS]) == 256 && PyLong_CheckExact(s[SPEC_CUSTOM_CODE]);
}

/* read_model(data, spec) -> (version, description, operator codes,
 * subgraphs, signatures, buffers, metadata), or None. */
PyObject *opaque_ops_read_model(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyBytes_CheckExact(args[0]) || !spec_ok(args[1])) {
        PyErr_SetString(PyExc_TypeError, "read_model(data: bytes, spec: tuple) with the spec of reader.py");
        return NULL;
    }
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    Py_RETURN_NONE; /* the loads above are native-endian */
#endif
    Reader r;
    r.data = args[0];
    r.buf = (const uint8_t *)PyBytes_AS_STRING(args[0]);
    r.size = (int64_t)PyBytes_GET_SIZE(args[0]);
    r.spec = &PyTuple_GET_ITEM(args[1], 0);
    if (r.size < 8 || r.size >= ((int64_t)1 << 31)) Py_RETURN_NONE;
    r.budget = 8 * r.size + ((int64_t)1 << 20);
    r.empty_tuple = PyTuple_New(0);
    r.empty_str = PyUnicode_FromStringAndSize("", 0);
    PyObject *description = NULL, *buffers = NULL, *opcodes = NULL, *op_names = NULL, *subgraphs = NULL,
             *signatures = NULL, *metadata = NULL, *result = NULL;
    if (r.empty_tuple == NULL || r.empty_str == NULL) goto done;

    int64_t root = (int64_t)ld_u32(&r, 0);
    uint16_t m[8];
    if (table(&r, root, MODEL, 8, m) < 0) goto done;
    uint32_t version = m[0] ? ld_u32(&r, root + m[0]) : 0;
    if (m[3]) {
        if ((description = string(&r, root + m[3], NULL)) == NULL) goto done;
    } else {
        description = r.empty_str;
        Py_INCREF(description);
    }
    int64_t bstart = 0, bn = 0, start, n;
    if ((buffers = PyList_New(0)) == NULL) goto done;
    if (m[4] && (tables(&r, root + m[4], &bstart, &bn) < 0 || read_buffers(&r, bstart, bn, buffers) < 0)) goto done;
    if ((opcodes = read_opcodes(&r, m[1] ? root + m[1] : -1, &op_names)) == NULL) goto done;

    if ((subgraphs = PyList_New(0)) == NULL) goto done;
    if (m[2]) {
        if (tables(&r, root + m[2], &start, &n) < 0) goto done;
        for (int64_t i = 0; i < n; i++)
            if (append(subgraphs, subgraph(&r, table_at(&r, start, i), buffers, opcodes, op_names)) < 0) goto done;
    }
    if ((signatures = PyList_New(0)) == NULL) goto done;
    if (m[7]) {
        if (tables(&r, root + m[7], &start, &n) < 0) goto done;
        for (int64_t i = 0; i < n; i++)
            if (append(signatures, signature(&r, table_at(&r, start, i), subgraphs)) < 0) goto done;
    }
    if ((metadata = PyDict_New()) == NULL) goto done;
    if (m[6] && read_metadata(&r, root + m[6], bstart, bn, metadata) < 0) goto done;
    result = Py_BuildValue("(INOOOOO)", (unsigned int)version, description, opcodes, subgraphs, signatures, buffers,
                           metadata);
    description = NULL; /* stolen by N */
done:
    Py_XDECREF(description);
    Py_XDECREF(buffers);
    Py_XDECREF(opcodes);
    Py_XDECREF(op_names);
    Py_XDECREF(subgraphs);
    Py_XDECREF(signatures);
    Py_XDECREF(metadata);
    Py_XDECREF(r.empty_tuple);
    Py_XDECREF(r.empty_str);
    if (result == NULL && !PyErr_Occurred()) Py_RETURN_NONE; /* refused: the Python reader decides */
    return result;
}
