"""The Atan demo: a model with a custom op, run without rebuilding TensorFlow Lite.

    python examples/atan/run.py

It compiles the guide-style kernel in atan.c (cached after the first run),
registers it under the model's op name "Atan" and runs y = atan(x + offset).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import opaque_ops as oo

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_model  # noqa: E402


def main() -> None:
    model = HERE / "atan.tflite"
    if not model.is_file():
        model.write_bytes(make_model.build())

    # The guide's factory creates its op as "ATAN"; the converted model calls it "Atan".
    ops = oo.compile_ops(HERE / "atan.c", ops={"Atan": "AtanOpRegistrationExternal"})
    info = oo.runtime_info()
    print(f"TFLite {info.version} from {info.path}")
    print(f"kernel library: {ops}  ({'cache hit' if ops.cache_hit else 'compiled'})")

    x = np.array([-8, 0.5, 2, 2.2, 201], np.float32)
    with oo.Interpreter(model_path=str(model), custom_ops=[ops]) as it:
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        y = it.get_tensor(it.get_output_details()[0]["index"])
    print("x      =", x)
    print("y      =", y)
    reference = np.arctan((x + make_model.OFFSET).astype(np.float64)).astype(np.float32)
    print("numpy  =", reference, "(atan(x + 0.99999905) in float64, rounded to float32)")
    if not np.array_equal(y, reference):
        sys.exit("mismatch against the numpy reference")

    # The guide prints [-1.4288993 0.98279375 1.2490457 1.2679114 1.5658458]:
    # those are the values for an offset of exactly 1.0.
    with oo.Interpreter(model_content=make_model.build(offset=1.0), custom_ops=[ops]) as it:
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        print("offset 1.0:", it.get_tensor(it.get_output_details()[0]["index"]), "(the guide's printed values)")


if __name__ == "__main__":
    main()
