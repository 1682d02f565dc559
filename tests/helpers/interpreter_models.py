"""Small models the interpreter's tests share (built with ModelBuilder, no TensorFlow)."""

from __future__ import annotations

import numpy as np

from opaque_ops.model import ModelBuilder


def add_model() -> bytes:
    """y = x + c: x (index 0) a [2, 3] float32 input, c (1) a constant, y (2) the output."""
    b = ModelBuilder()
    x = b.add_tensor("x", [2, 3], np.float32)
    c = b.add_constant("c", np.arange(6, dtype=np.float32).reshape(2, 3))
    y = b.add_tensor("y", [2, 3], np.float32)
    b.add_op("ADD", [x, c], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


def doubling_model(shape, shape_signature=None, signature: str | None = "s") -> bytes:
    """y = x + x: x (index 0) the float32 input of ``shape`` (and ``shape_signature``), y (1) the output;
    one signature ``signature`` (x -> y) unless None."""
    b = ModelBuilder()
    x = b.add_tensor("x", list(shape), np.float32, shape_signature=shape_signature)
    y = b.add_tensor("y", list(shape), np.float32, shape_signature=shape_signature)
    b.add_op("ADD", [x, x], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    if signature is not None:
        b.add_signature(signature, {"x": x}, {"y": y})
    return b.build()


def valid_conv_model() -> bytes:
    """A VALID 1x8 CONV_2D of x (index 0, [1, 1, 16, 1], width resizable): y (3) is [1, 1, 9, 1].

    An input narrower than 8 gives the window no place: the allocated-shape
    checks refuse it (XNNPACK would read outside the input).
    """
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 1, 16, 1], np.float32, shape_signature=[1, 1, -1, 1])
    w = b.add_constant("w", np.arange(1, 9, dtype=np.float32).reshape(1, 1, 8, 1))
    bias = b.add_constant("b", np.full(1, 0.5, np.float32))
    y = b.add_tensor("y", [1, 1, 9, 1], np.float32)
    b.add_op("CONV_2D", [x, w, bias], [y], options={"padding": "VALID", "stride_w": 1, "stride_h": 1})
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


def tile_model() -> bytes:
    """y = 2 * tile(x, multiples): ``tiled`` is dynamic, ``y`` is resized while the model runs.

    x (index 0) [4] float32, multiples (1) [1] int32, y (3); signature "run".
    """
    b = ModelBuilder()
    x = b.add_tensor("x", [4], np.float32)
    m = b.add_tensor("multiples", [1], np.int32)
    t = b.add_tensor("tiled", [4], np.float32, shape_signature=[-1])
    y = b.add_tensor("y", [4], np.float32, shape_signature=[-1])
    b.add_op("TILE", [x, m], [t])
    b.add_op("ADD", [t, t], [y])
    b.set_inputs([x, m])
    b.set_outputs([y])
    b.add_signature("run", {"x": x, "multiples": m}, {"y": y})
    return b.build()


def pyop_model(signature: str | None = None, op: str = "Twice") -> bytes:
    """y = op(x) for a Python op: x (0) and y (1), [4] float32; with ``signature``, a SignatureDef of that key."""
    b = ModelBuilder()
    x = b.add_tensor("x", [4], np.float32)
    y = b.add_tensor("y", [4], np.float32)
    b.add_custom_op(op, [x], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    if signature is not None:
        b.add_signature(signature, {"x": x}, {"y": y})
    return b.build()
