"""Isolation's lifecycle (issue 17, items 6-9 and 12): fork, parent death, pickling, failed creations,
and the same answers as in-process for odd arguments."""

from __future__ import annotations

import gc
import os
import pickle
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import opaque_ops as oo
from tests.helpers.child_process import ROOT, crashed, run_child, run_cli
from tests.helpers.isolate_lifecycle_ops import op
from tests.helpers.misbehaving_kernels import one_op


def _add_model(constant: float) -> bytes:
    """y = x + constant on a float32 [1, 5] input."""
    from opaque_ops.model import ModelBuilder

    b = ModelBuilder()
    x = b.add_tensor("x", [1, 5], np.float32)
    c = b.add_constant("c", np.full((1, 5), constant, np.float32))
    y = b.add_tensor("y", [1, 5], np.float32)
    b.add_op("ADD", inputs=[x, c], outputs=[y], options={"fused_activation_function": "NONE"})
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


# ---------------------------------------------------------------- item 6
def test_a_fork_pool_gets_workers_of_its_own():
    """Before: the children and the parent shared one worker and its buffers (outputs mixed)."""
    p = run_child(
        """
        import multiprocessing as mp, numpy as np, opaque_ops as oo
        from tests.helpers.misbehaving_kernels import one_op
        from tests.helpers.isolate_lifecycle_ops import op

        model = one_op("Twice", 256)
        ref = oo.Interpreter(model_content=model, custom_ops=[op("twice")])
        ref.allocate_tensors()
        it = oo.Interpreter(model_content=model, custom_ops=[op("twice")], isolate=True)
        it.allocate_tensors()
        inp, out = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
        it.set_tensor(inp, np.full(256, 5, np.float32))
        it.invoke()  # used before the fork

        def x_of(k):
            return np.random.default_rng(k).standard_normal(256).astype(np.float32)

        def first(_):  # each pool process, before it sets anything: the values it had at the fork
            return it.get_tensor(inp).tobytes(), it.get_tensor(out).tobytes()

        def work(k):
            it.set_tensor(inp, x_of(k))
            it.invoke()
            return k, it.get_tensor(out).tobytes(), it.worker_pid

        ctx = mp.get_context("fork")
        with ctx.Pool(2) as pool:
            seen = pool.map(first, range(2), chunksize=1)
        assert all(s == (np.full(256, 5, np.float32).tobytes(), np.full(256, 11, np.float32).tobytes()) for s in seen), "values at the fork"
        with ctx.Pool(4) as pool:
            pending = pool.map_async(work, range(300), chunksize=1)
            mine = []
            while not pending.ready():  # the parent keeps using its own worker meanwhile
                k = 10_000 + len(mine)
                it.set_tensor(inp, x_of(k))
                it.invoke()
                mine.append((k, it.get_tensor(out).tobytes(), it.worker_pid))
            results = pending.get(timeout=120)
        wrong = 0
        for k, got, pid in results + mine:
            ref.set_tensor(ref.get_input_details()[0]["index"], x_of(k))
            ref.invoke()
            wrong += got != ref.get_tensor(ref.get_output_details()[0]["index"]).tobytes()
        assert all(pid != it.worker_pid for _k, _g, pid in results)
        print("wrong", wrong, "of", len(results) + len(mine))
        it.close()
        """,
        timeout=300,
    )
    assert p.returncode == 0, crashed(p)
    assert "wrong 0 of" in p.stdout, p.stdout


def test_a_forked_copy_of_a_stateful_model_that_ran_is_refused():
    """A model with variables that has run cannot be re-created with its state: ClosedError, with the reason."""
    p = run_child(
        """
        import os, numpy as np, opaque_ops as oo
        from opaque_ops.model import ModelBuilder
        b = ModelBuilder()
        x = b.add_tensor("x", [1], np.float32)
        y = b.add_tensor("y", [1], np.float32)
        b.add_op("ADD", inputs=[x, x], outputs=[y], options={"fused_activation_function": "NONE"})
        b.set_inputs([x]); b.set_outputs([y])
        it = oo.Interpreter(model_content=b.build(), isolate=True)
        it.allocate_tensors()
        it._stateful = True  # as the worker reports for a model with VAR_HANDLE or variable tensors
        it.invoke()
        pid = os.fork()
        if pid == 0:
            try:
                it.invoke()
                os._exit(1)
            except oo.ClosedError as exc:
                os._exit(0 if "keeps state between invokes" in str(exc) and "fork" in str(exc) else 2)
        _, status = os.waitpid(pid, 0)
        it.invoke()  # the parent's own is untouched
        print("child", os.waitstatus_to_exitcode(status))
        """,
        timeout=120,
    )
    assert p.returncode == 0 and "child 0" in p.stdout, crashed(p)


# ---------------------------------------------------------------- item 7
@pytest.mark.parametrize("trigger", ["killed", "exits", "chatty"])
def test_a_forked_child_notices_its_workers(trigger):
    """Before: in a child forked from a process that had used isolation, nothing watched the
    new worker: its death or a full stderr pipe made invoke() wait forever."""
    p = run_child(
        """
        import os, signal, sys, time, numpy as np, opaque_ops as oo
        from tests.helpers.misbehaving_kernels import one_op
        from tests.helpers.isolate_lifecycle_ops import op
        trigger = sys.argv[1]
        model = one_op("Twice")
        with oo.Interpreter(model_content=model, custom_ops=[op("twice")], isolate=True) as it:
            it.allocate_tensors(); it.invoke()  # isolation used: the watcher thread runs here
        pid = os.fork()
        if pid == 0:
            it = oo.Interpreter(model_content=model, custom_ops=[op("twice" if trigger == "killed" else trigger)],
                                isolate=True)
            it.allocate_tensors()
            it.set_tensor(0, np.arange(4, dtype=np.float32))
            if trigger == "killed":
                os.kill(it.worker_pid, signal.SIGKILL)
            try:
                it.invoke()
                ok = trigger == "chatty" and it.get_tensor(1).tolist() == [1.0, 3.0, 5.0, 7.0]
            except oo.RuntimeCrashError:
                ok = trigger != "chatty"
            os._exit(0 if ok else 1)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                print("child", os.waitstatus_to_exitcode(status))
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
            print("child hung")
        """,
        trigger,
        timeout=120,
    )
    assert p.returncode == 0, crashed(p)
    assert "child 0" in p.stdout, p.stdout + p.stderr[-2000:]


# ---------------------------------------------------------------- item 8
def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"  # a zombie: dead, waiting for a reaper


def test_the_worker_dies_with_a_killed_parent_even_while_python_spins():
    """Before: a python_op spinning in the worker kept it alive (100 % CPU) after its parent was SIGKILLed."""
    code = """
        import sys, numpy as np, opaque_ops as oo
        from tests.helpers.misbehaving_kernels import one_op
        from tests.helpers.isolate_lifecycle_ops import op
        it = oo.Interpreter(model_content=one_op("Twice"), custom_ops=[op("spins")], isolate=True)
        it.allocate_tensors()
        print(it.worker_pid, flush=True)
        it.invoke()
    """
    import textwrap

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    try:
        worker = int(parent.stdout.readline())
        time.sleep(1.0)  # let the invoke reach the spinning op
        assert not _gone(worker)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while not _gone(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = not _gone(worker)
    if alive:
        os.kill(worker, signal.SIGKILL)
    assert not alive, "the worker outlived its SIGKILLed parent"


# ---------------------------------------------------------------- item 9
def test_a_pickled_copy_runs_the_model_loaded_at_creation(tmp_path):
    """Before: pickling re-read model_path, so a file changed since creation gave another model."""
    path = tmp_path / "model.tflite"
    path.write_bytes(_add_model(1.0))
    it = oo.Interpreter(model_path=str(path), isolate=True)
    path.write_bytes(_add_model(100.0))  # same shapes, other numbers
    blob = pickle.dumps(it)
    it.close()
    path.unlink()
    dump = tmp_path / "it.pickle"
    dump.write_bytes(blob)
    p = run_child(
        """
        import pickle, sys, numpy as np
        it = pickle.loads(open(sys.argv[1], "rb").read())
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], np.arange(5, dtype=np.float32).reshape(1, 5))
        it.invoke()
        print(it.get_tensor(it.get_output_details()[0]["index"]).tobytes().hex())
        it.close()
        """,
        str(dump),
        timeout=120,
    )
    assert p.returncode == 0, crashed(p)
    expected = (np.arange(5, dtype=np.float32).reshape(1, 5) + np.float32(1.0)).tobytes().hex()
    assert p.stdout.strip().splitlines()[-1] == expected


def test_errors_name_the_model_file_as_in_process(tmp_path):
    path = tmp_path / "broken.tflite"
    path.write_bytes(b"not a model" * 10)
    errors = []
    for isolate in (False, True):
        with pytest.raises(oo.OpaqueOpsError) as info:
            oo.Interpreter(model_path=str(path), isolate=isolate)
        errors.append(info.value)
    assert type(errors[0]) is type(errors[1]) and str(errors[0]) == str(errors[1])
    assert str(path) in str(errors[1])


# ---------------------------------------------------------------- item 12
def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_failed_creations_leak_no_descriptors():
    """Before: each failed creation whose exception was kept held the control page's descriptor."""
    kept = []

    def fail():
        for kwargs in (
            {"model_content": b"not a model" * 10},
            {"model_content": one_op("Twice"), "custom_ops": [op("twice")], "timeout": 1e-6},
        ):
            try:
                oo.Interpreter(**kwargs, isolate=True)
            except oo.OpaqueOpsError as exc:
                kept.append(exc)  # an exception kept by the caller, traceback and all
            else:  # pragma: no cover
                raise AssertionError("creation should have failed")

    fail()  # the first one starts the stderr watcher (its wake-up pipe stays)
    gc.collect()
    before = _fds()
    for _ in range(10):
        fail()
    deadline = time.monotonic() + 10
    while True:
        gc.collect()
        after = _fds()
        if after <= before or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert after <= before, f"{after - before} descriptors leaked by 20 failed creations"
    assert len(kept) == 22


_VALUES = [
    np.array([[1, "a", None, 2, 3]], dtype=object),
    memoryview(np.arange(5, dtype=np.float32).reshape(1, 5)),
    [[1.0, 2.0, 3.0, 4.0, 5.0]],
    np.ones((1, 5), np.float64),
    np.ones((1, 4), np.float32),
    "abc",
]


@pytest.mark.parametrize("value", _VALUES, ids=["object", "memoryview", "list", "float64", "shape", "str"])
def test_set_tensor_answers_as_in_process(value):
    """Before: an object array gave TypeError isolated, and a memoryview was refused."""
    model = _add_model(1.0)
    outcomes = []
    for isolate in (False, True):
        with oo.Interpreter(model_content=model, isolate=isolate) as it:
            it.allocate_tensors()
            try:
                it.set_tensor(it.get_input_details()[0]["index"], value)
                it.invoke()
                outcomes.append(("ok", it.get_tensor(it.get_output_details()[0]["index"]).tobytes()))
            except Exception as exc:  # noqa: BLE001 - compared below
                outcomes.append((type(exc), str(exc)))
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("limit", [1000, 2**70, -1, 0, float("nan"), float("inf"), "lots", "1k", True, [1]])
def test_odd_memory_limits_are_refused_naming_the_cap(limit):
    """Before: a bare MemoryError, "can't start new thread" or "Python int too large"."""
    with pytest.raises(oo.InvalidInputError) as info:
        oo.Interpreter(model_content=_add_model(1.0), isolate=True, memory_limit=limit)
    assert "memory_limit=" in str(info.value) and "16M" in str(info.value)


def test_a_cap_hit_while_the_worker_starts_is_named():
    from opaque_ops.isolate.process import _cap_text

    assert "memory_limit=1000 bytes" in _cap_text(1000) and "raise memory_limit" in _cap_text(1000)


@pytest.mark.parametrize("timeout", [0, -1, -0.5, float("nan"), float("inf"), "5", True])
def test_odd_timeouts_are_refused(timeout):
    """Before: timeout=0 or negative was accepted and killed the worker at creation."""
    with pytest.raises(oo.InvalidInputError, match=r"timeout=.*greater than 0"):
        oo.Interpreter(model_content=_add_model(1.0), isolate=True, timeout=timeout)
    with oo.Interpreter(model_content=_add_model(1.0), isolate=True) as it:
        it.allocate_tensors()
        with pytest.raises(oo.InvalidInputError, match=r"timeout=.*greater than 0"):
            it.invoke(timeout=timeout)
        it.invoke()  # still usable


@pytest.mark.parametrize("args", [["--timeout", "-1"], ["--timeout", "0"], ["--memory-limit", "1k"]])
def test_cli_odd_isolation_limits_are_usage_errors(tmp_path, args):
    """Before: ``run --isolate --timeout -1`` exited 3, the "crashed" code."""
    path = tmp_path / "m.tflite"
    path.write_bytes(_add_model(1.0))
    p = run_cli("run", "--isolate", *args, str(path))
    assert p.returncode == 2, crashed(p)
    assert "timeout" in p.stderr or "memory_limit" in p.stderr


def test_a_worker_started_from_a_thread_outlives_that_thread():
    """PR_SET_PDEATHSIG counts the thread that started a worker as its parent: workers are
    started from one long-lived thread, so an interpreter made in a short-lived thread lives on."""
    import threading

    box = []
    t = threading.Thread(target=lambda: box.append(oo.Interpreter(model_content=_add_model(1.0), isolate=True)))
    t.start()
    t.join()
    it = box.pop()
    time.sleep(0.5)  # give a wrongly tied worker the time to die
    it.allocate_tensors()
    it.set_tensor(0, np.ones((1, 5), np.float32))
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), np.full((1, 5), 2, np.float32))
    it.close()
