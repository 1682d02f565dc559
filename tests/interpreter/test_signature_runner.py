"""Signature runners go through the interpreter's one guarded path.

Each scenario that crashed the process before (a runner moving tensor memory
behind the interpreter's back) runs in a child process, so a regression fails
one test instead of killing the run.  The references for outputs are
ai-edge-litert runs of the same model.
"""

from __future__ import annotations

import numpy as np
import pytest

import opaque_ops as oo
from tests.helpers.atan import ATAN_INPUT
from tests.helpers.child_process import crashed, run_child
from tests.helpers.locations import package_file

OFFSET = np.float32(0.99999905)


def atan_ref(x):
    return np.arctan((x + OFFSET).astype(np.float64)).astype(np.float32)


@pytest.fixture(scope="module")
def melspec():
    return str(package_file("pyopen_wakeword", "models", "melspectrogram.tflite"))


def test_runner_resize_invalidates_the_fast_path_and_views(melspec):
    # Before: the runner moved the arena under set_tensor's cached view
    # (get_tensor then read freed memory: SIGSEGV), a tensor() view was left
    # dangling, and a smaller resize returned stale data with the old shape.
    p = run_child(f"""
        import json, numpy as np, opaque_ops as oo
        from ai_edge_litert.interpreter import Interpreter as Ref
        it = oo.Interpreter(model_path={melspec!r})
        it.resize_tensor_input(0, [1, 64000]); it.allocate_tensors()
        it.set_tensor(0, np.ones((1, 64000), np.float32))      # caches a view of the arena
        big = np.linspace(-1, 1, 256000, dtype=np.float32).reshape(1, -1)
        out = it.get_signature_runner()(input=big)["output"]   # the arena moves
        res = {{"after_big": list(it.get_tensor(0).shape), "same_input": bool(np.array_equal(it.get_tensor(0), big))}}
        ref = Ref(model_path={melspec!r}); ref.resize_tensor_input(0, [1, 256000]); ref.allocate_tensors()
        ref.set_tensor(0, big); ref.invoke()
        res["max_diff_big"] = float(np.abs(out - ref.get_tensor(ref.get_output_details()[0]["index"])).max())
        # A view taken now must block the runner from moving the memory again.
        v = it.tensor(0)()
        try:
            it.get_signature_runner()(input=np.ones((1, 16000), np.float32))
            res["view_guard"] = "not refused"
        except oo.LiveViewsError:
            res["view_guard"] = "refused"
        res["view_still_readable"] = bool(np.array_equal(v, big))
        del v
        small = np.full((1, 16000), 0.25, np.float32)
        it.get_signature_runner()(input=small)
        got = it.get_tensor(0)
        res["after_small"] = list(got.shape)
        res["fresh_data"] = bool(np.array_equal(got, small))
        print(json.dumps(res))
    """)
    assert p.returncode == 0, crashed(p)
    import json

    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["after_big"] == [1, 256000] and r["same_input"], r
    assert r["max_diff_big"] < 1e-3, r
    assert r["view_guard"] == "refused" and r["view_still_readable"], r
    assert r["after_small"] == [1, 16000] and r["fresh_data"], r


@pytest.mark.parametrize("xnnpack", [True, False])
def test_runner_call_too_short_for_the_model_is_refused(melspec, xnnpack):
    # 400 samples is shorter than the model's 512-sample window.  Through the
    # runner this was SIGSEGV (XNNPACK) or SIGFPE (reference kernels); through
    # resize_tensor_input + allocate_tensors it was refused.  Now both are.
    p = run_child(f"""
        import numpy as np, opaque_ops as oo
        it = oo.Interpreter(model_path={melspec!r}, use_xnnpack={xnnpack})
        runner = it.get_signature_runner()
        for attempt in range(2):   # and again: a refused shape stays refused
            try:
                runner(input=np.ones((1, 400), np.float32))
                print("RAN")
            except oo.ModelError as e:
                print("refused:", isinstance(e, RuntimeError), e)
        # The interpreter is still usable at a valid size.
        out = runner(input=np.ones((1, 1760), np.float32))["output"]
        print("then ran:", out.shape)
    """)
    assert p.returncode == 0, crashed(p)
    lines = p.stdout.strip().splitlines()
    assert [ln.split(":")[0] for ln in lines[-3:]] == ["refused", "refused", "then ran"], p.stdout
    assert "refused: True" in lines[-3] and "1x512 window" in lines[-3], lines[-3]
    assert lines[-1] == "then ran: (1, 1, 8, 32)", lines[-1]


def test_runner_runs_the_model_checks_on_resize(melspec):
    runner = oo.Interpreter(model_path=melspec).get_signature_runner()
    with pytest.raises(oo.ResizeError, match="at most 6 dimensions"):
        runner(input=np.ones((1,) * 7, np.float32))
    with pytest.raises(oo.ResizeError, match="at most 6 dimensions"):
        runner.resize_tensor_input("input", [1] * 7)


def test_runner_resize_and_allocate_match_the_reference(melspec):
    from ai_edge_litert.interpreter import Interpreter as Ref

    x = np.random.default_rng(3).standard_normal((1, 3200)).astype(np.float32)
    it = oo.Interpreter(model_path=melspec)
    runner = it.get_signature_runner()
    runner.resize_tensor_input("input", [1, 3200])
    runner.allocate_tensors()
    assert runner.get_input_details()["input"]["shape"].tolist() == [1, 3200]
    # The runner planned subgraph 0: the interpreter can invoke it directly.
    it.set_tensor(0, x)
    it.invoke()
    ours = it.get_tensor(it.get_output_details()[0]["index"])
    ref = Ref(model_path=melspec)
    ref.resize_tensor_input(0, [1, 3200])
    ref.allocate_tensors()
    ref.set_tensor(0, x)
    ref.invoke()
    np.testing.assert_allclose(ours, ref.get_tensor(ref.get_output_details()[0]["index"]), atol=1e-3)
    np.testing.assert_array_equal(runner(input=x)["output"], ours)
    # Its signature is [-1, -1]: any size may change, the rank may not.
    with pytest.raises(oo.ResizeError, match="rank 3"):
        runner.resize_tensor_input("input", [3, 3200, 1], strict=True)
    with pytest.raises(oo.InvalidInputError, match="no input"):
        runner.resize_tensor_input("nope", [1, 3200])


def test_runner_inputs_are_validated(atan_model_bytes, guide_atan):
    it = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[guide_atan])
    runner = it.get_signature_runner()
    with pytest.raises(ValueError, match="missing"):
        runner()
    with pytest.raises(ValueError, match="unknown"):
        runner(x=ATAN_INPUT, z=ATAN_INPUT)
    with pytest.raises(oo.InvalidInputError, match="expected dtype float32"):
        runner(x=ATAN_INPUT.astype(np.float64))
    np.testing.assert_allclose(runner(x=ATAN_INPUT)["y"], atan_ref(ATAN_INPUT), rtol=1e-6)
