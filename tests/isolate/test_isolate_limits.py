"""Resource limits of isolated interpreters: timeouts (cancel, then kill), Ctrl-C, cancel(), the memory cap."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

import opaque_ops as oo
from tests.helpers.misbehaving_kernels import chain, one_op, twice

pytestmark = pytest.mark.usefixtures("no_leaks")
X = np.arange(4, dtype=np.float32)


def _ready(model, ops, **kw):
    it = oo.Interpreter(model_content=model, custom_ops=ops, isolate=True, **kw)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], X)
    return it


def test_kernel_that_never_returns_is_killed_after_its_timeout(bad_ops):
    it = _ready(one_op("Spin"), [bad_ops])
    t0 = time.monotonic()
    with pytest.raises(oo.RuntimeTimeoutError) as info:
        it.invoke(timeout=0.5)
    took = time.monotonic() - t0
    err = info.value
    assert isinstance(err, TimeoutError) and isinstance(err, oo.OpaqueOpsError)
    assert err.killed and err.stage == "invoke" and err.timeout == 0.5
    # Cancel was tried first (it cannot stop a kernel mid-node), then the worker was killed.
    assert "did not stop when cancelled" in str(err)
    # Where it was stuck: the worker printed its C backtrace on request.
    assert "SpinInvoke" in str(err), str(err)
    assert took < 0.5 + 10
    with pytest.raises(oo.ClosedError):
        it.invoke()


def test_long_model_is_cancelled_between_nodes_and_stays_usable(bad_ops):
    # 60 nodes of 20 ms: 1.2 s; TfLiteInterpreterCancel stops it between two nodes.
    it = _ready(chain("Slow", 60), [bad_ops])
    t0 = time.monotonic()
    with pytest.raises(oo.RuntimeTimeoutError) as info:
        it.invoke(timeout=0.2)
    assert not info.value.killed and "still usable" in str(info.value)
    assert time.monotonic() - t0 < 1.2  # it did not run to the end
    # The same interpreter runs the whole model afterwards, and right.
    it.invoke(timeout=60)
    expected = X
    for _ in range(60):
        expected = twice(expected)
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), expected)
    it.close()


def test_interpreter_timeout_applies_to_every_call(bad_ops):
    it = oo.Interpreter(model_content=one_op("Spin"), custom_ops=[bad_ops], isolate=True, timeout=0.3)
    it.allocate_tensors()
    with pytest.raises(oo.RuntimeTimeoutError) as info:
        it.invoke()
    assert info.value.timeout == 0.3 and info.value.killed


def test_cancel_from_another_thread_raises_keyboardinterrupt_and_keeps_the_interpreter(bad_ops):
    it = _ready(chain("Slow", 100), [bad_ops])
    timer = threading.Timer(0.2, it.cancel)
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        it.invoke()
    assert time.monotonic() - t0 < 2.0  # 100 nodes would take 2 s
    timer.join()
    it.invoke()  # still usable, and the cancel does not leak into this run
    it.close()


def test_ctrl_c_during_isolated_invoke(bad_ops):
    if threading.current_thread() is not threading.main_thread():
        pytest.fail("this test must run in the main thread, where Python delivers SIGINT")
    # 500 nodes of 20 ms: the SIGINT (at 0.2 s) lands inside the invoke even on a slow machine,
    # so it cannot escape this test and stop the session.
    it = _ready(chain("Slow", 500), [bad_ops])
    # Python's own SIGINT handler for the test: a test run started as a
    # background job inherits SIGINT ignored, and the signal would be lost.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            it.invoke()
        assert time.monotonic() - t0 < 8.0
        timer.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    # Still usable: it runs again (and is stopped by a timeout this time, not killed).
    with pytest.raises(oo.RuntimeTimeoutError) as info:
        it.invoke(timeout=0.3)
    assert not info.value.killed
    it.close()


def _big_model():
    from opaque_ops.model import ModelBuilder

    b = ModelBuilder()
    x = b.add_tensor("x", [4], np.float32, shape_signature=[-1])
    h = b.add_tensor("h", [4], np.float32, shape_signature=[-1])
    y = b.add_tensor("y", [4], np.float32, shape_signature=[-1])
    b.add_op("ADD", inputs=[x, x], outputs=[h], options={"fused_activation_function": "NONE"})
    b.add_op("MUL", inputs=[h, h], outputs=[y], options={"fused_activation_function": "NONE"})
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


def test_model_far_past_the_memory_cap_fails_in_the_worker_only():
    it = oo.Interpreter(model_content=_big_model(), isolate=True, memory_limit="64M", use_xnnpack=False)
    it.allocate_tensors()
    it.set_tensor(0, X)
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), (X + X) * (X + X))
    # 3 tensors of 512 MiB each: far past 64 MiB.  TFLite does not check its
    # arena's malloc, so the worker crashes; the error says the cap is why.
    with pytest.raises(oo.OpaqueOpsError) as info:
        it.resize_tensor_input(0, [1 << 27])
        it.allocate_tensors()
        it.invoke()
    assert isinstance(info.value, (oo.RuntimeCrashError, oo.TFLiteError, MemoryError)), info.value
    if isinstance(info.value, oo.RuntimeCrashError):
        assert "memory_limit=67108864" in str(info.value)
    # This process never allocated it.
    with open("/proc/self/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) * 1024
    assert rss < 1 << 30


def test_memory_cap_leaves_ordinary_work_alone():
    it = oo.Interpreter(model_content=_big_model(), isolate=True, memory_limit="256M", use_xnnpack=False)
    n = 1 << 20  # 4 MiB tensors: well within the cap
    it.resize_tensor_input(0, [n])
    it.allocate_tensors()
    x = np.linspace(-1, 1, n, dtype=np.float32)
    it.set_tensor(0, x)
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), (x + x) * (x + x))
    it.close()


def test_memory_limit_parsing():
    from opaque_ops.isolate.workers import parse_size

    assert parse_size("512M") == 512 << 20 and parse_size("2G") == 2 << 30 and parse_size("16.5M") == 16896 << 10
    assert parse_size(32 << 20) == 32 << 20 and parse_size(None) is None
    for bad in ("lots", "-1", 0, True, 1000, "1.5k"):
        with pytest.raises((ValueError, TypeError)):
            parse_size(bad)


def test_arrays_past_the_memory_cap_are_not_sent(atan_model_bytes, guide_atan):
    """A call whose arrays alone exceed the worker's cap is refused in this process, before
    anything is copied into shared memory."""
    it = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[guide_atan], isolate=True, memory_limit="16M")
    runner = it.get_signature_runner()
    with pytest.raises(oo.InvalidInputError, match="memory_limit=16777216"):
        runner(x=np.zeros(8 << 20, np.float32))  # 32 MiB
    out = runner(x=np.ones(5, np.float32))  # and the interpreter is fine
    assert out["y"].shape == (5,)
    it.close()


def test_memory_error_under_the_cap_names_the_cap_and_the_worker_stays_usable():
    # A python_op whose allocation passes memory_limit raises MemoryError in the
    # worker; the caller gets a MemoryLimitError (an OpaqueOpsError and still a
    # MemoryError) that names the cap, and the next call runs (issue 17 item 12).
    from tests.helpers.isolate_python_ops import hog_op

    it = _ready(one_op("Hog"), [hog_op()], memory_limit="512M")
    x = np.arange(1, 5, dtype=np.float32)
    it.set_tensor(0, -x)
    with pytest.raises(oo.MemoryLimitError, match=r"memory_limit is 536870912 bytes") as info:
        it.invoke()
    assert isinstance(info.value, MemoryError) and isinstance(info.value, oo.OpaqueOpsError)
    it.set_tensor(0, x)
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), x)
    it.close()
