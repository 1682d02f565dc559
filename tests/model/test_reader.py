"""read_model: round trips checked against TFLite's generated schema, real models against ai-edge-litert, hostile bytes."""

from __future__ import annotations

import os
import random
import re
import struct

import numpy as np
import pytest
from flatbuffers import flexbuffers

from opaque_ops.errors import ModelError
from opaque_ops.model import ACTIVATIONS, BUILTIN_OPERATORS, TENSOR_TYPES, read_model
from opaque_ops.model.schema import _OPTION_FIELDS
from tests.helpers.reference_models import CUSTOM_OPTS, Interpreter, add_mul_model, round_trip_model, wheel_models


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
    # Checked against the flatbuffers package's own decoder, not our encoder.
    assert flexbuffers.Loads(ops[1].custom_options) == {k: v for k, v in CUSTOM_OPTS.items()}
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
    assert ops[4].builtin_options == {"fused_activation_function": "RELU", "pot_scale_int16": True}
    # The same table as TFLite's generated schema reads it.
    schema = pytest.importorskip("ai_edge_litert.schema_py_generated")
    raw = schema.Model.GetRootAsModel(data, 0).Subgraphs(0).Operators(4)
    assert raw.BuiltinOptionsType() == schema.BuiltinOptions.SubOptions
    sub = schema.SubOptions()
    sub.Init(raw.BuiltinOptions().Bytes, raw.BuiltinOptions().Pos)
    assert sub.FusedActivationFunction() == schema.ActivationFunctionType.RELU


def test_read_model_from_path(tmp_path):
    data, _, _ = add_mul_model()
    p = tmp_path / "m.tflite"
    p.write_bytes(data)
    assert read_model(p).description == read_model(str(p)).description
    assert read_model(bytearray(data)).subgraphs[0].tensors[1].name == "offset"
    assert read_model(memoryview(data)).subgraphs[0].name == "main"


@pytest.mark.parametrize("path", wheel_models(), ids=os.path.basename)
def test_real_model_matches_interpreter(path):
    m = read_model(path)
    assert m.version == 3
    it = Interpreter(model_path=path)
    sg = m.subgraphs[0]
    for ours, theirs in ((sg.inputs, it.get_input_details()), (sg.outputs, it.get_output_details())):
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


def test_rejects_short_and_foreign_bytes():
    with pytest.raises(ModelError, match=r"not a TFLite model: 4 bytes \(b.TFL3.\) are too few for one"):
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
    bad = data[:pos] + struct.pack("<I", 0x7FFFFFF0) + data[pos + 4 :]
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
            base[p : p + 4] = struct.pack(
                "<I", rng.choice([0, 1, 4, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, rng.randrange(2**32)])
            )
        try:
            read_model(bytes(base))
            ok += 1
        except ModelError:
            failed += 1
        # Anything else propagates and fails the test with its traceback.
    assert ok + failed == 2000
    assert failed > 100  # the mutations do reach the checks


def test_fuzz_real_model():
    paths = wheel_models()
    data = open(paths[-1], "rb").read()
    rng = random.Random(99)
    outcomes = {"read": 0, "refused": 0}
    for _ in range(150):
        buf = bytearray(data)
        for _ in range(rng.randint(1, 16)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        # Any other exception (IndexError, struct.error, RecursionError...) fails the test here.
        try:
            m = read_model(bytes(buf))
        except ModelError as exc:
            assert str(exc), "a refusal says why"
            outcomes["refused"] += 1
        else:
            assert m.subgraphs, "a model that reads has its subgraphs"
            outcomes["read"] += 1
    # The mutations reach both outcomes: a reader that refused everything (or
    # nothing) would not be the reader under test.
    assert outcomes["read"] > 10 and outcomes["refused"] > 10, outcomes


def _mediapipe_models() -> list[str]:
    from tests.helpers.locations import package_file

    base = package_file("mediapipe", "modules")
    return sorted(str(p) for p in base.rglob("*.tflite") if p.stat().st_size < 4_000_000)


def _assert_same_sparsity(ours, ref) -> None:
    """The reader's sparsity parse (the one get_tensor_details() shows) against the generated schema's."""
    if ref is None:
        assert ours is None
        return
    assert ours["traversal_order"] == list(ref.traversalOrder if ref.traversalOrder is not None else [])
    # Absent and empty differ: ai-edge-litert lists a stored block_map even when it is empty.
    assert ours["block_map"] == (None if ref.blockMap is None else list(ref.blockMap))
    assert len(ours["dim_metadata"]) == len(ref.dimMetadata or [])
    for (fmt, dense, segments, indices), rd in zip(ours["dim_metadata"], ref.dimMetadata or []):
        assert (fmt, dense) == (rd.format, rd.denseSize)
        for mine, theirs in ((segments, rd.arraySegments), (indices, rd.arrayIndices)):
            assert (mine is None) == (theirs is None or theirs.values is None)
            if mine is not None:
                np.testing.assert_array_equal(mine, theirs.values)


@pytest.mark.parametrize("indices_kind", [1, 3], ids=["int32", "uint8"])
def test_sparsity_is_read_as_the_generated_schema_reads_it(indices_kind):
    schema = pytest.importorskip("ai_edge_litert.schema_py_generated")
    from tests.helpers import sparse_model

    data = sparse_model.build(indices_kind)
    ref = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    sp = read_model(data).subgraphs[0].tensors[0].sparsity
    _assert_same_sparsity(sp, ref.subgraphs[0].tensors[0].sparsity)
    assert sp["block_map"] is None and sp["dim_metadata"][1][3].tolist() == sparse_model.INDICES


# The option fields read as strings (the others read as str are enums, by their names).
_STRING_FIELDS = {f for fields in _OPTION_FIELDS.values() for f, _slot, kind, _default in fields if kind == "str"}


@pytest.mark.parametrize("path", wheel_models() + _mediapipe_models(), ids=os.path.basename)
def test_every_field_read_matches_tflite_generated_schema(path):
    """The reader against TFLite's own generated schema (an independent reader), field by field."""
    schema = pytest.importorskip("ai_edge_litert.schema_py_generated")
    data = open(path, "rb").read()
    m = read_model(data)
    ref = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    assert m.version == ref.version
    assert m.description == (ref.description.decode() if ref.description else "")
    assert m.operator_codes == [
        (
            max(c.builtinCode, c.deprecatedBuiltinCode),
            c.customCode.decode() if c.customCode is not None else None,
            c.version,
        )
        for c in ref.operatorCodes
    ]
    buffers = [b.data for b in ref.buffers]
    assert len(m.subgraphs) == len(ref.subgraphs)
    for sg, rsg in zip(m.subgraphs, ref.subgraphs):
        assert sg.name == (rsg.name.decode() if rsg.name else "")
        assert sg.inputs == list(rsg.inputs) and sg.outputs == list(rsg.outputs)
        assert len(sg.tensors) == len(rsg.tensors)
        for t, rt in zip(sg.tensors, rsg.tensors):
            assert t.name == rt.name.decode()
            assert t.shape == tuple(rt.shape if rt.shape is not None else ())
            assert t.shape_signature == (None if rt.shapeSignature is None else tuple(rt.shapeSignature))
            assert t.type_name == {v: k for k, v in TENSOR_TYPES.items()}[rt.type]
            assert t.buffer == rt.buffer and t.is_variable == bool(rt.isVariable)
            raw = buffers[rt.buffer]
            assert t.data == (bytes(raw) if raw is not None and len(raw) else None)
            q = rt.quantization
            np.testing.assert_array_equal(t.quantization["scales"], q.scale if q and q.scale is not None else [])
            np.testing.assert_array_equal(
                t.quantization["zero_points"], q.zeroPoint if q and q.zeroPoint is not None else []
            )
            assert t.quantization["quantized_dimension"] == (q.quantizedDimension if q else 0)
            assert t.is_sparse == (rt.sparsity is not None)
            _assert_same_sparsity(t.sparsity, rt.sparsity)
        assert len(sg.operators) == len(rsg.operators)
        for op, rop in zip(sg.operators, rsg.operators):
            assert op.opcode_index == rop.opcodeIndex
            assert op.inputs == list(rop.inputs if rop.inputs is not None else [])
            assert op.outputs == list(rop.outputs if rop.outputs is not None else [])
            assert op.builtin_options_type == rop.builtinOptionsType
            assert op.custom_options == (bytes(rop.customOptions) if rop.customOptions is not None else None)
            for field, value in (op.builtin_options or {}).items():
                attr = re.sub(r"_([a-z0-9])", lambda g: g.group(1).upper(), field)
                want = getattr(rop.builtinOptions, attr)
                if field in _STRING_FIELDS:  # (VarHandleOptions' names; absent: the empty name)
                    want = (want or b"").decode("utf-8", "surrogateescape")
                elif isinstance(value, str):  # enums are decoded to their names
                    value = {**ACTIVATIONS, "SAME": 0, "VALID": 1, **TENSOR_TYPES}[value]
                elif isinstance(value, list):
                    want = list(want)
                assert value == want, (op.index, field)
    assert [(s.key, s.subgraph_index, s.inputs, s.outputs) for s in m.signatures] == [
        (
            sd.signatureKey.decode(),
            sd.subgraphIndex,
            {tm.name.decode(): tm.tensorIndex for tm in sd.inputs or []},
            {tm.name.decode(): tm.tensorIndex for tm in sd.outputs or []},
        )
        for sd in ref.signatureDefs or []
    ]


def _norm(x):
    """A comparable form of a model part (numpy arrays by dtype, shape and bytes)."""
    if isinstance(x, np.ndarray):
        return ("array", str(x.dtype), x.shape, x.tobytes())
    if isinstance(x, dict):
        return {k: _norm(v) for k, v in x.items()}
    if hasattr(x, "__dataclass_fields__"):
        return {k: _norm(getattr(x, k)) for k in x.__dataclass_fields__ if k != "verdicts"}
    if isinstance(x, (list, tuple)) or type(x).__name__ == "_ReadOnDemand":
        return [_norm(v) for v in x]
    return x


@pytest.mark.parametrize("path", wheel_models() + _mediapipe_models(), ids=os.path.basename)
def test_reading_on_demand_gives_the_same_model(path):
    from opaque_ops.model import ModelInfo

    data = open(path, "rb").read()
    eager = read_model(data)
    later = ModelInfo._read_later(data, eager.has_identifier, eager.custom_ops())
    sg = later.subgraphs[0]
    # Item by item, out of order, before the whole.
    assert _norm(sg.tensors[len(sg.tensors) - 1]) == _norm(eager.subgraphs[0].tensors[-1])
    assert _norm(sg.operators[-1]) == _norm(eager.subgraphs[0].operators[-1])
    assert type(sg.tensors).__name__ == "_ReadOnDemand"
    assert _norm(later) == _norm(eager)
    assert later.custom_ops() == eager.custom_ops()
