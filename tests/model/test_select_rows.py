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

import hashlib
import marshal
import re

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.errors import ShapeError
from opaque_ops.model import ModelBuilder, cache, checks, read_model, select_rows
from opaque_ops.model.select_rows import nodes_of, note_and_check
from tests.helpers.child_process import crashed, run_child
from tests.helpers.interpreter_models import feed

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
    assert marshal.loads(record.read_bytes())["select"] == [[0, 0, 1, 2, 3]]
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
    assert nodes == ((0, 0, 1, 2, 3),)

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


# -- SELECT in a subgraph that WHILE or IF runs --------------------------------------------------
#
# There the runtime's control-flow kernel prepares the SELECT, out of the interpreter's sight: at
# each allocation of the caller, and during invoke() at each WHILE turn whose loop variables
# change shape.  Measured in child processes on 2.17.1, 2.23.0 and ai-edge-litert, before the
# rule: an IF branch or WHILE body prepared with a 1-D condition, then (after a resize) with the
# condition of x's shape, gives wrong values at [2, 3] and SIGSEGV or SIGABRT (heap corruption) at
# [20, 30]; a WHILE body whose loop turns the condition from [n] into x's [n, m] does the same
# within one invoke, on the model's own shapes.  The model checks refuse those SELECTs.

CONTROL_FLOW = "is in a subgraph that subgraph 0 operator 0 ({}) runs"


def _joined(main: ModelBuilder, others, options: str, indices) -> bytes:
    """``main`` (its operator 0 a WHILE or IF) followed by ``others``' subgraphs, the options naming them."""
    from tools.fuzz_structured import _join_subgraphs, _schema, pack

    s = _schema()
    m = _join_subgraphs(main.build(), *(o.build() for o in others))
    op = m.subgraphs[0].operators[0]
    op.builtinOptionsType = getattr(s.BuiltinOptions, options)
    op.builtinOptions = getattr(s, options + "T")()
    for field, k in indices.items():
        setattr(op.builtinOptions, field, k)
    return pack(m)


def if_select_model(cond_shape, n: int, m: int, op: str = "SELECT", constant=None) -> bytes:
    """out = IF(flag, c, x, y): its then branch op(c, x, y), its else branch op(c, y, x).

    Inputs flag (index 0), c (1), x (2), y (3), all but flag declared with
    ``cond_shape`` and [n, m].  With ``constant`` (bools), the branches take
    it as their condition and the IF has no c: inputs flag, x (1), y (2).
    """
    main = ModelBuilder()
    ins = [main.add_tensor("flag", [], np.bool_)]
    if constant is None:
        ins.append(main.add_tensor("c", cond_shape, np.bool_))
    ins += [main.add_tensor("x", [n, m], f32), main.add_tensor("y", [n, m], f32)]
    out = main.add_tensor("out", [n, m], f32)
    main.add_op("IF", ins, [out])
    main.set_inputs(ins)
    main.set_outputs([out])
    branches = []
    for name, swap in (("then", False), ("else", True)):
        b = ModelBuilder(subgraph_name=name)
        c = b.add_tensor("c", cond_shape, np.bool_) if constant is None else b.add_constant("c", constant)
        x, y = b.add_tensor("x", [n, m], f32), b.add_tensor("y", [n, m], f32)
        o = b.add_tensor("out", [n, m], f32)
        b.add_op(op, [c, y, x] if swap else [c, x, y], [o])
        b.set_inputs([x, y] if constant is not None else [c, x, y])
        b.set_outputs([o])
        branches.append(b)
    return _joined(main, branches, "IfOptions", {"thenSubgraphIndex": 1, "elseSubgraphIndex": 2})


def while_select_model(
    cond_shape, n: int, m: int, op: str = "SELECT", turns: int = 3, regrow: bool = False, in_cond: bool = False
) -> bytes:
    """WHILE i < turns over (i, c, x, y): its body x <- op(c, x, y), and with ``regrow`` c <- x > 0.

    Inputs i (index 0), c (1), x (2), y (3); outputs i and x.  With
    ``regrow`` the condition is [n, m] from the second turn on, whatever its
    first shape: the body is prepared again in that turn.  With ``in_cond``
    the WHILE's condition subgraph runs op(c, x, y) instead, its value
    unused (the runtime still prepares and runs it at each turn), and the
    body keeps x.
    """
    i32 = np.int32
    main = ModelBuilder()
    ins = [main.add_tensor("i", [], i32), main.add_tensor("c", cond_shape, np.bool_)]
    ins += [main.add_tensor("x", [n, m], f32), main.add_tensor("y", [n, m], f32)]
    outs = [main.add_tensor("i_out", [], i32), main.add_tensor("c_out", [n, m] if regrow else cond_shape, np.bool_)]
    outs += [main.add_tensor("x_out", [n, m], f32), main.add_tensor("y_out", [n, m], f32)]
    main.add_op("WHILE", ins, outs)
    main.set_inputs(ins)
    main.set_outputs([outs[0], outs[2]])
    cond = ModelBuilder(subgraph_name="cond")
    ci = cond.add_tensor("i", [], i32)
    rest = [cond.add_tensor("c", cond_shape, np.bool_), cond.add_tensor("x", [n, m], f32)]
    rest.append(cond.add_tensor("y", [n, m], f32))
    going = cond.add_tensor("going", [], np.bool_)
    cond.add_op("LESS", [ci, cond.add_constant("turns", np.array(turns, i32))], [going])
    if in_cond:
        cond.add_op(op, rest, [cond.add_tensor("unused", [n, m], f32)])
    cond.set_inputs([ci, *rest])
    cond.set_outputs([going])
    body = ModelBuilder(subgraph_name="body")
    bi, bc = body.add_tensor("i", [], i32), body.add_tensor("c", cond_shape, np.bool_)
    bx, by = body.add_tensor("x", [n, m], f32), body.add_tensor("y", [n, m], f32)
    bi2, bx2 = body.add_tensor("i2", [], i32), body.add_tensor("x2", [n, m], f32)
    body.add_op("ADD", [bi, body.add_constant("one", np.array(1, i32))], [bi2])
    if in_cond:
        body.add_op("ADD", [bx, body.add_constant("nought", np.array(0, f32))], [bx2])
    else:
        body.add_op(op, [bc, bx, by], [bx2])
    bc2 = bc
    if regrow:
        bc2 = body.add_tensor("c2", [n, m], np.bool_)
        body.add_op("GREATER", [bx2, body.add_constant("zero", np.array(0, f32))], [bc2])
    body.set_inputs([bi, bc, bx, by])
    body.set_outputs([bi2, bc2, bx2, by])
    return _joined(main, [cond, body], "WhileOptions", {"condSubgraphIndex": 1, "bodySubgraphIndex": 2})


def _where_rows(c, a, b):
    """SELECT's values: a 1-D condition picks whole rows; otherwise np.where (which broadcasts like SELECT_V2)."""
    c = np.asarray(c)
    return np.where(c.reshape(len(c), *[1] * (a.ndim - 1)) if c.ndim == 1 else c, a, b)


def _loop(c, a, b, turns, regrow):
    """The WHILE's x after ``turns`` turns of the body, from the op's definition."""
    for _ in range(turns):
        a = _where_rows(c, a, b)
        if regrow:
            c = a > 0
    return a


_feed = feed  # (resize every input to its value's shape, allocate, set, invoke: the outputs)


# (model, the caller named in the message, the SELECT named): each crashes or gives wrong values
# without the rule (see above); the last one only after a resize to a 1-D condition and back.
_REFUSED = {
    "if_branch_1d_then_resized": (lambda n, m: if_select_model([n], n, m), "IF", "subgraph 1 operator 0 (SELECT)"),
    "while_body_1d_then_resized": (lambda n, m: while_select_model([n], n, m), "WHILE", "subgraph 2 operator 1"),
    "while_body_regrows_its_condition": (
        lambda n, m: while_select_model([n], n, m, regrow=True),
        "WHILE",
        "subgraph 2 operator 1 (SELECT)",
    ),
    "if_branch_one_shape_declared": (lambda n, m: if_select_model([n, m], n, m), "IF", "subgraph 1 operator 0"),
    "while_cond_sees_the_condition_regrow": (
        lambda n, m: while_select_model([n], n, m, regrow=True, in_cond=True),
        "WHILE",
        "subgraph 1 operator 1 (SELECT)",
    ),
}


@pytest.mark.parametrize("case", sorted(_REFUSED))
@pytest.mark.parametrize("isolate, n, m", [(False, 2, 3), (True, 20, 30)], ids=["in_process", "isolated"])
def test_a_select_in_a_while_body_or_if_branch_is_refused_with_the_fix(case, isolate, n, m):
    build, caller, names = _REFUSED[case]
    with pytest.raises(oo.ModelError, match=re.escape(CONTROL_FLOW.format(caller))) as err:
        oo.Interpreter(model_content=build(n, m), isolate=isolate)
    assert names in str(err.value) and "Use SELECT_V2 there" in str(err.value)


def test_the_control_flow_crashes_end_with_the_error_in_a_child_on_this_runtime():
    """The crashes themselves only in a child: without the rule, SIGSEGV or SIGABRT in each run."""
    p = run_child(
        """
        import numpy as np
        import opaque_ops as oo
        from tests.model.test_select_rows import (
            _feed, _loop, _values, _where_rows, if_select_model, while_select_model)
        n, m = 20, 30
        c, a, b = _values(n, m)
        runs = [
            # Within one invoke, on the model's own shapes: the second turn's condition is [n, m].
            ("regrow", lambda: while_select_model([n], n, m, regrow=True),
             [(0, c[:, 0], a, b)], lambda v: _loop(v[1], a, b, 3, True)),
            # A 1-D condition, then (resized) the condition of x's shape.
            ("while", lambda: while_select_model([n], n, m),
             [(0, c[:, 0], a, b), (0, c, a, b)], lambda v: _loop(v[1], a, b, 3, False)),
            ("if", lambda: if_select_model([n], n, m),
             [(True, c[:, 0], a, b), (True, c, a, b)], lambda v: _where_rows(v[1], a, b)),
            # The WHILE's condition subgraph, its condition regrown by the body.
            ("cond", lambda: while_select_model([n], n, m, regrow=True, in_cond=True),
             [(0, c[:, 0], a, b)], lambda v: a),
        ]
        for name, build, feeds, want in runs:
            try:
                it = oo.Interpreter(model_content=build())
                for v in feeds:
                    out = _feed(it, v)[-1]
                    assert np.array_equal(out, want(v)), name
            except oo.ModelError:
                print("refused", name)
            else:
                print("ran", name)
        """
    )
    assert p.returncode == 0, crashed(p)
    assert p.stdout.split("\n")[:4] == ["refused regrow", "refused while", "refused if", "refused cond"], crashed(p)


@pytest.mark.parametrize("isolate", [False, True], ids=["in_process", "isolated"])
def test_select_v2_there_runs_the_same_shape_changes_with_numpy_values(isolate):
    """The message's fix: SELECT_V2 (its condition one value per row as [n, 1]) through the shape
    changes that break SELECT, in an IF branch and a WHILE body, with the op's values."""
    n, m = 20, 30
    c, a, b = _values(n, m)
    rows = c[:, :1]
    with oo.Interpreter(model_content=if_select_model([n, 1], n, m, op="SELECT_V2"), isolate=isolate) as it:
        for flag, cond in ((True, rows), (True, c), (False, rows), (False, c), (True, np.array(True))):
            want = np.where(cond, a, b) if flag else np.where(cond, b, a)
            np.testing.assert_array_equal(_feed(it, (flag, cond, a, b))[0], want)
    with oo.Interpreter(model_content=while_select_model([n, 1], n, m, op="SELECT_V2"), isolate=isolate) as it:
        for cond in (rows, c, rows):
            np.testing.assert_array_equal(_feed(it, (0, cond, a, b))[1], _loop(cond, a, b, 3, False))
    regrow = while_select_model([n, 1], n, m, op="SELECT_V2", regrow=True)
    with oo.Interpreter(model_content=regrow, isolate=isolate) as it:
        for turns in (0, 2, 1):  # three turns, one, two (the body's condition [n, 1], then [n, m])
            np.testing.assert_array_equal(_feed(it, (turns, rows, a, b))[1], _loop(rows, a, b, 3 - turns, True))


def test_a_constant_condition_there_still_runs_with_numpy_values():
    """A constant condition keeps its shape: a 1-D one meets x's shape only at rank 1, where picking
    rows of one value is picking elements.  Not refused; the values are SELECT's across resizes."""
    n = 4
    keep = np.array([True, False, False, True])
    with oo.Interpreter(model_content=if_select_model([n], n, 3, constant=keep)) as it:
        for shape in ((n, 3), (n, 5), (n,), (n, 2, 2)):
            _, a, b = _values(int(np.prod(shape)), 1, seed=len(shape))
            a, b = a.reshape(shape), b.reshape(shape)
            np.testing.assert_array_equal(_feed(it, (True, a, b))[0], _where_rows(keep, a, b))
            np.testing.assert_array_equal(_feed(it, (False, a, b))[0], _where_rows(keep, b, a))


# -- SELECT_V2's broadcast mode, on runtimes older than 2.23 ----------------------------------
#
# TFLite's SELECT_V2 (select.cc, kVersionTwo) takes its broadcasting Eval at an allocation whose
# condition, x and y differ in shape and never leaves it; 2.17.1's broadcasting Eval handles at
# most 5 dimensions and aborts the process (SIGABRT) on 6.  Measured in child processes: after a
# broadcast at any rank, a later allocation of one shape of 6 dimensions aborts in Eval on 2.17.1
# (any type; XNNPACK does not take SELECT_V2); 2.23.0 and ai-edge-litert run it.  The broadcast of
# 6 dimensions itself is version_rules' (tests/model/test_version_rules.py).

R6 = [2, 2, 2, 2, 2, 3]
BROADCAST_MODE = "so its kernel broadcasts in every later run (it never leaves that mode)"


def select_v2_model(c, x, y, dtype=f32) -> bytes:
    """out = SELECT_V2(c, x, y) of these declared shapes, the output their broadcast."""
    b = ModelBuilder()
    ids = [b.add_tensor("c", c, np.bool_), b.add_tensor("x", x, dtype), b.add_tensor("y", y, dtype)]
    out = b.add_tensor("out", list(np.broadcast_shapes(tuple(c), tuple(x), tuple(y))), dtype)
    b.add_op("SELECT_V2", ids, [out])
    b.set_inputs(ids)
    b.set_outputs([out])
    return b.build()


def _v2_values(shapes, seed=0, dtype=f32):
    rng = np.random.default_rng(seed)
    c, x, y = shapes
    return rng.random(c) > 0.5, rng.standard_normal(x).astype(dtype), rng.standard_normal(y).astype(dtype)


def _v2_run(it, values):
    """Resize to these values' shapes, allocate, invoke: SELECT_V2's output, checked against np.where."""
    out = _run(it, *values)
    want = np.where(*values)
    assert out.shape == want.shape
    np.testing.assert_array_equal(out, want)


def _affected() -> bool:
    from opaque_ops.model.checks.version_rules import affected
    from opaque_ops.runtime import runtime_info

    return affected(runtime_info().version)


# name: (declared shapes, then the shapes of each later allocation): each sequence's last
# allocation aborts in Eval on 2.17.1 without the rule, and runs on 2.23.0 and ai-edge-litert.
V2_CRASHES = {
    # A broadcast of 2 dimensions, then one shape of 6.
    "broadcast then one shape": (([2, 1], [2, 3], [2, 3]), [(R6, R6, R6)]),
    # A broadcast of 5 dimensions (which runs), then one shape of 6.
    "5-D broadcast then one shape": (([2, 2, 2, 2, 1], [2, 2, 2, 2, 3], [2, 2, 2, 2, 3]), [(R6, R6, R6)]),
    # One value in each input, but the output held 6 before: Prepare does not return early.
    "one value each after an output of six": (
        ([2, 3], [2, 3], [2, 3]),
        [([1] * 6, [1] * 6, [1] * 5)],
    ),
}


@pytest.mark.parametrize("case", list(V2_CRASHES))
@pytest.mark.parametrize("isolate", [False, True], ids=["in_process", "isolated"])
def test_select_v2_left_broadcasting_is_refused_at_6_dimensions_before_2_23_only(case, isolate):
    """In this process only the allocations: a regressed rule lets allocate_tensors() pass (the test
    fails) and nothing is invoked; the runs themselves where a crash is survived (isolated)."""
    declared, later = V2_CRASHES[case]
    with oo.Interpreter(model_content=select_v2_model(*declared), isolate=isolate) as it:
        _v2_run(it, _v2_values(declared))
        values = _v2_values(later[-1], seed=1)
        if not _affected():
            _v2_run(it, values)
            return
        for k, v in enumerate(values):
            it.resize_tensor_input(k, list(v.shape))
        with pytest.raises(ShapeError, match=re.escape(BROADCAST_MODE)) as err:
            it.allocate_tensors()
        message = str(err.value)
        assert "subgraph 0 operator 0 (SELECT_V2)" in message and "Create a new Interpreter" in message
        assert f"x {list(values[1].shape)} and y {list(values[2].shape)}" in message
        with pytest.raises(oo.NotAllocatedError):
            it.invoke()
        if isolate:
            # Still usable at 5 dimensions, broadcast or not.
            _v2_run(it, _v2_values(([2, 2, 2, 2, 1], [2, 2, 2, 2, 3], [2, 2, 2, 2, 3]), seed=2))
            _v2_run(it, _v2_values(([2, 2, 2, 2, 3],) * 3, seed=3))
    # A new Interpreter takes one shape of 6 dimensions (elementwise Eval).
    with oo.Interpreter(model_content=select_v2_model(R6, R6, R6), isolate=isolate) as fresh:
        _v2_run(fresh, _v2_values((R6, R6, R6), seed=4))


@pytest.mark.parametrize("isolate", [False, True], ids=["in_process", "isolated"])
def test_select_v2_one_shape_of_6_dimensions_without_a_broadcast_before_runs(isolate):
    """Not refused without the history: one shape of 6 dimensions, before and after allocations of one
    shape or of one value each whose output held one value (Prepare's early return keeps no mode)."""
    steps = [(R6, R6, R6), ([2, 3],) * 3, ([1] * 6, [1] * 6, [1] * 6), (R6, R6, R6)]
    with oo.Interpreter(model_content=select_v2_model(R6, R6, R6), isolate=isolate) as it:
        for k, shapes in enumerate(steps):
            _v2_run(it, _v2_values(shapes, seed=k))
    with oo.Interpreter(model_content=select_v2_model([1, 1], [1], [1]), isolate=isolate) as it:
        _v2_run(it, _v2_values(([1, 1], [1], [1])))
        _v2_run(it, _v2_values((R6, R6, R6), seed=5))


_WITHOUT_THE_RULE = """
    import sys
    import numpy as np
    import opaque_ops as oo
    from opaque_ops.model import select_rows
    from opaque_ops.model.checks import version_rules
    from tests.model.test_select_rows import V2_CRASHES, _v2_run, _v2_values, select_v2_model
    if sys.argv[2] == "without":
        version_rules._RULES.pop("SELECT_V2", None)
        select_rows._note_broadcast = lambda *a: None
    declared, later = V2_CRASHES[sys.argv[1]]
    it = oo.Interpreter(model_content=select_v2_model(*declared))
    _v2_run(it, _v2_values(declared))
    print("invoking", flush=True)
    try:
        for k, shapes in enumerate(later):
            _v2_run(it, _v2_values(shapes, seed=k + 1))
    except oo.ModelError:
        print("refused")
    else:
        print("ran")
"""


@pytest.mark.parametrize("case", list(V2_CRASHES))
def test_select_v2_sequences_abort_without_the_rule_and_are_refused_with_it_in_a_child(case):
    """The crash itself only in a child: without the rule (its two parts removed there) 2.17.1 aborts
    (SIGABRT) where 2.23.0 gives np.where's values; with it the last allocation is refused."""
    bare = run_child(_WITHOUT_THE_RULE, case, "without")
    guarded = run_child(_WITHOUT_THE_RULE, case, "with")
    if _affected():
        assert bare.signal == 6 and bare.stdout.split() == ["invoking"], crashed(bare)
        assert guarded.returncode == 0 and guarded.stdout.split() == ["invoking", "refused"], crashed(guarded)
    else:
        for p in (bare, guarded):
            assert p.returncode == 0 and p.stdout.split() == ["invoking", "ran"], crashed(p)


def test_note_and_check_keeps_select_v2s_broadcast_mode_only_where_it_aborts():
    """The rule alone, on shapes given by hand: what sets the broadcast flag (select.cc's Prepare,
    with its early return for one value each), and which later shapes are then refused."""
    nodes = select_rows.kept_nodes_of(read_model(select_v2_model([2, 1], [2, 3], [2, 3])).subgraphs[0])
    assert nodes == ((0, 0, 1, 2, 3, 0),)

    def step(memory, c, x, y=None, out=None, rank=5, check=True, nodes=nodes):
        rows, outputs = memory
        y = x if y is None else y
        shapes = {0: c, 1: x, 2: y, 3: out or tuple(np.broadcast_shapes(c, x, y))}
        return note_and_check(nodes, shapes.get, rows, 0, check, outputs, rank)

    r6, r5 = tuple(R6), (2, 2, 2, 2, 3)
    memory: tuple = (set(), {})
    assert step(memory, r6, r6) is None and not memory[0]  # one shape: elementwise, at any rank
    assert step(memory, (2, 2, 2, 2, 1), r5) is None and memory[0] == {0}  # a 5-D broadcast runs
    assert step(memory, r5, r5) is None
    assert isinstance(step(memory, r6, r6), ShapeError)
    assert isinstance(step(memory, (2, 2, 2, 2, 2, 1), r6), ShapeError)
    assert step(memory, r6, r6, check=False) is None  # (after a failed allocation: only remembered)
    # The early return: one value each, and the output held one value before (the declared one first).
    declared_one = select_rows.kept_nodes_of(read_model(select_v2_model([1, 1], [1], [1])).subgraphs[0])
    assert declared_one == ((0, 0, 1, 2, 3, 1),)
    one: tuple = (set(), {})
    assert step(one, (1, 1), (1,), nodes=declared_one) is None and not one[0]
    assert step(one, (1,) * 6, (1,) * 6, (1,) * 5, nodes=declared_one) is None and not one[0]
    assert step(one, r6, r6, nodes=declared_one) is None
    # The declared output holds 6 values: no early return, and 6 dimensions in broadcast mode.
    six: tuple = (set(), {})
    assert isinstance(step(six, (1,) * 6, (1,) * 6, (1,) * 5), ShapeError) and six[0] == {0}
    # After an output of six, one value each sets the flag; after an output of one, it does not.
    after: tuple = (set(), {})
    assert step(after, (2, 3), (2, 3), nodes=declared_one) is None and after[1] == {0: False}
    assert step(after, (1, 1), (1,), nodes=declared_one) is None and after[0] == {0}
    # After a failed allocation, or one whose shapes are not known, the output counts as holding more.
    failed: tuple = (set(), {})
    assert step(failed, (1, 1), (1,), check=False, nodes=declared_one) is None and failed[1] == {0: False}
    assert step(failed, (1, 1), (1,), nodes=declared_one) is None and failed[0] == {0}
    unknown: tuple = (set(), {})
    assert note_and_check(declared_one, {0: (1, 1)}.get, unknown[0], 0, True, unknown[1], 5) is None
    assert unknown == (set(), {0: False})
    # A runtime that broadcasts any rank: SELECT_V2 nodes are not looked at.
    free: tuple = (set(), {})
    assert step(free, (2, 1), (2, 3), rank=None) is None and not free[0]
    assert step(free, r6, r6, rank=None) is None


def test_select_v2_nodes_are_kept_in_the_models_record_and_remembered_from_it(verdicts):
    """A later start reads the SELECT_V2 nodes from the record on disk (no operators parsed), and its
    interpreter still remembers a broadcast: refused before 2.23, np.where's values from 2.23 on."""
    data = select_v2_model([2, 1], [2, 3], [2, 3])
    with oo.Interpreter(model_content=data) as first:
        _v2_run(first, _v2_values(([2, 1], [2, 3], [2, 3])))
    [record] = verdicts.glob("*.rec")
    assert marshal.loads(record.read_bytes())["select"] == [[0, 0, 1, 2, 3, 0]]
    cache.clear()  # a new process: only the record on disk is left
    with oo.Interpreter(model_content=data) as second:
        assert "_source" in second._info.__dict__  # (read from the record, not parsed)
        _v2_run(second, _v2_values(([2, 1], [2, 3], [2, 3]), seed=1))
        values = _v2_values((R6, R6, R6), seed=2)
        if _affected():
            with pytest.raises(ShapeError, match=re.escape(BROADCAST_MODE)):
                for k, v in enumerate(values):
                    second.resize_tensor_input(k, list(v.shape))
                second.allocate_tensors()
        else:
            _v2_run(second, values)


# -- SELECT_V2's output shape kept by Prepare's early return (every runtime) --------------------
#
# select.cc's Prepare returns before resizing the output when the condition, x, y and the output
# (as the previous Prepare left it) all hold one value, so the output keeps that shape: condition
# [1, 1], x [1], y [1] (output [1, 1]), then all three [1, 1, 1] give an output of [1, 1].  Values
# right, shape wrong, and an operator after it computes with the stale shape.  Measured on 2.17.1,
# 2.23.0 and ai-edge-litert alike, for every sequence below; the last allocation is refused.

KEPT = "but TFLite's SELECT_V2 keeps the output shape"

# name: (declared condition, x, y, output; the allocations after the declared one, the last refused)
V2_KEPT = {
    "rank 2, then all ones of rank 6": (([1, 1], [1], [1], [1, 1]), [([1] * 6,) * 3]),
    "rank 2, then all ones of rank 3": (([1, 1], [1], [1], [1, 1]), [([1, 1, 1],) * 3]),
    "rank 2, then [1]": (([1, 1], [1], [1], [1, 1]), [([1],) * 3]),
    "rank 2, then scalars": (([1, 1], [1], [1], [1, 1]), [([],) * 3]),
    "scalars, then [1, 1]": (([], [], [], []), [([1, 1],) * 3]),
    "scalars, then mixed ranks": (([], [], [], []), [([1], [1, 1, 1], [])]),
    "rank 2 kept through a [1, 1] run": (([1, 1], [1], [1], [1, 1]), [([1, 1],) * 3, ([1, 1, 1, 1],) * 3]),
    "declared output [1], then rank 3": (([1, 1], [1], [1], [1]), [([1, 1, 1],) * 3]),
}


def kept_model(c, x, y, out, then_add=None, op="SELECT_V2") -> bytes:
    """out = SELECT_V2(c, x, y) (or ``op``) with the output declared as given (not always the broadcast),
    and a signature "select"; with ``then_add``, the graph's output is out + z (z an input of that shape)."""
    b = ModelBuilder()
    ids = [b.add_tensor("c", c, np.bool_), b.add_tensor("x", x, f32), b.add_tensor("y", y, f32)]
    o = b.add_tensor("out", out, f32)
    b.add_op(op, ids, [o])
    outs = {"out": o}
    if then_add is not None:
        z, s = b.add_tensor("z", then_add, f32), b.add_tensor("sum", then_add, f32)
        b.add_op("ADD", [o, z], [s])
        ids.append(z)
        outs = {"sum": s}
    b.set_inputs(ids)
    b.set_outputs(list(outs.values()))
    b.add_signature("select", dict(zip("cxyz", ids)), outs)
    return b.build()


def _refused_at_allocation(it, values, match: str, *said: str) -> None:
    """Resizing the inputs to ``values``' shapes: allocate_tensors() raises ShapeError (``match``, and each of
    ``said`` in its message), and the interpreter is left unallocated."""
    for k, v in enumerate(values):
        it.resize_tensor_input(k, list(v.shape))
    with pytest.raises(ShapeError, match=re.escape(match)) as err:
        it.allocate_tensors()
    for part in said:
        assert part in str(err.value), str(err.value)
    with pytest.raises(oo.NotAllocatedError):
        it.invoke()


def _kept_refused(it, values, kept):
    _refused_at_allocation(
        it,
        values,
        KEPT,
        "subgraph 0 operator 0 (SELECT_V2)",
        f"output shape {kept} it already had",
        f"broadcast to {list(np.where(*values).shape)}, but",
        "Resize the inputs so that they broadcast to",
    )


@pytest.mark.parametrize("case", list(V2_KEPT))
@pytest.mark.parametrize("isolate", [False, True], ids=["in_process", "isolated"])
def test_select_v2_output_kept_by_the_early_return_is_refused_and_the_fixes_run(case, isolate):
    declared, later = V2_KEPT[case]
    kept = declared[3] if len(later) == 1 else list(later[-2][0])
    with oo.Interpreter(model_content=kept_model(*declared), isolate=isolate) as it:
        # The model's own shapes run, with the declared output (what every runtime gives).
        values = _v2_values(declared[:3])
        out = _run(it, *values)
        assert list(out.shape) == declared[3]
        np.testing.assert_array_equal(out.reshape(-1), np.where(*values).reshape(-1))
        for k, shapes in enumerate(later[:-1]):
            _v2_run(it, _v2_values(shapes, seed=k + 1))
        _kept_refused(it, _v2_values(later[-1], seed=9), kept)
        # The message's fixes: inputs that broadcast to the kept shape, or shapes of more than one
        # value (one shape: no broadcast mode, which 2.17.1 refuses at 6 dimensions), after which all
        # ones get their broadcast shape.
        _v2_run(it, _v2_values((kept, kept, [1] * len(kept)), seed=10))
        _v2_run(it, _v2_values(([2, 3],) * 3, seed=11))
        _v2_run(it, _v2_values(later[-1], seed=12))


def test_select_v2_all_ones_that_the_early_return_leaves_right_still_run():
    """Never refused where every runtime gives the broadcast shape: the early return keeping a shape
    that is the broadcast, or no early return (the output held more than one value)."""
    with oo.Interpreter(model_content=kept_model([1, 1], [1], [1], [1, 1])) as it:
        for k, shapes in enumerate((([1, 1], [1, 1], [1]), ([1], [1, 1], []), ([2, 3],) * 3, ([1, 1, 1],) * 3)):
            _v2_run(it, _v2_values(shapes, seed=k))
    with oo.Interpreter(model_content=kept_model([], [], [], [])) as it:
        _v2_run(it, _v2_values(([], [], [])))
        _v2_run(it, _v2_values(([3], [], [3])))  # (broadcast mode: still at 1 dimension)
        _v2_run(it, _v2_values(([1] * 5,) * 3, seed=1))


def test_select_v2_kept_output_is_refused_through_a_signature_runner():
    c, x, y = _v2_values(([1, 1, 1],) * 3)
    with oo.Interpreter(model_content=kept_model([1, 1], [1], [1], [1, 1])) as it:
        run = it.get_signature_runner("select")
        out = run(c=c[0, 0], x=x[0], y=y[0, 0])["out"]  # (scalar, [1, 1], scalar: the kept [1, 1] is right)
        assert out.shape == (1, 1) and out[0, 0] == np.where(c, x, y).item()
        with pytest.raises(ShapeError, match=re.escape(KEPT)):
            run(c=c, x=x, y=y)
        np.testing.assert_array_equal(run(c=c[0], x=x[0], y=y[0])["out"], np.where(c[0], x[0], y[0]))


@pytest.mark.parametrize("op", ["SELECT_V2", "SELECT"])
def test_an_operator_after_the_kept_output_gets_the_wrong_shape_without_the_rule(monkeypatch, op):
    """The harm: ADD broadcasts the stale [1, 1] with z [2, 3] to [2, 3] where np.where's [1, 1, 1]
    (SELECT's x's shape too) gives [1, 2, 3].  Without the rule this runtime (and ai-edge-litert)
    returns that shape; with it the allocation is refused."""
    data = kept_model([1, 1], [1, 1], [1, 1], [1, 1], then_add=[2, 3], op=op)
    first = _v2_values(([1, 1],) * 3) + (np.ones((2, 3), f32),)
    stale = _v2_values(([1, 1, 1],) * 3, seed=1) + (np.arange(6, dtype=f32).reshape(2, 3),)
    want = np.where(*stale[:3]) + stale[3]
    assert want.shape == (1, 2, 3)

    def run(it, values):
        """(The inputs are tensors 0, 1, 2 and 4, on this interpreter and ai-edge-litert's.)"""
        inputs = [d["index"] for d in it.get_input_details()]
        for k, v in zip(inputs, values):
            it.resize_tensor_input(k, list(v.shape))
        it.allocate_tensors()
        for k, v in zip(inputs, values):
            it.set_tensor(k, v)
        it.invoke()
        return it.get_tensor(it.get_output_details()[0]["index"])

    def sequence(it):
        np.testing.assert_array_equal(run(it, first), np.where(*first[:3]) + first[3])
        return run(it, stale)

    with oo.Interpreter(model_content=data) as it:
        with pytest.raises(ShapeError, match=re.escape(f"but TFLite's {op} keeps the output shape [1, 1]")):
            sequence(it)
    monkeypatch.setattr(select_rows, "_kept_output", lambda *a: None)
    with oo.Interpreter(model_content=data) as it:
        out = sequence(it)
    assert out.shape == (2, 3)  # the defect itself, in the runtime: a shape no operator gives
    np.testing.assert_array_equal(out.reshape(-1), want.reshape(-1))  # (its values are right)
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    assert sequence(litert.Interpreter(model_content=data)).shape == (2, 3)


def test_note_and_check_refuses_a_kept_output_only_when_it_is_not_the_broadcast():
    """The rule alone: an output of one value whose shape is not the broadcast of three inputs of one
    value each, on every runtime (rank None too), after a successful allocation only, and not at the
    model's declared shapes."""
    nodes = select_rows.kept_nodes_of(read_model(kept_model([1, 1], [1], [1], [1])).subgraphs[0])
    declared = {0: (1, 1), 1: (1,), 2: (1,), 3: (1,)}.get

    def step(c, x, y, out, rank=None, check=True):
        shapes = {0: c, 1: x, 2: y, 3: out}
        return note_and_check(nodes, shapes.get, set(), 0, check, {}, rank, declared)

    for rank in (None, 5):
        assert isinstance(step((1, 1, 1), (1,), (), (1, 1), rank), ShapeError)
        assert isinstance(step((), (), (), (1,), rank), ShapeError)
        assert isinstance(step((1,), (1,), (1,), (), rank), ShapeError)
        assert step((1, 1, 1), (1,), (), (1, 1, 1), rank) is None  # the broadcast
        assert step((1, 1), (1,), (1,), (1,), rank) is None  # the model's declared shapes
        assert step((2, 3), (2, 3), (2, 3), (1,), rank) is None  # (no early return: not this rule)
        assert step((1, 1, 1), (1,), (1,), None, rank) is None  # unknown output
        assert step((1, 1, 1), (1,), (), (1, 1), rank, check=False) is None  # a failed allocation


@pytest.mark.parametrize("op", ["SELECT_V2", "SELECT"])
def test_a_kept_output_from_the_models_record_keeps_the_declared_exception(op, verdicts):
    """A later start reads the SELECT / SELECT_V2 nodes (SELECT's with their outputs) from the record (no
    operators parsed): the model's own shapes (output declared [1] for a [1, 1] output) still run, and a
    kept [1] for three [1, 1, 1] is refused."""
    if op == "SELECT_V2":
        data, values, refused = kept_model([1, 1], [1], [1], [1]), _v2_values(([1, 1], [1], [1])), _kept_refused
    else:
        data, values = kept_model([1, 1], [1, 1], [1, 1], [1], op="SELECT"), _v2_values(([1, 1],) * 3)
        refused = _v1_kept_refused
    for start in ("first", "from the record"):
        with oo.Interpreter(model_content=data) as it:
            if start != "first":
                assert "_source" in it._info.__dict__  # (read from the record, not parsed)
            out = _run(it, *values)
            assert out.shape == (1,) and out[0] == np.where(*values).item()
            refused(it, _v2_values(([1, 1, 1],) * 3, seed=1), [1])
        [record] = verdicts.glob("*.rec")
        if op == "SELECT":
            assert marshal.loads(record.read_bytes())["select"] == [[0, 0, 1, 2, 3]]
        cache.clear()  # a new process: only the record on disk is left


# -- SELECT's output shape kept by the same early return (every runtime) ------------------------
#
# select.cc's Prepare returns early before it tells SELECT from SELECT_V2, so SELECT keeps a
# one-value output shape the same way: three [1, 1] (output [1, 1]), then three [1] or three
# scalars, leave it [1, 1]; three [1], then three [1, 1, 1], leave it [1].  Without the early return
# (an output declared with more than one value) SELECT's output is x's shape, or Prepare refuses
# inputs that do not fit it (condition [1, 1] with x [1]; x [1] with y [1, 1]).  Measured on 2.17.1,
# 2.23.0 and ai-edge-litert alike, for every sequence below; the last allocation is refused.

# name: (declared condition, x, y, output; the allocations after the declared one, the last refused)
V1_KEPT = {
    "[1, 1], then [1]": (([1, 1],) * 4, [([1],) * 3]),
    "[1, 1], then scalars": (([1, 1],) * 4, [([],) * 3]),
    "[1], then [1, 1, 1]": (([1],) * 4, [([1, 1, 1],) * 3]),
    "scalars, then [1] * 6": (([],) * 4, [([1] * 6,) * 3]),
    "[1, 1] kept through a [1, 1] run": (([1, 1],) * 4, [([1, 1],) * 3, ([1, 1, 1, 1],) * 3]),
    "declared output [1], then [1, 1, 1]": (([1, 1], [1, 1], [1, 1], [1]), [([1, 1, 1],) * 3]),
    # (Inputs SELECT takes only through the early return: without it Prepare refuses them.)
    "[1, 1], then a condition [1, 1] of x [1]": (([1, 1],) * 4, [([1, 1], [1], [1])]),
}


def _v1_run(it, values):
    """Resize to these values' shapes, allocate, invoke: SELECT's output, checked against np.where.

    (Only for inputs of one shape, or a scalar condition: there np.where's shape is x's, SELECT's.)"""
    out = _run(it, *values)
    want = np.where(*values)
    assert out.shape == want.shape == values[1].shape
    np.testing.assert_array_equal(out, want)


def _v1_kept_refused(it, values, kept):
    _refused_at_allocation(
        it,
        values,
        "but TFLite's SELECT keeps the output shape",
        "subgraph 0 operator 0 (SELECT)",
        f"output shape {kept} it already had",
        f"call for an output of x's shape {list(values[1].shape)}, but",
        f"Resize the condition, x and y to {kept}",
    )


@pytest.mark.parametrize("case", list(V1_KEPT))
@pytest.mark.parametrize("isolate", [False, True], ids=["in_process", "isolated"])
def test_select_output_kept_by_the_early_return_is_refused_and_the_fixes_run(case, isolate):
    declared, later = V1_KEPT[case]
    kept = declared[3] if len(later) == 1 else list(later[-2][1])
    with oo.Interpreter(model_content=kept_model(*declared, op="SELECT"), isolate=isolate) as it:
        # The model's own shapes run, with the declared output (what every runtime gives).
        values = _v2_values(declared[:3])
        out = _run(it, *values)
        assert list(out.shape) == declared[3]
        np.testing.assert_array_equal(out.reshape(-1), np.where(*values).reshape(-1))
        for k, shapes in enumerate(later[:-1]):
            _v1_run(it, _v2_values(shapes, seed=k + 1))
        _v1_kept_refused(it, _v2_values(later[-1], seed=9), kept)
        # The message's fixes: the three inputs of the kept shape, or of one shape of more than one
        # value, after which all ones of one shape get that shape (x's).
        _v1_run(it, _v2_values((kept,) * 3, seed=10))
        _v1_run(it, _v2_values(([2, 3],) * 3, seed=11))
        last = later[-1] if later[-1][0] == later[-1][1] else (later[-1][1],) * 3
        _v1_run(it, _v2_values(last, seed=12))


def test_select_all_ones_that_the_early_return_leaves_right_still_run():
    """Never refused where every runtime gives x's shape: the early return keeping a shape that is
    x's (a scalar or [1] condition too), or no early return (the output held more than one value)."""
    with oo.Interpreter(model_content=kept_model([1, 1], [1, 1], [1, 1], [1, 1], op="SELECT")) as it:
        for k, shapes in enumerate(
            (
                ([1, 1],) * 3,
                ([], [1, 1], [1, 1]),
                ([1], [1, 1], [1, 1]),
                ([2, 3],) * 3,  # (the early return took no row-wise mode: see the tests below)
                ([1, 1, 1],) * 3,
                ([], [1, 1, 1], [1, 1, 1]),
                ([1], [1, 1, 1], [1, 1, 1]),
                ([2, 3],) * 3,
            )
        ):
            _v1_run(it, _v2_values(shapes, seed=k))
    with oo.Interpreter(model_content=kept_model([], [], [], [], op="SELECT")) as it:
        _v1_run(it, _v2_values(([], [], [])))
        _v1_run(it, _v2_values(([3],) * 3, seed=1))
        _v1_run(it, _v2_values(([1] * 5,) * 3, seed=2))


def test_select_kept_output_is_refused_through_a_signature_runner():
    c, x, y = _v2_values(([1, 1, 1],) * 3)
    with oo.Interpreter(model_content=kept_model([1, 1], [1, 1], [1, 1], [1, 1], op="SELECT")) as it:
        run = it.get_signature_runner("select")
        out = run(c=c[0], x=x[0], y=y[0])["out"]
        assert out.shape == (1, 1) and out[0, 0] == np.where(c, x, y).item()
        with pytest.raises(ShapeError, match=re.escape("but TFLite's SELECT keeps the output shape [1, 1]")):
            run(c=c, x=x, y=y)
        np.testing.assert_array_equal(run(c=c[0], x=x[0], y=y[0])["out"], np.where(c[0], x[0], y[0]))


def test_note_and_check_refuses_a_kept_select_output_only_when_it_is_not_xs_shape():
    """The rule alone, for SELECT: an output of one value whose shape is not x's, with three inputs of
    one value each, on every runtime (rank None too), after a successful allocation only, and not at
    the model's declared shapes."""
    nodes = select_rows.kept_nodes_of(read_model(kept_model([1, 1], [1, 1], [1, 1], [1], op="SELECT")).subgraphs[0])
    assert nodes == ((0, 0, 1, 2, 3),)
    declared = {0: (1, 1), 1: (1, 1), 2: (1, 1), 3: (1,)}.get

    def step(c, x, y, out, rank=None, check=True):
        shapes = {0: c, 1: x, 2: y, 3: out}
        return note_and_check(nodes, shapes.get, set(), 0, check, {}, rank, declared)

    for rank in (None, 5):
        assert isinstance(step((1,), (1,), (1,), (1, 1), rank), ShapeError)
        assert isinstance(step((), (), (), (1,), rank), ShapeError)
        assert isinstance(step((1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1), rank), ShapeError)
        assert isinstance(step((), (1, 1), (1, 1), (1,), rank), ShapeError)  # (a scalar condition: x's shape)
        assert isinstance(step((1, 1), (1,), (1,), (1, 1), rank), ShapeError)  # (not SELECT's broadcast either)
        assert step((1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1), rank) is None  # x's shape
        assert step((), (1, 1), (1, 1), (1, 1), rank) is None
        assert step((1, 1), (1,), (1,), (1,), rank) is None  # x's shape, which SELECT's definition gives
        assert step((1, 1), (1, 1), (1, 1), (1,), rank) is None  # the model's declared shapes
        assert step((2, 3), (2, 3), (2, 3), (1,), rank) is None  # (no early return: not this rule)
        assert step((1, 1, 1), (1, 1, 1), (1, 1, 1), None, rank) is None  # unknown output
        assert step((1,), (1,), (1,), (1, 1), rank, check=False) is None  # a failed allocation


def test_a_record_of_select_nodes_without_their_output_is_not_read(verdicts, monkeypatch):
    """A record written before a SELECT's output was kept holds [operator, condition, x, y] for it
    (the same name: a code digest left as it was).  Not misread: it is ignored, the model checked
    again, the record rewritten with the output, and the kept output still refused."""
    data = kept_model([1, 1], [1, 1], [1, 1], [1, 1], op="SELECT")
    with oo.Interpreter(model_content=data) as it:
        _v1_run(it, _v2_values(([1, 1],) * 3))
    [record] = verdicts.glob("*.rec")
    doc = marshal.loads(record.read_bytes())
    assert doc["select"] == [[0, 0, 1, 2, 3]]
    old = marshal.dumps(dict(doc, select=[[0, 0, 1, 2]]), cache._MARSHAL_VERSION)
    stem = record.name[: -len(".rec")].rsplit("-", 1)[0]
    planted = record.with_name(f"{stem}-{hashlib.blake2b(old, digest_size=32).hexdigest()}.rec")
    record.unlink()
    planted.write_bytes(old)
    planted.chmod(0o600)
    assert cache._lookup(bytes.fromhex(stem.split("-")[0])) is None  # (the name is found, its form refused)

    cache.clear()  # a new process: only the old record on disk is left
    checked = []
    real = checks.check_model

    def counted(*a, **k):
        checked.append(1)
        return real(*a, **k)

    monkeypatch.setattr(checks, "check_model", counted)
    with oo.Interpreter(model_content=data) as it:
        assert checked  # the model was read and checked again, not taken from the old record
        _v1_run(it, _v2_values(([1, 1],) * 3, seed=1))
        _v1_kept_refused(it, _v2_values(([1],) * 3, seed=2), [1, 1])
    [again] = verdicts.glob("*.rec")
    assert again != planted and marshal.loads(again.read_bytes())["select"] == [[0, 0, 1, 2, 3]]


# -- SELECT's row-wise mode and the early return ------------------------------------------------
#
# The early return comes before Prepare sets the row-wise flag, so a scalar or [1] condition with x
# and y of one value each, when the output held one value too, takes no row-wise mode, and a later
# allocation of one shape [2, 3] runs elementwise (np.where's values on ai-edge-litert, 2.17.1 and
# 2.23.0).  When the output held more (the previous allocation's, or the declared one), Prepare sets
# the flag and [2, 3] then gives wrong values (measured on ai-edge-litert): still refused.

# name: (declared shape of all four, the allocations before [2, 3] * 3, whether it is refused)
ROWS_AFTER_ONES = {
    "scalar condition, early return": ([1, 1], [([], [1, 1], [1, 1])], False),
    "[1] condition, early return": ([1, 1], [([1], [1, 1], [1, 1])], False),
    "scalar condition, declared output of 6 values": ([2, 3], [([], [1, 1], [1, 1])], True),
    "scalar condition after [2, 3]": ([1, 1], [([2, 3],) * 3, ([], [1, 1], [1, 1])], True),
    "scalar condition after [1, 1] after [2, 3]": ([1, 1], [([2, 3],) * 3, ([1, 1],) * 3, ([], [1, 1], [1, 1])], False),
}


@pytest.mark.parametrize("case", list(ROWS_AFTER_ONES))
@pytest.mark.parametrize("start", ["first", "from the record"])
def test_a_condition_that_prepare_returned_early_for_takes_no_row_wise_mode(verdicts, case, start):
    d, before, refused = ROWS_AFTER_ONES[case]
    data = kept_model(d, d, d, d, op="SELECT")
    if start != "first":
        with oo.Interpreter(model_content=data) as it:
            _v1_run(it, _v2_values((d,) * 3))
        cache.clear()  # a new process: only the record on disk is left
    with oo.Interpreter(model_content=data) as it:
        if start != "first":
            assert "_source" in it._info.__dict__  # (read from the record: declared() reads the model)
        for k, shapes in enumerate(before):
            _v1_run(it, _v2_values(shapes, seed=k))
        values = _v2_values(([2, 3],) * 3, seed=9)
        if refused:
            with pytest.raises(ShapeError, match=re.escape(STALE)):
                _run(it, *values)
        else:
            _v1_run(it, values)


def test_note_and_check_takes_no_row_wise_mode_where_prepare_returned_early():
    """The rule alone: a scalar or [1] condition with x and y of one value each sets the flag only
    when the output held more than one value before (the last allocation's, else the declared)."""
    nodes = select_rows.kept_nodes_of(read_model(kept_model([1, 1], [1, 1], [1, 1], [1, 1], op="SELECT")).subgraphs[0])
    asked = []

    def declared(t):
        asked.append(t)
        return {3: out}[t]

    def step(rows, memory, c, x, o):
        return note_and_check(nodes, {0: c, 1: x, 2: x, 3: o}.get, rows, 0, True, memory, None, declared)

    for out, taken in (((1, 1), False), ((2, 3), True), ((), False)):
        rows: set = set()
        memory: dict = {}
        assert step(rows, memory, (), (1, 1), (1, 1)) is None and (0 in rows) == taken, out
        assert asked == [3]  # (the declared output, at the first allocation only)
        asked.clear()
        assert step(rows, memory, (1,), (1, 1), (1, 1)) is None and (0 in rows) == taken and not asked
        assert isinstance(step(rows, memory, (2, 3), (2, 3), (2, 3)), ShapeError) == taken
        assert step(rows, memory, (), (1, 1), (1, 1)) is None and 0 in rows  # (the output held 6 values)
        assert not asked
    # Not the early return's case: never asked, as before.
    rows = set()
    assert step(rows, {}, (), (2, 3), (2, 3)) is None and rows == {0} and not asked
    assert step(rows, {}, (1, 1), (1, 1), (1, 1)) is None and not asked
