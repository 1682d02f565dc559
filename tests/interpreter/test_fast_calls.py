"""The fast calls (opaque_ops.interpreter.fast_calls, c/src/fastcalls.c) against the Python methods.

The C set_tensor / invoke / get_tensor handle the common case of each call
and leave every other case to the Python method.  These tests run the same
call sequences both ways, in two child processes, and require the same
bytes and the same exceptions (class and message); they check that the C
calls really run (no Python frame for a warm call), that they share the
interpreter's lock, and how the module is found, refused and prebuilt.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.interpreter import fast_calls
from tests.helpers.child_process import crashed, run_child, run_python
from tests.helpers.fast_call_scenarios import X
from tests.helpers.fast_module import required_fast_calls
from tests.helpers.fork_locks import assert_child_returns
from tests.helpers.interpreter_models import add_model, tile_model


@pytest.fixture(scope="module")
def module_path() -> str:
    return required_fast_calls()


def _warm():
    it = oo.Interpreter(model_content=add_model())
    it.allocate_tensors()
    it.set_tensor(0, X)
    it.invoke()  # the first invoke after an allocation is watched (Ctrl-C): the Python method
    it.get_tensor(2)
    return it


def _python_frames(fn) -> list[str]:
    """The names of the opaque_ops Python functions that ``fn()`` entered."""
    entered = []

    def profile(frame, event, arg):
        if event == "call" and "opaque_ops" in frame.f_code.co_filename:
            entered.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return entered


def test_warm_calls_run_in_c(module_path):
    it = _warm()
    assert it._fast is not None and it._fast.bound
    assert _python_frames(lambda: it.set_tensor(0, X)) == []
    assert _python_frames(it.invoke) == []
    assert _python_frames(lambda: it.get_tensor(2)) == []
    np.testing.assert_array_equal(it.get_tensor(2), X + np.arange(6, dtype=np.float32).reshape(2, 3))
    # What C leaves to Python reaches the Python method.
    assert "set_tensor" in _python_frames(lambda: it.set_tensor(0, np.asfortranarray(X)))


def test_binding_follows_the_state(module_path):
    it = _warm()
    assert it._fast.bound
    it.resize_tensor_input(0, [3, 2, 3])
    assert not it._fast.bound  # not allocated: invoke must raise NotAllocatedError in Python
    it.allocate_tensors()
    assert not it._fast.bound  # the first invoke after an allocation is watched
    it.invoke()
    assert it._fast.bound
    it.close()
    assert not it._fast.bound


def test_both_ways_give_the_same_bytes_and_errors(module_path):
    """Every scenario of tests/helpers/fast_call_scenarios.py, with and without the fast calls."""
    runs = {}
    for name, setting in (("fast", module_path), ("python", "0")):
        p = run_python("-m", "tests.helpers.fast_call_scenarios", env={"OPAQUE_OPS_FASTCALLS": setting}, timeout=300)
        assert p.returncode == 0, crashed(p)
        runs[name] = json.loads(p.stdout.strip().splitlines()[-1])
    assert runs["fast"].pop("fast calls") is True
    assert runs["python"].pop("fast calls") is False
    assert runs["fast"].keys() == runs["python"].keys()
    for scenario in runs["fast"]:
        assert runs["fast"][scenario] == runs["python"][scenario], scenario


def test_the_c_calls_wait_for_the_python_holder_of_the_lock(module_path):
    """A Python method holding the lock (here: held by hand) keeps the C calls out until it lets go."""
    it = _warm()
    done = []
    it._calls.acquire("test")
    try:
        t = threading.Thread(target=lambda: (it.set_tensor(0, X), it.invoke(), done.append(it.get_tensor(2))))
        t.start()
        time.sleep(0.3)
        assert t.is_alive() and not done  # waiting, not running beside the holder
    finally:
        it._calls.release()
    t.join(10)
    assert not t.is_alive() and len(done) == 1


def test_lock_behaves_as_threading_lock(module_path):
    mod = fast_calls.module()
    lock = mod.Lock()
    assert lock.acquire() is True and lock.locked()
    assert lock.acquire(False) is False
    t0 = time.perf_counter()
    assert lock.acquire(timeout=0.05) is False
    assert time.perf_counter() - t0 >= 0.04
    lock.release()
    assert not lock.locked()
    with pytest.raises(RuntimeError, match="release unlocked lock"):
        lock.release()
    with pytest.raises(ValueError):
        lock.acquire(False, 1.0)
    with pytest.raises(ValueError):
        lock.acquire(timeout=-2)


def test_methods_keep_their_name_doc_and_signature(module_path):
    import inspect

    _warm()
    for name in ("set_tensor", "invoke", "get_tensor"):
        m = getattr(oo.Interpreter, name)
        assert m.__name__ == name
        assert m.__doc__ and m.__doc__ == m.__wrapped__.__doc__
        assert list(inspect.signature(m).parameters)[0] == "self"


def test_a_named_module_that_cannot_load_is_an_error(tmp_path, module_path):
    truncated = tmp_path / "truncated.so"
    truncated.write_bytes(open(module_path, "rb").read()[:4096])
    not_there = tmp_path / "missing.so"
    code = """
        import sys, opaque_ops as oo
        from tests.helpers.fast_call_scenarios import add_model
        try:
            oo.Interpreter(model_content=add_model())
        except oo.OpaqueOpsError as e:
            print(type(e).__name__, "|", e)
    """
    for path, words in ((truncated, "truncated or damaged"), (not_there, "cannot load")):
        p = run_child(code, env={"OPAQUE_OPS_FASTCALLS": str(path)}, timeout=60)
        assert p.returncode == 0, crashed(p)
        out = p.stdout.strip()
        assert out.startswith("FastCallsError |") and "OPAQUE_OPS_FASTCALLS" in out and words in out, out


def test_turned_off_says_why():
    p = run_child(
        """
        from opaque_ops.interpreter import fast_calls
        print(fast_calls.status())
        """,
        env={"OPAQUE_OPS_FASTCALLS": "0"},
    )
    assert p.returncode == 0, crashed(p)
    assert p.stdout.strip() == "(False, 'turned off by OPAQUE_OPS_FASTCALLS=0')"


def test_fork_while_another_thread_is_in_a_c_call(module_path):
    """A fork taken while another thread runs the C calls: in each child the interpreter either
    works (the lock was free at the fork) and gives the right bytes, or refuses with
    ClosedError (it was held, by a thread the child does not have); it never hangs."""
    code = """
        import json, os, signal, threading, time, numpy as np, opaque_ops as oo
        from tests.helpers.fast_call_scenarios import X
        from tests.helpers.interpreter_models import add_model
        it = oo.Interpreter(model_content=add_model())
        it.allocate_tensors()
        it.set_tensor(0, X)
        it.invoke()
        assert it._fast.bound
        want = it.get_tensor(2).tobytes()
        stop = False

        def hammer():
            # The C invoke releases the GIL while it holds the lock, so a fork
            # mostly lands there; the pause lets some land between calls.
            while not stop:
                it.set_tensor(0, X)
                it.invoke()
                it.get_tensor(2)
                time.sleep(0.0002)

        t = threading.Thread(target=hammer)
        t.start()
        seen = {"ok": 0, "refused": 0}
        for _ in range(60):
            pid = os.fork()
            if pid == 0:
                signal.alarm(20)  # a hang would end the child with SIGALRM
                try:
                    it.set_tensor(0, X)
                    it.invoke()
                    os._exit(0 if it.get_tensor(2).tobytes() == want else 3)
                except oo.ClosedError:
                    os._exit(4)
            _, status = os.waitpid(pid, 0)
            code = os.waitstatus_to_exitcode(status)
            assert code in (0, 4), code
            seen["ok" if code == 0 else "refused"] += 1
        stop = True
        t.join()
        print(json.dumps(seen))
    """
    p = run_child(code, timeout=300)
    assert p.returncode == 0, crashed(p)
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    assert seen["ok"] + seen["refused"] == 60 and seen["ok"] > 0, seen


@pytest.mark.parametrize("xnnpack", [False, True])
def test_moved_views_are_dropped_in_c_as_the_python_loop_drops_them(module_path, xnnpack):
    # Interpreter._keep_unmoved_slots runs fast_calls' C routine when the
    # module is here (a signature runner's calls on such a model use it); the
    # Python loop is the reference.  Both see the same slots after the same
    # invoke: every planned tensor's view, cached before the run.
    it = oo.Interpreter(model_content=tile_model(), use_xnnpack=xnnpack)
    it.allocate_tensors()
    native = it._native
    drop = fast_calls.moved_view_dropper(native)
    assert drop is not None
    slots = it._slots  # (the one dict the C set/get calls share: changed in place only)
    dropped = kept = 0
    x = np.array([1.0, -2.0, 3.5, 4.0], np.float32)
    for m in (1, 1000, 3, 100_000, 5, 5, 2, 2):
        it.set_tensor(0, x)
        it.set_tensor(1, np.array([m], np.int32))
        for i in range(len(it._info.subgraphs[0].tensors)):
            t = native.tensor(i)
            if t is not None:
                it._remember(i, t)  # (skips a dynamic tensor, as every path does)
        before = dict(slots)
        assert native.invoke() == 0
        by_c = dict(before)
        drop(by_c, native)
        it._drop_moved = None  # the Python loop, on the interpreter's own dict
        it._keep_unmoved_slots(native)
        assert by_c.keys() == slots.keys(), m
        assert all(by_c[k] is before[k] for k in by_c)
        dropped += len(before) - len(by_c)
        kept += len(by_c)
        slots.clear()  # (the views of this round: none is used again)
        it._drop_moved = False
    assert dropped and kept  # both outcomes were compared


def test_a_null_address_is_refused_before_any_c_call(module_path):
    # Every module function that takes C addresses from Python refuses a null
    # one (a closed interpreter, a missing function) rather than call it.
    mod = fast_calls.module()
    it = oo.Interpreter(model_content=add_model())
    it.allocate_tensors()
    native = it._native
    interp, functions = oo._native.fast_calls.entry_points(native)
    interp_p, planned = oo._native.fast_calls.planned_entry_points(native)
    calls = [
        ("planned_tensors", lambda i, f: mod.planned_tensors(native, i, f), interp_p, planned),
        ("drop_moved_views", lambda i, f: mod.drop_moved_views({}, native, i, f), interp, functions[1:]),
        ("bind", lambda i, f: it._fast.bind(native, i, f, [], False, {}, None, 0), interp, functions),
        # (function, argument, interpreter, cancel): a null cancel is allowed (no Ctrl-C guard).
        ("invoke", lambda i, f: mod.invoke(f[0], i, i, 0), interp, functions[:1]),
    ]
    for name, call, good_interp, good_fns in calls:
        for i, f in [(0, good_fns)] + [
            (good_interp, good_fns[:k] + (0,) + good_fns[k + 1 :]) for k in range(len(good_fns))
        ]:
            with pytest.raises(ValueError, match=rf"^{name}\(\): a null interpreter or function$"):
                call(i, f)
    assert mod.planned_tensors(native, interp_p, planned)[1] is False  # the real addresses still work


def test_only_a_model_with_a_checked_fed_value_leaves_the_c_invoke(module_path):
    # invoke() checks a REVERSE_SEQUENCE length fed as an input in Python
    # (interpreter/fed_values.py: TFLite's kernel crashes on some), so such a
    # model must not run the C fast call; the same operator whose lengths are
    # a constant keeps it.  Both reverse each row's first n values.
    from tests.helpers.single_op import single_op_model

    x, n = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([2, 3], np.int32)
    want = np.array([[1, 0, 2], [5, 4, 3]], np.float32)
    f32 = np.float32
    options = {"seq_dim": 1, "batch_dim": 0}
    fed = oo.Interpreter(
        model_content=single_op_model(
            "REVERSE_SEQUENCE", {"x": ([2, 3], f32), "n": ([2], np.int32)}, {}, [([2, 3], f32)], options
        )
    )
    const = oo.Interpreter(
        model_content=single_op_model("REVERSE_SEQUENCE", {"x": ([2, 3], f32)}, {"n": n}, [([2, 3], f32)], options)
    )
    for it in (fed, const):
        it.allocate_tensors()
        it.set_tensor(0, x)
        if it is fed:
            it.set_tensor(1, n)
        it.invoke()
        it.invoke()
        np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), want)
    assert const._fast is not None and const._fast.bound
    assert fed._fast is not None and not fed._fast.bound


def test_a_fork_while_another_thread_looks_the_module_up_leaves_the_child_able_to_look_it_up():
    # The thread stops inside module(), holding _loading, before the lookup:
    # the child's copy of the lock stayed held, and its first interpreter
    # (which asks for the module) waited forever.
    used, where = fast_calls.status()
    assert_child_returns(
        (used, where),
        "from opaque_ops.interpreter import fast_calls\n",
        code="fast_calls.module.__code__",
        lock="fast_calls._loading",
        worker="fast_calls.module()",
        child="fast_calls.status()",
    )
