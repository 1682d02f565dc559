"""opaque_ops.model.checks.version_rules: what TFLite 2.17.1's kernels crash on, refused there and nowhere else.

Each model is one builtin operator that 2.17.1 takes down in Eval (measured in
child processes: BROADCAST_TO SIGSEGV, TOPK_V2 and CONV_3D SIGABRT on heap
corruption) while 2.23.0 and ai-edge-litert run it with the values of the
op's definition.  The rules are checked on given runtime versions (no runtime
runs), then on the loaded runtime: refused where it has the defect, run and
compared with numpy and ai-edge-litert where it has not.  Nothing here gives
a crasher to an affected runtime.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.errors import ModelError, ShapeError
from opaque_ops.model import check_allocated, read_model
from opaque_ops.model.checks.version_rules import affected
from opaque_ops.runtime import runtime_info
from tests.helpers.child_process import crashed, run_child
from tests.helpers.interpreter_models import feed
from tests.helpers.single_op import single_op_model

litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is a test dependency")

f32, i32 = np.float32, np.int32


def _conv3d_options(padding, strides, dilations) -> dict:
    keys = ("stride_d", "stride_h", "stride_w", "dilation_d_factor", "dilation_h_factor", "dilation_w_factor")
    return {"padding": padding, **dict(zip(keys, (*strides, *dilations)))}


def _conv3d_model(x_shape, w, padding, strides, dilations) -> bytes:
    return single_op_model(
        "CONV_3D",
        {"x": (x_shape, f32)},
        {"w": w},
        [([1, 1, 1, 1, w.shape[4]], f32)],
        _conv3d_options(padding, strides, dilations),
    )


def _conv3d(x, w, padding, strides, dilations):
    """CONV_3D by its definition: NDHWC input, [d, h, w, in, out] filter; SAME pads as TFLite's
    padding.h (the odd one after)."""
    pads, outs = [], []
    for n, k, s, d in zip(x.shape[1:4], w.shape[:3], strides, dilations):
        eff = (k - 1) * d + 1
        out = -(-n // s) if padding == "SAME" else (n - eff) // s + 1
        total = max((out - 1) * s + eff - n, 0)
        pads.append((total // 2, total - total // 2))
        outs.append(out)
    xp = np.pad(x.astype(np.float64), [(0, 0), *pads, (0, 0)])
    y = np.zeros((x.shape[0], *outs, w.shape[4]))
    for a in range(w.shape[0]):
        for b in range(w.shape[1]):
            for c in range(w.shape[2]):
                starts = (a * dilations[0], b * dilations[1], c * dilations[2])
                win = xp[
                    :,
                    starts[0] : starts[0] + (outs[0] - 1) * strides[0] + 1 : strides[0],
                    starts[1] : starts[1] + (outs[1] - 1) * strides[1] + 1 : strides[1],
                    starts[2] : starts[2] + (outs[2] - 1) * strides[2] + 1 : strides[2],
                ]
                y += win @ w[a, b, c]
    return y.astype(f32)


_W = np.random.default_rng(3).standard_normal((3, 3, 3, 2, 4)).astype(f32)
_W_IN1 = np.random.default_rng(4).standard_normal((1, 3, 3, 1, 2)).astype(f32)
_W_IN8 = np.random.default_rng(5).standard_normal((1, 3, 3, 8, 2)).astype(f32)


def _conv3d_case(shape, w, padding, strides, dilations, then: str = "") -> tuple:
    """A CRASHERS entry for a dilated CONV_3D whose input depth is not its channel count."""
    message = (
        f"operator 0 (CONV_3D) has dilations {list(dilations)} on an input 0 of shape {shape} whose depth "
        f"({shape[1]}) is not its channel count ({shape[4]}); {then}"
    )
    return (
        _conv3d_model(shape, w, padding, strides, dilations),
        shape,
        message,
        lambda x: _conv3d(x, w, padding, strides, dilations),
    )


# name: (model, input shape, message on 2.17.1, the values of the op's definition for input x).
CRASHERS = {
    "BROADCAST_TO [1, 3] to [0, 2, 3]": (
        single_op_model(
            "BROADCAST_TO", {"x": ([1, 3], f32)}, {"s": np.array([0, 2, 3], i32)}, [([0, 2, 3], f32)], version=2
        ),
        [1, 3],
        "operator 0 (BROADCAST_TO) broadcasts its input 0 to [0, 2, 3], which is empty in a dimension before the "
        "last one it broadcasts; TFLite 2.17.1's BROADCAST_TO still copies rows",
        lambda x: np.broadcast_to(x, (0, 2, 3)),
    ),
    "TOPK_V2 k = 0": (
        single_op_model("TOPK_V2", {"x": ([2, 6], f32)}, {"k": np.array(0, i32)}, [([2, 0], f32), ([2, 0], i32)]),
        [2, 6],
        "operator 0 (TOPK_V2) takes the top k = 0 (constant tensor 1) of rows of 6 values (input 0 of shape [2, 6]); "
        "TFLite 2.17.1's TOPK_V2 corrupts memory for k = 0",
        lambda x: np.zeros((2, 0), f32),
    ),
    "CONV_3D SAME, dilation 2, stride 2": _conv3d_case(
        [1, 6, 6, 6, 2], _W, "SAME", (2, 2, 2), (2, 2, 2), "TFLite 2.17.1's dilated CONV_3D then writes past its buffer"
    ),
    # VALID pads nothing, yet 2.17.1 copies each position's depth of values
    # instead of its channels: "free(): invalid next size" (SIGABRT) here ...
    "CONV_3D VALID, dilation 3, depth above channels": _conv3d_case(
        [1, 32, 7, 7, 1], _W_IN1, "VALID", (1, 1, 1), (1, 3, 3)
    ),
    # ... and channels left unset (values of 1e26) here.
    "CONV_3D VALID, dilation 2, depth below channels": _conv3d_case(
        [1, 2, 5, 5, 8], _W_IN8, "VALID", (1, 1, 1), (1, 2, 2)
    ),
}


def _checked_on(data, version):
    """check_allocated on the model's own input shapes, as on a runtime of that version."""
    info = read_model(data)
    sg = info.subgraphs[0]
    given = {t: tuple(sg.tensors[t].shape) for t in sg.inputs}
    config = () if version is None else ((version, "/some/libtensorflowlite_c.so"), False, 0)
    check_allocated(info, given.get, config)


@pytest.mark.parametrize("case", list(CRASHERS))
def test_refused_on_runtimes_older_than_2_23_only(case):
    data, _, message, _ = CRASHERS[case]
    for version in ("2.17.1", "2.22.0"):
        with pytest.raises(ModelError, match=re.escape(message.replace("2.17.1", version))):
            _checked_on(data, version)
    for version in ("2.23.0", "2.24.1", "3.0.0", None):
        _checked_on(data, version)  # the runtime's own kernels, or an unknown runtime: nothing refused


def _outputs(it, x):
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


@pytest.mark.parametrize("case", list(CRASHERS))
def test_on_the_loaded_runtime_refused_or_run_like_ai_edge_litert(case):
    data, shape, message, want = CRASHERS[case]
    version = runtime_info().version
    it = oo.Interpreter(model_content=data)
    if affected(version):
        with pytest.raises(ModelError, match=re.escape(message.replace("2.17.1", version))):
            it.allocate_tensors()
        return
    x = np.random.default_rng(5).standard_normal(shape).astype(f32)
    ours = _outputs(it, x)
    theirs = _outputs(litert.Interpreter(model_content=data), x)
    assert [o.shape for o in ours] == [o.shape for o in theirs]
    np.testing.assert_allclose(ours[0], want(x), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(theirs[0], want(x), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "data, shape, want",
    [
        # An empty output whose empty dimension comes after the broadcast one: nothing is copied.
        (
            single_op_model(
                "BROADCAST_TO", {"x": ([2, 1, 3], f32)}, {"s": np.array([2, 0, 3], i32)}, [([2, 0, 3], f32)], version=2
            ),
            [2, 1, 3],
            lambda x: [np.broadcast_to(x, (2, 0, 3))],
        ),
        (
            single_op_model(
                "BROADCAST_TO", {"x": ([1, 3], f32)}, {"s": np.array([2, 3], i32)}, [([2, 3], f32)], version=2
            ),
            [1, 3],
            lambda x: [np.broadcast_to(x, (2, 3))],
        ),
        # k = 0 on rows of one value never reaches the empty heap; k = 1 is the largest of each row.
        (
            single_op_model("TOPK_V2", {"x": ([3, 1], f32)}, {"k": np.array(0, i32)}, [([3, 0], f32), ([3, 0], i32)]),
            [3, 1],
            lambda x: [np.zeros((3, 0), f32), np.zeros((3, 0), i32)],
        ),
        (
            single_op_model("TOPK_V2", {"x": ([2, 6], f32)}, {"k": np.array(1, i32)}, [([2, 1], f32), ([2, 1], i32)]),
            [2, 6],
            lambda x: [x.max(axis=1, keepdims=True), x.argmax(axis=1)[:, None].astype(i32)],
        ),
        # Dilated CONV_3D with depth equal to channels (VALID and SAME), and SAME undilated.
        (
            _conv3d_model([1, 8, 5, 5, 8], _W_IN8, "VALID", (1, 2, 1), (1, 2, 2)),
            [1, 8, 5, 5, 8],
            lambda x: [_conv3d(x, _W_IN8, "VALID", (1, 2, 1), (1, 2, 2))],
        ),
        (
            _conv3d_model([1, 2, 5, 4, 2], _W, "SAME", (1, 2, 1), (2, 2, 1)),
            [1, 2, 5, 4, 2],
            lambda x: [_conv3d(x, _W, "SAME", (1, 2, 1), (2, 2, 1))],
        ),
        (
            _conv3d_model([1, 6, 6, 6, 2], _W, "SAME", (2, 2, 2), (1, 1, 1)),
            [1, 6, 6, 6, 2],
            lambda x: [_conv3d(x, _W, "SAME", (2, 2, 2), (1, 1, 1))],
        ),
    ],
    ids=[
        "BROADCAST_TO empty after",
        "BROADCAST_TO",
        "TOPK_V2 k=0 rows of one",
        "TOPK_V2 k=1",
        "CONV_3D VALID depth=channels",
        "CONV_3D SAME depth=channels",
        "CONV_3D SAME undilated",
    ],
)
def test_neighbours_run_on_every_runtime_with_the_ops_values(data, shape, want):
    """What the rules leave alone runs on the loaded runtime, with the values of the op's definition."""
    _checked_on(data, "2.17.1")
    x = np.random.default_rng(9).standard_normal(shape).astype(f32)
    got = _outputs(oo.Interpreter(model_content=data), x)
    for g, w in zip(got, want(x)):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4)


# -- SELECT_V2 broadcasting 6 dimensions --------------------------------------------------------
#
# 2.17.1's broadcasting SELECT_V2 pads every shape out to 5 dimensions and aborts the process
# (SIGABRT, in a child, any type, XNNPACK on or off) on 6; 2.23.0 and ai-edge-litert run it.  One
# shape of 6 dimensions takes the elementwise Eval and runs, unless an earlier allocation of the
# same interpreter broadcast (tests/model/test_select_rows.py: model.select_rows remembers that).

R6 = [2, 2, 2, 2, 2, 3]


def _select_v2_model(c, x, y, dtype=f32) -> bytes:
    out = list(np.broadcast_shapes(tuple(c), tuple(x), tuple(y)))
    inputs = {"c": (c, np.bool_), "x": (x, dtype), "y": (y, dtype)}
    return single_op_model("SELECT_V2", inputs, {}, [(out, dtype)], version=2)


def _select_v2_values(c, x, y, dtype=f32, seed=6):
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal(s) * 10 for s in (x, y)]
    return [rng.random(c) > 0.5, *(v > 0 if dtype is np.bool_ else v.astype(dtype) for v in values)]


def _select_v2_run(it, values):
    it.allocate_tensors()
    for d, v in zip(it.get_input_details(), values):
        it.set_tensor(d["index"], v)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


# name: (condition, x, y): a broadcast to 6 dimensions, which 2.17.1 aborts on.
SELECT_V2_CRASHERS = {
    "last dimension": ([2, 2, 2, 2, 2, 1], R6, R6),
    "x broadcast": (R6, [2, 2, 2, 2, 2, 1], R6),
    "condition of one dimension": ([3], R6, R6),
    "scalar condition": ([], R6, R6),
    "y of lower rank": (R6, R6, [3]),
}


def _select_v2_message(c, x, y, version="2.17.1") -> str:
    out = list(np.broadcast_shapes(tuple(c), tuple(x), tuple(y)))
    return (
        f"operator 0 (SELECT_V2) broadcasts its condition {c}, x {x} and y {y} to {out}; TFLite {version}'s "
        "SELECT_V2 broadcasts through at most 5 dimensions and aborts the process on more (TFLite 2.23 runs it)"
    )


@pytest.mark.parametrize("case", list(SELECT_V2_CRASHERS))
def test_select_v2_broadcast_to_6_dimensions_refused_on_runtimes_older_than_2_23_only(case):
    shapes = SELECT_V2_CRASHERS[case]
    data = _select_v2_model(*shapes)
    for version in ("2.17.1", "2.22.0"):
        with pytest.raises(ModelError, match=re.escape(_select_v2_message(*shapes, version))):
            _checked_on(data, version)
    for version in ("2.23.0", "3.0.0", None):
        _checked_on(data, version)


@pytest.mark.parametrize("dtype", [f32, i32, np.int8, np.int64, np.bool_], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", list(SELECT_V2_CRASHERS))
def test_select_v2_broadcast_on_the_loaded_runtime_refused_or_run_like_ai_edge_litert(case, dtype):
    """In this process only the allocation on an affected runtime: a regressed rule fails the test there,
    and nothing is invoked."""
    shapes = SELECT_V2_CRASHERS[case]
    data = _select_v2_model(*shapes, dtype=dtype)
    version = runtime_info().version
    it = oo.Interpreter(model_content=data)
    if affected(version):
        with pytest.raises(ModelError, match=re.escape(_select_v2_message(*shapes, version))):
            it.allocate_tensors()
        return
    values = _select_v2_values(*shapes, dtype=dtype)
    ours, theirs = _select_v2_run(it, values), _select_v2_run(litert.Interpreter(model_content=data), values)
    want = np.where(*values)
    assert ours.shape == theirs.shape == want.shape
    np.testing.assert_array_equal(ours, want)
    np.testing.assert_array_equal(theirs, want)


@pytest.mark.parametrize(
    "shapes",
    [
        ([2, 2, 2, 2, 1], [2, 2, 2, 2, 3], [2, 2, 2, 2, 3]),  # a broadcast of 5 dimensions
        ([3], [2, 2, 2, 2, 3], [1, 1, 1, 1, 1]),
        (R6, R6, R6),  # one shape of 6 dimensions: the elementwise Eval
        ([1] * 6, [1] * 6, [1] * 5),  # one value each, the output declared with one: Prepare returns early
    ],
    ids=["5-D broadcast", "5-D broadcast of lower ranks", "6-D one shape", "6-D one value each"],
)
@pytest.mark.parametrize("dtype", [f32, np.int8, np.bool_], ids=lambda d: np.dtype(d).name)
def test_select_v2_neighbours_run_on_every_runtime_with_numpys_values(shapes, dtype):
    data = _select_v2_model(*shapes, dtype=dtype)
    _checked_on(data, "2.17.1")
    values = _select_v2_values(*shapes, dtype=dtype)
    got, want = _select_v2_run(oo.Interpreter(model_content=data), values), np.where(*values)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_a_kept_verdict_of_one_runtime_is_never_another_runtimes(verdicts):
    """check_allocated keeps its verdicts (in memory and on disk) under the runtime's version and
    file: a pass kept on 2.23.0 is not one on 2.17.1, nor a refusal kept on 2.17.1 one on 2.23.0."""
    from opaque_ops.model import cache

    data = _select_v2_model(*SELECT_V2_CRASHERS["last dimension"])
    configs = {v: ((v, f"/lib/{v}/libtensorflowlite_c.so"), False, 0) for v in ("2.17.1", "2.23.0")}
    for _ in range(2):  # the second time from the record on disk alone
        for order in (("2.23.0", "2.17.1"), ("2.17.1", "2.23.0")):
            for version in order:
                info = cache.checked_model(data)
                sg = info.subgraphs[0]
                given = {t: tuple(sg.tensors[t].shape) for t in sg.inputs}
                if version == "2.17.1":
                    with pytest.raises(
                        ModelError, match=re.escape(_select_v2_message(*SELECT_V2_CRASHERS["last dimension"]))
                    ):
                        check_allocated(info, given.get, configs[version])
                else:
                    check_allocated(info, given.get, configs[version])
        assert list(verdicts.glob("*.rec"))
        cache.clear()


# -- SELECT_V2 in a subgraph that WHILE, IF or CALL_ONCE runs ----------------------------------
#
# Those kernels prepare the subgraphs they run themselves (while.cc, if.cc), out of the
# interpreter's sight.  Measured in child processes before the rule: every model of
# CONTROL_FLOW_CRASHERS aborts 2.17.1 (SIGABRT) at its first invoke, through opaque_ops'
# Interpreter; 2.23.0 and ai-edge-litert give np.where's values.  check_select_v2_in_control_flow
# follows the subgraphs from subgraph 0's planned shapes, turn by turn for a WHILE.


def _joined(main, others, options: str, indices) -> bytes:
    from tests.model.test_select_rows import _joined as joined

    return joined(main, others, options, indices)


def if_select_v2_model(c, x, y) -> bytes:
    """out = IF(flag, c, x, y): its then branch SELECT_V2(c, x, y), its else branch SELECT_V2(c, y, x)."""
    from opaque_ops.model import ModelBuilder

    o = list(np.broadcast_shapes(tuple(c), tuple(x), tuple(y)))
    main = ModelBuilder()
    ins = [main.add_tensor("flag", [], np.bool_), main.add_tensor("c", c, np.bool_)]
    ins += [main.add_tensor("x", x, f32), main.add_tensor("y", y, f32)]
    out = main.add_tensor("out", o, f32)
    main.add_op("IF", ins, [out])
    main.set_inputs(ins)
    main.set_outputs([out])
    branches = []
    for name, swap in (("then", False), ("else", True)):
        b = ModelBuilder(subgraph_name=name)
        bc, bx, by = b.add_tensor("c", c, np.bool_), b.add_tensor("x", x, f32), b.add_tensor("y", y, f32)
        bo = b.add_tensor("out", o, f32)
        b.add_op("SELECT_V2", [bc, by, bx] if swap else [bc, bx, by], [bo])
        b.set_inputs([bc, bx, by])
        b.set_outputs([bo])
        branches.append(b)
    return _joined(main, branches, "IfOptions", {"thenSubgraphIndex": 1, "elseSubgraphIndex": 2})


def while_select_v2_model(c, x, y, turns=2, in_cond=False, reshape_to=None, grow=False, keep_x=False) -> bytes:
    """WHILE i < turns over (i, c, x, y), x of the broadcast shape: its body x <- SELECT_V2(c, x, y).

    With ``in_cond`` the condition subgraph runs the SELECT_V2 (its value
    unused) and the body keeps x.  With ``reshape_to`` the body's new loop
    variables are x > 0, x and y reshaped to that shape: the second turn
    prepares the body on them (one shape for the condition, x and y).  With
    ``grow`` the new x is the SELECT_V2's output twice, along dimension 0:
    a shape that changes at every turn, at one rank.  With ``keep_x`` (and
    ``reshape_to``) the new x is the SELECT_V2's output, not reshaped.
    """
    from opaque_ops.model import ModelBuilder

    o = list(np.broadcast_shapes(tuple(c), tuple(x), tuple(y)))
    r = reshape_to
    main = ModelBuilder()
    ins = [main.add_tensor("i", [], i32), main.add_tensor("c", c, np.bool_)]
    ins += [main.add_tensor("x", x, f32), main.add_tensor("y", y, f32)]
    outs = [main.add_tensor("i_out", [], i32), main.add_tensor("c_out", r or c, np.bool_)]
    outs += [main.add_tensor("x_out", r or o, f32), main.add_tensor("y_out", r or y, f32)]
    main.add_op("WHILE", ins, outs)
    main.set_inputs(ins)
    main.set_outputs([outs[0], outs[2]])
    cond = ModelBuilder(subgraph_name="cond")
    ci = cond.add_tensor("i", [], i32)
    rest = [cond.add_tensor("c", c, np.bool_), cond.add_tensor("x", x, f32), cond.add_tensor("y", y, f32)]
    going = cond.add_tensor("going", [], np.bool_)
    cond.add_op("LESS", [ci, cond.add_constant("turns", np.array(turns, i32))], [going])
    if in_cond:
        cond.add_op("SELECT_V2", rest, [cond.add_tensor("unused", o, f32)])
    cond.set_inputs([ci, *rest])
    cond.set_outputs([going])
    body = ModelBuilder(subgraph_name="body")
    bi, bc = body.add_tensor("i", [], i32), body.add_tensor("c", c, np.bool_)
    bx, by = body.add_tensor("x", x, f32), body.add_tensor("y", y, f32)
    bi2, bx2 = body.add_tensor("i2", [], i32), body.add_tensor("x2", o, f32)
    body.add_op("ADD", [bi, body.add_constant("one", np.array(1, i32))], [bi2])
    if in_cond:
        body.add_op("ADD", [bx, body.add_constant("nought", np.array(0, f32))], [bx2])
    else:
        body.add_op("SELECT_V2", [bc, bx, by], [bx2])
    new = [bi2, bc, bx2, by]
    if grow:
        new[2] = body.add_tensor("x3", [2 * o[0], *o[1:]], f32)
        body.add_op("CONCATENATION", [bx2, bx2], [new[2]], {"axis": 0})
    if r is not None:
        shape, positive = body.add_constant("shape", np.array(r, i32)), body.add_tensor("positive", o, np.bool_)
        body.add_op("GREATER", [bx2, body.add_constant("zero", np.array(0, f32))], [positive])
        new = [bi2, body.add_tensor("c3", r, np.bool_), body.add_tensor("x3", r, f32), body.add_tensor("y3", r, f32)]
        for old, t in zip((positive, bx2, by), new[1:]):
            body.add_op("RESHAPE", [old, shape], [t])
        if keep_x:
            new[2] = bx2
    body.set_inputs([bi, bc, bx, by])
    body.set_outputs(new)
    return _joined(main, [cond, body], "WhileOptions", {"condSubgraphIndex": 1, "bodySubgraphIndex": 2})


C6 = [2, 2, 2, 2, 2, 1]
R6_AS_ROWS = [1, 1, 1, 1, 2, 3]


def _control_flow_want(case, c, x, y):
    """The model's output from the ops' definitions (IF's then branch; the WHILE's x after its turns)."""
    if case == "while body reshapes to 6 dimensions":
        first = np.where(c, x, y).reshape(R6_AS_ROWS)
        return np.where(first > 0, first, y.reshape(R6_AS_ROWS))
    if case == "while condition":
        return x
    if case.startswith("while"):
        return np.where(c, np.where(c, x, y), y)  # two turns
    return np.where(c, x, y)


# name: (model, the caller, the SELECT_V2 named, the inputs' shapes (condition, x, y)).
CONTROL_FLOW_CRASHERS = {
    "if branch": (lambda: if_select_v2_model(C6, R6, R6), "IF", "subgraph 1 operator 0", (C6, R6, R6)),
    "while body": (lambda: while_select_v2_model(C6, R6, R6), "WHILE", "subgraph 2 operator 1", (C6, R6, R6)),
    "while condition": (
        lambda: while_select_v2_model(C6, R6, R6, in_cond=True),
        "WHILE",
        "subgraph 1 operator 1",
        (C6, R6, R6),
    ),
    # Declared at 2 dimensions, resized to 6 (the branch takes the caller's shapes).
    "while body resized to 6 dimensions": (
        lambda: while_select_v2_model([2, 1], [2, 3], [2, 3]),
        "WHILE",
        "subgraph 2 operator 1",
        (C6, R6, R6),
    ),
    # Within one invoke: a broadcast of 2 dimensions, then one shape of 6 (the mode is kept).
    "while body reshapes to 6 dimensions": (
        lambda: while_select_v2_model([2, 1], [2, 3], [2, 3], reshape_to=R6_AS_ROWS),
        "WHILE",
        "subgraph 2 operator 1",
        ([2, 1], [2, 3], [2, 3]),
    ),
}


def _control_flow_values(shapes, seed=7):
    rng = np.random.default_rng(seed)
    c, x, y = shapes
    return rng.random(c) > 0.5, rng.standard_normal(x).astype(f32), rng.standard_normal(y).astype(f32)


def _control_flow_feed(it, values):
    """Resize the inputs to these values' shapes, allocate, set, invoke: the last output."""
    return feed(it, values)[-1]


def _resized_checked_on(data, shapes, version):
    """check_allocated with the inputs (flag or counter, condition, x, y) resized to ``shapes``, on that runtime."""
    info = read_model(data)
    sg = info.subgraphs[0]
    given = dict(zip(sg.inputs, [(), *map(tuple, shapes)]))
    config = () if version is None else ((version, "/some/libtensorflowlite_c.so"), False, 0)
    check_allocated(info, given.get, config)


@pytest.mark.parametrize("case", list(CONTROL_FLOW_CRASHERS))
def test_select_v2_in_control_flow_refused_on_runtimes_older_than_2_23_only(case):
    build, caller, names, shapes = CONTROL_FLOW_CRASHERS[case]
    data = build()
    for version in ("2.17.1", "2.22.0"):
        with pytest.raises(
            ModelError, match=re.escape(f"in a subgraph that subgraph 0 operator 0 ({caller}) runs")
        ) as err:
            _resized_checked_on(data, shapes, version)
        message = str(err.value)
        assert f"{names} (SELECT_V2)" in message, message
        assert f"TFLite {version}'s SELECT_V2 broadcasts through at most 5 dimensions and aborts" in message
        assert "or at most 5 dimensions, or use TFLite 2.23" in message
    for version in ("2.23.0", "3.0.0", None):
        _resized_checked_on(data, shapes, version)


@pytest.mark.parametrize("case", list(CONTROL_FLOW_CRASHERS))
def test_select_v2_in_control_flow_on_the_loaded_runtime_refused_or_run_with_numpy_values(case):
    """In this process only the allocation on an affected runtime (a regressed rule fails the test
    there, and nothing is invoked); elsewhere the run, against numpy and ai-edge-litert."""
    build, caller, _, shapes = CONTROL_FLOW_CRASHERS[case]
    values = _control_flow_values(shapes)
    it = oo.Interpreter(model_content=build())
    first = (True,) if caller == "IF" else (0,)
    if affected(runtime_info().version):
        details = it.get_input_details()
        for d, v in zip(details, (*first, *values)):
            it.resize_tensor_input(d["index"], list(np.shape(v)))
        with pytest.raises(ModelError, match=re.escape("(TFLite 2.23 runs it)")):
            it.allocate_tensors()
        return
    got = _control_flow_feed(it, (*first, *values))
    np.testing.assert_array_equal(got, _control_flow_want(case, *values))
    peer = litert.Interpreter(model_content=build())
    details = peer.get_input_details()
    for d, v in zip(details, (*first, *values)):
        peer.resize_tensor_input(d["index"], list(np.shape(v)))
    peer.allocate_tensors()
    for d, v in zip(details, (*first, *values)):
        peer.set_tensor(d["index"], np.asarray(v, d["dtype"]))
    peer.invoke()
    np.testing.assert_array_equal(got, peer.get_tensor(peer.get_output_details()[-1]["index"]))


_CONTROL_FLOW_CHILD = """
    import sys
    import numpy as np
    import opaque_ops as oo
    from opaque_ops.model.checks import allocated, version_rules
    from tests.model.test_version_rules import (
        CONTROL_FLOW_CRASHERS, _control_flow_feed, _control_flow_values, _control_flow_want)
    if sys.argv[2] == "without":  # (the rule on the model, and the interpreter's memory of earlier turns)
        allocated.check_select_v2_in_control_flow = lambda *a: None
        version_rules.note_called_select_v2 = lambda *a, **k: None
    build, caller, _, shapes = CONTROL_FLOW_CRASHERS[sys.argv[1]]
    values = _control_flow_values(shapes)
    it = oo.Interpreter(model_content=build())
    print("invoking", flush=True)
    try:
        got = _control_flow_feed(it, ((True,) if caller == "IF" else (0,)) + tuple(values))
    except oo.ModelError:
        print("refused")
    else:
        print("ran", np.array_equal(got, _control_flow_want(sys.argv[1], *values)))
"""


def _assert_aborts_only_without_the_rule(child: str, case: str, tmp_path) -> None:
    """``child`` run on ``case`` "without" and "with" the rule, each with verdicts of its own (a refusal kept
    on disk would otherwise answer for the other): on 2.17.1 the first aborts (SIGABRT) while invoking and
    the second is refused; on 2.23.0 both run and give numpy's values."""
    bare = run_child(child, case, "without", env={"OPAQUE_OPS_VERDICT_CACHE": str(tmp_path / "a")})
    guarded = run_child(child, case, "with", env={"OPAQUE_OPS_VERDICT_CACHE": str(tmp_path / "b")})
    if affected(runtime_info().version):
        assert bare.signal == 6 and bare.stdout.split() == ["invoking"], crashed(bare)
        assert guarded.returncode == 0 and guarded.stdout.split() == ["invoking", "refused"], crashed(guarded)
    else:
        for p in (bare, guarded):
            assert p.returncode == 0 and p.stdout.split() == ["invoking", "ran", "True"], crashed(p)


@pytest.mark.parametrize("case", list(CONTROL_FLOW_CRASHERS))
def test_select_v2_in_control_flow_aborts_without_the_rule_and_is_refused_with_it_in_a_child(case, tmp_path):
    """The crash itself only in a child: without the rule 2.17.1 aborts (SIGABRT) where 2.23.0 gives
    numpy's values; with it the allocation is refused.  (Each child keeps its verdicts apart: a
    refusal kept on disk would otherwise answer for the child without the rule.)"""
    _assert_aborts_only_without_the_rule(_CONTROL_FLOW_CHILD, case, tmp_path)


# name: (model, the inputs' shapes): each runs on every runtime, with numpy's values.
CONTROL_FLOW_RUNNERS = {
    # A broadcast of 5 dimensions, in an IF branch and a WHILE body and condition.
    "if branch at 5 dimensions": (lambda: if_select_v2_model(C6[1:], R6[1:], R6[1:]), (C6[1:], R6[1:], R6[1:])),
    "while body at 5 dimensions": (lambda: while_select_v2_model(C6[1:], R6[1:], R6[1:]), (C6[1:], R6[1:], R6[1:])),
    "while condition at 5 dimensions": (
        lambda: while_select_v2_model(C6[1:], R6[1:], R6[1:], in_cond=True),
        (C6[1:], R6[1:], R6[1:]),
    ),
    # One shape of 6 dimensions, never broadcast: the elementwise Eval.
    "if branch of one shape at 6 dimensions": (lambda: if_select_v2_model(R6, R6, R6), (R6, R6, R6)),
    "while body of one shape at 6 dimensions": (lambda: while_select_v2_model(R6, R6, R6), (R6, R6, R6)),
    # Declared at 6 dimensions, resized to a broadcast of 2.
    "while body resized to 2 dimensions": (lambda: while_select_v2_model(C6, R6, R6), ([2, 1], [2, 3], [2, 3])),
    # Three scalars or three [1]: the shape rules give no output shape for inputs of one value
    # each, but one shape never sets the broadcast flag (these were refused on 2.17.1 as "decided
    # only while the model runs", which 2.17.1 runs with numpy's values).
    "if branch of scalars": (lambda: if_select_v2_model([], [], []), ([], [], [])),
    "if branch of one value": (lambda: if_select_v2_model([1], [1], [1]), ([1], [1], [1])),
    "while body of scalars": (lambda: while_select_v2_model([], [], []), ([], [], [])),
}


@pytest.mark.parametrize("case", list(CONTROL_FLOW_RUNNERS))
def test_select_v2_in_control_flow_that_runs_is_not_refused_and_gives_numpy_values(case):
    build, shapes = CONTROL_FLOW_RUNNERS[case]
    data = build()
    caller = "if" if case.startswith("if") else "while"
    for version in ("2.17.1", "2.23.0"):
        _resized_checked_on(data, shapes, version)
    values = _control_flow_values(shapes)
    with oo.Interpreter(model_content=data) as it:
        got = _control_flow_feed(it, ((True,) if caller == "if" else (0,)) + tuple(values))
    np.testing.assert_array_equal(
        got, _control_flow_want("while condition" if "condition" in case else caller, *values)
    )


def test_select_v2_in_a_while_whose_shapes_keep_changing_at_5_dimensions_or_fewer_runs():
    """Its loop variable doubles at every turn: the shapes never repeat, but the ranks do, so the
    SELECT_V2 never sees more than 2 dimensions: not refused, and numpy's values on every runtime."""
    shapes = ([1, 3], [2, 3], [1, 3])
    data = while_select_v2_model(*shapes, turns=3, grow=True)
    for version in ("2.17.1", "2.23.0"):
        _resized_checked_on(data, shapes, version)
    c, x, y = _control_flow_values(shapes)
    want = x
    for _ in range(3):
        want = np.concatenate([np.where(c, want, y)] * 2)
    with oo.Interpreter(model_content=data) as it:
        np.testing.assert_array_equal(_control_flow_feed(it, (0, c, x, y)), want)


def test_select_v2_in_control_flow_whose_shapes_are_not_known_refused_before_2_23_only():
    """The loop variables' shapes not known before the run (here: not planned): whether the
    SELECT_V2 meets 6 dimensions is not known either, so it is refused where 6 abort."""
    data = while_select_v2_model([2, 1], [2, 3], [2, 3])
    info = read_model(data)
    given = {info.subgraphs[0].inputs[0]: ()}  # (the counter alone is known)
    with pytest.raises(ModelError, match="decided only while the model runs") as err:
        check_allocated(info, given.get, (("2.17.1", "/some/libtensorflowlite_c.so"), False, 0))
    assert "subgraph 2 operator 1 (SELECT_V2), in a subgraph that subgraph 0 operator 0 (WHILE) runs" in str(err.value)
    assert "or use TFLite 2.23" in str(err.value)
    check_allocated(read_model(data), given.get, (("2.23.0", "/some/libtensorflowlite_c.so"), False, 0))


# -- ... and its broadcast mode, kept across the interpreter's allocations ----------------------
#
# The node of a called subgraph lives as long as the interpreter, and so does SELECT_V2's broadcast
# flag: measured in child processes before the interpreter remembered it, an IF branch or WHILE body
# allocated with condition [2, 1] and x [2, 3], then with all three [2, 2, 2, 2, 2, 3] (one shape:
# no broadcast in this allocation) aborts 2.17.1 (SIGABRT) in invoke; 2.23.0 runs it.

STALE_CALLED = "an earlier allocation of this Interpreter gave its condition, x and y shapes that differ"
LOW = ([2, 1], [2, 3], [2, 3])
STICKY = {
    "if branch": (lambda: if_select_v2_model(*LOW), "IF", "subgraph 1 operator 0"),
    "while body": (lambda: while_select_v2_model(*LOW), "WHILE", "subgraph 2 operator 1"),
}


@pytest.mark.parametrize("case", list(STICKY))
@pytest.mark.parametrize("isolate", [False, True], ids=["in_process", "isolated"])
def test_select_v2_in_control_flow_left_broadcasting_is_refused_at_6_dimensions_before_2_23_only(case, isolate):
    """In this process only the allocations: a regressed rule lets allocate_tensors() pass (the test
    fails) and nothing is invoked; the 5-dimension runs after the refusal where a crash is survived."""
    build, caller, names = STICKY[case]
    first = (True,) if caller == "IF" else (0,)
    want = "if" if caller == "IF" else "while"
    with oo.Interpreter(model_content=build(), isolate=isolate) as it:
        values = _control_flow_values(LOW)
        np.testing.assert_array_equal(_control_flow_feed(it, (*first, *values)), _control_flow_want(want, *values))
        values = _control_flow_values((R6, R6, R6), seed=8)
        if not affected(runtime_info().version):
            np.testing.assert_array_equal(_control_flow_feed(it, (*first, *values)), _control_flow_want(want, *values))
            return
        for d, v in zip(it.get_input_details(), (*first, *values)):
            it.resize_tensor_input(d["index"], list(np.shape(v)))
        with pytest.raises(ShapeError, match=re.escape(STALE_CALLED)) as err:
            it.allocate_tensors()
        message = str(err.value)
        assert f"{names} (SELECT_V2), in a subgraph that subgraph 0 operator 0 ({caller}) runs" in message
        assert "Create a new Interpreter for these shapes, or keep at most 5 dimensions here" in message
        with pytest.raises(oo.NotAllocatedError):
            it.invoke()
        if isolate:
            for shapes in ((C6[1:], R6[1:], R6[1:]), (R6[1:],) * 3):
                values = _control_flow_values(shapes, seed=9)
                got = _control_flow_feed(it, (*first, *values))
                np.testing.assert_array_equal(got, _control_flow_want(want, *values))
    # A new Interpreter, and one whose allocations never broadcast, take one shape of 6 dimensions.
    with oo.Interpreter(model_content=build(), isolate=isolate) as fresh:
        for shapes in (([2, 3],) * 3, (R6, R6, R6)):
            values = _control_flow_values(shapes, seed=10)
            got = _control_flow_feed(fresh, (*first, *values))
            np.testing.assert_array_equal(got, _control_flow_want(want, *values))


_STICKY_CHILD = """
    import sys
    import numpy as np
    import opaque_ops as oo
    from opaque_ops.model.checks import version_rules
    from tests.model.test_version_rules import (
        LOW, R6, STICKY, _control_flow_feed, _control_flow_values, _control_flow_want)
    if sys.argv[2] == "without":
        version_rules.note_called_select_v2 = lambda *a, **k: None
    build, caller, _ = STICKY[sys.argv[1]]
    first = (True,) if caller == "IF" else (0,)
    want = "if" if caller == "IF" else "while"
    it = oo.Interpreter(model_content=build())
    values = _control_flow_values(LOW)
    assert np.array_equal(_control_flow_feed(it, (*first, *values)), _control_flow_want(want, *values))
    print("invoking", flush=True)
    values = _control_flow_values((R6, R6, R6), seed=8)
    try:
        got = _control_flow_feed(it, (*first, *values))
    except oo.ModelError:
        print("refused")
    else:
        print("ran", np.array_equal(got, _control_flow_want(want, *values)))
"""


@pytest.mark.parametrize("case", list(STICKY))
def test_select_v2_in_control_flow_left_broadcasting_aborts_without_the_memory_in_a_child(case, tmp_path):
    """The crash itself only in a child: without the interpreter's memory 2.17.1 aborts (SIGABRT)
    where 2.23.0 gives numpy's values; with it the second allocation is refused."""
    _assert_aborts_only_without_the_rule(_STICKY_CHILD, case, tmp_path)


ONE_VALUE_EACH = ([1, 1], [1], [1])


@pytest.mark.parametrize("case", list(STICKY))
def test_select_v2_in_control_flow_left_broadcasting_by_a_refused_allocation_is_refused_at_6_dimensions(case):
    """Inputs of one value each but of different shapes, with the declared output of 6 values: the
    kernel broadcasts them (no early return), but their output shape is not followed, so 2.17.1's
    allocation is refused as not known.  The node was prepared all the same: the next allocation,
    of one shape of 6 dimensions, is refused too (measured in a child without that memory: SIGABRT
    in invoke on 2.17.1).  In this process only the allocations there; elsewhere both run."""
    build, caller, names = STICKY[case]
    first = (True,) if caller == "IF" else (0,)
    want = "if" if caller == "IF" else "while"
    with oo.Interpreter(model_content=build()) as it:
        ones = _control_flow_values(ONE_VALUE_EACH)
        six = _control_flow_values((R6, R6, R6), seed=8)
        if not affected(runtime_info().version):
            for values in (ones, six):
                got = _control_flow_feed(it, (*first, *values))
                np.testing.assert_array_equal(got, _control_flow_want(want, *values))
            return
        for values, error, match in ((ones, ModelError, "decided only while"), (six, ShapeError, STALE_CALLED)):
            for d, v in zip(it.get_input_details(), (*first, *values)):
                it.resize_tensor_input(d["index"], list(np.shape(v)))
            with pytest.raises(error, match=re.escape(match)) as err:
                it.allocate_tensors()
            assert f"{names} (SELECT_V2), in a subgraph that subgraph 0 operator 0 ({caller}) runs" in str(err.value)


def if_select_v2_then_add_model() -> bytes:
    """out = IF(flag, c, x, y): each branch SELECT_V2(c, x, y) + [1, 1, 1] (a constant of 3 values)."""
    from opaque_ops.model import ModelBuilder

    main = ModelBuilder()
    ins = [main.add_tensor("flag", [], np.bool_), main.add_tensor("c", LOW[0], np.bool_)]
    ins += [main.add_tensor("x", LOW[1], f32), main.add_tensor("y", LOW[2], f32)]
    out = main.add_tensor("out", [2, 3], f32)
    main.add_op("IF", ins, [out])
    main.set_inputs(ins)
    main.set_outputs([out])
    branches = []
    for name in ("then", "else"):
        b = ModelBuilder(subgraph_name=name)
        bc, bx, by = b.add_tensor("c", LOW[0], np.bool_), b.add_tensor("x", LOW[1], f32), b.add_tensor("y", LOW[2], f32)
        chosen, added = b.add_tensor("chosen", [2, 3], f32), b.add_tensor("added", [2, 3], f32)
        b.add_op("SELECT_V2", [bc, bx, by], [chosen])
        b.add_op("ADD", [chosen, b.add_constant("one", np.ones([3], f32))], [added])
        b.set_inputs([bc, bx, by])
        b.set_outputs([added])
        branches.append(b)
    return _joined(main, branches, "IfOptions", {"thenSubgraphIndex": 1, "elseSubgraphIndex": 2})


def test_select_v2_in_control_flow_left_broadcasting_by_a_failed_allocation_is_refused_at_6_dimensions():
    """The branch's SELECT_V2 broadcasts [2, 1] against [2, 4], then its ADD of [3] fails to prepare
    (every runtime): the allocation fails, but the SELECT_V2 was prepared, and kept broadcasting.
    The next allocation, of one shape of 6 dimensions, is refused on 2.17.1 (measured in a child
    without that memory: SIGABRT in invoke); 2.23.0 runs it with numpy's values."""
    with oo.Interpreter(model_content=if_select_v2_then_add_model()) as it:
        failing = _control_flow_values(([2, 1], [2, 4], [2, 4]))
        six = _control_flow_values((R6, R6, R6), seed=8)
        for d, v in zip(it.get_input_details(), (True, *failing)):
            it.resize_tensor_input(d["index"], list(np.shape(v)))
        with pytest.raises(oo.KernelError):
            it.allocate_tensors()
        if not affected(runtime_info().version):
            np.testing.assert_array_equal(_control_flow_feed(it, (True, *six)), np.where(*six) + f32(1))
            return
        for d, v in zip(it.get_input_details(), (True, *six)):
            it.resize_tensor_input(d["index"], list(np.shape(v)))
        with pytest.raises(ShapeError, match=re.escape(STALE_CALLED)) as err:
            it.allocate_tensors()
        assert "subgraph 1 operator 0 (SELECT_V2), in a subgraph that subgraph 0 operator 0 (IF) runs" in str(err.value)


# -- ... and the output shape a called SELECT or SELECT_V2 keeps, on every runtime -------------------
#
# tensorflow/lite/kernels/select.cc's Prepare returns before resizing the output when the condition,
# x, y and the output (as the node's previous Prepare left it, the declared shape before the first)
# all hold one value: the output keeps its shape.  Measured before the rule (2.17.1, 2.23.0 and
# ai-edge-litert alike): an IF branch's SELECT_V2 allocated with three [1, 1], then three [1, 1, 1],
# gives the IF output [1, 1] where np.where gives [1, 1, 1].  The interpreter follows the called
# subgraphs with its memory of those outputs (checks.called.note_called_kept).

KEPT_CALLED = "keeps the output shape"
NOT_KNOWN = "decided only while the model runs"
ONES2, ONES3 = ([1, 1],) * 3, ([1, 1, 1],) * 3


def _kept_values(it, shapes, seed):
    """Values for the interpreter's inputs: the flag or counter first, then one per shape (bool or float32)."""
    rng = np.random.default_rng(seed)
    details = it.get_input_details()
    first = True if details[0]["dtype"] == np.bool_ else 0
    values = [first]
    for d, s in zip(details[1:], shapes):
        values.append(rng.random(s) > 0.5 if d["dtype"] == np.bool_ else rng.standard_normal(s).astype(f32))
    return values


def _constant_select(x, y):
    return np.where(np.array(True), x, y)


# name: (model, the operator named, numpy's output from the inputs after the flag or counter, steps).
# A step is (the inputs' shapes after the flag or counter, what happens): "runs" (with numpy's
# shape and values), "kept" (ShapeError, on every runtime), or "kept, not known before 2.23" and
# "runs, not known before 2.23" (there refused by check_select_v2_in_control_flow, which has no
# shape for inputs of one value each of different shapes).
KEPT_SEQUENCES = {
    "if branch, resized from its declared [1, 1], [1], [1] to three [1, 1, 1]": (
        lambda: if_select_v2_model([1, 1], [1], [1]),
        "subgraph 1 operator 0 (SELECT_V2), in a subgraph that subgraph 0 operator 0 (IF) runs",
        np.where,
        [(ONES3, "kept, not known before 2.23")],
    ),
    "if branch at its declared [1, 1], [1], [1], then three [1, 1, 1]": (
        lambda: if_select_v2_model([1, 1], [1], [1]),
        "subgraph 1 operator 0 (SELECT_V2), in a subgraph that subgraph 0 operator 0 (IF) runs",
        np.where,
        [(ONE_VALUE_EACH, "runs, not known before 2.23"), (ONES3, "kept, not known before 2.23")],
    ),
    "if branch, three [1, 1] then three [1, 1, 1]": (
        lambda: if_select_v2_model([2, 3], [2, 3], [2, 3]),
        "subgraph 1 operator 0 (SELECT_V2), in a subgraph that subgraph 0 operator 0 (IF) runs",
        np.where,
        # (Then the message's fixes: inputs that broadcast to the kept [1, 1]; shapes of more than one
        # value, after which three [1, 1, 1] get their shape.)
        [(ONES2, "runs"), (ONES3, "kept"), (ONES2, "runs"), (([2, 3],) * 3, "runs"), (ONES3, "runs")],
    ),
    "while body, three [1, 1] then three [1, 1, 1]": (
        lambda: while_select_v2_model([2, 3], [2, 3], [2, 3]),
        "subgraph 2 operator 1 (SELECT_V2), in a subgraph that subgraph 0 operator 0 (WHILE) runs",
        lambda c, x, y: _control_flow_want("while", c, x, y),
        [(ONES2, "runs"), (ONES3, "kept"), (ONES2, "runs"), (([2, 3],) * 3, "runs"), (ONES3, "runs")],
    ),
    # Within one invoke: the body's first turn gives [1, 1] (its declared output); its second turn,
    # on the condition and y reshaped to [1, 1, 1] and x [1, 1], keeps it (the WHILE's x is then
    # [1, 1] where np.where gives [1, 1, 1]).
    "while body whose second turn keeps [1, 1]": (
        lambda: while_select_v2_model(*ONES2, reshape_to=[1, 1, 1], keep_x=True),
        "subgraph 2 operator 1 (SELECT_V2), in a subgraph that subgraph 0 operator 0 (WHILE) runs",
        None,
        [(ONES2, "kept, not known before 2.23")],
    ),
    # SELECT (v1) with a constant condition (the only one allowed there): its output is x's shape.
    "if branch SELECT, declared [1, 1], resized to [1]": (
        lambda: _select_rows_helpers().if_select_model([], 1, 1, op="SELECT", constant=np.array(True)),
        "subgraph 1 operator 0 (SELECT), in a subgraph that subgraph 0 operator 0 (IF) runs",
        _constant_select,
        [(([1], [1]), "kept"), (([1, 1], [1, 1]), "runs"), (([2, 3], [2, 3]), "runs"), (([1], [1]), "runs")],
    ),
}


def _select_rows_helpers():
    """tests.model.test_select_rows (its if_select_model), imported when a model is built, as _joined does."""
    import tests.model.test_select_rows as module

    return module


@pytest.mark.parametrize("case", list(KEPT_SEQUENCES))
@pytest.mark.parametrize("isolate", [False, True], ids=["in_process", "isolated"])
def test_select_in_control_flow_keeping_its_output_shape_is_refused_and_its_fixes_run(case, isolate):
    build, names, want, steps = KEPT_SEQUENCES[case]
    older = affected(runtime_info().version)
    with oo.Interpreter(model_content=build(), isolate=isolate) as it:
        for n, (shapes, outcome) in enumerate(steps):
            values = _kept_values(it, shapes, seed=20 + n)
            if outcome == "runs" or (outcome.startswith("runs") and not older):
                got = _control_flow_feed(it, values)
                expected = want(*values[1:])
                assert got.shape == expected.shape, (n, got.shape, expected.shape)
                np.testing.assert_array_equal(got, expected)
                continue
            for d, v in zip(it.get_input_details(), values):
                it.resize_tensor_input(d["index"], list(np.shape(v)))
            match = NOT_KNOWN if older and outcome.endswith("before 2.23") else KEPT_CALLED
            with pytest.raises(ModelError, match=re.escape(match)) as err:
                it.allocate_tensors()
            message = str(err.value)
            assert names in message, message
            if match == KEPT_CALLED:
                assert isinstance(err.value, ShapeError)
                assert "so that output and what the subgraph passes on from it would have the wrong shape" in message
                assert "Give the condition, x and y that reach it (from the caller's inputs, and from" in message
            with pytest.raises(oo.NotAllocatedError):
                it.invoke()


def _if_ones_then(it, first, then):
    """The IF output's shape after an allocation and invoke at ``first``, then at ``then`` (inputs after the flag)."""
    _control_flow_feed(it, _kept_values(it, first, seed=30))
    return _control_flow_feed(it, _kept_values(it, then, seed=31)).shape


def test_select_in_control_flow_keeping_its_output_shape_gives_a_wrong_shape_without_the_rule(monkeypatch):
    """Without the rule the IF's output is silently [1, 1] where np.where gives [1, 1, 1], on this runtime
    and on ai-edge-litert (the same model and sequence); with it that allocation is refused."""
    from opaque_ops.model.checks import called

    data = if_select_v2_model([2, 3], [2, 3], [2, 3])
    peer = litert.Interpreter(model_content=data)
    assert _if_ones_then(peer, ONES2, ONES3) == (1, 1)
    with oo.Interpreter(model_content=data) as it:
        _control_flow_feed(it, _kept_values(it, ONES2, seed=30))
        for d, v in zip(it.get_input_details(), _kept_values(it, ONES3, seed=31)):
            it.resize_tensor_input(d["index"], list(np.shape(v)))
        with pytest.raises(ShapeError, match=re.escape(KEPT_CALLED)):
            it.allocate_tensors()
    monkeypatch.setattr(called, "note_called_kept", lambda *a, **k: None)
    with oo.Interpreter(model_content=data) as it:
        assert _if_ones_then(it, ONES2, ONES3) == (1, 1)
    # Within one invoke, a WHILE body's second turn (np.where's x after two turns is [1, 1, 1]).
    data = while_select_v2_model(*ONES2, reshape_to=[1, 1, 1], keep_x=True)
    peer = litert.Interpreter(model_content=data)
    assert _control_flow_feed(peer, _kept_values(peer, ONES2, seed=32)).shape == (1, 1)
    if not affected(runtime_info().version):  # (2.17.1 refuses it as not known, rule or not)
        with oo.Interpreter(model_content=data) as it:
            assert _control_flow_feed(it, _kept_values(it, ONES2, seed=32)).shape == (1, 1)


# name: (model, numpy's output, the allocations' shapes): each runs on every runtime, with numpy's
# shapes and values, the kept shape being the right one (or no Prepare keeping one).
KEPT_RUNNERS = {
    "if branch of three [1, 1] at every allocation": (
        lambda: if_select_v2_model([2, 3], [2, 3], [2, 3]),
        np.where,
        [ONES2, ONES2],
    ),
    "if branch of [2, 3], then three [1, 1, 1], then three [1, 1]": (
        lambda: if_select_v2_model([2, 3], [2, 3], [2, 3]),
        np.where,
        [([2, 3],) * 3, ONES3, ([2, 3],) * 3, ONES2],
    ),
    "while body of scalars, then [2, 3], then three [1]": (
        lambda: while_select_v2_model([2, 3], [2, 3], [2, 3]),
        lambda c, x, y: _control_flow_want("while", c, x, y),
        [([],) * 3, ([2, 3],) * 3, ([1],) * 3],
    ),
    "if branch SELECT of [2, 3], then [1], then [1, 1, 1] after [2, 3]": (
        lambda: _select_rows_helpers().if_select_model([], 1, 1, op="SELECT", constant=np.array(True)),
        _constant_select,
        [([2, 3],) * 2, ([1],) * 2, ([2, 3],) * 2, ([1, 1, 1],) * 2],
    ),
}


@pytest.mark.parametrize("case", list(KEPT_RUNNERS))
def test_select_in_control_flow_whose_kept_output_is_right_runs_with_numpy_shapes(case):
    build, want, allocations = KEPT_RUNNERS[case]
    with oo.Interpreter(model_content=build()) as it:
        for n, shapes in enumerate(allocations):
            values = _kept_values(it, shapes, seed=40 + n)
            got = _control_flow_feed(it, values)
            expected = want(*values[1:])
            assert got.shape == expected.shape, (n, got.shape, expected.shape)
            np.testing.assert_array_equal(got, expected)


def test_select_v2_in_an_if_branch_whose_shapes_are_not_known_is_advised_on_its_inputs_not_loop_variables():
    """Inputs of one value each but of different shapes: no shape there for the 2.17.1 rule.  An IF has
    no loop variables: the advice names the inputs; a WHILE's still names its loop variables."""
    for build, fix, other in (
        (lambda: if_select_v2_model(*ONE_VALUE_EACH), "Give the condition, x and y reaching it one shape", "loop"),
        (lambda: while_select_v2_model(*LOW), "Give the loop variables shapes that stay the same", "reaching it"),
    ):
        with pytest.raises(ModelError, match=re.escape(NOT_KNOWN)) as err:
            _resized_checked_on(build(), ONE_VALUE_EACH, "2.17.1")
        message = str(err.value)
        assert fix in message and other not in message, message
