"""Benchmark MediaPipe face-mesh and argmax-pooling kernels against numpy.

Each kernel runs in a one-op model (inputs set once, ``invoke`` timed) and is
compared with the float64 numpy reference from the tests, which is also
checked to agree so the numbers describe a correct kernel.  Reported: median
time per call over N runs and the numpy/kernel ratio.

    python bench/bench_face_ops.py [-n 50] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import sys

import numpy as np

import opaque_ops as oo
import opaque_ops.kernels as K
from opaque_ops.model import ModelBuilder

from _timing import median_time

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


def main(argv=None) -> int:
    """Run the benchmark; print a table or JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=50, help="timed runs per case (median reported)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)
    face, pool = _load("test_face_ops"), _load("test_argmax_pooling")
    rng = np.random.default_rng(0)
    cases = []

    # Sizes as in face_landmark_with_attention.tflite.
    img = rng.normal(size=(1, 48, 48, 32)).astype(np.float32)
    m = face.random_affine(rng, 48, 48, 16, 16)
    it = one_op(K.kernel("transform_tensor_bilinear"), "TransformTensorBilinear", 2, [img, m], 1,
                face.flex({"output_height": 16, "output_width": 16}))
    cases.append(("TransformTensorBilinear 48x48x32->16x16", it,
                  lambda: face.ttb_ref(img, m, 16, 16)[0], 1e-4))

    lm = (rng.normal(size=(1, 468, 3)) * 30 + 96).astype(np.float32)
    o = dict(subset_idxs=rng.integers(0, 468, 80).tolist(), left_rotation_idx=61,
             right_rotation_idx=291, output_height=16, output_width=16,
             target_rotation_radians=0.0, scale_x=1.5, scale_y=1.5)
    it = one_op(K.kernel("landmarks_to_transform_matrix"), "Landmarks2TransformMatrix", 2, [lm], 1,
                face.flex(o))
    cases.append(("Landmarks2TransformMatrix 468 pts, 80 idx", it,
                  lambda: face.l2tm_ref(lm, o["subset_idxs"], 61, 291, 0.0, 16, 16, 1.5, 1.5)[None],
                  1e-3))

    pts = rng.normal(size=(1, 80, 2)).astype(np.float32)
    mat = rng.normal(size=(1, 4, 4)).astype(np.float32)
    it = one_op(K.kernel("transform_landmarks"), "TransformLandmarks", 2, [pts, mat], 1, None)
    cases.append(("TransformLandmarks 80x2", it, lambda: face.tl_ref(pts, mat), 1e-4))

    x = rng.normal(size=(1, 64, 64, 16)).astype(np.float32)
    po = pool.opts(2, 2, 2, 2, 2)
    it = one_op(K.kernel("max_pooling_with_argmax"), "MaxPoolingWithArgmax2D", 1, [x], 2, po)
    cases.append(("MaxPoolingWithArgmax2D 64x64x16 2x2/2", it,
                  lambda: pool.pool_ref(x, 2, 2, 2, 2, 2)[0], 0))

    v, idx = pool.pool_ref(x, 2, 2, 2, 2, 2)
    it = one_op(K.kernel("max_unpooling"), "MaxUnpooling2D", 1, [v, idx], 1, po)
    cases.append(("MaxUnpooling2D 32x32x16 2x2/2", it,
                  lambda: pool.unpool_ref(v, idx, 2, 2, 2, 2), 0))

    rows = []
    n_ref = max(3, args.n // 10)  # the loop references are slow
    for name, it, ref, tol in cases:
        t_k = median_time(it.invoke, args.n)
        got = it.get_tensor(it.get_output_details()[0]["index"])
        want = ref()
        if not np.allclose(got, want.reshape(got.shape), rtol=tol, atol=tol):
            print(f"{name}: kernel disagrees with reference", file=sys.stderr)
            return 1
        t_r = median_time(ref, n_ref)
        rows.append({"op": name, "kernel_us": t_k * 1e6, "numpy_us": t_r * 1e6,
                     "numpy_over_kernel": t_r / t_k})
    if args.json:
        print(json.dumps({"runs": args.n, "results": rows}, indent=2))
    else:
        print(f"{'op':45s} {'kernel us':>10s} {'numpy us':>10s} {'ratio':>8s}")
        for r in rows:
            print(f"{r['op']:45s} {r['kernel_us']:10.1f} {r['numpy_us']:10.1f} {r['numpy_over_kernel']:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
