"""opaque_ops.model.select_rows: SELECT's row-wise mode, remembered per interpreter across allocations.

TFLite's SELECT (select.cc, kVersionOne) takes a row-wise mode when an
allocation gives it a scalar or 1-D condition and never leaves it: resized
back to one shape for the condition, x and y ([n, m], m > 1), its Eval
writes past the output (wrong values at [2, 3], SIGSEGV at [20, 30] on
2.17.1, 2.23.0 and ai-edge-litert, measured in child processes).  The model
here declares one shape for all three, so no rule on the model's own shapes
sees it: only the interpreter's past does.
"""

from __future__ import annotations

import marshal
import re

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.errors import ShapeError
from opaque_ops.model import ModelBuilder, cache, read_model
from opaque_ops.model.select_rows import nodes_of, note_and_check
from tests.helpers.child_process import crashed, run_child

f32 = np.float32
STALE = "an earlier allocation of this Interpreter gave it a scalar or 1-D condition"


def select_model(n: int, m: int) -> bytes:
    """out = SELECT(c, x, y), all four [n, m], with a signature "select" over them."""
    b = ModelBuilder()
    ids = [b.add_tensor("c", [n, m], np.bool_), b.add_tensor("x", [n, m], f32), b.add_tensor("y", [n, m], f32)]
    out = b.add_tensor("out", [n, m], f32)
    b.add_op("SELECT", ids, [out])
    b.set_inputs(ids)
    b.set_outputs([out])
    b.add_signature("select", dict(zip("cxy", ids)), {"out": out})
    return b.build()


def _values(n, m, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, m)) > 0.5, rng.standard_normal((n, m)).astype(f32), rng.standard_normal((n, m)).astype(f32)


def _run(it, c, a, b):
    """Resize to these inputs' shapes, allocate, invoke: the output."""
    for k, v in enumerate((c, a, b)):
        it.resize_tensor_input(k, list(v.shape))
    it.allocate_tensors()
    for k, v in enumerate((c, a, b)):
        it.set_tensor(k, v)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


# In this process only [2, 3], whose stale Eval (had the rule regressed) gives wrong values; the
# SIGSEGV of [20, 30] only where a crash is survived: the isolated worker, a child process.
@pytest.mark.parametrize("isolate, n, m", [(False, 2, 3), (True, 20, 30)], ids=["in_process", "isolated"])
def test_resized_back_to_one_shape_after_a_1d_condition_is_refused_and_row_shapes_still_run(isolate, n, m):
    c, a, b = _values(n, m)
    with oo.Interpreter(model_content=select_model(n, m), isolate=isolate) as it:
        # Never in row mode: one shape for all three runs, at any size, with np.where's values.
        for k, size in enumerate(((200, 300), (5, 1), (1, 7), (n, m))):
            ck, ak, bk = _values(*size, seed=k)
            np.testing.assert_array_equal(_run(it, ck, ak, bk), np.where(ck, ak, bk))
        # A 1-D condition: whole rows of x or y.
        rows = c[:, 0]
        np.testing.assert_array_equal(_run(it, rows, a, b), np.where(rows[:, None], a, b))
        # Back to one shape: Eval would write n * m * m values into n * m.
        it.resize_tensor_input(0, [n, m])
        with pytest.raises(ShapeError, match=re.escape(STALE)) as err:
            it.allocate_tensors()
        assert "operator 0 (SELECT)" in str(err.value) and "Create a new Interpreter" in str(err.value)
        with pytest.raises(oo.NotAllocatedError):
            it.invoke()  # (nothing runs on the refused plan)
        # Still usable: the row-wise shapes run, a scalar condition too, and [n, 1] rows of one value.
        np.testing.assert_array_equal(_run(it, rows, a, b), np.where(rows[:, None], a, b))
        np.testing.assert_array_equal(_run(it, np.array(False), a, b), b)
        c1, a1, b1 = _values(n, 1, seed=1)
        np.testing.assert_array_equal(_run(it, c1, a1, b1), np.where(c1, a1, b1))
    # A new Interpreter runs the one shape.
    with oo.Interpreter(model_content=select_model(n, m), isolate=isolate) as fresh:
        np.testing.assert_array_equal(_run(fresh, c, a, b), np.where(c, a, b))


def test_a_signature_runner_of_subgraph_0_shares_the_interpreters_past():
    """The runner and the interpreter run one TFLite subgraph, so one node (one flag) between them."""
    c, a, b = _values(2, 3)
    it = oo.Interpreter(model_content=select_model(2, 3))
    run = it.get_signature_runner("select")
    np.testing.assert_array_equal(run(c=c, x=a, y=b)["out"], np.where(c, a, b))
    np.testing.assert_array_equal(run(c=c[:, 0], x=a, y=b)["out"], np.where(c[:, :1], a, b))
    with pytest.raises(ShapeError, match=re.escape(STALE)):
        run(c=c, x=a, y=b)
    it.resize_tensor_input(0, [2, 3])
    with pytest.raises(ShapeError, match=re.escape(STALE)):
        it.allocate_tensors()
    np.testing.assert_array_equal(run(c=c[:, 1], x=a, y=b)["out"], np.where(c[:, 1:2], a, b))


def test_a_kept_verdict_for_the_one_shape_neither_refuses_a_fresh_interpreter_nor_lets_a_stale_one_run(verdicts):
    """The verdict cache (model + shapes) keeps "passed" for [n, m]: right for an interpreter
    without row mode in its past, and never consulted for the stale mode of one with it.  The
    SELECT nodes themselves are kept in the model's record (a later start reads no operators)."""
    data = select_model(2, 3)
    c, a, b = _values(2, 3)
    first = oo.Interpreter(model_content=data)
    np.testing.assert_array_equal(_run(first, c, a, b), np.where(c, a, b))  # "passed" kept for [2, 3]
    [record] = verdicts.glob("*.rec")
    assert marshal.loads(record.read_bytes())["select"] == [[0, 0, 1, 2]]
    cache.clear()  # a new process: only the record on disk is left
    second = oo.Interpreter(model_content=data)
    assert "_source" in second._info.__dict__  # (read from the record, not parsed)
    np.testing.assert_array_equal(_run(second, c[:, 0], a, b), np.where(c[:, :1], a, b))
    with pytest.raises(ShapeError, match=re.escape(STALE)):
        _run(second, c, a, b)
    third = oo.Interpreter(model_content=data)  # (its own past: none)
    np.testing.assert_array_equal(_run(third, c, a, b), np.where(c, a, b))


def test_the_refused_path_ends_with_the_error_in_a_child_on_this_runtime():
    """The crash itself (SIGSEGV at [20, 30] and [200, 300] without the rule) only ever in a child."""
    p = run_child(
        """
        import numpy as np
        import opaque_ops as oo
        from opaque_ops.errors import ShapeError
        from tests.model.test_select_rows import select_model, _values, _run
        for n, m in ((20, 30), (200, 300)):
            c, a, b = _values(n, m)
            it = oo.Interpreter(model_content=select_model(n, m))
            _run(it, c[:, 0], a, b)
            try:
                out = _run(it, c, a, b)
            except ShapeError:
                print("refused", n, m)
            else:
                print("ran", n, m, np.array_equal(out, np.where(c, a, b)))
        """
    )
    assert p.returncode == 0, crashed(p)
    assert p.stdout.split("\n")[:2] == ["refused 20 30", "refused 200 300"], crashed(p)


def test_note_and_check_remembers_only_the_modes_prepare_takes():
    """The rule alone, on shapes given by hand: what sets the row-wise flag (select.cc's Prepare), and
    which later shapes are then refused (RankOneSelect writes past the output) or still fine."""
    nodes = nodes_of(read_model(select_model(2, 3)).subgraphs[0])
    assert nodes == ((0, 0, 1, 2),)

    def step(rows, c, x, y=None):
        shapes = {0: c, 1: x, 2: x if y is None else y}
        return note_and_check(nodes, shapes.get, rows, 0)

    rows: set = set()
    assert step(rows, (2, 3), (2, 3)) is None and not rows  # one shape: the flag untouched
    assert step(rows, (3,), (2, 3)) is None and not rows  # a 1-D condition of another length: Prepare refuses
    assert step(rows, (2, 3), None) is None and not rows  # unknown shapes: nothing known
    assert step(rows, (2,), (2, 3)) is None and rows == {0}
    assert isinstance(step(rows, (2, 3), (2, 3)), ShapeError)
    assert isinstance(step(rows, (2, 2, 2), (2, 2, 2)), ShapeError)
    for fine in ((5,), (5, 1), (0, 3), (), (1,)):  # rows of one value, nothing to copy, one element
        assert step(rows, fine, fine) is None, fine
    scalar: set = set()
    assert step(scalar, (), (4, 2)) is None and scalar == {0}
    assert isinstance(step(scalar, (4, 2), (4, 2)), ShapeError)
    # After a failed allocation (check=False): remembered, never refused.
    failed: set = set()
    assert note_and_check(nodes, {0: (2,), 1: (2, 3), 2: (2, 3)}.get, failed, 0, check=False) is None
    assert failed == {0}
    assert note_and_check(nodes, {0: (2, 3), 1: (2, 3), 2: (2, 3)}.get, failed, 0, check=False) is None
