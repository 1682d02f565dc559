"""opaque_ops.model.checks.called on the paths the control-flow tests of test_version_rules do not take.

There every called subgraph is reached from subgraph 0 through the
Interpreter's own allocation.  Here: the init subgraph that CALL_ONCE runs
(tensorflow/lite/kernels/call_once.cc allocates and invokes it in its Eval,
once), and signature runners, whose allocation prepares the runner's own
subgraph and, through its WHILE or IF (while.cc, if.cc), the subgraphs those
run: for a signature on a subgraph other than 0, for one on subgraph 0, and
for two callers sharing one branch subgraph (its nodes, and SELECT_V2's
broadcast mode with them, are the same for both).

Measured in child processes before these tests, on 2.17.1, 2.23.0 and
ai-edge-litert: each model of CRASHERS aborts 2.17.1 (SIGABRT) in invoke
without the rules and is refused with them, and 2.23.0 and ai-edge-litert
give np.where's values; the kept output through a runner is [1] where
np.where gives [1, 1] on all three without the rule.  The rules held on
every one of these paths.  One refusal was false: a SELECT_V2 of three
constants [1] with a scalar output in the init subgraph, which every runtime
runs, was refused on 2.17.1 as shapes decided at run time (a subgraph without
inputs meets the same shapes at every Prepare: checks.called now follows it).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.errors import ModelError, ShapeError
from opaque_ops.model import ModelBuilder, check_allocated, read_model
from opaque_ops.model.checks.version_rules import affected
from opaque_ops.runtime import runtime_info
from tests.helpers.child_process import crashed, run_child
from tests.model.test_version_rules import (
    C6,
    KEPT_CALLED,
    LOW,
    NOT_KNOWN,
    R6,
    STALE_CALLED,
    _control_flow_values,
    if_select_v2_model,
    while_select_v2_model,
)

litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is a test dependency")

f32 = np.float32
# What an affected runtime's refusal of a 6-D broadcast says (check_select_v2_in_control_flow).
SIX = "broadcasts through at most 5 dimensions and aborts the process on more"


def _schema():
    from tools.fuzz_structured import _schema as schema

    return schema()


def _pack(m) -> bytes:
    from tools.fuzz_structured import pack

    return pack(m)


def _unpack(data: bytes):
    from tools.fuzz_structured import unpack

    return unpack(data)


def _sign(m, k: int, key: str) -> None:
    """Add a signature ``key`` over subgraph ``k`` of the ModelT ``m``: its inputs and outputs by their names."""
    s = _schema()
    sg = m.subgraphs[k]

    def maps(indices):
        out = []
        for t in indices:
            tm = s.TensorMapT()
            tm.name, tm.tensorIndex = sg.tensors[t].name, t
            out.append(tm)
        return out

    sd = s.SignatureDefT()
    sd.signatureKey, sd.subgraphIndex = key, k
    sd.inputs, sd.outputs = maps(sg.inputs), maps(sg.outputs)
    m.signatureDefs = [*(m.signatureDefs or []), sd]


_CALLED_FIELDS = {
    "IfOptionsT": ("thenSubgraphIndex", "elseSubgraphIndex"),
    "WhileOptionsT": ("condSubgraphIndex", "bodySubgraphIndex"),
    "CallOnceOptionsT": ("initSubgraphIndex",),
}


def signed(data: bytes, key: str = "main") -> bytes:
    """The model with a signature ``key`` over its subgraph 0."""
    m = _unpack(data)
    _sign(m, 0, key)
    return _pack(m)


def behind_a_plain_subgraph(data: bytes, key: str = "run") -> bytes:
    """The model's subgraphs moved one place on, behind a new subgraph 0 (y = x + x, signature "plain"):
    its caller is subgraph 1, with a signature ``key``, and every subgraph index its operators name moves too."""
    from tools.fuzz_structured import _join_subgraphs

    plain = ModelBuilder()
    x, y = plain.add_tensor("v", [2], f32), plain.add_tensor("w", [2], f32)
    plain.add_op("ADD", [x, x], [y])
    plain.set_inputs([x])
    plain.set_outputs([y])
    plain.add_signature("plain", {"v": x}, {"w": y})
    m = _join_subgraphs(plain.build(), data)
    for sg in m.subgraphs[1:]:
        for op in sg.operators or []:
            for field in _CALLED_FIELDS.get(type(op.builtinOptions).__name__, ()):
                setattr(op.builtinOptions, field, getattr(op.builtinOptions, field) + 1)
    _sign(m, 1, key)
    return _pack(m)


def shared_branches_model() -> bytes:
    """Subgraph 0: out = IF(flag, c, x, y) declared at R6 (signature "main"); subgraph 3: the same IF declared
    at LOW (signature "two").  Both run subgraphs 1 and 2 (SELECT_V2(c, x, y), SELECT_V2(c, y, x))."""
    m = _unpack(if_select_v2_model(R6, R6, R6))
    two = _unpack(if_select_v2_model(*LOW))
    assert [c.builtinCode for c in m.operatorCodes] == [c.builtinCode for c in two.operatorCodes]
    m.subgraphs.append(two.subgraphs[0])  # (no constants: no buffers to move)
    _sign(m, 0, "main")
    _sign(m, 3, "two")
    return _pack(m)


def call_once_select_v2_model(c, x, y, out=None) -> bytes:
    """w = v + v after CALL_ONCE of subgraph 1, whose SELECT_V2 takes constants of shapes c, x and y (its
    output declared ``out``, by default their broadcast)."""
    from tests.model.test_select_rows import _joined

    rng = np.random.default_rng(3)
    main = ModelBuilder()
    v, w = main.add_tensor("v", [2], f32), main.add_tensor("w", [2], f32)
    main.add_op("CALL_ONCE", [], [])
    main.add_op("ADD", [v, v], [w])
    main.set_inputs([v])
    main.set_outputs([w])
    init = ModelBuilder(subgraph_name="init")
    ins = [init.add_constant("c", rng.random(c) > 0.5), init.add_constant("x", rng.standard_normal(x).astype(f32))]
    ins.append(init.add_constant("y", rng.standard_normal(y).astype(f32)))
    out = list(np.broadcast_shapes(c, x, y)) if out is None else out
    init.add_op("SELECT_V2", ins, [init.add_tensor("out", out, f32)])
    init.set_inputs([])
    init.set_outputs([])
    return _joined(main, [init], "CallOnceOptions", {"initSubgraphIndex": 1})


# -- CALL_ONCE ----------------------------------------------------------------------------------

V = np.array([1.5, -2.0], f32)

# name: (model, whether 2.17.1 aborts in it).
CALL_ONCE_CASES = {
    "init subgraph broadcasting to 6 dimensions": (lambda: call_once_select_v2_model(C6, R6, R6), True),
    "init subgraph broadcasting to 5 dimensions": (lambda: call_once_select_v2_model(C6[1:], R6[1:], R6[1:]), False),
    "init subgraph of one shape at 6 dimensions": (lambda: call_once_select_v2_model(R6, R6, R6), False),
    # Three inputs of one value each with a scalar output: select.cc's early return keeps the declared
    # shape, the same at every Prepare of a subgraph without inputs.  (Refused on 2.17.1 as shapes
    # "decided only while the model runs" before it was followed there.)
    "init subgraph of three [1] with a scalar output": (
        lambda: call_once_select_v2_model([1], [1], [1], out=[]),
        False,
    ),
}


def _run_main(it) -> np.ndarray:
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], V)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


@pytest.mark.parametrize("case", list(CALL_ONCE_CASES))
def test_select_v2_in_a_call_once_init_subgraph_refused_before_2_23_only_where_it_aborts(case):
    build, aborts = CALL_ONCE_CASES[case]
    info = read_model(build())
    for version in ("2.17.1", "2.22.0", "2.23.0", None):
        config = () if version is None else ((version, "/some/libtensorflowlite_c.so"), False, 0)
        if aborts and affected(version):
            with pytest.raises(ModelError, match=re.escape(SIX)) as err:
                check_allocated(info, lambda t: None, config)
            message = str(err.value)
            assert "subgraph 1 operator 0 (SELECT_V2), in a subgraph that subgraph 0 operator 0 (CALL_ONCE) runs" in (
                message
            )
        else:
            check_allocated(info, lambda t: None, config)


def test_select_v2_of_one_value_each_with_another_declared_output_stays_not_known_in_a_branch():
    """The same SELECT_V2 (three [1], a scalar output) in an IF branch: there its output is the node's past
    (a kept shape of an earlier allocation), so 2.17.1's rule still refuses it as not known."""
    m = _unpack(if_select_v2_model([1], [1], [1]))
    for sg in m.subgraphs[1:]:
        sg.tensors[sg.outputs[0]].shape = []
    info = read_model(_pack(m))
    given = dict(zip(info.subgraphs[0].inputs, [(), (1,), (1,), (1,)]))
    with pytest.raises(ModelError, match=re.escape(NOT_KNOWN)):
        check_allocated(info, given.get, (("2.17.1", "/some/libtensorflowlite_c.so"), False, 0))


@pytest.mark.parametrize("case", list(CALL_ONCE_CASES))
def test_select_v2_in_a_call_once_init_subgraph_on_the_loaded_runtime_refused_or_run(case):
    """In this process only the allocation where it aborts; elsewhere the run, against numpy and ai-edge-litert."""
    build, aborts = CALL_ONCE_CASES[case]
    with oo.Interpreter(model_content=build()) as it:
        if aborts and affected(runtime_info().version):
            with pytest.raises(ModelError, match=re.escape(SIX)):
                it.allocate_tensors()
            return
        got = _run_main(it)
    np.testing.assert_array_equal(got, V + V)
    np.testing.assert_array_equal(got, _run_main(litert.Interpreter(model_content=build())))


_CALL_ONCE_CHILD = """
    import sys
    import opaque_ops as oo
    from opaque_ops.model.checks import allocated
    from tests.model.test_called import CALL_ONCE_CASES, V, _run_main
    if sys.argv[2] == "without":
        allocated.check_select_v2_in_control_flow = lambda *a: None
    it = oo.Interpreter(model_content=CALL_ONCE_CASES[sys.argv[1]][0]())
    print("invoking", flush=True)
    try:
        got = _run_main(it)
    except oo.ModelError:
        print("refused")
    else:
        print("ran", bool((got == V + V).all()))
"""


def _assert_aborts_only_without_the_rule(child: str, case: str, tmp_path) -> None:
    """``child`` on ``case``, "without" and "with" the rules, each with verdicts of its own: on 2.17.1 the first
    aborts (SIGABRT) while invoking and the second is refused; elsewhere both run with numpy's values."""
    bare = run_child(child, case, "without", env={"OPAQUE_OPS_VERDICT_CACHE": str(tmp_path / "a")})
    guarded = run_child(child, case, "with", env={"OPAQUE_OPS_VERDICT_CACHE": str(tmp_path / "b")})
    if affected(runtime_info().version):
        assert bare.signal == 6 and bare.stdout.split()[-1] == "invoking", crashed(bare)
        assert guarded.returncode == 0 and guarded.stdout.split()[-1] == "refused", crashed(guarded)
    else:
        for p in (bare, guarded):
            assert p.returncode == 0 and p.stdout.split()[-2:] == ["ran", "True"], crashed(p)


def test_select_v2_in_a_call_once_init_subgraph_aborts_without_the_rule_in_a_child(tmp_path):
    _assert_aborts_only_without_the_rule(_CALL_ONCE_CHILD, "init subgraph broadcasting to 6 dimensions", tmp_path)


# -- signature runners --------------------------------------------------------------------------


def _runner_values(caller: str, shapes, seed=7) -> dict:
    """A runner's inputs by name: IF's flag or WHILE's counter, then the condition, x and y."""
    c, x, y = _control_flow_values(shapes, seed)
    first = {"flag": np.array(True)} if caller == "IF" else {"i": np.array(0, np.int32)}
    return {**first, "c": c, "x": x, "y": y}


def _runner_out(runner, caller: str, values: dict) -> np.ndarray:
    """The IF's output, or the WHILE's x after its turns."""
    return runner(**values)["out" if caller == "IF" else "x_out"]


def _want(caller: str, values: dict) -> np.ndarray:
    c, x, y = values["c"], values["x"], values["y"]
    return np.where(c, x, y) if caller == "IF" else np.where(c, np.where(c, x, y), y)  # (two turns)


# name: (model, signature, caller, the SELECT_V2 named, the calling operator named, shapes (condition, x, y)).
# Each is declared at the shapes it runs on: a runner of a subgraph other than 0 resizes only the
# dimensions its signature leaves free (-1).
RUNNERS = {
    "if in subgraph 1": (
        lambda s: behind_a_plain_subgraph(if_select_v2_model(*s)),
        "run",
        "IF",
        "subgraph 2 operator 0",
        "subgraph 1 operator 0 (IF)",
    ),
    "while in subgraph 1": (
        lambda s: behind_a_plain_subgraph(while_select_v2_model(*s)),
        "run",
        "WHILE",
        "subgraph 3 operator 1",
        "subgraph 1 operator 0 (WHILE)",
    ),
    "if in subgraph 0": (
        lambda s: signed(if_select_v2_model(*s)),
        "main",
        "IF",
        "subgraph 1 operator 0",
        "subgraph 0 operator 0 (IF)",
    ),
    "while in subgraph 0": (
        lambda s: signed(while_select_v2_model(*s)),
        "main",
        "WHILE",
        "subgraph 2 operator 1",
        "subgraph 0 operator 0 (WHILE)",
    ),
}
SIX_D, FIVE_D = (C6, R6, R6), (C6[1:], R6[1:], R6[1:])


@pytest.mark.parametrize("case", list(RUNNERS))
@pytest.mark.parametrize("shapes", [SIX_D, FIVE_D], ids=["6d", "5d"])
def test_select_v2_called_through_a_signature_runner_refused_or_run_with_numpy_values(case, shapes):
    """The runner's allocation prepares its subgraph's WHILE or IF, and the SELECT_V2 they run: a broadcast
    of 6 dimensions is refused on the loaded runtime if it is affected (only that allocation, in this
    process); anything else runs with numpy's values and ai-edge-litert's."""
    build, key, caller, names, calling = RUNNERS[case]
    data = build(shapes)
    values = _runner_values(caller, shapes)
    with oo.Interpreter(model_content=data) as it:
        runner = it.get_signature_runner(key)
        if shapes == SIX_D and affected(runtime_info().version):
            with pytest.raises(ModelError, match=re.escape(SIX)) as err:
                runner.allocate_tensors()  # (at the declared shapes; nothing is invoked)
            assert f"{names} (SELECT_V2), in a subgraph that {calling} runs" in str(err.value)
            return
        got = _runner_out(runner, caller, values)
    np.testing.assert_array_equal(got, _want(caller, values))
    peer = litert.Interpreter(model_content=data)
    np.testing.assert_array_equal(got, _runner_out(peer.get_signature_runner(key), caller, values))


_RUNNER_CHILD = """
    import sys
    import numpy as np
    import opaque_ops as oo
    from opaque_ops.model.checks import allocated
    from tests.model.test_called import RUNNERS, SIX_D, _runner_out, _runner_values, _want
    if sys.argv[2] == "without":
        allocated.check_select_v2_in_control_flow = lambda *a: None
    build, key, caller, _, _ = RUNNERS[sys.argv[1]]
    values = _runner_values(caller, SIX_D)
    runner = oo.Interpreter(model_content=build(SIX_D)).get_signature_runner(key)
    print("invoking", flush=True)
    try:
        got = _runner_out(runner, caller, values)
    except oo.ModelError:
        print("refused")
    else:
        print("ran", np.array_equal(got, _want(caller, values)))
"""


@pytest.mark.parametrize("case", list(RUNNERS))
def test_select_v2_called_through_a_signature_runner_aborts_without_the_rule_in_a_child(case, tmp_path):
    _assert_aborts_only_without_the_rule(_RUNNER_CHILD, case, tmp_path)


def _shared_steps(it, then: str, invoke: bool = True):
    """Runner "two" at LOW (a broadcast of 2 dimensions), then subgraph 0 at its declared R6 through ``then``:
    runner "main" or the Interpreter itself.  Each step yields (numpy's output, the call's output); with
    ``invoke`` False the second only allocates, and yields nothing."""
    values = _runner_values("IF", LOW)
    yield _want("IF", values), it.get_signature_runner("two")(**values)["out"]
    values = _runner_values("IF", (R6, R6, R6), seed=8)
    if then == "main":
        runner = it.get_signature_runner("main")
        if not invoke:
            runner.allocate_tensors()
            return
        yield _want("IF", values), runner(**values)["out"]
        return
    it.allocate_tensors()
    if not invoke:
        return
    for d, v in zip(it.get_input_details(), values.values()):
        it.set_tensor(d["index"], v)
    it.invoke()
    yield _want("IF", values), it.get_tensor(it.get_output_details()[0]["index"])


@pytest.mark.parametrize("then", ["main", "interpreter"])
def test_a_branch_left_broadcasting_by_one_runner_is_refused_at_6_dimensions_through_another(then):
    """Subgraphs 0 and 3 run the same branch subgraphs, whose nodes are the interpreter's: runner "two"
    broadcasts the SELECT_V2 at [2, 1] against [2, 3], and subgraph 0 then gives it one shape of 6
    dimensions, through its runner or the Interpreter itself.  2.17.1 keeps broadcasting there and
    aborts (measured in a child without the memory): that allocation is refused (in this process only
    the allocation).  2.23.0 runs both with numpy's values."""
    older = affected(runtime_info().version)
    with oo.Interpreter(model_content=shared_branches_model()) as it:
        steps = _shared_steps(it, then, invoke=not older)
        want, got = next(steps)
        np.testing.assert_array_equal(got, want)
        if older:
            with pytest.raises(ShapeError, match=re.escape(STALE_CALLED)) as err:
                next(steps)
            assert "subgraph 1 operator 0 (SELECT_V2), in a subgraph that subgraph 0 operator 0 (IF) runs" in str(
                err.value
            )
            return
        want, got = next(steps)
        np.testing.assert_array_equal(got, want)


_SHARED_CHILD = """
    import sys
    import numpy as np
    import opaque_ops as oo
    from opaque_ops.model.checks import version_rules
    from tests.model.test_called import _shared_steps, shared_branches_model
    if sys.argv[2] == "without":
        version_rules.note_called_select_v2 = lambda *a, **k: None
    it = oo.Interpreter(model_content=shared_branches_model())
    same = True
    try:
        for want, got in _shared_steps(it, sys.argv[1]):
            print("invoking", flush=True)  # (after the step: an abort in the next one leaves this last)
            same = same and np.array_equal(got, want)
    except oo.ModelError:
        print("refused")
    else:
        print("ran", same)
"""


@pytest.mark.parametrize("then", ["main", "interpreter"])
def test_a_branch_left_broadcasting_by_one_runner_aborts_through_another_without_the_memory(then, tmp_path):
    _assert_aborts_only_without_the_rule(_SHARED_CHILD, then, tmp_path)


def kept_behind_a_runner(front: bool) -> bytes:
    """An IF over three [1, 1] whose branches declare their inputs [2, 3] and their SELECT_V2 output [1]:
    that Prepare keeps [1] (select.cc's early return), where np.where gives [1, 1].  (Branches declared
    at [1, 1] would be the model's own shapes, which the rule leaves alone, as in subgraph 0.)
    ``front``: the IF in subgraph 0 (signature "main"), else in subgraph 1 (signature "run")."""
    m = _unpack(if_select_v2_model([2, 3], [2, 3], [2, 3]))
    main = m.subgraphs[0]
    for t in (*main.inputs[1:], *main.outputs):
        main.tensors[t].shape = [1, 1]
    for sg in m.subgraphs[1:]:
        sg.tensors[sg.outputs[0]].shape = [1]
    data = _pack(m)
    return signed(data) if front else behind_a_plain_subgraph(data)


@pytest.mark.parametrize("front", [True, False], ids=["subgraph_0", "subgraph_1"])
def test_a_kept_select_v2_output_through_a_signature_runner_is_refused(front):
    """On every runtime (2.17.1 refuses it earlier, as shapes it cannot know); without the rule the
    runner's output is [1] on this runtime and on ai-edge-litert."""
    data = kept_behind_a_runner(front)
    key = "main" if front else "run"
    names = f"subgraph {1 if front else 2} operator 0 (SELECT_V2), in a subgraph that subgraph {0 if front else 1}"
    values = _runner_values("IF", ([1, 1],) * 3)
    older = affected(runtime_info().version)
    with oo.Interpreter(model_content=data) as it:
        with pytest.raises(ModelError, match=re.escape(NOT_KNOWN if older else KEPT_CALLED)) as err:
            it.get_signature_runner(key)(**values)
        assert names in str(err.value)
        assert older or isinstance(err.value, ShapeError)
    assert litert.Interpreter(model_content=data).get_signature_runner(key)(**values)["out"].shape == (1,)


def test_a_kept_select_v2_output_through_a_signature_runner_is_wrong_without_the_rule(monkeypatch):
    from opaque_ops.model.checks import called

    monkeypatch.setattr(called, "note_called_kept", lambda *a, **k: None)
    values = _runner_values("IF", ([1, 1],) * 3)
    older = affected(runtime_info().version)
    for front, key in ((True, "main"), (False, "run")):
        with oo.Interpreter(model_content=kept_behind_a_runner(front)) as it:
            runner = it.get_signature_runner(key)
            if older:  # 2.17.1 refuses it earlier, as shapes it cannot know, with or without the kept-output rule
                with pytest.raises(ModelError, match=re.escape(NOT_KNOWN)):
                    runner(**values)
            else:
                assert runner(**values)["out"].shape == (1,)
