"""A signature runner given an array of another shape: resized as ai-edge-litert's runner does, or a clear refusal.

ai-edge-litert's runner resizes an input to any shape (``ResizeInputTensor``
with strict=False), as the interpreter's ``resize_tensor_input`` does.
TFLite's C API runner resizes strictly (``TfLiteSignatureRunnerResizeInputTensor``
calls ``ResizeInputTensorStrict``: the rank must match, and only the
dimensions that are -1 in the tensor's ``shape_signature`` may change).  So
an input of subgraph 0 that is one of the interpreter's inputs is resized
through the interpreter (not strict), and a call with a batch of 3 on a
batch-1 model runs as in the reference; the model checks still run, and a
shape they refuse raises their error.  An input of another subgraph has no
such door: a shape the strict resize would refuse is refused before
anything changes (a review's attack found TFLite's own refusal, a
``KernelError`` with its internal text, left the interpreter unallocated),
with a ``ResizeError`` (a ``ValueError``) naming the input and the shape it
takes.
"""

from __future__ import annotations

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.errors import ShapeError
from opaque_ops.model import ModelBuilder
from tests.helpers.interpreter_models import join_with_signature


def _model(signature_shape) -> bytes:
    """y = x + 1, x of shape [2, 3] (its shape signature ``signature_shape``), one signature "s"."""
    b = ModelBuilder()
    x = b.add_tensor("x", [2, 3], np.float32, shape_signature=signature_shape)
    y = b.add_tensor("y", [2, 3], np.float32, shape_signature=signature_shape)
    one = b.add_constant("one", np.ones((1, 3), np.float32))
    b.add_op("ADD", [x, one], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    b.add_signature("s", {"x": x}, {"y": y})
    return b.build()


def _in_subgraph_1(signature_shape) -> bytes:
    """``_model`` twice: subgraph 0 with signature "s", subgraph 1 with signature "other" (same tensors)."""
    return join_with_signature(_model(signature_shape), _model(signature_shape), "other", {"x": 0}, {"y": 1})


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "isolated"])
@pytest.mark.parametrize(
    "signature_shape, shape",
    [
        (None, (3,)),  # rank 1 (broadcast against [1, 3])
        (None, (1, 2, 3)),  # rank 3
        (None, (4, 3)),  # a fixed dimension changed
        ([-1, 3], (5, 3)),  # a -1 dimension changed
    ],
)
def test_a_main_subgraph_runner_resizes_any_shape_as_the_reference(isolate, signature_shape, shape):
    # They were refused with ResizeError: the C API runner's strict rule was
    # applied to subgraph 0, whose inputs the interpreter resizes freely.
    from ai_edge_litert.interpreter import Interpreter as Ref

    data = _model(signature_shape)
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    ref = Ref(model_content=data).get_signature_runner("s")(x=x)["y"]
    with oo.Interpreter(model_content=data, isolate=isolate) as it:
        it.allocate_tensors()
        run = it.get_signature_runner("s")
        got = run(x=x)["y"]
        assert got.shape == ref.shape and got.dtype == ref.dtype
        np.testing.assert_array_equal(got, ref)
        np.testing.assert_array_equal(got, x + np.ones((1, 3), np.float32))  # the op's definition
        assert run.get_input_details()["x"]["shape"].tolist() == list(shape)
        # The interpreter sees the same tensor at its new shape.
        assert it.get_input_details()[0]["shape"].tolist() == list(shape)
        # And back to the recorded shape, through the runner's resize_tensor_input.
        run.resize_tensor_input("x", [2, 3])
        run.allocate_tensors()
        np.testing.assert_array_equal(run(x=np.zeros((2, 3), np.float32))["y"], np.ones((2, 3), np.float32))


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "isolated"])
def test_a_shape_the_model_checks_refuse_is_still_refused_with_their_message(isolate):
    # [4, 4] + [1, 3] does not broadcast: the model checks say so, as for the
    # interpreter's resize_tensor_input (the reference fails in TFLite's Prepare).
    with oo.Interpreter(model_content=_model([-1, 3]), isolate=isolate) as it:
        it.allocate_tensors()
        run = it.get_signature_runner("s")
        with pytest.raises(ShapeError, match=r"ADD.*\[4, 4\] and \[1, 3\] do not broadcast"):
            run(x=np.zeros((4, 4), np.float32))
        with pytest.raises(oo.ResizeError, match="at most 6 dimensions"):
            run(x=np.zeros((1,) * 7, np.float32))
        # The runner then runs at a shape the model takes.
        np.testing.assert_array_equal(run(x=np.zeros((2, 3), np.float32))["y"], np.ones((2, 3), np.float32))


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "isolated"])
@pytest.mark.parametrize(
    "signature_shape, bad, takes",
    [
        (None, (3,), "[2, 3]"),
        (None, (1, 2, 3), "[2, 3]"),
        (None, (4, 3), "[2, 3]"),
        ([-1, 3], (4, 4), "[any, 3]"),
        ([-1, 3], (4,), "[any, 3]"),
    ],
)
def test_a_shape_another_subgraphs_runner_cannot_take_is_refused_before_anything_changes(
    isolate, signature_shape, bad, takes
):
    with oo.Interpreter(model_content=_in_subgraph_1(signature_shape), isolate=isolate) as it:
        it.allocate_tensors()
        run = it.get_signature_runner("other")
        np.testing.assert_array_equal(run(x=np.zeros((2, 3), np.float32))["y"], np.ones((2, 3), np.float32))
        with pytest.raises(oo.ResizeError) as info:
            run(x=np.zeros(bad, np.float32))
        assert isinstance(info.value, ValueError)
        msg = str(info.value)
        assert "'x'" in msg and f"shape {list(bad)}" in msg and f"takes shape {takes}" in msg, msg
        assert "subgraph 1 strictly" in msg, msg
        # Still allocated, at the old shape: the runner and a plain invoke run.
        np.testing.assert_array_equal(run(x=np.full((2, 3), 2.0, np.float32))["y"], np.full((2, 3), 3.0, np.float32))
        it.set_tensor(0, np.full((2, 3), 2.0, np.float32))
        it.invoke()
        np.testing.assert_array_equal(it.get_tensor(1), np.full((2, 3), 3.0, np.float32))


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "isolated"])
def test_another_subgraphs_resize_tensor_input_is_held_to_the_same_rule(isolate):
    with oo.Interpreter(model_content=_in_subgraph_1([-1, 3]), isolate=isolate) as it:
        run = it.get_signature_runner("other")
        with pytest.raises(oo.ResizeError, match=r"takes shape \[any, 3\]"):
            run.resize_tensor_input("x", [2, 4])
        run.resize_tensor_input("x", [5, 3])
        run.allocate_tensors()
        assert run(x=np.zeros((5, 3), np.float32))["y"].shape == (5, 3)


def _fixed_rows_model() -> bytes:
    """y = x + c: x [2, 3] (shape signature [-1, 3]) and a constant c of shape [2, 3], signature "s".

    Any other row count than 2 (or 1) does not broadcast against c.
    """
    b = ModelBuilder()
    x = b.add_tensor("x", [2, 3], np.float32, shape_signature=[-1, 3])
    y = b.add_tensor("y", [2, 3], np.float32, shape_signature=[-1, 3])
    c = b.add_constant("c", np.ones((2, 3), np.float32))
    b.add_op("ADD", [x, c], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    b.add_signature("s", {"x": x}, {"y": y})
    return b.build()


def _tile_model() -> bytes:
    """y = tile(x, [2**20, 1]): x [2, 3] (shape signature [-1, 3]), signature "s".

    From 2**11 rows of x on, y has more elements than TFLite's kernels count.
    """
    b = ModelBuilder()
    x = b.add_tensor("x", [2, 3], np.float32, shape_signature=[-1, 3])
    m = b.add_constant("m", np.array([2**20, 1], np.int32))
    y = b.add_tensor("y", [2**21, 3], np.float32, shape_signature=[-1, 3])
    b.add_op("TILE", [x, m], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    b.add_signature("s", {"x": x}, {"y": y})
    return b.build()


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "isolated"])
def test_a_refusal_in_another_subgraph_names_that_subgraph(isolate):
    # The rules on planned shapes said "operator 0 (ADD)" for either
    # subgraph's operator 0; a signature runner of subgraph 1 is planned as
    # if it were subgraph 0, so its messages now say "subgraph 1, ".
    # Subgraph 0's keep their text.
    data = join_with_signature(_fixed_rows_model(), _fixed_rows_model(), "other", {"x": 0}, {"y": 1})
    with oo.Interpreter(model_content=data, isolate=isolate) as it:
        for key, prefix in (("s", ""), ("other", "subgraph 1, ")):
            with pytest.raises(ShapeError) as info:
                it.get_signature_runner(key)(x=np.zeros((4, 3), np.float32))
            assert str(info.value).startswith(f"{prefix}operator 0 (ADD): input shapes [4, 3] and [2, 3]"), info.value
    # The rules on the planned sizes and on a requested resize, likewise.
    data = join_with_signature(_tile_model(), _tile_model(), "other", {"x": 0}, {"y": 2})
    with oo.Interpreter(model_content=data, isolate=isolate) as it:
        for key, prefix in (("s", ""), ("other", "subgraph 1, ")):
            run = it.get_signature_runner(key)
            run.resize_tensor_input("x", [2**11, 3])
            with pytest.raises(oo.ModelError) as info:
                run.allocate_tensors()
            assert str(info.value).startswith(f"{prefix}tensor 2 ('y') would have shape [2147483648, 3]"), info.value
            with pytest.raises(oo.ResizeError) as info:
                run.resize_tensor_input("x", [2**30, 3])
            assert str(info.value).startswith(f"cannot resize {prefix}input 0 to [1073741824, 3]"), info.value
