"""A signature runner given an array its input cannot take: a clear ``ResizeError``, and nothing changed.

TFLite's signature runner resizes strictly (``ResizeInputTensorStrict`` in
``tensorflow/lite/core/subgraph.cc``: the rank must match, and only the
dimensions that are -1 in the tensor's ``shape_signature`` may change).
A review's attack found that such a call raised ``KernelError`` with
TFLite's internal text ("tensor->dims->size != dims.size() (2 != 1)") and
left the interpreter unallocated, so that the next plain ``invoke()``
raised ``NotAllocatedError``.  Now the shape is refused before anything
changes, with a ``ResizeError`` (a ``ValueError``, like ``set_tensor``'s
for the same array) naming the input and the shape it takes.
"""

from __future__ import annotations

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.model import ModelBuilder


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
def test_a_shape_the_runner_cannot_take_is_refused_before_anything_changes(isolate, signature_shape, bad, takes):
    with oo.Interpreter(model_content=_model(signature_shape), isolate=isolate) as it:
        it.allocate_tensors()
        run = it.get_signature_runner("s")
        with pytest.raises(oo.ResizeError) as info:
            run(x=np.zeros(bad, np.float32))
        assert isinstance(info.value, ValueError)
        msg = str(info.value)
        assert "'x'" in msg and f"shape {list(bad)}" in msg and f"takes shape {takes}" in msg, msg
        # Still allocated, at the old shape: a plain invoke runs.
        assert it.get_input_details()[0]["shape"].tolist() == [2, 3]
        it.set_tensor(0, np.full((2, 3), 2.0, np.float32))
        it.invoke()
        np.testing.assert_array_equal(it.get_tensor(1), np.full((2, 3), 3.0, np.float32))
        # And the runner itself, at a shape it takes.
        np.testing.assert_array_equal(run(x=np.zeros((2, 3), np.float32))["y"], np.ones((2, 3), np.float32))


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "isolated"])
def test_the_runners_resize_tensor_input_is_held_to_the_same_rule(isolate):
    with oo.Interpreter(model_content=_model([-1, 3]), isolate=isolate) as it:
        it.allocate_tensors()
        run = it.get_signature_runner("s")
        with pytest.raises(oo.ResizeError, match=r"takes shape \[any, 3\]"):
            run.resize_tensor_input("x", [2, 4])
        run.resize_tensor_input("x", [5, 3])
        run.allocate_tensors()
        assert run(x=np.zeros((5, 3), np.float32))["y"].shape == (5, 3)
