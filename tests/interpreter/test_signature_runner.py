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
from tests.helpers.interpreter_models import join_with_signature
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
    # melspectrogram's input goes to an EXPAND_DIMS, which takes a tensor of
    # any rank (model.checks.limits.ANY_RANK_OPS), and then to a TRANSPOSE
    # whose permutation has 3 entries: an input of rank 7 is refused by the
    # shape rules when the runner allocates, whichever way it is resized.
    runner = oo.Interpreter(model_path=melspec).get_signature_runner()
    refused = r"operator 1 \(TRANSPOSE\): permutation \[0, 2, 1\] does not fit an input of rank 8"
    with pytest.raises(oo.ModelError, match=refused):
        runner(input=np.ones((1,) * 7, np.float32))
    runner.resize_tensor_input("input", [1] * 7)
    with pytest.raises(oo.ModelError, match=refused):
        runner(input=np.ones((1,) * 7, np.float32))
    # Back at its own shape, the runner runs.
    assert runner(input=np.ones((1, 1280), np.float32))["output"].shape == (1, 1, 5, 32)


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


# ------------------------------------------------- details, as ai-edge-litert


def _same(ours, ref, where="details") -> None:
    """``ours`` equals ``ref`` field by field: the same keys, types, array dtypes and values."""
    if isinstance(ref, dict):
        assert isinstance(ours, dict) and sorted(ours) == sorted(ref), (where, sorted(ours), sorted(ref))
        for k in ref:
            _same(ours[k], ref[k], f"{where}[{k!r}]")
    elif isinstance(ref, np.ndarray):
        assert isinstance(ours, np.ndarray) and ours.dtype == ref.dtype, (where, ours, ref)
        np.testing.assert_array_equal(ours, ref, err_msg=where)
    elif isinstance(ref, (list, tuple)):
        assert type(ours) is type(ref) and len(ours) == len(ref), (where, ours, ref)
        for i, (o, r) in enumerate(zip(ours, ref)):
            _same(o, r, f"{where}[{i}]")
    else:
        assert type(ours) is type(ref) and ours == ref, (where, ours, ref)


def _int8_model() -> bytes:
    """y = quantize(dequantize(x) + 1.5): x int8 (scale 0.5, zero point -3), y int8 (0.25, 5); signature "s"."""
    from opaque_ops.model import ModelBuilder

    b = ModelBuilder()
    x = b.add_tensor("x", [1, 4], np.int8, quantization={"scale": [0.5], "zero_point": [-3]})
    xf = b.add_tensor("xf", [1, 4], np.float32)
    c = b.add_constant("c", np.full((1, 4), 1.5, np.float32))
    yf = b.add_tensor("yf", [1, 4], np.float32)
    y = b.add_tensor("y", [1, 4], np.int8, quantization={"scale": [0.25], "zero_point": [5]})
    b.add_op("DEQUANTIZE", [x], [xf])
    b.add_op("ADD", [xf, c], [yf])
    b.add_op("QUANTIZE", [yf], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    b.add_signature("s", {"input": x}, {"output": y})
    return b.build()


def _two_subgraph_model() -> bytes:
    """Signature "first": y = x + 1 on [1, 4] (subgraph 0); "second": out = inp + 2 on [1, 6], [1, -1] (subgraph 1)."""
    from opaque_ops.model import ModelBuilder

    def add(k, n, sig, names):
        b = ModelBuilder()
        x = b.add_tensor(names[0], [1, n], np.float32, shape_signature=sig)
        c = b.add_constant("c", np.full((1, 1), k, np.float32))
        y = b.add_tensor(names[1], [1, n], np.float32, shape_signature=sig)
        b.add_op("ADD", [x, c], [y])
        b.set_inputs([x])
        b.set_outputs([y])
        b.add_signature("first", {names[0]: x}, {names[1]: y})
        return b.build()

    first, second = add(1, 4, None, ("x", "y")), add(2, 6, [1, -1], ("inp", "out"))
    return join_with_signature(first, second, "second", {"inp": 0}, {"out": 2})


def _flavour(name):
    if name == "compat":
        import opaque_ops.compat as compat

        return compat._interpreter_class()  # the class served as tflite_runtime's Interpreter
    return lambda **kw: oo.Interpreter(isolate=name == "isolated", **kw)


FLAVOURS = ["in-process", "isolated", "compat"]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_runner_details_are_the_references_field_by_field(flavour):
    # They had only name, shape, dtype and quantization: int8 port code that
    # reads ["quantization_parameters"]["scales"] failed with KeyError.
    from ai_edge_litert.interpreter import Interpreter as Ref

    make = _flavour(flavour)
    cases = [(_int8_model(), "s", None), (_two_subgraph_model(), "first", None), (_two_subgraph_model(), "second", 9)]
    for data, key, width in cases:
        ours_it, ref_it = make(model_content=data), Ref(model_content=data)
        ours, ref = ours_it.get_signature_runner(key), ref_it.get_signature_runner(key)
        if width is not None:  # live shapes after a call that resized subgraph 1
            x = np.ones((1, width), np.float32)
            np.testing.assert_array_equal(ours(inp=x)["out"], x + 2)
            ref(inp=x)
        _same(ours.get_input_details(), ref.get_input_details(), f"{key} inputs")
        _same(ours.get_output_details(), ref.get_output_details(), f"{key} outputs")
        if hasattr(ours_it, "close"):
            ours_it.close()
    # The port code runs, and agrees with the op's definition: (real + 1.5) requantized.
    runner = make(model_content=_int8_model()).get_signature_runner("s")
    q_in = runner.get_input_details()["input"]["quantization_parameters"]
    q_out = runner.get_output_details()["output"]["quantization_parameters"]
    assert q_in["scales"].tolist() == [0.5] and q_in["zero_points"].tolist() == [-3]
    real = np.array([[1.0, -0.5, 2.0, 0.0]], np.float32)
    xq = np.round(real / q_in["scales"][0] + q_in["zero_points"][0]).astype(np.int8)
    got = (runner(input=xq)["output"].astype(np.float32) - q_out["zero_points"][0]) * q_out["scales"][0]
    np.testing.assert_array_equal(got, real + 1.5)
