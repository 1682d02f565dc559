"""No view outlives its memory when invoke() moves it (issue 17, item 5).

On a model with a dynamic tensor (a shape computed while it runs: here TILE
by an input ``multiples``), ``invoke()`` reallocates that tensor when its
shape changes, and TFLite then plans the arena again, which moves every
tensor in it, inputs included.  Before the fix a ``tensor()`` view kept
pointing at the freed memory (another array's values, or SIGSEGV on a large
growth), and so did the set/get fast path's cached views: ``set_tensor``
wrote the next input into freed memory, the model silently ran on the old
one, and the heap was corrupted.  Now ``invoke()`` refuses with
``LiveViewsError`` while views exist on such a model, and drops its cached
views after each run; every result is compared with ai-edge-litert.
Sequences that crashed before run in a child process.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from ai_edge_litert import interpreter as litert

import opaque_ops as oo
from tests.helpers.child_process import crashed, run_child
from tests.helpers.interpreter_models import doubling_model, tile_model

X = np.array([1.0, -2.0, 3.5, 4.0], np.float32)
MULTIPLES = [1, 1000, 3, 100_000, 5]


def _reference() -> list[np.ndarray]:
    it = litert.Interpreter(model_content=tile_model())
    it.allocate_tensors()
    out = []
    for m in MULTIPLES:
        it.set_tensor(0, X)
        it.set_tensor(1, np.array([m], np.int32))
        it.invoke()
        out.append(it.get_tensor(3).copy())
    return out


@pytest.fixture(scope="module")
def reference():
    ref = _reference()
    assert [r.shape for r in ref] == [(4 * m,) for m in MULTIPLES]
    return ref


@pytest.mark.parametrize("xnnpack", [False, True])
def test_set_get_fast_path_follows_memory_that_invoke_moved(reference, xnnpack):
    # Before the fix: the second set_tensor went to freed memory, the model ran
    # on the first multiples (silently), and the heap was corrupted.
    p = run_child(
        f"""
        import hashlib
        import numpy as np, opaque_ops as oo
        from tests.helpers.interpreter_models import tile_model
        from tests.interpreter.test_dynamic_views import X, MULTIPLES
        it = oo.Interpreter(model_content=tile_model(), use_xnnpack={xnnpack})
        it.allocate_tensors()
        for m in MULTIPLES:
            it.set_tensor(0, X)
            it.set_tensor(1, np.array([m], np.int32))
            it.invoke()
            y = it.get_tensor(3)
            print(y.shape[0], hashlib.sha256(y.tobytes()).hexdigest(), int(it.get_tensor(1)[0]))
        """,
        timeout=120,
    )
    assert p.returncode == 0, crashed(p)
    want = [f"{r.shape[0]} {hashlib.sha256(r.tobytes()).hexdigest()} {m}" for r, m in zip(reference, MULTIPLES)]
    assert p.stdout.splitlines() == want


@pytest.mark.parametrize("index", [0, 2, 3], ids=["input (arena)", "dynamic tensor", "output resized in invoke"])
def test_invoke_refuses_while_views_exist_on_a_model_with_dynamic_tensors(reference, index):
    it = oo.Interpreter(model_content=tile_model())
    it.allocate_tensors()
    it.set_tensor(0, X)
    it.set_tensor(1, np.array([1], np.int32))
    it.invoke()
    view = it.tensor(index)()
    it.set_tensor(1, np.array([100_000], np.int32))
    with pytest.raises(oo.LiveViewsError, match="dynamic tensors.*invoke"):
        it.invoke()
    assert isinstance(oo.LiveViewsError("x"), RuntimeError)
    del view
    it.invoke()  # no view left: runs, with the new multiples
    np.testing.assert_array_equal(it.get_tensor(3), reference[3])
    # A view taken after the run shows the new memory.
    np.testing.assert_array_equal(it.tensor(3)(), reference[3])


def test_a_view_kept_across_a_growth_never_reads_freed_memory():
    # Before the fix: the view read freed memory after a growth (SIGSEGV, or
    # another array's values).  In a child: the old code may crash.
    p = run_child(
        """
        import numpy as np, opaque_ops as oo
        from tests.helpers.interpreter_models import tile_model
        from tests.interpreter.test_dynamic_views import X
        it = oo.Interpreter(model_content=tile_model())
        it.allocate_tensors()
        it.set_tensor(0, X)
        it.set_tensor(1, np.array([1], np.int32))
        it.invoke()
        y = it.tensor(2)()
        before = y.copy()
        it.set_tensor(1, np.array([1_000_000], np.int32))
        try:
            it.invoke()
            print("RAN", bool((y == before).all()))
            print(float(np.asarray(y).sum()))
        except oo.LiveViewsError:
            print("REFUSED")
        """,
        timeout=120,
    )
    assert p.returncode == 0, crashed(p)
    assert p.stdout.split()[0] == "REFUSED", p.stdout


def test_signature_runner_refuses_while_views_exist(reference):
    it = oo.Interpreter(model_content=tile_model())
    run = it.get_signature_runner("run")
    np.testing.assert_array_equal(run(x=X, multiples=np.array([1], np.int32))["y"], reference[0])
    view = it.tensor(0)()
    with pytest.raises(oo.LiveViewsError):
        run(x=X, multiples=np.array([1000], np.int32))
    del view
    np.testing.assert_array_equal(run(x=X, multiples=np.array([1000], np.int32))["y"], reference[1])


def test_views_of_a_static_model_still_live_across_invoke():
    it = oo.Interpreter(model_content=doubling_model([4], signature=None))
    it.allocate_tensors()
    assert not it._moves
    xin, yout = it.tensor(0)(), it.tensor(1)()
    for k in range(3):
        xin[...] = X + k
        it.invoke()
        np.testing.assert_array_equal(yout, 2 * (X + k))


def test_an_exception_right_after_a_moving_invoke_leaves_no_cached_view(reference):
    # A Ctrl-C is raised at the first bytecode after the C invoke returns: any
    # cached view still in _slots then might point into memory the invoke
    # moved, and the next set_tensor (in C) would write there.  The views
    # leave _slots for the run and come back only after the check.
    it = oo.Interpreter(model_content=tile_model())
    it.allocate_tensors()
    for _ in range(2):  # (the first run plans the dynamic tensor and moves the arena)
        it.set_tensor(0, X)
        it.set_tensor(1, np.array([1], np.int32))
        it.invoke()
    assert it._slots  # the inputs' views are cached
    native = it._native

    def interrupted():
        native.invoke()
        raise KeyboardInterrupt  # as if delivered between the invoke's return and the check

    it.set_tensor(1, np.array([100_000], np.int32))  # a growth: the arena moves
    with it._calls.held("test"), pytest.raises(KeyboardInterrupt):
        it._run_moving(native, interrupted)
    assert not it._slots
    for m, ref in zip(MULTIPLES, reference):
        it.set_tensor(0, X)
        it.set_tensor(1, np.array([m], np.int32))
        it.invoke()
        np.testing.assert_array_equal(it.get_tensor(3), ref)
