"""End-to-end time of MediaPipe's selfie segmentation with and without XNNPACK,
and Convolution2DTransposeBias alone (our kernel) against its numpy reference.

    python bench/bench_selfie.py [--runs N] [--warmup N] [--json]

Median of N timed runs after warm-up.  No assertions: numbers only.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys

import numpy as np

import opaque_ops as oo
import opaque_ops.kernels as K
from opaque_ops.model import ModelBuilder, read_model

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "kernels"))
from test_convolution2d_transpose_bias import reference  # noqa: E402

from _timing import median_time  # noqa: E402


def interp_fn(model, x, use_xnnpack, **kw):
    it = oo.Interpreter(model_content=model, custom_ops=[K.mediapipe()], use_xnnpack=use_xnnpack, **kw)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    return it.invoke


def op_model(path):
    sg = read_model(path).subgraphs[0]
    (node,) = [op for op in sg.operators if op.op_name == "Convolution2DTransposeBias"]
    prod = {o: op for op in sg.operators for o in op.outputs}
    w16, b16 = (sg.tensors[prod[t].inputs[0]].array() for t in node.inputs[1:])
    in_shape, out_shape = sg.tensors[node.inputs[0]].shape, sg.tensors[node.outputs[0]].shape
    b = ModelBuilder()
    x = b.add_tensor("x", list(in_shape), np.float32)
    wq, bq = b.add_constant("w16", w16), b.add_constant("b16", b16)
    wt, bt = b.add_tensor("w", list(w16.shape), np.float32), b.add_tensor("b", list(b16.shape), np.float32)
    b.add_op("DEQUANTIZE", [wq], [wt])
    b.add_op("DEQUANTIZE", [bq], [bt])
    y = b.add_tensor("y", list(out_shape), np.float32)
    b.add_custom_op("Convolution2DTransposeBias", [x, wt, bt], [y], options=node.custom_options)
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build(), in_shape, w16.astype(np.float32), b16.astype(np.float32)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    spec = importlib.util.find_spec("mediapipe")
    if spec is None:
        sys.exit("needs `pip install --no-deps mediapipe==0.10.14` for the model files")
    d = os.path.join(spec.submodule_search_locations[0], "modules", "selfie_segmentation")
    rows = []
    for name in ["selfie_segmentation.tflite", "selfie_segmentation_landscape.tflite"]:
        path = os.path.join(d, name)
        data = open(path, "rb").read()
        sg = read_model(data).subgraphs[0]
        x = np.random.default_rng(0).random(sg.tensors[sg.inputs[0]].shape, dtype=np.float32)
        t_ref = median_time(interp_fn(data, x, False), args.runs, args.warmup)
        t_xnn = median_time(interp_fn(data, x, True), args.runs, args.warmup)
        rows.append({"case": f"{name} end to end", "baseline": "no XNNPACK", "baseline_ms": t_ref * 1e3,
                     "other": "XNNPACK", "other_ms": t_xnn * 1e3, "ratio": t_ref / t_xnn})
        m, in_shape, w, bias = op_model(path)
        xo = np.abs(np.random.default_rng(1).standard_normal(in_shape)).astype(np.float32)
        t_op = median_time(interp_fn(m, xo, False), args.runs, args.warmup)
        t_opx = median_time(interp_fn(m, xo, True), args.runs, args.warmup)
        t_np = median_time(lambda: reference(xo, w, bias, 1, 2, 2), max(3, args.runs // 3), 1)
        rows.append({"case": f"{name} op alone {list(in_shape)}", "baseline": "numpy reference",
                     "baseline_ms": t_np * 1e3, "other": "our C kernel", "other_ms": t_op * 1e3,
                     "ratio": t_np / t_op})
        rows.append({"case": f"{name} op alone {list(in_shape)}", "baseline": "our C kernel",
                     "baseline_ms": t_op * 1e3, "other": "XNNPACK", "other_ms": t_opx * 1e3,
                     "ratio": t_op / t_opx})
    if args.json:
        print(json.dumps({"runs": args.runs, "warmup": args.warmup, "results": rows}, indent=2))
        return
    print(f"median of {args.runs} runs after {args.warmup} warm-up; ratio = baseline / other")
    print(f"{'case':58s} {'baseline':>16s} {'ms':>9s} {'other':>13s} {'ms':>9s} {'ratio':>7s}")
    for r in rows:
        print(f"{r['case']:58s} {r['baseline']:>16s} {r['baseline_ms']:9.3f} {r['other']:>13s} "
              f"{r['other_ms']:9.3f} {r['ratio']:7.2f}")


if __name__ == "__main__":
    main()
