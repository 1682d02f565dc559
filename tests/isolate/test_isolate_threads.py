"""Isolated interpreters and threads: one worker per interpreter, and close() under a running call."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import opaque_ops as oo
from tests.helpers.locations import ROOT
from tests.helpers.misbehaving_kernels import one_op, twice

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_four_threads_on_four_isolated_interpreters(bad_ops):
    """Each thread checks every result against its own input: any cross-talk between
    interpreters (a shared buffer, a reply read by the wrong caller) fails it."""
    its = [oo.Interpreter(model_content=one_op("Twice", n=64), custom_ops=[bad_ops], isolate=True) for _ in range(4)]
    assert len({it.worker_pid for it in its}) == 4
    for it in its:
        it.allocate_tensors()
    barrier = threading.Barrier(4)
    errors: list = []
    overlap = {"max": 0, "now": 0}
    lock = threading.Lock()

    def work(k, it):
        rng = np.random.default_rng(k)
        out = it.get_output_details()[0]["index"]
        try:
            barrier.wait()
            for i in range(300):
                x = (rng.standard_normal(64) + 1000 * k + i).astype(np.float32)
                with lock:
                    overlap["now"] += 1
                    overlap["max"] = max(overlap["max"], overlap["now"])
                it.set_tensor(0, x)
                it.invoke()
                y = it.get_tensor(out)
                with lock:
                    overlap["now"] -= 1
                if not np.array_equal(y, twice(x)):
                    errors.append((k, i))
                    return
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append((k, repr(exc)))

    threads = [threading.Thread(target=work, args=(k, it)) for k, it in enumerate(its)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for it in its:
        it.close()
    assert not errors, errors
    assert overlap["max"] > 1  # the calls really ran at the same time


def test_one_isolated_interpreter_from_two_threads_serializes_calls(bad_ops):
    """Every public call holds the interpreter's lock: a set_tensor from another thread,
    issued while the worker is inside invoke, waits for it, so the invoke's result belongs
    to its own input (the kernel reads its input only 200 ms into the node)."""
    from opaque_ops.isolate import protocol as P

    it = oo.Interpreter(model_content=one_op("LateRead"), custom_ops=[bad_ops], isolate=True)
    it.allocate_tensors()
    out = it.get_output_details()[0]["index"]
    x0 = np.full(4, 1, np.float32)
    it.set_tensor(0, x0)
    words = it._proc.words
    assert words[P.STAGE // 4] != P.STAGE_CODES["invoke"]
    meddled = []

    def meddle():
        deadline = time.monotonic() + 30
        while words[P.STAGE // 4] != P.STAGE_CODES["invoke"] and time.monotonic() < deadline:
            time.sleep(0.0002)
        t0 = time.monotonic()
        it.set_tensor(0, np.full(4, 50, np.float32))
        meddled.append(time.monotonic() - t0)

    t = threading.Thread(target=meddle)
    t.start()
    it.invoke()
    y = it.get_tensor(out)
    t.join()
    np.testing.assert_array_equal(y, twice(x0))
    assert meddled and meddled[0] > 0.05  # it did wait for the invoke
    it.close()


def test_close_while_the_worker_is_mid_invoke(bad_ops):
    it = oo.Interpreter(model_content=one_op("Spin"), custom_ops=[bad_ops], isolate=True)
    it.allocate_tensors()
    pid = it.worker_pid
    caught: list = []

    def run():
        try:
            it.invoke()
        except BaseException as exc:  # noqa: BLE001 - checked below
            caught.append(exc)

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    it.close()
    t.join(timeout=30)
    assert not t.is_alive()
    assert time.monotonic() - t0 < 10
    assert len(caught) == 1 and isinstance(caught[0], oo.ClosedError), caught
    assert "closed while" in str(caught[0])
    import os

    assert not os.path.exists(f"/proc/{pid}")  # reaped, not a zombie


def test_worker_does_not_outlive_its_parent(tmp_path):
    """A parent killed with SIGKILL (no cleanup at all): its worker exits by itself."""
    import os
    import signal
    import subprocess
    import sys

    script = tmp_path / "parent.py"
    script.write_text(
        "import time\n"
        "import numpy as np, opaque_ops as oo\n"
        "from opaque_ops.testing import build_op_model\n"
        "it = oo.Interpreter(model_content=build_op_model('Nope', [np.zeros(2, np.float32)], [([2], np.float32)]),"
        " isolate=True)\n"
        "print(it.worker_pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    # Popen, not the tests' child runner (tests.helpers.child_process): the parent is killed while it
    # runs.  The checkout's opaque_ops, as the runner would give it.
    p = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT))
    )
    worker = int(p.stdout.readline())
    assert os.path.exists(f"/proc/{worker}")
    p.send_signal(signal.SIGKILL)
    p.wait()
    deadline = time.monotonic() + 20
    while os.path.exists(f"/proc/{worker}") and time.monotonic() < deadline:
        # Reparented to init (or a subreaper): gone once it exits and is reaped.
        with open(f"/proc/{worker}/stat") as f:
            if f.read().rsplit(") ", 1)[1][0] == "Z":
                break
        time.sleep(0.05)
    alive = os.path.exists(f"/proc/{worker}")
    if alive:
        with open(f"/proc/{worker}/stat") as f:
            alive = f.read().rsplit(") ", 1)[1][0] != "Z"
    assert not alive, "the worker kept running after its parent died"
