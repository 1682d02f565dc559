"""What the growing-arena guard costs a loop that resizes its input on every call.

    python bench/bench_resize_guard.py [--calls N] [--rounds N]

A chain of 50 or 250 ADD / MUL / TANH operators, its input resized between
[1, 8] and [1, 16] before every call (resize, allocate, set, invoke), with
the guard (``arena_guard.refuse_unaffordable``, README: TensorMemoryError)
and with it replaced by a no-op in the same process, XNNPACK off and on.
Rounds alternate the two, and each figure is the best round's mean per
call, in µs.  Numbers only, no assertions.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import opaque_ops as oo
from opaque_ops.interpreter import arena_guard
from opaque_ops.model import ModelBuilder


def chain(n_ops: int) -> bytes:
    """A [1, -1] float32 chain of ``n_ops`` elementwise operators."""
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 8], np.float32, shape_signature=[1, -1])
    half = b.add_constant("half", np.array([0.5], np.float32))
    cur = x
    for i in range(n_ops):
        t = b.add_tensor(f"t{i}", [1, 8], np.float32, shape_signature=[1, -1])
        op = ("ADD", "MUL", "TANH")[i % 3]
        b.add_op(op, [cur, half] if op != "TANH" else [cur], [t])
        cur = t
    b.set_inputs([x])
    b.set_outputs([cur])
    return b.build()


def per_call(it, calls: int) -> float:
    """Mean µs of one resize + allocate + set + invoke, alternating two shapes."""
    inputs = {n: np.ones((1, n), np.float32) for n in (8, 16)}
    t0 = time.perf_counter()
    for i in range(calls):
        n = 8 if i % 2 else 16
        it.resize_tensor_input(0, [1, n])
        it.allocate_tensors()
        it.set_tensor(0, inputs[n])
        it.invoke()
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    guard = arena_guard.refuse_unaffordable

    def no_guard(*args):
        return None

    print("operators  xnnpack  guarded  no guard  (µs per call)")
    for n_ops in (50, 250):
        data = chain(n_ops)
        for xnnpack in (False, True):
            it = oo.Interpreter(model_content=data, use_xnnpack=xnnpack)
            it.allocate_tensors()
            best = {"guarded": float("inf"), "no guard": float("inf")}
            try:
                for _ in range(args.rounds):
                    for label, fn in (("guarded", guard), ("no guard", no_guard)):
                        arena_guard.refuse_unaffordable = fn
                        best[label] = min(best[label], per_call(it, args.calls))
            finally:
                arena_guard.refuse_unaffordable = guard
                it.close()
            print(f"{n_ops:9d}  {'on' if xnnpack else 'off':7s}  {best['guarded']:7.0f}  {best['no guard']:8.0f}")


if __name__ == "__main__":
    main()
