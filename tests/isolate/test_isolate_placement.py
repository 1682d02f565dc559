"""The worker's shared inputs and outputs under memory_limit: a resize they cannot follow is refused as in process.

In the worker the inputs and outputs live in shared segments (custom
allocations), outside TFLite's arena, so the growing-arena guard counted
nothing for them: with XNNPACK (whose partition keeps the intermediate out of
the arena too) its bound was 0, XNNPACK's reshape failed on the 8 GiB shape,
and the interpreter was closed with a KernelError where in process the guard
raised TensorMemoryError and the interpreter stayed usable.  And an output
whose new size only its kernel knows (a custom op: no shape rule) outgrew its
buffer past the limit, and the runtime said "Custom allocation is too small".
"""

from __future__ import annotations

import numpy as np
import pytest

import opaque_ops as oo
from tests.helpers.atan import MACRO_ATAN
from tests.helpers.interpreter_models import squared_sum_model
from tests.helpers.simd_cases import _model

pytestmark = pytest.mark.usefixtures("no_leaks")
HUGE = [1, 2**31 - 1]  # 8 GiB per float32 tensor
V = np.array([[-2.0, 0.5, 1.0, 3.0]], np.float32) / 3


def _run(it, v=V) -> bytes:
    x, y = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
    it.resize_tensor_input(x, list(v.shape))
    it.allocate_tensors()
    it.set_tensor(x, v)
    it.invoke()
    return it.get_tensor(y).tobytes()


@pytest.mark.parametrize("mode", ["xnnpack", "reference"])
def test_an_isolated_resize_past_the_limit_is_refused_and_the_interpreter_stays_usable(mode):
    data = squared_sum_model(signature=True)
    xnnpack = mode == "xnnpack"
    local = oo.Interpreter(model_content=data, use_xnnpack=xnnpack)
    expected = _run(local)
    local.close()
    with oo.Interpreter(model_content=data, isolate=True, memory_limit="2G", use_xnnpack=xnnpack) as it:
        _refused_and_usable(it, expected, xnnpack)


def _refused_and_usable(it, expected: bytes, xnnpack: bool) -> None:
    assert _run(it) == expected
    x = it.get_input_details()[0]["index"]
    it.resize_tensor_input(x, HUGE)
    # (It was a KernelError "XNNPack delegate failed to reshape runtime", and
    # the interpreter closed.)  The bound is in process's: x, the intermediate
    # and y; with XNNPACK, x and y (the intermediate is inside its partition).
    need = (2 if xnnpack else 3) * 4 * (2**31 - 1)
    with pytest.raises(oo.TensorMemoryError) as caught:
        it.allocate_tensors()
    assert f"(input 0 'x' to {HUGE}) need at least {need} bytes" in str(caught.value), caught.value
    assert "Nothing was allocated and the interpreter is still usable" in str(caught.value), caught.value
    # Advice for an isolated interpreter: its own limit, not "run the model isolated".
    assert "within its memory_limit" in str(caught.value), caught.value
    assert "isolate=True" not in str(caught.value), caught.value
    # Not planned, as in process: invoke() says so.
    with pytest.raises(oo.NotAllocatedError):
        it.invoke()
    # Resized back, the same interpreter gives in-process's bits.
    assert _run(it) == expected
    # A signature runner of subgraph 0 allocates through the same guard.
    runner = it.get_signature_runner("serving_default")
    runner.resize_tensor_input("x_in", HUGE)
    with pytest.raises(oo.TensorMemoryError, match=f"need at least {need} bytes"):
        runner.allocate_tensors()
    assert runner(x_in=V)["y_out"].tobytes() == expected


def _atan_model() -> bytes:
    # in0 -> Atan (C, its Prepare sizes out0) -> out0
    return _model("Atan", [V], 1)


def test_outputs_that_outgrow_their_shared_buffers_past_the_limit_are_refused():
    # The guard's bound counts in0 (600 MiB, affordable under 1 GiB); out0's
    # new size is the kernel's Prepare's (no shape rule), and both together
    # need 1.2 GiB of new shared buffers.
    ops = oo.compile_ops(MACRO_ATAN)
    local = oo.Interpreter(model_content=_atan_model(), custom_ops=[ops])
    expected = _run(local)
    local.close()
    with oo.Interpreter(model_content=_atan_model(), custom_ops=[ops], isolate=True, memory_limit="1G") as it:
        _outgrown_and_usable(it, expected)


def _outgrown_and_usable(it, expected: bytes) -> None:
    assert _run(it) == expected
    n = 150 << 20
    it.resize_tensor_input(it.get_input_details()[0]["index"], [1, n])
    with pytest.raises(oo.TensorMemoryError) as caught:
        it.allocate_tensors()
    msg = str(caught.value)
    assert f"('in0' [1, {n}], 'out0' [1, {n}]) need new shared buffers of {2 * 4 * n} bytes" in msg, msg
    assert "memory_limit of 1073741824 bytes" in msg and "Custom allocation is too small" not in msg, msg
    assert "the interpreter is still usable" in msg, msg
    assert _run(it) == expected


def _grown(it, n: int) -> np.ndarray:
    v = (np.arange(n, dtype=np.float32) % 7 - 3).reshape(1, n) / 4
    it.resize_tensor_input(it.get_input_details()[0]["index"], [1, n])
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], v)
    it.invoke()
    assert np.array_equal(it.get_tensor(it.get_output_details()[0]["index"]), (v + v) * (v + v))


def test_the_old_buffers_of_growing_resizes_do_not_count_against_the_limit():
    # x and y get new shared buffers at each step, 4 to 32 MiB together;
    # the last shape needs 48 MiB of 128.  The old buffers stayed charged
    # (144 MiB by the last step), and it was refused.
    with oo.Interpreter(model_content=squared_sum_model(), isolate=True, memory_limit="128M", use_xnnpack=False) as it:
        for k in range(1, 9):
            _grown(it, k << 19)


def test_growing_resizes_near_the_limit_are_refused_not_a_crash():
    # 8 to 48 MiB of shared buffers, a 4 to 24 MiB arena: the old buffers
    # kept charged lowered RLIMIT_DATA under the arena itself, and on 2.17
    # its unchecked growth at the sixth step was a SIGSEGV (RuntimeCrashError).
    with oo.Interpreter(model_content=squared_sum_model(), isolate=True, memory_limit="128M", use_xnnpack=False) as it:
        it.allocate_tensors()
        for k in range(1, 7):
            try:
                _grown(it, k << 20)
            except oo.TensorMemoryError as exc:
                assert "the interpreter is still usable" in str(exc), exc
        _grown(it, 1 << 20)  # (usable)
