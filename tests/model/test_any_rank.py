"""Tensors deeper than MAX_RANK (6) where only operators of any rank touch them (model.checks.limits.any_rank_tensors).

The model checks refused every tensor of more than 6 dimensions, though
TFLite's GATHER_ND kernel (tensorflow/lite/kernels/gather_nd.cc) asks only
for inputs of rank >= 1 and an index depth inside the params' rank, and
2.17.1, 2.23.0 and ai-edge-litert all run it right at ranks 7 to 10.  Such a
tensor is now accepted when GATHER_ND alone touches it, outside the
subgraphs control flow calls; any other reader keeps the refusal.  The
deep models run in a child process (a regression could crash the runtime),
against the numpy reference of tests/helpers/deep_gather.py and
ai-edge-litert.  GATHER, SQUEEZE, EXPAND_DIMS, CAST, PACK and UNPACK were
then measured the same way and allowed too (tests/helpers/deep_ops.py, the
last part of this file).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.model import ModelBuilder
from opaque_ops.model.runtime_versions import affected
from tests.helpers.child_process import crashed, run_child
from tests.helpers.deep_gather import CASES, case, reference
from tests.helpers.deep_ops import CASES as DEEP_OPS
from tests.helpers.deep_ops import SIX as DEEP_SIX
from tests.helpers.deep_ops import A as DEEP_A
from tests.helpers.deep_ops import case as deep_op_case
from tests.helpers.locations import package_file

pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is a test dependency")

RESIZED = "rank-7 params and output"

_CHILD = """
    import json, sys
    import numpy as np
    import opaque_ops as oo
    from ai_edge_litert.interpreter import Interpreter as Ref
    from tests.helpers.deep_gather import CASES, case

    def run(it, params, resize=False):
        if resize:
            it.resize_tensor_input(it.get_input_details()[0]["index"], list(params.shape))
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], params)
        it.invoke()
        return it.get_tensor(it.get_output_details()[0]["index"]).tolist()

    out = {}
    for name in CASES:
        model, params, _ = case(name)
        got = {"litert": run(Ref(model_content=model), params)}
        for xnnpack in (False, True):
            got[f"xnnpack={xnnpack}"] = run(oo.Interpreter(model_content=model, use_xnnpack=xnnpack), params)
        out[name] = got
    # The params declared at rank 6 and resized to rank 7 before the allocation.
    model, params, _ = case(sys.argv[1], declared_params=[3, 4, 2, 2, 2, 2])
    out["resized"] = {"xnnpack=True": run(oo.Interpreter(model_content=model), params, resize=True)}
    print(json.dumps(out))
"""


def test_gather_nd_deeper_than_six_dimensions_runs_as_the_reference():
    # Each case was refused ("has rank 7; the runtime supports at most 6
    # dimensions"), and the resize of a rank-6 params input to rank 7 too
    # ("cannot resize input 0 to rank 7").
    p = run_child(_CHILD, RESIZED, timeout=300)
    assert p.returncode == 0, crashed(p)
    results = json.loads(p.stdout.strip().splitlines()[-1])
    for name in [*CASES, "resized"]:
        _, params, indices = case(RESIZED if name == "resized" else name)
        want = reference(params, indices)
        for runner, got in results[name].items():
            got = np.asarray(got, np.float32)
            assert got.shape == want.shape, (name, runner, got.shape, want.shape)
            np.testing.assert_array_equal(got, want, err_msg=f"{name}, {runner}")


def test_a_deep_tensor_another_operator_reads_is_still_refused():
    # RELU's and XNNPACK's shape arrays stop at 6 dimensions (model.checks.limits).  (An ADD of
    # two inputs of one shape reads it now: test_deep_add_sub_mul_run_as_numpy_on_2_23...)
    _, params, indices = case("rank-7 output of rank-6 params")
    b = ModelBuilder()
    p = b.add_tensor("p", list(params.shape), np.float32)
    i = b.add_constant("i", indices)
    g = b.add_tensor("g", list(reference(params, indices).shape), np.float32)
    y = b.add_tensor("y", list(reference(params, indices).shape), np.float32)
    b.add_op("GATHER_ND", [p, i], [g])
    b.add_op("RELU", [g], [y])
    b.set_inputs([p])
    b.set_outputs([y])
    with pytest.raises(oo.ModelError, match=r"tensor 2 \('g'\) has rank 7; the runtime supports at most 6 dimensions"):
        oo.Interpreter(model_content=b.build())


def test_a_deep_gather_nd_in_a_subgraph_control_flow_calls_is_still_refused():
    # IF copies the branch's output shape to its own output, which other
    # operators of the caller read; the branch's declared shapes are not the
    # ones it runs on, so nothing declared there may be deeper than 6
    # dimensions (the shapes it runs on are followed: see below).
    from tools.fuzz_structured import _join_subgraphs, _schema, pack

    branch, params, _ = case(RESIZED)
    main = ModelBuilder()
    c = main.add_tensor("cond", [], np.bool_)
    x = main.add_tensor("x", [2], np.float32)
    y = main.add_tensor("y", [2], np.float32)
    main.add_op("IF", [c, x], [y])
    main.set_inputs([c, x])
    main.set_outputs([y])
    m = _join_subgraphs(main.build(), branch, branch)
    s = _schema()
    op = m.subgraphs[0].operators[0]
    op.builtinOptionsType = s.BuiltinOptions.IfOptions
    op.builtinOptions = s.IfOptionsT()
    op.builtinOptions.thenSubgraphIndex, op.builtinOptions.elseSubgraphIndex = 1, 2
    with pytest.raises(oo.ModelError, match=r"subgraph 1 tensor 0 \('p'\) has rank 7; the runtime supports at most 6"):
        oo.Interpreter(model_content=pack(m))


# -- A deep GATHER_ND output made in a subgraph that control flow calls ---------------------------
#
# Declared at 6 dimensions there (which the model checks take), GATHER_ND's output still gets
# rank(indices) - 1 + rank(params) - depth dimensions when the IF prepares its branch, and the IF
# copies that shape to its own output.  Measured in child processes (IF_DEEP_PARAMS [2, 2, 2, 2, 2, 3]
# indexed by [1, 1, 1]: a rank-7 output): returned to the user it is right on 2.17.1, 2.23.0 and
# ai-edge-litert; read by RELU or RESHAPE, in the branch or after the IF, 2.17.1 with XNNPACK gives
# a wrong shape ([1, 1, 2, 2, 2, 2, 12288]; RESHAPE [3072] for [48], read past the tensor), 2.23.0
# and ai-edge-litert fail to prepare the XNNPACK partition (RELU) or run it right (RESHAPE), and
# without XNNPACK every runtime gives numpy's values.  model.checks.allocated refuses it on a
# runtime older than 2.23 with XNNPACK only.

IF_DEEP_PARAMS = [2, 2, 2, 2, 2, 3]
IF_DEEP_INDICES = np.array([[[1]]], np.int32)
IF_DEEP_DECLARED = [1, 2, 2, 2, 2, 3]  # (rank 6: the output is [1, 1, 2, 2, 2, 2, 3])


def if_gather_nd_model(after=None, inside=None) -> bytes:
    """out = IF(flag, p), both branches GATHER_ND(p, IF_DEEP_INDICES), then ``inside`` in the branch
    and ``after`` on the IF's output ("relu", "reshape" to [-1], or None)."""
    from tests.model.test_select_rows import _joined

    f32 = np.float32

    def then(b, x, name, shape):
        if name is None:
            return x
        y = b.add_tensor(name + "_out", shape, f32)
        if name == "relu":
            b.add_op("RELU", [x], [y])
        else:
            b.add_op("RESHAPE", [x, b.add_constant("shape", np.array([-1], np.int32))], [y])
        return y

    main = ModelBuilder()
    flag, p = main.add_tensor("flag", [], np.bool_), main.add_tensor("p", IF_DEEP_PARAMS, f32)
    out = main.add_tensor("out", IF_DEEP_DECLARED, f32)
    main.add_op("IF", [flag, p], [out])
    final = then(main, out, after, [48] if after == "reshape" else IF_DEEP_DECLARED)
    main.set_inputs([flag, p])
    main.set_outputs([final])
    branches = []
    for name in ("then", "else"):
        b = ModelBuilder(subgraph_name=name)
        bp, g = b.add_tensor("p", IF_DEEP_PARAMS, f32), b.add_tensor("g", IF_DEEP_DECLARED, f32)
        b.add_op("GATHER_ND", [bp, b.add_constant("indices", IF_DEEP_INDICES)], [g])
        b.set_inputs([bp])
        b.set_outputs([then(b, g, inside, [48] if inside == "reshape" else IF_DEEP_DECLARED)])
        branches.append(b)
    return _joined(main, branches, "IfOptions", {"thenSubgraphIndex": 1, "elseSubgraphIndex": 2})


def _if_deep_want(p, after=None, inside=None):
    g = reference(p, IF_DEEP_INDICES)
    for step in (inside, after):
        g = np.maximum(g, 0) if step == "relu" else g.reshape(-1) if step == "reshape" else g
    return g


# name: (after, inside, the tensor named, the operator named)
IF_DEEP_REFUSED = {
    "relu after the IF": ("relu", None, "subgraph 0 tensor 2 ('out')", "subgraph 0 operator 1 (RELU)"),
    "reshape after the IF": ("reshape", None, "subgraph 0 tensor 2 ('out')", "subgraph 0 operator 1 (RESHAPE)"),
    "relu in the branch": (
        None,
        "relu",
        "subgraph 1 tensor 1 ('g'), in a subgraph that subgraph 0 operator 0 (IF) runs,",
        "subgraph 1 operator 1 (RELU)",
    ),
}


def _if_deep_checked_on(data, version, xnnpack):
    from opaque_ops.model import check_allocated, read_model

    info = read_model(data)
    sg = info.subgraphs[0]
    given = {t: tuple(sg.tensors[t].shape) for t in sg.inputs}
    check_allocated(info, given.get, ((version, "/some/libtensorflowlite_c.so"), xnnpack, 0))


@pytest.mark.parametrize("case_name", list(IF_DEEP_REFUSED))
def test_a_deep_gather_nd_output_of_a_called_subgraph_read_by_another_operator_refused_with_xnnpack_before_2_23(
    case_name,
):
    after, inside, tensor, reader = IF_DEEP_REFUSED[case_name]
    data = if_gather_nd_model(after, inside)
    for version in ("2.17.1", "2.22.0"):
        with pytest.raises(oo.ModelError, match="would have rank 7") as err:
            _if_deep_checked_on(data, version, True)
        message = str(err.value)
        assert message.startswith(f"{tensor} would have rank 7 ([1, 1, 2, 2, 2, 2, 3])"), message
        assert f"but {reader} takes it, and TFLite {version}'s XNNPACK delegate handles at most 6" in message
        assert "or turn XNNPACK off (use_xnnpack=False), or use TFLite 2.23" in message
        _if_deep_checked_on(data, version, False)
    for version in ("2.23.0", "3.0.0"):
        _if_deep_checked_on(data, version, True)


_IF_DEEP_CHILD = """
    import sys
    import numpy as np
    import opaque_ops as oo
    from opaque_ops.model.checks import allocated
    from tests.model.test_any_rank import IF_DEEP_PARAMS, IF_DEEP_REFUSED, _if_deep_want, if_gather_nd_model
    after, inside = IF_DEEP_REFUSED[sys.argv[1]][:2] if sys.argv[1] in IF_DEEP_REFUSED else (None, None)
    if sys.argv[2] == "without":
        allocated._check_called_sizes = lambda *a: None
    p = np.random.default_rng(0).standard_normal(IF_DEEP_PARAMS).astype(np.float32)
    try:
        it = oo.Interpreter(model_content=if_gather_nd_model(after, inside), use_xnnpack=sys.argv[3] == "xnnpack")
        it.allocate_tensors()
        it.set_tensor(0, np.array(True))
        it.set_tensor(1, p)
        it.invoke()
    except oo.ModelError:
        print("refused")
    except oo.KernelError:
        print("failed")
    else:
        out, want = it.get_tensor(it.get_output_details()[0]["index"]), _if_deep_want(p, after, inside)
        print("ran", list(out.shape), out.shape == want.shape and bool(np.array_equal(out, want)))
"""


@pytest.mark.parametrize("case_name", list(IF_DEEP_REFUSED))
def test_a_deep_gather_nd_output_of_a_called_subgraph_gives_wrong_data_without_the_rule_in_a_child(case_name, tmp_path):
    """Without the rule 2.17.1 with XNNPACK returns a wrong shape (reading past the tensor); with it
    the allocation is refused.  2.23.0 fails to prepare XNNPACK's partition (RELU) or runs it right
    (RESHAPE), and is not refused.  Without XNNPACK both runtimes give numpy's values."""
    from opaque_ops.model.checks.version_rules import affected
    from opaque_ops.runtime import runtime_info

    def child(mode, xnnpack):
        env = {"OPAQUE_OPS_VERDICT_CACHE": str(tmp_path / f"{mode}-{xnnpack}")}
        p = run_child(_IF_DEEP_CHILD, case_name, mode, xnnpack, env=env)
        assert p.returncode == 0, crashed(p)
        return p.stdout.split("\n")[0]

    bare, guarded = child("without", "xnnpack"), child("with", "xnnpack")
    if affected(runtime_info().version):
        assert bare.startswith("ran") and bare.endswith("False"), bare
        assert guarded == "refused"
    else:
        assert bare == guarded and guarded in ("failed", "ran [48] True"), guarded
    assert child("with", "off").endswith("True")


@pytest.mark.parametrize("xnnpack", [True, False], ids=["xnnpack", "no_xnnpack"])
def test_a_deep_gather_nd_output_of_a_called_subgraph_returned_to_the_user_runs_as_the_reference(xnnpack):
    """Nothing but the IF reads the rank-7 output: right on every runtime, never refused."""
    data = if_gather_nd_model()
    p = np.random.default_rng(1).standard_normal(IF_DEEP_PARAMS).astype(np.float32)
    for version in ("2.17.1", "2.23.0"):
        _if_deep_checked_on(data, version, True)
    with oo.Interpreter(model_content=data, use_xnnpack=xnnpack) as it:
        it.allocate_tensors()
        it.set_tensor(0, np.array(False))
        it.set_tensor(1, p)
        it.invoke()
        out = it.get_tensor(it.get_output_details()[0]["index"])
    assert out.shape == (1, 1, 2, 2, 2, 2, 3)
    np.testing.assert_array_equal(out, _if_deep_want(p))


def while_gather_nd_model(after=None) -> bytes:
    """WHILE i < 1 over (i, x): its body x <- GATHER_ND(x, IF_DEEP_INDICES), so one turn makes x
    [1, 1, 2, 2, 2, 2, 3] (declared [1, 2, 2, 2, 2, 3]); then RELU on the WHILE's x with ``after``."""
    from tests.model.test_select_rows import _joined

    f32, i32 = np.float32, np.int32
    main = ModelBuilder()
    i, x = main.add_tensor("i", [], i32), main.add_tensor("x", IF_DEEP_PARAMS, f32)
    i_out, x_out = main.add_tensor("i_out", [], i32), main.add_tensor("x_out", IF_DEEP_DECLARED, f32)
    main.add_op("WHILE", [i, x], [i_out, x_out])
    final = x_out
    if after == "relu":
        final = main.add_tensor("relu_out", IF_DEEP_DECLARED, f32)
        main.add_op("RELU", [x_out], [final])
    main.set_inputs([i, x])
    main.set_outputs([final])
    cond = ModelBuilder(subgraph_name="cond")
    ci, cx = cond.add_tensor("i", [], i32), cond.add_tensor("x", IF_DEEP_PARAMS, f32)
    going = cond.add_tensor("going", [], np.bool_)
    cond.add_op("LESS", [ci, cond.add_constant("one", np.array(1, i32))], [going])
    cond.set_inputs([ci, cx])
    cond.set_outputs([going])
    body = ModelBuilder(subgraph_name="body")
    bi, bx = body.add_tensor("i", [], i32), body.add_tensor("x", IF_DEEP_PARAMS, f32)
    bi2, bx2 = body.add_tensor("i2", [], i32), body.add_tensor("x2", IF_DEEP_DECLARED, f32)
    body.add_op("ADD", [bi, body.add_constant("one", np.array(1, i32))], [bi2])
    body.add_op("GATHER_ND", [bx, body.add_constant("indices", IF_DEEP_INDICES)], [bx2])
    body.set_inputs([bi, bx])
    body.set_outputs([bi2, bx2])
    return _joined(main, [cond, body], "WhileOptions", {"condSubgraphIndex": 1, "bodySubgraphIndex": 2})


def test_a_deep_gather_nd_loop_variable_read_after_the_while_refused_with_xnnpack_before_2_23():
    """The same through a WHILE whose one turn makes its loop variable rank 7 (measured in a child:
    RELU after it gives [1, 1, 2, 2, 2, 2, 12288] on 2.17.1 with XNNPACK, fails to prepare on 2.23.0
    with XNNPACK, and gives numpy's values without XNNPACK on both).  Refused from the first
    turn's shape, whatever the turn count; without RELU, and without XNNPACK, it runs."""
    data = while_gather_nd_model("relu")
    with pytest.raises(oo.ModelError, match=r"^subgraph 0 tensor 3 \('x_out'\) would have rank 7 \(\[1, 1, 2, 2, 2"):
        _if_deep_checked_on(data, "2.17.1", True)
    _if_deep_checked_on(data, "2.17.1", False)
    _if_deep_checked_on(data, "2.23.0", True)
    _if_deep_checked_on(while_gather_nd_model(), "2.17.1", True)
    p = np.random.default_rng(2).standard_normal(IF_DEEP_PARAMS).astype(np.float32)
    for after, xnnpack in ((None, True), ("relu", False)):
        with oo.Interpreter(model_content=while_gather_nd_model(after), use_xnnpack=xnnpack) as it:
            it.allocate_tensors()
            it.set_tensor(0, np.array(0, np.int32))
            it.set_tensor(1, p)
            it.invoke()
            out = it.get_tensor(it.get_output_details()[0]["index"])
        np.testing.assert_array_equal(out, _if_deep_want(p, after))


# -- Other builtins that copy or convert tensors of any rank ---------------------------------------
#
# GATHER, SQUEEZE, EXPAND_DIMS, CAST, PACK and UNPACK (model.checks.limits.ANY_RANK_OPS) take
# tensors deeper than 6 dimensions on 2.17.1, 2.23.0 and ai-edge-litert, XNNPACK on and off,
# declared deep or resized deeper after XNNPACK saw the node at rank 6 or less.  The other
# rank-7 cases of tests/helpers/deep_ops.py stay refused (the reasons are in limits.py).

# (Named here, not taken from ANY_RANK_OPS: with the widening reverted, the test must still run them.)
COPYING_OPS = {"GATHER", "SQUEEZE", "EXPAND_DIMS", "CAST", "PACK", "UNPACK"}
ALLOWED = [name for name, spec in DEEP_OPS.items() if spec[0] in COPYING_OPS and name != "SQUEEZE rank 9"]

_DEEP_OPS_CHILD = """
    import json, sys
    import numpy as np
    import opaque_ops as oo
    from ai_edge_litert.interpreter import Interpreter as Ref, OpResolverType
    from tests.helpers.deep_ops import case

    def run(it, inputs, resized=False):
        details = it.get_input_details()
        try:
            if resized:
                for d, x in zip(details, inputs):
                    it.resize_tensor_input(d["index"], list(x.shape))
            it.allocate_tensors()
        except oo.ModelError as e:
            return "refused: " + str(e)
        for d, x in zip(details, inputs):
            it.set_tensor(d["index"], x)
        it.invoke()
        return [[str(o.dtype), list(o.shape), o.ravel().tolist()] for o in
                (it.get_tensor(d["index"]) for d in it.get_output_details())]

    out = {}
    for name in sys.argv[1:]:
        for resized in (False, True):
            model, inputs, _ = case(name, resized)
            got = out[f"{name}, resized={resized}"] = {}
            for xnnpack in (False, True):
                try:
                    it = oo.Interpreter(model_content=model, use_xnnpack=xnnpack)
                except oo.ModelError as e:
                    got[f"xnnpack={xnnpack}"] = "refused: " + str(e)
                    continue
                got[f"xnnpack={xnnpack}"] = run(it, inputs, resized)
            if not resized:
                got["litert"] = run(Ref(model_content=model), inputs)
                plain = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
                got["litert without XNNPACK"] = run(Ref(model_content=model, experimental_op_resolver_type=plain), inputs)
    print(json.dumps(out))
"""


def test_copying_ops_deeper_than_six_dimensions_run_as_the_reference():
    # Each case was refused ("has rank 7; the runtime supports at most 6 dimensions", or "cannot
    # resize input 0 to rank 7"), on the declared model and on the resized one.
    p = run_child(_DEEP_OPS_CHILD, *ALLOWED, timeout=300)
    assert p.returncode == 0, crashed(p)
    results = json.loads(p.stdout.strip().splitlines()[-1])
    for name in ALLOWED:
        _, _, wants = deep_op_case(name)
        for resized in (False, True):
            for runner, got in results[f"{name}, resized={resized}"].items():
                _assert_outputs(got, wants, f"{name}, resized={resized}, {runner}")


def test_a_squeeze_of_nine_dimensions_fails_with_tflites_message():
    # squeeze.cc takes at most 8 input dimensions: Prepare fails cleanly on every runtime measured,
    # and the allocation raises with TFLite's reason.
    model, _, _ = deep_op_case("SQUEEZE rank 9")
    for xnnpack in (False, True):
        with oo.Interpreter(model_content=model, use_xnnpack=xnnpack) as it:
            with pytest.raises(oo.KernelError, match=r"squeeze\.cc:\d+ input_num_dims <= 8 was not true") as err:
                it.allocate_tensors()
            assert "Node number 0 (SQUEEZE) failed to prepare" in str(err.value)


# name: (resized, the message); each crashes or gives wrong data on some runtime without the refusal.
STILL_REFUSED = {
    "CONCATENATION": (False, r"tensor 0 \('x0'\) has rank 7; the runtime supports at most 6 dimensions"),
    "QUANTIZE": (
        True,
        r"cannot resize input 0 to rank 7 \(shape \[2, 1, 2, 1, 2, 1, 3\]\.\.\.\): the runtime supports",
    ),
    "DEQUANTIZE": (True, r"cannot resize input 0 to rank 7"),
    "RESHAPE rank 7 to 4": (True, r"cannot resize input 0 to rank 7"),
}


@pytest.mark.parametrize("name", list(STILL_REFUSED))
def test_a_deep_tensor_of_an_op_that_crashes_or_goes_wrong_is_still_refused(name):
    resized, message = STILL_REFUSED[name]
    model, inputs, _ = deep_op_case(name, resized)
    with pytest.raises((oo.ModelError, oo.InvalidInputError), match=message):
        with oo.Interpreter(model_content=model) as it:
            it.resize_tensor_input(it.get_input_details()[0]["index"], list(inputs[0].shape))
            it.allocate_tensors()


_UNGUARDED_CHILD = """
    import sys
    import numpy as np
    import opaque_ops as oo
    from opaque_ops.model.checks import version_rules
    from tests.helpers.deep_ops import case
    version_rules.check_deep_elementwise = lambda *args: None
    model, inputs, wants = case(sys.argv[1])
    it = oo.Interpreter(model_content=model, use_xnnpack=False)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    print(bool(np.array_equal(it.get_tensor(it.get_output_details()[0]["index"]), wants[0])))
"""


@pytest.mark.parametrize("name", ["ADD broadcast", "SUB broadcast", "MUL broadcast"])
def test_a_rank_7_broadcast_without_the_refusal_is_wrong_or_crashes_on_2_17(name, tmp_path):
    """Why ADD, SUB and MUL broadcasts stay refused before 2.23: their rank-7 broadcast, let through
    (version_rules.check_deep_elementwise off), gives wrong values (ADD, SUB) or aborts (MUL) on
    2.17.1, XNNPACK off (the node is TFLite's own); 2.23.0 runs it.
    (The child's caches are its own: the model passes its check there.)"""
    from opaque_ops.runtime import runtime_info

    env = {"OPAQUE_OPS_CACHE_DIR": str(tmp_path / "cache"), "OPAQUE_OPS_VERDICT_CACHE": str(tmp_path / "verdicts")}
    p = run_child(_UNGUARDED_CHILD, name, env=env)
    if runtime_info().version.startswith("2.17."):
        if name == "MUL broadcast":
            assert p.returncode != 0, p.stdout
        else:
            assert p.returncode == 0, crashed(p)
            assert p.stdout.split("\n")[-2] == "False", p.stdout
    else:
        assert p.returncode == 0, crashed(p)
        assert p.stdout.split("\n")[-2] == "True", p.stdout


# -- ADD, SUB and MUL deeper than six dimensions: the runtime's version decides -------------------
#
# Their tensors are let through the model's checks up to 8 dimensions (limits.DEEP_OPS_2_23)
# and judged on the planned shapes (version_rules.check_deep_elementwise): inputs of one shape run
# everywhere; a broadcast runs from 2.23 on and is refused on 2.17.1, where it gives wrong values
# or aborts (the test above).  Each runtime is asserted on its own behaviour: the test branches on
# the loaded runtime's version and skips nothing.

ELEMENTWISE = [name for name, spec in DEEP_OPS.items() if spec[0] in {"ADD", "SUB", "MUL"} and "rank 9" not in name]
TRANSPOSES = [name for name, spec in DEEP_OPS.items() if spec[0] == "TRANSPOSE" and "rank 9" not in name]
ELEMENTWISE_TOO_DEEP = ["ADD broadcast rank 9", "MUL same shape rank 9", "TRANSPOSE rank 9"]

_ELEMENTWISE_CHILD = """
    import json, sys
    import opaque_ops as oo
    from ai_edge_litert.interpreter import Interpreter as Ref, OpResolverType
    from opaque_ops.runtime import runtime_info
    from tests.helpers.deep_ops import case

    def run(it, inputs):
        try:
            it.allocate_tensors()
        except oo.ModelError as e:
            return "refused: " + str(e)
        for d, x in zip(it.get_input_details(), inputs):
            it.set_tensor(d["index"], x)
        it.invoke()
        return [[str(o.dtype), list(o.shape), o.ravel().tolist()] for o in
                (it.get_tensor(d["index"]) for d in it.get_output_details())]

    out = {"version": runtime_info().version}
    for name in sys.argv[1:]:
        model, inputs, _ = case(name)
        got = out[name] = {}
        for xnnpack in (False, True):
            try:
                it = oo.Interpreter(model_content=model, use_xnnpack=xnnpack)
            except oo.ModelError as e:
                got[f"xnnpack={xnnpack}"] = "refused: " + str(e)
                continue
            got[f"xnnpack={xnnpack}"] = run(it, inputs)
        got["litert"] = run(Ref(model_content=model), inputs)
        plain = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        got["litert without XNNPACK"] = run(Ref(model_content=model, experimental_op_resolver_type=plain), inputs)
    print(json.dumps(out))
"""


def _broadcasts(name: str) -> bool:
    """Whether the case's two operands (graph inputs, then constants) have two shapes."""
    _, ins, consts, _, _, _ = DEEP_OPS[name]
    x, y = [tuple(shape) for shape, _, _ in ins] + [c.shape for c in consts]
    return x != y


def _assert_outputs(got, wants, where: str) -> None:
    assert not isinstance(got, str), f"{where}: {got}"
    assert len(got) == len(wants), where
    for (dtype, shape, values), want in zip(got, wants):
        assert (dtype, tuple(shape)) == (str(want.dtype), want.shape), where
        np.testing.assert_array_equal(np.asarray(values, want.dtype).reshape(shape), want, err_msg=where)


def test_deep_add_sub_mul_run_as_numpy_on_2_23_and_their_broadcasts_are_refused_before():
    # Each case was refused on every runtime ("tensor 0 ('x0') has rank 7; the runtime supports at
    # most 6 dimensions").  ai-edge-litert (TFLite 2.23's kernels) runs every one as numpy does.
    results, version = _run_deep(ELEMENTWISE)
    refused = {name for name in ELEMENTWISE if affected(version) and _broadcasts(name)}
    # (Both kinds are among the cases: a runtime that refused all or none would not pass.)
    assert {_broadcasts(name) for name in ELEMENTWISE} == {True, False}
    for name in ELEMENTWISE:
        _, _, wants = deep_op_case(name)
        for runner, got in results[name].items():
            where = f"TFLite {version}, {name}, {runner}"
            if name in refused and not runner.startswith("litert"):
                assert isinstance(got, str) and got.startswith("refused: "), f"{where}: {got}"
                op = DEEP_OPS[name][0]
                assert f"TFLite {version}'s {op} broadcasts through at most 6" in got, where
                assert "or use TFLite 2.23" in got, where
            else:
                _assert_outputs(got, wants, where)


def test_a_deep_transpose_runs_as_numpy_on_2_23_and_is_refused_before_the_creation_on_2_17():
    # Each case was refused on every runtime (rank 7; a permutation of more than 6 entries).  On
    # 2.17.1 TRANSPOSE takes at most 6 dimensions and its XNNPACK delegate overruns a 6-entry array
    # with the permutation while the interpreter is created: refused there before the creation.
    results, version = _run_deep(TRANSPOSES)
    for name in TRANSPOSES:
        _, _, wants = deep_op_case(name)
        for runner, got in results[name].items():
            where = f"TFLite {version}, {name}, {runner}"
            if affected(version) and not runner.startswith("litert"):
                assert isinstance(got, str) and got.startswith("refused: "), f"{where}: {got}"
                want = rf"operator 0 \(TRANSPOSE\) permutes [78] dimensions; TFLite {re.escape(version)}'s TRANSPOSE "
                assert re.search(want + r"takes at most 6 .* or use TFLite 2\.23", got), f"{where}: {got}"
            else:
                _assert_outputs(got, wants, where)


def _run_deep(names):
    """The child's results for ``names`` and the loaded runtime's version (2.17 or 2.23: each is asserted)."""
    p = run_child(_ELEMENTWISE_CHILD, *names, timeout=300)
    assert p.returncode == 0, crashed(p)
    results = json.loads(p.stdout.strip().splitlines()[-1])
    version = results.pop("version")
    assert version.startswith(("2.17.", "2.23.")), version
    return results, version


@pytest.mark.parametrize("name", ELEMENTWISE_TOO_DEEP)
def test_add_sub_mul_deeper_than_eight_dimensions_are_refused_on_every_runtime(name):
    # TFLite 2.23's broadcasts take 8 dimensions and abort the process in Eval on 9 (2.17.1's take
    # 6); the refusal comes from the model's checks, before any kernel runs (nothing is invoked here).
    model, _, _ = deep_op_case(name)
    with pytest.raises(
        oo.ModelError, match=r"has rank 9; ADD, MUL, SUB, TRANSPOSE take at most 8 dimensions .* Reshape it"
    ):
        with oo.Interpreter(model_content=model) as it:
            it.allocate_tensors()


_ONE_RUNTIME_CHILD = """
    import sys
    import opaque_ops as oo
    from opaque_ops.runtime import runtime_info
    from tests.helpers.deep_ops import case
    model, inputs, _ = case("MUL broadcast")
    it = oo.Interpreter(model_content=model)
    try:
        it.allocate_tensors()
    except oo.ModelError as e:
        print(runtime_info().version, "refused")
    else:
        print(runtime_info().version, "ran")
"""


def test_a_deep_broadcasts_verdict_is_kept_per_runtime(tmp_path):
    """One verdict cache, the 2.17.1 runtime then 2.23.0 then 2.17.1 again: each gets its own
    verdict (check_allocated's records are keyed by the runtime), not the other's."""
    from tests.helpers.runtime_libraries import wheel_library

    lib_223 = package_file("litert_lm", "liblitert-lm.so")
    assert lib_223.is_file(), "litert-lm-api (the TFLite 2.23 C library) is a test dependency"
    env = {"OPAQUE_OPS_CACHE_DIR": str(tmp_path / "cache"), "OPAQUE_OPS_VERDICT_CACHE": str(tmp_path / "verdicts")}
    seen = []
    for lib in (wheel_library(), lib_223, wheel_library()):
        p = run_child(_ONE_RUNTIME_CHILD, env={**env, "OPAQUE_OPS_TFLITE_LIB": str(lib)})
        assert p.returncode == 0, crashed(p)
        seen.append(p.stdout.strip().splitlines()[-1])
    assert [line.split()[1] for line in seen] == ["refused", "ran", "refused"], seen
    assert seen[0].startswith("2.17.") and seen[1].startswith("2.23."), seen


def reshape_to_seven_model(how: str) -> bytes:
    """x [2, 2, 2, 3] reshaped to tests.helpers.deep_ops.A (7 dimensions) by a constant shape input
    (``how="input"``) or the options' new_shape (``"options"``), the output declared [2, 2, 1, 2, 1, 3]."""
    b = ModelBuilder()
    x = b.add_tensor("x", [2, 2, 2, 3], np.float32)
    y = b.add_tensor("y", [2, 2, 1, 2, 1, 3], np.float32)
    if how == "input":
        b.add_op("RESHAPE", [x, b.add_constant("shape", np.array(DEEP_A, np.int32))], [y])
    else:
        b.add_op("RESHAPE", [x], [y], {"new_shape": list(DEEP_A)})
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


_RESHAPE_CHILD = """
    import sys
    import opaque_ops as oo
    from opaque_ops.model.checks import builtin_rules
    from tests.model.test_any_rank import reshape_to_seven_model
    if sys.argv[2] == "without":
        builtin_rules._RULES.pop("RESHAPE", None)
    try:
        oo.Interpreter(model_content=reshape_to_seven_model(sys.argv[1]), use_xnnpack=sys.argv[3] == "xnnpack")
    except oo.ModelError as e:
        print("refused:", e)
    else:
        print("created")
"""

RESHAPE_SOURCES = {"input": r"its shape input \(tensor 2\)", "options": "its options' new_shape"}


@pytest.mark.parametrize("how", list(RESHAPE_SOURCES))
def test_a_reshape_to_seven_dimensions_declared_shallower_is_refused_not_crashed(how, tmp_path):
    """The output is declared at rank 6, so no tensor rule saw the 7 dimensions: without the rule
    the XNNPACK delegate took the process down while the interpreter was created (2.17.1: abort,
    std::out_of_range; 2.23.0: SIGILL).  Each run in a child, with caches of its own."""

    def child(mode, xnnpack):
        env = {"OPAQUE_OPS_CACHE_DIR": str(tmp_path / mode), "OPAQUE_OPS_VERDICT_CACHE": str(tmp_path / f"{mode}-v")}
        return run_child(_RESHAPE_CHILD, how, mode, xnnpack, env=env)

    p = child("without", "xnnpack")
    assert p.returncode != 0 and "created" not in p.stdout, (p.returncode, p.stdout)
    for xnnpack in ("xnnpack", "off"):
        p = child("with", xnnpack)
        assert p.returncode == 0, crashed(p)
        message = p.stdout.split("\n")[-2]
        want = rf"operator 0 \(RESHAPE\) reshapes to 7 dimensions \({RESHAPE_SOURCES[how]}\); the runtime supports"
        assert re.search(want, message), message


def deep_chain_model(reader=None) -> bytes:
    """x [2, 2, 2, 2, 2, 3] -> EXPAND_DIMS (rank 7) -> CAST to int32 -> GATHER on axis 3 -> SQUEEZE
    of axis 0 (rank 6), every tensor but x declared at rank 6; with ``reader`` ("ADD"), an ADD of
    the EXPAND_DIMS output to itself is the output instead."""
    b = ModelBuilder()
    x = b.add_tensor("x", list(DEEP_SIX), np.float32)
    e = b.add_tensor("e", list(DEEP_SIX), np.float32)
    b.add_op("EXPAND_DIMS", [x, b.add_constant("axis", np.array([0], np.int32))], [e])
    if reader == "ADD":
        y = b.add_tensor("y", list(DEEP_SIX), np.float32)
        b.add_op("ADD", [e, e], [y])
    else:
        c, g, y = (b.add_tensor(n, list(DEEP_SIX), np.int32) for n in ("c", "g", "y"))
        b.add_op("CAST", [e], [c])
        b.add_op("GATHER", [c, b.add_constant("i", np.array([1, 1, 0], np.int32))], [g], {"axis": 3})
        b.add_op("SQUEEZE", [g], [y], {"squeeze_dims": [0]})
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


_CHAIN_CHILD = """
    import sys
    import numpy as np
    import opaque_ops as oo
    from tests.model.test_any_rank import deep_chain_model
    from tests.helpers.deep_ops import SIX
    x = (np.arange(np.prod(SIX)).reshape(SIX) % 13 - 6).astype(np.float32)
    for xnnpack in (False, True):
        try:
            with oo.Interpreter(model_content=deep_chain_model(sys.argv[1] or None), use_xnnpack=xnnpack) as it:
                it.allocate_tensors()
                it.set_tensor(0, x)
                it.invoke()
                out = it.get_tensor(it.get_output_details()[0]["index"])
        except oo.ModelError as e:
            print("refused:", e)
            continue
        want = np.take(x[None].astype(np.int32), [1, 1, 0], axis=3)[0]
        print("ran", out.shape == want.shape and bool(np.array_equal(out, want)))
"""


def test_a_chain_of_copying_ops_through_rank_7_runs_and_another_reader_is_refused():
    """Tensors of 7 dimensions that only the copying ops touch, declared at rank 6 (each planned
    deeper by the runtime): numpy's values, XNNPACK on and off.  An ADD of the EXPAND_DIMS output
    is refused (ADD's rank-7 broadcast is wrong or aborts on 2.17.1): by the model check, which follows
    the shapes (checks.allocated.deep_reach), before the interpreter is created."""
    p = run_child(_CHAIN_CHILD, "")
    assert p.returncode == 0, crashed(p)
    assert p.stdout.splitlines()[-2:] == ["ran True", "ran True"], p.stdout
    p = run_child(_CHAIN_CHILD, "ADD")
    assert p.returncode == 0, crashed(p)
    refused = (
        "refused: <model_content> is not a usable TFLite model: subgraph 0 operator 1 (ADD) would get subgraph 0 "
        "tensor 1 ('e') at rank 7 (declared 6: the operators before it make it that deep), more dimensions than it "
        "takes (at most 6 here); give the model inputs of fewer dimensions"
    )
    assert p.stdout.splitlines()[-2:] == [refused, refused], p.stdout


_RESIZED_CHAIN_CHILD = """
    import sys
    import numpy as np
    import opaque_ops as oo
    from tests.model.test_any_rank import deep_chain_model, expand_chain_model
    from tests.helpers.deep_ops import SIX
    rank = int(sys.argv[2])
    if sys.argv[1] == "ADD":
        data, shape = expand_chain_model(1, [2, 3]), [1] * (rank - 2) + [2, 3]
    else:
        data, shape = deep_chain_model(), [1] * (rank - len(SIX)) + list(SIX)
    x = (np.arange(np.prod(shape)).reshape(shape) % 13 - 6).astype(np.float32)
    for xnnpack in (False, True):
        with oo.Interpreter(model_content=data, use_xnnpack=xnnpack) as it:
            try:
                it.resize_tensor_input(0, shape)
            except oo.ResizeError as e:
                print("refused:", e)
                continue
            it.allocate_tensors()
            it.set_tensor(0, x)
            it.invoke()
            out = it.get_tensor(it.get_output_details()[0]["index"])
        want = np.take(x[None].astype(np.int32), [1, 1, 0], axis=3)[0]  # (the model's axis, counted from the front)
        print("ran", out.shape == want.shape and bool(np.array_equal(out, want)))
"""


@pytest.mark.parametrize("rank", [7, 12])
def test_a_deep_resize_that_an_any_rank_op_passes_on_to_another_reader_is_refused_before_the_allocation(rank):
    """x declared [2, 3] feeds only EXPAND_DIMS (of any rank), so it may be resized deep; but the
    EXPAND_DIMS output, one dimension deeper, is read by ADD.  Allocating ran ADD's prepare at that
    depth before any allocated-shape rule could look: measured on TFLite 2.23.0 with XNNPACK, a rank-12
    input (ADD at rank 13) took the process down with SIGSEGV.  The resize is now refused, with the
    operator named, on every runtime (ADD supports 6 dimensions, tensorflow/lite/kernels/add.cc's
    broadcast form); the chain whose deep tensors only copying ops read still runs as numpy at the
    same depth (rank 7 in, rank 7 out: SQUEEZE drops the added axis).  In a child: without the
    rule the 2.23 case crashes."""
    p = run_child(_RESIZED_CHAIN_CHILD, "ADD", str(rank))
    assert p.returncode == 0, crashed(p)
    refused = (
        f"refused: cannot resize input 0 to rank {rank} (shape {([1] * (rank - 2) + [2, 3])[:8]}...): operator 1 "
        f"(ADD) would get an input of rank {rank + 1} (tensor 1), more dimensions than it takes (at most 6 here); "
        "resize it to at most 5 dimensions"
    )
    assert p.stdout.splitlines()[-2:] == [refused, refused], p.stdout
    if rank == 7:  # (at 12 the chain's SQUEEZE, at 13, fails to prepare cleanly: squeeze.cc takes at most 8)
        p = run_child(_RESIZED_CHAIN_CHILD, "", str(rank))
        assert p.returncode == 0, crashed(p)
        assert p.stdout.splitlines()[-2:] == ["ran True", "ran True"], p.stdout


def expand_chain_model(count: int, declared: list) -> bytes:
    """x (declared ``declared``) through ``count`` EXPAND_DIMS on axis 0, every output declared [2, 3]
    whatever its real rank, into ADD(e, e)."""
    b = ModelBuilder()
    x = b.add_tensor("x", declared, np.float32)
    cur = x
    for i in range(count):
        e = b.add_tensor(f"e{i}", [2, 3], np.float32)
        b.add_op("EXPAND_DIMS", [cur, b.add_constant(f"axis{i}", np.array([0], np.int32))], [e])
        cur = e
    y = b.add_tensor("y", [2, 3], np.float32)
    b.add_op("ADD", [cur, cur], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


_EXPAND_CHAIN_CHILD = """
    import sys
    import opaque_ops as oo
    from tests.model.test_any_rank import expand_chain_model
    count, rank = int(sys.argv[1]), int(sys.argv[2])
    data = expand_chain_model(count, [1] * (rank - 2) + [2, 3])
    for xnnpack in (True, False):
        try:
            oo.Interpreter(model_content=data, use_xnnpack=xnnpack).allocate_tensors()
            print("allocated")
        except oo.ModelError as e:
            print("refused:", e)
"""


@pytest.mark.parametrize(
    ("count", "rank"), [(10, 2), (1, 12), (1, 7)], ids=["ten-expands-from-rank-2", "rank-12-input", "rank-7-input"]
)
def test_a_model_whose_expand_dims_reach_another_reader_deep_is_refused_before_the_allocation(count, rank):
    """The declared shapes hide the depth: each EXPAND_DIMS output is declared [2, 3], but the runtime
    plans it one dimension deeper than its input, and ADD reads the last one.  Measured on TFLite 2.23.0
    with XNNPACK: ADD at rank 12 or more took the process down (SIGSEGV) while allocating, before any
    allocated-shape rule could see it (ten EXPAND_DIMS from a rank-2 input, or one from a rank-12 input
    that only EXPAND_DIMS reads).  The model check now follows the shapes and refuses it on every runtime,
    before the interpreter is created; at rank 7 it did so after the allocation (the same refusal, earlier
    now).  In a child: without the rule the 2.23 cases crash."""
    p = run_child(_EXPAND_CHAIN_CHILD, str(count), str(rank))
    assert p.returncode == 0, crashed(p)
    tensor = 2 * count - 1  # (x, then an axis constant and an output per EXPAND_DIMS)
    refused = (
        f"refused: <model_content> is not a usable TFLite model: subgraph 0 operator {count} (ADD) would get "
        f"subgraph 0 tensor {tensor} ('e{count - 1}') at rank {rank + count} (declared 2: the operators before it "
        "make it that deep), more dimensions than it takes (at most 6 here); give the model inputs of fewer "
        "dimensions"
    )
    assert p.stdout.splitlines()[-2:] == [refused, refused], p.stdout


def high_rank_model(op: str) -> bytes:
    """One ``op`` on x declared [2, 3] (XNNPACK sees the node at rank 2 when the interpreter is
    created), for an input resized to [2, 3, 1, ..., 1] of HIGH_RANK dimensions."""
    b = ModelBuilder()
    x = b.add_tensor("x", [2, 3], np.float32)
    ins, out, opts, graph_inputs = [x], [2, 3], None, [x]
    if op == "EXPAND_DIMS":
        ins.append(b.add_constant("axis", np.array([-1], np.int32)))
    elif op == "GATHER":
        ins.append(b.add_constant("indices", np.array([1, 0, 1], np.int32)))
        opts = {"axis": 1}
    elif op == "PACK":
        graph_inputs.append(b.add_tensor("x2", [2, 3], np.float32))
        ins.append(graph_inputs[-1])
        opts = {"values_count": 2, "axis": 0}
    y = b.add_tensor("y", out, np.int32 if op == "CAST" else np.float32)
    b.add_op(op, ins, [y], opts)
    b.set_inputs(graph_inputs)
    b.set_outputs([y])
    return b.build()


HIGH_RANK = 63
HIGH_RANK_REFERENCE = {
    "EXPAND_DIMS": lambda x, x2: x[..., None],
    "CAST": lambda x, x2: x.astype(np.int32),
    "GATHER": lambda x, x2: np.take(x, [1, 0, 1], axis=1),
    "PACK": lambda x, x2: np.stack([x, x2]),
}

_HIGH_RANK_CHILD = """
    import json, sys
    import numpy as np
    import opaque_ops as oo
    from tests.model.test_any_rank import HIGH_RANK, high_rank_model
    shape = [2, 3] + [1] * (HIGH_RANK - 2)
    xs = [np.arange(6, dtype=np.float32).reshape(shape) - 2.5, np.ones(shape, np.float32)]
    out = {}
    for op in sys.argv[1:]:
        for xnnpack in (False, True):
            with oo.Interpreter(model_content=high_rank_model(op), use_xnnpack=xnnpack) as it:
                details = it.get_input_details()
                for d, x in zip(details, xs):
                    it.resize_tensor_input(d["index"], shape)
                it.allocate_tensors()
                for d, x in zip(details, xs):
                    it.set_tensor(d["index"], x)
                it.invoke()
                y = it.get_tensor(it.get_output_details()[0]["index"])
                out[f"{op}, xnnpack={xnnpack}"] = [list(y.shape), y.ravel().tolist()]
    print(json.dumps(out))
"""


def test_copying_ops_up_to_64_dimensions_resized_from_rank_2_run_as_the_reference():
    """XNNPACK's shape arrays have 6 entries (a rank-64 tensor it takes crashes the process:
    model.checks.limits); these nodes, seen at rank 2 when the interpreter is created, run on
    inputs of 63 dimensions (outputs of 64 for EXPAND_DIMS and PACK) with numpy's values."""
    p = run_child(_HIGH_RANK_CHILD, *HIGH_RANK_REFERENCE, timeout=300)
    assert p.returncode == 0, crashed(p)
    results = json.loads(p.stdout.strip().splitlines()[-1])
    shape = [2, 3] + [1] * (HIGH_RANK - 2)
    x, x2 = np.arange(6, dtype=np.float32).reshape(shape) - 2.5, np.ones(shape, np.float32)
    for op, f in HIGH_RANK_REFERENCE.items():
        want = f(x, x2)
        for xnnpack in (False, True):
            got_shape, values = results[f"{op}, xnnpack={xnnpack}"]
            assert tuple(got_shape) == want.shape, (op, xnnpack, got_shape)
            np.testing.assert_array_equal(np.asarray(values, want.dtype).reshape(want.shape), want, err_msg=op)


def gather_reach_model(indices_input: bool) -> bytes:
    """GATHER(x, indices) on axis 0, EXPAND_DIMS, then ADD(e, e); x declared [2], every other tensor
    declared shallow ([2], [2, 3]).  The indices are a second graph input (int32, declared [2]) or
    CAST(x), so that both follow the inputs' resize: GATHER's output has rank(x) - 1 + rank(indices)
    dimensions, EXPAND_DIMS one more."""
    b = ModelBuilder()
    x = b.add_tensor("x", [2], np.float32)
    inputs = [x]
    if indices_input:
        i = b.add_tensor("i", [2], np.int32)
        inputs.append(i)
    else:
        i = b.add_tensor("i", [2], np.int32)
        b.add_op("CAST", [x], [i])
    g = b.add_tensor("g", [2, 3], np.float32)
    b.add_op("GATHER", [x, i], [g], {"axis": 0})
    e = b.add_tensor("e", [2, 3], np.float32)
    b.add_op("EXPAND_DIMS", [g, b.add_constant("axis", np.array([0], np.int32))], [e])
    y = b.add_tensor("y", [2, 3], np.float32)
    b.add_op("ADD", [e, e], [y])
    b.set_inputs(inputs)
    b.set_outputs([y])
    return b.build()


_GATHER_REACH_CHILD = """
    import sys
    import numpy as np
    import opaque_ops as oo
    from tests.model.test_any_rank import gather_reach_model
    indices_input, shape = sys.argv[1] == "input", [int(d) for d in sys.argv[2].split(",")]
    x = np.zeros(shape, np.float32)  # (with CAST, x indexes its own first dimension)
    x.flat[0] = 0.5  # (CAST truncates it to the index 0)
    i = np.zeros(shape, np.int32)
    for xnnpack in (True, False):
        with oo.Interpreter(model_content=gather_reach_model(indices_input), use_xnnpack=xnnpack) as it:
            for d in it.get_input_details():
                it.resize_tensor_input(d["index"], shape)
            try:
                it.allocate_tensors()
            except oo.ModelError as e:
                print("refused:", e)
                continue
            for d in it.get_input_details():
                it.set_tensor(d["index"], x if d["dtype"] == np.float32 else i)
            it.invoke()
            out = it.get_tensor(it.get_output_details()[0]["index"])
        want = np.expand_dims(np.take(x, i if indices_input else x.astype(np.int32), axis=0), 0) * 2
        print("ran", out.shape == want.shape and bool(np.array_equal(out, want)))
"""


@pytest.mark.parametrize("indices", ["input", "cast"])
def test_inputs_resized_within_six_dimensions_that_gather_makes_deep_are_refused_before_the_allocation(indices):
    """Found while writing tools/fuzz_deep_shapes.py (its deepening chains aim at it).  Each input is resized to 6 dimensions or
    fewer, so check_resize (which follows the shapes only for a deeper resize, one input at a time) let
    it through; but GATHER of a rank-6 x by rank-6 indices has 11 dimensions and EXPAND_DIMS makes 12,
    and ADD reads that (declared [2, 3]: the XNNPACK delegate kept the node when the interpreter was
    created).  The allocation prepares ADD at rank 12 before the allocated-shape rules can look:
    on TFLite 2.23.0 with XNNPACK the process died with SIGSEGV (rc 139); on 2.17.1, and on 2.23.0
    without XNNPACK, the allocated-shape rules refused the rank-12 tensor afterwards.  The inputs as
    resized are now followed together before every allocation after a resize
    (checks.allocated.check_resized_reach): the same refusal, before the runtime is asked, on every
    runtime.  Resized to [1, 2] (GATHER at rank 3, ADD at rank 4) the model runs as numpy."""
    p = run_child(_GATHER_REACH_CHILD, indices, "1,1,1,1,1,2")
    assert p.returncode == 0, crashed(p)
    inputs = "input 0: [1, 1, 1, 1, 1, 2]" + (", input 1: [1, 1, 1, 1, 1, 2]" if indices == "input" else "")
    add = 2 if indices == "input" else 3  # (after the CAST)
    refused = (
        f"refused: with the inputs as resized ({inputs}), operator {add} (ADD) would get an input of rank 12 "
        "(tensor 3 ('e')), more dimensions than it takes (at most 6 here); resize the inputs to fewer dimensions"
    )
    assert p.stdout.splitlines()[-2:] == [refused, refused], p.stdout
    p = run_child(_GATHER_REACH_CHILD, indices, "1,2")
    assert p.returncode == 0, crashed(p)
    assert p.stdout.splitlines()[-2:] == ["ran True", "ran True"], p.stdout


def test_the_shape_lie_fuzzer_runs_a_short_run_without_findings(tmp_path):
    """tools/fuzz_deep_shapes.py stays working: a fixed seed's first cases, in a child process, on
    whichever runtime is loaded, with no death, no exception that is not an OpaqueOpsError and no
    output that differs from ai-edge-litert's (but for the sign of zeros, see SIGNED_ZEROS)."""
    from tools import fuzz_deep_shapes

    n = 60
    totals = fuzz_deep_shapes.run(n, seed=20261129, workdir=tmp_path, chunk=n, workers=1)
    assert totals["crashes"] == [], totals["crashes"]
    assert totals["findings"] == [], totals["findings"]
    assert totals["ok"] + totals["refused"] == n, totals
    # Both outcomes are reached, and the cases that run are compared with the reference.
    assert totals["ok"] > 10 and totals["refused"] > 10, totals
    assert totals["compared"] > 10, totals
