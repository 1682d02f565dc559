"""Interpreter: the Atan seed model end to end, validation, errors, signatures, lifetimes."""

from __future__ import annotations

import gc
import itertools
import sys
import weakref

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops import _native
from opaque_ops.model import ModelBuilder
from tests.helpers.atan import ATAN_INPUT, MACRO_ATAN, OFFSET, make_model, reference, run_atan
from tests.helpers.locations import ROOT


def test_guide_style_source_runs_the_seed_model(atan_model_bytes, guide_atan):
    # The guide creates its op as "ATAN"; it must be registered as the model's "Atan".
    assert guide_atan.ops == [("Atan", 1)]
    out = run_atan(atan_model_bytes, guide_atan)
    np.testing.assert_array_equal(out, reference(ATAN_INPUT))


def test_macro_declared_source_runs_the_seed_model(atan_model_bytes):
    lib = oo.compile_ops(MACRO_ATAN)
    assert lib.names == ["Atan"]
    np.testing.assert_array_equal(run_atan(atan_model_bytes, lib), reference(ATAN_INPUT))


def test_guides_printed_numbers_with_offset_one(guide_atan):
    """The guide's printed outputs are those of offset 1.0 (atan(1.5) = 0.98279372...)."""
    data = make_model.build(offset=1.0)
    out = run_atan(data, guide_atan)
    expected = np.array([-1.4288993, 0.98279375, 1.2490457, 1.2679114, 1.5658458], np.float32)
    np.testing.assert_array_equal(out, expected)


def test_wrong_dtype_and_shape_are_value_errors(atan_model_bytes, guide_atan):
    it = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[guide_atan])
    it.allocate_tensors()
    idx = it.get_input_details()[0]["index"]
    with pytest.raises(ValueError, match=r"expected dtype float32, received float64"):
        it.set_tensor(idx, ATAN_INPUT.astype(np.float64))
    with pytest.raises(ValueError, match=r"expected shape \(5,\), received \(2, 3\)"):
        it.set_tensor(idx, np.zeros((2, 3), np.float32))
    with pytest.raises(oo.OpaqueOpsError):
        it.set_tensor(idx, np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="out of range"):
        it.set_tensor(999, ATAN_INPUT)


def test_resize_then_rerun(atan_model_bytes, guide_atan):
    it = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[guide_atan])
    idx = it.get_input_details()[0]["index"]
    for n in (5, 1, 1000, 3):
        x = np.linspace(-50, 50, n, dtype=np.float32)
        it.resize_tensor_input(idx, [n])
        it.allocate_tensors()
        it.set_tensor(idx, x)
        it.invoke()
        out = it.get_tensor(it.get_output_details()[0]["index"])
        assert out.shape == (n,)
        np.testing.assert_array_equal(out, reference(x))
    assert list(it.get_input_details()[0]["shape_signature"]) == [-1]


def test_signature_runner(atan_model_bytes, guide_atan):
    it = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[guide_atan])
    assert it.get_signature_list() == {"serving_default": {"inputs": ["x"], "outputs": ["y"]}}
    runner = it.get_signature_runner("serving_default")
    x = np.array([0.0, 1.0, -3.0, 7.5], np.float32)  # a new shape: the runner resizes
    out = runner(x=x)
    assert set(out) == {"y"}
    np.testing.assert_array_equal(out["y"], reference(x))
    with pytest.raises(ValueError, match="missing"):
        runner()
    with pytest.raises(ValueError, match="no signature"):
        it.get_signature_runner("nope")


def test_tensor_view_is_zero_copy_and_guards_reallocation(atan_model_bytes, guide_atan):
    it = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[guide_atan])
    it.allocate_tensors()
    inp = it.tensor(it.get_input_details()[0]["index"])
    inp()[:] = ATAN_INPUT  # writes straight into TFLite's buffer
    it.invoke()
    out_view = it.tensor(it.get_output_details()[0]["index"])()
    np.testing.assert_array_equal(out_view, reference(ATAN_INPUT))
    # Nothing changed: allocating again moves nothing, and the view stays valid.
    it.allocate_tensors()
    it.resize_tensor_input(0, [5])
    it.invoke()
    np.testing.assert_array_equal(out_view, reference(ATAN_INPUT))
    # A new shape would move the memory under the view: refused, state unchanged.
    with pytest.raises(oo.LiveViewsError, match="view"):
        it.resize_tensor_input(0, [7])
    assert out_view.shape == (5,) and it.get_input_details()[0]["shape"].tolist() == [5]
    del out_view
    gc.collect()
    it.resize_tensor_input(0, [7])
    it.allocate_tensors()


def test_unresolved_op_names_every_missing_op(atan_model_bytes):
    it = oo.Interpreter(model_content=atan_model_bytes)
    with pytest.raises(oo.UnresolvedOpsError) as err:
        it.allocate_tensors()
    assert err.value.missing == [("Atan", 1)]
    assert "Atan v1" in str(err.value)


def test_unresolved_lists_registered_ops_and_several_missing(guide_atan):
    b = ModelBuilder()
    x = b.add_tensor("x", [3], np.float32)
    y = b.add_tensor("y", [3], np.float32)
    z = b.add_tensor("z", [3], np.float32)
    w = b.add_tensor("w", [3], np.float32)
    b.add_custom_op("Atan", [x], [y])
    b.add_custom_op("Frobnicate", [y], [z], version=3)
    b.add_custom_op("Zap", [z], [w])
    b.set_inputs([x])
    b.set_outputs([w])
    it = oo.Interpreter(model_content=b.build(), custom_ops=[guide_atan])
    with pytest.raises(oo.UnresolvedOpsError) as err:
        it.allocate_tensors()
    assert sorted(err.value.missing) == [("Frobnicate", 3), ("Zap", 1)]
    assert ("Atan", 1) in err.value.registered
    assert "Registered: Atan v1" in str(err.value)


def test_version_mismatch_is_a_clear_error(guide_atan):
    data = make_model.build(atan_version=2)
    it = oo.Interpreter(model_content=data, custom_ops=[guide_atan])
    with pytest.raises(oo.UnresolvedOpsError, match="another version") as err:
        it.allocate_tensors()
    assert err.value.missing == [("Atan", 2)]


def test_case_mismatch_hint(atan_source):
    # Registered under the guide's own name "ATAN": the model's "Atan" does not match.
    lib = oo.compile_ops(atan_source, ops={"ATAN": "AtanOpRegistrationExternal"})
    it = oo.Interpreter(model_content=make_model.build(), custom_ops=[lib])
    with pytest.raises(oo.UnresolvedOpsError, match="only in case") as err:
        it.allocate_tensors()
    # The fix for a guide-style factory is the ops= mapping, with the same factory.
    assert "compile_ops(ops={'Atan': 'AtanOpRegistrationExternal'})" in str(err.value)


def test_case_mismatch_hint_for_an_opaque_op_line(tmp_path):
    # An OPAQUE_OP("ATAN", ...) kernel names itself in C: ops= cannot rename it
    # (it only exports factories), so the hint must point at the OPAQUE_OP line.
    source = (ROOT / "c" / "kernels" / "atan.c").read_text()
    assert 'OPAQUE_OP("Atan", 1' in source
    lib = oo.compile_ops(source.replace('OPAQUE_OP("Atan", 1', 'OPAQUE_OP("ATAN", 1'))
    it = oo.Interpreter(model_content=make_model.build(), custom_ops=[lib])
    with pytest.raises(oo.UnresolvedOpsError, match="only in case") as err:
        it.allocate_tensors()
    msg = str(err.value)
    assert 'change its OPAQUE_OP("ATAN", ...) line to OPAQUE_OP("Atan", ...)' in msg
    assert "compile_ops(ops=" not in msg


KERNEL_ERROR = r"""
#include "opaque_ops.h"
static TfLiteStatus Prepare(TfLiteOpaqueContext* ctx, TfLiteOpaqueNode* node) {
  TF_LITE_OPAQUE_ENSURE_EQ(ctx, TfLiteOpaqueNodeNumberOfInputs(node), 2);
  return kTfLiteOk;
}
static TfLiteStatus Invoke(TfLiteOpaqueContext* ctx, TfLiteOpaqueNode* node) {
  TfLiteOpaqueContextReportError(ctx, "Atan: refusing value %d, try %s", 42, "less");
  return kTfLiteError;
}
OPAQUE_OP("Atan", 1, .prepare = Prepare, .invoke = Invoke);
OPAQUE_OP("AtanLate", 1, .invoke = Invoke);
"""


def test_kernel_error_messages_reach_python(atan_model_bytes, capfd):
    lib = oo.compile_ops(KERNEL_ERROR)
    it = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[lib])
    with pytest.raises(oo.KernelError) as err:
        it.allocate_tensors()
    assert "TfLiteOpaqueNodeNumberOfInputs(node) != 2 (1 != 2)" in str(err.value)
    # Invoke-time error, formatted through the variadic reporter.
    b = ModelBuilder()
    x = b.add_tensor("x", [2], np.float32)
    y = b.add_tensor("y", [2], np.float32)
    b.add_custom_op("AtanLate", [x], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    it2 = oo.Interpreter(model_content=b.build(), custom_ops=[lib])
    it2.allocate_tensors()
    with pytest.raises(oo.KernelError, match="Atan: refusing value 42, try less"):
        it2.invoke()
    # Captured per interpreter, not spilled on stderr.
    captured = capfd.readouterr()
    assert "refusing" not in captured.err


@pytest.mark.parametrize(
    "mangle",
    [
        lambda d: d[: len(d) // 2],
        lambda d: b"",
        lambda d: b"not a model at all" * 10,
        lambda d: d[:8] + bytes(64),
    ],
    ids=["truncated", "empty", "garbage", "zeroed"],
)
def test_corrupt_model_raises(atan_model_bytes, mangle):
    with pytest.raises(oo.ModelError):
        oo.Interpreter(model_content=mangle(atan_model_bytes))


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "isolated"])
@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("model.tflite", r"not a str; to read the file 'model.tflite', pass model_path="),
        (ROOT / "examples" / "atan" / "atan.tflite", r"not a PosixPath; .*pass model_path="),
        (5, r"model_content takes the model's bytes .* not int"),  # bytes(5) was five zero bytes
        (None.__class__, r"not type"),
    ],
    ids=["str", "path", "int", "type"],
)
def test_model_content_that_is_not_bytes_is_a_type_error(content, says, isolate):
    with pytest.raises(TypeError, match=says):
        oo.Interpreter(model_content=content, isolate=isolate)


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "isolated"])
def test_model_content_may_be_any_bytes_like_object(atan_model_bytes, guide_atan, isolate):
    x = np.linspace(-3, 3, 5).astype(np.float32)
    for content in (
        bytearray(atan_model_bytes),
        memoryview(atan_model_bytes),
        np.frombuffer(atan_model_bytes, np.uint8),
    ):
        it = oo.Interpreter(model_content=content, custom_ops=[guide_atan], isolate=isolate)
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        np.testing.assert_allclose(it.get_tensor(it.get_output_details()[0]["index"]), reference(x), rtol=1e-6)
        it.close()


def test_missing_model_file(tmp_path):
    with pytest.raises(oo.ModelError, match="cannot read model file"):
        oo.Interpreter(model_path=tmp_path / "nope.tflite")


def test_close_is_idempotent_and_use_after_close_is_clean(atan_model_bytes, guide_atan):
    with oo.Interpreter(model_content=atan_model_bytes, custom_ops=[guide_atan]) as it:
        it.allocate_tensors()
        view = it.tensor(it.get_input_details()[0]["index"])()
    it.close()
    it.close()
    with pytest.raises(oo.ClosedError):
        it.invoke()
    with pytest.raises(oo.ClosedError):
        it.get_input_details()
    view[:] = 1.0  # the memory behind a view outlives close()
    assert float(view.sum()) == 5.0


@pytest.mark.parametrize("order", list(itertools.permutations(["it", "view", "runner", "op", "data"])), ids="-".join)
def test_objects_die_in_any_order(order, atan_model_bytes):
    # Five objects with independent lifetimes: the interpreter, a tensor()
    # view, a signature runner, the Python op, and the model bytes (kept by
    # reference, not copied).  In every order, what is left keeps working,
    # and at the end all of it is freed, down to the op's C operator.
    data = bytes(bytearray(atan_model_bytes))  # a private copy, so its reference count is ours
    base_refs = sys.getrefcount(data)
    gc.collect()
    base_ops = _native.live_python_operators()
    op = oo.python_op("Atan", invoke=lambda ins, outs: np.arctan(ins[0], out=outs[0]))
    it = oo.Interpreter(model_content=data, custom_ops=[op])
    runner = it.get_signature_runner()
    it.allocate_tensors()
    it.set_tensor(0, ATAN_INPUT)
    it.invoke()
    view = it.tensor(it.get_output_details()[0]["index"])()
    env = {"it": it, "view": view, "runner": runner, "op": op, "data": data}
    r_it, r_op, r_native = weakref.ref(it), weakref.ref(op), weakref.ref(it._native)
    expected = np.arctan(ATAN_INPUT + OFFSET)
    del it, view, runner, op
    for name in order:
        del env[name]  # freed by reference counting alone: no collection in between
        if "view" in env:
            np.testing.assert_allclose(env["view"], expected, rtol=1e-6)
        if "runner" in env:
            np.testing.assert_allclose(env["runner"](x=ATAN_INPUT)["y"], expected, rtol=1e-6)
        if "it" in env:
            env["it"].invoke()
            np.testing.assert_allclose(env["it"].get_tensor(3), expected, rtol=1e-6)
    gc.collect()
    assert r_it() is None and r_op() is None and r_native() is None
    assert _native.live_python_operators() == base_ops
    assert sys.getrefcount(data) == base_refs


def test_interpreter_in_a_reference_cycle_is_collected(atan_model_bytes, guide_atan):
    it = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[guide_atan])
    it.allocate_tensors()
    it.self_ref = it
    r = weakref.ref(it)
    del it
    gc.collect()
    assert r() is None


def test_details_have_tflite_runtime_keys(atan_model_bytes, guide_atan):
    it = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[guide_atan])
    keys = {"name", "index", "shape", "shape_signature", "dtype", "quantization", "quantization_parameters"}
    for d in it.get_input_details() + it.get_output_details() + it.get_tensor_details():
        assert keys <= set(d)
    names = [d["name"] for d in it.get_tensor_details()]
    assert names == ["x", "offset", "x_plus_offset", "y"]
    assert it.get_input_details()[0]["dtype"] is np.float32


def test_bad_custom_ops_argument(atan_model_bytes):
    with pytest.raises(TypeError, match="custom_ops"):
        oo.Interpreter(model_content=atan_model_bytes, custom_ops=[42])
    with pytest.raises(oo.OpLibraryError, match="does not exist"):
        oo.Interpreter(model_content=atan_model_bytes, custom_ops=["/nonexistent/lib.so"])


# ======================================================== guarded memory path


def _add_const_model() -> bytes:
    b = ModelBuilder()
    x = b.add_tensor("x", [5], np.float32)
    c = b.add_constant("c", np.arange(5, dtype=np.float32))
    y = b.add_tensor("y", [5], np.float32)
    b.add_op("ADD", [x, c], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


def test_constants_are_read_only_and_the_callers_bytes_are_never_written():
    # Before: set_tensor on a weight wrote into the caller's `bytes`, and the
    # next interpreter built from the same bytes computed with the new weights.
    data = _add_const_model()
    snapshot = bytes(bytearray(data))
    it = oo.Interpreter(model_content=data)
    it.allocate_tensors()
    const = next(d["index"] for d in it.get_tensor_details() if d["name"] == "c")
    with pytest.raises(oo.ReadOnlyTensorError, match="is a constant"):
        it.set_tensor(const, np.full(5, 7, np.float32))
    view = it.tensor(const)()
    assert not view.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        view[0] = 7
    del view
    assert data == snapshot
    x = np.ones(5, np.float32)
    for interp in (it, oo.Interpreter(model_content=data)):
        interp.allocate_tensors()
        interp.set_tensor(0, x)
        interp.invoke()
        np.testing.assert_array_equal(interp.get_tensor(2), x + np.arange(5, dtype=np.float32))


def test_a_models_verdict_wins_over_the_runtimes_refusal():
    # The allocation fails (the reference CONV_2D refuses a window larger than
    # its input, or a later op's prepare fails), and the model check sees the
    # same problem: the ModelError is raised, as on runtimes that do not fail
    # there, so the exception type does not depend on the runtime version.
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 1, 16, 1], np.float32, shape_signature=[1, 1, -1, 1])
    w = b.add_constant("w", np.ones((1, 1, 8, 1), np.float32))
    bias = b.add_constant("b", np.zeros(1, np.float32))
    y = b.add_tensor("y", [1, 1, 9, 1], np.float32)
    z = b.add_tensor("z", [1, 1, 9, 1], np.float32)
    b.add_op("CONV_2D", [x, w, bias], [y], options={"padding": "VALID", "stride_w": 1, "stride_h": 1})
    b.add_custom_op("Fail", [y], [z])
    b.set_inputs([x])
    b.set_outputs([z])

    def prepare(specs):
        raise RuntimeError("prepare of Fail refuses")

    op = oo.python_op("Fail", invoke=lambda i, o: None, prepare=prepare)
    it = oo.Interpreter(model_content=b.build(), custom_ops=[op], use_xnnpack=False)
    with pytest.raises(RuntimeError, match="prepare of Fail refuses"):
        it.allocate_tensors()  # a valid shape: the op's own error
    it.resize_tensor_input(0, [1, 1, 4, 1])
    with pytest.raises(oo.ModelError, match="1x8 window"):
        it.allocate_tensors()
    with pytest.raises(oo.NotAllocatedError):
        it.invoke()  # a refused allocation leaves nothing to invoke


def test_same_shape_resize_and_unchanged_allocate_do_nothing(atan_model_bytes, guide_atan):
    # openWakeWord's frame: resize to the same shape, allocate, set, invoke,
    # get.  The resize and the allocation change nothing, so a tensor() view
    # stays allowed and valid, and set/get keep their cached views.
    it = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[guide_atan])
    it.resize_tensor_input(0, [5])
    it.allocate_tensors()
    out = it.tensor(it.get_output_details()[0]["index"])()
    for k in range(3):
        x = ATAN_INPUT + np.float32(k)
        it.resize_tensor_input(0, [5])
        it.allocate_tensors()
        it.set_tensor(0, x)
        it.invoke()
        np.testing.assert_array_equal(it.get_tensor(3), reference(x))
        np.testing.assert_array_equal(out, reference(x))
    # White box: the fast path's cached views were kept, not rebuilt.
    assert set(it._slots) == {0, 3}
    del out
    it.resize_tensor_input(0, [6])
    assert it._slots == {}
    with pytest.raises(oo.NotAllocatedError):
        it.invoke()


def test_a_string_tensor_has_no_view_and_says_get_tensor_copies_it():
    """Before: "has no data yet: call allocate_tensors() first", after allocate_tensors()."""
    from tests.helpers.string_models import reshape_model

    it = oo.Interpreter(model_content=reshape_model([2]))
    it.allocate_tensors()
    it.set_tensor(0, np.array([b"a", b"b"]))
    with pytest.raises(
        oo.InvalidInputError, match=r"string tensor, .* no tensor\(\) view; get_tensor\(\) returns a copy"
    ):
        it.tensor(0)()
