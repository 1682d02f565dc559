"""Prototype Clamp in Python, write it in C, and check one against the other.

    python examples/clamp/check.py

1. ``python_clamp`` is the op as a numpy prototype (opaque_ops.python_op).
2. ``clamp.c`` is the same op in C, compiled with opaque_ops.compile_ops.
3. ``opaque_ops.testing.run_op`` runs each in the real runtime on random data
   with NaN and +-inf mixed in; the C kernel's output is guard-checked.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import opaque_ops as oo
from opaque_ops.testing import run_op

HERE = Path(__file__).resolve().parent


def python_clamp() -> oo.pyop.PythonOp:
    """The prototype: outputs take input 0's shape (prepare=None), np.clip fills them."""

    def invoke(inputs, outputs):
        np.clip(inputs[0], 0.0, 1.0, out=outputs[0])

    return oo.python_op("Clamp", invoke=invoke)


def c_clamp() -> oo.OpLibrary:
    return oo.compile_ops(HERE / "clamp.c")


def random_input(rng, shape) -> np.ndarray:
    """Values around [0, 1] plus the special cases that kernels get wrong."""
    x = rng.uniform(-2.0, 3.0, size=shape).astype(np.float32)
    flat = x.reshape(-1)
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, np.nextafter(1, 2, dtype=np.float32)], np.float32)
    where = rng.choice(flat.size, size=min(flat.size, specials.size), replace=False)
    flat[where] = specials[: where.size]
    return x


def check(seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    py_op, c_op = python_clamp(), c_clamp()
    for shape in [(1,), (7,), (2, 3, 5), (1, 64, 64, 3)]:
        x = random_input(rng, shape)
        (want,) = run_op(py_op, "Clamp", inputs=[x])
        (got,) = run_op(c_op, "Clamp", inputs=[x])
        # Bit-for-bit, NaN included: the C kernel must do exactly what the prototype does.
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=f"shape {shape}")
        print(f"shape {shape}: C and Python agree on {x.size} values")


if __name__ == "__main__":
    check()
    print("ok")
