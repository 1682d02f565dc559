"""Tests for opaque_ops.model: the TFLite flatbuffer writer and reader.

Models written by ModelBuilder are run by ai-edge-litert's interpreter and
compared with numpy, which checks the writer independently of our reader.
The reader is checked against the interpreter on real wheel models and with
a seeded mutation fuzz.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import random
import struct

import numpy as np
import pytest
from flatbuffers import flexbuffers

from opaque_ops.errors import ModelError
from opaque_ops.model import (
    BUILTIN_OPERATOR_NAMES,
    BUILTIN_OPERATORS,
    TENSOR_TYPES,
    ModelBuilder,
    decode_flex_options,
    flex_options,
    read_model,
)

Interpreter = pytest.importorskip("ai_edge_litert.interpreter").Interpreter


def run(data: bytes, *inputs: np.ndarray) -> list[np.ndarray]:
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    for det, arr in zip(it.get_input_details(), inputs):
        it.set_tensor(det["index"], arr)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def add_mul_model(with_signature: bool = False) -> tuple[bytes, np.ndarray, np.ndarray]:
    offset = np.array([0.5, -1.0, 2.0, 3.25, -4.0], np.float32)
    scale = np.array([2.0, 0.5, -1.0, 3.0, 1.5], np.float32)
    b = ModelBuilder(description="y = (x + offset) * scale")
    x = b.add_tensor("x", [1, 5], np.float32)
    c = b.add_constant("offset", offset)
    y = b.add_tensor("y", [1, 5], np.float32)
    s = b.add_constant("scale", scale)
    z = b.add_tensor("z", [1, 5], np.float32)
    b.add_op("ADD", inputs=[x, c], outputs=[y], options={"fused_activation_function": "NONE"})
    b.add_op("MUL", inputs=[y, s], outputs=[z])
    b.set_inputs([x])
    b.set_outputs([z])
    if with_signature:
        b.add_signature("serving_default", inputs={"input_x": x}, outputs={"output_z": z})
    return b.build(), offset, scale


# ---------------------------------------------------------------------------
# Schema tables, checked against the generated schema shipped in ai-edge-litert
# ---------------------------------------------------------------------------

def test_enums_match_litert_schema():
    schema = pytest.importorskip("ai_edge_litert.schema_py_generated")
    ref_ops = {k: v for k, v in vars(schema.BuiltinOperator).items() if k.isupper()}
    assert ref_ops, "generated schema has no BuiltinOperator values"
    for name, code in ref_ops.items():
        assert BUILTIN_OPERATORS.get(name) == code, name
    assert BUILTIN_OPERATORS["CUSTOM"] == 32
    assert all(BUILTIN_OPERATOR_NAMES[c] == n for n, c in BUILTIN_OPERATORS.items())
    ref_types = {k: v for k, v in vars(schema.TensorType).items() if k.isupper()}
    for name, code in ref_types.items():
        assert TENSOR_TYPES.get(name) == code, name


# ---------------------------------------------------------------------------
# Writer: models built here run in the reference interpreter
# ---------------------------------------------------------------------------

def test_add_mul_model_runs_in_litert():
    data, offset, scale = add_mul_model()
    assert data[4:8] == b"TFL3"
    x = np.array([[1.0, 2.0, -3.0, 0.25, 10.0]], np.float32)
    (z,) = run(data, x)
    np.testing.assert_allclose(z, (x + offset) * scale, rtol=1e-6)


def conv_ref(x, w, bias, padding, stride, dilation=1):
    # x NHWC, w OHWI; TFLite SAME padding puts the extra pixel at the end.
    n, h, wd, _ = x.shape
    o, kh, kw, _ = w.shape
    ekh, ekw = (kh - 1) * dilation + 1, (kw - 1) * dilation + 1
    if padding == "SAME":
        oh, ow = -(-h // stride), -(-wd // stride)
        ph = max((oh - 1) * stride + ekh - h, 0)
        pw = max((ow - 1) * stride + ekw - wd, 0)
        x = np.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
    else:
        oh, ow = (h - ekh) // stride + 1, (wd - ekw) // stride + 1
    out = np.zeros((n, oh, ow, o), np.float64)
    for i in range(oh):
        for j in range(ow):
            patch = x[:, i * stride:i * stride + ekh:dilation, j * stride:j * stride + ekw:dilation, :]
            out[:, i, j, :] = np.einsum("nhwc,ohwc->no", patch, w)
    return out + bias


@pytest.mark.parametrize("padding,stride,act", [("SAME", 1, "NONE"), ("VALID", 1, "NONE"),
                                                ("SAME", 2, "RELU"), ("VALID", 2, "RELU6")])
def test_conv2d_matches_numpy(padding, stride, act):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 7, 6, 3)).astype(np.float32)
    w = rng.standard_normal((4, 3, 2, 3)).astype(np.float32)   # OHWI
    bias = rng.standard_normal(4).astype(np.float32)
    expected = conv_ref(x.astype(np.float64), w.astype(np.float64), bias, padding, stride)
    expected = {"NONE": expected, "RELU": np.maximum(expected, 0),
                "RELU6": np.clip(expected, 0, 6)}[act]

    b = ModelBuilder()
    ti = b.add_tensor("input", x.shape, np.float32)
    tw = b.add_constant("weights", w)
    tb = b.add_constant("bias", bias)
    to = b.add_tensor("output", expected.shape, np.float32)
    b.add_op("CONV_2D", [ti, tw, tb], [to],
             options={"padding": padding, "stride_w": stride, "stride_h": stride,
                      "fused_activation_function": act,
                      "dilation_w_factor": 1, "dilation_h_factor": 1})
    b.set_inputs([ti])
    b.set_outputs([to])
    data = b.build()
    (out,) = run(data, x)
    assert out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)

    op = read_model(data).subgraphs[0].operators[0]
    assert op.op_name == "CONV_2D" and op.builtin_options_type == 1
    assert op.builtin_options["padding"] == padding
    assert op.builtin_options["stride_h"] == stride
    assert op.builtin_options["fused_activation_function"] == act


@pytest.mark.parametrize("shape_as_input", [True, False])
def test_dequantize_float16_then_reshape(shape_as_input):
    half = (np.arange(6, dtype=np.float32) * 0.375 - 1).astype(np.float16).reshape(2, 3)
    b = ModelBuilder()
    x = b.add_tensor("x", [3, 2], np.float32)
    c = b.add_constant("weights_f16", half)
    deq = b.add_tensor("weights_f32", [2, 3], np.float32)
    b.add_op("DEQUANTIZE", [c], [deq])
    r = b.add_tensor("reshaped", [3, 2], np.float32)
    if shape_as_input:
        shp = b.add_constant("new_shape", np.array([3, 2], np.int32))
        b.add_op("RESHAPE", [deq, shp], [r])
    else:
        b.add_op("RESHAPE", [deq], [r], options={"new_shape": [3, 2]})
    y = b.add_tensor("y", [3, 2], np.float32)
    b.add_op("ADD", [r, x], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    data = b.build()

    xv = np.arange(6, dtype=np.float32).reshape(3, 2)
    (out,) = run(data, xv)
    np.testing.assert_array_equal(out, half.astype(np.float32).reshape(3, 2) + xv)

    t = read_model(data).subgraphs[0].tensors[c]
    assert t.dtype == np.float16 and t.type_name == "FLOAT16" and t.shape == (2, 3)
    np.testing.assert_array_equal(t.array(), half)


def test_builtin_code_above_127_uses_extended_field():
    b = ModelBuilder()
    x = b.add_tensor("x", [4], np.float32)
    y = b.add_tensor("y", [4], np.float32)
    b.add_op("GELU", [x], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    data = b.build()
    xv = np.array([-2.0, -0.5, 0.0, 1.5], np.float32)
    (out,) = run(data, xv)
    from math import erf, sqrt
    ref = np.array([v * 0.5 * (1 + erf(v / sqrt(2))) for v in xv], np.float32)
    np.testing.assert_allclose(out, ref, atol=1e-3)

    m = read_model(data)
    assert m.operator_codes == [(BUILTIN_OPERATORS["GELU"], None, 1)]
    assert m.subgraphs[0].operators[0].op_name == "GELU"
    # The legacy int8 field must hold the placeholder value 127.
    schema = pytest.importorskip("ai_edge_litert.schema_py_generated")
    raw = schema.Model.GetRootAsModel(data, 0).OperatorCodes(0)
    assert raw.DeprecatedBuiltinCode() == 127
    assert raw.BuiltinCode() == 150


def test_signature_is_visible_to_litert():
    data, offset, scale = add_mul_model(with_signature=True)
    it = Interpreter(model_content=data)
    assert it.get_signature_list() == {
        "serving_default": {"inputs": ["input_x"], "outputs": ["output_z"]}}
    runner = it.get_signature_runner("serving_default")
    x = np.ones((1, 5), np.float32)
    out = runner(input_x=x)
    np.testing.assert_allclose(out["output_z"], (x + offset) * scale)

    sig = read_model(data).signatures
    assert len(sig) == 1
    assert sig[0].key == "serving_default" and sig[0].subgraph_index == 0
    assert sig[0].inputs == {"input_x": 0} and sig[0].outputs == {"output_z": 4}


# ---------------------------------------------------------------------------
# Round trip through read_model
# ---------------------------------------------------------------------------

ALL_DTYPES = [np.float32, np.float16, np.float64, np.int8, np.uint8, np.int16,
              np.int32, np.int64, np.uint32, np.uint64, np.bool_]

CUSTOM_OPTS = {
    "i8": -5, "i16": 1000, "i32": -70000, "i64": 2**40 + 3, "f": 0.25, "f64": 0.1,
    "flag": True, "off": False, "name": "hello", "ints": [1, -2, 300, 2**33],
    "floats": [0.5, -1.5], "strs": ["a", "bc"],
}


def round_trip_model() -> tuple[ModelBuilder, bytes, dict]:
    b = ModelBuilder(description="round trip")
    consts = {}
    for dt in ALL_DTYPES:
        arr = (np.arange(6).reshape(2, 3) % 2).astype(dt)
        consts[np.dtype(dt).name] = (b.add_constant(f"c_{np.dtype(dt).name}", arr), arr)
    x = b.add_tensor("x", [1, 5], np.float32, shape_signature=[-1, 5])
    q = b.add_tensor("q", [1, 5], np.int8,
                     quantization=dict(scale=[0.1], zero_point=[3], quantized_dimension=0))
    qc = b.add_constant("qc", np.ones((2, 2), np.int8),
                        quantization=dict(scale=[0.5, 0.25], zero_point=[0, 0],
                                          quantized_dimension=1))
    y = b.add_tensor("y", [1, 5], np.float32)
    z = b.add_tensor("z", [1, 5], np.float32)
    w = b.add_tensor("w", [1, 5], np.float32)
    b.add_op("QUANTIZE", [x], [q])
    b.add_custom_op("Atan", inputs=[x], outputs=[y], options=CUSTOM_OPTS, version=2)
    b.add_custom_op("RawOpts", inputs=[y, -1], outputs=[z], options=b"\x01\x02\x03")
    b.add_custom_op("Atan", inputs=[z], outputs=[w], version=1)
    b.add_op("SUB", [w, qc], [w], options={"fused_activation_function": "RELU"})
    b.set_inputs([x])
    b.set_outputs([w, q])
    data = b.build()
    return b, data, dict(consts=consts, x=x, q=q, qc=qc, y=y, z=z, w=w)


def test_round_trip_tensors():
    _, data, t = round_trip_model()
    m = read_model(data)
    assert m.version == 3 and m.description == "round trip"
    sg = m.subgraphs[0]
    assert sg.inputs == [t["x"]] and sg.outputs == [t["w"], t["q"]]
    for name, (idx, arr) in t["consts"].items():
        ti = sg.tensors[idx]
        assert ti.index == idx and ti.name == f"c_{name}"
        assert ti.shape == (2, 3) and ti.dtype == arr.dtype
        assert ti.buffer > 0 and ti.data == arr.tobytes()
        np.testing.assert_array_equal(ti.array(), arr)
    assert sg.tensors[t["consts"]["bool"][0]].type_name == "BOOL"
    assert sg.tensors[t["consts"]["uint32"][0]].type_name == "UINT32"
    assert sg.tensors[t["consts"]["float64"][0]].type_name == "FLOAT64"

    x = sg.tensors[t["x"]]
    assert x.shape == (1, 5) and x.shape_signature == (-1, 5)
    assert x.buffer == 0 and x.data is None and not x.is_variable
    assert x.quantization["scales"].size == 0 and x.quantization["zero_points"].size == 0

    q = sg.tensors[t["q"]].quantization
    np.testing.assert_allclose(q["scales"], [0.1])
    assert q["scales"].dtype == np.float32
    assert list(q["zero_points"]) == [3] and q["quantized_dimension"] == 0
    qc = sg.tensors[t["qc"]].quantization
    np.testing.assert_allclose(qc["scales"], [0.5, 0.25])
    assert qc["quantized_dimension"] == 1


def test_round_trip_ops_and_custom_options():
    _, data, t = round_trip_model()
    m = read_model(data)
    ops = m.subgraphs[0].operators
    assert [o.op_name for o in ops] == ["QUANTIZE", "Atan", "RawOpts", "Atan", "SUB"]
    assert [o.is_custom for o in ops] == [False, True, True, True, False]
    assert [o.version for o in ops] == [1, 2, 1, 1, 1]
    assert ops[1].builtin_code == 32 and ops[0].builtin_code == BUILTIN_OPERATORS["QUANTIZE"]
    assert ops[2].inputs == [t["y"], -1] and ops[2].outputs == [t["z"]]
    assert m.custom_ops() == [("Atan", 1), ("Atan", 2), ("RawOpts", 1)]
    assert (32, "Atan", 2) in m.operator_codes and (32, "Atan", 1) in m.operator_codes

    opts = ops[1].options
    assert ops[1].custom_options == flex_options(CUSTOM_OPTS)
    assert opts["i8"] == -5 and opts["i16"] == 1000 and opts["i32"] == -70000
    assert opts["i64"] == 2**40 + 3
    assert opts["f"] == 0.25 and opts["f64"] == pytest.approx(0.1)
    assert opts["flag"] is True and opts["off"] is False
    assert opts["name"] == "hello"
    assert opts["ints"] == [1, -2, 300, 2**33]
    assert opts["floats"] == [0.5, -1.5]
    assert opts["strs"] == ["a", "bc"]
    assert set(opts) == set(CUSTOM_OPTS)

    assert ops[2].custom_options == b"\x01\x02\x03" and ops[2].options is None
    assert ops[3].custom_options is None and ops[3].options is None
    assert ops[4].builtin_options == {"fused_activation_function": "RELU",
                                      "pot_scale_int16": True}


def test_buffers_sentinel_and_alignment():
    schema = pytest.importorskip("ai_edge_litert.schema_py_generated")
    _, data, _ = round_trip_model()
    raw = schema.Model.GetRootAsModel(data, 0)
    assert raw.Version() == 3
    assert raw.Buffers(0).DataLength() == 0
    for i in range(1, raw.BuffersLength()):
        buf = raw.Buffers(i)
        assert buf.DataLength() > 0
        start = buf._tab.Vector(buf._tab.Offset(4))
        assert start % 16 == 0, f"buffer {i} data at {start} is not 16-byte aligned"


def test_flex_options_encoding():
    enc = flex_options({"b": [1, 2, 3], "a": 1.5, "c": "s"})
    root = flexbuffers.GetRoot(enc).AsMap
    assert [str(k) for k in root.Keys.Value] == ["a", "b", "c"]
    assert root["b"].IsTypedVector and root["b"].AsTypedVector.ElementType == flexbuffers.Type.INT
    fl = flexbuffers.GetRoot(flex_options({"v": [1.0, 2.5]})).AsMap["v"]
    assert fl.IsTypedVector and fl.AsTypedVector.ElementType == flexbuffers.Type.FLOAT
    assert decode_flex_options(enc) == {"a": 1.5, "b": [1, 2, 3], "c": "s"}
    # numpy values are accepted.
    assert decode_flex_options(flex_options({"n": np.int16(4), "v": np.array([1, 2])})) == \
        {"n": 4, "v": [1, 2]}
    # Key order does not depend on insertion order.
    assert flex_options({"x": 1, "a": 2}) == flex_options({"a": 2, "x": 1})
    with pytest.raises(TypeError):
        flex_options({"bad": object()})


@pytest.mark.parametrize("junk", [b"", b"\x00", b"\xff\xff\xff", b"garbage-bytes",
                                  bytes(range(64)), flexbuffers.Dumps([1, 2, 3])])
def test_decode_flex_options_rejects_garbage(junk):
    with pytest.raises(ModelError):
        decode_flex_options(junk)


def test_read_model_from_path(tmp_path):
    data, _, _ = add_mul_model()
    p = tmp_path / "m.tflite"
    p.write_bytes(data)
    assert read_model(p).description == read_model(str(p)).description
    assert read_model(bytearray(data)).subgraphs[0].tensors[1].name == "offset"
    assert read_model(memoryview(data)).subgraphs[0].name == "main"


# ---------------------------------------------------------------------------
# Real models from the wake-word wheels, compared with the interpreter
# ---------------------------------------------------------------------------

def wheel_models() -> list[str]:
    found = []
    for pkg, pattern in (("pyopen_wakeword", "melspectrogram.tflite"),
                         ("pymicro_wakeword", "*.tflite")):
        spec = importlib.util.find_spec(pkg)
        if spec is None or not spec.submodule_search_locations:
            continue
        for loc in spec.submodule_search_locations:
            found += sorted(glob.glob(os.path.join(loc, "models", pattern)))
    return found


@pytest.mark.parametrize("path", wheel_models() or [pytest.param(None, marks=pytest.mark.skip(
    reason="no wake-word wheel models installed"))], ids=os.path.basename)
def test_real_model_matches_interpreter(path):
    m = read_model(path)
    assert m.version == 3
    it = Interpreter(model_path=path)
    sg = m.subgraphs[0]
    for ours, theirs in ((sg.inputs, it.get_input_details()),
                         (sg.outputs, it.get_output_details())):
        assert len(ours) == len(theirs)
        for idx, det in zip(ours, theirs):
            t = sg.tensors[idx]
            assert idx == det["index"]
            assert t.name == det["name"]
            assert t.shape == tuple(det["shape"])
            assert t.shape_signature in (None, tuple(det["shape_signature"]))
            assert t.dtype == np.dtype(det["dtype"])
            scales = det["quantization_parameters"]["scales"]
            np.testing.assert_allclose(t.quantization["scales"], scales)
    assert {s.key for s in m.signatures} == set(it.get_signature_list())
    for sg in m.subgraphs:
        for op in sg.operators:
            assert op.op_name and op.opcode_index < len(m.operator_codes)


# ---------------------------------------------------------------------------
# Hostile input
# ---------------------------------------------------------------------------

def test_rejects_short_and_foreign_bytes():
    with pytest.raises(ModelError, match="too short"):
        read_model(b"TFL3")
    with pytest.raises(ModelError, match="TFL3"):
        read_model(b"\x10\x00\x00\x00NOPE" + b"\xff" * 40)
    with pytest.raises(ModelError):
        read_model(bytes(4096))


def test_truncation_is_reported():
    data, _, _ = add_mul_model()
    with pytest.raises(ModelError, match="truncated|past the end"):
        read_model(data[: len(data) // 2])


def test_accepts_missing_identifier_when_root_parses():
    data, _, _ = add_mul_model()
    m = read_model(data[:4] + b"\x00\x00\x00\x00" + data[8:])
    assert not m.has_identifier and m.subgraphs[0].tensors[0].name == "x"


def test_hostile_vector_length():
    data, _, _ = add_mul_model()
    # Find the uint32 length prefix of the description string and make it huge.
    desc = b"y = (x + offset) * scale"
    pos = data.index(desc) - 4
    assert struct.unpack_from("<I", data, pos)[0] == len(desc)
    bad = data[:pos] + struct.pack("<I", 0x7FFFFFF0) + data[pos + 4:]
    with pytest.raises(ModelError, match="past the end"):
        read_model(bad)


def test_fuzz_mutations_only_raise_model_error():
    _, data, _ = round_trip_model()
    sig_data, _, _ = add_mul_model(with_signature=True)
    rng = random.Random(20240611)
    ok = failed = 0
    for i in range(2000):
        base = bytearray(data if i % 2 else sig_data)
        kind = rng.randrange(4)
        if kind == 0:
            base = base[: rng.randrange(len(base))]
        elif kind == 1:
            for _ in range(rng.randint(1, 8)):
                p = rng.randrange(len(base))
                base[p] ^= 1 << rng.randrange(8)
        elif kind == 2:
            for _ in range(rng.randint(1, 4)):
                p = rng.randrange(len(base))
                base[p] = rng.choice([0x00, 0xFF, 0x7F, 0x80, rng.randrange(256)])
        else:
            p = rng.randrange(max(1, len(base) - 4))
            base[p:p + 4] = struct.pack("<I", rng.choice(
                [0, 1, 4, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, rng.randrange(2**32)]))
        try:
            read_model(bytes(base))
            ok += 1
        except ModelError:
            failed += 1
        # Anything else propagates and fails the test with its traceback.
    assert ok + failed == 2000
    assert failed > 100  # the mutations do reach the checks


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


def test_fuzz_real_model():
    paths = wheel_models()
    if not paths:
        pytest.skip("no wake-word wheel models installed")
    data = open(paths[-1], "rb").read()
    rng = random.Random(99)
    for _ in range(150):
        buf = bytearray(data)
        for _ in range(rng.randint(1, 16)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        try:
            read_model(bytes(buf))
        except ModelError:
            pass


def test_flex_options_extreme_numbers():
    """Doubles beyond float32 and uint64-sized ints round-trip; larger ints are a clear ValueError."""
    from opaque_ops.model import decode_flex_options, flex_options

    opts = {"big": 1e300, "u": 2**63, "v": [1.0, -1e300], "w": [0.5, 2.5], "n": -(2**63)}
    assert decode_flex_options(flex_options(opts)) == opts
    with pytest.raises(ValueError, match="does not fit in 64 bits"):
        flex_options({"a": 2**70})
    with pytest.raises(ValueError, match="int64 range"):
        flex_options({"a": [1, 2**64]})
