"""Benchmark MediaPipe's face-mesh and argmax-pooling kernels.

Each kernel runs in a one-op model (inputs set once, ``invoke`` timed), at
the sizes of face_landmark_with_attention.tflite where it has them:

* against the same kernel source built without SIMD (``-DOPAQUE_OPS_SIMD_OFF``:
  no clones, no vectorizer options, the build's plain -O2, as the kernels were
  before issue 10).  Both builds must return the same bits; issue 10's target
  is "at least as fast as today" (ratio ≤ 1).  The kernels that do not use
  ``opaque_ops/simd.h`` (Landmarks2TransformMatrix, TransformLandmarks,
  MaxUnpooling2D) compile to the same code both ways, so their ratio only
  shows the noise;
* against the float64 numpy reference from the tests (``--numpy``), which is
  also checked to agree, so the numbers describe a correct kernel.

Times are the median over rounds of the mean CPU time per call
(``time.thread_time``: the kernels run on the calling thread), both builds
interleaved round by round.

    python bench/bench_face_ops.py [--quick] [--numpy] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import sys
import time

import numpy as np

import opaque_ops as oo
import opaque_ops.kernels as K
from _timing import median_time
from bench_models import interleaved
from opaque_ops.build import paths as _paths
from opaque_ops.model import ModelBuilder

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "kernels" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def one_op(lib, name, version, inputs, n_out, options):
    b = ModelBuilder()
    ins = [b.add_tensor(f"in{i}", a.shape, np.float32) for i, a in enumerate(inputs)]
    outs = [b.add_tensor(f"out{i}", [1], np.float32) for i in range(n_out)]
    b.add_custom_op(name, ins, outs, options=options, version=version)
    b.set_inputs(ins)
    b.set_outputs(outs)
    it = oo.Interpreter(model_content=b.build(), custom_ops=[lib], use_xnnpack=False)
    it.allocate_tensors()
    for d, a in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], a)
    return it


def cases() -> list[dict]:
    """The benchmark cases: kernel file, op, inputs, options, numpy reference and its tolerance."""
    face, pool = _load("test_face_ops"), _load("test_argmax_pooling")
    rng = np.random.default_rng(0)
    out = []
    # Sizes as in face_landmark_with_attention.tflite.
    img = rng.normal(size=(1, 48, 48, 32)).astype(np.float32)
    m = face.random_affine(rng, 48, 48, 16, 16)
    out.append(
        dict(
            label="TransformTensorBilinear 48x48x32->16x16",
            file="transform_tensor_bilinear",
            op="TransformTensorBilinear",
            version=2,
            inputs=[img, m],
            n_out=1,
            options=face.flex({"output_height": 16, "output_width": 16}),
            ref=lambda: face.ttb_ref(img, m, 16, 16)[0],
            tol=1e-4,
        )
    )
    lm = (rng.normal(size=(1, 468, 3)) * 30 + 96).astype(np.float32)
    o = dict(
        subset_idxs=rng.integers(0, 468, 80).tolist(),
        left_rotation_idx=61,
        right_rotation_idx=291,
        output_height=16,
        output_width=16,
        target_rotation_radians=0.0,
        scale_x=1.5,
        scale_y=1.5,
    )
    out.append(
        dict(
            label="Landmarks2TransformMatrix 468 pts, 80 idx",
            file="landmarks_to_transform_matrix",
            op="Landmarks2TransformMatrix",
            version=2,
            inputs=[lm],
            n_out=1,
            options=face.flex(o),
            ref=lambda: face.l2tm_ref(lm, o["subset_idxs"], 61, 291, 0.0, 16, 16, 1.5, 1.5)[None],
            tol=1e-3,
        )
    )
    pts = rng.normal(size=(1, 80, 2)).astype(np.float32)
    mat = rng.normal(size=(1, 4, 4)).astype(np.float32)
    out.append(
        dict(
            label="TransformLandmarks 80x2",
            file="transform_landmarks",
            op="TransformLandmarks",
            version=2,
            inputs=[pts, mat],
            n_out=1,
            options=None,
            ref=lambda: face.tl_ref(pts, mat),
            tol=1e-4,
        )
    )
    x = rng.normal(size=(1, 64, 64, 16)).astype(np.float32)
    po = pool.opts(2, 2, 2, 2, 2)
    out.append(
        dict(
            label="MaxPoolingWithArgmax2D 64x64x16 2x2/2",
            file="max_pooling_with_argmax",
            op="MaxPoolingWithArgmax2D",
            version=1,
            inputs=[x],
            n_out=2,
            options=po,
            ref=lambda: pool.pool_ref(x, 2, 2, 2, 2, 2)[0],
            tol=0,
        )
    )
    v, idx = pool.pool_ref(x, 2, 2, 2, 2, 2)
    out.append(
        dict(
            label="MaxUnpooling2D 32x32x16 2x2/2",
            file="max_unpooling",
            op="MaxUnpooling2D",
            version=1,
            inputs=[v, idx],
            n_out=1,
            options=po,
            ref=lambda: pool.unpool_ref(v, idx, 2, 2, 2, 2),
            tol=0,
        )
    )
    return out


def _interp(c: dict, lib) -> oo.Interpreter:
    return one_op(lib, c["op"], c["version"], c["inputs"], c["n_out"], c["options"])


def _outputs(it) -> list[np.ndarray]:
    it.invoke()
    return [it.get_tensor(d["index"]).copy() for d in it.get_output_details()]


def simd_vs_scalar(quick: bool) -> list[dict]:
    """Each kernel as bundled vs the same source built with OPAQUE_OPS_SIMD_OFF (µs per invoke)."""
    rows = []
    for c in cases():
        simd = K.kernel(c["file"])
        scalar = oo.compile_ops(_paths.kernels_dir() / f"{c['file']}.c", define_macros=[("OPAQUE_OPS_SIMD_OFF", None)])
        its = {"simd": _interp(c, simd), "scalar": _interp(c, scalar)}
        same = all(np.array_equal(a, b, equal_nan=True) for a, b in zip(_outputs(its["simd"]), _outputs(its["scalar"])))
        r = interleaved(
            {k: it.invoke for k, it in its.items()}, 50 if quick else 400, 5 if quick else 11, clock=time.thread_time
        )
        rows.append(
            {
                "op": c["label"],
                "clone": simd.simd,
                "vectorized": simd.simd is not None,
                "same_bits": same,
                "simd_us": r["simd"],
                "scalar_us": r["scalar"],
                "simd/scalar": r["simd"] / r["scalar"],
            }
        )
    return rows


def versus_numpy(runs: int) -> list[dict]:
    """Each kernel vs its float64 numpy reference (checked to agree first)."""
    rows = []
    n_ref = max(3, runs // 10)  # the loop references are slow
    for c in cases():
        it = _interp(c, K.kernel(c["file"]))
        t_k = median_time(it.invoke, runs)
        got = it.get_tensor(it.get_output_details()[0]["index"])
        want = c["ref"]()
        if not np.allclose(got, want.reshape(got.shape), rtol=c["tol"], atol=c["tol"]):
            raise AssertionError(f"{c['label']}: kernel disagrees with the numpy reference")
        t_r = median_time(c["ref"], n_ref)
        rows.append({"op": c["label"], "kernel_us": t_k * 1e6, "numpy_us": t_r * 1e6, "numpy_over_kernel": t_r / t_k})
    return rows


def main(argv=None) -> int:
    """Run the benchmark; print a table or JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds: a smoke run")
    ap.add_argument("--numpy", action="store_true", help="also time the numpy references")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)
    res = {"simd_vs_scalar": simd_vs_scalar(args.quick)}
    if args.numpy:
        res["versus_numpy"] = versus_numpy(10 if args.quick else 50)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"{'op':42s} {'clone':>7s} {'SIMD us':>9s} {'scalar us':>10s} {'ratio':>6s}  same bits")
    for r in res["simd_vs_scalar"]:
        print(
            f"{r['op']:42s} {r['clone'] or '-':>7s} {r['simd_us']:9.2f} {r['scalar_us']:10.2f} "
            f"{r['simd/scalar']:6.2f}  {r['same_bits']}"
        )
    for r in res.get("versus_numpy", []):
        print(
            f"{r['op']:42s} kernel {r['kernel_us']:9.1f} us, numpy reference {r['numpy_us']:9.1f} us "
            f"({r['numpy_over_kernel']:.0f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
