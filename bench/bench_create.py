"""Creating an interpreter: ``Interpreter(model_path=...)`` + ``allocate_tensors()``, against ai-edge-litert.

    python bench/bench_create.py [--quick] [--json]

On MediaPipe's face_detection_short_range and selfie_segmentation models (read
from the mediapipe 0.10.14 wheel's files; mediapipe is never imported), with
``custom_ops=[opaque_ops.kernels.mediapipe()]`` (the selfie model's
Convolution2DTransposeBias) and XNNPACK on, as both runtimes do by default.

Real clients create their interpreters once, at start-up, in a fresh process,
so the main rows time the *first* creation in a new Python process, after the
imports (and, for opaque_ops, after the kernel library is loaded):

- ``new process, verdict cache empty``: opaque_ops reads and checks the whole
  model (the first start ever on a machine; the process gets a new, empty
  ``$OPAQUE_OPS_VERDICT_CACHE`` directory);
- ``new process, verdict on disk``: every later start (the directory holds the
  record the first start wrote, see opaque_ops.model.cache);
- ai-edge-litert's first creation in a new process, as the peer of both;
- for information, the floor under opaque_ops: the same first creation driven
  through its C binding alone (the same kernels and XNNPACK, no model checks).

And what an app's start-up pays in all, in a new process with the verdict
cache empty (``start-up`` rows): from just after ``import numpy`` (both need
it, and it costs either the same) to the allocated interpreter, the imports
included: ``import opaque_ops``, ``from opaque_ops import Interpreter``,
``opaque_ops.kernels.mediapipe()`` and the creation, against
``from ai_edge_litert.interpreter import Interpreter`` and its creation.
These children start from a bare ``python -S -c`` (the bench's own imports
would otherwise be loaded already), with the site-packages directories (and,
for opaque_ops, this checkout) put on ``sys.path`` by hand: without ``-S``,
an editable install's import hook would load ``pathlib`` and more before the
clock starts, which an installed package does not.  ``PYTHONDONTWRITEBYTECODE``
is unset: an installed package has its ``.pyc`` files, and the first child of
a run writes any that are missing (it is not timed).  opaque_ops' kernels come
from its compile cache here, as in any checkout or source install (a platform
wheel loads them prebuilt instead).

Then, inside one process: ``model seen before`` (the verdict kept in memory:
an app creating an interpreter per stream) against ai-edge-litert's repeated
creation, and, for information, ``checks every time`` (memory and disk
verdicts off: the cost of reading and checking alone).

Each round runs every variant once, so machine load hits all alike; figures
are medians over rounds (wall time, and CPU time of the process in the JSON).
Numbers only, no assertions.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import site
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = {
    "face_detection_short_range": ("face_detection", "face_detection_short_range.tflite"),
    "selfie_segmentation": ("selfie_segmentation", "selfie_segmentation.tflite"),
}
ENV_VERDICTS = "OPAQUE_OPS_VERDICT_CACHE"


def model_paths() -> dict[str, Path]:
    """The two models inside the installed mediapipe wheel ({} if it is not installed)."""
    spec = importlib.util.find_spec("mediapipe")
    if spec is None or not spec.submodule_search_locations:
        return {}
    base = Path(list(spec.submodule_search_locations)[0]) / "modules"
    return {name: base / d / f for name, (d, f) in MODELS.items() if (base / d / f).is_file()}


# ------------------------------------------------------------------ child: a whole start-up
# Run as ``python -c``, so that nothing but what the start-up itself imports
# is loaded when the clock starts (numpy aside, see the module doc).
START_BODIES = {
    "ours": """
import opaque_ops as oo
from opaque_ops import Interpreter
kernels = oo.kernels.mediapipe()
t_kernels = time.perf_counter()
it = Interpreter(model_path=path, custom_ops=[kernels])
""",
    "litert": """
from ai_edge_litert.interpreter import Interpreter
t_kernels = time.perf_counter()
it = Interpreter(model_path=path)
""",
}
_START_FRAME = """
import sys
sys.path[:0] = sys.argv[2:]
import time
import numpy
path = sys.argv[1]
w0, c0 = time.perf_counter(), time.process_time()
{body}
it.allocate_tensors()
w1, c1 = time.perf_counter(), time.process_time()
# Then the process's first invoke (zeros in), timed on its own: it may pay
# for imports of its own (the Ctrl-C watcher's).
for d in it.get_input_details():
    it.set_tensor(d["index"], numpy.zeros(d["shape"], d["dtype"]))
w2 = time.perf_counter()
it.invoke()
w3 = time.perf_counter()
print('{{"wall_ms": %r, "cpu_ms": %r, "imports_ms": %r, "invoke_ms": %r}}' % ((w1 - w0) * 1e3, (c1 - c0) * 1e3, (t_kernels - w0) * 1e3, (w3 - w2) * 1e3))
"""


def _child_env() -> dict:
    """This environment for a child, less ``PYTHONDONTWRITEBYTECODE``.

    An installed package has its ``.pyc`` files; without them a module that
    is imported on first use (the model rules, at a first start) would be
    compiled from source inside the timed creation.  The first child of a
    run writes what is missing, untimed.
    """
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def start_command(which: str, code: str, path: Path, where: tuple[str, str]) -> list[str]:
    """The command line of a start-up child running ``code`` on model ``path``, as ``where`` names it.

    ``("checkout", source tree)``: ``python -S`` with the tree (for
    opaque_ops) and the site-packages put on the path by hand (see the
    module doc); ``("python", interpreter)``: that environment's Python.
    """
    kind, value = where
    if kind == "checkout":
        paths = ([value] if which == "ours" else []) + site.getsitepackages()
        return [sys.executable, "-S", "-c", code, str(path), *paths]
    return [value, "-c", code, str(path)]


def start_env(verdicts: str | None) -> dict:
    """A start-up child's environment: no ``PYTHONPATH`` (what it imports is what ``where`` names), the verdict cache given."""
    env = _child_env()
    env.pop("PYTHONPATH", None)
    if verdicts is not None:
        env[ENV_VERDICTS] = verdicts
    return env


def start_up(
    which: str, path: Path, verdicts: str | None = None, where: tuple[str, str] | None = None, cwd: str | None = None
) -> dict:
    """One new process's whole start-up (imports, kernels, first creation); its times in ms.

    ``where``: ``("checkout", source tree)`` (default: this one), run with
    ``python -S`` and the site-packages put on the path by hand (see the
    module doc), or ``("python", interpreter)`` of an environment where
    opaque_ops is installed (``bench_start.py --python``).  The child gets
    no ``PYTHONPATH``: what it imports is what ``where`` names.
    """
    where = where or ("checkout", str(HERE.parent))
    code = _START_FRAME.format(body=START_BODIES[which].strip())
    cmd = start_command(which, code, path, where)
    out = subprocess.run(cmd, env=start_env(verdicts), cwd=cwd, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"{which} start-up ({where[1]}) failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ child: one first creation
def _child(which: str, path: str) -> dict:
    if which == "litert":
        from ai_edge_litert.interpreter import Interpreter

        def make():
            return Interpreter(model_path=path)
    elif which == "native":
        # The TFLite C library alone, driven as the Interpreter drives it
        # (same kernels, same aliases, XNNPACK), with no model checks: the
        # floor opaque_ops' runtime sets.
        import opaque_ops as oo
        from opaque_ops import _native
        from opaque_ops.interpreter import xnnpack as _xnnpack

        kernels = oo.kernels.mediapipe()
        kernels.libraries  # noqa: B018  (loads every kernel file, and the runtime, before the clock: see below)

        class make:
            def __init__(self):
                with open(path, "rb") as f:
                    data = f.read()
                names = {n.decode() for _, n in _xnnpack._custom_code_fields(data)} & _xnnpack.XNNPACK_CUSTOM_OPS
                aliases = {n: n + _xnnpack.ALIAS_SUFFIX for n in names}
                self.model = _native.NativeModel(_xnnpack.alias_model(data, aliases))
                self.native = _native.NativeInterpreter(
                    self.model, kernels.operators(), use_xnnpack=True, aliases=aliases
                )

            def allocate_tensors(self):
                assert self.native.allocate() == 0
    else:
        import opaque_ops as oo
        from opaque_ops import Interpreter

        kernels = oo.kernels.mediapipe()
        # These rows time the creation after the imports and the kernels'
        # load.  A bundle loads its files when a model first needs them (and
        # the runtime with the first): load them all here, as mediapipe()
        # did before, so that the rows stay the creation alone.  The start-up
        # rows (start_up) time what an app pays in all.
        kernels.libraries  # noqa: B018

        def make():
            return Interpreter(model_path=path, custom_ops=[kernels])

    c0, w0 = time.process_time(), time.perf_counter()
    it = make()
    it.allocate_tensors()
    w1, c1 = time.perf_counter(), time.process_time()
    del it
    return {"wall_ms": (w1 - w0) * 1e3, "cpu_ms": (c1 - c0) * 1e3}


def first_creation(which: str, path: Path, verdicts: str | None = None) -> dict:
    """Run one child process; its first create+allocate time."""
    env = _child_env()
    if verdicts is not None:
        env[ENV_VERDICTS] = verdicts
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", which, str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if out.returncode != 0:
        raise RuntimeError(f"create child ({which}) failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ parent
@contextlib.contextmanager
def _verdicts_off():
    """No verdicts kept on disk in this process for a while (with cache.clear(): none at all)."""
    saved = os.environ.get(ENV_VERDICTS)
    os.environ[ENV_VERDICTS] = "off"
    try:
        yield
    finally:
        if saved is None:
            del os.environ[ENV_VERDICTS]
        else:
            os.environ[ENV_VERDICTS] = saved


def bench(quick: bool = False) -> dict:
    """Medians in ms per model: new-process rows (wall and CPU) and in-process rows."""
    from ai_edge_litert.interpreter import Interpreter as Ref

    import opaque_ops as oo
    from opaque_ops.model import cache

    sys.path.insert(0, str(HERE))
    from _timing import median_time

    rounds = 5 if quick else 15
    runs = 7 if quick else 31
    kernels = oo.kernels.mediapipe()
    out = {}
    for name, path in model_paths().items():
        r: dict[str, list] = {
            k: [] for k in ("cold", "disk", "native_first", "litert_first", "start_ours", "start_litert")
        }
        with tempfile.TemporaryDirectory(prefix="oo_verdicts_") as warm:
            first_creation("ours", path, warm)  # the first start: writes the record
            start_up("ours", path, warm)  # writes any missing .pyc
            start_up("litert", path)
            for _ in range(rounds):
                with tempfile.TemporaryDirectory(prefix="oo_verdicts_") as empty:
                    r["cold"].append(first_creation("ours", path, empty))
                r["disk"].append(first_creation("ours", path, warm))
                r["native_first"].append(first_creation("native", path))
                r["litert_first"].append(first_creation("litert", path))
                with tempfile.TemporaryDirectory(prefix="oo_verdicts_") as empty:
                    r["start_ours"].append(start_up("ours", path, empty))
                r["start_litert"].append(start_up("litert", path))
        res = {
            f"{k}_{unit}": statistics.median(x[f"{unit}_ms"] for x in v)
            for k, v in r.items()
            for unit in ("wall", "cpu", "imports")
            if f"{unit}_ms" in v[0]
        }

        def ours():
            oo.Interpreter(model_path=str(path), custom_ops=[kernels]).allocate_tensors()

        def checks_every_time():
            cache.clear()
            ours()

        def ref():
            Ref(model_path=str(path)).allocate_tensors()

        t = {"memory": [], "no_cache": [], "litert": []}
        for _ in range(3):  # interleaved, so that load hits all three
            t["memory"].append(median_time(ours, runs) * 1e3)
            with _verdicts_off():
                t["no_cache"].append(median_time(checks_every_time, runs) * 1e3)
            t["litert"].append(median_time(ref, runs) * 1e3)
        cache.clear()
        res.update({k: min(v) for k, v in t.items()})
        res["rounds"] = rounds
        out[name] = res
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", nargs=2, metavar=("WHICH", "MODEL"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(*args.child)))
        return
    r = bench(args.quick)
    if args.json:
        print(json.dumps(r, indent=1))
        return
    for name, v in r.items():
        print(f"{name}:")
        for k, val in v.items():
            print(f"  {k:18s} {val:8.2f}" if isinstance(val, float) else f"  {k:18s} {val}")


if __name__ == "__main__":
    main()
