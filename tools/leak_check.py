"""Memory growth over many create/allocate/invoke/close cycles.

    python tools/leak_check.py [--cycles 10000] [--warmup 500] [--kind c|python|builtin|all]

Each cycle builds an Interpreter on the Atan seed model (ADD + custom Atan)
with the op from a C kernel library or a Python op, allocates, sets the
input, invokes, reads the output, checks it against numpy, and closes.  The
resident set size is read from /proc/self/statm after the warm-up cycles
(allocator pools, caches and lazily created runtime state settle there) and
again at the end.  The issue's target: growth < 2 MB over 10k cycles.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
X = np.array([-8, 0.5, 2, 2.2, 201], np.float32)
OFFSET = np.float32(0.99999905)


def rss_bytes() -> int:
    """Resident set size of this process, from /proc/self/statm."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def model_bytes() -> bytes:
    sys.path.insert(0, str(ROOT / "examples" / "atan"))
    import make_model

    return make_model.build()


def make_ops(kind: str):
    """The op library for one kind of kernel: ``"c"`` or ``"python"`` (None for builtin-only)."""
    import opaque_ops as oo

    if kind == "c":
        return oo.compile_ops(str(ROOT / "examples" / "atan" / "atan.c"), ops={"Atan": "AtanOpRegistrationExternal"})
    if kind == "python":
        return oo.python_op("Atan", invoke=lambda ins, outs: np.arctan(ins[0], out=outs[0]))
    raise ValueError(kind)


def builtin_model() -> bytes:
    from opaque_ops.model import ModelBuilder

    b = ModelBuilder()
    x = b.add_tensor("x", shape=[5], dtype=np.float32)
    c = b.add_constant("c", np.array([OFFSET], np.float32))
    y = b.add_tensor("y", shape=[5], dtype=np.float32)
    b.add_op("ADD", inputs=[x, c], outputs=[y], options={"fused_activation_function": "NONE"})
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


def one_cycle(data: bytes, ops, expected: np.ndarray) -> None:
    import opaque_ops as oo

    it = oo.Interpreter(model_content=data, custom_ops=[ops] if ops is not None else None, use_xnnpack=False)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], X)
    it.invoke()
    out = it.get_tensor(it.get_output_details()[0]["index"])
    if not np.allclose(out, expected, rtol=1e-6, atol=0):
        raise AssertionError(f"wrong result {out}, expected {expected}")
    it.close()


def measure(kind: str, cycles: int, warmup: int) -> dict:
    """Run ``warmup`` then ``cycles`` cycles; return RSS figures in bytes."""
    if kind == "builtin":
        data, ops = builtin_model(), None
        expected = X + OFFSET
    else:
        data, ops = model_bytes(), make_ops(kind)
        expected = np.arctan((X + OFFSET).astype(np.float64)).astype(np.float32)
    for _ in range(warmup):
        one_cycle(data, ops, expected)
    gc.collect()
    start = rss_bytes()
    mid = None
    t = time.perf_counter()
    for i in range(cycles):
        one_cycle(data, ops, expected)
        if i == cycles // 2:
            gc.collect()
            mid = rss_bytes()
    gc.collect()
    end = rss_bytes()
    return {
        "kind": kind,
        "cycles": cycles,
        "warmup": warmup,
        "rss_after_warmup_mb": round(start / 2**20, 2),
        "rss_end_mb": round(end / 2**20, 2),
        "growth_mb": round((end - start) / 2**20, 3),
        "growth_second_half_mb": round((end - (mid or start)) / 2**20, 3),
        "us_per_cycle": round((time.perf_counter() - t) / cycles * 1e6, 1),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=10000)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--kind", choices=("c", "python", "builtin", "all"), default="all")
    ap.add_argument("--limit-mb", type=float, default=2.0, help="fail (exit 1) if growth exceeds this")
    args = ap.parse_args(argv)
    kinds = ("builtin", "c", "python") if args.kind == "all" else (args.kind,)
    bad = False
    for kind in kinds:
        res = measure(kind, args.cycles, args.warmup)
        print(json.dumps(res), flush=True)
        bad |= res["growth_mb"] >= args.limit_mb
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
