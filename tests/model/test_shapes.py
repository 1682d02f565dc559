"""opaque_ops.model.shapes: the shape rules of ops whose output shape depends on constant inputs.

Each model is one builtin operator whose outputs are the graph's outputs.
For several input shapes, :func:`infer_shapes` is given only the resized
inputs' shapes (as the arena guard before an allocation is: the runtime's
own shapes are stale then) and must give every output the shape that
ai-edge-litert reports after ``resize_tensor_input``, ``allocate_tensors``
and ``invoke``.  Shapes the reference kernels refuse in Prepare raise
ShapeError, where ai-edge-litert's allocation fails too, and opaque_ops'
interpreter refuses them with that ShapeError.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.model import ModelBuilder, read_model
from opaque_ops.model.shapes import SequenceFault, ShapeError, fed_shape_inputs, infer_shapes, reverse_sequence_fault
from tests.helpers.child_process import crashed, run_child
from tests.helpers.reference_models import reverse_sequence_reference
from tests.helpers.single_op import single_op_model as _model

litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is a test dependency")

f32, i32, i64 = np.float32, np.int32, np.int64


def _value(shape, dtype):
    # Zeros are valid indices (GATHER_ND, ONE_HOT) and conditions (SELECT_V2).
    return np.zeros(shape, dtype)


def _inferred(data, shapes):
    """infer_shapes from the resized inputs' shapes alone: {output tensor: shape}."""
    info = read_model(data)
    sg = info.subgraphs[0]
    given = dict(zip(sg.inputs, map(tuple, shapes)))
    known = infer_shapes(info, given.get)
    return [known[t] for t in sg.outputs]


def _litert(data, shapes, dtypes):
    it = litert.Interpreter(model_content=data)
    for d, s in zip(it.get_input_details(), shapes):
        it.resize_tensor_input(d["index"], list(s))
    it.allocate_tensors()
    for d, s, dt in zip(it.get_input_details(), shapes, dtypes):
        it.set_tensor(d["index"], _value(s, dt))
    it.invoke()
    return [tuple(it.get_tensor(d["index"]).shape) for d in it.get_output_details()]


def _x(shape, dtype=f32):
    return {"x": (shape, dtype)}


CASES = {
    "TILE": (
        _model("TILE", _x([2, 3]), {"m": np.array([2, 1], i32)}, [([4, 3], f32)]),
        [[[2, 3]], [[1, 5]], [[4, 1]], [[0, 2]]],
    ),
    "TILE int64 multiples": (
        _model("TILE", _x([2, 3], i32), {"m": np.array([1, 3], i64)}, [([2, 9], i32)]),
        [[[2, 3]], [[5, 1]]],
    ),
    "BROADCAST_TO": (
        # (Version 2: the runtimes register BROADCAST_TO from there.)
        _model("BROADCAST_TO", _x([1, 3]), {"s": np.array([2, 4, 3], i32)}, [([2, 4, 3], f32)], version=2),
        [[[1, 3]], [[4, 3]], [[1, 1]], [[3]], [[2, 1, 1]]],
    ),
    "FILL": (
        _model("FILL", {"v": ([], f32)}, {"d": np.array([3, 5], i32)}, [([3, 5], f32)], order=["d", "v"]),
        [[[]]],
    ),
    "FILL int64 dims": (
        _model("FILL", {"v": ([], i32)}, {"d": np.array([2, 0, 4], i64)}, [([2, 0, 4], i32)], order=["d", "v"]),
        [[[]]],
    ),
    "ONE_HOT last axis": (
        _model(
            "ONE_HOT",
            _x([3], i32),
            {"depth": np.array(5, i32), "on": np.array(1.0, f32), "off": np.array(0.0, f32)},
            [([3, 5], f32)],
            {"axis": -1},
        ),
        [[[3]], [[2, 4]], [[1, 2, 3]]],
    ),
    "ONE_HOT axis 1": (
        _model(
            "ONE_HOT",
            _x([2, 3], i64),
            {"depth": np.array(4, i32), "on": np.array(7, i32), "off": np.array(-1, i32)},
            [([2, 4, 3], i32)],
            {"axis": 1},
        ),
        [[[2, 3]], [[5, 1]], [[1, 2, 2]]],
    ),
    "ONE_HOT without options (axis 0)": (
        _model(
            "ONE_HOT",
            _x([3], i32),
            {"depth": np.array(2, i32), "on": np.array(1.0, f32), "off": np.array(0.0, f32)},
            [([2, 3], f32)],
        ),
        [[[3]], [[4, 2]]],
    ),
    "GATHER_ND": (
        _model("GATHER_ND", {"p": ([4, 3], f32), "i": ([2, 1], i32)}, {}, [([2, 3], f32)]),
        [[[4, 3], [2, 1]], [[5, 2, 3], [2, 2]], [[6], [3, 1]], [[3, 2], [4, 5, 2]]],
    ),
    "ARG_MAX": (
        _model("ARG_MAX", _x([2, 5]), {"a": np.array([1], i32)}, [([2], i32)], {"output_type": "INT32"}),
        [[[2, 5]], [[3, 4, 2]], [[1, 7]]],
    ),
    "ARG_MIN negative axis": (
        _model("ARG_MIN", _x([2, 5]), {"a": np.array(-1, i64)}, [([2], i64)], {"output_type": "INT64"}),
        [[[2, 5]], [[6]], [[3, 4, 2]]],
    ),
    "MATRIX_DIAG": (
        _model("MATRIX_DIAG", _x([3]), {}, [([3, 3], f32)]),
        [[[3]], [[2, 4]], [[1, 2, 5]]],
    ),
    "RANGE": (
        _model("RANGE", {}, {"s": np.array(2, i32), "l": np.array(11, i32), "d": np.array(3, i32)}, [([3], i32)]),
        [[]],
    ),
    "RANGE downwards": (
        _model("RANGE", {}, {"s": np.array(10, i32), "l": np.array(1, i32), "d": np.array(-4, i32)}, [([3], i32)]),
        [[]],
    ),
    "TOPK_V2": (
        _model("TOPK_V2", _x([2, 6]), {"k": np.array(3, i32)}, [([2, 3], f32), ([2, 3], i32)]),
        [[[2, 6]], [[5, 3]], [[4]], [[2, 2, 7]]],
    ),
    "UNPACK": (
        _model("UNPACK", _x([3, 2]), {}, [([2], f32)] * 3, {"num": 3, "axis": 0}),
        [[[3, 2]], [[3, 5]], [[3]], [[3, 1, 4]]],
    ),
    "UNPACK negative axis": (
        _model("UNPACK", _x([4, 2]), {}, [([4], f32)] * 2, {"num": 2, "axis": -1}),
        [[[4, 2]], [[1, 3, 2]]],
    ),
    "SELECT_V2": (
        _model("SELECT_V2", {"c": ([2, 1], np.bool_), "x": ([1, 3], f32)}, {"y": np.array(5.0, f32)}, [([2, 3], f32)]),
        [[[2, 1], [1, 3]], [[4], [3, 1]], [[1, 2, 1], [3, 1, 6]]],
    ),
    "REVERSE_V2": (
        _model("REVERSE_V2", _x([2, 3]), {"a": np.array([0], i32)}, [([2, 3], f32)]),
        # (Empty before the axis, or only in it: nothing to reverse, and every runtime runs it.)
        [[[2, 3]], [[5, 1, 4]], [[0, 3]], [[0, 0]]],
    ),
    "REVERSE_V2 last axis": (
        _model("REVERSE_V2", _x([2, 3]), {"a": np.array([-1], i32)}, [([2, 3], f32)]),
        [[[2, 3]], [[2, 0]], [[3, 0, 4]]],
    ),
    "CUMSUM": (
        _model("CUMSUM", _x([2, 3]), {"a": np.array(0, i32)}, [([2, 3], f32)]),
        [[[2, 3]], [[4, 7]]],
    ),
    "ADD_N": (
        _model("ADD_N", _x([2, 3]), {}, [([2, 3], f32)], order=["x", "x"]),
        [[[2, 3]], [[6]]],
    ),
    "DYNAMIC_UPDATE_SLICE": (
        _model(
            "DYNAMIC_UPDATE_SLICE",
            _x([4, 4]),
            {"u": np.ones((2, 2), f32), "at": np.array([1, 1], i32)},
            [([4, 4], f32)],
        ),
        [[[4, 4]], [[3, 6]]],
    ),
    "MATRIX_SET_DIAG": (
        _model("MATRIX_SET_DIAG", {"x": ([3, 3], f32), "d": ([3], f32)}, {}, [([3, 3], f32)]),
        [[[3, 3], [3]], [[2, 4, 4], [2, 4]]],
    ),
    "SPACE_TO_BATCH_ND": (
        _model(
            "SPACE_TO_BATCH_ND",
            _x([1, 4, 4, 1]),
            {"b": np.array([2, 2], i32), "p": np.array([[0, 2], [1, 1]], i32)},
            [([4, 3, 3, 1], f32)],
        ),
        [[[1, 4, 4, 1]], [[2, 6, 2, 3]], [[3, 0, 4, 2]]],
    ),
    "SPACE_TO_BATCH_ND 3-D": (
        _model(
            "SPACE_TO_BATCH_ND",
            _x([1, 4, 2]),
            {"b": np.array([2], i32), "p": np.array([[1, 1]], i32)},
            [([2, 3, 2], f32)],
        ),
        [[[1, 4, 2]], [[3, 6, 5]]],
    ),
    "BATCH_TO_SPACE_ND": (
        _model(
            "BATCH_TO_SPACE_ND",
            _x([4, 2, 2, 1]),
            {"b": np.array([2, 2], i32), "c": np.array([[0, 0], [0, 1]], i32)},
            [([1, 4, 3, 1], f32)],
        ),
        [[[4, 2, 2, 1]], [[8, 3, 1, 2]], [[4, 1, 5, 3]]],
    ),
    "BATCH_TO_SPACE_ND 3-D": (
        _model(
            "BATCH_TO_SPACE_ND",
            _x([2, 3, 2]),
            {"b": np.array([2], i32), "c": np.array([[1, 0]], i32)},
            [([1, 5, 2], f32)],
        ),
        [[[2, 3, 2]], [[6, 4, 1]]],
    ),
    "SELECT": (
        _model("SELECT", {"c": ([2], np.bool_), "x": ([2, 3], f32), "y": ([2, 3], f32)}, {}, [([2, 3], f32)]),
        # (One shape for all three after this 1-D condition only where rows of x hold one value: see
        # EVAL_CRASHERS.)
        [[[2], [2, 3], [2, 3]], [[4], [4, 1, 2], [4, 1, 2]], [[], [3, 5], [3, 5]], [[3, 1], [3, 1], [3, 1]]],
    ),
    "RANK": (
        _model("RANK", _x([2, 3]), {}, [([], i32)]),
        [[[2, 3]], [[4, 1, 5]], [[]]],
    ),
    "REVERSE_SEQUENCE": (
        _model(
            "REVERSE_SEQUENCE",
            _x([2, 3]),
            {"n": np.array([1, 2], i32)},
            [([2, 3], f32)],
            {"seq_dim": 1, "batch_dim": 0},
        ),
        [[[2, 3]], [[2, 5]], [[2, 4, 3]]],
    ),
    "EMBEDDING_LOOKUP": (
        _model("EMBEDDING_LOOKUP", {"i": ([3], i32)}, {"v": np.ones((5, 3), f32)}, [([3, 3], f32)]),
        [[[3]], [[7]], [[1]]],
    ),
    "EMBEDDING_LOOKUP table as input": (
        _model("EMBEDDING_LOOKUP", {"i": ([3], i32), "v": ([5, 3], f32)}, {}, [([3, 3], f32)]),
        [[[3], [5, 3]], [[2], [4, 2, 6]]],
    ),
    "SCATTER_ND": (
        _model(
            "SCATTER_ND",
            {"i": ([2, 1], i32), "u": ([2, 4], f32)},
            {"s": np.array([6, 4], i32)},
            [([6, 4], f32)],
        ),
        [[[2, 1], [2, 4]], [[5, 1], [5, 4]]],
    ),
    "SPARSE_TO_DENSE": (
        _model(
            "SPARSE_TO_DENSE",
            {"i": ([3], i32), "v": ([3], f32)},
            {"s": np.array([5], i32), "d": np.array(0.0, f32)},
            [([5], f32)],
            order=["i", "s", "v", "d"],
        ),
        [[[3], [3]], [[1], [1]]],
    ),
    "BROADCAST_ARGS": (
        _model("BROADCAST_ARGS", {"a": ([2], i32), "b": ([3], i32)}, {}, [([3], i32)]),
        [[[2], [3]], [[4], [1]], [[0], [2]]],
    ),
    "BROADCAST_ARGS int64": (
        _model("BROADCAST_ARGS", {"a": ([2], i64), "b": ([3], i64)}, {}, [([3], i64)]),
        [[[5], [3]]],
    ),
    "CONV_3D VALID": (
        _model(
            "CONV_3D",
            _x([1, 4, 4, 4, 2]),
            {"w": np.ones((2, 2, 2, 2, 3), f32)},
            [([1, 3, 3, 3, 3], f32)],
            {"padding": "VALID", "stride_d": 1, "stride_h": 1, "stride_w": 1},
        ),
        [[[1, 4, 4, 4, 2]], [[2, 5, 3, 6, 2]], [[1, 2, 2, 2, 2]]],
    ),
    "CONV_3D SAME strided dilated": (
        _model(
            "CONV_3D",
            _x([1, 5, 4, 3, 2]),
            {"w": np.ones((3, 2, 2, 2, 4), f32)},
            [([1, 3, 2, 2, 4], f32)],
            {"padding": "SAME", "stride_d": 2, "stride_h": 2, "stride_w": 1, "dilation_h_factor": 2},
        ),
        [[[1, 5, 4, 3, 2]], [[2, 7, 9, 4, 2]]],
    ),
    "CONV_3D VALID strided dilated": (
        _model(
            "CONV_3D",
            _x([1, 7, 6, 5, 1]),
            {"w": np.ones((2, 3, 2, 1, 2), f32)},
            [([1, 3, 2, 4, 2], f32)],
            {
                "padding": "VALID",
                "stride_d": 2,
                "stride_h": 1,
                "stride_w": 1,
                "dilation_d_factor": 3,
                "dilation_h_factor": 2,
            },
        ),
        [[[1, 7, 6, 5, 1]], [[3, 9, 5, 2, 1]]],
    ),
    "CONV_3D_TRANSPOSE": (
        _model(
            "CONV_3D_TRANSPOSE",
            _x([1, 3, 3, 3, 3]),
            {"s": np.array([1, 4, 4, 4, 2], i32), "w": np.ones((2, 2, 2, 2, 3), f32)},
            [([1, 4, 4, 4, 2], f32)],
            {"padding": "VALID", "stride_d": 1, "stride_h": 1, "stride_w": 1},
            order=["s", "w", "x"],
        ),
        [[[1, 3, 3, 3, 3]]],
    ),
    "RFFT2D": (
        _model("RFFT2D", _x([4, 4]), {"n": np.array([4, 8], i32)}, [([4, 5], np.complex64)]),
        [[[4, 4]], [[3, 4, 4]], [[2, 6]], [[2, 1, 8, 16]]],
    ),
    "UNSORTED_SEGMENT_SUM": (
        _model(
            "UNSORTED_SEGMENT_SUM",
            _x([4, 3]),
            {"ids": np.array([0, 1, 0, 2], i32), "n": np.array(3, i32)},
            [([3, 3], f32)],
        ),
        [[[4, 3]], [[4, 5]], [[4]], [[4, 2, 2]]],
    ),
    "UNSORTED_SEGMENT_PROD": (
        _model(
            "UNSORTED_SEGMENT_PROD",
            _x([4, 3]),
            {"ids": np.array([0, 1, 0, 2], i32), "n": np.array(3, i32)},
            [([3, 3], f32)],
        ),
        [[[4, 3]], [[4, 5]], [[4]], [[4, 2, 2]]],
    ),
    "UNSORTED_SEGMENT_MAX": (
        _model(
            "UNSORTED_SEGMENT_MAX",
            _x([4, 3]),
            {"ids": np.array([0, 1, 0, 2], i32), "n": np.array([4], i32)},
            [([4, 3], f32)],
        ),
        [[[4, 3]], [[4, 5]], [[4]], [[4, 2, 2]]],
    ),
    "UNSORTED_SEGMENT_MIN": (
        _model(
            "UNSORTED_SEGMENT_MIN",
            _x([4, 3]),
            {"ids": np.array([0, 1, 0, 2], i32), "n": np.array(3, i32)},
            [([3, 3], f32)],
        ),
        [[[4, 3]], [[4, 5]], [[4]], [[4, 2, 2]]],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_inferred_shapes_are_the_ones_ai_edge_litert_runs_with(case):
    data, shape_sets = CASES[case]
    dtypes = [d["dtype"] for d in litert.Interpreter(model_content=data).get_input_details()]
    for shapes in shape_sets:
        want = _litert(data, shapes, dtypes)
        assert _inferred(data, shapes) == want, (case, shapes)


# Shapes the reference kernels refuse in Prepare: (model, input shapes, message).
REFUSED = {
    "TILE multiples of another rank": (CASES["TILE"][0], [[1, 2, 3]], "has 2 multiples, but its input 0 has shape"),
    "BROADCAST_TO dimension neither 1 nor equal": (
        CASES["BROADCAST_TO"][0],
        [[2, 3]],
        "of shape [2, 3] does not broadcast to [2, 4, 3]",
    ),
    "BROADCAST_TO input of higher rank": (CASES["BROADCAST_TO"][0], [[1, 1, 4, 3]], "does not broadcast"),
    "FILL negative dims": (
        _model("FILL", {"v": ([], f32)}, {"d": np.array([3, -1], i32)}, [([3, 1], f32)], order=["d", "v"]),
        [[]],
        "dimensions [3, -1] from tensor 1 must all be >= 0",
    ),
    "ONE_HOT axis beyond the output's rank": (
        _model(
            "ONE_HOT",
            _x([2, 3], i32),
            {"depth": np.array(4, i32), "on": np.array(1.0, f32), "off": np.array(0.0, f32)},
            [([2, 3, 4], f32)],
            {"axis": 2},
        ),
        [[3]],
        "axis 2 is outside [-1, 1] for indices of shape [3]",
    ),
    "ONE_HOT negative depth": (
        _model(
            "ONE_HOT",
            _x([3], i32),
            {"depth": np.array(-2, i32), "on": np.array(1.0, f32), "off": np.array(0.0, f32)},
            [([3, 1], f32)],
            {"axis": -1},
        ),
        [[3]],
        "depth -2 from tensor 1 must be >= 0",
    ),
    "GATHER_ND index deeper than the params": (
        CASES["GATHER_ND"][0],
        [[4], [2, 2]],
        "indices of shape [2, 2] do not index params of shape [4]",
    ),
    "ARG_MAX axis outside the input": (CASES["ARG_MAX"][0], [[5]], "axis 1 is outside the input 0 of shape [5]"),
    "SPACE_TO_BATCH_ND padded size not a multiple of the block": (
        CASES["SPACE_TO_BATCH_ND"][0],
        [[1, 5, 4, 1]],
        "dimension 1 of its input 0 (shape [1, 5, 4, 1]) is 7 with its paddings, not a multiple of the block size 2",
    ),
    "SPACE_TO_BATCH_ND input of too low a rank": (
        CASES["SPACE_TO_BATCH_ND"][0],
        [[1, 4, 4]],
        "has 2 block sizes, so its input 0 needs rank 4",
    ),
    "BATCH_TO_SPACE_ND batch not a multiple of the blocks": (
        CASES["BATCH_TO_SPACE_ND"][0],
        [[6, 2, 2, 1]],
        "the batch of its input 0 (shape [6, 2, 2, 1]) is 6, not a multiple of the block sizes' product 4",
    ),
    "BATCH_TO_SPACE_ND input of too low a rank": (
        CASES["BATCH_TO_SPACE_ND 3-D"][0],
        [[4, 2]],
        "has 1 block sizes, so its input 0 needs rank 3",
    ),
    "SELECT condition that only broadcasts": (
        CASES["SELECT"][0],
        [[2, 1], [2, 3], [2, 3]],
        "condition [2, 1], x [2, 3] and y [2, 3] do not fit SELECT",
    ),
    "SELECT x and y of different shapes": (
        CASES["SELECT"][0],
        [[2], [2, 3], [2, 1]],
        "condition [2], x [2, 3] and y [2, 1] do not fit SELECT",
    ),
    "SELECT condition of another first dimension": (
        CASES["SELECT"][0],
        [[3], [2, 3], [2, 3]],
        "condition [3], x [2, 3] and y [2, 3] do not fit SELECT",
    ),
    "EMBEDDING_LOOKUP ids of rank 2": (
        CASES["EMBEDDING_LOOKUP table as input"][0],
        [[2, 2], [5, 3]],
        "ids 0 of shape [2, 2] and table 1 of shape [5, 3] do not fit",
    ),
    "EMBEDDING_LOOKUP table of rank 1": (
        CASES["EMBEDDING_LOOKUP table as input"][0],
        [[3], [5]],
        "ids 0 of shape [3] and table 1 of shape [5] do not fit",
    ),
    "UNSORTED_SEGMENT_SUM data rows other than the segment ids": (
        CASES["UNSORTED_SEGMENT_SUM"][0],
        [[5, 3]],
        "its 4 segment ids (tensor 1) need data with 4 rows, but the data 0 has shape [5, 3]",
    ),
    "BROADCAST_ARGS shape of rank 2": (
        CASES["BROADCAST_ARGS"][0],
        [[2, 1], [3]],
        "its inputs have shapes [2, 1] and [3], but BROADCAST_ARGS takes two 1-D shapes",
    ),
    "CONV_3D input channels other than the filter's": (
        CASES["CONV_3D VALID"][0],
        [[1, 4, 4, 4, 3]],
        "input 0 of shape [1, 4, 4, 4, 3] does not fit the filter of shape [2, 2, 2, 2, 3]",
    ),
    "CONV_3D input of rank 4": (
        CASES["CONV_3D VALID"][0],
        [[1, 4, 4, 2]],
        "input 0 of shape [1, 4, 4, 2] does not fit the filter",
    ),
    "RFFT2D input of rank 1": (
        CASES["RFFT2D"][0],
        [[8]],
        "its input 0 has shape [8], but RFFT2D needs rank 2 or more",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_shapes_the_reference_kernels_refuse_raise_shape_error(case):
    data, shapes, message = REFUSED[case]
    with pytest.raises(ShapeError, match=re.escape(message)):
        _inferred(data, shapes)
    # ai-edge-litert's Prepare refuses them too...
    it = litert.Interpreter(model_content=data)
    for d, s in zip(it.get_input_details(), shapes):
        it.resize_tensor_input(d["index"], s)
    with pytest.raises(RuntimeError):
        it.allocate_tensors()
    # ...and opaque_ops' interpreter says which shapes and why.
    ours = oo.Interpreter(model_content=data)
    for d, s in zip(ours.get_input_details(), shapes):
        ours.resize_tensor_input(d["index"], s)
    with pytest.raises(ShapeError, match=re.escape(message)):
        ours.allocate_tensors()


# Shapes (and constants) that Prepare accepts but that make Eval read or write
# outside the tensors, on 2.17.1, 2.23.0 and ai-edge-litert alike (SIGSEGV,
# or heap corruption that glibc aborts on): (model, input shapes, message).
# The shape rules refuse them like the shapes Prepare refuses.
EVAL_CRASHERS = {
    "REVERSE_V2 of an input empty after the axis": (
        CASES["REVERSE_V2"][0],
        [[2, 0]],
        "its input 0 of shape [2, 0] is empty after the reversed axis 0",
    ),
    "REVERSE_V2 of an input empty two dimensions after the axis": (
        CASES["REVERSE_V2"][0],
        [[5, 1, 0]],
        "its input 0 of shape [5, 1, 0] is empty after the reversed axis 0",
    ),
    "MATRIX_SET_DIAG diagonal of one matrix for two": (
        CASES["MATRIX_SET_DIAG"][0],
        [[2, 4, 4], [4]],
        "its diagonal 1 of shape [4] has 4 values, but its input 0 of shape [2, 4, 4] needs 8 (shape [2, 4]",
    ),
    "MATRIX_SET_DIAG empty diagonal": (
        CASES["MATRIX_SET_DIAG"][0],
        [[3, 3], [0]],
        "its diagonal 1 of shape [0] has 0 values, but its input 0 of shape [3, 3] needs 3 (shape [3]",
    ),
    "REVERSE_SEQUENCE second length past the sequence": (
        CASES["REVERSE_SEQUENCE"][0],
        [[2, 1]],
        "its sequence lengths [1, 2] (tensor 1) go past the sequence dimension 1 of its input 0 (shape [2, 1], "
        "1 steps); each length must be at most 1",
    ),
    "REVERSE_SEQUENCE empty batch, lengths fed": (
        _model(
            "REVERSE_SEQUENCE",
            {"x": ([2, 3], f32), "n": ([2], i32)},
            {},
            [([2, 3], f32)],
            {"seq_dim": 1, "batch_dim": 0},
        ),
        [[0, 3], [0]],
        "its input 0 of shape [0, 3] has an empty batch dimension 0, so its sequence lengths 1 are empty, and "
        "TFLite's REVERSE_SEQUENCE kernel reads a first length anyway",
    ),
    "SELECT condition resized to x's shape after a 1-D one": (
        CASES["SELECT"][0],
        [[2, 3], [2, 3], [2, 3]],
        "its condition, x and y would all have shape [2, 3], but the model gives the condition shape [2] for x of "
        "shape [2, 3], so TFLite's SELECT picks whole rows of x and y and keeps doing so after a resize",
    ),
    "SELECT 1-D condition and scalar x and y": (
        CASES["SELECT"][0],
        [[5], [], []],
        "its condition 0 of shape [5] is 1-D but x 1 is a scalar",
    ),
}


@pytest.mark.parametrize("case", list(EVAL_CRASHERS))
def test_shapes_whose_eval_crashes_every_runtime_raise_shape_error(case):
    """Never given to a runtime here (each can take this process down); measured in child processes:
    SIGSEGV for REVERSE_V2, MATRIX_SET_DIAG's empty diagonal, REVERSE_SEQUENCE's long lengths and
    SELECT's resized condition ([20, 30] and up; [2, 3] returns wrong values), out-of-bounds reads
    (garbage values) for a short diagonal, and for SELECT's scalar x whatever the heap holds past
    x's dims (Prepare refuses, or RankOneSelect writes past the output)."""
    data, shapes, message = EVAL_CRASHERS[case]
    with pytest.raises(ShapeError, match=re.escape(message)):
        _inferred(data, shapes)
    ours = oo.Interpreter(model_content=data)
    for d, s in zip(ours.get_input_details(), shapes):
        ours.resize_tensor_input(d["index"], s)
    with pytest.raises(ShapeError, match=re.escape(message)):
        ours.allocate_tensors()


@pytest.mark.parametrize(
    "data, message",
    [
        (
            _model(
                "REVERSE_SEQUENCE",
                _x([2, 3]),
                {"n": np.array([1, 100000000], i32)},
                [([2, 3], f32)],
                {"seq_dim": 1, "batch_dim": 0},
            ),
            "its sequence lengths [1, 100000000] (tensor 1) go past the sequence dimension 1",
        ),
        (
            _model("REVERSE_V2", _x([2, 0]), {"a": np.array([-2], i32)}, [([2, 0], f32)]),
            "its input 0 of shape [2, 0] is empty after the reversed axis 0",
        ),
        (
            _model(
                "REVERSE_SEQUENCE",
                _x([1, 0, 2]),
                {"n": np.zeros([0], i64)},
                [([1, 0, 2], f32)],
                {"seq_dim": 2, "batch_dim": 1},
            ),
            "its input 0 of shape [1, 0, 2] has an empty batch dimension 1, so its sequence lengths 1 are empty",
        ),
        (
            # (Beyond int32: the rule once left it to the runtime, which copies 10**8 steps.)
            _model(
                "REVERSE_SEQUENCE",
                _x([2, 3]),
                {"n": np.array([1, 2**33 + 10**8], i64)},
                [([2, 3], f32)],
                {"seq_dim": 1, "batch_dim": 0},
            ),
            "its sequence lengths [1, 8689934592] (tensor 1) go past the sequence dimension 1",
        ),
    ],
    ids=["REVERSE_SEQUENCE", "REVERSE_V2", "REVERSE_SEQUENCE empty batch", "REVERSE_SEQUENCE int64 length"],
)
def test_eval_crashers_in_the_models_own_shapes_are_refused_at_the_first_allocation(data, message):
    """The declared shapes go through the same rules (invoke() needs allocate_tensors() first)."""
    it = oo.Interpreter(model_content=data)
    with pytest.raises(ShapeError, match=re.escape(message)):
        it.allocate_tensors()


def _run(data, *arrays):
    it = oo.Interpreter(model_content=data)
    for d, a in zip(it.get_input_details(), arrays):
        it.resize_tensor_input(d["index"], list(a.shape))
    it.allocate_tensors()
    for d, a in zip(it.get_input_details(), arrays):
        it.set_tensor(d["index"], a)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


def test_the_eval_crashers_neighbours_run_and_give_numpys_values():
    """What those rules leave alone runs, with the values of the ops' definitions."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 3)).astype(f32)
    np.testing.assert_array_equal(_run(CASES["REVERSE_V2"][0], x), np.flip(x, 0))
    assert _run(CASES["REVERSE_V2"][0], np.zeros((0, 3), f32)).shape == (0, 3)
    assert _run(CASES["REVERSE_V2 last axis"][0], np.zeros((2, 0), f32)).shape == (2, 0)
    # MATRIX_SET_DIAG: a diagonal of batch * min(rows, columns) values, one row per matrix.
    m, d = rng.standard_normal((2, 3, 4)).astype(f32), rng.standard_normal((2, 3)).astype(f32)
    want = m.copy()
    for k in range(3):
        want[:, k, k] = d[:, k]
    np.testing.assert_array_equal(_run(CASES["MATRIX_SET_DIAG"][0], m, d), want)
    # REVERSE_SEQUENCE: lengths up to the whole sequence (1 and 3 of 3).
    rs = _model(
        "REVERSE_SEQUENCE", _x([2, 3]), {"n": np.array([1, 3], i32)}, [([2, 3], f32)], {"seq_dim": 1, "batch_dim": 0}
    )
    x = rng.standard_normal((2, 3)).astype(f32)
    np.testing.assert_array_equal(_run(rs, x), np.stack([x[0], x[1, ::-1]]))
    # SELECT: a scalar condition picks x or y whole; a 1-D one picks rows.
    sel = CASES["SELECT"][0]
    a, b = rng.standard_normal((3, 2)).astype(f32), rng.standard_normal((3, 2)).astype(f32)
    c = np.array([True, False, True])
    np.testing.assert_array_equal(_run(sel, c, a, b), np.where(c[:, None], a, b))
    np.testing.assert_array_equal(_run(sel, np.array(False), a, b), b)


@pytest.mark.parametrize(
    "x, seq_dim, batch_dim, lengths, fault",
    [
        ((2, 3), 1, 0, [1, 3], None),
        ((2, 3), 1, 0, [-5, 0], None),  # (nothing reversed, measured)
        ((2, 3), 1, 0, [1, 4], SequenceFault(False, 1)),
        ((2, 3), 1, 0, [4, 1], SequenceFault(False, 0)),  # (Eval refuses the first itself; ours says more)
        ((4, 2, 3), 0, 2, [4, 5, 1], SequenceFault(False, 1)),
        # An empty batch: the kernel reads a first length out of the empty lengths, whatever else is empty.
        ((0, 3), 1, 0, [], SequenceFault(True, None)),
        ((0, 0), 1, 0, [], SequenceFault(True, None)),
        ((3, 0), 0, 1, [], SequenceFault(True, None)),
        ((1, 0, 2), 2, 1, [], SequenceFault(True, None)),
        # An empty input with a batch: nothing is copied, so lengths past the sequence do no harm.
        ((2, 0), 1, 0, [0, 10**8], None),
        ((2, 3, 0), 1, 0, [1, 10**8], None),
        ((0, 2, 3), 2, 1, [1, 10**8], None),
        ((2, 0, 3), 2, 0, [1, 10**8], None),
        ((3, 2, 0), 0, 1, [1, 10**8], None),
        # What Eval refuses before it reads a length: a count other than the batch's, bad options.
        ((0, 3), 1, 0, [1], None),
        ((2, 3), 1, 0, [1, 2, 10**8], None),
        ((2, 3), 1, 1, [1, 10**8], None),
        ((2, 3), 2, 0, [1, 10**8], None),
        ((2, 3), 1, -1, [1, 10**8], None),
        # Unknown.
        ((2, 3), 1, 0, None, None),
        (None, 1, 0, [1, 10**8], None),
    ],
)
def test_reverse_sequence_fault_names_what_crashes_the_kernel_and_only_that(x, seq_dim, batch_dim, lengths, fault):
    assert reverse_sequence_fault(x, seq_dim, batch_dim, lengths) == fault


# REVERSE_SEQUENCE of an input empty in a dimension other than its batch:
# each copy moves nothing (or none is made), so lengths past the sequence do
# no harm and 2.17.1, 2.23.0 and ai-edge-litert all return the empty output
# (test_the_reverse_sequence_rule_refuses_what_the_bare_runtimes_crash_on).
# (shape, seq_dim, batch_dim, lengths)
EMPTY_REVERSE_SEQUENCES = {
    "empty sequence": ((2, 0), 1, 0, [0, 10**8]),
    "empty inner dimension": ((2, 3, 0), 1, 0, [1, 10**8]),
    "empty outer dimension": ((0, 2, 3), 2, 1, [1, 10**8]),
    "empty middle dimension": ((2, 0, 3), 2, 0, [1, 10**8]),
    "empty inner dimension, batch after the sequence": ((3, 2, 0), 0, 1, [1, 10**8]),
}


def _reverse_sequence(shape, seq_dim, batch_dim, lengths):
    n = np.array(lengths, i32)
    return _model(
        "REVERSE_SEQUENCE", _x(list(shape)), {"n": n}, [(shape, f32)], {"seq_dim": seq_dim, "batch_dim": batch_dim}
    )


def _litert_run(data, x):
    it = litert.Interpreter(model_content=data)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


@pytest.mark.parametrize("case", list(EMPTY_REVERSE_SEQUENCES))
def test_lengths_past_the_sequence_of_an_empty_input_are_not_refused(case):
    """The rule used to refuse these constant lengths (max above the sequence) although nothing is copied."""
    shape, s, b, lengths = EMPTY_REVERSE_SEQUENCES[case]
    data = _reverse_sequence(shape, s, b, lengths)
    assert _inferred(data, [shape]) == [shape]
    x = np.zeros(shape, f32)
    out = _run(data, x)
    want = reverse_sequence_reference(x, lengths, s, b)
    assert out.shape == want.shape == shape
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(_litert_run(data, x), want)


@pytest.mark.parametrize(
    "shape, seq_dim, batch_dim, lengths",
    [
        ((2, 3), 1, 0, [1, 3]),
        ((4, 2, 3), 0, 2, [4, 0, 2]),
        ((3, 4, 2, 5), 2, 1, [2, 1, -1, 0]),
        ((2, 3), 0, 1, [2, 1, 2]),
    ],
)
def test_reverse_sequence_within_its_sequences_gives_the_definitions_values(shape, seq_dim, batch_dim, lengths):
    """The neighbours of the refused lengths, on inputs with values: ours, ai-edge-litert and the reference agree."""
    data = _reverse_sequence(shape, seq_dim, batch_dim, lengths)
    x = np.random.default_rng(3).standard_normal(shape).astype(f32)
    want = reverse_sequence_reference(x, lengths, seq_dim, batch_dim)
    np.testing.assert_array_equal(_run(data, x), want)
    np.testing.assert_array_equal(_litert_run(data, x), want)


# The bare runtime (no opaque_ops checks: _native's interpreter) or ai-edge-litert on one
# REVERSE_SEQUENCE: argv engine, shape, seq_dim, batch_dim, lengths (JSON), "fed" or "const".
BARE = """
import json, sys
import numpy as np
from tests.helpers.single_op import single_op_model
engine, shape, s, b, lengths, how = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5]), sys.argv[6]
f32, n = np.float32, np.array(lengths, np.int64 if how == "const64" else np.int32)
options = {"seq_dim": s, "batch_dim": b}
if how == "fed":  # declared without empty dimensions, resized to them
    full = [max(d, 1) for d in shape]
    data = single_op_model("REVERSE_SEQUENCE", {"x": (full, f32), "n": ([max(len(n), 1)], np.int32)}, {}, [(full, f32)], options)
else:
    data = single_op_model("REVERSE_SEQUENCE", {"x": (shape, f32)}, {"n": n}, [(shape, f32)], options)
x = np.zeros(shape, f32)
if engine == "litert":
    from ai_edge_litert.interpreter import Interpreter
    it = Interpreter(model_content=data)
    ids = [d["index"] for d in it.get_input_details()]
    if how == "fed":
        it.resize_tensor_input(ids[0], shape)
        it.resize_tensor_input(ids[1], [len(n)])
    it.allocate_tensors()
    it.set_tensor(ids[0], x)
    if how == "fed":
        it.set_tensor(ids[1], n)
    it.invoke()
    out = it.get_tensor(it.get_output_details()[0]["index"])
else:
    from opaque_ops import _native
    it = _native.NativeInterpreter(_native.NativeModel(data), [])
    if how == "fed":
        assert it.resize_input(0, shape) == 0 and it.resize_input(1, [len(n)]) == 0
    assert it.allocate() == 0, it.sink.take()
    it.input_tensor(0).write(x)
    if how == "fed":
        it.input_tensor(1).write(n)
    assert it.invoke() == 0, it.sink.take()
    out = it.output_tensor(0).read()
print(json.dumps(list(out.shape)))
"""


@pytest.mark.parametrize("engine", ["bare", "litert"])
@pytest.mark.parametrize(
    "shape, seq_dim, batch_dim, lengths, how",
    [
        ((0, 3), 1, 0, [], "fed"),
        ((0, 0), 1, 0, [], "const"),
        ((1, 0, 2), 2, 1, [], "fed"),
        ((2, 3), 1, 0, [1, 10**8], "fed"),
        *((*case, "fed") for case in EMPTY_REVERSE_SEQUENCES.values()),
        ((2, 3, 0), 1, 0, [1, 10**8], "const"),
        # int64 lengths: the kernel keeps the low 32 bits (10**8 here).
        ((2, 3), 1, 0, [1, 2**33 + 10**8], "const64"),
    ],
)
def test_the_reverse_sequence_rule_refuses_what_the_bare_runtimes_crash_on(
    engine, shape, seq_dim, batch_dim, lengths, how
):
    """In a child: the runtime this suite runs on (or ai-edge-litert) without opaque_ops' checks crashes
    (SIGSEGV) exactly where reverse_sequence_fault finds a fault, and returns the input's shape elsewhere."""
    p = run_child(BARE, engine, list(shape), seq_dim, batch_dim, lengths, how)
    if reverse_sequence_fault(shape, seq_dim, batch_dim, lengths) is not None:
        assert p.returncode == -11, crashed(p)
    else:
        assert p.returncode == 0 and json.loads(p.stdout) == list(shape), crashed(p)


def test_shape_gives_one_value_per_input_dimension():
    """SHAPE's kernel refuses to run without its out_type (ShapeOptions, field 0, schema.fbs)."""
    data = _model("SHAPE", _x([2, 3]), {}, [([2], i32)], {"out_type": "INT32"})
    for shapes in ([[2, 3]], [[4, 1, 5]], [[7]]):
        assert _inferred(data, shapes) == _litert(data, shapes, [f32]) == [(len(shapes[0]),)], shapes
        it = oo.Interpreter(model_content=data)
        it.resize_tensor_input(0, shapes[0])
        it.allocate_tensors()
        it.set_tensor(0, np.zeros(shapes[0], f32))
        it.invoke()
        np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), np.array(shapes[0], i32))


def test_the_rules_need_constants_and_leave_run_time_values_unknown():
    """Multiples, dims or an axis given at run time: the runtime marks the output dynamic, and the
    rule gives no shape; the same operators with those inputs constant get theirs."""
    tile = _model("TILE", {"x": ([2, 3], f32), "m": ([2], i32)}, {}, [([4, 3], f32)])
    fill = _model("FILL", {"d": ([2], i32), "v": ([], f32)}, {}, [([3, 5], f32)])
    arg = _model("ARG_MAX", {"x": ([2, 5], f32), "a": ([1], i32)}, {}, [([2], i32)], {"output_type": "INT32"})
    for data, shapes in ((tile, [[2, 3], [2]]), (fill, [[2], []]), (arg, [[2, 5], [1]])):
        assert _inferred(data, shapes) == [None]
    for case in ("TILE", "FILL", "ARG_MAX"):
        data, (shapes, *_) = CASES[case]
        assert None not in _inferred(data, shapes), case


def test_values_given_for_fed_inputs_are_read_as_constants_up_to_until():
    """infer_shapes(values=...): the values fed_shape_inputs names (TILE's fed multiples, FILL's fed
    dims; not float data, not lengths no shape rule reads) give the shapes ai-edge-litert's invoke
    makes from them; ``until`` stops before an operator, so its rule, which refuses the empty batch of
    multiples [0, 1] with empty lengths, does not hide the shape its data gets."""
    tile = _model("TILE", {"x": ([2, 3], f32), "m": ([2], i32)}, {}, [([4, 3], f32)])
    fill = _model("FILL", {"d": ([2], i32), "v": ([], f32)}, {}, [([3, 5], f32)])
    for data, shapes, values in ((tile, [[2, 3], [2]], [2, 2]), (fill, [[2], []], [4, 2])):
        info = read_model(data)
        sg = info.subgraphs[0]
        fed = fed_shape_inputs(sg)
        assert fed == (sg.inputs[0 if data is fill else 1],)
        given = dict(zip(sg.inputs, map(tuple, shapes)))
        want = tuple(np.multiply([2, 3], values)) if data is tile else tuple(values)
        assert infer_shapes(info, given.get, values={fed[0]: values})[sg.outputs[0]] == want
        it = litert.Interpreter(model_content=data)
        it.allocate_tensors()
        feed = (
            [np.zeros([2, 3], f32), np.array(values, i32)]
            if data is tile
            else [np.array(values, i32), np.ones((), f32)]
        )
        for d, v in zip(it.get_input_details(), feed):
            it.set_tensor(d["index"], v)
        it.invoke()
        assert tuple(it.get_tensor(it.get_output_details()[0]["index"]).shape) == want
    b = ModelBuilder()
    x, m = b.add_tensor("x", [2, 3], f32), b.add_tensor("m", [2], i32)
    n = b.add_tensor("n", [0], i32)
    tiled = b.add_tensor("tiled", [2, 3], f32)
    b.add_op("TILE", [x, m], [tiled])
    out = b.add_tensor("out", [2, 3], f32)
    b.add_op("REVERSE_SEQUENCE", [tiled, n], [out], {"seq_dim": 1, "batch_dim": 0})
    b.set_inputs([x, m, n])
    b.set_outputs([out])
    info = read_model(b.build())
    assert fed_shape_inputs(info.subgraphs[0]) == (m,)
    given = {x: (2, 3), m: (2,), n: (0,)}.get
    with pytest.raises(ShapeError, match="has an empty batch dimension 0"):
        infer_shapes(info, given, values={m: [0, 1]})
    assert infer_shapes(info, given, values={m: [0, 1]}, until=1)[tiled] == (0, 3)
    assert infer_shapes(info, given, until=1)[tiled] is None


def _fed_by_shape(op, out_dtype, extra, order, version=1):
    """x -> SHAPE -> ``op``: ``extra`` {name: (shape, dtype) input or array constant}, ``order`` names op's inputs
    ("s" is SHAPE's output); the op's output is the graph's output."""
    b = ModelBuilder()
    ids = {"x": b.add_tensor("x", [2, 3], f32)}
    for n, v in extra.items():
        ids[n] = b.add_tensor(n, list(v[0]), v[1]) if isinstance(v, tuple) else b.add_constant(n, np.asarray(v))
    ids["s"] = b.add_tensor("s", [2], i32)
    b.add_op("SHAPE", [ids["x"]], [ids["s"]], {"out_type": "INT32"})
    out = b.add_tensor("out", [2, 3], out_dtype)
    b.add_op(op, [ids[n] for n in order], [out], version=version)
    b.set_inputs([ids["x"], *(ids[n] for n, v in extra.items() if isinstance(v, tuple))])
    b.set_outputs([out])
    return b.build()


@pytest.mark.parametrize(
    "data, shape_sets",
    [
        # tf.fill(tf.shape(x), 1.5), as tf.ones_like converts to.
        (_fed_by_shape("FILL", f32, {"v": np.array(1.5, f32)}, ["s", "v"]), [[[2, 3]], [[4, 1, 5]], [[7]]]),
        # tf.reshape(y, tf.shape(x)).
        (
            _fed_by_shape("RESHAPE", f32, {"y": ([6], f32)}, ["y", "s"]),
            [[[2, 3], [6]], [[6], [6]], [[1, 2, 2], [4]]],
        ),
        # tf.broadcast_to(y, tf.shape(x)).
        (
            _fed_by_shape("BROADCAST_TO", f32, {"y": ([3], f32)}, ["y", "s"], version=2),
            [[[2, 3], [3]], [[4, 1, 3], [1]]],
        ),
    ],
    ids=["FILL", "RESHAPE", "BROADCAST_TO"],
)
def test_shapes_computed_by_shape_feed_the_next_rule_as_a_constant_would(data, shape_sets):
    """SHAPE's values are its input's dimensions, known before invoke: the rules that need a constant
    shape take them, and give what ai-edge-litert runs with."""
    dtypes = [d["dtype"] for d in litert.Interpreter(model_content=data).get_input_details()]
    for shapes in shape_sets:
        assert _inferred(data, shapes) == _litert(data, shapes, dtypes), shapes


@pytest.mark.parametrize(
    "data, shapes",
    [
        # Three one-element inputs of different shapes: SELECT_V2's broadcast gives [1, 1], but the
        # kernel keeps the output's own one-element shape, [1].
        (
            _model("SELECT_V2", {"c": ([1, 1], np.bool_), "x": ([1], f32), "y": ([1], f32)}, {}, [([1], f32)]),
            [[1, 1], [1], [1]],
        ),
        # Three scalars: SELECT's output is x's shape, [], but the kernel keeps the declared [1].
        (
            _model("SELECT", {"c": ([], np.bool_), "x": ([], f32), "y": ([], f32)}, {}, [([1], f32)]),
            [[], [], []],
        ),
    ],
    ids=["SELECT_V2", "SELECT"],
)
def test_select_of_one_element_inputs_keeps_the_outputs_own_shape(data, shapes):
    """Every runtime (2.17.1, 2.23.0, ai-edge-litert) keeps a one-element output's shape when the
    three inputs have one element each, whatever their shapes: the shape rule gives none then, and
    the interpreter runs the model as ai-edge-litert does instead of refusing it."""
    assert _inferred(data, shapes) == [None]
    want = _litert(data, shapes, [np.bool_, f32, f32])
    assert want == [(1,)]
    it = oo.Interpreter(model_content=data)
    for d, s in zip(it.get_input_details(), shapes):
        it.resize_tensor_input(d["index"], s)
    it.allocate_tensors()
    c, x, y = np.ones(shapes[0], np.bool_), np.full(shapes[1], 2.5, f32), np.full(shapes[2], -1.0, f32)
    for d, v in zip(it.get_input_details(), (c, x, y)):
        it.set_tensor(d["index"], v)
    it.invoke()
    got = it.get_tensor(it.get_output_details()[0]["index"])
    # The one element, chosen as np.where chooses it.
    np.testing.assert_array_equal(got, np.where(c, x, y).reshape(want[0]))


def _reshape_by_int64(shape_from_shape_op):
    """RESHAPE of y ([1]) by an INT64 shape: SHAPE(x, out_type=INT64)'s output, or a constant [1, 1]."""
    b = ModelBuilder()
    y = b.add_tensor("y", [1], f32)
    inputs = [y]
    if shape_from_shape_op:
        x = b.add_tensor("x", [2, 3], f32)
        s = b.add_tensor("s", [2], i64)
        b.add_op("SHAPE", [x], [s], {"out_type": "INT64"})
        inputs.append(x)
    else:
        s = b.add_constant("s", np.array([1, 1], i64))
    out = b.add_tensor("out", [], f32)
    b.add_op("RESHAPE", [y, s], [out])
    b.set_inputs(inputs)
    b.set_outputs([out])
    return b.build()


@pytest.mark.parametrize("shape_from_shape_op", [True, False], ids=["SHAPE out_type INT64", "constant INT64"])
def test_reshape_ignores_a_shape_tensor_that_is_not_int32(shape_from_shape_op):
    """reshape.cc takes its shape tensor only when it is a 1-D INT32 tensor; any other falls back to
    the options' new_shape, and without options to a scalar.  The rule must not read the INT64
    values (it refused [1] -> [2, 3] as a reshape that changes the element count)."""
    data = _reshape_by_int64(shape_from_shape_op)
    shapes = [[1], [2, 3]] if shape_from_shape_op else [[1]]
    assert _inferred(data, shapes) == [None]
    dtypes = [f32] * len(shapes)
    assert _litert(data, shapes, dtypes) == [()]
    it = oo.Interpreter(model_content=data)
    for d, s in zip(it.get_input_details(), shapes):
        it.resize_tensor_input(d["index"], s)
    it.allocate_tensors()
    for d, s in zip(it.get_input_details(), shapes):
        it.set_tensor(d["index"], np.full(s, 4.25, f32))
    it.invoke()
    got = it.get_tensor(it.get_output_details()[0]["index"])
    assert got.shape == () and got == np.float32(4.25)
