"""ModelBuilder: models written here run in ai-edge-litert and match numpy (an interpreter and a reference independent of our reader)."""

from __future__ import annotations

import numpy as np
import pytest

from opaque_ops.model import BUILTIN_OPERATOR_NAMES, BUILTIN_OPERATORS, TENSOR_TYPES, ModelBuilder, read_model
from tests.helpers.reference_models import Interpreter, add_mul_model, conv_ref, round_trip_model, run


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


def test_add_mul_model_runs_in_litert():
    data, offset, scale = add_mul_model()
    assert data[4:8] == b"TFL3"
    x = np.array([[1.0, 2.0, -3.0, 0.25, 10.0]], np.float32)
    (z,) = run(data, x)
    np.testing.assert_allclose(z, (x + offset) * scale, rtol=1e-6)


@pytest.mark.parametrize(
    "padding,stride,act", [("SAME", 1, "NONE"), ("VALID", 1, "NONE"), ("SAME", 2, "RELU"), ("VALID", 2, "RELU6")]
)
def test_conv2d_matches_numpy(padding, stride, act):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 7, 6, 3)).astype(np.float32)
    w = rng.standard_normal((4, 3, 2, 3)).astype(np.float32)  # OHWI
    bias = rng.standard_normal(4).astype(np.float32)
    expected = conv_ref(x.astype(np.float64), w.astype(np.float64), bias, padding, stride)
    expected = {"NONE": expected, "RELU": np.maximum(expected, 0), "RELU6": np.clip(expected, 0, 6)}[act]

    b = ModelBuilder()
    ti = b.add_tensor("input", x.shape, np.float32)
    tw = b.add_constant("weights", w)
    tb = b.add_constant("bias", bias)
    to = b.add_tensor("output", expected.shape, np.float32)
    b.add_op(
        "CONV_2D",
        [ti, tw, tb],
        [to],
        options={
            "padding": padding,
            "stride_w": stride,
            "stride_h": stride,
            "fused_activation_function": act,
            "dilation_w_factor": 1,
            "dilation_h_factor": 1,
        },
    )
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
    assert it.get_signature_list() == {"serving_default": {"inputs": ["input_x"], "outputs": ["output_z"]}}
    runner = it.get_signature_runner("serving_default")
    x = np.ones((1, 5), np.float32)
    out = runner(input_x=x)
    np.testing.assert_allclose(out["output_z"], (x + offset) * scale)

    sig = read_model(data).signatures
    assert len(sig) == 1
    assert sig[0].key == "serving_default" and sig[0].subgraph_index == 0
    assert sig[0].inputs == {"input_x": 0} and sig[0].outputs == {"output_z": 4}


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


_SLOT_CALLS = {
    "act": "PrependInt8Slot",
    "pad": "PrependInt8Slot",
    "dtype": "PrependInt8Slot",
    "i8": "PrependInt8Slot",
    "u8": "PrependUint8Slot",
    "i32": "PrependInt32Slot",
    "f32": "PrependFloat32Slot",
    "bool": "PrependBoolSlot",
    "[i32]": "PrependUOffsetTRelativeSlot",
    "str": "PrependUOffsetTRelativeSlot",
}


def test_every_options_table_has_the_slots_of_tflites_generated_schema():
    # The writer and both readers take field slots, kinds and defaults from
    # these tables; TFLite's generated Python schema states each one in its
    # `<Table>Add<Field>` function (`builder.Prepend<Kind>Slot(slot, value, default)`).
    import inspect
    import re

    from opaque_ops.model.schema import _OP_OPTIONS, _OPTION_FIELDS, _OPTIONS_TYPE

    schema = pytest.importorskip("ai_edge_litert.schema_py_generated")
    for op, table in _OP_OPTIONS.items():
        assert getattr(schema.BuiltinOptions, table) == _OPTIONS_TYPE[table], table
        assert BUILTIN_OPERATORS[op] == getattr(schema.BuiltinOperator, op), op
    for table, fields in _OPTION_FIELDS.items():
        for name, slot, kind, default in fields:
            camel = "".join(w[:1].upper() + w[1:] for w in name.split("_"))
            src = inspect.getsource(getattr(schema, f"{table}Add{camel}"))
            m = re.search(r"builder\.(\w+)\((\d+), \w+, ([^)]+)\)", src) or re.search(r"builder\.(\w+)\((\d+)", src)
            assert m, (table, name, src)
            assert (m.group(1), int(m.group(2))) == (_SLOT_CALLS[kind], slot), (table, name, src)
            if m.lastindex == 3 and kind not in ("act", "pad", "dtype"):
                assert float(m.group(3).replace("False", "0").replace("True", "1")) == float(default or 0), (
                    table,
                    name,
                )


def _one_op(op, inputs, out_shape, out_dtype, opts):
    b = ModelBuilder()
    ins = []
    for k, v in enumerate(inputs):
        if isinstance(v, tuple):  # (shape, dtype): a model input
            ins.append(b.add_tensor(f"in{k}", list(v[0]), v[1]))
        else:
            ins.append(b.add_constant(f"c{k}", v))
    y = b.add_tensor("y", list(out_shape), out_dtype)
    b.add_op(op, ins, [y], opts)
    b.set_inputs([t for t, v in zip(ins, inputs) if isinstance(v, tuple)])
    b.set_outputs([y])
    return b.build()


def test_arg_one_hot_and_reverse_sequence_options_run_in_litert_as_numpy_says():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    for op, fn in (("ARG_MAX", np.argmax), ("ARG_MIN", np.argmin)):
        data = _one_op(op, [((3, 5), np.float32), np.array([1], np.int32)], (3,), np.int32, {"output_type": "INT32"})
        assert read_model(data).subgraphs[0].operators[0].builtin_options == {"output_type": "INT32"}
        (got,) = run(data, x)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, fn(x, axis=1))
    # ONE_HOT, axis 0: out[d, i] = on if indices[i] == d.
    idx = np.array([2, 0, 3], np.int32)
    consts = [np.array(4, np.int32), np.array(5.0, np.float32), np.array(-1.0, np.float32)]
    data = _one_op("ONE_HOT", [((3,), np.int32), *consts], (4, 3), np.float32, {"axis": 0})
    (got,) = run(data, idx)
    np.testing.assert_array_equal(got, np.where(np.arange(4)[:, None] == idx[None, :], 5.0, -1.0))
    # REVERSE_SEQUENCE, batch_dim 1, seq_dim 0: column j's first lengths[j] entries reversed.
    lengths = np.array([2, 4, 0, 1, 3], np.int32)
    data = _one_op(
        "REVERSE_SEQUENCE", [((4, 5), np.float32), lengths], (4, 5), np.float32, {"seq_dim": 0, "batch_dim": 1}
    )
    x4 = rng.standard_normal((4, 5)).astype(np.float32)
    want = x4.copy()
    for j, n in enumerate(lengths):
        want[:n, j] = x4[:n, j][::-1]
    (got,) = run(data, x4)
    np.testing.assert_array_equal(got, want)
