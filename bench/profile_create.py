"""Where one first creation's time goes: ``Interpreter(...)`` + ``allocate_tensors()`` in a new process, by phase.

    python bench/profile_create.py [face|selfie] [--verdicts empty|disk] [--runs N]

Each run is a new Python process (as bench_create.py's rows) in which the
main functions of a creation are wrapped by timers (``time.perf_counter``):
finding the fast calls module, the verdict cache's directory and record,
reading and checking the model, the C runtime's interpreter and allocation,
the allocated-shape checks and the record's write.  A function's figure
includes the functions it calls (indented under it) and all its calls
(``cache._directory`` runs at the lookup and again at the write); the
wrappers add a little to the total.
``--verdicts disk`` first runs one creation that writes the model's record,
then times the starts that find it (bench_create.py's "verdict on disk").
Prints the median of each phase over the runs, in ms.  Numbers only.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = {"face": "face_detection_short_range", "selfie": "selfie_segmentation"}


# (module, function, label), in the order a creation calls them; a label
# indented under another is part of it.
PHASES = (
    ("opaque_ops.interpreter.fast_calls", "module", "fast_calls.module (finds and loads the fast calls module)"),
    ("opaque_ops.interpreter.core", "checked_model", "cache.checked_model"),
    ("opaque_ops.model.cache", "_directory", "  cache._directory (each call; lookup and write call it)"),
    ("opaque_ops.model.cache", "_code", "    cache._code (the code digest, computed once)"),
    ("opaque_ops.model.cache", "_lookup", "  cache._lookup (the record, if any)"),
    ("opaque_ops.model.cache", "read_model", "  read_model"),
    ("opaque_ops.model.cache", "_rules", "  cache._rules (imports the rules, at its first call)"),
    ("opaque_ops.model.checks", "check_model", "  check_model"),
    ("opaque_ops._native", "NativeModel", "C: TfLiteModelCreate"),
    ("opaque_ops._native", "NativeInterpreter", "C: TfLiteInterpreterCreate (with XNNPACK)"),
    (None, None, "C: TfLiteInterpreterAllocateTensors"),
    ("opaque_ops.interpreter.core", "check_allocated", "cache.check_allocated"),
    ("opaque_ops.model.checks", "check_allocated_shapes", "  check_allocated_shapes"),
    ("opaque_ops.model.cache", "_save", "  cache._save (the record's write)"),
)
TOTALS = ("Interpreter(...)", "allocate_tensors()", "total")


def _child(path: str) -> dict:
    import importlib

    import opaque_ops as oo
    import opaque_ops.interpreter.core as core

    kernels = oo.kernels.mediapipe()
    # As bench_create.py's rows: the kernels (and the runtime) are loaded
    # before the clock starts, so the build path's imports are not counted.
    kernels.libraries  # noqa: B018
    times: dict[str, float] = {}

    def timed(f, label):
        @functools.wraps(f)
        def run(*args, **kw):
            t = time.perf_counter()
            try:
                return f(*args, **kw)
            finally:
                times[label] = times.get(label, 0.0) + (time.perf_counter() - t) * 1e3

        return run

    def wrap(module, name, label):
        setattr(module, name, timed(getattr(module, name), label))

    # The rules are imported on their first use (model.cache._rules), and
    # that import is part of a first start: they are wrapped once imported,
    # not imported here.
    later = [p for p in PHASES if p[0] == "opaque_ops.model.checks"]
    for module_name, name, label in PHASES:
        if module_name is not None and (module_name, name, label) not in later:
            wrap(importlib.import_module(module_name), name, label)
    cache = importlib.import_module("opaque_ops.model.cache")
    first_rules = cache._rules

    def rules():
        module = first_rules()
        if cache._rules is rules:
            cache._rules = first_rules
            for _, name, label in later:
                wrap(module, name, label)
        return module

    cache._rules = rules
    t0 = time.perf_counter()
    it = oo.Interpreter(model_path=path, custom_ops=[kernels])
    t1 = time.perf_counter()
    allocate = timed(it._native.allocate, "C: TfLiteInterpreterAllocateTensors")
    it._native.allocate = allocate
    it._main = core._Graph(0, dict(it._input_positions), it._native.resize_input, allocate, it._native.input_tensor)
    it.allocate_tensors()
    t2 = time.perf_counter()
    times.update(zip(TOTALS, ((t1 - t0) * 1e3, (t2 - t1) * 1e3, (t2 - t0) * 1e3)))
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", choices=sorted(MODELS), default="face")
    ap.add_argument("--verdicts", choices=("empty", "disk"), default="empty")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args.child)))
        return
    sys.path.insert(0, str(HERE))
    from bench_create import _child_env, model_paths

    path = model_paths().get(MODELS[args.model])
    if path is None:
        sys.exit("mediapipe==0.10.14 is not installed (its wheel carries the models)")

    def run(verdicts: str) -> dict:
        env = dict(_child_env(), OPAQUE_OPS_VERDICT_CACHE=verdicts)
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(path)], env=env, capture_output=True, text=True, timeout=300
        )
        if out.returncode != 0:
            sys.exit(out.stderr[-2000:])
        return json.loads(out.stdout.strip().splitlines()[-1])

    results = []
    with tempfile.TemporaryDirectory(prefix="oo_verdicts_") as warm:
        run(warm)  # writes any missing .pyc and, for --verdicts disk, the record the timed starts find
        for _ in range(args.runs):
            if args.verdicts == "disk":
                results.append(run(warm))
            else:
                with tempfile.TemporaryDirectory(prefix="oo_verdicts_") as empty:
                    results.append(run(empty))
    print(f"{MODELS[args.model]}, verdicts {args.verdicts}, median of {args.runs} new processes (ms):")
    for label in (*TOTALS, *(p[2] for p in PHASES)):
        values = [r[label] for r in results if label in r]
        if values:
            print(f"  {statistics.median(values):7.3f}  {label}")


if __name__ == "__main__":
    main()
