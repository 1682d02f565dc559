"""Benchmark the bundled vectorized kernels against their peers, measured in the same run.

Each row times our kernel through ``interpreter.invoke()`` and its peer,
interleaved round by round, after checking that both compute the same thing.
Time is this thread's CPU time (``time.thread_time``): everything here runs on
the calling thread (XNNPACK is given one thread), so time the core spends on
other processes is left out.  Ratio = ours / peer; targets are issue 10's.

* Atan, 1M float32, vs ``np.arctan(x, out=...)`` (numpy's own SIMD loops).
  Target ≤ 1.5×.
* ExtractImagePatches 1x256x256x3 float32, 3x3, stride 1, SAME, vs
  ``np.copyto`` of an output-sized buffer (the memory-bandwidth floor for
  writing the 7 MB result; target ≤ 2×), and vs a vectorized numpy version
  (pad + ``as_strided`` window view + one copy; info).
* Convolution2DTransposeBias, the layer of MediaPipe's selfie models
  (1x128x128x16 -> 1x256x256x1, and the landscape model's 1x72x128x16), as a
  one-op model (two DEQUANTIZE from float16 + the op, as in the model), vs
  XNNPACK's own implementation of the op: the same model with
  ``use_xnnpack=True`` and no kernel registered, where the delegate claims the
  node by name.  Ours runs with XNNPACK off, so the node is surely ours; its
  output is first checked bit-exact against the numpy reference in MediaPipe's
  summation order.  Target ≤ 1.5×.
* Clamp, 1M float32, vs ``np.clip`` (info).

Every row says which SIMD clone ran (``OpLibrary.simd``); the header gives the
CPU model and its SIMD features from /proc/cpuinfo.

    python bench/bench_kernels.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from numpy.lib.stride_tricks import as_strided

import opaque_ops as oo
import opaque_ops.kernels as K
from bench_models import interleaved, one_op_interpreter, package_dir
from bench_selfie import cpu_summary

HERE = os.path.dirname(os.path.abspath(__file__))


def _timed(fns: dict, quick: bool) -> dict:
    """µs of CPU time per call of each function, interleaved (kernels of about a millisecond)."""
    return interleaved(fns, *((10, 5) if quick else (40, 11)), clock=time.thread_time)


class NumpyPatches:
    """Vectorised ExtractImagePatches (rate 1) with all buffers allocated up front."""

    def __init__(self, shape, k: int, s: int):
        bsz, h, w, c = shape
        self.oh, self.ow = -(-h // s), -(-w // s)
        pad_h = max(0, (self.oh - 1) * s + k - h)
        pad_w = max(0, (self.ow - 1) * s + k - w)
        self.top, self.left = pad_h // 2, pad_w // 2
        self.padded = np.zeros((bsz, h + pad_h, w + pad_w, c), np.float32)
        self.out = np.empty((bsz, self.oh, self.ow, k * k * c), np.float32)
        sb, sh, sw, sc = self.padded.strides
        # [B, OH, OW, kr, kc, C]: the row-column-channel patch order is then
        # plain row-major, so one copy lays out the whole output.
        self.windows = as_strided(
            self.padded, (bsz, self.oh, self.ow, k, k, c), (sb, sh * s, sw * s, sh, sw, sc), writeable=False
        )
        self.out6 = self.out.reshape(bsz, self.oh, self.ow, k, k, c)
        self.h, self.w = h, w

    def __call__(self, x: np.ndarray) -> np.ndarray:
        self.padded[:, self.top : self.top + self.h, self.left : self.left + self.w] = x
        np.copyto(self.out6, self.windows)
        return self.out


def bench_patches(quick: bool) -> dict:
    shape, k = (1, 256, 256, 3), 3
    opts = {"T": 0, "ksizes": [1, k, k, 1], "strides": [1, 1, 1, 1], "rates": [1, 1, 1, 1], "padding": "SAME"}
    lib = K.extract_image_patches()
    it = one_op_interpreter("ExtractImagePatches", list(shape), [1, 256, 256, k * k * 3], lib, opts)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    it.set_tensor(0, x)
    ref = NumpyPatches(shape, k, 1)
    # Same answer before timing anything: the comparison is between equals.
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), ref(x))
    src = np.random.default_rng(1).standard_normal(ref.out.shape).astype(np.float32)
    dst = np.empty_like(src)
    r = _timed({"kernel": it.invoke, "numpy": lambda: ref(x), "memcpy": lambda: np.copyto(dst, src)}, quick)
    return {
        "name": "ExtractImagePatches 1x256x256x3 f32, 3x3 s1 SAME",
        "simd": lib.simd,
        "output_bytes": int(ref.out.nbytes),
        "kernel_us": r["kernel"],
        "numpy_us": r["numpy"],
        "memcpy_us": r["memcpy"],
        "kernel/numpy": r["kernel"] / r["numpy"],
        "kernel/memcpy": r["kernel"] / r["memcpy"],
    }


def bench_elementwise(op: str, lib, numpy_fn, quick: bool, n: int = 1 << 20) -> dict:
    it = one_op_interpreter(op, [n], [n], lib)
    x = (np.random.default_rng(2).standard_normal(n) * 4).astype(np.float32)
    it.set_tensor(0, x)
    out = np.empty_like(x)
    it.invoke()
    got = it.get_tensor(it.get_output_details()[0]["index"])
    # Atan is within 2 ulp of the float64 value, numpy's within 1: about 2e-7 relative.
    np.testing.assert_allclose(got, numpy_fn(x, out), rtol=5e-7, atol=0)
    r = _timed({"kernel": it.invoke, "numpy": lambda: numpy_fn(x, out)}, quick)
    return {
        "name": f"{op} 1M f32",
        "simd": lib.simd,
        "kernel_us": r["kernel"],
        "numpy_us": r["numpy"],
        "kernel/numpy": r["kernel"] / r["numpy"],
    }


def bench_transpose_conv(quick: bool) -> list[dict]:
    """The selfie models' Convolution2DTransposeBias layer: our kernel vs XNNPACK's."""
    mp = package_dir("mediapipe")
    if mp is None:
        return [
            {
                "name": "Convolution2DTransposeBias (selfie layer)",
                "error": "mediapipe (for the model files) is not installed: pip install --no-deps mediapipe==0.10.14",
            }
        ]
    from bench_selfie import op_model  # puts the repository root on sys.path
    from tests.helpers.transpose_conv import reference

    lib = K.kernel("convolution2d_transpose_bias")
    rows = []
    for name in ("selfie_segmentation.tflite", "selfie_segmentation_landscape.tflite"):
        model, in_shape, w, bias = op_model(str(mp / "modules" / "selfie_segmentation" / name))
        x = np.random.default_rng(1).random(in_shape, dtype=np.float32)
        row = {"name": f"Convolution2DTransposeBias {name.split('.')[0]} {list(in_shape)}", "simd": lib.simd}
        ours = oo.Interpreter(model_content=model, custom_ops=[lib], use_xnnpack=False)
        ours.allocate_tensors()
        ours.set_tensor(ours.get_input_details()[0]["index"], x)
        ours.invoke()
        want = reference(x, w, bias, 1, 2, 2)  # SAME, stride 2 x 2, as the model's options say
        got = ours.get_tensor(ours.get_output_details()[0]["index"])
        row["bit_exact"] = bool(np.array_equal(got, want))
        fns = {"kernel": ours.invoke}
        try:
            peer = oo.Interpreter(model_content=model, use_xnnpack=True, num_threads=1)
            peer.allocate_tensors()
            peer.set_tensor(peer.get_input_details()[0]["index"], x)
            peer.invoke()
            # XNNPACK's deconvolution sums in its own order: close, not equal.
            row["xnnpack_max_abs_diff"] = float(
                np.abs(peer.get_tensor(peer.get_output_details()[0]["index"]) - want).max()
            )
            fns["xnnpack"] = peer.invoke
        except Exception as exc:  # noqa: BLE001 - the peer is optional; say why it is missing
            row["xnnpack_error"] = f"{type(exc).__name__}: {exc}"[:160]
        r = _timed(fns, quick)
        row["kernel_us"] = r["kernel"]
        if "xnnpack" in r:
            row["xnnpack_us"] = r["xnnpack"]
            row["kernel/xnnpack"] = r["kernel"] / r["xnnpack"]
        rows.append(row)
    return rows


def run(quick: bool) -> dict:
    """Every kernel measure, as a dict of rows (bench/suite.py renders them)."""
    return {
        "cpu": cpu_summary(),
        "atan": bench_elementwise("Atan", K.atan(), lambda x, o: np.arctan(x, out=o), quick),
        "patches": bench_patches(quick),
        "transpose_conv": bench_transpose_conv(quick),
        "clamp": bench_elementwise(
            "Clamp", K.clamp(), lambda x, o: np.clip(x, np.float32(0), np.float32(1), out=o), quick
        ),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks, print a table and optionally write JSON."""
    parser = argparse.ArgumentParser(description="opaque_ops kernel benchmarks")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    args = parser.parse_args(argv)
    res = run(args.quick)
    print(f"CPU: {res['cpu']}")
    print("median over rounds of the mean CPU time per call, ours and peer interleaved; times in µs")
    print(f"{'benchmark':<66} {'clone':>7} {'ours':>9} {'peer':>9}  ratio  peer")
    rows = [
        (res["atan"], "numpy_us", "np.arctan"),
        (res["patches"], "memcpy_us", "memcpy of the output"),
        (res["patches"], "numpy_us", "numpy strided copy"),
    ]
    rows += [(r, "xnnpack_us", "XNNPACK") for r in res["transpose_conv"]]
    rows += [(res["clamp"], "numpy_us", "np.clip")]
    for r, key, peer in rows:
        if "kernel_us" not in r or key not in r:
            why = r.get("error") or r.get("xnnpack_error") or "n/a"
            print(f"{r['name']:<66} {r.get('simd') or '-':>7}  {peer}: {why}")
            continue
        print(
            f"{r['name']:<66} {r['simd'] or '-':>7} {r['kernel_us']:9.1f} {r[key]:9.1f} "
            f"{r['kernel_us'] / r[key]:6.2f}  {peer}"
        )
    if args.json:
        meta = {"python": sys.version.split()[0], "numpy": np.__version__, "quick": args.quick}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": res}, f, indent=2)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
