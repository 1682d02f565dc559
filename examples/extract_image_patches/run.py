"""Run a model that uses ExtractImagePatches, the op tf.image.extract_patches becomes.

TF's converter (with ``allow_custom_ops=True``) turns ``tf.image.extract_patches``
into the custom op "ExtractImagePatches" v1 whose options are a flexbuffer map
of the TF node's attributes.  This script writes that model without TensorFlow,
with opaque_ops' ModelBuilder, runs it with the bundled C kernel and checks the
worked example: a 10x10 image of 1..100, 3x3 patches, stride 1, SAME padding.

    python examples/extract_image_patches/run.py [--save model.tflite]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import opaque_ops
import opaque_ops.kernels
from opaque_ops.model import ModelBuilder, read_model

EXPECTED_FIRST_PATCH = [0, 0, 0, 0, 1, 2, 0, 11, 12]


def build(height: int = 10, width: int = 10, channels: int = 1) -> bytes:
    """Model equivalent to ``tf.image.extract_patches(x, [1,3,3,1], [1,1,1,1], [1,1,1,1], "SAME")``.

    Parameters
    ----------
    height, width, channels : int, optional
        Input image size; the batch is 1.

    Returns
    -------
    bytes
        The serialised .tflite model.
    """
    b = ModelBuilder(description="tf.image.extract_patches, 3x3, stride 1, SAME")
    x = b.add_tensor("images", [1, height, width, channels], np.float32)
    y = b.add_tensor("patches", [1, height, width, 9 * channels], np.float32)
    # The attributes TF's converter stores, with T as the TFLite TensorType (0 = FLOAT32).
    options = {"T": 0, "ksizes": [1, 3, 3, 1], "strides": [1, 1, 1, 1], "rates": [1, 1, 1, 1], "padding": "SAME"}
    b.add_custom_op("ExtractImagePatches", inputs=[x], outputs=[y], options=options, version=1)
    b.set_inputs([x])
    b.set_outputs([y])
    b.add_signature("serving_default", inputs={"images": x}, outputs={"patches": y})
    return b.build()


def main(argv: list[str] | None = None) -> int:
    """Build, run and check the worked example; returns the process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", type=Path, help="also write the model to this .tflite file")
    args = parser.parse_args(argv)

    model = build()
    if args.save:
        args.save.write_bytes(model)
        print(f"wrote {args.save}")
    print("custom ops in the model:", read_model(model).custom_ops())

    interpreter = opaque_ops.Interpreter(model_content=model, custom_ops=[opaque_ops.kernels.extract_image_patches()])
    interpreter.allocate_tensors()
    image = np.arange(1, 101, dtype=np.float32).reshape(1, 10, 10, 1)
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], image)
    interpreter.invoke()
    patches = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])

    first = patches[0, 0, 0].astype(int).tolist()
    print("output shape:", patches.shape)
    print("first patch (3x3 around pixel (0,0), zero padded):", first)
    print(np.array(first).reshape(3, 3))
    if first != EXPECTED_FIRST_PATCH or patches.shape != (1, 10, 10, 9):
        print(f"MISMATCH: expected {EXPECTED_FIRST_PATCH}", file=sys.stderr)
        return 1
    print("OK: matches the worked example")
    return 0


if __name__ == "__main__":
    sys.exit(main())
