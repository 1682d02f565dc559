"""A signal handler that calls the interpreter during one of its calls gets ReentrantCallError, never a hang.

(issue 17, item 12.)  ``set_tensor``, ``get_tensor``, the same-shape
``resize_tensor_input`` and the no-op ``allocate_tensors`` took the lock on a
fast path without recording the owner thread.  A Python signal handler runs
in the main thread between two bytecodes of the interrupted call; when that
call held the lock, the handler's own call waited for a lock its own thread
held: forever.  Each test runs in a child process with a timeout: a timer
signal fires every 200 µs while the main thread loops over the calls, and the
handler calls the interpreter.  Every handler call must either run (the lock
was free) or raise ReentrantCallError.
"""

from __future__ import annotations

import pytest

from tests.helpers.child_process import crashed, run_child

LOOP = r"""
import signal, sys
import numpy as np
import opaque_ops as oo
from tests.helpers.reference_models import add_mul_model

data, offset, scale = add_mul_model()
it = oo.Interpreter(model_content=data)
it.allocate_tensors()
x = np.arange(5, dtype=np.float32).reshape(1, 5)
inp, out = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
handler_call = sys.argv[1]
counts = {"ran": 0, "refused": 0}

busy = []

def handler(signum, frame):
    if busy:  # a signal during the handler itself: handlers nest in Python; skip
        return
    busy.append(1)
    try:
        if handler_call == "get_tensor":
            it.get_tensor(out)
        elif handler_call == "set_tensor":
            it.set_tensor(inp, x)
        elif handler_call == "invoke":
            it.invoke()
        else:
            it.resize_tensor_input(inp, [1, 5])
        counts["ran"] += 1
    except oo.ReentrantCallError:
        counts["refused"] += 1
    finally:
        busy.clear()

signal.signal(signal.SIGALRM, handler)
signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
want = (x + offset) * scale
for _ in range(100_000):
    it.set_tensor(inp, x)
    it.resize_tensor_input(inp, [1, 5])
    it.allocate_tensors()
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(out)[0], want[0])
    if counts["refused"] >= 5 and counts["ran"] >= 5:
        break
signal.setitimer(signal.ITIMER_REAL, 0, 0)
print(counts["ran"] > 0, counts["refused"] > 0)
"""


@pytest.mark.parametrize("handler_call", ["get_tensor", "set_tensor", "invoke", "resize_tensor_input"])
def test_signal_handler_calling_the_interpreter_is_refused_not_deadlocked(handler_call):
    p = run_child(LOOP, handler_call, timeout=60)
    assert p.returncode == 0, crashed(p)
    assert p.stdout.split() == ["True", "True"], p.stdout
