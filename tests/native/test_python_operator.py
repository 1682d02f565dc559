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

An operator's deletion runs in finalizers, on whatever thread a collection
starts, so it takes no lock: the last test collects one on a thread that
holds the import lock while another thread forks.
"""

from __future__ import annotations

import numpy as np

from tests.helpers.atan import OFFSET, PYTHON_OP_INTERPRETER, assert_python_op_fork
from tests.helpers.child_process import crashed, run_child_json

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
    _, out = run_child_json(CHILD, model, timeout=120)
    for k, got in enumerate(out):
        assert not isinstance(got, str), f"interpreter {k}: {got}"
        want = np.arctan(np.full(5, k, np.float32) + OFFSET)
        np.testing.assert_allclose(np.array(got, np.float32), want, rtol=1e-6, atol=0)


FORK_SETUP = (
    PYTHON_OP_INTERPRETER
    + """
from opaque_ops._native import python_operator

oo.runtime_info()
# What a first creation imports on first use is imported before the thread
# starts.  The fork waits for _records_lock (taken around it), then happens
# wherever the thread has got to; a fork in the middle of the thread's
# import of a module leaves that module's import lock held in the child
# (Python's own hazard of forking while another thread imports, not this
# lock's), and the child's first creation waited on it (2 runs in 30 on
# 2.23.0).  The model without its op: checked, then refused at allocation.
import opaque_ops.model.parser, opaque_ops.ops.python_op
try:
    oo.Interpreter(model_path=model).allocate_tensors()
except oo.OpaqueOpsError:
    pass
"""
)


def test_a_fork_while_another_thread_makes_the_first_python_op_leaves_the_child_able_to_make_its_own(
    atan_model_bytes, tmp_path
):
    # The thread stops inside _static_trampolines, holding _records_lock; the
    # child inherited that lock held and its first Python op waited forever.
    assert_python_op_fork(
        atan_model_bytes,
        tmp_path,
        FORK_SETUP,
        code="python_operator._static_trampolines.__code__",
        lock="python_operator._records_lock",
        call="interpreter(x=np.zeros(5, np.float32))",
        x=np.zeros(5, np.float32),
    )


FORK_WHILE_COLLECTING = """
import _imp, gc, json, os, threading

holding = threading.Event()

def last_before_fork():
    # Registered before opaque_ops is imported, so it runs after opaque_ops'
    # before-fork handlers: from here on this thread holds _records_lock,
    # and os.fork() takes the import lock next.  It waits until the other
    # thread holds the import lock and is collecting.
    go.set()
    holding.wait(10)

go = threading.Event()
os.register_at_fork(before=last_before_fork)

import opaque_ops as oo
from opaque_ops._native import python_operator

op = oo.python_op("Unused", invoke=lambda ins, outs: None)
cycle = [op.operators()[0]]
cycle.append(cycle)
del cycle  # an operator no interpreter uses, freed by the next collection
gc.disable()

def import_and_collect():
    go.wait()
    # importlib holds the import lock while it allocates (_get_module_lock);
    # an allocation there can start a collection, which runs finalizers.
    _imp.acquire_lock()
    try:
        holding.set()
        gc.collect()
    finally:
        _imp.release_lock()

forked = threading.Event()

def fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    forked.set()

collector = threading.Thread(target=import_and_collect, daemon=True)
collector.start()
threading.Thread(target=fork, daemon=True).start()
ok = forked.wait(15)
collector.join(5)
done = {"forked": ok, "collected": not collector.is_alive(), "live": python_operator.live_python_operators()}
print(json.dumps(done), flush=True)
os._exit(0)  # (a deadlocked thread would hold the import lock at shutdown)
"""


def test_a_collection_under_the_import_lock_frees_an_operator_while_another_thread_forks():
    # os.fork() holds _records_lock (its before-fork handler) and then takes
    # the import lock; the other thread holds the import lock and collects an
    # unused operator, whose deletion took _records_lock: each waited for the
    # other.  The operator's deletion now takes no lock.
    p, got = run_child_json(FORK_WHILE_COLLECTING, timeout=90)
    assert got["forked"] and got["collected"], "the fork and the collection deadlocked: " + crashed(p)
    assert got["live"] == 0, got  # the collected operator was deleted
