"""Overhead of opaque_ops.testing.run_op compared with a prebuilt Interpreter.

    python bench/bench_harness.py [--n 200]

run_op builds a one-op model, creates an interpreter, allocates twice when
guarding (once to learn the output shapes, once with the guarded buffers),
runs and checks the guard bytes: a per-call cost for tests, never for
production.  The baseline is set_tensor + invoke + get_tensor on an
interpreter created once.  Also times a Python op (python_op) invoke against
the same op in C, which is the GIL-holding callback path's cost.
"""

from __future__ import annotations

import argparse

import numpy as np

import opaque_ops as oo
from _timing import median_time
from opaque_ops.testing import build_op_model, run_op


def prebuilt(ops, x):
    data = build_op_model("Clamp", [x], [(list(x.shape), x.dtype)])
    it = oo.Interpreter(model_content=data, custom_ops=[ops])
    it.allocate_tensors()
    i_idx = it.get_input_details()[0]["index"]
    o_idx = it.get_output_details()[0]["index"]

    def call():
        it.set_tensor(i_idx, x)
        it.invoke()
        return it.get_tensor(o_idx)

    return call


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=200)
    args = p.parse_args()
    c_op = oo.kernels.clamp()
    py_op = oo.python_op("Clamp", invoke=lambda i, o: np.clip(i[0], 0.0, 1.0, out=o[0]))
    for size in (16, 1 << 16):
        x = np.random.default_rng(0).uniform(-1, 2, size).astype(np.float32)
        base = median_time(prebuilt(c_op, x), args.n)
        guarded = median_time(lambda: run_op(c_op, "Clamp", [x]), args.n)
        unguarded = median_time(lambda: run_op(c_op, "Clamp", [x], guard=False), args.n)
        py_base = median_time(prebuilt(py_op, x), args.n)
        print(
            f"{size:6d} floats: prebuilt C invoke {base * 1e6:8.1f} us | run_op guard {guarded * 1e6:8.1f} us "
            f"(+{(guarded - base) * 1e6:.0f}) | run_op no guard {unguarded * 1e6:8.1f} us | "
            f"prebuilt Python op {py_base * 1e6:8.1f} us"
        )


if __name__ == "__main__":
    main()
