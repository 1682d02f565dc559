"""For a workstation with TensorFlow: train the seed model, convert it with the
custom op, and run the result through opaque_ops.

    pip install tensorflow opaque-ops
    python examples/atan/train_and_convert.py

Not run in CI (TensorFlow is not a dependency of opaque_ops).  It follows the
custom-ops guide: fit y = atan(x + offset) to data from offset = 1, convert
with allow_custom_ops=True (the converter emits the custom op "Atan"), then
load the .tflite with the guide-style C kernel.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def train_and_convert(out: Path) -> float:
    import tensorflow as tf

    offset = tf.Variable(0.0)

    @tf.function(input_signature=[tf.TensorSpec.from_tensor(tf.constant([0.0]))])
    def atan(x):
        return tf.atan(x + offset, name="Atan")

    x = np.arange(-0.9, 1, 0.1, dtype=np.float32) * 10
    y = np.arctan(x + 1.0)
    opt = tf.optimizers.Adam(0.01)
    for _ in range(1000):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((atan(x) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, [offset]), [offset]))
    converter = tf.lite.TFLiteConverter.from_concrete_functions([atan.get_concrete_function()], atan)
    converter.allow_custom_ops = True
    out.write_bytes(converter.convert())
    return float(offset.numpy())


def main() -> None:
    import opaque_ops as oo

    out = HERE / "atan_trained.tflite"
    offset = train_and_convert(out)
    print(f"trained offset: {offset}")
    ops = oo.compile_ops(HERE / "atan.c", ops={"Atan": "AtanOpRegistrationExternal"})
    it = oo.Interpreter(model_path=str(out), custom_ops=[ops])
    print("custom ops in the model:", oo.model.read_model(out).custom_ops())
    x = np.array([-8, 0.5, 2, 2.2, 201], np.float32)
    it.resize_tensor_input(it.get_input_details()[0]["index"], x.shape)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    print(it.get_tensor(it.get_output_details()[0]["index"]))


if __name__ == "__main__":
    main()
