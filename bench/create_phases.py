"""The C runtime's share of a first creation, by phase, against ai-edge-litert's.

    python bench/create_phases.py [face|selfie] [--runs N] [--tflite-lib PATH]

Each run is a new Python process that times, after its imports and with the
kernels loaded (as bench_create.py's rows):

- ``litert``: ``Interpreter(model_path)`` (model and InterpreterBuilder; its
  XNNPACK delegate is applied later) and ``allocate_tensors()``;
- ``native``: the TFLite C library this binding drives, through
  ``opaque_ops._native`` with no model checks, as the Interpreter drives it:
  ``TfLiteModelCreate`` on the private copy, ``TfLiteInterpreterCreate``
  (XNNPACK is applied here) and ``TfLiteInterpreterAllocateTensors``;
- ``native, no XNNPACK``: the same without the delegate.

``--tflite-lib`` adds the rows of another C library (``OPAQUE_OPS_TFLITE_LIB``
in its children; for example litert-lm-api's, TFLite 2.23.0).  Prints the
median of each phase over the runs, in ms.  Numbers only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = {"face": "face_detection_short_range", "selfie": "selfie_segmentation"}

CHILD = r"""
import json, sys, time
which, path = sys.argv[1], sys.argv[2]
import numpy
if which == "litert":
    from ai_edge_litert.interpreter import Interpreter
    t0 = time.perf_counter()
    it = Interpreter(model_path=path)
    t1 = time.perf_counter()
    it.allocate_tensors()
    t2 = time.perf_counter()
    print(json.dumps({"model + interpreter": (t1 - t0) * 1e3, "allocate": (t2 - t1) * 1e3}))
else:
    import opaque_ops as oo
    from opaque_ops import _native
    from opaque_ops.interpreter import xnnpack as _xnnpack
    kernels = oo.kernels.mediapipe()
    kernels.libraries  # every kernel file and the runtime loaded before the clock
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        data = f.read()
    names = {n.decode() for _, n in _xnnpack._custom_code_fields(data)} & _xnnpack.XNNPACK_CUSTOM_OPS
    aliases = {n: n + _xnnpack.ALIAS_SUFFIX for n in names}
    model = _native.NativeModel(_xnnpack.alias_model(data, aliases))
    t1 = time.perf_counter()
    native = _native.NativeInterpreter(model, kernels.operators(), use_xnnpack=which == "native", aliases=aliases)
    t2 = time.perf_counter()
    assert native.allocate() == 0
    t3 = time.perf_counter()
    print(json.dumps({"model": (t1 - t0) * 1e3, "interpreter": (t2 - t1) * 1e3, "allocate": (t3 - t2) * 1e3}))
"""


def run(which: str, path: Path, runs: int, env: dict) -> dict:
    out: dict[str, list] = {}
    for _ in range(runs):
        p = subprocess.run(
            [sys.executable, "-c", CHILD, which, str(path)],
            env=env,
            cwd=str(HERE.parent),
            capture_output=True,
            text=True,
            timeout=300,
        )
        if p.returncode != 0:
            raise RuntimeError(f"{which} failed: {p.stderr[-2000:]}")
        for k, v in json.loads(p.stdout.strip().splitlines()[-1]).items():
            out.setdefault(k, []).append(v)
    return {k: statistics.median(v) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", choices=sorted(MODELS), default="face")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--tflite-lib", metavar="PATH", help="also the rows of this TFLite C library")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from bench_create import model_paths

    path = model_paths().get(MODELS[args.model])
    if path is None:
        sys.exit("needs the mediapipe 0.10.14 wheel installed (its model files)")
    base = dict(os.environ, PYTHONPATH=str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rows = [("litert", "litert", base), ("native", "native", base), ("native, no XNNPACK", "noxnnpack", base)]
    if args.tflite_lib:
        other = dict(base, OPAQUE_OPS_TFLITE_LIB=args.tflite_lib)
        rows += [("native, --tflite-lib", "native", other), ("native, --tflite-lib, no XNNPACK", "noxnnpack", other)]
    print(f"{MODELS[args.model]}, first creation in a new process, median of {args.runs} (ms):")
    for label, which, env in rows:
        phases = run(which, path, args.runs, env)
        parts = "  ".join(f"{k} {v:.2f}" for k, v in phases.items())
        print(f"  {label:34} total {sum(phases.values()):6.2f}   {parts}")


if __name__ == "__main__":
    main()
