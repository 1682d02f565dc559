"""Tensors deeper than MAX_RANK (6) where only GATHER_ND reads and writes them (model.checks.limits.any_rank_tensors).

The model checks refused every tensor of more than 6 dimensions, though
TFLite's GATHER_ND kernel (tensorflow/lite/kernels/gather_nd.cc) asks only
for inputs of rank >= 1 and an index depth inside the params' rank, and
2.17.1, 2.23.0 and ai-edge-litert all run it right at ranks 7 to 10.  Such a
tensor is now accepted when GATHER_ND alone touches it, outside the
subgraphs control flow calls; any other reader keeps the refusal.  The
deep models run in a child process (a regression could crash the runtime),
against the numpy reference of tests/helpers/deep_gather.py and
ai-edge-litert.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.model import ModelBuilder
from tests.helpers.child_process import crashed, run_child
from tests.helpers.deep_gather import CASES, case, reference

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
    # ADD's and XNNPACK's shape arrays stop at 6 dimensions (model.checks.limits).
    _, params, indices = case("rank-7 output of rank-6 params")
    b = ModelBuilder()
    p = b.add_tensor("p", list(params.shape), np.float32)
    i = b.add_constant("i", indices)
    g = b.add_tensor("g", list(reference(params, indices).shape), np.float32)
    y = b.add_tensor("y", list(reference(params, indices).shape), np.float32)
    b.add_op("GATHER_ND", [p, i], [g])
    b.add_op("ADD", [g, g], [y])
    b.set_inputs([p])
    b.set_outputs([y])
    with pytest.raises(oo.ModelError, match=r"tensor 2 \('g'\) has rank 7; the runtime supports at most 6 dimensions"):
        oo.Interpreter(model_content=b.build())


def test_a_deep_gather_nd_in_a_subgraph_control_flow_calls_is_still_refused():
    # IF copies the branch's output shape to its own output, which other
    # operators of the caller read; the branch's shapes are never checked as
    # planned, so nothing there may be deeper than 6 dimensions.
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
