"""``num_threads`` is bounded in every entry point (issue 17, item 11).

``num_threads=100000`` with XNNPACK made ``invoke()`` run for minutes (one
pool thread per requested thread, all woken at each invoke): it looked like a
hang.  The value must be refused at creation with a message that gives the
range, the same way in the Interpreter, the compat class, an isolated
interpreter and the command line.  The first test runs in a child with a
timeout: before the bound it did not finish.
"""

from __future__ import annotations

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.interpreter.core import MAX_NUM_THREADS
from tests.helpers.child_process import crashed, run_child, run_cli
from tests.helpers.reference_models import add_mul_model

HUGE = 100_000


def test_huge_num_threads_with_xnnpack_is_refused_not_hung():
    p = run_child(
        f"""
        import opaque_ops as oo
        from tests.helpers.reference_models import add_mul_model
        data, a, b = add_mul_model()
        try:
            it = oo.Interpreter(model_content=data, num_threads={HUGE}, use_xnnpack=True)
            it.allocate_tensors()
            it.invoke()
        except oo.InvalidArgumentError as exc:
            print("REFUSED", isinstance(exc, ValueError), exc)
        else:
            print("RAN")
        """,
        timeout=60,
    )
    assert p.returncode == 0, crashed(p)
    assert p.stdout.startswith("REFUSED True "), p.stdout
    assert f"num_threads={HUGE}" in p.stdout and f"1..{MAX_NUM_THREADS}" in p.stdout


@pytest.mark.parametrize("value", [0, -1, MAX_NUM_THREADS + 1, HUGE, 2**63])
def test_out_of_range_is_invalid_argument_with_the_range(value):
    data, _a, _b = add_mul_model()
    with pytest.raises(oo.InvalidArgumentError) as info:
        oo.Interpreter(model_content=data, num_threads=value)
    assert isinstance(info.value, ValueError)
    assert str(value) in str(info.value)
    if value > 1:
        assert str(MAX_NUM_THREADS) in str(info.value)


def test_references_message_for_wrong_type_and_zero_is_kept():
    # ai-edge-litert: "type of num_threads should be int" / "num_threads should >= 1", both ValueError.
    data, _a, _b = add_mul_model()
    with pytest.raises(ValueError, match="type of num_threads should be int"):
        oo.Interpreter(model_content=data, num_threads=2.0)
    with pytest.raises(ValueError, match="num_threads should be >= 1"):
        oo.Interpreter(model_content=data, num_threads=0)


def test_the_bound_itself_and_small_values_run():
    data, a, b = add_mul_model()
    for n in (1, 2, MAX_NUM_THREADS):
        it = oo.Interpreter(model_content=data, num_threads=n, use_xnnpack=n != MAX_NUM_THREADS)
        it.allocate_tensors()
        assert it._init_args["num_threads"] == n


def test_isolated_interpreter_refuses_before_starting_a_worker():
    data, _a, _b = add_mul_model()
    with pytest.raises(oo.InvalidArgumentError, match=f"1..{MAX_NUM_THREADS}"):
        oo.Interpreter(model_content=data, num_threads=HUGE, isolate=True)


def test_compat_interpreter_refuses(tmp_path):
    model = tmp_path / "m.tflite"
    model.write_bytes(add_mul_model()[0])
    p = run_child(
        f"""
        import opaque_ops as oo, opaque_ops.compat as compat
        compat.install()
        from tflite_runtime.interpreter import Interpreter
        try:
            Interpreter(model_path={str(model)!r}, num_threads={HUGE})
        except ValueError as exc:
            print(type(exc).__name__, exc)
        """,
        timeout=60,
    )
    assert p.returncode == 0, crashed(p)
    assert p.stdout.startswith("InvalidArgumentError ") and f"1..{MAX_NUM_THREADS}" in p.stdout, p.stdout


@pytest.mark.parametrize("command", ["run", "bench", "inspect"])
def test_cli_threads_out_of_range_is_a_usage_error(tmp_path, command):
    model = tmp_path / "m.tflite"
    model.write_bytes(add_mul_model()[0])
    args = [command, model, "--threads", HUGE] + (["--check"] if command == "inspect" else [])
    r = run_cli(*args, timeout=60)
    assert r.returncode == 2, crashed(r)
    assert f"1..{MAX_NUM_THREADS}" in r.stderr, r.stderr


def test_run_op_refuses():
    with pytest.raises(oo.InvalidArgumentError):
        oo.testing.run_op(oo.kernels.atan(), "Atan", inputs=[np.zeros(3, np.float32)], num_threads=HUGE)
