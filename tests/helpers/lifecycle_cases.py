"""The lifecycle attack matrix of issue 17: every public object crossed with every lifecycle event.

One table, :func:`cases`, generates the (object, event) pairs; each pair runs
in a fresh child process (:func:`run_case`, through the project's child
runner), which builds the object from files in its own directory, applies
the event, and compares every output with the in-process reference run.
A case ends in one of:

- ``ok (same bits)``: every output was bit-identical to the reference;
- ``clean error <class>: <message>``: an :class:`opaque_ops.OpaqueOpsError`
  (every output before it was bit-identical);
- ``CRASH <how>``, ``HANG <where>``, ``WRONG <what>``, ``UNCLEAN <class>``
  (another exception class): failures.

The objects are :mod:`tests.helpers.lifecycle_subjects`; the events are the
``ev_*`` functions here, each run in the child by :func:`child_main`.
``tests/lifecycle/test_matrix.py`` runs every case once; ``tools/lifecycle_matrix.py``
runs them repeatedly, with timing variations, and prints a table.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.child_process import ROOT, run_child

MARK = "LIFECYCLE-OUTCOME "
NEVER = object()  # the reference of a call that must end in a clean error
FAILURES = ("CRASH", "HANG", "WRONG", "UNCLEAN")
# Nested processes (forked children, the process that unpickles) get this long before they count as hung.
NESTED_TIMEOUT = float(os.environ.get("OPAQUE_OPS_LIFECYCLE_NESTED_TIMEOUT", "10"))
# The whole case gets this long inside its child before it reports HANG itself.
CASE_BUDGET = float(os.environ.get("OPAQUE_OPS_LIFECYCLE_CASE_BUDGET", "25"))


# ------------------------------------------------------------------ the child side


class Verdict(Exception):
    """A failure found inside the case (a nested crash, a hang, a different number)."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind} {detail}")
        self.kind, self.detail = kind, detail


class Case:
    """What a case's child knows: its subject kind, its files, its options, and the clean errors seen."""

    def __init__(self, kind: str, files: dict, options: dict):
        self.kind, self.files, self.options = kind, files, options
        self.clean: list[str] = []
        self.rng_seed = int(options.get("seed", 0))

    def check(self, what: str, fn, ref):
        """Run ``fn``; its result must equal ``ref`` bit for bit, or it must raise an OpaqueOpsError."""
        import opaque_ops as oo

        try:
            got = fn()
        except oo.OpaqueOpsError as e:
            self.clean.append(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} [{what}]")
            return None
        same_bits(what, got, ref)
        return got


def same_bits(what: str, got, ref) -> None:
    import numpy as np

    if ref is NEVER:
        raise Verdict("WRONG", f"{what}: returned {np.asarray(got).ravel()[:6]} instead of raising an OpaqueOpsError")
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape or got.dtype != ref.dtype or got.tobytes() != ref.tobytes():
        raise Verdict(
            "WRONG", f"{what}: got {got.dtype}{list(got.shape)} {got.ravel()[:6]}, expected {ref.ravel()[:6]}"
        )


def in_fork(fn, timeout: float = NESTED_TIMEOUT) -> dict:
    """Run ``fn()`` in a forked child; returns its outcome dict or raises Verdict for a crash or hang."""
    return _finish_fork(_start_fork(fn), timeout)


def outcome_of(fn) -> dict:
    """Run a case body and classify how it ended."""
    import opaque_ops as oo

    try:
        clean = fn()
    except Verdict as v:
        return {"outcome": v.kind, "detail": v.detail}
    except oo.OpaqueOpsError as e:
        return {"outcome": "clean", "detail": f"{type(e).__name__}: {e}"}
    except Exception as e:  # noqa: BLE001 - a foreign class is the finding
        return {"outcome": "UNCLEAN", "detail": f"{type(e).__name__}: {e}"}
    if clean:
        return {"outcome": "clean", "detail": clean[0]}
    return {"outcome": "ok", "detail": ""}


def nested_outcome(where: str, out: dict, case: Case) -> None:
    """Fold a nested process's outcome into the case's."""
    if out["outcome"] in FAILURES:
        raise Verdict(out["outcome"], f"{where}: {out['detail']}")
    if out["outcome"] == "clean":
        case.clean.append(f"{out['detail']} [{where}]")


UNPICKLE = r"""
import json, pickle, sys
import numpy as np
from tests.helpers import lifecycle_cases as lc, lifecycle_subjects as ls
kind, files = sys.argv[1], {k: __import__("pathlib").Path(v) for k, v in json.loads(sys.argv[2]).items()}
data = sys.stdin.buffer.read()
def body():
    obj = pickle.loads(data)
    s = ls.Subject(kind, files)
    if kind == "signature":
        s.runner = obj
        s.it = object()
    elif kind in ls.LIBRARY_KINDS:
        s.obj, s.it = obj, ls.interpreter_for(kind, files, obj)
    else:
        s.it = obj
    out = s.run()
    print("RESULT " + json.dumps({"dtype": str(out.dtype), "shape": list(out.shape), "hex": out.tobytes().hex()}))
    return []
print(lc.MARK + json.dumps(lc.outcome_of(body)))
"""


def in_other_process(case: Case, data: bytes, ref) -> None:
    """Unpickle ``data`` in a fresh Python, run it there, and fold the result in."""
    import numpy as np

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    files = json.dumps({k: str(v) for k, v in case.files.items()})
    try:
        p = subprocess.run(
            [sys.executable, "-c", UNPICKLE, case.kind, files],
            input=data,
            capture_output=True,
            timeout=NESTED_TIMEOUT * 2,
            env=env,
        )
    except subprocess.TimeoutExpired:
        raise Verdict("HANG", "in the process that unpickled") from None
    if p.returncode < 0:
        raise Verdict("CRASH", f"the process that unpickled: signal {-p.returncode}")
    lines = p.stdout.decode(errors="replace").splitlines()
    marks = [ln for ln in lines if ln.startswith(MARK)]
    if not marks:
        raise Verdict("CRASH", f"the process that unpickled: exit {p.returncode}: {p.stderr.decode()[-300:]}")
    out = json.loads(marks[-1][len(MARK) :])
    for ln in lines:
        if ln.startswith("RESULT "):
            r = json.loads(ln[7:])
            got = np.frombuffer(bytes.fromhex(r["hex"]), r["dtype"]).reshape(r["shape"])
            same_bits("unpickled in another process", got, ref)
    nested_outcome("unpickled in another process", out, case)


# ------------------------------------------------------------------ the events


def ev_baseline(case: Case, ls) -> None:
    """Three runs in a row."""
    ref = ls.reference(case.kind, case.files)
    s = ls.make(case.kind, case.files)
    for i in range(3):
        case.check(f"run {i}", s.run, ref)


def _fork_event(case: Case, ls, *, use_first: bool, threads: bool) -> None:
    import numpy as np

    x1 = ls.DELEGATE_X if case.kind == "delegate" else ls.X
    x2 = x1 * np.float32(0.5)
    ref1, ref2 = ls.reference(case.kind, case.files, x1), ls.reference(case.kind, case.files, x2)
    s = ls.make(case.kind, case.files, **({"num_threads": 2} if threads else {}))
    if use_first:
        case.check("before fork", lambda: s.run(x1), ref1)
    stop = threading.Event()
    bg_errors: list = []

    def background():
        while not stop.is_set():
            try:
                same_bits("background thread", s.run(x1), ref1)
            except Exception as e:  # noqa: BLE001 - reported below
                bg_errors.append(e)
                return

    bg = threading.Thread(target=background, daemon=True) if threads else None
    if bg:
        bg.start()
        time.sleep(0.01)

    def child():
        c = Case(case.kind, case.files, case.options)
        for i in range(20):
            c.check(f"forked child run {i}", lambda: s.run(x2), ref2)
        return c.clean

    # The parent runs at the same time as the child: a shared worker would mix their outputs.
    parent_result: dict = {}

    def parent_loop():
        def runs():
            for i in range(20):
                case.check(f"parent run {i}", lambda: s.run(x1), ref1)
            return []

        parent_result["out"] = outcome_of(runs)

    pid_out = None
    parent_thread = threading.Thread(target=parent_loop)
    try:
        # The fork happens first (from this thread), then both sides run together.
        forked = _start_fork(child)
        parent_thread.start()
        pid_out = _finish_fork(forked)
        parent_thread.join(NESTED_TIMEOUT)
        if parent_thread.is_alive():
            raise Verdict("HANG", "the parent's runs after the fork")
    finally:
        stop.set()
        if bg:
            bg.join(NESTED_TIMEOUT)
    nested_outcome("forked child", pid_out, case)
    nested_outcome("parent after fork", parent_result["out"], case)
    if bg and bg.is_alive():
        raise Verdict("HANG", "the parent's background thread")
    for e in bg_errors:
        if isinstance(e, Verdict):
            raise e
        import opaque_ops as oo

        if not isinstance(e, oo.OpaqueOpsError):
            raise Verdict("UNCLEAN", f"background thread: {type(e).__name__}: {e}")


def _start_fork(fn):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = outcome_of(fn)
        except BaseException as e:  # noqa: BLE001
            out = {"outcome": "UNCLEAN", "detail": f"{type(e).__name__}: {e}"}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    return pid, r


def _finish_fork(forked, timeout: float = NESTED_TIMEOUT) -> dict:
    pid, r = forked
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(r)
            raise Verdict("HANG", f"in the forked child (killed after {timeout:g} s)")
        time.sleep(0.02)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    if os.WIFSIGNALED(status):
        raise Verdict("CRASH", f"forked child: signal {os.WTERMSIG(status)}")
    if not data:
        raise Verdict("CRASH", f"forked child: exit {os.WEXITSTATUS(status)} with no outcome")
    return json.loads(data)


def ev_fork_before_use(case, ls):
    """Fork after creation, before the first invoke; parent and child run together."""
    _fork_event(case, ls, use_first=False, threads=False)


def ev_fork_after_use(case, ls):
    """Fork after a first invoke; parent and child run together."""
    _fork_event(case, ls, use_first=True, threads=False)


def ev_fork_with_threads(case, ls):
    """num_threads=2 and a Python thread invoking while the process forks."""
    _fork_event(case, ls, use_first=True, threads=True)


def ev_fork_then_new_worker_dies(case, ls):
    """In a forked child of a process that used isolation, a new isolated interpreter whose worker is killed."""
    ref = ls.reference(case.kind, case.files)
    s = ls.make(case.kind, case.files)
    case.check("parent", s.run, ref)

    def child():
        c = Case(case.kind, case.files, case.options)
        t = ls.make(case.kind, case.files)
        c.check("new isolated interpreter in the child", t.run, ref)
        os.kill(t.it.worker_pid, signal.SIGKILL)
        c.check("after its worker was killed", t.run, ref)
        c.check("the next call", t.run, ref)
        return c.clean

    nested_outcome("forked child", in_fork(child), case)


def _pickle_event(case: Case, ls, change: str) -> None:
    ref = ls.reference(case.kind, case.files)
    s = ls.make(case.kind, case.files)
    case.check("before pickling", s.run, ref)
    target = s.obj if case.kind in ls.LIBRARY_KINDS or case.kind == "signature" else s.it
    data = pickle.dumps(target)
    # The files the pickle was made from: the model, or the library's own file, or the plugin.
    if case.kind in ls.LIBRARY_KINDS:
        paths = [Path(s.obj.path)]
        replacement = case.files["other_library"].read_bytes()
    elif case.kind == "delegate":
        paths = [case.files["delegate_model"], case.files["plugin"]]
        replacement = None
    else:
        paths = [case.files["model"]]
        replacement = case.files["other_model"].read_bytes()
    for p in paths:
        if change == "changed":
            if replacement is None:
                # a plugin rebuilt to add another constant is not at hand: another valid model instead
                if p.suffix == ".tflite":
                    p.write_bytes(case.files["delegate_model"].read_bytes())
                continue
            p.write_bytes(replacement)
        elif change == "damaged":
            data_p = p.read_bytes()
            p.write_bytes(data_p[: len(data_p) // 2])
        elif change == "removed":
            p.unlink()
    in_other_process(case, data, ref)


def ev_pickle_intact(case, ls):
    """Pickle, then unpickle and run in another process."""
    _pickle_event(case, ls, "intact")


def ev_pickle_source_changed(case, ls):
    """Pickle; replace the source file (model, library, cache entry) with another valid one; unpickle elsewhere."""
    _pickle_event(case, ls, "changed")


def ev_pickle_source_damaged(case, ls):
    """Pickle; truncate the source file to half; unpickle elsewhere."""
    _pickle_event(case, ls, "damaged")


def ev_pickle_source_removed(case, ls):
    """Pickle; delete the source file; unpickle elsewhere."""
    _pickle_event(case, ls, "removed")


def ev_close_then_use(case, ls):
    """close(), close() again, gc, then every call."""
    ref = ls.reference(case.kind, case.files)
    s = ls.make(case.kind, case.files)
    case.check("before close", s.run, ref)
    out = s.it.get_output_details()[0]["index"] if hasattr(s.it, "get_output_details") else None
    view = s.it.tensor(out) if case.kind == "view" else None
    s.close()
    s.close()
    gc.collect()
    case.check("run after close", s.run, ref)
    if view is not None:
        case.check("a view read after close", lambda: view().copy(), ref)


def ev_drop_without_close(case, ls):
    """Drop every reference without close(), gc, and build it again from the same files."""
    ref = ls.reference(case.kind, case.files)
    s = ls.make(case.kind, case.files)
    case.check("first", s.run, ref)
    keep = s.it.tensor(s.it.get_output_details()[0]["index"]) if case.kind == "view" else None
    del s
    gc.collect()
    t = ls.make(case.kind, case.files)
    case.check("a new one after gc", t.run, ref)
    if keep is not None:
        case.check("a view whose interpreter was collected", lambda: keep().copy(), ref)


def ev_drop_object_first(case, ls):
    """Drop the object (library, op, delegate, runner's interpreter) before what uses it; gc; run."""
    ref = ls.reference(case.kind, case.files)
    s = ls.make(case.kind, case.files)
    case.check("first", s.run, ref)
    if case.kind == "signature":
        runner = s.runner
        s.it = None
        gc.collect()
        case.check("runner after its interpreter was dropped", lambda: runner(x=ls.X)["y"].copy(), ref)
        return
    if case.kind == "view":
        view = s.it.tensor(s.it.get_output_details()[0]["index"])
        s.it = None
        gc.collect()
        case.check("view after its interpreter was dropped", lambda: view().copy(), ref)
        return
    s.obj = None
    gc.collect()
    case.check("interpreter after its op object was dropped", s.run, ref)


def ev_thread_race(case, ls):
    """Two threads calling the same object at once."""
    import numpy as np

    x1 = ls.DELEGATE_X if case.kind == "delegate" else ls.X
    # Atomic calls (a runner, a shared library in two interpreters) get different inputs; a
    # set/invoke/get sequence on one interpreter is not atomic, so both threads use the same input.
    own = case.kind == "signature" or case.kind in ls.LIBRARY_KINDS
    xs = [x1, x1 * np.float32(0.5) if own else x1]
    refs = [ls.reference(case.kind, case.files, x) for x in xs]
    s = ls.make(case.kind, case.files)
    its = [s.it, ls.interpreter_for(case.kind, case.files, s.obj)] if case.kind in ls.LIBRARY_KINDS else [s.it, s.it]
    errors: list = []
    barrier = threading.Barrier(2)

    def work(k):
        try:
            barrier.wait()
            for i in range(30):
                case.check(f"thread {k} run {i}", lambda: s.run(xs[k], it=its[k]), refs[k])
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(NESTED_TIMEOUT)
        if t.is_alive():
            raise Verdict("HANG", "a racing thread")
    for e in errors:
        raise e


def _with_timer(handler, fn):
    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.0003, 0.0003)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, old)


def ev_signal_during_call(case, ls):
    """A SIGALRM every 0.3 ms (a Python handler) through 100 runs."""
    ref = ls.reference(case.kind, case.files)
    s = ls.make(case.kind, case.files)
    hits = [0]

    def handler(signum, frame):
        hits[0] += 1

    def loop():
        for i in range(100):
            case.check(f"run {i}", s.run, ref)

    _with_timer(handler, loop)


def ev_signal_handler_reenters(case, ls):
    """A signal handler that calls the interpreter (get_tensor, set_tensor) while a call is running."""
    import opaque_ops as oo

    ref = ls.reference(case.kind, case.files)
    s = ls.make(case.kind, case.files)
    it = s.it
    d_in, d_out = it.get_input_details()[0], it.get_output_details()[0]
    x = s.default_input()

    busy = [False]

    def handler(signum, frame):
        if busy[0]:
            return  # a signal during the handler itself: Python would nest the handlers without end
        busy[0] = True
        try:
            it.get_tensor(d_out["index"])
            it.set_tensor(d_in["index"], x)
        except oo.ReentrantCallError:
            pass
        finally:
            busy[0] = False

    def loop():
        # Mostly the set_tensor/get_tensor fast paths, where the signal is most likely to land.
        for i in range(1500):
            it.set_tensor(d_in["index"], x)
            it.get_tensor(d_out["index"])
            if i % 50 == 0:
                case.check(f"run {i}", s.run, ref)

    _with_timer(handler, loop)


def _isolated_pyop(case, ls, **kw):
    ref = ls.reference(case.kind, case.files)
    s = ls.make(case.kind, case.files, **kw)
    case.check("before", s.run, ref)
    return s, ref


def _command(ls, value):
    x = ls.X.copy()
    x[0] = value
    return x


def ev_worker_sigkill(case, ls):
    """SIGKILL the worker between calls; the next calls."""
    s, ref = _isolated_pyop(case, ls)
    os.kill(s.it.worker_pid, signal.SIGKILL)
    time.sleep(0.1)
    for i in range(3):
        case.check(f"call {i} after the kill", s.run, ref)


def ev_worker_sigkill_during_call(case, ls):
    """SIGKILL the worker while it runs a (sleeping) op; the next calls."""
    s, ref = _isolated_pyop(case, ls)
    pid = s.it.worker_pid
    threading.Timer(0.3, lambda: os.kill(pid, signal.SIGKILL)).start()
    case.check("the call during which the worker is killed", lambda: s.run(_command(ls, ls.SLEEP)), NEVER)
    for i in range(2):
        case.check(f"call {i} after", s.run, ref)


def ev_worker_exit(case, ls):
    """The op calls os._exit(3) in the worker; the next calls."""
    s, ref = _isolated_pyop(case, ls)
    case.check("the call that exits", lambda: s.run(_command(ls, ls.EXIT)), NEVER)
    for i in range(2):
        case.check(f"call {i} after", s.run, ref)


def ev_worker_oom(case, ls):
    """memory_limit=512M and an op that allocates 2 GiB; the next calls."""
    s, ref = _isolated_pyop(case, ls, memory_limit="512M")
    case.check("the call that runs out of memory", lambda: s.run(_command(ls, ls.HOG)), NEVER)
    for i in range(2):
        case.check(f"call {i} after", s.run, ref)


def ev_worker_timeout(case, ls):
    """invoke(timeout=0.5) on an op that sleeps 30 s; the next calls."""
    s, ref = _isolated_pyop(case, ls)
    case.check("the call that times out", lambda: s.run(_command(ls, ls.SLEEP), timeout=0.5), NEVER)
    for i in range(2):
        case.check(f"call {i} after", s.run, ref)


PARENT_KILLED = r"""
import sys, json
from pathlib import Path
from tests.helpers import lifecycle_subjects as ls
files = {k: Path(v) for k, v in json.loads(sys.argv[1]).items()}
s = ls.make("isolated_pyop", files)
s.run()
print(s.it.worker_pid, flush=True)
x = ls.X.copy(); x[0] = ls.SPIN
s.run(x)
"""


def ev_parent_sigkilled(case, ls):
    """The parent is SIGKILLed while the worker's python_op spins holding the GIL: the worker must end."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    files = json.dumps({k: str(v) for k, v in case.files.items()})
    p = subprocess.Popen(
        [sys.executable, "-c", PARENT_KILLED, files], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    line = p.stdout.readline().decode().strip()
    if not line.isdigit():
        p.kill()
        p.wait()
        raise Verdict("CRASH", f"the parent process did not start its worker (exit {p.poll()})")
    worker = int(line)
    time.sleep(0.5)  # the op is spinning by now
    p.kill()
    p.wait()
    deadline = time.monotonic() + NESTED_TIMEOUT
    while time.monotonic() < deadline:
        if not _alive(worker):
            return
        time.sleep(0.05)
    os.kill(worker, signal.SIGKILL)
    raise Verdict("WRONG", f"the worker outlived its SIGKILLed parent by more than {NESTED_TIMEOUT:g} s")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _grow_inputs():
    import numpy as np

    rng = np.random.default_rng(0)
    return [rng.normal(0, 10, n).astype(np.float32) for n in (4096, 2, 5, 100_000, 1, 4096)]


def ev_grow_and_shrink(case, ls):
    """The dynamic input grows and shrinks: 4096, 2, 5, 100000, 1, 4096 elements."""
    xs = _grow_inputs()
    refs = [ls.reference(case.kind, case.files, x) for x in xs]
    s = ls.make(case.kind, case.files)
    for x, r in zip(xs, refs):
        case.check(f"size {x.size}", lambda x=x: s.run(x), r)


def ev_view_across_growth(case, ls):
    """A tensor() view held while the tensor grows (and then shrinks) under invoke()."""
    xs = _grow_inputs()
    s = ls.make(case.kind, case.files)
    it = s.it
    d_in, out = it.get_input_details()[0], it.get_output_details()[0]["index"]
    ref = ls.reference(case.kind, case.files)
    case.check("first", s.run, ref)
    for x in xs:
        held = it.tensor(out)()
        before = held.copy()
        try:
            it.resize_tensor_input(d_in["index"], x.shape)
            it.allocate_tensors()
            it.set_tensor(d_in["index"], x)
            it.invoke()
        except Exception as e:  # noqa: BLE001
            import opaque_ops as oo

            if isinstance(e, oo.OpaqueOpsError):
                case.clean.append(f"{type(e).__name__}: {e} [resize or invoke while a view is held]")
                return
            raise
        now = it.get_tensor(out)
        seen = held.copy()
        n = min(seen.size, now.size)
        if not (seen.tobytes() == before.tobytes() or seen[:n].tobytes() == now.ravel()[:n].tobytes()):
            raise Verdict(
                "WRONG", f"a held view shows {seen[:4]}: neither its old values {before[:4]} nor the new output"
            )
        del held


def ev_op_keeps_its_array(case, ls):
    """A python_op that keeps its output array (issue 17 item 10); the array is written after the call."""
    import numpy as np

    ref = ls.reference(case.kind, case.files)
    s = ls.make(case.kind, case.files, keep_arrays=True)
    refused = case.check("run", s.run, ref) is None and case.clean
    if refused or case.kind == "isolated_pyop":
        # Refused at the op's return with a KernelError that says to keep a copy
        # (what item 10 asks); or, isolated, the kept array lives in the worker.
        return
    kept = ls.KEPT[-1]
    s.close()
    gc.collect()
    big = [np.full(10_000, 7, np.float32) for _ in range(50)]
    kept[...] = np.float32(-1)  # a write into memory the interpreter no longer owns
    if any(int((b != 7).sum()) for b in big):
        raise Verdict("WRONG", "the kept array's write landed in another array")
    t = ls.make("interp", case.files)
    case.check("another interpreter after the write", t.run, ls.reference("interp", case.files))
    raise Verdict("WRONG", "a python_op kept its output array and wrote it after the call without an error")


# ------------------------------------------------------------------ the table


EVENTS = {
    "baseline": (ev_baseline, "all"),
    "fork_before_use": (ev_fork_before_use, "all"),
    "fork_after_use": (ev_fork_after_use, "all"),
    "fork_with_threads": (ev_fork_with_threads, "all"),
    "fork_then_new_worker_dies": (ev_fork_then_new_worker_dies, "isolated"),
    "pickle_intact": (ev_pickle_intact, "picklable"),
    "pickle_source_changed": (ev_pickle_source_changed, "picklable"),
    "pickle_source_damaged": (ev_pickle_source_damaged, "picklable"),
    "pickle_source_removed": (ev_pickle_source_removed, "picklable"),
    "close_then_use": (ev_close_then_use, "all"),
    "drop_without_close": (ev_drop_without_close, "all"),
    "drop_object_first": (ev_drop_object_first, "owned"),
    "thread_race": (ev_thread_race, "all"),
    "signal_during_call": (ev_signal_during_call, "all"),
    "signal_handler_reenters": (ev_signal_handler_reenters, "interpreters"),
    "worker_sigkill": (ev_worker_sigkill, "isolated"),
    "worker_sigkill_during_call": (ev_worker_sigkill_during_call, "isolated_pyop"),
    "worker_exit": (ev_worker_exit, "isolated_pyop"),
    "worker_oom": (ev_worker_oom, "isolated_pyop"),
    "worker_timeout": (ev_worker_timeout, "isolated_pyop"),
    "parent_sigkilled": (ev_parent_sigkilled, "isolated_pyop"),
    "grow_and_shrink": (ev_grow_and_shrink, "dynamic"),
    "view_across_growth": (ev_view_across_growth, "views"),
    "op_keeps_its_array": (ev_op_keeps_its_array, "pyops"),
}


SHORT_BUDGET = {"signal_handler_reenters": 8.0}


def _applies(scope: str, kind: str) -> bool:
    from tests.helpers import lifecycle_subjects as ls

    return {
        "all": True,
        "isolated": kind in ls.ISOLATED_KINDS,
        "isolated_pyop": kind == "isolated_pyop",
        "picklable": kind != "view",  # a view is not picklable; its interpreter is "interp"
        "owned": kind in ls.LIBRARY_KINDS or kind in ("pyop", "isolated_pyop", "delegate", "signature", "view"),
        "interpreters": kind not in ("signature",),
        "dynamic": kind != "delegate",  # the delegate's model has a fixed [4] input and a [4] constant
        "views": kind in ("view", "interp", "isolated"),
        "pyops": kind in ("pyop", "isolated_pyop"),
    }[scope]


@dataclass(frozen=True)
class MatrixCase:
    kind: str
    event: str

    @property
    def id(self) -> str:
        return f"{self.kind}-{self.event}"


def cases() -> list[MatrixCase]:
    """Every (object, event) pair that applies, in table order."""
    from tests.helpers import lifecycle_subjects as ls

    return [MatrixCase(k, e) for e, (_, scope) in EVENTS.items() for k in ls.KINDS if _applies(scope, k)]


def child_main(kind: str, event: str, workdir: str, shared: str, options: str) -> None:
    """The case's child process: prepare its files, run the event, print the outcome."""
    shared_d = {k: Path(v) for k, v in json.loads(shared).items()}
    wd = Path(workdir)
    # Every cache entry the case may damage is its own copy.
    os.environ["OPAQUE_OPS_CACHE_DIR"] = str(wd / "cache")
    from tests.helpers import lifecycle_subjects as ls

    files = ls.prepare_dir(wd, shared_d)
    case = Case(kind, files, json.loads(options))
    fn = EVENTS[event][0]

    def body():
        fn(case, ls)
        return case.clean

    # A deadlock shows at once; the events whose legitimate run is short get a shorter budget.
    budget = SHORT_BUDGET.get(event, CASE_BUDGET)

    def watchdog():
        # A call blocked for good (a lock that is never released) still gets its outcome line.
        print(MARK + json.dumps({"outcome": "HANG", "detail": f"the case did not end within {budget:g} s"}))
        sys.stdout.flush()
        os._exit(0)

    dog = threading.Timer(budget, watchdog)
    dog.daemon = True
    dog.start()
    out = outcome_of(body)
    dog.cancel()
    print(MARK + json.dumps(out), flush=True)
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown: a crash there is not this case's event


def prepare_shared(directory: Path) -> dict:
    """Build once what every case copies: a loaded library, another one, the delegate plugin, a warm cache."""
    from opaque_ops.build import standalone
    from tests.helpers.atan import MACRO_ATAN
    from tests.helpers.locations import ADD_DELEGATE_PLUGIN_C

    directory.mkdir(parents=True, exist_ok=True)
    src = directory / "atan.c"
    src.write_text(MACRO_ATAN)
    other = directory / "atan_plus_one.c"
    other.write_text(MACRO_ATAN.replace("(float)atan((double)x[i])", "(float)atan((double)x[i]) + 1.0f"))
    lib = standalone.build_library([src], directory / "atan.so")
    other_lib = standalone.build_library([other], directory / "atan_plus_one.so")
    cc = shutil.which("cc") or shutil.which("gcc")
    plugin = directory / "add_delegate.so"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", "-Wno-unused-parameter", "-o", str(plugin), str(ADD_DELEGATE_PLUGIN_C)],
        check=True,
    )
    cache = directory / "cache"
    warm = r"""
import os, sys
os.environ["OPAQUE_OPS_CACHE_DIR"] = sys.argv[1]
import opaque_ops as oo
oo.kernels.atan()
oo.compile_ops(sys.argv[2], cache_dir=sys.argv[1])
"""
    p = run_child(warm, cache, src, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"warming the matrix's cache failed: {p.stderr[-2000:]}")
    return {"library": lib, "other_library": other_lib, "plugin": plugin, "cache": cache}


CHILD = r"""
import sys
from tests.helpers.lifecycle_cases import child_main
child_main(*sys.argv[1:6])
"""


def run_case(case: MatrixCase, shared: dict, workdir: Path, *, timeout: float = 90, options: dict | None = None) -> str:
    """Run one case in a fresh child process; returns its outcome line (see the module docstring)."""
    shared_s = json.dumps({k: str(v) for k, v in shared.items()})
    try:
        p = run_child(CHILD, case.kind, case.event, workdir, shared_s, json.dumps(options or {}), timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"HANG the case's process (killed after {timeout:g} s)"
    marks = [ln for ln in p.stdout.splitlines() if ln.startswith(MARK)]
    if p.returncode < 0:
        return f"CRASH signal {-p.returncode} ({signal.Signals(-p.returncode).name}): {p.stderr.strip()[-300:]}"
    if not marks:
        return f"CRASH exit {p.returncode} with no outcome: {p.stderr.strip()[-500:]}"
    out = json.loads(marks[-1][len(MARK) :])
    if out["outcome"] == "ok":
        return "ok (same bits)"
    if out["outcome"] == "clean":
        return f"clean error {out['detail']}"
    return f"{out['outcome']} {out['detail']}"


def failed(outcome: str) -> bool:
    return outcome.split(" ", 1)[0] in FAILURES
