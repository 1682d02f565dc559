"""Does invoke() release the GIL?  Two threads on two interpreters of a real model.

    python tools/thread_scaling.py [--iters 40] [--model embedding_model.tflite]

Runs openWakeWord's embedding model (from the pyopen-wakeword wheel) with
one interpreter per thread, single-threaded kernels (num_threads=1) and
XNNPACK off and on.  It times N invokes on one thread, then N invokes on each
of two threads at once.  If invoke holds the GIL the two-thread run takes
twice as long (ratio ~1.0 of throughput); if it releases it, the ratio
approaches the number of free cores (2 here).  Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

import opaque_ops as oo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from bench_threads import _run_threads  # noqa: E402  (the benchmark's own thread runner)


def model_path(name: str) -> Path:
    spec = importlib.util.find_spec("pyopen_wakeword")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pyopen-wakeword is not installed (pip install pyopen-wakeword)")
    return Path(list(spec.submodule_search_locations)[0]) / "models" / name


def make(path: Path, xnnpack: bool):
    it = oo.Interpreter(model_path=str(path), num_threads=1, use_xnnpack=xnnpack)
    it.allocate_tensors()
    d = it.get_input_details()[0]
    x = np.random.default_rng(0).standard_normal(d["shape"]).astype(d["dtype"])
    it.set_tensor(d["index"], x)
    it.invoke()
    return it


def run_threads(its, iters: int) -> float:
    """Wall time for each interpreter in ``its`` to invoke ``iters`` times, each in its own thread."""
    return _run_threads([it.invoke for it in its], iters)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--model", default="embedding_model.tflite")
    args = ap.parse_args(argv)
    path = model_path(args.model)
    for xnnpack in (False, True):
        its = [make(path, xnnpack) for _ in range(2)]
        one = min(run_threads(its[:1], args.iters) for _ in range(3))
        two = min(run_threads(its, args.iters) for _ in range(3))
        # Throughput ratio: invokes per second with two threads over one.
        ratio = (2 * args.iters / two) / (args.iters / one)
        print(
            json.dumps(
                {
                    "model": args.model,
                    "xnnpack": xnnpack,
                    "iters_per_thread": args.iters,
                    "one_thread_s": round(one, 3),
                    "two_threads_s": round(two, 3),
                    "ms_per_invoke": round(one / args.iters * 1e3, 2),
                    "throughput_ratio": round(ratio, 2),
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
