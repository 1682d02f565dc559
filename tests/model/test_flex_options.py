"""Flexbuffer custom options: encoding checked with the flatbuffers package's own reader, decoding of hostile bytes."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
from flatbuffers import flexbuffers

from opaque_ops.errors import InvalidArgumentError, ModelError
from opaque_ops.model import decode_flex_options, flex_options
from tests.helpers.reference_models import CUSTOM_OPTS


def test_flex_options_encoding():
    enc = flex_options({"b": [1, 2, 3], "a": 1.5, "c": "s"})
    root = flexbuffers.GetRoot(enc).AsMap
    assert [str(k) for k in root.Keys.Value] == ["a", "b", "c"]
    assert root["b"].IsTypedVector and root["b"].AsTypedVector.ElementType == flexbuffers.Type.INT
    fl = flexbuffers.GetRoot(flex_options({"v": [1.0, 2.5]})).AsMap["v"]
    assert fl.IsTypedVector and fl.AsTypedVector.ElementType == flexbuffers.Type.FLOAT
    assert decode_flex_options(enc) == {"a": 1.5, "b": [1, 2, 3], "c": "s"}
    # numpy values are accepted.
    assert decode_flex_options(flex_options({"n": np.int16(4), "v": np.array([1, 2])})) == {"n": 4, "v": [1, 2]}
    # Key order does not depend on insertion order.
    assert flex_options({"x": 1, "a": 2}) == flex_options({"a": 2, "x": 1})
    with pytest.raises(TypeError):
        flex_options({"bad": object()})


@pytest.mark.parametrize(
    "options,key,where,says",
    [
        ({"größe": 1}, "'größe'", "in options has", ["'ö' (U+00F6)", "'ß' (U+00DF)", "ASCII"]),
        ({"a": {"ü": 1}}, "'ü'", "in options.a has", ["'ü' (U+00FC)", "ASCII"]),
        ({"a": [1, {"b": {"日本": 2}}]}, "'日本'", "in options.a[1].b has", ["U+65E5", "U+672C", "ASCII"]),
        ({"a\0b": 1}, "'a\\x00b'", "in options contains", ["NUL character at position 1", "remove the NUL"]),
        ({"a": {"\0": 1}}, "'\\x00'", "in options.a contains", ["NUL character at position 0"]),
    ],
)
def test_a_key_flexbuffers_cannot_hold_is_named_before_encoding(options, key, where, says):
    """Keys are NUL-terminated ASCII: the flatbuffers encoder's own errors (a
    UnicodeEncodeError at a codec position, 'key contains zero byte') named no
    key; the error names the key, where it sits, and what to do."""
    with pytest.raises(InvalidArgumentError) as info:
        flex_options(options)
    msg = str(info.value)
    assert f"flexbuffer map key {key} {where}" in msg
    for part in says:
        assert part in msg
    assert isinstance(info.value, ValueError)  # what the encoder raised, so `except ValueError` still holds


@pytest.mark.parametrize("key", [1, b"k", None, ("a",)])
def test_a_key_that_is_not_str_says_keys_are_str(key):
    with pytest.raises(TypeError, match=rf"flexbuffer map key {re.escape(repr(key))} in options.n is of type "):
        flex_options({"n": {key: 1}})


def test_the_key_check_draws_the_line_at_ascii_without_nul():
    """What the check lets through (every ASCII character but NUL, the empty
    key too) the flatbuffers reader reads back under the same key; the first
    character past ASCII is refused."""
    keys = ["", "a", "A_b-c.d", "".join(chr(c) for c in range(1, 128))]
    enc = flex_options({k: i for i, k in enumerate(keys)})
    root = flexbuffers.GetRoot(enc).AsMap
    assert [root[k].AsInt for k in keys] == list(range(len(keys)))
    assert decode_flex_options(enc) == {k: i for i, k in enumerate(keys)}
    with pytest.raises(InvalidArgumentError, match=r"'\\x80' \(U\+0080\)"):
        flex_options({"a\x7f\x80": 1})


@pytest.mark.parametrize(
    "junk", [b"", b"\x00", b"\xff\xff\xff", b"garbage-bytes", bytes(range(64)), flexbuffers.Dumps([1, 2, 3])]
)
def test_decode_flex_options_rejects_garbage(junk):
    with pytest.raises(ModelError):
        decode_flex_options(junk)


def test_flexbuffer_fuzz_only_raises_model_error():
    good = flex_options(CUSTOM_OPTS)
    rng = random.Random(7)
    for _ in range(1000):
        buf = bytearray(good)
        if rng.random() < 0.3:
            buf = buf[: rng.randrange(len(buf))]
        for _ in range(rng.randint(1, 4)):
            if buf:
                buf[rng.randrange(len(buf))] = rng.randrange(256)
        try:
            assert isinstance(decode_flex_options(bytes(buf)), dict)
        except ModelError:
            pass


def test_flexbuffer_shared_offsets_do_not_explode():
    # Each level is a vector holding the previous level twice (shared by
    # offset), so the fully expanded value would have 2**40 leaves.
    fbb = flexbuffers.Builder()
    with fbb.Map():
        fbb.Key("bomb")
        with fbb.Vector():  # holds every level, so the map gets one value
            with fbb.Vector():
                fbb.Int(1)
            for _ in range(40):
                inner = fbb.LastValue
                with fbb.Vector():
                    fbb.ReuseValue(inner)
                    fbb.ReuseValue(inner)
    data = bytes(fbb.Finish())
    assert len(data) < 2000
    with pytest.raises(ModelError):
        decode_flex_options(data)


def test_flex_options_extreme_numbers():
    """Doubles beyond float32 and uint64-sized ints round-trip; larger ints are a clear ValueError."""
    from opaque_ops.model import decode_flex_options, flex_options

    opts = {"big": 1e300, "u": 2**63, "v": [1.0, -1e300], "w": [0.5, 2.5], "n": -(2**63)}
    assert decode_flex_options(flex_options(opts)) == opts
    with pytest.raises(ValueError, match="does not fit in 64 bits"):
        flex_options({"a": 2**70})
    with pytest.raises(ValueError, match="int64 range"):
        flex_options({"a": [1, 2**64]})


def _decoded_or_none(buf: bytes):
    try:
        return decode_flex_options(buf)
    except ModelError:
        return None


def _options_corpus() -> list[bytes]:
    rng = random.Random(20261126)
    maps = [
        flex_options({}),
        flex_options({"a": 1}),
        flex_options({"stride": [2, 2], "padding": "SAME", "scale": 0.5, "f": False}),
        flex_options({"nested": {"k": [1.5, 2.5]}, "s": "x" * 300}),
        flex_options(CUSTOM_OPTS),
    ]
    fbb = flexbuffers.Builder()
    fbb.VectorFromElements([1, 2, 3])
    others = [bytes(fbb.Finish())]  # a root that is a vector, not a map
    fbb = flexbuffers.Builder()
    fbb.Int(7)
    others.append(bytes(fbb.Finish()))
    corpus = maps + others
    # MediaPipe's way: a C struct (Convolution2DTransposeBias' padding and strides).
    corpus.append(bytes([1, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0]))
    for seed in maps + others:
        for _ in range(150):
            b = bytearray(seed)
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            corpus.append(bytes(b))
        for width in range(256):  # every root width, with the root's type kept
            corpus.append(seed[:-1] + bytes([width]))
        for packed in range(256):  # every root type and bit width
            corpus.append(seed[:-2] + bytes([packed, seed[-1]]))
    corpus += [bytes(rng.randrange(256) for _ in range(rng.randint(0, 40))) for _ in range(2000)]
    return corpus


def test_flex_map_or_none_is_decode_or_none_without_importing_for_structs():
    # The reader's shortcut answers from the root's last two bytes: it must
    # give what decoding gives (or None where decoding refuses), on maps,
    # other roots, C structs, mutations and noise.
    from opaque_ops.model.flex import flex_map_or_none

    corpus = _options_corpus()
    decoded = 0
    for buf in corpus:
        want = _decoded_or_none(buf)
        assert flex_map_or_none(buf) == want, buf
        decoded += want is not None
    assert decoded > 100  # the corpus holds real maps, not only refusals


def test_reading_a_model_with_struct_options_does_not_import_flexbuffers():
    # MediaPipe's selfie model: its one custom op stores a C struct, so
    # reading it needs no flexbuffer decoder (a fresh process).
    from tests.helpers.child_process import crashed, run_child
    from tests.helpers.mediapipe_models import model_file

    selfie = model_file("modules", "selfie_segmentation", "selfie_segmentation.tflite")

    r = run_child(
        """
        import sys
        from opaque_ops.model import reader
        info = reader._read(open(sys.argv[1], "rb").read())
        [op] = [op for op in info.subgraphs[0].operators if op.is_custom]
        assert op.op_name == "Convolution2DTransposeBias" and op.options is None, op
        print(sorted(m for m in sys.modules if m.startswith("flatbuffers")))
        """,
        selfie,
    )
    assert r.returncode == 0, crashed(r)
    assert r.stdout.strip().splitlines()[-1] == "[]"


def _custom_options_corpus() -> list[bytes]:
    # Flexbuffer maps (decoded), their mutations and truncations, other
    # flexbuffer roots, C structs as MediaPipe's ops store them, and noise.
    good = flex_options(CUSTOM_OPTS)
    rng = random.Random(11)
    out = [good, flex_options({}), flex_options({"k": [1, 2]}), flexbuffers.Dumps([1, 2, 3]), flexbuffers.Dumps(7)]
    out += [np.array([3, 3, 2, 2, 1, 1], np.int32).tobytes(), np.float32([0.5, 2]).tobytes(), b"", b"\x00", b"ab"]
    for _ in range(400):
        buf = bytearray(rng.choice(out[:3]))
        if rng.random() < 0.3:
            buf = buf[: rng.randrange(len(buf) + 1)]
        for _ in range(rng.randint(0, 3)):
            if buf:
                buf[rng.randrange(len(buf))] = rng.randrange(256)
        out.append(bytes(buf))
    out += [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))) for _ in range(200)]
    return out


def test_the_readers_custom_options_are_what_flex_map_or_none_gives():
    # The reader answers options that are no flexbuffer map without
    # importing model.flex (decoding._flex_or_none, both readers'); it must
    # answer every input as flex_map_or_none does, and the corpus holds both kinds.
    from opaque_ops.model import decoding
    from opaque_ops.model.flex import flex_map_or_none

    corpus = _custom_options_corpus()
    got = [decoding._flex_or_none(b) for b in corpus]
    assert got == [flex_map_or_none(b) for b in corpus]
    assert sum(g is not None for g in got) >= 3 and sum(g is None for g in got) >= 200


_STRUCT_OPTIONS_CHILD = r"""
import sys
from opaque_ops.model import ModelBuilder
import numpy as np
b = ModelBuilder()
x = b.add_tensor("x", [4], np.float32)
y = b.add_tensor("y", [4], np.float32)
# MediaPipe's ops keep a C struct in their custom options (here three int32).
b.add_custom_op("SomeCStructOp", [x], [y], options=np.int32([3, 3, 2]).tobytes())
b.set_inputs([x])
b.set_outputs([y])
data = b.build()
sys.modules.pop("opaque_ops.model.flex", None)  # the builder's own use
from opaque_ops.model.reader import read_model
info = read_model(data)
op = info.subgraphs[0].operators[0]
print(op.custom_options == np.int32([3, 3, 2]).tobytes(), op.options, "opaque_ops.model.flex" in sys.modules)
"""


def test_options_that_are_no_flexbuffer_are_read_without_the_flex_module():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _STRUCT_OPTIONS_CHILD], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "None", "False"]


# -- decoding checked value for value against the flatbuffers package's own reader, flexbuffers.Loads,
# over each kind of value a flexbuffer can hold (blobs were once refused as "malformed").


def _same(a, b) -> bool:
    """Equal as decoded values, NaN equal to NaN and bool never equal to int."""
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _built_by_hand() -> bytes:
    # Kinds flex_options never writes but a converter or a hand-made model can:
    # fixed-size typed vectors, unsigned and key typed vectors, indirect scalars.
    fbb = flexbuffers.Builder()
    with fbb.Map():
        fbb.Key("fixed_int")
        fbb.FixedTypedVectorFromElements([1, -2, 3], flexbuffers.Type.INT)
        fbb.Key("fixed_float")
        fbb.FixedTypedVectorFromElements([0.5, 2.0], flexbuffers.Type.FLOAT)
        fbb.Key("uints")
        fbb.TypedVectorFromElements([1, 2**40], flexbuffers.Type.UINT)
        fbb.Key("keys")
        fbb.TypedVectorFromElements(["ab", "c"], flexbuffers.Type.KEY)
        fbb.Key("ind_int")
        fbb.IndirectInt(-5)
        fbb.Key("ind_uint")
        fbb.IndirectUInt(6)
        fbb.Key("ind_float")
        fbb.IndirectFloat(1.5)
        fbb.Key("blob")
        fbb.Blob(b"\x00\xff")
    return bytes(fbb.Finish())


@pytest.mark.parametrize(
    "buf",
    [
        flex_options({"blob": b"\x00\x01"}),
        flex_options({"empty": b""}),
        flex_options({"blobs": [b"a", b"\xff\x00", b""]}),
        flex_options({"m": {"b": b"x", "l": [1, "a", b"z", [b"q", None]]}}),
        flex_options({"maps": [{"a": 1}, {"b": b"\x01"}]}),
        flex_options({"i": [1, 2, 3], "f": [1.5, -2.0], "t": [True, False], "s": ["a", "bc"], "e": []}),
        flex_options({"x": [1, 2.5, None, True, "s"], "n": float("nan"), "inf": float("-inf")}),
        flex_options({"big": 1e300, "u": 2**64 - 1, "text": "h\u00e9\x00llo"}),
        _built_by_hand(),
    ],
    ids=["blob", "empty-blob", "vector-of-blobs", "nested", "maps-in-vector", "typed", "mixed", "wide", "by-hand"],
)
def test_decoding_agrees_with_flexbuffers_loads(buf):
    ours, theirs = decode_flex_options(buf), flexbuffers.Loads(buf)
    assert _same(ours, theirs), (ours, theirs)


def _random_value(rng: random.Random, depth: int):
    kinds = ["int", "float", "bool", "none", "str", "bytes"] + (["list", "map"] if depth < 3 else [])
    kind = rng.choice(kinds)
    if kind == "int":
        return rng.choice([0, -1, 7, 2**31, -(2**63), 2**64 - 1])
    if kind == "float":
        return rng.choice([0.5, -1e300, float("inf"), float("nan")])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "none":
        return None
    if kind == "str":
        return rng.choice(["", "a", "h\u00e9", "x" * 40])
    if kind == "bytes":
        return bytes(rng.randrange(256) for _ in range(rng.randrange(5)))
    if kind == "list":
        # Same-kind lists too, which become typed vectors.
        one = rng.choice(["int", "float", "bool", "any"])
        n = rng.randrange(4)
        if one == "int":
            return [rng.randrange(-9, 9) for _ in range(n)]
        if one == "float":
            return [rng.random() for _ in range(n)]
        if one == "bool":
            return [rng.random() < 0.5 for _ in range(n)]
        return [_random_value(rng, depth + 1) for _ in range(n)]
    return {f"k{i}": _random_value(rng, depth + 1) for i in range(rng.randrange(4))}


def test_random_options_decode_as_flexbuffers_loads_reads_them():
    rng = random.Random(11)
    for _ in range(300):
        options = {f"k{i}": _random_value(rng, 1) for i in range(rng.randrange(1, 5))}
        buf = flex_options(options)
        ours, theirs = decode_flex_options(buf), flexbuffers.Loads(buf)
        assert _same(ours, theirs), (options, ours, theirs)
