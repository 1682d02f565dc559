"""Run a model generator through isolated interpreters and count what happened to each case.

    nice -n 10 python tools/fuzz_isolated.py --n 100000 [--generator MODULE:FUNCTION] [--seed 1]
                                             [--timeout 10] [--memory-limit 2G] [--save-dir DIR] [--json out.json]

``--generator`` names ``function(seed, i)`` returning the model bytes of case
``i``, or ``(bytes, options)`` where ``options`` are
:func:`opaque_ops.isolate.run_model` arguments for that case (``use_xnnpack``,
``resize``, ``runner``, ``num_threads``) plus ``"kernels"``: names of bundled
kernels (``"all"``, ``"mediapipe"`` or a kernel file name) to register.  The
default is the byte-level mutator of ``tools/fuzz_models.py``;
``--generator tools.fuzz_isolated:structured`` runs the structure-aware
fuzzer of ``tools/fuzz_structured.py``.

Every case is created, allocated, fed random inputs and invoked in a worker
process (reused until it crashes).  Outcomes: ``ok``; ``rejected`` (an
OpaqueOpsError with a reason); ``crash`` (RuntimeCrashError: the worker died,
this process did not); ``timeout`` (RuntimeTimeoutError); ``error`` (any other
exception: a finding).  Crashes, timeouts and errors are saved with their
message to ``--save-dir``.  Reaching the summary means the calling process
survived every case.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def byte_mutator(seed: int, i: int):
    """The default generator: tools/fuzz_models.py's mutations of real models."""
    from tools.fuzz_models import input_for, seed_models

    global _SEEDS
    try:
        seeds = _SEEDS
    except NameError:
        seeds = _SEEDS = seed_models()
    return input_for(seeds, seed, i), {"use_xnnpack": bool(i % 2)}


def structured(seed: int, i: int):
    """The structure-aware fuzzer of tools/fuzz_structured.py (the checks work): its case ``i``,
    run the way it says (XNNPACK, bundled kernels, a resize, a signature runner)."""
    from tools.fuzz_structured import make_case

    case = make_case(seed, i)
    return case.data, {
        "use_xnnpack": case.xnnpack,
        "kernels": ["all"] if case.kernels else None,
        "resize": case.resize,
        "runner": case.runner,
    }


def load_generator(spec: str):
    module, _, name = spec.partition(":")
    if not name:
        raise SystemExit(f"--generator takes MODULE:FUNCTION, got {spec!r}")
    return getattr(importlib.import_module(module), name)


def _kernels(names):
    import opaque_ops as oo

    out = []
    for n in names or ():
        if n == "all":
            out.append(oo.kernels.all_kernels())
        elif n == "mediapipe":
            out.append(oo.kernels.mediapipe())
        else:
            out.append(oo.kernels.kernel(n))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--generator", default=None, help="MODULE:FUNCTION (default: the byte mutator)")
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--memory-limit", default="2G")
    ap.add_argument("--save-dir", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    from opaque_ops.isolate import Worker
    from opaque_ops.isolate.run import run_models

    gen = load_generator(args.generator) if args.generator else byte_mutator
    if args.save_dir:
        args.save_dir.mkdir(parents=True, exist_ok=True)

    def cases():
        for i in range(args.start, args.start + args.n):
            item = gen(args.seed, i)
            data, options = item if isinstance(item, tuple) else (item, {})
            options = dict(options)
            kernels = options.pop("kernels", None)
            if kernels:
                options["custom_ops"] = _kernels(kernels)
            yield data, options

    t0 = time.monotonic()
    last = [t0]

    def on_outcome(index, data, options, outcome):
        i = args.start + index
        if outcome.status in ("crash", "timeout", "error") and args.save_dir:
            stem = args.save_dir / f"{outcome.status}-{args.seed}-{i}"
            stem.with_suffix(".tflite").write_bytes(data)
            stem.with_suffix(".txt").write_text(
                f"case {i} (seed {args.seed}), options {dict((k, v) for k, v in options.items() if k != 'custom_ops')}\n"
                f"{outcome.status} at {outcome.stage}\n\n{outcome.error}\n"
                + (f"\n--- worker stderr ---\n{outcome.error.stderr}\n" if getattr(outcome.error, "stderr", "") else "")
            )
        now = time.monotonic()
        if now - last[0] > 10:
            last[0] = now
            print(f"[{index + 1}/{args.n}] {(index + 1) / (now - t0):.0f} cases/s", file=sys.stderr, flush=True)

    worker = Worker(memory_limit=args.memory_limit, forward_stderr=False)
    try:
        summary = run_models(cases(), worker=worker, on_outcome=on_outcome, timeout=args.timeout)
    finally:
        worker.close()
    counts = summary.counts
    report = {
        "generator": args.generator or "tools/fuzz_isolated.py:byte_mutator",
        "seed": args.seed,
        "start": args.start,
        "cases": summary.cases,
        "ok": counts.get("ok", 0),
        "rejected": counts.get("rejected", 0),
        "child_crashes_caught": counts.get("crash", 0),
        "timeouts": counts.get("timeout", 0),
        "other_errors": counts.get("error", 0),
        "caller_crashes": 0,
        "worker_starts": summary.worker_starts,
        "seconds": round(summary.seconds, 1),
        "reasons": dict(sorted(summary.reasons.items(), key=lambda kv: -kv[1])),
        "findings": [
            {"case": args.start + i, "status": o.status, "stage": o.stage, "reason": o.reason}
            for i, o in summary.findings[:200]
        ],
    }
    print(json.dumps({k: v for k, v in report.items() if k not in ("reasons", "findings")}, indent=2))
    top = list(report["reasons"].items())[:25]
    print("top outcomes other than ok:")
    for k, v in top:
        print(f"  {v:7d}  {k}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
