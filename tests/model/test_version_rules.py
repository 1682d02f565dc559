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
from opaque_ops.errors import ModelError
from opaque_ops.model import check_allocated, read_model
from opaque_ops.model.checks.version_rules import affected
from opaque_ops.runtime import runtime_info
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
