"""A crash in the worker becomes RuntimeCrashError in the caller, and the caller lives on."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest

import opaque_ops as oo
from tests.helpers.misbehaving_kernels import one_op, twice

pytestmark = pytest.mark.usefixtures("no_leaks")
X = np.arange(4, dtype=np.float32)


def _crash(bad_ops, op, call="invoke"):
    it = oo.Interpreter(model_content=one_op(op), custom_ops=[bad_ops], isolate=True)
    with pytest.raises(oo.RuntimeCrashError) as info:
        if call == "invoke":
            it.allocate_tensors()
            it.set_tensor(it.get_input_details()[0]["index"], X)
        it.invoke()
    return it, info.value


def test_null_dereference_is_sigsegv_with_node_op_and_backtrace(bad_ops):
    it, err = _crash(bad_ops, "CrashNull")
    assert isinstance(err, oo.OpaqueOpsError)
    assert err.signal == "SIGSEGV" and err.signum == signal.SIGSEGV
    assert err.stage == "invoke"
    assert (err.node, err.op) == (0, "CrashNull")
    assert err.backtrace and err.backtrace[0].startswith("CrashNullInvoke"), err.backtrace
    # Below the kernel: the runtime's own frames, down to the call from Python.
    runtime_lib = Path(oo.runtime_info().path).name
    assert any(f"({runtime_lib}" in f for f in err.backtrace[1:]), err.backtrace
    assert err.backtrace[-1].startswith("... (called from Python")
    # The message carries what a kernel author needs to act on.
    msg = str(err)
    for part in ("SIGSEGV", "at address 0x0", "during invoke", "node 0 (CrashNull)", "CrashNullInvoke"):
        assert part in msg, part
    # The tail of the worker's stderr: the handler's line and Python's faulthandler.
    assert "fatal signal 11" in err.stderr and "Fatal Python error: Segmentation fault" in err.stderr
    # The interpreter is closed afterwards.
    with pytest.raises(oo.ClosedError):
        it.invoke()
    with pytest.raises(oo.ClosedError):
        it.get_tensor(0)
    it.close()  # idempotent


def test_abort_is_sigabrt(bad_ops):
    it, err = _crash(bad_ops, "CrashAbort")
    assert err.signal == "SIGABRT" and err.stage == "invoke" and err.op == "CrashAbort"
    frames = "\n".join(err.backtrace)
    assert "abort" in frames and "CrashAbortInvoke" in frames


def test_static_kernel_function_is_named_through_addr2line(bad_ops):
    if shutil.which("addr2line") is None:  # binutils comes with the C compiler these tests need
        pytest.fail("addr2line (binutils) is missing")
    _, err = _crash(bad_ops, "StaticNull")
    assert err.backtrace[0].startswith("StaticNullInvoke"), err.backtrace


def test_crash_in_prepare_is_stage_allocate(bad_ops):
    it = oo.Interpreter(model_content=one_op("CrashPrepare"), custom_ops=[bad_ops], isolate=True)
    with pytest.raises(oo.RuntimeCrashError) as info:
        it.allocate_tensors()
    assert info.value.stage == "allocate" and info.value.signal == "SIGSEGV"
    assert "CrashPrepare" in "\n".join(info.value.backtrace)


def test_crash_while_creating_is_stage_create(bad_ops):
    # A kernel's init runs inside TfLiteInterpreterCreate.
    with pytest.raises(oo.RuntimeCrashError) as info:
        oo.Interpreter(model_content=one_op("CrashInit"), custom_ops=[bad_ops], isolate=True)
    assert info.value.stage == "create"
    assert "CrashInit" in "\n".join(info.value.backtrace)


def test_worker_exit_without_signal(bad_ops):
    it = oo.Interpreter(model_content=one_op("Exit"), custom_ops=[bad_ops], isolate=True)
    it.allocate_tensors()
    with pytest.raises(oo.RuntimeCrashError) as info:
        it.invoke()
    assert info.value.signal is None and info.value.exitcode == 3
    assert "exited with status 3" in str(info.value)


def test_worker_killed_from_outside(bad_ops):
    it = oo.Interpreter(model_content=one_op("Twice"), custom_ops=[bad_ops], isolate=True)
    it.allocate_tensors()
    it.set_tensor(0, X)
    it.invoke()
    pid = it.worker_pid
    os.kill(pid, signal.SIGKILL)
    # Give the kernel a moment to deliver it, then use the interpreter.
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{pid}") and _state(pid) not in ("Z", "X") and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(oo.RuntimeCrashError) as info:
        it.invoke()
    assert info.value.signal == "SIGKILL" and "killed from outside" in str(info.value)
    with pytest.raises(oo.ClosedError):
        it.set_tensor(0, X)


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
        return s[s.rindex(")") + 2]
    except OSError:
        return "X"


def test_new_interpreter_after_a_crash_starts_cleanly(bad_ops):
    _crash(bad_ops, "CrashNull")
    it = oo.Interpreter(model_content=one_op("Twice"), custom_ops=[bad_ops], isolate=True)
    it.allocate_tensors()
    it.set_tensor(0, X)
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), twice(X))
    it.close()


def test_shared_worker_restarts_after_a_crash(bad_ops):
    with oo.isolate.Worker() as w:
        it = oo.Interpreter(model_content=one_op("CrashNull"), custom_ops=[bad_ops], isolate=w)
        first = w.pid
        it.allocate_tensors()
        with pytest.raises(oo.RuntimeCrashError):
            it.invoke()
        assert not w.alive
        it2 = oo.Interpreter(model_content=one_op("Twice"), custom_ops=[bad_ops], isolate=w)
        assert w.pid not in (None, first) and w.starts == 2
        it2.allocate_tensors()
        it2.set_tensor(0, X)
        it2.invoke()
        np.testing.assert_array_equal(it2.get_tensor(it2.get_output_details()[0]["index"]), twice(X))
        it2.close()
        # A clean close keeps the process for the next interpreter.
        assert w.pid is not None and w.starts == 2


def test_python_op_exception_crosses_with_its_type_and_worker_traceback():
    from tests.helpers.isolate_python_ops import failing_op

    it = oo.Interpreter(model_content=one_op("Fails"), custom_ops=[failing_op()], isolate=True)
    it.allocate_tensors()
    with pytest.raises(ZeroDivisionError) as info:
        it.invoke()
    cause = info.value.__cause__
    assert cause is not None and "raised in the isolated worker" in str(cause) and "fails_invoke" in str(cause)
    # Not a crash: the interpreter stays usable.
    with pytest.raises(ZeroDivisionError):
        it.invoke()
    it.close()
