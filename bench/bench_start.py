"""An app's whole start-up in a new process, for one or more Pythons, against ai-edge-litert's.

    python bench/bench_start.py [--python PY]... [--checkout DIR]... [--rounds N]

What ``bench_create.py``'s start-up rows time (from just after ``import
numpy`` to the allocated interpreter: ``import opaque_ops``, ``from opaque_ops
import Interpreter``, ``opaque_ops.kernels.mediapipe()``, ``Interpreter(...)``
and ``allocate_tensors()``; for ai-edge-litert its import and creation), on
MediaPipe's face_detection_short_range and selfie_segmentation, with the
verdict cache empty (a first start) and with the model's record on disk (every
later start); and, apart, the process's first ``invoke()`` after it.

Without ``--python`` or ``--checkout``, opaque_ops is this checkout, run as
``bench_create.py`` runs it (``python -S`` with the site-packages put on the
path by hand, its kernels from the compile cache); each ``--checkout`` names
another source tree run that way (two commits compared in the same rounds).  Each ``--python`` names the interpreter of
another environment where opaque_ops is installed, typically a venv holding a
platform wheel (prebuilt kernels and fast calls), which is what a user who
ran ``pip install`` starts::

    OPAQUE_OPS_WHEEL_ARCH=x86_64 pip wheel --no-deps -w dist .
    python -m venv /tmp/wheel-env
    /tmp/wheel-env/bin/pip install dist/opaque_ops-*x86_64.whl numpy pymicro-wakeword ai-edge-litert
    python bench/bench_start.py --python /tmp/wheel-env/bin/python

Name two environments (one per build) to compare them in the same rounds.
ai-edge-litert runs from the first environment given (or from this one for
checkouts).  Each
round runs every variant once, interleaved, so that machine load hits all
alike; medians over rounds.  Children run in an empty working directory
(nothing there can shadow a module) and without ``PYTHONDONTWRITEBYTECODE``
(an installed package has its ``.pyc`` files; the first, untimed, start of
each variant writes any that are missing).  Numbers only, no assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_create import model_paths, start_up  # noqa: E402


def bench(variants: list[tuple[str, str]], rounds: int) -> dict:
    """Medians in ms: ``{model: {variant: {"wall", "imports"}}}``."""
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="oo_start_") as tmp:
        cwd = os.path.join(tmp, "cwd")
        os.mkdir(cwd)
        for name, model in model_paths().items():
            warm = {v: tempfile.mkdtemp(dir=tmp) for v in variants}
            for v in variants:
                start_up("ours", model, warm[v], where=v, cwd=cwd)  # writes the record (and any missing .pyc)
            start_up("litert", model, None, where=variants[0], cwd=cwd)
            runs: dict[str, list] = {}
            for _ in range(rounds):
                for v in variants:
                    label = v[1]
                    runs.setdefault(f"{label}: first start", []).append(
                        start_up("ours", model, tempfile.mkdtemp(dir=tmp), where=v, cwd=cwd)
                    )
                    runs.setdefault(f"{label}: later start", []).append(
                        start_up("ours", model, warm[v], where=v, cwd=cwd)
                    )
                runs.setdefault("ai-edge-litert", []).append(
                    start_up("litert", model, None, where=variants[0], cwd=cwd)
                )
            out[name] = {
                k: {u: statistics.median(r[f"{u}_ms"] for r in v) for u in ("wall", "imports", "invoke")}
                for k, v in runs.items()
            }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", action="append", default=[], help="an environment's interpreter (repeatable)")
    ap.add_argument("--checkout", action="append", default=[], help="another source tree (repeatable)")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not model_paths():
        sys.exit("mediapipe==0.10.14 is not installed (its wheel carries the models)")
    variants = [("python", p) for p in args.python] + [("checkout", str(Path(c).resolve())) for c in args.checkout]
    r = bench(variants or [("checkout", str(HERE.parent))], args.rounds)
    if args.json:
        print(json.dumps(r, indent=1))
        return
    for name, variants in r.items():
        peer = variants["ai-edge-litert"]["wall"]
        print(f"{name} (median of {args.rounds} rounds, ms):")
        for k, v in variants.items():
            print(
                f"  {k:60s} {v['wall']:7.1f}  (imports {v['imports']:5.1f})  {v['wall'] / peer:5.2f}x litert"
                f"   then first invoke {v['invoke']:6.2f} ms"
            )


if __name__ == "__main__":
    main()
