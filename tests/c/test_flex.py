"""Tests for c/include/opaque_ops/flex.h, rawopts.h and c/fuzz/flex_fuzz.c.

The headers are compiled for real (cffi API mode, into pytest's tmp dir);
buffers come from Python's flatbuffers.flexbuffers, which is the ground truth.
Hostile-input runs use a gcc ASan/UBSan build of the standalone fuzz driver in
a subprocess, and (when clang + libFuzzer are installed) a libFuzzer build.
"""

import array
import importlib.util
import math
import os
import shutil
import struct
import subprocess

import pytest
from flatbuffers import flexbuffers as fx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDE = os.path.join(ROOT, "c", "include")
FUZZ_SRC = os.path.join(ROOT, "c", "fuzz", "flex_fuzz.c")
CORPUS_DIR = os.path.join(ROOT, "c", "fuzz", "corpus")
SAN_FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]

CDEF = r"""
typedef struct {
  const uint8_t* buf; size_t len; size_t pos;
  uint8_t parent_width; uint8_t packed_type;
} oo_flex_ref;

#define OO_FLEX_OK ...
#define OO_FLEX_NOT_FOUND ...
#define OO_FLEX_ERR_ARG ...
#define OO_FLEX_ERR_BOUNDS ...
#define OO_FLEX_ERR_MALFORMED ...
#define OO_FLEX_ERR_TYPE ...
#define OO_FLEX_ERR_RANGE ...
#define OO_FLEX_ERR_INDEX ...
#define OO_FLEX_ERR_CAPACITY ...

int oo_flex_root(const void* buf, size_t len, oo_flex_ref* out);
int oo_flex_type(oo_flex_ref r);
int oo_flex_as_int64(oo_flex_ref r, int64_t* out);
int oo_flex_as_uint64(oo_flex_ref r, uint64_t* out);
int oo_flex_as_double(oo_flex_ref r, double* out);
int oo_flex_as_bool(oo_flex_ref r, int* out);
int oo_flex_as_string(oo_flex_ref r, const char** s, size_t* n);
int oo_flex_as_blob(oo_flex_ref r, const uint8_t** p, size_t* n);
int oo_flex_vector_size(oo_flex_ref r, size_t* n);
int oo_flex_vector_at(oo_flex_ref r, size_t i, oo_flex_ref* out);
int oo_flex_map_key_at(oo_flex_ref map, size_t i, const char** s, size_t* n);
int oo_flex_map_lookup(oo_flex_ref map, const char* key, oo_flex_ref* out);
int oo_flex_get(const void* buf, size_t len, const char* key, oo_flex_ref* out);
int oo_flex_get_int(const void* buf, size_t len, const char* key, int64_t* out);
int oo_flex_get_double(const void* buf, size_t len, const char* key, double* out);
int oo_flex_get_bool(const void* buf, size_t len, const char* key, int* out);
int oo_flex_get_string(const void* buf, size_t len, const char* key,
                       const char** s, size_t* n);
int oo_flex_get_ints(const void* buf, size_t len, const char* key,
                     int64_t* out, size_t cap, size_t* n);
int oo_flex_get_floats(const void* buf, size_t len, const char* key,
                       double* out, size_t cap, size_t* n);
const char* oo_flex_strerror(int code);

#define OO_RAW_OK ...
#define OO_RAW_ERR_ARG ...
#define OO_RAW_ERR_SHORT ...
int oo_raw_i32(const void* buf, size_t len, size_t index, int32_t* out);
int oo_raw_i32s(const void* buf, size_t len, int32_t* out, size_t count);
"""

T_NULL, T_INT, T_UINT, T_FLOAT, T_KEY, T_STRING = 0, 1, 2, 3, 4, 5
T_IND_INT, T_IND_UINT, T_IND_FLOAT, T_MAP, T_VECTOR = 6, 7, 8, 9, 10
T_BLOB, T_BOOL, T_VECTOR_BOOL = 25, 26, 36


def _load_make_corpus():
    spec = importlib.util.spec_from_file_location("oo_make_corpus", os.path.join(ROOT, "c", "fuzz", "make_corpus.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


make_corpus = _load_make_corpus()


@pytest.fixture(scope="session")
def lib(tmp_path_factory):
    cffi = pytest.importorskip("cffi")
    tmp = tmp_path_factory.mktemp("cffi_flex")
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    ffi.set_source(
        "_oo_flex_test",
        '#include "opaque_ops/flex.h"\n#include "opaque_ops/rawopts.h"\n',
        include_dirs=[INCLUDE],
        extra_compile_args=["-std=c99", "-Wall", "-Wextra", "-Werror", "-Wno-unused-function"],
    )
    so_path = ffi.compile(tmpdir=str(tmp), verbose=False)
    spec = importlib.util.spec_from_file_location("_oo_flex_test", so_path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return Flex(mod.ffi, mod.lib)


class Flex:
    """Thin Python view over the compiled C API, used by the tests."""

    def __init__(self, ffi, lib):
        self.ffi, self.lib = ffi, lib
        self._keep = []

    def buf(self, data):
        b = self.ffi.new("uint8_t[]", max(len(data), 1))
        self.ffi.memmove(b, data, len(data))
        self._keep.append(b)
        return b

    def root(self, data):
        ref = self.ffi.new("oo_flex_ref*")
        rc = self.lib.oo_flex_root(self.buf(data), len(data), ref)
        assert rc == 0, self.err(rc)
        return ref[0]

    def err(self, rc):
        return self.ffi.string(self.lib.oo_flex_strerror(rc)).decode()

    def call(self, fn, ref, ctype):
        out = self.ffi.new(ctype)
        rc = fn(ref, out)
        return rc, out[0]

    def string(self, ref):
        s = self.ffi.new("const char**")
        n = self.ffi.new("size_t*")
        rc = self.lib.oo_flex_as_string(ref, s, n)
        if rc:
            return rc, None
        assert s[0][n[0]] == b"\0"
        return rc, self.ffi.unpack(s[0], n[0]).decode()

    def blob(self, ref):
        p = self.ffi.new("const uint8_t**")
        n = self.ffi.new("size_t*")
        rc = self.lib.oo_flex_as_blob(ref, p, n)
        return rc, (bytes(self.ffi.unpack(p[0], n[0])) if rc == 0 else None)

    def size(self, ref):
        return self.call(self.lib.oo_flex_vector_size, ref, "size_t*")

    def at(self, ref, i):
        out = self.ffi.new("oo_flex_ref*")
        rc = self.lib.oo_flex_vector_at(ref, i, out)
        return rc, out[0]

    def key_at(self, ref, i):
        s = self.ffi.new("const char**")
        n = self.ffi.new("size_t*")
        rc = self.lib.oo_flex_map_key_at(ref, i, s, n)
        return rc, (self.ffi.unpack(s[0], n[0]).decode() if rc == 0 else None)

    def lookup(self, ref, key):
        out = self.ffi.new("oo_flex_ref*")
        rc = self.lib.oo_flex_map_lookup(ref, key.encode(), out)
        return rc, out[0]

    def decode(self, ref):
        """Turn a ref into Python values using only the C accessors."""
        L = self.lib
        t = L.oo_flex_type(ref)
        if t == T_NULL:
            return None
        if t in (T_INT, T_IND_INT):
            rc, v = self.call(L.oo_flex_as_int64, ref, "int64_t*")
        elif t in (T_UINT, T_IND_UINT):
            rc, v = self.call(L.oo_flex_as_uint64, ref, "uint64_t*")
        elif t in (T_FLOAT, T_IND_FLOAT):
            rc, v = self.call(L.oo_flex_as_double, ref, "double*")
        elif t == T_BOOL:
            rc, v = self.call(L.oo_flex_as_bool, ref, "int*")
            v = bool(v)
        elif t in (T_STRING, T_KEY):
            rc, v = self.string(ref)
        elif t == T_BLOB:
            rc, v = self.blob(ref)
        elif t == T_MAP:
            rc, n = self.size(ref)
            assert rc == 0, self.err(rc)
            v = {}
            for i in range(n):
                rk, k = self.key_at(ref, i)
                rv, e = self.at(ref, i)
                assert rk == 0 and rv == 0
                v[k] = self.decode(e)
                # every key must also be found by the binary search
                rl, e2 = self.lookup(ref, k)
                assert rl == 0 and e2.pos == e.pos, (k, self.err(rl))
            return v
        else:
            rc, n = self.size(ref)
            assert rc == 0, (t, self.err(rc))
            v = []
            for i in range(n):
                r2, e = self.at(ref, i)
                assert r2 == 0
                v.append(self.decode(e))
            return v
        assert rc == 0, (t, self.err(rc))
        return v

    def get_int(self, data, key):
        return self._get(self.lib.oo_flex_get_int, data, key, "int64_t*")

    def get_double(self, data, key):
        return self._get(self.lib.oo_flex_get_double, data, key, "double*")

    def get_bool(self, data, key):
        return self._get(self.lib.oo_flex_get_bool, data, key, "int*")

    def _get(self, fn, data, key, ctype):
        out = self.ffi.new(ctype)
        rc = fn(self.buf(data), len(data), key.encode(), out)
        return rc, out[0]

    def get_string(self, data, key):
        s = self.ffi.new("const char**")
        n = self.ffi.new("size_t*")
        rc = self.lib.oo_flex_get_string(self.buf(data), len(data), key.encode(), s, n)
        return rc, (self.ffi.unpack(s[0], n[0]).decode() if rc == 0 else None)

    def get_vec(self, data, key, cap=16, floats=False):
        fn = self.lib.oo_flex_get_floats if floats else self.lib.oo_flex_get_ints
        out = self.ffi.new("double[]" if floats else "int64_t[]", max(cap, 1))
        n = self.ffi.new("size_t*")
        rc = fn(self.buf(data), len(data), key.encode(), out, cap, n)
        return rc, n[0], [out[i] for i in range(min(n[0], cap))] if rc == 0 else None


def build(fn):
    b = fx.Builder()
    fn(b)
    return bytes(b.Finish())


def same(a, b):
    """Deep equality where floats compare bit-for-bit-ish (NaN-safe)."""
    if isinstance(a, float) or isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


# ---------------------------------------------------------------- scalars


@pytest.mark.parametrize(
    "value,width",
    [
        (0, 1),
        (5, 1),
        (-5, 1),
        (127, 1),
        (-128, 1),
        (300, 2),
        (-300, 2),
        (32767, 2),
        (-32768, 2),
        (70000, 4),
        (-70000, 4),
        (2**31 - 1, 4),
        (-(2**31), 4),
        (2**40, 8),
        (-(2**40), 8),
        (2**63 - 1, 8),
        (-(2**63), 8),
    ],
)
def test_root_int_every_width(lib, value, width):
    data = bytes(fx.Dumps(value))
    r = lib.root(data)
    assert r.parent_width == width
    assert lib.lib.oo_flex_type(r) == T_INT
    assert lib.call(lib.lib.oo_flex_as_int64, r, "int64_t*") == (0, value)
    assert lib.call(lib.lib.oo_flex_as_double, r, "double*") == (0, float(value))
    rc, u = lib.call(lib.lib.oo_flex_as_uint64, r, "uint64_t*")
    assert (rc, u) == ((0, value) if value >= 0 else (lib.lib.OO_FLEX_ERR_RANGE, u))
    assert lib.call(lib.lib.oo_flex_as_bool, r, "int*") == (0, int(value != 0))


@pytest.mark.parametrize("width", [1, 2, 4, 8])
@pytest.mark.parametrize("kind", ["Int", "UInt", "IndirectInt", "IndirectUInt"])
def test_forced_width_ints_in_map(lib, kind, width):
    vals = {"Int": [1, -1, 100], "UInt": [0, 1, 200], "IndirectInt": [-7, 7], "IndirectUInt": [7, 255]}[kind]

    def fn(b):
        with b.Map():
            for i, v in enumerate(vals):
                getattr(b, kind)("k%d" % i, v, byte_width=width)

    data = build(fn)
    for i, v in enumerate(vals):
        assert lib.get_int(data, "k%d" % i) == (0, v)
    assert lib.decode(lib.root(data)) == fx.Loads(data)


def test_uint_ranges(lib):
    L = lib.lib
    data = build(lambda b: b.UInt(2**64 - 1))
    r = lib.root(data)
    assert lib.lib.oo_flex_type(r) == T_UINT and r.parent_width == 8
    assert lib.call(L.oo_flex_as_uint64, r, "uint64_t*") == (0, 2**64 - 1)
    assert lib.call(L.oo_flex_as_int64, r, "int64_t*")[0] == L.OO_FLEX_ERR_RANGE
    assert lib.call(L.oo_flex_as_double, r, "double*") == (0, float(2**64 - 1))
    for v in (0, 200, 60000, 4000000000, 2**63):
        data = build(lambda b: b.UInt(v))
        assert lib.call(L.oo_flex_as_uint64, lib.root(data), "uint64_t*") == (0, v)


@pytest.mark.parametrize(
    "value,width",
    [
        (1.5, 4),
        (-0.25, 4),
        (0.0, 4),
        (2.0**127, 4),
        (3.0e38, 8),
        (0.1, 8),
        (1e-300, 8),
        (2.0**-149, 4),
        (float("inf"), 4),
        (-1.0 / 3.0, 8),
    ],
)
def test_root_float(lib, value, width):
    data = bytes(fx.Dumps(value))
    r = lib.root(data)
    assert r.parent_width == width and lib.lib.oo_flex_type(r) == T_FLOAT
    rc, d = lib.call(lib.lib.oo_flex_as_double, r, "double*")
    assert rc == 0 and d == value
    # floats are not silently truncated to ints
    assert lib.call(lib.lib.oo_flex_as_int64, r, "int64_t*")[0] == lib.lib.OO_FLEX_ERR_TYPE
    assert lib.call(lib.lib.oo_flex_as_bool, r, "int*")[0] == lib.lib.OO_FLEX_ERR_TYPE


def test_float_nan_and_forced_widths(lib):
    data = bytes(fx.Dumps(float("nan")))
    rc, d = lib.call(lib.lib.oo_flex_as_double, lib.root(data), "double*")
    assert rc == 0 and math.isnan(d)

    def fn(b):
        with b.Map():
            b.Float("f4", 0.5, byte_width=4)
            b.Float("f8", 0.5, byte_width=8)
            b.IndirectFloat("i4", 2.25, byte_width=4)
            b.IndirectFloat("i8", 0.1, byte_width=8)

    data = build(fn)
    assert lib.get_double(data, "f4") == (0, 0.5)
    assert lib.get_double(data, "f8") == (0, 0.5)
    assert lib.get_double(data, "i4") == (0, 2.25)
    assert lib.get_double(data, "i8") == (0, 0.1)


def test_float_of_width_1_or_2_is_malformed(lib):
    # FlexBuffers has no 8/16-bit floats: root FLOAT stored in 1 or 2 bytes
    for w, payload in ((1, b"\x05"), (2, b"\x05\x00")):
        data = payload + bytes([(T_FLOAT << 2) | {1: 0, 2: 1}[w], w])
        r = lib.root(data)
        assert lib.call(lib.lib.oo_flex_as_double, r, "double*")[0] == lib.lib.OO_FLEX_ERR_MALFORMED


def test_bool_null_and_int_as_bool(lib):
    L = lib.lib
    for v in (True, False):
        r = lib.root(bytes(fx.Dumps(v)))
        assert L.oo_flex_type(r) == T_BOOL
        assert lib.call(L.oo_flex_as_bool, r, "int*") == (0, int(v))
        assert lib.call(L.oo_flex_as_int64, r, "int64_t*") == (0, int(v))
    r = lib.root(bytes(fx.Dumps(None)))
    assert L.oo_flex_type(r) == T_NULL
    for fn, ct in (
        (L.oo_flex_as_int64, "int64_t*"),
        (L.oo_flex_as_double, "double*"),
        (L.oo_flex_as_bool, "int*"),
        (L.oo_flex_as_uint64, "uint64_t*"),
    ):
        assert lib.call(fn, r, ct)[0] == L.OO_FLEX_ERR_TYPE
    data = bytes(fx.Dumps({"on": 1, "off": 0, "t": True, "f": False, "neg": -2}))
    assert lib.get_bool(data, "on") == (0, 1)
    assert lib.get_bool(data, "off") == (0, 0)
    assert lib.get_bool(data, "t") == (0, 1)
    assert lib.get_bool(data, "f") == (0, 0)
    assert lib.get_bool(data, "neg") == (0, 1)


# ---------------------------------------------------------------- strings, blobs


@pytest.mark.parametrize("s", ["", "a", "SAME", "VALID", "x" * 255, "y" * 256, "z" * 70000, "h\u00e9llo \u2603"])
def test_strings(lib, s):
    data = bytes(fx.Dumps(s))
    r = lib.root(data)
    assert lib.lib.oo_flex_type(r) == T_STRING
    assert lib.string(r) == (0, s)
    data = bytes(fx.Dumps({"s": s}))
    assert lib.get_string(data, "s") == (0, s)
    assert lib.get_int(data, "s")[0] == lib.lib.OO_FLEX_ERR_TYPE


def test_string_without_nul_is_rejected(lib):
    data = bytearray(fx.Dumps("abc"))  # 03 'a' 'b' 'c' 00 | off | type | width
    assert data[4] == 0
    data[4] = ord("!")
    assert lib.string(lib.root(bytes(data)))[0] == lib.lib.OO_FLEX_ERR_MALFORMED


def test_blob(lib):
    payload = bytes(range(256)) * 2
    data = build(lambda b: b.Blob(payload))
    r = lib.root(data)
    assert lib.lib.oo_flex_type(r) == T_BLOB
    assert lib.blob(r) == (0, payload)
    assert lib.string(r)[0] == lib.lib.OO_FLEX_ERR_TYPE
    assert lib.blob(lib.root(build(lambda b: b.Blob(b"")))) == (0, b"")


# ---------------------------------------------------------------- vectors


@pytest.mark.parametrize(
    "value",
    [
        [],
        [1, 3, 3, 1],
        [1, -1, 300, -70000, 2**40],
        [0.5, 0.1],
        ["a", "", "ccc"],
        [1, "x", 2.5, True, None, [1, [2, [3]]], {"k": "v"}],
        list(range(1000)),
        [[]] * 3,
    ],
)
def test_untyped_vectors_match_python(lib, value):
    data = bytes(fx.Dumps(value))
    r = lib.root(data)
    assert lib.lib.oo_flex_type(r) == T_VECTOR
    got = lib.decode(r)
    assert same(got, fx.Loads(data)) and same(got, value)
    rc, n = lib.size(r)
    assert rc == 0 and n == len(value)
    assert lib.at(r, n)[0] == lib.lib.OO_FLEX_ERR_INDEX
    assert lib.at(r, 2**64 - 1)[0] == lib.lib.OO_FLEX_ERR_INDEX


def test_typed_vectors(lib):
    cases = {
        "i8": ([1, -2, 3], 11, 1),
        "i16": (array.array("h", [1, -2, 30000]), 11, 2),
        "i32": (array.array("i", [1, -2, 70000]), 11, 4),
        "i64": ([2**40, -(2**40)], 11, 8),
        "u8": (array.array("B", [0, 255]), 12, 1),
        "u16": (array.array("H", [1, 60000]), 12, 2),
        "u32": (array.array("I", [1, 4000000000]), 12, 4),
        "u64": (array.array("Q", [1, 2**64 - 1]), 12, 8),
        "f32": (array.array("f", [0.5, -1.25]), 13, 4),
        "f64": (array.array("d", [0.1, 0.2]), 13, 8),
        "keys": (["a", "bb", ""], 14, None),
        "bools": ([True, False, True], 36, 1),
    }

    def fn(b):
        with b.Map():
            for k, (v, _, _) in cases.items():
                et = fx.Type.KEY if k == "keys" else None
                b.TypedVectorFromElements(k, v, element_type=et)

    data = build(fn)
    root = lib.root(data)
    decoded = lib.decode(root)
    assert same(decoded, fx.Loads(data))
    for k, (v, t, w) in cases.items():
        rc, ref = lib.lookup(root, k)
        assert rc == 0
        assert lib.lib.oo_flex_type(ref) == t, k
        if w:
            assert 1 << (ref.packed_type & 3) == w, k
        assert same(decoded[k], list(v)), k
    assert lib.get_vec(data, "i32") == (0, 3, [1, -2, 70000])
    assert lib.get_vec(data, "u16", floats=True) == (0, 2, [1.0, 60000.0])
    assert lib.get_vec(data, "f32", floats=True) == (0, 2, [0.5, -1.25])
    assert lib.get_vec(data, "bools") == (0, 3, [1, 0, 1])
    assert lib.get_vec(data, "u64")[0] == lib.lib.OO_FLEX_ERR_RANGE
    assert lib.get_vec(data, "f64")[0] == lib.lib.OO_FLEX_ERR_TYPE  # strict ints


@pytest.mark.parametrize(
    "elems,etype,bw,tcode",
    [
        ([1, 2], None, 0, 16),
        ([1, 2, 3], fx.Type.UINT, 0, 20),
        ([-1, 2, -3, 4], None, 0, 22),
        ([1.5, 2.5], None, 0, 18),
        ([1.0, 2.0, 3.0], None, 8, 21),
        ([0.5] * 4, None, 4, 24),
        ([2**40, -1], None, 0, 16),
        ([1, 2, 3], None, 2, 19),
        ([7, 8, 9, 10], fx.Type.UINT, 8, 23),
    ],
)
def test_fixed_typed_vectors(lib, elems, etype, bw, tcode):
    data = build(lambda b: b.FixedTypedVectorFromElements(elems, element_type=etype, byte_width=bw))
    r = lib.root(data)
    assert lib.lib.oo_flex_type(r) == tcode
    if bw:
        assert 1 << (r.packed_type & 3) == bw
    assert lib.size(r) == (0, len(elems))
    got = lib.decode(r)
    assert same(got, fx.Loads(data)) and same(got, [type(elems[0])(e) for e in elems])
    wrapped = build(lambda b: _fixed_in_map(b, elems, etype, bw))
    cap = len(elems)
    if isinstance(elems[0], float):
        assert lib.get_vec(wrapped, "v", cap, floats=True) == (0, cap, elems)
    else:
        assert lib.get_vec(wrapped, "v", cap) == (0, cap, elems)
        assert lib.get_vec(wrapped, "v", cap - 1)[:2] == (lib.lib.OO_FLEX_ERR_CAPACITY, cap)


def _fixed_in_map(b, elems, etype, bw):
    with b.Map():
        b.FixedTypedVectorFromElements("v", elems, element_type=etype, byte_width=bw)


def test_vector_string_deprecated_by_hand(lib):
    # VECTOR_STRING_DEPRECATED (15): typed vector of offsets to strings, with
    # the strings' length prefix as wide as the vector's elements (8-bit here).
    buf = bytearray()
    pos_a = len(buf) + 1
    buf += b"\x02ab\x00"
    pos_b = len(buf) + 1
    buf += b"\x01c\x00"
    buf += b"\x02"  # vector length
    vec = len(buf)
    buf += bytes([vec - pos_a])  # element 0 offset
    buf += bytes([vec + 1 - pos_b])  # element 1 offset
    root = len(buf)
    buf += bytes([root - vec, (15 << 2) | 0, 1])
    r = lib.root(bytes(buf))
    assert lib.lib.oo_flex_type(r) == 15
    assert lib.decode(r) == ["ab", "c"]


# ---------------------------------------------------------------- maps


def test_tflite_converter_layout(lib):
    opts = {"T": 1, "ksizes": [1, 3, 3, 1], "padding": "SAME", "rates": [1, 1, 1, 1], "strides": [1, 1, 1, 1]}
    data = bytes(fx.Dumps(opts))
    assert lib.decode(lib.root(data)) == opts
    assert lib.get_int(data, "T") == (0, 1)
    assert lib.get_string(data, "padding") == (0, "SAME")
    assert lib.get_vec(data, "ksizes", 4) == (0, 4, [1, 3, 3, 1])
    assert lib.get_vec(data, "strides", 4) == (0, 4, [1, 1, 1, 1])
    assert lib.get_vec(data, "rates", 4, floats=True) == (0, 4, [1.0] * 4)
    assert lib.get_vec(data, "ksizes", 3)[:2] == (lib.lib.OO_FLEX_ERR_CAPACITY, 4)
    assert lib.get_vec(data, "ksizes", 0)[:2] == (lib.lib.OO_FLEX_ERR_CAPACITY, 4)
    assert lib.get_int(data, "missing")[0] == lib.lib.OO_FLEX_NOT_FOUND
    assert lib.get_int(data, "padding")[0] == lib.lib.OO_FLEX_ERR_TYPE
    assert lib.get_vec(data, "T")[0] == lib.lib.OO_FLEX_ERR_TYPE
    # keys in the buffer are sorted, as the binary search assumes
    r = lib.root(data)
    assert [lib.key_at(r, i)[1] for i in range(5)] == sorted(opts)


def test_mediapipe_8bit_layout(lib):
    data = bytes(fx.Dumps({"output_height": 16, "output_width": 16}))
    r = lib.root(data)
    assert r.parent_width == 1 and r.packed_type & 3 == 0  # everything 8-bit
    assert lib.get_int(data, "output_height") == (0, 16)
    assert lib.get_int(data, "output_width") == (0, 16)
    assert lib.get_double(data, "output_width") == (0, 16.0)
    assert lib.get_int(data, "output_")[0] == lib.lib.OO_FLEX_NOT_FOUND
    assert lib.get_int(data, "output_heightx")[0] == lib.lib.OO_FLEX_NOT_FOUND


@pytest.mark.parametrize("nkeys", [0, 1, 2, 3, 50, 300])
def test_binary_search_many_keys(lib, nkeys):
    d = {"k%03d" % i: i * 1000 - 7 for i in range(nkeys)}
    data = bytes(fx.Dumps(d))
    r = lib.root(data)
    for k, v in d.items():
        assert lib.get_int(data, k) == (0, v), k
    for probe in ["", "k", "k000x", "k0005", "j", "l", "k%03d" % nkeys, "\x7f", "\u00ff"]:
        if probe not in d:
            assert lib.lookup(r, probe)[0] == lib.lib.OO_FLEX_NOT_FOUND, probe
    assert lib.decode(r) == d


def test_nested_maps_and_vectors(lib):
    value = {
        "a": {"b": {"c": [1, {"d": [0.5, "e", [True]]}]}},
        "list": [{"x": 1}, {"y": [2, 3]}],
        "s": "top",
        "f": -2.5,
    }
    data = bytes(fx.Dumps(value))
    r = lib.root(data)
    assert lib.decode(r) == value == fx.Loads(data)
    rc, a = lib.lookup(r, "a")
    rc2, b_ = lib.lookup(a, "b")
    rc3, c = lib.lookup(b_, "c")
    rc4, elem = lib.at(c, 1)
    rc5, dvec = lib.lookup(elem, "d")
    assert (rc, rc2, rc3, rc4, rc5) == (0,) * 5
    assert lib.decode(dvec) == [0.5, "e", [True]]
    assert lib.lookup(c, "x")[0] == lib.lib.OO_FLEX_ERR_TYPE  # vector, not map


def test_keys_with_high_bytes_sort_unsigned(lib):
    # Python's Key() takes raw bytes; keys >= 0x80 must sort after ASCII
    # (strcmp order on unsigned chars), and the C search must agree.
    d = {b"a": 1, b"\xe9": 2, b"z": 3, b"\xff\xff": 4, b"A": 5, b"\x01": 6}

    def fn(b):
        with b.Map():
            for k, v in d.items():
                b.Key(k)
                b.Int(v)

    data = build(fn)
    r = lib.root(data)
    keys = [lib.ffi.new("const char**") for _ in d]
    n = lib.ffi.new("size_t*")
    stored = []
    for i, kp in enumerate(keys):
        assert lib.lib.oo_flex_map_key_at(r, i, kp, n) == 0
        stored.append(lib.ffi.unpack(kp[0], n[0]))
    assert stored == sorted(d)
    out = lib.ffi.new("int64_t*")
    for k, v in d.items():
        assert lib.lib.oo_flex_get_int(lib.buf(data), len(data), k, out) == 0 and out[0] == v
    assert lib.lib.oo_flex_get_int(lib.buf(data), len(data), b"\xfe", out) == lib.lib.OO_FLEX_NOT_FOUND


def test_wide_map_16_and_32_bit(lib):
    d = {"big": "x" * 70000, "v": list(range(-300, 300, 3)), "n": 2**33, "f": 0.1}
    data = bytes(fx.Dumps(d))
    r = lib.root(data)
    assert r.packed_type & 3 >= 2
    assert lib.decode(r) == d
    rc, n, vals = lib.get_vec(data, "v", 300)
    assert rc == 0 and vals == d["v"]


def test_unsorted_keys_stay_in_bounds(lib):
    data = bytearray(fx.Dumps({"a": 1, "b": 2, "c": 3, "d": 4}))
    idx = [data.index(c) for c in (b"a\x00", b"d\x00")]
    data[idx[0]], data[idx[1]] = ord("d"), ord("a")  # keys now d,b,c,a
    data = bytes(data)
    r = lib.root(data)
    for k in "abcdxyz":
        rc, ref = lib.lookup(r, k)
        assert rc in (0, lib.lib.OO_FLEX_NOT_FOUND)


def test_key_without_nul_running_off_the_end(lib):
    # Hand-made 8-bit map {<key>: 7} in which no byte is zero, so the single
    # key never terminates inside the buffer.
    data = bytes(
        [
            0x01,  # keys vector length 1
            0x01,  # key 0 -> offset 1 back: the key starts at byte 0
            0x01,
            0x01,  # map: keys vector offset (2-1=1), keys width 1
            0x01,  # map length 1
            0x07,
            0x04,  # value 7, type INT/8-bit
            0x02,
            (T_MAP << 2),
            0x01,
        ]
    )  # root: offset 2 back, MAP, width 1
    r = lib.root(data)
    assert lib.size(r) == (0, 1)
    assert lib.decode(lib.at(r, 0)[1]) == 7
    assert lib.key_at(r, 0)[0] == lib.lib.OO_FLEX_ERR_MALFORMED
    out = lib.ffi.new("int64_t*")
    L = lib.lib
    assert L.oo_flex_get_int(lib.buf(data), len(data), data, out) == L.OO_FLEX_ERR_MALFORMED
    assert L.oo_flex_get_int(lib.buf(data), len(data), b"a", out) == L.OO_FLEX_NOT_FOUND
    assert L.oo_flex_get_int(lib.buf(data), len(data), b"\x01", out) == L.OO_FLEX_NOT_FOUND


def test_root_errors_and_strerror(lib):
    L, ffi = lib.lib, lib.ffi
    ref = ffi.new("oo_flex_ref*")
    assert L.oo_flex_root(ffi.NULL, 0, ref) == L.OO_FLEX_ERR_BOUNDS
    assert L.oo_flex_root(ffi.NULL, 5, ref) == L.OO_FLEX_ERR_ARG
    assert L.oo_flex_root(lib.buf(b"\x00\x04\x01"), 3, ffi.NULL) == L.OO_FLEX_ERR_ARG
    assert L.oo_flex_root(lib.buf(b"\x04\x01"), 2, ref) == L.OO_FLEX_ERR_BOUNDS
    assert L.oo_flex_root(lib.buf(b"\x00\x04\x03"), 3, ref) == L.OO_FLEX_ERR_MALFORMED
    assert L.oo_flex_root(lib.buf(b"\x00\x04\x04"), 3, ref) == L.OO_FLEX_ERR_BOUNDS
    assert L.oo_flex_root(lib.buf(b"\x07\x04\x01"), 3, ref) == L.OO_FLEX_OK
    assert L.oo_flex_type(ref[0]) == T_INT
    ref[0].packed_type = 30 << 2
    assert L.oo_flex_type(ref[0]) == L.OO_FLEX_ERR_MALFORMED
    codes = [
        L.OO_FLEX_OK,
        L.OO_FLEX_NOT_FOUND,
        L.OO_FLEX_ERR_ARG,
        L.OO_FLEX_ERR_BOUNDS,
        L.OO_FLEX_ERR_MALFORMED,
        L.OO_FLEX_ERR_TYPE,
        L.OO_FLEX_ERR_RANGE,
        L.OO_FLEX_ERR_INDEX,
        L.OO_FLEX_ERR_CAPACITY,
    ]
    assert codes[0] == 0 and all(c < 0 for c in codes[1:]) and len(set(codes)) == len(codes)
    msgs = [lib.err(c) for c in codes]
    assert len(set(msgs)) == len(msgs) and lib.err(12345) == "unknown error"


def test_map_keys_count_mismatch_is_malformed(lib):
    good = bytes(fx.Dumps({"output_height": 16, "output_width": 16}))
    assert lib.get_int(good, "output_width") == (0, 16)
    at = good.index(b"\x02\x1c\x0f")  # keys vector: length 2, two key offsets
    bad = bytearray(good)
    bad[at] = 1
    assert lib.get_int(bytes(bad), "output_width")[0] == lib.lib.OO_FLEX_ERR_MALFORMED
    r = lib.root(bytes(bad))
    assert lib.key_at(r, 0)[0] == lib.lib.OO_FLEX_ERR_MALFORMED
    assert lib.at(r, 1)[0] == 0  # the values themselves are still reachable
    bad[at + 1 + 2 + 1] = 3  # keys byte width 3: not a valid width
    bad[at] = 2
    assert lib.get_int(bytes(bad), "output_width")[0] == lib.lib.OO_FLEX_ERR_MALFORMED


def test_every_truncation_in_process(lib):
    """In-process (no sanitizer; see the subprocess tests for that): every
    prefix and suffix of every seed gives a clean status code."""
    for data in make_corpus.seeds().values():
        for cut in range(len(data)):
            for piece in (data[:cut], data[cut:]):
                ref = lib.ffi.new("oo_flex_ref*")
                rc = lib.lib.oo_flex_root(lib.buf(piece), len(piece), ref)
                assert rc in (0, lib.lib.OO_FLEX_ERR_BOUNDS, lib.lib.OO_FLEX_ERR_MALFORMED)
                lib.lib.oo_flex_get_int(lib.buf(piece), len(piece), b"T", lib.ffi.new("int64_t*"))
        lib._keep.clear()


def test_seeds_decode_like_python(lib):
    for name, data in make_corpus.seeds().items():
        got = lib.decode(lib.root(data))
        assert same(got, fx.Loads(data)), name


def test_corpus_dir_matches_generator():
    seeds = make_corpus.seeds()
    for name, data in seeds.items():
        path = os.path.join(CORPUS_DIR, name + ".flex")
        assert os.path.exists(path), "run: python c/fuzz/make_corpus.py"
        with open(path, "rb") as f:
            assert f.read() == data, name


# ---------------------------------------------------------------- rawopts


def test_raw_i32(lib):
    L, ffi = lib.lib, lib.ffi
    vals = [16, -16, 2**31 - 1, -(2**31), 0, 7]
    raw = struct.pack("<6i", *vals)
    for shift in range(4):  # unaligned starts
        b = lib.buf(b"\xaa" * shift + raw)
        p = ffi.cast("uint8_t*", b) + shift
        out = ffi.new("int32_t*")
        for i, v in enumerate(vals):
            assert L.oo_raw_i32(p, len(raw), i, out) == L.OO_RAW_OK and out[0] == v
        out[0] = 99
        assert L.oo_raw_i32(p, len(raw), 6, out) == L.OO_RAW_ERR_SHORT and out[0] == 99
        assert L.oo_raw_i32(p, len(raw) - 1, 5, out) == L.OO_RAW_ERR_SHORT
        assert L.oo_raw_i32(p, len(raw), 2**64 - 1, out) == L.OO_RAW_ERR_SHORT
        assert L.oo_raw_i32(p, len(raw), 2**62, out) == L.OO_RAW_ERR_SHORT
    out = ffi.new("int32_t*")
    assert L.oo_raw_i32(ffi.NULL, 0, 0, out) == L.OO_RAW_ERR_SHORT
    assert L.oo_raw_i32(ffi.NULL, 4, 0, out) == L.OO_RAW_ERR_ARG
    assert L.oo_raw_i32(lib.buf(raw), 24, 0, ffi.NULL) == L.OO_RAW_ERR_ARG


@pytest.mark.parametrize("nbytes,count", [(12, 3), (32, 6), (40, 6), (40, 10)])
def test_raw_i32s_struct_options(lib, nbytes, count):
    L, ffi = lib.lib, lib.ffi
    vals = list(range(-3, nbytes // 4 - 3))
    raw = struct.pack("<%di" % (nbytes // 4), *vals)
    out = ffi.new("int32_t[]", count)
    assert L.oo_raw_i32s(lib.buf(raw), len(raw), out, count) == L.OO_RAW_OK
    assert list(out) == vals[:count]
    assert L.oo_raw_i32s(lib.buf(raw), len(raw), out, nbytes // 4 + 1) == L.OO_RAW_ERR_SHORT
    assert L.oo_raw_i32s(lib.buf(raw), 4 * count - 1, out, count) == L.OO_RAW_ERR_SHORT
    assert L.oo_raw_i32s(lib.buf(raw), len(raw), out, 0) == L.OO_RAW_OK
    assert L.oo_raw_i32s(lib.buf(raw), len(raw), ffi.NULL, 1) == L.OO_RAW_ERR_ARG


# ---------------------------------------------------------------- compilers


def _have(cmd):
    return shutil.which(cmd) is not None


HEADER_TU = '#include "opaque_ops/flex.h"\n#include "opaque_ops/rawopts.h"\nint main(void){return 0;}\n'


@pytest.mark.parametrize(
    "compiler,flags",
    [
        ("gcc", ["-x", "c", "-std=c99", "-pedantic"]),
        ("gcc", ["-x", "c", "-std=c11", "-Wconversion", "-Wsign-conversion", "-Wshadow"]),
        ("g++", ["-x", "c++", "-std=c++11"]),
        ("clang", ["-x", "c", "-std=c99", "-pedantic", "-Wconversion"]),
    ],
)
def test_headers_compile_warning_free(tmp_path, compiler, flags):
    if not _have(compiler):
        pytest.skip("%s not installed" % compiler)
    src = tmp_path / "tu.txt"
    src.write_text(HEADER_TU)
    res = subprocess.run(
        [compiler] + flags + ["-Wall", "-Wextra", "-Werror", "-I", INCLUDE, str(src), "-o", str(tmp_path / "a.out")],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr


@pytest.fixture(scope="session")
def corpus_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    paths = []
    for name, data in sorted(make_corpus.seeds().items()):
        p = d / (name + ".flex")
        p.write_bytes(data)
        paths.append(str(p))
    # a few extra hand-made oddities
    for i, data in enumerate(
        [b"", b"\x01", b"\x00\x00", b"\x00\x24\x01", b"\x00\x28\x01", b"\xff" * 16 + b"\x24\x01", b"\x03\x26\x08"]
    ):
        p = d / ("odd%d.flex" % i)
        p.write_bytes(data)
        paths.append(str(p))
    return paths


def _run_checked(cmd, timeout):
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert "runtime error" not in out and "AddressSanitizer" not in out, out[-4000:]
    return res


def test_sanitized_standalone_driver(tmp_path, corpus_files):
    """Truncations of every seed, 20k mutants, 20k random buffers, under
    ASan+UBSan, in a subprocess so a sanitizer abort fails only this test."""
    if not _have("gcc"):
        pytest.skip("gcc not installed")
    exe = str(tmp_path / "flex_fuzz_sa")
    res = subprocess.run(
        ["gcc", "-std=c99", "-g", "-O1", "-Wall", "-Wextra", "-Werror"]
        + SAN_FLAGS
        + ["-DOO_FUZZ_STANDALONE", "-I", INCLUDE, FUZZ_SRC, "-o", exe],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    res = _run_checked([exe, "-s", "12345", "-t", "-n", "20000", "-r", "20000"] + corpus_files, timeout=120)
    assert "inputs ok" in res.stdout
    n = int(res.stdout.split()[1])
    assert n >= 40000
    # a second seed, replay-only mode (no flags) also works
    _run_checked([exe, "-s", "7", "-n", "5000"] + corpus_files, timeout=60)


def _libfuzzer_build(tmp_path):
    if not _have("clang"):
        return None, "clang not installed (apt-get install -y clang)"
    exe = str(tmp_path / "flex_fuzz")
    res = subprocess.run(
        [
            "clang",
            "-g",
            "-O1",
            "-fsanitize=fuzzer,address,undefined",
            "-fno-sanitize-recover=all",
            "-I",
            INCLUDE,
            FUZZ_SRC,
            "-o",
            exe,
        ],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        return None, "clang cannot build with -fsanitize=fuzzer: " + res.stderr[-300:]
    return exe, None


def test_libfuzzer_smoke(tmp_path, corpus_files):
    exe, why = _libfuzzer_build(tmp_path)
    if exe is None:
        pytest.skip(why)
    work = tmp_path / "work_corpus"
    work.mkdir()
    for p in corpus_files:
        shutil.copy(p, work)
    res = subprocess.run(
        [exe, "-runs=200000", "-max_total_time=20", "-seed=1", "-max_len=1024", str(work)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert "Done" in out and "runtime error" not in out and "ERROR:" not in out, out[-4000:]
