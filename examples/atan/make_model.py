"""Write atan.tflite: y = atan(x + offset), without TensorFlow.

The seed model from TFLite's custom-operator guide: an ADD of the trained
offset 0.99999905, then the custom op "Atan" (the name the TF converter gives
``tf.atan`` with ``allow_custom_ops=True``).  The input has a dynamic first
dimension, as in the converted model.

    python examples/atan/make_model.py [out.tflite]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from opaque_ops.model import ModelBuilder

OFFSET = np.float32(0.99999905)


def build(offset: float = OFFSET, atan_version: int = 1) -> bytes:
    """Return the model's bytes.

    Parameters
    ----------
    offset : float
        The ADD constant; the guide's trained value by default.
    atan_version : int
        The version the model asks of its "Atan" op.
    """
    b = ModelBuilder(description=f"y = atan(x + offset), offset = {float(offset)!r}")
    x = b.add_tensor("x", shape=[5], dtype=np.float32, shape_signature=[-1])
    offset = b.add_constant("offset", np.array([offset], dtype=np.float32))
    shifted = b.add_tensor("x_plus_offset", shape=[5], dtype=np.float32, shape_signature=[-1])
    y = b.add_tensor("y", shape=[5], dtype=np.float32, shape_signature=[-1])
    b.add_op("ADD", inputs=[x, offset], outputs=[shifted], options={"fused_activation_function": "NONE"})
    b.add_custom_op("Atan", inputs=[shifted], outputs=[y], version=atan_version)
    b.set_inputs([x])
    b.set_outputs([y])
    b.add_signature("serving_default", inputs={"x": x}, outputs={"y": y})
    return b.build()


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("atan.tflite")
    out.write_bytes(build())
    print(f"wrote {out}")
