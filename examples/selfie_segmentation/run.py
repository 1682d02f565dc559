"""Person segmentation with MediaPipe's selfie model, run by opaque_ops.

    python run.py [PHOTO] [--out MASK.png] [--ops LIB.so]... [--model-size]
                  [--landscape | --model FILE.tflite] [--xnnpack-op | --no-xnnpack] [--runs N]

The mask is written as an 8-bit grayscale PNG, at the photo's size (scaled
bilinearly from the model's 256x256; --model-size keeps the model's).  It
goes to --out, by default to PHOTO_mask.png (synthetic_mask.png without a
photo) in the system's temporary directory; the path is printed.

The kernel for the model's custom op comes from opaque_ops.kernels (compiled
on first use, or prebuilt in the package).  --ops LIB.so loads a prebuilt
library instead (``opaque-ops build --kernels mediapipe -o LIB.so``, for a
machine without a compiler; ``--target aarch64`` for a Raspberry Pi).

By default XNNPACK runs the builtin layers and the registered kernel runs
Convolution2DTransposeBias (a registered kernel always keeps its nodes).
--xnnpack-op registers no kernel and lets XNNPACK run its own copy of the op
(use_xnnpack=True); --no-xnnpack runs every builtin on TFLite's reference
kernels (use_xnnpack=False).

PHOTO (PNG/JPEG) needs Pillow; an .npy array (H x W x 3 uint8) does not;
without a photo a synthetic person is drawn.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from selfie import load_rgb, model_path, resize_bilinear, segment, synthetic_person, to_uint8, write_png

import opaque_ops as oo


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("photo", nargs="?")
    ap.add_argument("--out", help="the mask PNG (default: PHOTO_mask.png in the temporary directory)")
    ap.add_argument(
        "--ops",
        action="append",
        default=[],
        metavar="LIB.so",
        help="a prebuilt kernel library instead of opaque_ops.kernels (repeatable)",
    )
    ap.add_argument("--model-size", action="store_true", help="keep the mask at the model's resolution")
    ap.add_argument("--landscape", action="store_true", help="use the 144x256 model")
    ap.add_argument(
        "--model",
        metavar="FILE.tflite",
        help="a selfie segmentation model file (default: the one in the installed mediapipe 0.10.14 wheel)",
    )
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument(
        "--xnnpack-op",
        action="store_true",
        help="no kernel: XNNPACK runs its own Convolution2DTransposeBias (use_xnnpack=True)",
    )
    mode.add_argument("--no-xnnpack", action="store_true", help="XNNPACK off (use_xnnpack=False)")
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args(argv)
    if args.xnnpack_op and args.ops:
        ap.error("--xnnpack-op registers no kernel; it cannot be combined with --ops")

    # Prebuilt libraries go in as paths; Interpreter loads them with load_ops.
    custom_ops = [] if args.xnnpack_op else (args.ops or [oo.kernels.mediapipe()])
    it = oo.Interpreter(
        model_path=args.model or model_path(args.landscape),
        custom_ops=custom_ops,
        use_xnnpack=True if args.xnnpack_op else False if args.no_xnnpack else None,
    )
    it.allocate_tensors()
    inp = it.get_input_details()[0]
    h, w = int(inp["shape"][1]), int(inp["shape"][2])
    rgb = load_rgb(args.photo) if args.photo else synthetic_person(h, w)

    mask = segment(it, rgb)  # preprocess, set_tensor, invoke, get_tensor
    times = []
    for _ in range(max(1, args.runs)):  # then invoke() alone, on the same input
        t = time.perf_counter()
        it.invoke()
        times.append(time.perf_counter() - t)
    if not args.model_size:
        mask = resize_bilinear(mask, rgb.shape[0], rgb.shape[1])
    stem = Path(args.photo).stem if args.photo else "synthetic"
    out = args.out or os.path.join(tempfile.gettempdir(), f"{stem}_mask.png")
    write_png(out, to_uint8(mask))
    who = (
        "XNNPACK (builtins and its own transposed convolution)"
        if args.xnnpack_op
        else ("XNNPACK builtins + " if it.xnnpack else "TFLite's reference builtins + ")
        + (
            "the prebuilt kernel " + ", ".join(os.path.basename(p) for p in args.ops)
            if args.ops
            else "opaque_ops' kernel"
        )
    )
    print(
        f"{who}: {np.median(times) * 1e3:.2f} ms per invoke (median of {len(times)}); "
        f"{(mask > 0.5).mean():.1%} of pixels are person; {mask.shape[1]}x{mask.shape[0]} mask -> {out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
