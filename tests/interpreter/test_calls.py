"""The call contract (opaque_ops/interpreter/call_lock.py): every public call of one interpreter is serialized,
and a call from inside one of its own calls raises instead of hanging.

The detector: a Python op that, in the middle of ``invoke()``, lets another
thread make one public call and waits to see whether that call completes.
Serialized, it cannot complete before ``invoke()`` returns; without the lock
it does, and the detector reports the interleaving
(``test_the_detector_sees_an_unlocked_interpreter`` shows that it can).
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import opaque_ops as oo
from tests.helpers.child_process import crashed, run_child
from tests.helpers.interpreter_models import pyop_model

# How long the op waits for the other thread's call to finish.  Serialized,
# the call cannot finish at all during the op; unserialized it takes
# microseconds, so the wait only has to outlast thread scheduling.
WAIT_S = 0.3


def probe_model() -> bytes:
    """x -> Probe (a Python op) -> y, with a signature."""
    return pyop_model("serving_default", op="Probe")


class Probe:
    """The op: copies x to y; when armed, lets ``call`` run from another thread mid-invoke."""

    def __init__(self):
        self.in_op = threading.Event()
        self.other_done = threading.Event()
        self.armed = False
        self.seen = []
        self.op = oo.python_op("Probe", invoke=self.invoke)

    def invoke(self, inputs, outputs):
        before = inputs[0].copy()
        if self.armed:
            self.armed = False
            self.in_op.set()
            # Serialized: the other call is still waiting for the lock.
            self.seen.append(self.other_done.wait(WAIT_S))
        outputs[0][...] = inputs[0]
        self.seen_input_change = not np.array_equal(before, inputs[0])


def interleaved(it, probe, call) -> bool:
    """Run ``call(it)`` in another thread while ``it.invoke()`` runs; True if it completed inside."""
    probe.in_op.clear()
    probe.other_done.clear()
    probe.armed = True
    errors = []

    def other():
        probe.in_op.wait(10)
        try:
            call(it)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        probe.other_done.set()

    t = threading.Thread(target=other)
    t.start()
    it.invoke()
    t.join(10)
    assert not t.is_alive() and not errors, errors
    return probe.seen[-1]


CALLS = {
    "set_tensor (fast path)": lambda it: it.set_tensor(0, np.full(4, 2, np.float32)),
    "set_tensor (slow path)": lambda it: it.set_tensor(0, np.full(8, 3, np.float32)[::2]),
    "get_tensor": lambda it: it.get_tensor(1),
    "tensor() accessor": lambda it: it.tensor(1)().copy(),
    "get_input_details": lambda it: it.get_input_details(),
    "get_tensor_details": lambda it: it.get_tensor_details(),
    "allocate_tensors": lambda it: it.allocate_tensors(),
    "resize_tensor_input": lambda it: it.resize_tensor_input(0, [4]),
    "invoke": lambda it: it.invoke(),
    "reset_all_variables": lambda it: it.reset_all_variables(),
    "signature runner": lambda it: it.get_signature_runner()(x=np.ones(4, np.float32)),
    "get_signature_runner": lambda it: it.get_signature_runner(),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_every_public_call_waits_for_a_running_invoke(name):
    probe = Probe()
    it = oo.Interpreter(model_content=probe_model(), custom_ops=[probe.op])
    it.allocate_tensors()
    it.set_tensor(0, np.ones(4, np.float32))  # the fast path is warm
    assert not interleaved(it, probe, CALLS[name]), f"{name} ran in the middle of invoke()"
    assert not probe.seen_input_change


def test_close_waits_for_a_running_invoke():
    probe = Probe()
    it = oo.Interpreter(model_content=probe_model(), custom_ops=[probe.op])
    it.allocate_tensors()
    assert not interleaved(it, probe, lambda it: it.close())
    with pytest.raises(oo.ClosedError):
        it.invoke()


class _NoLock:
    """A stand-in for the interpreter's lock that serializes nothing."""

    owner = None

    class lock:  # noqa: N801 - mimics CallLock.lock
        @staticmethod
        def acquire(blocking=True):
            return True

        @staticmethod
        def release():
            pass

    def try_acquire(self):
        return True

    def wait(self, what):
        pass

    def acquire(self, what):
        pass

    def release(self):
        pass

    def held(self, what):
        import contextlib

        return contextlib.nullcontext()


@pytest.mark.parametrize("name", ["set_tensor (fast path)", "get_tensor", "get_input_details"])
def test_the_detector_sees_an_unlocked_interpreter(name):
    # The same check on an interpreter whose lock is removed on purpose: the
    # other thread's call completes in the middle of invoke(), and is seen.
    # (Only calls that cannot move memory: this interpreter is unprotected.)
    probe = Probe()
    it = oo.Interpreter(model_content=probe_model(), custom_ops=[probe.op])
    it.allocate_tensors()
    it.set_tensor(0, np.ones(4, np.float32))
    it._calls = _NoLock()
    it._lock = it._calls.lock
    assert interleaved(it, probe, CALLS[name])
    if name.startswith("set_tensor"):
        assert probe.seen_input_change  # the op saw its input change under it


def test_two_threads_sharing_an_interpreter_get_their_own_results():
    # Each signature-runner call is one locked set-invoke-get: with two
    # threads on one interpreter, every result must be exactly the caller's
    # input (y = x).  Without the lock a thread reads the other's result.
    probe = Probe()
    it = oo.Interpreter(model_content=probe_model(), custom_ops=[probe.op])
    runner = it.get_signature_runner()
    wrong, done = [], []

    def work(k):
        x = np.full(4, k, np.float32)
        for i in range(400):
            y = runner(x=x)["y"]
            if not np.array_equal(y, x):
                wrong.append((k, i, y))
            if i % 50 == 0:
                time.sleep(0)  # let the other thread in
        done.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(done) == [1, 2] and wrong == [], wrong[:3]


# ================================================================ re-entry

REENTRY = {
    "invoke": "it.invoke()",
    "allocate_tensors": "it.allocate_tensors()",
    "resize_tensor_input": "it.resize_tensor_input(0, [8])",
    "set_tensor": "it.set_tensor(0, np.zeros(4, np.float32))",
    "get_tensor": "it.get_tensor(0)",
    "signature runner": "it.get_signature_runner()(x=np.zeros(4, np.float32))",
    "close": "it.close()",
}


def test_a_python_op_calling_its_own_interpreter_gets_a_clear_error():
    # Before, each of these waited for itself forever: run in a child with a
    # timeout, so a regression fails instead of hanging the run.
    code = """
        import json, numpy as np, opaque_ops as oo
        from tests.interpreter.test_calls import probe_model
        calls = %r
        results = {}
        for name, stmt in calls.items():
            def invoke(inputs, outputs, stmt=stmt):
                exec(stmt, {"it": it, "np": np})
            op = oo.python_op("Probe", invoke=invoke)
            it = oo.Interpreter(model_content=probe_model(), custom_ops=[op])
            it.allocate_tensors()
            try:
                it.invoke()
                results[name] = "no error"
            except oo.ReentrantCallError as e:
                results[name] = "ReentrantCallError: " + str(e)
            except Exception as e:
                results[name] = type(e).__name__ + ": " + str(e)
            it.set_tensor(0, np.ones(4, np.float32))   # usable afterwards
        print(json.dumps(results))
    """ % (REENTRY,)
    p = run_child(code, timeout=60)
    assert p.returncode == 0, crashed(p)
    import json

    results = json.loads(p.stdout.strip().splitlines()[-1])
    for name in REENTRY:
        msg = results[name]
        assert msg.startswith("ReentrantCallError: ") and "from inside one of its own calls" in msg, (name, msg)


def test_reentry_from_prepare_is_refused_too():
    probe_it = {}

    def prepare(specs):
        probe_it["it"].get_input_details()
        return [specs[0].shape]

    op = oo.python_op("Probe", invoke=lambda i, o: None, prepare=prepare)
    it = probe_it["it"] = oo.Interpreter(model_content=probe_model(), custom_ops=[op])
    with pytest.raises(oo.ReentrantCallError, match="get_input_details"):
        it.allocate_tensors()


# ================================================= close() during invoke()

SLOW = """
import numpy as np
from tests.helpers.slow_model import slow_model as _slow

def slow_model(layers=40, **kw):
    return _slow(layers=layers, **kw)
"""


def test_close_from_another_thread_keeps_the_ops_exception():
    # Before: close() cleared the interpreter while invoke() ran, and the op's
    # error became "AttributeError: 'NoneType' object has no attribute 'sink'".
    started = threading.Event()

    def failing(inputs, outputs):
        started.set()
        time.sleep(WAIT_S)  # close() is called meanwhile
        raise ZeroDivisionError("the op's own error")

    op = oo.python_op("Probe", invoke=failing)
    it = oo.Interpreter(model_content=probe_model(), custom_ops=[op])
    it.allocate_tensors()
    closer = threading.Thread(target=lambda: (started.wait(10), it.close()))
    closer.start()
    with pytest.raises(ZeroDivisionError, match="the op's own error"):
        it.invoke()
    closer.join(10)
    with pytest.raises(oo.ClosedError):
        it.invoke()


def test_cancel_then_close_from_another_thread_keeps_keyboard_interrupt():
    p = run_child(
        SLOW
        + """
import threading, time, json
import opaque_ops as oo
it = oo.Interpreter(model_content=slow_model(), use_xnnpack=False, num_threads=1)
it.allocate_tensors()
t = time.perf_counter(); it.invoke(); full = time.perf_counter() - t
res = {}
def worker():
    try:
        it.invoke()
        res["outcome"] = "finished"
    except KeyboardInterrupt as e:
        res["outcome"] = "KeyboardInterrupt: " + str(e)
    except Exception as e:
        res["outcome"] = type(e).__name__ + ": " + str(e)
th = threading.Thread(target=worker); th.start()
# A share of the model's own run time: the runtimes' kernels differ several times in speed.
time.sleep(0.3 * full); it.cancel(); it.close(); th.join(30)
print(json.dumps(res))
"""
    )
    assert p.returncode == 0, crashed(p)
    assert '"outcome": "KeyboardInterrupt: invoke was cancelled"' in p.stdout, p.stdout


@pytest.mark.parametrize("name", list(CALLS))
def test_a_signal_handler_inside_the_calls_own_lock_taking_is_refused_at_once(name):
    # What a Python signal handler finds when it interrupts one of the main
    # thread's calls between the lock's acquire() returning and the owner's
    # mark (CallLock.try_acquire): the lock held by this thread, no owner.
    # A real signal lands there about once in thousands of calls
    # (tests/lifecycle's signal_handler_reenters case); the state is made by
    # hand here.  The lock knows its holder (_is_owned), so the call must be
    # refused at once.  A timer frees the lock after 20 s, so that a call
    # that waits instead ends, in a failure, rather than hanging the suite.
    probe = Probe()
    it = oo.Interpreter(model_content=probe_model(), custom_ops=[probe.op])
    it.allocate_tensors()
    it.set_tensor(0, np.ones(4, np.float32))  # the fast path is warm
    calls = it._calls
    assert calls.lock.acquire(False)
    assert calls.owner is None and calls.lock._is_owned()
    freed, done = [], [False]

    def free():
        if not done[0]:
            freed.append(True)
            calls.lock.release()

    timer = threading.Timer(20, free)
    timer.start()
    try:
        with pytest.raises(oo.ReentrantCallError, match="from inside one of its own calls"):
            CALLS[name](it)
    finally:
        done[0] = True
        timer.cancel()
        timer.join()
        if not freed:
            calls.lock.release()
    assert not freed, f"{name} waited for the lock its own thread held"
    # The interpreter is as it was: the next call runs.
    it.set_tensor(0, np.full(4, 5, np.float32))
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(1), np.full(4, 5, np.float32))
