"""Interpreters reaching a child through fork(): refused where they would hang, working where they can.

Each scenario runs in a child process (run_child) that forks again, so a
regression hangs a grandchild, which is killed, and fails one test.
"""

from __future__ import annotations

import json

from tests.helpers.child_process import crashed, run_child

SETUP = """
import json, os, sys, threading, time, multiprocessing as mp
import numpy as np, opaque_ops as oo
from tests.helpers.locations import package_file
model = str(package_file("pyopen_wakeword", "models", "embedding_model.tflite"))
x = np.random.default_rng(0).random((1, 76, 32, 1), dtype=np.float32)

def make(threads):
    it = oo.Interpreter(model_path=model, num_threads=threads)
    it.allocate_tensors()
    it.set_tensor(0, x)
    it.invoke()
    return it, it.get_tensor(it.get_output_details()[0]["index"])

def in_fork(fn):
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    def target():
        try:
            q.put(fn())
        except Exception as e:
            q.put(f"{type(e).__name__}: {e}")
    p = ctx.Process(target=target)
    p.start()
    p.join(20)
    if p.is_alive():
        p.kill()
        return "HUNG"
    return q.get(timeout=5)

def run(it):
    it.set_tensor(0, x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])
"""


def _child(body: str) -> dict:
    p = run_child(SETUP + body, timeout=180)
    assert p.returncode == 0, crashed(p)
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_multithreaded_interpreter_is_refused_in_a_forked_child_with_the_reason():
    out = _child("""
it, ref = make(2)
got = in_fork(lambda: run(it).tolist())
print(json.dumps({"child": got, "parent_ok": bool(np.array_equal(run(it), ref)), "pid": os.getpid()}))
""")
    assert out["child"] != "HUNG"
    assert out["child"].startswith(
        f"ClosedError: this Interpreter was created in process {out['pid']} and "
        "reached this process through a fork; it runs 2 threads"
    )
    assert "multiprocessing.get_context('spawn')" in out["child"]
    assert out["parent_ok"]


def test_single_threaded_interpreter_keeps_working_in_a_forked_child():
    out = _child("""
it, ref = make(1)
got = in_fork(lambda: bool(np.array_equal(run(it), ref)))
print(json.dumps({"child": got}))
""")
    assert out == {"child": True}


def test_interpreter_busy_in_another_thread_at_the_fork_is_refused():
    # A python_op holds the interpreter's call lock (it sleeps inside invoke)
    # while the main thread forks: the child's copy of the lock stays held.
    out = _child("""
started = threading.Event()
def slow(inputs, outputs):
    started.set()
    time.sleep(1.5)
    np.copyto(outputs[0], inputs[0])
from opaque_ops.model import ModelBuilder
b = ModelBuilder()
a = b.add_tensor("a", [4], np.float32); y = b.add_tensor("y", [4], np.float32)
b.add_custom_op("Slow", [a], [y]); b.set_inputs([a]); b.set_outputs([y])
it = oo.Interpreter(model_content=b.build(), custom_ops=[oo.python_op("Slow", invoke=slow)])
it.allocate_tensors()
t = threading.Thread(target=it.invoke)
t.start()
started.wait(10)
got = in_fork(lambda: (it.invoke(), "ran")[1])
t.join()
print(json.dumps({"child": got}))
""")
    assert out["child"] != "HUNG"
    assert "another thread was using it at the fork, so it would hang here" in out["child"]
