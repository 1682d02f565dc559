"""Cancellation: Ctrl-C stops a long invoke between nodes, an event loop's wakeup fd is left alone,
and cancel() works from another thread.  Each runs in a child process (signals, and a hang fails one test).
"""

from __future__ import annotations

import json

import pytest

from tests.helpers.child_process import run_child

SLOW_MODEL = """
import numpy as np
from tests.helpers.slow_model import interrupted_invoke, slow_model
"""


def assert_stopped_between_nodes(r: dict) -> None:
    """Ctrl-C at ``at`` seconds (30 % of the model's ``full`` run) stopped the invoke long before its end."""
    assert r["took"] is not None, r
    assert r["took"] < r["at"] + 0.5 * (r["full"] - r["at"]), r


def test_ctrl_c_cancels_a_long_invoke_and_the_interpreter_stays_usable():
    code = (
        SLOW_MODEL
        + """
import os, signal, threading, time, json
import opaque_ops as oo
it = oo.Interpreter(model_content=slow_model(), use_xnnpack=False, num_threads=1)
it.allocate_tensors()
x = np.random.default_rng(1).standard_normal((1, 128, 128, 32)).astype(np.float32)
it.set_tensor(0, x)
t = time.perf_counter(); it.invoke(); full = time.perf_counter() - t
ref = it.get_tensor(it.get_output_details()[0]["index"])
at = 0.3 * full  # a share of the model's own run time: runtimes differ 3x in speed
took = interrupted_invoke(it, at)
it.set_tensor(0, x)
it.invoke()
same = bool(np.array_equal(ref, it.get_tensor(it.get_output_details()[0]["index"])))
print(json.dumps({"full": full, "at": at, "took": took, "same": same, "wakeup_fd": signal.set_wakeup_fd(-1)}))
"""
    )
    p = run_child(code)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Exception ignored" not in p.stderr, p.stderr
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert_stopped_between_nodes(r)
    assert r["same"] and r["wakeup_fd"] == -1, r


def test_ctrl_c_leaves_an_existing_wakeup_fd_alone():
    # An event loop owns the wakeup fd: invoke must not take it over.
    code = (
        SLOW_MODEL
        + """
import os, signal, socket, json
import opaque_ops as oo
r, w = socket.socketpair(); w.setblocking(False)
signal.set_wakeup_fd(w.fileno())
it = oo.Interpreter(model_content=slow_model(layers=2, hw=32), use_xnnpack=False)
it.allocate_tensors(); it.invoke(); it.invoke()
print(json.dumps({"kept": signal.set_wakeup_fd(-1) == w.fileno()}))
"""
    )
    p = run_child(code)
    assert p.returncode == 0, p.stderr[-2000:]
    assert '"kept": true' in p.stdout


def test_cancel_from_another_thread():
    code = (
        SLOW_MODEL
        + """
import threading, time, json
import opaque_ops as oo
it = oo.Interpreter(model_content=slow_model(), use_xnnpack=False, num_threads=1)
it.allocate_tensors()
t = time.perf_counter(); it.invoke(); full = time.perf_counter() - t
res = {}
def worker():
    t = time.perf_counter()
    try:
        it.invoke()
        res["outcome"] = "finished"
    except KeyboardInterrupt as e:
        res["outcome"] = "cancelled: " + str(e)
    res["took"] = time.perf_counter() - t
th = threading.Thread(target=worker); th.start()
# A share of the model's own run time: the runtimes' kernels differ several times in speed.
time.sleep(0.3 * full); it.cancel(); th.join(30)
it.invoke()   # usable afterwards
print(json.dumps(res))
"""
    )
    p = run_child(code)
    assert p.returncode == 0, p.stderr[-2000:]
    assert '"outcome": "cancelled: invoke was cancelled"' in p.stdout, p.stdout


def test_no_watcher_thread_outlives_an_invoke():
    # The watcher runs for one armed invoke only: a thread kept alive would
    # make every later fork() "multi-threaded" (a DeprecationWarning on 3.12+).
    # It is a bare _thread, which threading.enumerate() does not list: the
    # kernel's list of the process's threads (/proc/self/task) is what counts.
    # The watcher watches where the fast calls module (and its Ctrl-C guard,
    # which starts no thread: test_sigint_guard.py) is off.
    code = (
        SLOW_MODEL
        + """
import json, os, threading, time
import opaque_ops as oo
def threads():
    return sorted(os.listdir("/proc/self/task"))
def settled(before):
    # The watcher has finished its Python work when invoke() returns; the OS
    # thread may need a moment more to exit (as after Thread.join()).
    for _ in range(200):
        now = threads()
        if now == before:
            return now
        time.sleep(0.005)
    return threads()
it = oo.Interpreter(model_content=slow_model(layers=2, hw=32), use_xnnpack=False, num_threads=1)
it.allocate_tensors()
before = threads()
it.invoke()          # the first invoke after an allocation is always watched
first = settled(before)
it.invoke()
again = settled(before)
# One armed invoke (a new interpreter's first) whose thread is seen running: the count can tell.
seen = []
it = oo.Interpreter(model_content=slow_model(layers=2, hw=32), use_xnnpack=False, num_threads=1)
it.allocate_tensors()
import opaque_ops.interpreter.sigint as s
real = s._watch
def spy(r, native, ended):
    seen.append(threads())
    real(r, native, ended)
s._watch = spy
it.invoke()
print(json.dumps({"before": before, "first": first, "again": again, "during": seen,
                  "after": settled(before), "enumerate": [t.name for t in threading.enumerate()]}))
"""
    )
    p = run_child(code, env={"OPAQUE_OPS_FASTCALLS": "0"})
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["first"] == r["before"] and r["again"] == r["before"] and r["after"] == r["before"], r
    # The watcher did run, as one more thread of the process.
    assert len(r["during"]) == 1 and len(r["during"][0]) == len(r["before"]) + 1, r
    assert r["enumerate"] == ["MainThread"], r


def test_ctrl_c_cancels_in_a_child_forked_after_an_invoke():
    # Before: the parent's watcher socket was inherited without its thread,
    # so Ctrl-C in a forked child waited for the whole model to run.
    code = (
        SLOW_MODEL
        + """
import json, os, signal, threading, time
import opaque_ops as oo
warm = oo.Interpreter(model_content=slow_model(layers=2, hw=32), use_xnnpack=False)
warm.allocate_tensors(); warm.invoke()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    it = oo.Interpreter(model_content=slow_model(), use_xnnpack=False, num_threads=1)
    it.allocate_tensors()
    it.set_tensor(0, np.ones((1, 128, 128, 32), np.float32))
    t = time.perf_counter(); it.invoke(); full = time.perf_counter() - t
    at = 0.3 * full
    took = interrupted_invoke(it, at)  # (watched: the model takes longer than WATCH_AFTER_S)
    os.write(w, json.dumps({"full": full, "at": at, "took": took}).encode())
    os._exit(0)
os.close(w)
data = b""
while chunk := os.read(r, 4096):
    data += chunk
_, status = os.waitpid(pid, 0)
print(json.dumps({"child": json.loads(data or b"null"), "status": status}))
"""
    )
    p = run_child(code)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["status"] == 0 and r["child"] is not None, r
    assert_stopped_between_nodes(r["child"])


@pytest.mark.parametrize("fast_calls", ["session", "off"])
def test_ctrl_c_at_any_point_of_arming_or_disarming_leaves_no_watcher_behind(fast_calls):
    # A KeyboardInterrupt right after one of arm()'s calls into C, or in the
    # watcher's end after invoke, left the watcher thread running for ever
    # (holding the interpreter), or the wakeup fd set to its pipe, so that no
    # later invoke was watched.  tests/helpers/interrupted_calls raises one at
    # each point of a watched invoke (the first after allocation) in turn.
    code = """
import _signal, _thread, json, time
from tests.helpers.interrupted_calls import _subjects, interrupt_at

subject = _subjects()["add_mul"]
n, left, sites = 1, [], []
while True:
    it, i, o, shape = subject.make()
    raised, where = interrupt_at(n, it.invoke)
    sites.append(where)
    for _ in range(2000):  # a watcher ends when its pipe closes: give it a moment
        if _thread._count() == 0:
            break
        time.sleep(0.001)
    wakeup = _signal.set_wakeup_fd(-1)
    if wakeup != -1 or _thread._count() != 0:
        left.append(f"point {n} ({where}): wakeup fd {wakeup}, threads {_thread._count()}")
    subject.check(it, i, o, shape)
    it.close()
    if not raised:
        break
    n += 1
print(json.dumps({"points": n - 1, "left": left, "sites": [s for s in sites if s]}))
"""
    # "session": the fast calls module the session uses, if any (its Ctrl-C
    # guard arms instead of the watcher); "off": the watcher.
    p = run_child(code, timeout=120, env={"OPAQUE_OPS_FASTCALLS": "0"} if fast_calls == "off" else None)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["left"] == [], r["left"]
    # The points include arm()'s and the watcher's end.
    assert any(s.startswith("sigint.py:arm:") for s in r["sites"]), r["sites"]
    assert any(s.startswith("sigint.py:invoke_watched:") for s in r["sites"]), r["sites"]
