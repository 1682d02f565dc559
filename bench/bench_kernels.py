"""Benchmark the bundled ExtractImagePatches, Atan and Clamp kernels against numpy.

Every number is measured in the same run, and only ratios are meant to be
compared across machines:

* ExtractImagePatches, 1x256x256x3 float32, 3x3 patches, stride 1, SAME:
  ``interpreter.invoke()`` vs a vectorised numpy version (zero-padded copy of
  the image + ``as_strided`` window view + one contiguous copy into a
  preallocated output) vs ``np.copyto`` of an output-sized buffer, the memory
  bandwidth floor for writing the result.
* Atan on 1M float32 vs ``np.arctan(x, out=...)``.
* Clamp on 1M float32 vs ``np.clip(x, 0, 1, out=...)``.

Timings are the median of N repeats after a warm-up (time.perf_counter).
Kernel times include the interpreter's invoke overhead (a few microseconds).

    python bench/bench_kernels.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys

import numpy as np
from numpy.lib.stride_tricks import as_strided

import opaque_ops as oo
import opaque_ops.kernels as K
from opaque_ops.model import ModelBuilder

from _timing import median_time


def _interpreter(op: str, shape, out_shape, lib, options=None) -> oo.Interpreter:
    b = ModelBuilder(description=f"bench {op}")
    x = b.add_tensor("x", shape, np.float32)
    y = b.add_tensor("y", out_shape, np.float32)
    b.add_custom_op(op, inputs=[x], outputs=[y], options=options, version=1)
    b.set_inputs([x])
    b.set_outputs([y])
    it = oo.Interpreter(model_content=b.build(), custom_ops=[lib])
    it.allocate_tensors()
    return it


class NumpyPatches:
    """Vectorised ExtractImagePatches (rate 1) with all buffers allocated up front."""

    def __init__(self, shape, k: int, s: int):
        bsz, h, w, c = shape
        self.k, self.s = k, s
        self.oh, self.ow = -(-h // s), -(-w // s)
        pad_h = max(0, (self.oh - 1) * s + k - h)
        pad_w = max(0, (self.ow - 1) * s + k - w)
        self.top, self.left = pad_h // 2, pad_w // 2
        self.padded = np.zeros((bsz, h + pad_h, w + pad_w, c), np.float32)
        self.out = np.empty((bsz, self.oh, self.ow, k * k * c), np.float32)
        sb, sh, sw, sc = self.padded.strides
        # [B, OH, OW, kr, kc, C]: the row-column-channel patch order is then
        # plain row-major, so one copy lays out the whole output.
        self.windows = as_strided(self.padded, (bsz, self.oh, self.ow, k, k, c),
                                  (sb, sh * s, sw * s, sh, sw, sc), writeable=False)
        self.out6 = self.out.reshape(bsz, self.oh, self.ow, k, k, c)
        self.h, self.w = h, w

    def __call__(self, x: np.ndarray) -> np.ndarray:
        self.padded[:, self.top:self.top + self.h, self.left:self.left + self.w] = x
        np.copyto(self.out6, self.windows)
        return self.out


def bench_patches(repeats: int, warmup: int) -> dict:
    shape, k = (1, 256, 256, 3), 3
    opts = {"T": 0, "ksizes": [1, k, k, 1], "strides": [1, 1, 1, 1], "rates": [1, 1, 1, 1],
            "padding": "SAME"}
    it = _interpreter("ExtractImagePatches", list(shape), [1, 256, 256, k * k * 3],
                      K.extract_image_patches(), opts)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    it.set_tensor(0, x)
    ref = NumpyPatches(shape, k, 1)
    # Same answer before timing anything: the comparison is between equals.
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), ref(x))
    src = np.random.default_rng(1).standard_normal(ref.out.shape).astype(np.float32)
    dst = np.empty_like(src)
    t_kernel = median_time(it.invoke, repeats, warmup)
    t_numpy = median_time(lambda: ref(x), repeats, warmup)
    t_copy = median_time(lambda: np.copyto(dst, src), repeats, warmup)
    return {
        "name": "ExtractImagePatches 1x256x256x3 f32, 3x3 s1 SAME",
        "output_bytes": int(ref.out.nbytes),
        "kernel_s": t_kernel, "numpy_s": t_numpy, "memcpy_s": t_copy,
        "kernel/numpy": t_kernel / t_numpy, "kernel/memcpy": t_kernel / t_copy,
    }


def bench_elementwise(op: str, lib, numpy_fn, repeats: int, warmup: int) -> dict:
    n = 1 << 20
    it = _interpreter(op, [n], [n], lib)
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(n) * 4).astype(np.float32)
    it.set_tensor(0, x)
    out = np.empty_like(x)
    it.invoke()
    got = it.get_tensor(it.get_output_details()[0]["index"])
    np.testing.assert_allclose(got, numpy_fn(x, out), rtol=1e-6, atol=0)
    t_kernel = median_time(it.invoke, repeats, warmup)
    t_numpy = median_time(lambda: numpy_fn(x, out), repeats, warmup)
    return {"name": f"{op} 1M f32", "kernel_s": t_kernel, "numpy_s": t_numpy,
            "kernel/numpy": t_kernel / t_numpy}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks, print a table and optionally write JSON."""
    parser = argparse.ArgumentParser(description="opaque_ops kernel benchmarks")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    args = parser.parse_args(argv)
    repeats, warmup = (5, 1) if args.quick else (51, 5)

    rows = [
        bench_patches(repeats, warmup),
        bench_elementwise("Atan", K.atan(), lambda x, o: np.arctan(x, out=o), repeats, warmup),
        bench_elementwise("Clamp", K.clamp(), lambda x, o: np.clip(x, np.float32(0), np.float32(1), out=o),
                          repeats, warmup),
    ]

    print(f"median of {repeats} runs after {warmup} warm-up; times in ms")
    print(f"{'benchmark':<48} {'kernel':>9} {'numpy':>9} {'memcpy':>9} {'k/numpy':>8} {'k/memcpy':>9}")
    for r in rows:
        memcpy = f"{r['memcpy_s'] * 1e3:9.3f}" if "memcpy_s" in r else f"{'':>9}"
        kmem = f"{r['kernel/memcpy']:9.2f}" if "kernel/memcpy" in r else f"{'':>9}"
        print(f"{r['name']:<48} {r['kernel_s'] * 1e3:9.3f} {r['numpy_s'] * 1e3:9.3f} {memcpy} "
              f"{r['kernel/numpy']:8.2f} {kmem}")

    if args.json:
        meta = {"python": sys.version.split()[0], "numpy": np.__version__,
                "machine": platform.machine(), "repeats": repeats, "warmup": warmup}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": rows}, f, indent=2)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
