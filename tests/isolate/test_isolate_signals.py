"""An isolated interpreter and a Python signal handler: refused as in-process, never a mixed result.

The parent waits for the worker in Python (so that Ctrl-C works), and Python
runs signal handlers in that wait.  A handler that wrote an input through
set_tensor's shared-memory path while the worker was computing changed the
input under a running invoke: 41 of 100 results matched neither input's
reference.  In-process the same call raises ReentrantCallError (a call from
inside one of the interpreter's own calls), and so it does isolated now.
"""

from __future__ import annotations

import signal

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.model import ModelBuilder

SHAPE = [1, 128, 128, 16]
STEPS = 24


def _chain_model() -> bytes:
    # y = x * 1.5 + 0.25, STEPS times over, elementwise: a few ms per invoke,
    # and an input changed during it gives a result that is neither input's.
    b = ModelBuilder()
    x = b.add_tensor("x", SHAPE, np.float32)
    mul = b.add_constant("mul", np.float32([1.5]))
    add = b.add_constant("add", np.float32([0.25]))
    cur = x
    for k in range(STEPS):
        m = b.add_tensor(f"m{k}", SHAPE, np.float32)
        b.add_op("MUL", [cur, mul], [m])
        a = b.add_tensor(f"a{k}", SHAPE, np.float32)
        b.add_op("ADD", [m, add], [a])
        cur = a
    b.set_inputs([x])
    b.set_outputs([cur])
    return b.build()


def _reference(x: np.ndarray) -> np.ndarray:
    y = x.copy()
    for _ in range(STEPS):
        y = y * np.float32(1.5) + np.float32(0.25)
    return y


@pytest.mark.parametrize("call", ["set_tensor", "get_tensor", "resize_tensor_input", "invoke"])
def test_a_signal_handler_during_an_isolated_invoke_is_refused_and_results_stay_whole(call):
    rng = np.random.default_rng(3)
    x = rng.random(SHAPE, dtype=np.float32)
    other = rng.random(SHAPE, dtype=np.float32)
    want = {"x": _reference(x), "other": _reference(other)}
    it = oo.Interpreter(model_content=_chain_model(), isolate=True)
    it.allocate_tensors()
    i_in, i_out = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
    calls = {
        "set_tensor": lambda: it.set_tensor(i_in, other),
        "get_tensor": lambda: it.get_tensor(i_out),
        "resize_tensor_input": lambda: it.resize_tensor_input(i_in, SHAPE),
        "invoke": lambda: it.invoke(),
    }
    seen = {"refused": 0, "ran": 0, "errors": []}
    inside = [False]

    def handler(signum, frame):
        if not inside[0]:
            return
        try:
            calls[call]()
            seen["ran"] += 1
        except oo.ReentrantCallError:
            seen["refused"] += 1
        except Exception as exc:  # noqa: BLE001 - reported below
            seen["errors"].append(repr(exc))

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.0003, 0.0003)
    wrong = 0
    try:
        for _ in range(40):
            it.set_tensor(i_in, x)
            inside[0] = True
            try:
                it.invoke()
            finally:
                inside[0] = False
            got = it.get_tensor(i_out)
            # A handler may run before the invoke starts (its set_tensor
            # then runs, as in-process): the result is one input's, whole.
            if not (np.array_equal(got, want["x"]) or np.array_equal(got, want["other"])):
                wrong += 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, old)
    it.close()
    assert seen["errors"] == []
    assert seen["refused"] > 0, f"no handler ran during a worker's invoke: {seen}"
    assert wrong == 0, f"{wrong} of 40 results were neither input's ({seen})"
