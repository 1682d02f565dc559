#!/usr/bin/env python3
"""Write FlexBuffer seed files for c/fuzz/flex_fuzz.c into c/fuzz/corpus/.

Usage: python c/fuzz/make_corpus.py [OUTDIR]

The buffers come from Python's flatbuffers.flexbuffers, so they follow the
real format; between them they cover every value kind flex.h understands.
`seeds()` is also imported by tests/c/test_flex.py.
"""

import array
import os
import sys

from flatbuffers import flexbuffers as fx


def _build(fn):
    b = fx.Builder()
    fn(b)
    return bytes(b.Finish())


def _typed_vectors(b):
    with b.Map():
        b.TypedVectorFromElements("i8", [1, -2, 3])
        b.TypedVectorFromElements("i64", [2**40, -(2**40)])
        b.TypedVectorFromElements("u16", array.array("H", [1, 60000]))
        b.TypedVectorFromElements("f32", array.array("f", [0.5, -1.25]))
        b.TypedVectorFromElements("f64", [0.1, 0.2])
        b.TypedVectorFromElements("keys", ["a", "bb"], element_type=fx.Type.KEY)
        b.TypedVectorFromElements("bools", [True, False, True])
        b.FixedTypedVectorFromElements("int2", [1, 2])
        b.FixedTypedVectorFromElements("uint3", [1, 2, 3], element_type=fx.Type.UINT)
        b.FixedTypedVectorFromElements("float4", [1.0, 2.0, 3.0, 4.0])


def _scalars(b):
    with b.Map():
        b.Int("i8", 5)
        b.Int("i16", 300)
        b.Int("i32", -70000)
        b.Int("i64", 2**40)
        b.UInt("u64", 2**64 - 1)
        b.Float("f32", 1.5)
        b.Float("f64", 0.1)
        b.Bool("t", True)
        b.Null("n")
        b.IndirectInt("ii", -3)
        b.IndirectUInt("iu", 70000)
        b.IndirectFloat("if", 2.5)
        b.Blob("blob", b"\x00\x01\x02")
        b.String("s", "")


def seeds():
    """name -> bytes."""
    out = {
        "tflite_extract_patches": fx.Dumps(
            {"T": 1, "ksizes": [1, 3, 3, 1], "padding": "SAME", "rates": [1, 1, 1, 1], "strides": [1, 1, 1, 1]}
        ),
        "mediapipe_out_hw": fx.Dumps({"output_height": 16, "output_width": 16}),
        "nested": fx.Dumps(
            {"a": {"b": {"c": [1, "x", 2.5, True, None, {"d": [[], [0]]}]}}, "b": ["s1", "s2", ""], "z": -(2**62)}
        ),
        "many_keys": fx.Dumps({"k%02d" % i: i * 1000 for i in range(50)}),
        "wide": fx.Dumps({"big": "x" * 300, "v": list(range(-200, 200, 7)), "d": 1e-300}),
        "scalars": _build(_scalars),
        "typed_vectors": _build(_typed_vectors),
        "root_int": fx.Dumps(-123456789),
        "root_string": fx.Dumps("hello"),
        "root_vector": fx.Dumps([1, 2.0, "three", [4], {"five": 5}]),
    }
    return {k: bytes(v) for k, v in out.items()}


def main(argv):
    outdir = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
    os.makedirs(outdir, exist_ok=True)
    for name, data in sorted(seeds().items()):
        with open(os.path.join(outdir, name + ".flex"), "wb") as f:
            f.write(data)
    print("wrote %d seeds to %s" % (len(seeds()), outdir))


if __name__ == "__main__":
    main(sys.argv)
