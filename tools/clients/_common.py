"""What the client drivers share: arguments, the reference runtime, saving results.

A driver is a small *application* of one third-party package.  It runs in
that package's own venv (made by ``tools/run_clients.py``), twice:

- ``--runtime litert``: the reference.  The package runs on ai-edge-litert;
  where it imports ``tflite_runtime`` or ``tensorflow`` (which have no
  numpy-2 / lightweight build to install), those names are pointed at
  ``ai_edge_litert.interpreter`` here, in the driver, before the package is
  imported.
- ``--runtime opaque_ops``: started as ``python -m opaque_ops.compat DRIVER``,
  so every runtime import of the package resolves to opaque_ops.

The package's own code is never changed.  Each run saves its results (numpy
arrays) and which ``Interpreter`` class the package actually used, so the
comparison cannot compare a runtime with itself.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import types
from pathlib import Path

import numpy as np


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runtime", choices=["litert", "opaque_ops"], required=True)
    ap.add_argument("--inputs", required=True, help="directory with the shared inputs")
    ap.add_argument("--out", required=True, help="results: OUT.npz and OUT.json")
    args = ap.parse_args(argv)
    if args.runtime == "opaque_ops":
        import opaque_ops.compat

        if not opaque_ops.compat.installed():
            sys.exit("run the opaque_ops pass as `python -m opaque_ops.compat DRIVER ...`")
    return args


def reference_aliases(*, tflite_runtime: bool = False, tensorflow: bool = False) -> None:
    """Point ``tflite_runtime.interpreter`` / ``tensorflow.lite`` at ai-edge-litert (reference runs only)."""
    import ai_edge_litert.interpreter as litert

    if tflite_runtime:
        pkg = types.ModuleType("tflite_runtime")
        pkg.__path__ = []
        pkg.interpreter = litert
        sys.modules["tflite_runtime"] = pkg
        sys.modules["tflite_runtime.interpreter"] = litert
    if tensorflow:
        tf = types.ModuleType("tensorflow")
        tf.__path__ = []
        tf.lite = types.SimpleNamespace(
            Interpreter=litert.Interpreter, experimental=types.SimpleNamespace(load_delegate=litert.load_delegate)
        )
        sys.modules["tensorflow"] = tf


def interpreter_kind(interpreter) -> str:
    """``module.Class`` of the interpreter object the package created."""
    cls = type(interpreter)
    return f"{cls.__module__}.{cls.__qualname__}"


class Timer:
    """Wall time of the calls a driver times, summed (``with timer: ...``)."""

    def __init__(self):
        self.seconds = 0.0
        self.calls = 0

    def __enter__(self):
        self._t = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds += time.perf_counter() - self._t
        self.calls += 1


def save(out: str, arrays: dict, *, interpreter: str, timer: Timer | None = None, info=None) -> None:
    """Write ``OUT.npz`` (the results) and ``OUT.json`` (what ran, how long, notes)."""
    np.savez(out + ".npz", **{k: np.asarray(v) for k, v in arrays.items()})
    meta = {"interpreter": interpreter, "info": info or {}, "tflite": _runtime()}
    if timer is not None:
        meta["seconds"] = timer.seconds
        meta["calls"] = timer.calls
    Path(out + ".json").write_text(json.dumps(meta, indent=1))


def _runtime() -> str:
    """Which TFLite ran: the opaque_ops runtime's version and file, or ai-edge-litert's version."""
    compat = sys.modules.get("opaque_ops.compat")
    if compat is not None and compat.installed():
        import opaque_ops

        info = opaque_ops.runtime_info()
        return f"{info.version} ({Path(info.path).name})"
    import ai_edge_litert

    return f"ai-edge-litert {ai_edge_litert.__version__}"


def read_wav(path) -> np.ndarray:
    """16-bit mono PCM samples of a WAV file."""
    import wave

    with wave.open(str(path), "rb") as w:
        assert w.getsampwidth() == 2 and w.getnchannels() == 1, path
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").copy()
