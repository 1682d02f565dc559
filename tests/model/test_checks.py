"""opaque_ops.model.checks: what TFLite will really run, refused before it can crash, and nothing more.

Every model that once crashed the process is a file in tests/corpus/ with
the exact message it must now get (tests/corpus/index.json); it is replayed
in a child process, so a regression fails the test instead of killing the
run.  Valid uses of the same features must keep running and match
ai-edge-litert.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.model import ModelBuilder, check_allocated, check_model, read_model
from opaque_ops.model.runtime_ops import RUNTIME_CUSTOM_OPS
from opaque_ops.model.shapes import ShapeError, infer_shapes
from tests.helpers.both_ways import run_both_ways
from tests.helpers.child_process import run_child
from tests.helpers.corpus import CORPUS, ENTRIES, INDEX, corpus_bytes
from tests.helpers.locations import package_file
from tools import fuzz_models

litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is a test dependency")


def test_corpus_index_lists_every_file():
    files = {str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*") if p.is_file() and p.name != "index.json"}
    assert files == set(ENTRIES)
    for name in ENTRIES:
        assert INDEX[name]["message"] and INDEX[name]["error"] and INDEX[name]["found_by"]


def test_corpus_is_refused_with_its_exact_message_in_every_configuration(tmp_path):
    """Each former crasher, with and without XNNPACK: the exact refusal, or (in a configuration
    where the runtime refuses first) an OpaqueOpsError; never a crash."""
    got = run_both_ways({name: corpus_bytes(name) for name in ENTRIES}, tmp_path)
    for name in ENTRIES:
        want = INDEX[name]
        for xnn in (False, True):
            cls, msg = got[f"{name}|{xnn}"][:2]
            assert cls != "ran", f"{name} (use_xnnpack={xnn}) ran; it must be refused"
            msg = msg.replace("<model_content> is not a usable TFLite model: ", "")
            if xnn in want["configs"]:
                assert (cls, msg) == (want["error"], want["message"]), (name, xnn)


def test_conversion_metadata_is_refused_where_tflite_reads_it_and_valid_edits_run():
    """TFLite 2.17 parses the CONVERSION_METADATA entry unverified when a telemetry profiler is
    attached (InterpreterBuilder::ParseConversionMetadata), as in the isolated worker: the corpus
    files crashed it there (SIGSEGV, SIGABRT).  Through isolate they now get their exact refusal;
    an edit whose reads stay inside the entry (five optimization modes instead of one) still runs."""
    from opaque_ops.isolate import Worker, run_model
    from opaque_ops.model.metadata import CONVERSION_METADATA, conversion_metadata_fault

    names = [n for n in ENTRIES if CONVERSION_METADATA in INDEX[n]["message"]]
    assert len(names) >= 4
    base = package_file("pymicro_wakeword", "models", "okay_nabu.tflite").read_bytes()
    info = read_model(base)
    md = info.buffers[info.metadata[CONVERSION_METADATA]]
    assert conversion_metadata_fault(md) is None
    # root -> options (table at 32, vtable at 26) -> model_optimization_modes: a 1-entry vector at 40
    # (the bytes the converter wrote, in tensorflow/lite/schema/conversion_metadata.fbs's layout).
    assert md[40:44] == (1).to_bytes(4, "little"), md.hex()
    at = base.index(md)
    edited = bytearray(base)
    edited[at + 40] = 5  # 5 * 4 bytes from 44: still inside the 88 bytes
    assert conversion_metadata_fault(bytes(edited[at : at + len(md)])) is None
    with Worker() as w:
        for name in names:
            out = run_model(corpus_bytes(name), worker=w, use_xnnpack=False)
            assert out.status == "rejected", (name, out.status, out.reason)
            assert str(out.error).endswith(INDEX[name]["message"]), (name, out.reason)
        out = run_model(bytes(edited), worker=w, use_xnnpack=False)
        assert out.status == "ok", out.reason


def _abs_with_metadata(name: str, payload: bytes) -> bytes:
    from tools.make_corpus import abs_model_with_metadata

    return abs_model_with_metadata(name, payload)


@pytest.mark.parametrize(
    "payload, fault",
    [
        ("010100", None),  # version 1, one subgraph, no edges
        # (An edge to an op the model lacks, 0101010002, passes the parser; TFLite 2.23 then
        # refuses the model itself while applying XNNPACK, 2.17 ignores it: not a check of ours.)
        ("01020100020102030405", None),  # trailing bytes: the runtime's parser rejects it, then ignores it
        ("02ffffffff0f", None),  # another version: never parsed further
        ("01ffffffff", None),  # the count runs out of bytes: rejected before any allocation
        ("01ffffffff0f", "claims 4294967295 subgraph entries at offset 1, but only 0 bytes follow"),
        ("0101ffffffff0f", "claims 4294967295 control edges at offset 2, but only 0 bytes follow"),
        ("01808080801003", None),  # a 5-byte count that wraps to 0 in uint32, as in the runtime
    ],
)
def test_control_dependencies_rule_replays_the_runtime_parser(payload, fault):
    """tensorflow/lite/experimental/remat/metadata_util.cc assigns a vector of `count` entries
    before reading them: a count above the bytes left is refused, whatever else its parser
    rejects is ignored by TFLite and passes; a valid entry runs."""
    from opaque_ops.model.metadata import CONTROL_DEPENDENCIES, control_dependencies_fault

    got = control_dependencies_fault(bytes.fromhex(payload))
    if fault is None:
        assert got is None, got
        it = oo.Interpreter(model_content=_abs_with_metadata(CONTROL_DEPENDENCIES, bytes.fromhex(payload)))
        it.allocate_tensors()
        x = np.array([[-1.5, 2.0, -0.0, 3.0]], np.float32)
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), np.abs(x))
    else:
        assert got == fault
        # Isolated: should the rule ever stop working, the runtime's abort fails this test
        # (RuntimeCrashError) instead of killing the test session.
        with pytest.raises(oo.ModelError, match=re.escape(fault)):
            oo.Interpreter(model_content=_abs_with_metadata(CONTROL_DEPENDENCIES, bytes.fromhex(payload)), isolate=True)


# ------------------------------------------------------ runtime-provided custom ops


def _spectrogram_mfcc(window=400, stride=160, dct=13):
    b = ModelBuilder()
    x = b.add_tensor("audio", [1600, 1], np.float32)
    spec = b.add_tensor("spectrogram", [1, 1, 1], np.float32)
    b.add_custom_op(
        "AudioSpectrogram", [x], [spec], {"window_size": window, "stride": stride, "magnitude_squared": True}
    )
    rate = b.add_constant("rate", np.array([16000], np.int32))
    mf = b.add_tensor("mfcc", [1, 1, 1], np.float32)
    b.add_custom_op(
        "Mfcc",
        [spec, rate],
        [mf],
        {
            "upper_frequency_limit": 4000,
            "lower_frequency_limit": 20,
            "filterbank_channel_count": 40,
            "dct_coefficient_count": dct,
        },
    )
    b.set_inputs([x])
    b.set_outputs([spec, mf])
    return b.build()


def _detection(n=64, classes=3, regular=False):
    rng = np.random.default_rng(3)
    b = ModelBuilder()
    boxes = b.add_tensor("boxes", [1, n, 4], np.float32)
    scores = b.add_tensor("scores", [1, n, classes + 1], np.float32)
    anchors = b.add_constant("anchors", np.abs(rng.standard_normal((n, 4))).astype(np.float32) + 0.1)
    outs = [
        b.add_tensor(nm, sh, np.float32)
        for nm, sh in (("det_boxes", [1, 5, 4]), ("det_classes", [1, 5]), ("det_scores", [1, 5]), ("num", [1]))
    ]
    b.add_custom_op(
        "TFLite_Detection_PostProcess",
        [boxes, scores, anchors],
        outs,
        {
            "max_detections": 5,
            "max_classes_per_detection": 1,
            "detections_per_class": 10,
            "use_regular_nms": regular,
            "nms_score_threshold": 0.1,
            "nms_iou_threshold": 0.5,
            "num_classes": classes,
            "y_scale": 10.0,
            "x_scale": 10.0,
            "h_scale": 5.0,
            "w_scale": 5.0,
        },
    )
    b.set_inputs([boxes, scores])
    b.set_outputs(outs)
    return b.build()


def _both(data, inputs):
    results = []
    for cls in (litert.Interpreter, oo.Interpreter):
        it = cls(model_content=data)
        it.allocate_tensors()
        for d, x in zip(it.get_input_details(), inputs):
            it.set_tensor(d["index"], x)
        it.invoke()
        results.append([it.get_tensor(d["index"]) for d in it.get_output_details()])
    return results


def test_audio_spectrogram_and_mfcc_run_and_match_ai_edge_litert():
    t = np.arange(1600, dtype=np.float32) / 16000
    audio = (np.sin(2 * np.pi * 440 * t) + 0.1 * np.sin(2 * np.pi * 3000 * t)).astype(np.float32)[:, None]
    want, got = _both(_spectrogram_mfcc(), [audio])
    assert [g.shape for g in got] == [(1, 8, 257), (1, 8, 13)] == [w.shape for w in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    # The spectrogram peaks at 440 Hz: bin 440 / (16000 / 512) = 14.
    assert int(np.argmax(got[0][0, 3])) == 14


@pytest.mark.parametrize("regular", [False, True])
def test_detection_postprocess_runs_and_matches_ai_edge_litert(regular):
    rng = np.random.default_rng(5)
    boxes = rng.standard_normal((1, 64, 4)).astype(np.float32)
    scores = rng.uniform(0, 1, (1, 64, 4)).astype(np.float32)
    want, got = _both(_detection(regular=regular), [boxes, scores])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert got[3][0] == 5  # five detections above the 0.1 threshold


def test_runtime_ops_are_listed_as_provided_by_the_runtime(tmp_path):
    from opaque_ops.cli.commands import main

    path = tmp_path / "m.tflite"
    path.write_bytes(_detection())
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["inspect", str(path)])
    assert rc == 0
    assert "TFLite_Detection_PostProcess v1  x1  provided by the TFLite runtime" in buf.getvalue()
    assert "MISSING" not in buf.getvalue()


@pytest.mark.parametrize(
    "edit, expect",
    [
        (dict(window=1), "window_size=1 is outside [2, 1048576]"),
        (dict(window=1 << 30), "window_size=1073741824 is outside"),
        (dict(stride=0), "stride=0 is outside"),
        (dict(dct=41), "dct_coefficient_count=41 exceeds filterbank_channel_count=40"),
    ],
)
def test_runtime_op_option_rules(edit, expect):
    with pytest.raises(oo.ModelError, match=re.escape(expect)):
        check_model(read_model(_spectrogram_mfcc(**edit)))


def test_audio_spectrogram_size_is_bounded_at_the_kernels_vectors():
    """tensorflow/lite/kernels/audio_spectrogram.cc's Eval copies the samples into a std::vector
    and builds frames x bins values in nested ones; a failed allocation throws std::bad_alloc
    through the C API (fuzz seed 42 case 28994: SIGABRT).  Both counts are bounded at 2**26; the
    bound itself still allocates.  (Running it takes 15 s: the corpus and the 1600-sample test run.)"""
    from opaque_ops.model.runtime_ops import MAX_SPECTROGRAM_VALUES

    data = _spectrogram_mfcc(window=2, stride=1)  # 2 bins a frame, one frame per sample after the first
    frames_at_bound = MAX_SPECTROGRAM_VALUES // 2
    it = oo.Interpreter(model_content=data)
    it.resize_tensor_input(0, [frames_at_bound + 1, 1])
    it.allocate_tensors()
    assert list(it.get_output_details()[0]["shape"]) == [1, frames_at_bound, 2]
    it = oo.Interpreter(model_content=data)
    it.resize_tensor_input(0, [frames_at_bound + 2, 1])
    with pytest.raises(oo.ModelError, match=re.escape(f"give {frames_at_bound + 1} frames of 2 bins, more than")):
        it.allocate_tensors()
    it = oo.Interpreter(model_content=_spectrogram_mfcc())
    it.resize_tensor_input(0, [MAX_SPECTROGRAM_VALUES + 1, 0])  # no output at all, the same copy
    with pytest.raises(oo.ModelError, match=re.escape(f"an input of {MAX_SPECTROGRAM_VALUES + 1} samples is more")):
        it.allocate_tensors()


def test_a_registered_kernel_replaces_the_runtime_op_and_its_rules():
    # Options the runtime's Mfcc would not accept are the registered op's business.
    data = _spectrogram_mfcc(dct=41)
    check_model(read_model(data), registered={"Mfcc"})
    assert RUNTIME_CUSTOM_OPS == {"AudioSpectrogram", "Mfcc", "TFLite_Detection_PostProcess", "NumericVerify"}


# ----------------------------------------------------- shapes TFLite really uses


def _conv_chain(stride_h=1):
    """x [1,12,8,1] -> CONV 3x3 VALID (stride_h) -> CONV 3x3 VALID: the second only fits at stride 1."""
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 12, 8, 1], np.float32)
    w1 = b.add_constant("w1", np.ones((2, 3, 3, 1), np.float32))
    w2 = b.add_constant("w2", np.ones((2, 5, 3, 2), np.float32))
    bias = b.add_constant("bias", np.zeros(2, np.float32))
    y = b.add_tensor("y", [1, 10, 6, 2], np.float32)
    z = b.add_tensor("z", [1, 6, 4, 2], np.float32)
    b.add_op("CONV_2D", [x, w1, bias], [y], {"padding": "VALID", "stride_h": stride_h, "stride_w": 1})
    b.add_op("CONV_2D", [y, w2, bias], [z], {"padding": "VALID", "stride_h": 1, "stride_w": 1})
    b.set_inputs([x])
    b.set_outputs([z])
    return b.build()


def test_inference_uses_computed_shapes_not_declared_ones():
    info = read_model(_conv_chain(stride_h=4))
    declared = {t.index: t.shape for t in info.subgraphs[0].tensors}
    # What XNNPACK leaves visible: every tensor at its declared shape.
    with pytest.raises(ShapeError, match=r"5x3 window, but its input 4 is 3x6"):
        infer_shapes(info, lambda i: declared[i])
    shapes = infer_shapes(read_model(_conv_chain()), lambda i: declared[i])
    assert shapes[4] == (1, 10, 6, 2) and shapes[5] == (1, 6, 4, 2)


def _dynamic_reshape_then_conv():
    """RESHAPE to a shape given at run time, then a VALID 5x3 conv; the reshape's
    output is declared 1x1 (a placeholder, as TF's converter leaves them)."""
    b = ModelBuilder()
    x = b.add_tensor("x", [96], np.float32, shape_signature=[-1])
    new_shape = b.add_tensor("new_shape", [4], np.int32)
    r = b.add_tensor("r", [1, 1, 1, 1], np.float32, shape_signature=[-1, -1, -1, 1])
    w = b.add_constant("w", np.ones((2, 5, 3, 1), np.float32))
    bias = b.add_constant("bias", np.zeros(2, np.float32))
    y = b.add_tensor("y", [1, 1, 1, 2], np.float32, shape_signature=[-1, -1, -1, 2])
    b.add_op("RESHAPE", [x, new_shape], [r])
    b.add_op("CONV_2D", [r, w, bias], [y], {"padding": "VALID", "stride_h": 1, "stride_w": 1})
    b.set_inputs([x, new_shape])
    b.set_outputs([y])
    return b.build()


@pytest.mark.parametrize("xnnpack", [False, True])
def test_shapes_after_a_dynamic_tensor_are_unknown_not_declared(xnnpack):
    data = _dynamic_reshape_then_conv()
    info = read_model(data)
    declared = {t.index: t.shape for t in info.subgraphs[0].tensors}
    # The reshape's output is declared 1x1, which the 5x3 VALID conv cannot take.
    # TFLite 2.17.1 reports it as dynamic (None); 2.22+ plans the placeholder in
    # the arena and replans during invoke.  Both mean "not known yet": no refusal.
    for reported in (None, (1, 1, 1, 1)):
        check_allocated(info, lambda i: reported if i == 2 else declared[i])
        assert infer_shapes(info, lambda i: reported if i == 2 else declared[i])[5] is None
    # The same conv on a constant reshape is checked (and refused at 1x1).
    with pytest.raises(ShapeError, match="5x3 window, but its input 2 is 1x1"):
        _constant_reshape_refused()
    # And the real interpreter runs it, as ai-edge-litert does.
    x = np.arange(96, dtype=np.float32)
    shape = np.array([1, 12, 8, 1], np.int32)
    (want,) = [r for r in _both_outputs(data, [x, shape])][:1]
    it = oo.Interpreter(model_content=data, use_xnnpack=xnnpack)
    it.allocate_tensors()
    it.set_tensor(0, x)
    it.set_tensor(1, shape)
    it.invoke()
    got = it.get_tensor(it.get_output_details()[0]["index"])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got.shape == (1, 8, 6, 2)


def _constant_reshape_refused():
    b = ModelBuilder()
    x = b.add_tensor("x", [1], np.float32)
    shape = b.add_constant("shape", np.array([1, 1, 1, 1], np.int32))
    r = b.add_tensor("r", [1, 12, 8, 1], np.float32)  # a wrong declared shape, as edited
    w = b.add_constant("w", np.ones((2, 5, 3, 1), np.float32))
    bias = b.add_constant("bias", np.zeros(2, np.float32))
    y = b.add_tensor("y", [1, 8, 6, 2], np.float32)
    b.add_op("RESHAPE", [x, shape], [r])
    b.add_op("CONV_2D", [r, w, bias], [y], {"padding": "VALID", "stride_h": 1, "stride_w": 1})
    b.set_inputs([x])
    b.set_outputs([y])
    info = read_model(b.build())
    declared = {t.index: t.shape for t in info.subgraphs[0].tensors}
    check_allocated(info, lambda i: declared[i])


def _both_outputs(data, inputs):
    it = litert.Interpreter(model_content=data)
    it.allocate_tensors()
    for d, v in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], v)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


@pytest.mark.parametrize("xnnpack", [False, True])
def test_edited_stride_is_refused_with_the_same_error_with_and_without_xnnpack(xnnpack):
    it = oo.Interpreter(model_content=_conv_chain(stride_h=4), use_xnnpack=xnnpack)
    with pytest.raises(ShapeError, match=r"5x3 window, but its input 4 is 3x6"):
        it.allocate_tensors()
    ok = oo.Interpreter(model_content=_conv_chain(), use_xnnpack=xnnpack)
    ok.allocate_tensors()
    ok.set_tensor(0, np.ones((1, 12, 8, 1), np.float32))
    ok.invoke()
    assert np.all(ok.get_tensor(ok.get_output_details()[0]["index"]) == 5 * 3 * 2 * 9)


FACE = ("mediapipe", "modules", "face_landmark", "face_landmark_with_attention.tflite")


@pytest.mark.parametrize(
    "shape, expect",
    [
        ([1, 96, 96, 3], "VALID padding"),  # SIGSEGV in XNNPACK before
        ([1, 192, 2, 3], "VALID padding"),  # SIGSEGV in XNNPACK before
        ([1, 192, 192, 1], "input has 1 channels, the filter [16, 3, 3, 3] takes 3"),  # garbage before
        ([1, 192, 192, 7], "input has 7 channels"),  # garbage before
        ([1] * 64, "at most 6 dimensions"),
    ],
)
def test_face_landmark_resizes_are_refused_not_crashed(shape, expect):
    path = package_file(*FACE)
    code = f"""
        import numpy as np, opaque_ops as oo
        it = oo.Interpreter(model_path={str(path)!r}, use_xnnpack=True, custom_ops=[oo.kernels.mediapipe()])
        try:
            it.resize_tensor_input(0, {shape!r})
            it.allocate_tensors()
            it.set_tensor(0, np.ones({shape!r}, np.float32))
            it.invoke()
            print("RAN")
        except oo.OpaqueOpsError as e:
            print("REFUSED", type(e).__name__, e)
    """
    p = run_child(code, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "REFUSED" in p.stdout and expect in p.stdout, p.stdout


def test_fully_connected_rank_7_resize_is_refused():
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 6], np.float32)
    w = b.add_constant("w", np.ones((3, 6), np.float32))
    y = b.add_tensor("y", [1, 3], np.float32)
    b.add_op("FULLY_CONNECTED", [x, w, -1], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    it = oo.Interpreter(model_content=b.build())
    with pytest.raises(oo.InvalidInputError, match="rank 7"):
        it.resize_tensor_input(0, [1, 1, 1, 1, 1, 1, 6])
    it.resize_tensor_input(0, [1, 1, 1, 1, 4, 6])  # rank 6 is fine: 4 rows of 6
    it.allocate_tensors()
    it.set_tensor(0, np.ones((1, 1, 1, 1, 4, 6), np.float32))
    it.invoke()
    assert it.get_tensor(it.get_output_details()[0]["index"]).shape == (4, 3)


# ------------------------------------------------- the same refusal on every runtime


def _litert_lm_library():
    lib = package_file("litert_lm", "liblitert-lm.so")
    if not lib.is_file():
        pytest.skip("litert-lm-api (the TFLite 2.23 C library) is not installed")
    return lib


@pytest.mark.parametrize("runtime", ["2.17.1", "2.23"])
def test_melspectrogram_refusal_is_the_same_on_every_runtime(runtime):
    path = package_file("pyopen_wakeword", "models", "melspectrogram.tflite")
    lib = str(
        package_file("pymicro_wakeword", "lib", "libtensorflowlite_c.so")
        if runtime == "2.17.1"
        else _litert_lm_library()
    )
    code = f"""
        import opaque_ops as oo
        it = oo.Interpreter(model_path={str(path)!r}, library={lib!r}, use_xnnpack=True)
        assert oo.runtime_info().version.startswith({runtime!r}), oo.runtime_info()
        it.resize_tensor_input(0, [1, 400])
        try:
            it.allocate_tensors()
            it.invoke()
            print("RAN")
        except oo.OpaqueOpsError as e:
            print("REFUSED", type(e).__name__, e)
    """
    p = run_child(code, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert (
        "REFUSED ShapeError operator 3 (CONV_2D) has VALID padding and a 1x512 window, but its input 17 is 1x400"
    ) in p.stdout, p.stdout


# ------------------------------------------------------------------ short fuzz


def test_fuzz_short_run_has_no_crash_and_only_opaque_ops_errors(tmp_path):
    totals = fuzz_models.run(1500, seed=7, workdir=tmp_path, chunk=750, workers=1)
    assert totals["crashes"] == [], totals["crashes"]
    assert totals["findings"] == [], totals["findings"]
    # The mutations reach both outcomes: some models still run, most are refused.
    assert totals["ok"] > 100 and totals["rejected"] > 500
    assert totals["ok"] + totals["rejected"] == 1500


@pytest.mark.slow
@pytest.mark.parametrize("xnnpack", [False, True])
def test_fuzz_long_run(tmp_path, xnnpack):
    totals = fuzz_models.run(20000, seed=11, workdir=tmp_path, chunk=1000, workers=2, xnnpack=xnnpack)
    assert totals["crashes"] == [] and totals["findings"] == [], (totals["crashes"], totals["findings"])


# The inputs the byte fuzzer once crashed the process with are kept as files
# in tests/corpus/bytefuzz/ with their exact messages, replayed by
# tests/model/test_checks.py (they are never regenerated with today's mutator).


def test_structured_fuzz_short_run_has_no_crash(tmp_path):
    from tools import fuzz_structured

    totals = fuzz_structured.run(300, seed=20261123, workdir=tmp_path, chunk=150, workers=1)
    assert totals["crashes"] == [], totals["crashes"]
    assert totals["findings"] == [], totals["findings"]
    assert totals["ok"] + totals["refused"] == 300
    # Both outcomes are reached: mutated models that still run, and refusals.
    assert totals["ok"] > 30 and totals["refused"] > 30, totals


@pytest.mark.parametrize(
    "shape, signature, refused",
    [
        ([1, 8, 2], [-1, 8, 2], False),
        ([1, 8, 2], [-1, -1, -1], False),
        ([1, 8, 2], None, False),
        ([1, 8, 2], [-1, 8, 2, 1], True),  # another rank (the corpus's SIGFPE)
        ([1, 8, 2], [-1, 4, 2], True),  # a fixed dimension that is not the shape's
    ],
)
def test_a_shape_signature_is_the_shape_with_free_dimensions(shape, signature, refused):
    from tools.fuzz_structured import pack, unpack

    b = ModelBuilder()
    x = b.add_tensor("x", shape, np.float32)
    y = b.add_tensor("y", shape, np.float32)
    b.add_op("ABS", [x], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    # (Written through TFLite's own schema: the ModelBuilder refuses a signature of another rank.)
    m = unpack(b.build())
    for t in m.subgraphs[0].tensors:
        t.shapeSignature = None if signature is None else np.array(signature, np.int32)
    info = read_model(pack(m))
    if not refused:
        check_model(info)
        return
    with pytest.raises(oo.ModelError, match=re.escape(f"has shape {shape} but shape_signature {signature}")):
        check_model(info)


def test_int4_weights_with_their_scales_run_and_match_ai_edge_litert():
    """The corpus refuses INT4 weights without scales; with per-channel scales (the way converters
    write them: two values a byte, low nibble first) the same model runs, as in ai-edge-litert."""
    import ai_edge_litert.schema_py_generated as S

    from tools.fuzz_structured import pack, unpack

    m = unpack(corpus_bytes("fuzz_fully_connected_int4_weights_without_scales.tflite"))
    w = m.subgraphs[0].tensors[1]
    nibbles = np.array([1, -2, 3, -4, 5, -6, 7, -8, 0, 1, 2, 3, -1, -1, 4, 4, 2, -3], np.int8)
    m.buffers[w.buffer].data = ((nibbles[0::2] & 0xF) | ((nibbles[1::2] & 0xF) << 4)).astype(np.uint8)
    q = S.QuantizationParametersT()
    q.scale, q.zeroPoint, q.quantizedDimension = [0.5, 0.25, 1.0], [0, 0, 0], 0
    w.quantization = q
    data = pack(m)
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(2, 6)
    want, got = _both(data, [x])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    # FULLY_CONNECTED then SOFTMAX over the 3 channels, from the nibbles and scales themselves.  The
    # kernel is hybrid: it quantizes x to int8 on the fly, hence the tolerance (a 127th of x's range).
    logits = x @ (nibbles.reshape(3, 6) * np.array([[0.5], [0.25], [1.0]])).T
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got[0], (e / e.sum(axis=1, keepdims=True)).reshape(3, 2), atol=0.005)


def test_structured_fuzz_triage_sorts_deaths_and_a_hang_stops_on_ctrl_c():
    """A dead fuzzing child is a crash, an out-of-memory death (std::bad_alloc under the child's cap)
    or a hang; triage replays the last two without the limits.  Seed 43 case 6471, a hang in the
    100,000-case run (a WHILE whose loop count became huge), stops cleanly on a user's Ctrl-C."""
    from tools.fuzz_structured import death_kind, make_case, triage

    assert death_kind({"returncode": "timeout", "stderr": ""}) == "hang"
    bad_alloc = "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\n"
    assert death_kind({"returncode": -6, "stderr": bad_alloc}) == "out_of_memory"
    assert death_kind({"returncode": -6, "stderr": "free(): invalid pointer"}) == "crash"
    assert death_kind({"returncode": -11, "stderr": ""}) == "crash"
    assert make_case(43, 6471).seed_model == "while"
    report = {
        "seed": 43,
        "crashes": [
            {"index": 6471, "returncode": "timeout", "stderr": ""},
            {"index": 0, "returncode": -11, "stderr": ""},  # a crash is never replayed as if it were benign
        ],
    }
    rows = triage(report, timeout=120)
    assert [(r["index"], r["kind"]) for r in rows] == [(6471, "hang")]
    assert rows[0]["outcome"].startswith("stopped by Ctrl-C after"), rows


@pytest.mark.parametrize("xnnpack", [False, True])
def test_empty_batch_never_returns_garbage_shapes(xnnpack):
    # With XNNPACK 2.17.1 an empty batch leaves garbage dimensions in the
    # delegate's outputs ([0, 549846668, 1491629428, 4]); get_tensor then
    # failed inside numpy.  Refused there; the reference kernels run it.
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 6, 6, 2], np.float32)
    w = b.add_constant("w", np.ones((1, 3, 3, 4), np.float32))
    bias = b.add_constant("b", np.zeros(4, np.float32))
    y = b.add_tensor("y", [1, 6, 6, 4], np.float32)
    b.add_op(
        "DEPTHWISE_CONV_2D", [x, w, bias], [y], {"padding": "SAME", "stride_h": 1, "stride_w": 1, "depth_multiplier": 2}
    )
    m = b.add_tensor("m", [1, 3, 3, 4], np.float32)
    b.add_op(
        "MAX_POOL_2D",
        [y],
        [m],
        {"padding": "SAME", "stride_h": 2, "stride_w": 2, "filter_width": 2, "filter_height": 2},
    )
    b.set_inputs([x])
    b.set_outputs([m])
    it = oo.Interpreter(model_content=b.build(), use_xnnpack=xnnpack)
    it.resize_tensor_input(0, [0, 6, 6, 2])
    try:
        it.allocate_tensors()
    except oo.ModelError as exc:
        assert xnnpack and "operators give [0, 3, 3, 4]" in str(exc)
        return
    except oo.KernelError as exc:
        # 2.23's XNNPACK refuses the empty batch itself: no shapes to read.
        assert xnnpack and "XNNPack delegate failed to reshape runtime" in str(exc), exc
        assert "closed" not in str(exc), exc
        return
    it.invoke()
    assert it.get_tensor(it.get_output_details()[0]["index"]).shape == (0, 3, 3, 4)


@pytest.mark.parametrize("xnnpack", [False, True], ids=["reference", "xnnpack"])
def test_resize_to_another_rank_than_pads_paddings_is_refused(xnnpack):
    """openWakeWord's embedding_model starts with a PAD of 4 rows of paddings; resized to
    rank 3, the reference kernel refuses it (pad.cc checks one row per dimension), while
    XNNPACK kept its rank-4 plan: garbage, and SIGSEGV in fuzz_structured 21:87512.
    Both configurations must give the same refusal."""
    from opaque_ops.isolate.run import run_model

    path = package_file("pyopen_wakeword", "models", "embedding_model.tflite")
    out = run_model(str(path), use_xnnpack=xnnpack, resize=[1, 76, 32])
    assert out.status == "rejected", (out.status, out.reason)
    assert isinstance(out.error, ShapeError)
    assert str(out.error) == (
        "operator 0 (PAD) has 4 rows of paddings, but its input 0 has shape [1, 76, 32] "
        "(rank 3); resize the input with the model's rank"
    )
    # The rank it was built for still runs.
    assert run_model(str(path), use_xnnpack=xnnpack, resize=[1, 76, 32, 1]).status == "ok"


def test_tensor_whose_bytes_do_not_match_its_shape_is_a_model_error():
    """A graph output that is a sparse constant holds its compressed bytes, not the dense
    shape's (fuzz_structured 21:33100 and 21:55015 raised numpy's ValueError)."""
    from opaque_ops.isolate.run import run_model
    from tools.fuzz_structured import make_case

    out = run_model(make_case(21, 55015).data, use_xnnpack=False)
    assert out.status == "rejected" and out.stage == "read", (out.status, out.stage, out.reason)
    assert "holds 2458 bytes for it" in str(out.error)


@pytest.mark.parametrize("xnnpack", [False, True])
def test_convolution_input_resized_to_zero_channels_is_refused(xnnpack):
    """A CONV_2D's kernels divide by the group count, input channels / filter channels:
    resized to 0 channels that is a division by zero (SIGFPE in fuzz_structured 31:41157).
    The input is declared with 2 channels (as the fuzzer left it), so the rule for a model
    resized away from its own channel count does not apply."""
    from opaque_ops.isolate.run import run_model

    b = ModelBuilder()
    x = b.add_tensor("x", [1, 8, 8, 2], np.float32, shape_signature=[-1, 8, 8, -1])
    w = b.add_constant("w", np.full((4, 3, 3, 3), 0.1, np.float32))
    bias = b.add_constant("b", np.zeros(4, np.float32))
    y = b.add_tensor("y", [1, 3, 3, 4], np.float32)
    b.add_op("CONV_2D", [x, w, bias], [y], {"padding": "VALID", "stride_w": 2, "stride_h": 2})
    b.set_inputs([x])
    b.set_outputs([y])
    data = b.build()
    out = run_model(data, use_xnnpack=xnnpack, resize=[1, 8, 8, 0])
    assert out.status == "rejected", (out.status, out.reason)
    assert isinstance(out.error, oo.ModelError)
    assert str(out.error) == (
        "operator 0 (CONV_2D) has a filter of 3 input channels, but its input 0 has shape [1, 8, 8, 0]: "
        "the input channels must be a positive multiple of the filter's. Resize the model's input with the "
        "channel count it was built for"
    )
    assert run_model(data, use_xnnpack=xnnpack, resize=[2, 8, 8, 3]).status == "ok"


def _split_model(axis_from_where: bool) -> bytes:
    """SPLIT of x [2, 6] in two; its axis a CAST of WHERE(x) (shape decided while the model runs), or an input."""
    b = ModelBuilder()
    x = b.add_tensor("x", [2, 6], np.float32)
    h0 = b.add_tensor("h0", [2, 3], np.float32)
    h1 = b.add_tensor("h1", [2, 3], np.float32)
    axis = b.add_tensor("axis", [], np.int32)
    if axis_from_where:
        where = b.add_tensor("where", [1, 2], np.int64, shape_signature=[-1, 2])
        b.add_op("WHERE", [x], [where])
        b.add_op("CAST", [where], [axis])
        b.set_inputs([x])
    else:
        b.set_inputs([x, axis])
    b.add_op("SPLIT", [axis, x], [h0, h1], {"num_splits": 2})
    b.set_outputs([h0, h1])
    return b.build()


@pytest.mark.parametrize("xnnpack", [False, None])  # (True is refused earlier: XNNPACK cannot plan WHERE's output)
def test_split_axis_decided_while_the_model_runs_is_refused(xnnpack):
    """SPLIT reads its axis as one int32 without checking the tensor's size. Its declared
    shape was one value, but a CAST of WHERE's output is resized to WHERE's shape while the
    model runs: empty for an all-zero input, a null read (SIGSEGV in fuzz_structured 84:19809)."""
    from opaque_ops.isolate.run import run_model
    from tools.fuzz_structured import make_case

    data = _split_model(axis_from_where=True)
    out = run_model(data, use_xnnpack=xnnpack)
    assert out.status == "rejected", (out.status, out.reason)
    assert isinstance(out.error, oo.ModelError) and out.stage == "allocate", (out.stage, out.error)
    assert str(out.error).startswith(
        "operator 2 (SPLIT) reads its axis from tensor 3, whose shape is only decided while the model runs"
    )
    case = make_case(84, 19809)
    out = run_model(case.data, use_xnnpack=case.xnnpack, resize=case.resize)
    assert out.status == "rejected" and "reads its axis from tensor 10" in str(out.error), (out.status, out.reason)


def test_a_planned_shape_rule_names_a_subgraph_other_than_0():
    """A signature runner of subgraph k is checked with that subgraph moved to index 0 (as
    ``Interpreter._rooted`` does); the rules' "operator 2 (SPLIT)" then named no subgraph,
    and read as subgraph 0's operator.  Another subgraph's messages start "subgraph k, "."""
    import dataclasses

    from tools.fuzz_structured import _join_subgraphs, pack

    one = _split_model(axis_from_where=True)
    info = read_model(pack(_join_subgraphs(one, one)))
    sgs = list(info.subgraphs)
    sgs[0], sgs[1] = sgs[1], sgs[0]
    for rooted, prefix in ((info, ""), (dataclasses.replace(info, subgraphs=sgs), "subgraph 1, ")):
        declared = {t.index: t.shape for t in rooted.subgraphs[0].tensors}
        with pytest.raises(oo.ModelError) as exc:
            check_allocated(rooted, lambda i: None if i == 3 else declared[i], record=False)
        assert str(exc.value).startswith(f"{prefix}operator 2 (SPLIT) reads its axis from tensor 3"), exc.value


def test_split_axis_input_must_stay_one_value():
    from opaque_ops.isolate.run import run_model

    data = _split_model(axis_from_where=False)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    it = oo.Interpreter(model_content=data)
    it.allocate_tensors()
    it.set_tensor(0, x)
    it.set_tensor(it.get_input_details()[1]["index"], np.array(1, np.int32))
    it.invoke()
    want = np.split(x, 2, axis=1)
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), want[0])
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[1]["index"]), want[1])
    for shape in ([0], [2]):
        out = run_model(data, resize={3: shape})
        assert out.status == "rejected", (shape, out.status, out.reason)
        assert str(out.error) == (
            f"operator 0 (SPLIT) reads its axis from tensor 3, planned as {shape}; the axis must be one "
            "INT32 value. Resize input 3 to one value"
        )


# ----------------------------------------------------------------- graph rules


def _add_model(extra=None):
    """x -> ADD(x, c) -> y, optionally corrupted by ``extra(builder, ids)``."""
    b = ModelBuilder()
    x = b.add_tensor("x", [4], np.float32)
    c = b.add_constant("c", np.ones(4, np.float32))
    y = b.add_tensor("y", [4], np.float32)
    z = b.add_tensor("z", [4], np.float32)
    ids = dict(x=x, c=c, y=y, z=z)
    if extra is None:
        b.add_op("ADD", [x, c], [y])
        b.add_op("MUL", [y, c], [z])
    else:
        extra(b, ids)
    b.set_inputs([x])
    b.set_outputs([z])
    return b.build()


@pytest.mark.parametrize(
    "case, expect",
    [
        (
            lambda b, t: (b.add_op("ADD", [t["x"], t["c"]], [t["z"]]), b.add_op("MUL", [t["x"], t["c"]], [t["z"]])),
            "already writes",
        ),
        (lambda b, t: b.add_op("ADD", [t["z"], t["c"]], [t["z"]]), "also one of its own inputs"),
        (
            lambda b, t: (b.add_op("ADD", [t["c"], t["c"]], [t["x"]]), b.add_op("ADD", [t["x"], t["c"]], [t["z"]])),
            "input of the subgraph",
        ),
        (
            lambda b, t: (b.add_op("ADD", [t["x"], t["x"]], [t["c"]]), b.add_op("ADD", [t["x"], t["c"]], [t["z"]])),
            "is a constant",
        ),
        (
            lambda b, t: (b.add_op("MUL", [t["y"], t["c"]], [t["z"]]), b.add_op("ADD", [t["x"], t["c"]], [t["y"]])),
            "before operator 1 writes it",
        ),
        (lambda b, t: b.add_op("ADD", [t["x"], -1], [t["z"]]), "omitted (-1) input"),
        (lambda b, t: b.add_op("ADD", [t["x"], t["c"]], [t["y"]]), "is written by no operator"),
        (lambda b, t: b.add_op("ADD", [t["x"]], [t["z"]]), "ADD takes at least 2"),
        (
            lambda b, t: (b.add_op("ADD", [t["x"], t["c"]], []), b.add_op("MUL", [t["x"], t["c"]], [t["z"]])),
            "has no outputs",
        ),
    ],
)
def test_check_model_rules(case, expect):
    data = _add_model(case)
    with pytest.raises(oo.ModelError, match=expect.replace("(", r"\(").replace(")", r"\)")):
        check_model(read_model(data))
    with pytest.raises(oo.ModelError):
        oo.Interpreter(model_content=data)


def test_check_model_accepts_the_good_model_and_real_models():
    assert check_model(read_model(_add_model())) is None  # accepted: no ModelError
    checked = []
    for pkg, rel in (("pyopen_wakeword", "models"), ("pymicro_wakeword", "models")):
        d = package_file(pkg, rel)
        for f in sorted(d.glob("*.tflite")):
            check_model(read_model(f))
            checked.append(f.name)
    # Not vacuous: both wheels' models were found and checked.
    assert "melspectrogram.tflite" in checked and "okay_nabu.tflite" in checked and len(checked) >= 6, checked


def test_check_model_rules_on_a_real_streaming_model():
    # microWakeWord's okay_nabu: resource variables, int8 convolutions.
    import dataclasses

    path = package_file("pymicro_wakeword", "models", "okay_nabu.tflite")
    check_model(read_model(path))

    def broken(edit):
        info = read_model(path)
        edit(info.subgraphs[0])
        return info

    def read_var_shape(sg):
        op = next(o for o in sg.operators if o.op_name == "READ_VARIABLE")
        t = sg.tensors[op.outputs[0]]
        sg.tensors[t.index] = dataclasses.replace(t, shape=(1, 99, 1, 64))

    def drop_bias(sg):
        op = next(o for o in sg.operators if o.op_name == "DEPTHWISE_CONV_2D")
        op.inputs = op.inputs[:2]

    def nan_scale(sg):
        t = next(t for t in sg.tensors if len(t.quantization["scales"]))
        t.quantization["scales"] = np.array([np.nan], np.float32)

    for edit, expect in (
        (read_var_shape, "READ_VARIABLE) declares output shape"),
        (drop_bias, "has no bias input"),
        (nan_scale, "finite and positive"),
    ):
        with pytest.raises(oo.ModelError, match=re.escape(expect)):
            check_model(broken(edit))


def test_zero_stride_is_refused():
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 4, 4, 1], np.float32)
    y = b.add_tensor("y", [1, 2, 2, 1], np.float32)
    b.add_op(
        "MAX_POOL_2D",
        [x],
        [y],
        options={"padding": "VALID", "stride_w": 0, "stride_h": 2, "filter_width": 2, "filter_height": 2},
    )
    b.set_inputs([x])
    b.set_outputs([y])
    with pytest.raises(oo.ModelError, match="stride_w=0"):
        oo.Interpreter(model_content=b.build())


def test_melspectrogram_with_xnnpack_at_declared_size_is_refused_then_runs_resized():
    path = package_file("pyopen_wakeword", "models", "melspectrogram.tflite")
    code = f"""
        import numpy as np, opaque_ops as oo
        from ai_edge_litert.interpreter import Interpreter as Ref
        it = oo.Interpreter(model_path={str(path)!r}, use_xnnpack=True)
        try:
            it.allocate_tensors()
            it.invoke()
            print("NOT REFUSED")
        except oo.ModelError as e:
            print("refused:", e)
        x = (np.random.default_rng(0).standard_normal((1, 1760)) * 1000).astype(np.float32)
        it.resize_tensor_input(0, [1, 1760]); it.allocate_tensors()
        it.set_tensor(0, x); it.invoke()
        got = it.get_tensor(it.get_output_details()[0]["index"])
        ref = Ref(model_path={str(path)!r}); ref.resize_tensor_input(0, [1, 1760]); ref.allocate_tensors()
        ref.set_tensor(ref.get_input_details()[0]["index"], x); ref.invoke()
        want = ref.get_tensor(ref.get_output_details()[0]["index"])
        print("shape", got.shape, "maxdiff", float(np.abs(got - want).max()))
    """
    p = run_child(code)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "refused:" in p.stdout and "1x512 window" in p.stdout, p.stdout
    last = p.stdout.strip().splitlines()[-1].split()
    assert last[1:5] == ["(1,", "1,", "8,", "32)"]
    assert float(last[-1]) < 1e-3


@pytest.mark.parametrize("name", ["IF", "WHILE", "CALL_ONCE"])
def test_a_custom_operator_named_like_a_control_flow_builtin_calls_no_subgraph(name):
    """A custom operator's custom code may be any name, "IF" included; it is the kernel registered under it
    and calls no subgraph.  The rules read its options as the builtin's, all zeros: a call of subgraph 0
    from subgraph 0, refused as a cycle (a false refusal).  Now it runs, with the Python kernel's values
    (numpy: x * 2)."""
    b = ModelBuilder()
    x = b.add_tensor("x", [4], np.float32)
    y = b.add_tensor("y", [4], np.float32)
    b.add_custom_op(name, [x], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    data = b.build()
    check_model(read_model(data), registered={name})
    twice = oo.python_op(name, invoke=lambda ins, outs: np.multiply(ins[0], np.float32(2), out=outs[0]))
    with oo.Interpreter(model_content=data, custom_ops=[twice]) as it:
        it.allocate_tensors()
        value = np.array([1.5, -2.0, 0.0, 3.25], np.float32)
        it.set_tensor(it.get_input_details()[0]["index"], value)
        it.invoke()
        np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), value * 2)
