"""opaque_ops.model.checks.type_rules: every builtin's dtype rule, applied before TFLite sees the model.

The reproductions of issue 17 items 1 and 2 (WHERE declared float32 into a
convolution, openWakeWord's alexa and microWakeWord's hey_jarvis with their
input retyped) are corpus files, replayed by tests/model/test_checks.py with
and without XNNPACK.  Here: the table covers every builtin, each rule group
refuses what its kernel would misread (in a child process, since the same
models crashed or corrupted the heap before the rules existed), and valid
uses of the value-dependent ops still run and match ai-edge-litert.
"""

from __future__ import annotations

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.model import ModelBuilder, check_model, read_model
from opaque_ops.model.checks.type_rules import LEFT_TO_KERNELS, TYPE_RULES
from opaque_ops.model.schema import _BUILTIN_OPERATOR_LIST
from tests.helpers.both_ways import run_both_ways
from tests.helpers.corpus import INDEX
from tests.helpers.locations import package_file

litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is a test dependency")


def test_every_builtin_has_a_type_rule_or_a_reason():
    """The table is total: each builtin has a rule, or is listed with why none is needed here."""
    names = set(_BUILTIN_OPERATOR_LIST)
    assert set(TYPE_RULES).isdisjoint(LEFT_TO_KERNELS)
    assert set(TYPE_RULES) | set(LEFT_TO_KERNELS) == names, sorted(names - set(TYPE_RULES) - set(LEFT_TO_KERNELS))
    assert {"WHERE", "UNIQUE", "NON_MAX_SUPPRESSION_V4", "NON_MAX_SUPPRESSION_V5", "RESHAPE"} <= set(TYPE_RULES)


def _unique(idx_dtype, idx_out_type: str, n: int = 64) -> bytes:
    b = ModelBuilder()
    x = b.add_tensor("x", [n], np.float32)
    y = b.add_tensor("y", [n], np.float32, shape_signature=[-1])
    i = b.add_tensor("idx", [n], idx_dtype)
    b.add_op("UNIQUE", [x], [y, i], {"idx_out_type": idx_out_type})
    b.set_inputs([x])
    b.set_outputs([y, i])
    return b.build()


def _nms(selected_dtype, v5: bool = False) -> bytes:
    b = ModelBuilder()
    boxes = b.add_tensor("boxes", [6, 4], np.float32)
    scores = b.add_tensor("scores", [6], np.float32)
    ins = [
        boxes,
        scores,
        b.add_constant("max_output_size", np.array(3, np.int32)),
        b.add_constant("iou_threshold", np.array(0.5, np.float32)),
        b.add_constant("score_threshold", np.array(0.0, np.float32)),
    ]
    outs = [b.add_tensor("selected", [3], selected_dtype, shape_signature=[-1])]
    if v5:
        ins.append(b.add_constant("sigma", np.array(0.0, np.float32)))
        outs.append(b.add_tensor("selected_scores", [3], np.float32, shape_signature=[-1]))
    outs.append(b.add_tensor("valid", [], np.int32))
    b.add_op("NON_MAX_SUPPRESSION_V5" if v5 else "NON_MAX_SUPPRESSION_V4", ins, outs)
    b.set_inputs([boxes, scores])
    b.set_outputs(outs)
    return b.build()


def _where(shape, out_dtype, out_shape, out_signature=None, cond_dtype=np.bool_) -> bytes:
    b = ModelBuilder()
    x = b.add_tensor("cond", shape, cond_dtype)
    y = b.add_tensor("coords", out_shape, out_dtype, shape_signature=out_signature)
    b.add_op("WHERE", [x], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


def _copy(op: str, in_dtype, out_dtype) -> bytes:
    """A one-op copy whose output is declared with another type than its input."""
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 4, 6], in_dtype)
    ins, opts, out_shape = [x], None, [1, 4, 6]
    if op == "RESHAPE":
        ins.append(b.add_constant("shape", np.array([4, 6], np.int32)))
        out_shape = [4, 6]
    elif op == "SQUEEZE":
        opts, out_shape = {"squeeze_dims": [0]}, [4, 6]
    elif op == "EXPAND_DIMS":
        ins.append(b.add_constant("axis", np.array([0], np.int32)))
        out_shape = [1, 1, 4, 6]
    elif op == "CONCATENATION":
        ins.append(b.add_tensor("x2", [1, 4, 6], in_dtype))
        opts, out_shape = {"axis": 1}, [1, 8, 6]
    elif op == "TRANSPOSE":
        ins.append(b.add_constant("perm", np.array([0, 2, 1], np.int32)))
        out_shape = [1, 6, 4]
    elif op == "PAD":
        ins.append(b.add_constant("paddings", np.array([[0, 0], [1, 1], [0, 0]], np.int32)))
        out_shape = [1, 6, 6]
    elif op == "STRIDED_SLICE":
        for name, v in (("begin", [0, 0, 0]), ("end", [1, 2, 6]), ("strides", [1, 1, 1])):
            ins.append(b.add_constant(name, np.array(v, np.int32)))
        out_shape = [1, 2, 6]
    elif op == "GATHER":
        ins.append(b.add_constant("indices", np.array([0, 2], np.int32)))
        opts, out_shape = {"axis": 1}, [1, 2, 6]
    elif op == "TILE":
        ins.append(b.add_constant("multiples", np.array([1, 2, 1], np.int32)))
        out_shape = [1, 8, 6]
    y = b.add_tensor("y", out_shape, out_dtype)
    b.add_op(op, ins, [y], opts)
    b.set_inputs([t for t in ins if t in (x,) or (op == "CONCATENATION" and t != x)])
    b.set_outputs([y])
    return b.build()


_COPIES = ["RESHAPE", "SQUEEZE", "EXPAND_DIMS", "CONCATENATION", "TRANSPOSE", "PAD", "STRIDED_SLICE", "GATHER", "TILE"]


@pytest.mark.parametrize("op", _COPIES)
def test_type_agnostic_copies_need_the_input_type_at_the_output(op):
    """RESHAPE and the other copies move the input's bytes into a buffer sized from the output's
    declared type: an int64 input into a float32 output is refused, naming both; the same op with
    matching types is accepted."""
    check_model(read_model(_copy(op, np.float32, np.float32)))
    with pytest.raises(oo.ModelError) as e:
        check_model(read_model(_copy(op, np.int64, np.float32)))
    msg = str(e.value)
    assert f"({op}): output 0 (tensor" in msg and "is FLOAT32, but input 0 (tensor 0) is INT64" in msg, msg
    assert f"{op} writes INT64 there" in msg and "Convert the model again" in msg, msg


# (model, exact message): each crashed or silently misbehaved before the rules (see the ids).
_REFUSED = {
    # glibc "corrupted size vs. prev_size" (SIGABRT): the kernel writes int64 indices into int32 slots.
    "unique_idx_int32_but_options_int64": (
        lambda: _unique(np.int32, "INT64"),
        "subgraph 0 operator 0 (UNIQUE): output 1 (tensor 2) is INT32, but its options' idx_out_type makes "
        "the kernel write INT64 indices there. Convert the model again (or fix the tensor's type)",
    ),
    "unique_values_retyped": (
        lambda: _unique_values_retyped(),
        "subgraph 0 operator 0 (UNIQUE): output 0 (tensor 1) is INT8, but input 0 (tensor 0) is FLOAT32; "
        "UNIQUE writes FLOAT32 there (the type of its input 0). Convert the model again (or fix the tensor's type)",
    ),
    # The kernel rewrites the output to int32 after the consumers were planned on int8.
    "nms_selected_int8": (
        lambda: _nms(np.int8),
        "subgraph 0 operator 0 (NON_MAX_SUPPRESSION_V4): output 0 (tensor 5) is INT8; NON_MAX_SUPPRESSION_V4 "
        "writes INT32 there. Convert the model again (or fix the tensor's type)",
    ),
    "nms_v5_scores_int32": (
        lambda: _nms_v5_scores_int32(),
        "subgraph 0 operator 0 (NON_MAX_SUPPRESSION_V5): output 1 (tensor 7) is INT32; NON_MAX_SUPPRESSION_V5 "
        "writes FLOAT32 there. Convert the model again (or fix the tensor's type)",
    ),
    "where_declared_float32": (
        lambda: _where([2, 3], np.float32, [6, 2]),
        "subgraph 0 operator 0 (WHERE): output 0 (tensor 1) is FLOAT32; WHERE writes INT64 there. "
        "Convert the model again (or fix the tensor's type)",
    ),
    "where_declared_rank_4": (
        lambda: _where([1, 8, 8, 4], np.int64, [1, 8, 8, 4]),
        "subgraph 0 operator 0 (WHERE): output 0 (tensor 1) is declared [1, 8, 8, 4], but the kernel writes "
        "a [N, 4] tensor whose size depends on the input values; declare it [N, 4] (and let the operators "
        "after it take a shape known only at invoke)",
    ),
    "where_declared_wrong_last_dimension": (
        lambda: _where([2, 3], np.int64, [6, 3], [-1, 3]),
        "subgraph 0 operator 0 (WHERE): output 0 (tensor 1) is declared [6, 3], but the kernel writes "
        "a [N, 2] tensor whose size depends on the input values; declare it [N, 2] (and let the operators "
        "after it take a shape known only at invoke)",
    ),
}


def _unique_values_retyped() -> bytes:
    b = ModelBuilder()
    x = b.add_tensor("x", [64], np.float32)
    y = b.add_tensor("y", [64], np.int8, shape_signature=[-1])
    i = b.add_tensor("idx", [64], np.int32)
    b.add_op("UNIQUE", [x], [y, i], {"idx_out_type": "INT32"})
    b.set_inputs([x])
    b.set_outputs([y, i])
    return b.build()


def _nms_v5_scores_int32() -> bytes:
    b = ModelBuilder()
    boxes = b.add_tensor("boxes", [6, 4], np.float32)
    scores = b.add_tensor("scores", [6], np.float32)
    ins = [
        boxes,
        scores,
        b.add_constant("max_output_size", np.array(3, np.int32)),
        b.add_constant("iou_threshold", np.array(0.5, np.float32)),
        b.add_constant("score_threshold", np.array(0.0, np.float32)),
        b.add_constant("sigma", np.array(0.0, np.float32)),
    ]
    outs = [
        b.add_tensor("selected", [3], np.int32, shape_signature=[-1]),
        b.add_tensor("selected_scores", [3], np.int32, shape_signature=[-1]),
        b.add_tensor("valid", [], np.int32),
    ]
    b.add_op("NON_MAX_SUPPRESSION_V5", ins, outs)
    b.set_inputs([boxes, scores])
    b.set_outputs(outs)
    return b.build()


def test_value_dependent_outputs_declared_otherwise_are_refused(tmp_path):
    """WHERE, UNIQUE and NON_MAX_SUPPRESSION write their own dtype and rank whatever the file
    declares: a declaration they do not write is refused with its exact message, with and
    without XNNPACK (in a child: before the rules, UNIQUE's case aborted the process)."""
    paths = {}
    for name, (make, _) in _REFUSED.items():
        paths[name] = str(tmp_path / f"{name}.tflite")
        (tmp_path / f"{name}.tflite").write_bytes(make())
    got = run_both_ways(paths, tmp_path)
    for name, (_, message) in _REFUSED.items():
        for xnn in (False, True):
            cls, msg = got[f"{name}|{xnn}"]
            assert [cls, msg.split("model: ", 1)[-1]] == ["ModelError", message], (name, xnn)


def _run_both(data: bytes, *inputs):
    it = oo.Interpreter(model_content=data)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    ours = [it.get_tensor(d["index"]) for d in it.get_output_details()]
    ref = litert.Interpreter(model_content=data)
    ref.allocate_tensors()
    for d, x in zip(ref.get_input_details(), inputs):
        ref.set_tensor(d["index"], x)
    ref.invoke()
    theirs = [ref.get_tensor(d["index"]) for d in ref.get_output_details()]
    return ours, theirs


def test_value_dependent_ops_declared_as_their_kernels_write_run_and_match_ai_edge_litert():
    rng = np.random.default_rng(17)
    cond = rng.random((3, 4, 5)) > 0.5
    ours, theirs = _run_both(_where([3, 4, 5], np.int64, [1, 3], [-1, 3]), cond)
    np.testing.assert_array_equal(ours[0], np.argwhere(cond))
    np.testing.assert_array_equal(ours[0], theirs[0])

    x = rng.integers(0, 5, 64).astype(np.float32)
    for idx_dtype, idx_type in ((np.int32, "INT32"), (np.int64, "INT64")):
        ours, theirs = _run_both(_unique(idx_dtype, idx_type), x)
        values, first = np.unique(x, return_index=True)
        np.testing.assert_array_equal(ours[0], x[np.sort(first)])
        assert ours[1].dtype == idx_dtype
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(a, b)

    boxes = np.array(
        [[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, -0.1, 1, 0.9], [0, 10, 1, 11], [0, 10.1, 1, 11.1], [0, 100, 1, 101]],
        np.float32,
    )
    scores = np.array([0.9, 0.75, 0.6, 0.95, 0.5, 0.3], np.float32)
    for v5 in (False, True):
        ours, theirs = _run_both(_nms(np.int32, v5), boxes, scores)
        np.testing.assert_array_equal(ours[0], [3, 0, 5])
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "op, x, y",
    [
        ("SOFTMAX", np.int8, np.int16),  # softmax.cc: an int8 softmax may write int16
        ("FULLY_CONNECTED", np.int8, np.int16),
        ("MUL", np.int16, np.int8),
    ],
)
def test_the_quantized_kernels_own_type_combinations_are_accepted(op, x, y):
    b = ModelBuilder()
    q = {"scales": [0.1], "zero_points": [0]}
    a = b.add_tensor("a", [1, 4], x, quantization=q)
    ins = [a]
    if op == "FULLY_CONNECTED":
        ins += [b.add_constant("w", np.ones((4, 4), np.int8), quantization=q), -1]
    elif op == "MUL":
        ins.append(b.add_tensor("a2", [1, 4], x, quantization=q))
    out = b.add_tensor("out", [1, 4], y, quantization=q)
    b.add_op(op, ins, [out])
    b.set_inputs(ins if op == "MUL" else [a])
    b.set_outputs([out])
    check_model(read_model(b.build()))


def test_the_wheel_models_pass_the_type_rules():
    """Every real model of the two wake-word wheels (float, int8/uint8 streaming, with state
    variables) passes the table: no rule refuses what the converter writes."""
    from opaque_ops.model.checks.type_rules import check_types

    checked = 0
    for pkg in ("pyopen_wakeword", "pymicro_wakeword"):
        for f in sorted(package_file(pkg, "models").glob("*.tflite")):
            info = read_model(f)
            for sg in info.subgraphs:
                for op in sg.operators:
                    check_types(sg, op)
                    checked += op.op_name in TYPE_RULES
    assert checked > 100, checked


def test_the_corpus_keeps_the_issue_reproductions():
    for name in (
        "fuzz_where_declared_float32_into_conv.tflite",
        "alexa_input_retyped_int64.tflite",
        "hey_jarvis_input_retyped_int32.patch.json",
    ):
        assert INDEX[name]["configs"] == [False, True] and INDEX[name]["error"] == "ModelError"


def _elementwise(op: str, a_shape, b_shape, out_shape) -> bytes:
    b = ModelBuilder()
    ins = [b.add_tensor("a", a_shape, np.float32)]
    if b_shape is not None:
        ins.append(b.add_constant("b", np.ones(b_shape, np.float32)))
    y = b.add_tensor("y", out_shape, np.float32)
    b.add_op(op, ins, [y])
    b.set_inputs(ins[:1])
    b.set_outputs([y])
    return b.build()


def test_elementwise_ops_keep_their_inputs_rank():
    """A stale declaration after a value-dependent tensor (corpus: where_cast_declared_rank_4_into_conv)
    is refused; broadcasting to the larger rank is what the kernels write, and passes."""
    check_model(read_model(_elementwise("ADD", [1, 4, 4, 3], [3], [1, 4, 4, 3])))
    check_model(read_model(_elementwise("RELU", [6, 2], None, [6, 2])))
    with pytest.raises(oo.ModelError, match=r"\(RELU\): input 0 \(tensor 0\) is \[6, 2\], but output 0 \(tensor 1\) "):
        check_model(read_model(_elementwise("RELU", [6, 2], None, [1, 6, 2, 1])))
    with pytest.raises(oo.ModelError, match=r"ADD writes a rank-4 tensor there"):
        check_model(read_model(_elementwise("ADD", [1, 4, 4, 3], [3], [48, 3])))


def test_stablehlo_operators_are_refused_before_the_runtime_sees_them():
    """The runtime resolves some StableHLO operators (2.17.1: seven, 2.23: nine) with kernels that
    trust their inputs (tests/corpus/fuzz_stablehlo_gather_in_while_condition.tflite aborted the
    process): every StableHLO operator is refused by the checks, in any subgraph, with one message;
    before the rule, the resolved ones were built (checked here on the loaded runtime, with no checks)."""
    from opaque_ops import _native

    resolved = []
    for name in [n for n in _BUILTIN_OPERATOR_LIST if n.startswith("STABLEHLO_")]:
        b = ModelBuilder()
        x = b.add_tensor("x", [2], np.float32)
        y = b.add_tensor("y", [2], np.float32)
        b.add_op(name, [x], [y])
        b.set_inputs([x])
        b.set_outputs([y])
        data = b.build()
        if _native.NativeInterpreter(_native.NativeModel(data), []).ok:
            resolved.append(name)
        with pytest.raises(oo.ModelError, match=f"operator 0 \\({name}\\) is a StableHLO operator"):
            oo.Interpreter(model_content=data)
    assert {"STABLEHLO_ADD", "STABLEHLO_GATHER", "STABLEHLO_SCATTER"} <= set(resolved), resolved
