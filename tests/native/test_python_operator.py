"""opaque_ops._native.python_operator: the four C trampolines every Python op shares, made once per process.

Every Python op's ``TfLiteOperator`` points at the same four cffi callbacks,
created at a process's first Python op.  Two threads making their first
Python ops at once each made a set; the set the other thread's assignment
replaced was freed when its creator returned, while the operator it had been
given to still pointed at it, and TFLite then called freed closures (cffi
reuses their memory for the next callbacks: a Prepare that returned
another callback's value, or a jump into nothing).  The window is a few
bytecodes wide; the child here widens it with a trace function that yields
the GIL at each line of the function that makes the set, so both threads are
inside it together.  The code under test runs unchanged.
"""

from __future__ import annotations

import json

import numpy as np

from tests.helpers.atan import OFFSET
from tests.helpers.child_process import crashed, run_child
from tests.helpers.fork_locks import fork_while_held

CHILD = """
import json, sys, threading, time
import numpy as np
import opaque_ops as oo
from opaque_ops._native import python_operator

def slow_lines(frame, event, arg):
    time.sleep(0.002)  # lets the other threads run inside the function too
    return slow_lines

def tracer(frame, event, arg):
    if event == "call" and frame.f_code is python_operator._static_trampolines.__code__:
        return slow_lines
    return None

model = sys.argv[1]
barrier = threading.Barrier(4)
made = [None] * 4

def work(k):
    barrier.wait()
    op = oo.python_op("Atan", invoke=lambda ins, outs: np.arctan(ins[0], out=outs[0]))
    made[k] = oo.Interpreter(model_path=model, custom_ops=[op])

threading.settrace(tracer)
threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
threading.settrace(None)
# Other cffi callbacks made now take the memory of any set that was freed.
import cffi
other = cffi.FFI()
kept = [other.callback("int(void*, void*)", lambda a, b: 1) for _ in range(64)]
out = []
for k, it in enumerate(made):
    try:
        it.allocate_tensors()
        it.set_tensor(0, np.full(5, k, np.float32))
        it.invoke()
        out.append(it.get_tensor(it.get_output_details()[0]["index"]).tolist())
    except Exception as exc:
        out.append(f"{type(exc).__name__}: {exc}")
print(json.dumps(out))
"""


def test_python_ops_first_made_on_threads_at_once_share_one_live_set_of_trampolines(atan_model_bytes, tmp_path):
    model = tmp_path / "atan.tflite"
    model.write_bytes(atan_model_bytes)
    p = run_child(CHILD, model, timeout=120)
    assert p.returncode == 0, crashed(p)
    out = json.loads(p.stdout.splitlines()[-1])
    for k, got in enumerate(out):
        assert not isinstance(got, str), f"interpreter {k}: {got}"
        want = np.arctan(np.full(5, k, np.float32) + OFFSET)
        np.testing.assert_allclose(np.array(got, np.float32), want, rtol=1e-6, atol=0)


FORK_SETUP = """
import numpy as np
import opaque_ops as oo
from opaque_ops._native import python_operator

model = sys.argv[1]

def interpreter():
    op = oo.python_op("Atan", invoke=lambda ins, outs: np.arctan(ins[0], out=outs[0]))
    it = oo.Interpreter(model_path=model, custom_ops=[op])
    it.allocate_tensors()
    it.set_tensor(0, np.zeros(5, np.float32))
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"]).tolist()

oo.runtime_info()
"""


def test_a_fork_while_another_thread_makes_the_first_python_op_leaves_the_child_able_to_make_its_own(
    atan_model_bytes, tmp_path
):
    # The thread stops inside _static_trampolines, holding _records_lock; the
    # child inherited that lock held and its first Python op waited forever.
    model = tmp_path / "atan.tflite"
    model.write_bytes(atan_model_bytes)
    got = fork_while_held(
        FORK_SETUP,
        code="python_operator._static_trampolines.__code__",
        lock="python_operator._records_lock",
        worker="interpreter()",
        child="interpreter()",
        args=[model],
    )
    want = np.arctan(np.zeros(5, np.float32) + OFFSET)
    assert got.startswith("ok "), got
    np.testing.assert_allclose(np.array(json.loads(got[3:]), np.float32), want, rtol=1e-6, atol=0)
