"""MediaPipe's selfie segmentation end to end: opaque_ops against ai-edge-litert and MediaPipe itself.

    python bench/bench_selfie.py [--quick] [--json] [--no-mediapipe] [--mediapipe-python PATH]

End to end means one 256x256 RGB uint8 frame in, the float mask out:
``img * (1/255)`` into the input tensor, invoke, the mask copied out (MediaPipe
does its own equivalent of each step).  One thread everywhere.  Rows:

- opaque_ops, the default: XNNPACK runs the builtins, our C kernel
  Convolution2DTransposeBias (``custom_ops=[kernels.mediapipe()]``);
- ai-edge-litert: XNNPACK runs the builtins and its own copy of the op;
- MediaPipe 0.10.14's own runtime: ``solutions.selfie_segmentation`` on the
  same model file, in a separate venv (it needs numpy<2), driven through
  bench/mediapipe_peer.py.  The venv is created on first use (about 25 s,
  400 MB) under ``$XDG_CACHE_HOME/opaque_ops-bench`` (default
  ``~/.cache/opaque_ops-bench``); ``OPAQUE_OPS_BENCH_MEDIAPIPE=off`` skips
  it, ``OPAQUE_OPS_BENCH_MEDIAPIPE=/path/to/python`` uses an existing one;
- opaque_ops with ``use_xnnpack=True`` and no kernel (XNNPACK's copy of the
  op, as ai-edge-litert does), and with ``use_xnnpack=False``.

All implementations are interleaved round by round (MediaPipe's rounds are
timed inside its process); figures are medians over rounds.  Also: the op
alone, our kernel against its numpy reference and XNNPACK's copy.  Numbers
only, no assertions; the CPU's features are printed with them.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import opaque_ops as oo
import opaque_ops.kernels as K
from opaque_ops.model import ModelBuilder, read_model

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the repository root: the tests package's helpers
from _timing import median_time  # noqa: E402
from tests.helpers.synthetic_images import synthetic_person  # noqa: E402
from tests.helpers.transpose_conv import reference  # noqa: E402

MEDIAPIPE = "mediapipe==0.10.14"
# What MediaPipe's solutions API imports.  Its declared dependencies also pull
# jax, jaxlib and sounddevice (about 600 MB more), which this path never
# imports; the headless OpenCV build provides the same cv2 module.
MEDIAPIPE_DEPS = [
    "numpy<2",
    "protobuf>=4.25.3,<5",
    "absl-py",
    "attrs",
    "flatbuffers",
    "opencv-contrib-python-headless",
    "matplotlib",
]
ENV_MEDIAPIPE = "OPAQUE_OPS_BENCH_MEDIAPIPE"


# ------------------------------------------------------------------ machine

from opaque_ops.build.cpu import cpu_summary  # noqa: E402,F401  (one definition; bench_kernels imports it from here)

# ------------------------------------------------------------------ MediaPipe's own runtime


def _cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "opaque_ops-bench"


def mediapipe_python(create: bool = True) -> tuple[str | None, str]:
    """The Python of a venv with MediaPipe 0.10.14, creating it if asked: (path or None, note)."""
    setting = os.environ.get(ENV_MEDIAPIPE, "")
    if setting.lower() in ("0", "off", "no", "none"):
        return None, f"skipped (${ENV_MEDIAPIPE}={setting})"
    if setting:
        return (setting, "given") if os.path.exists(setting) else (None, f"${ENV_MEDIAPIPE}: {setting} not found")
    venv = _cache_root() / f"mediapipe-0.10.14-py{sys.version_info[0]}{sys.version_info[1]}"
    py, done = venv / "bin" / "python", venv / ".complete"
    if done.exists() and py.exists():
        return str(py), f"cached venv {venv}"
    if not create:
        return None, "no MediaPipe venv (run bench/bench_selfie.py once to create it)"
    print(f"# creating a MediaPipe venv in {venv} (once; about 25 s)", file=sys.stderr, flush=True)
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [str(py), "-m", "pip", "install", "-q", "--no-deps", MEDIAPIPE],
        [str(py), "-m", "pip", "install", "-q", *MEDIAPIPE_DEPS],
    ]
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
            return None, f"could not install {MEDIAPIPE} ({' '.join(cmd[2:5])}): {tail[0][:160]}"
    done.write_text(MEDIAPIPE + "\n")
    return str(py), f"new venv {venv}"


class MediaPipePeer:
    """MediaPipe's selfie segmentation in its own process (bench/mediapipe_peer.py)."""

    def __init__(self, python: str, image: np.ndarray):
        self._err = tempfile.TemporaryFile()
        env = dict(os.environ, GLOG_minloglevel="2", TF_CPP_MIN_LOG_LEVEL="2")
        self._proc = subprocess.Popen(
            [python, str(HERE / "mediapipe_peer.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            env=env,
        )
        self.info = self._answer()
        self._dir = tempfile.mkdtemp(prefix="oo_mp_peer_")
        path = os.path.join(self._dir, "image.npy")
        np.save(path, image)
        self._ask(f"image {path}")

    def _answer(self) -> dict:
        line = self._proc.stdout.readline()
        if not line:
            self._err.seek(0)
            tail = self._err.read().decode(errors="replace").strip().splitlines()[-3:]
            raise RuntimeError("MediaPipe peer exited: " + " | ".join(tail))
        return json.loads(line)

    def _ask(self, line: str) -> dict:
        self._proc.stdin.write(line + "\n")
        self._proc.stdin.flush()
        ans = self._answer()
        if "error" in ans:
            raise RuntimeError(ans["error"])
        return ans

    def seconds(self, n: int) -> float:
        """Wall time of ``n`` frames, measured inside MediaPipe's process."""
        return self._ask(f"run {n}")["seconds"]

    def mask(self) -> np.ndarray:
        path = os.path.join(self._dir, "mask.npy")
        self._ask(f"mask {path}")
        return np.load(path)

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._proc.stdin.write("quit\n")
                self._proc.stdin.close()
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
        self._err.close()


# ------------------------------------------------------------------ end to end


def selfie_path() -> Path | None:
    spec = importlib.util.find_spec("mediapipe")
    if spec is None or not spec.submodule_search_locations:
        return None
    return (
        Path(list(spec.submodule_search_locations)[0])
        / "modules"
        / "selfie_segmentation"
        / "selfie_segmentation.tflite"
    )


def frame_fn(it, image: np.ndarray):
    """One frame through a tflite_runtime-style interpreter: normalise, set, invoke, get the mask."""
    it.allocate_tensors()
    i_in, i_out = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
    scale = np.float32(1 / 255)

    def frame():
        it.set_tensor(i_in, (image.astype(np.float32) * scale)[None])
        it.invoke()
        return it.get_tensor(i_out)[0, :, :, 0]

    return frame


def end_to_end_fns(data: bytes, image: np.ndarray) -> dict:
    """The in-process implementations, by row name."""
    fns = {
        "opaque_ops": frame_fn(oo.Interpreter(model_content=data, custom_ops=[K.mediapipe()], num_threads=1), image),
        "opaque_ops_xnnpack_op": frame_fn(oo.Interpreter(model_content=data, num_threads=1, use_xnnpack=True), image),
        "opaque_ops_no_xnnpack": frame_fn(
            oo.Interpreter(model_content=data, custom_ops=[K.mediapipe()], num_threads=1, use_xnnpack=False), image
        ),
    }
    try:
        from ai_edge_litert.interpreter import Interpreter as LiteRT
    except ImportError:
        pass
    else:
        fns["ai_edge_litert"] = frame_fn(LiteRT(model_content=data, num_threads=1), image)
    return fns


def bench_end_to_end(quick: bool = False, mediapipe: bool = True) -> dict:
    """Milliseconds per frame of every implementation, interleaved; plus mask agreement and notes."""
    path = selfie_path()
    if path is None:
        return {"error": "mediapipe (for the model file) is not installed"}
    data = path.read_bytes()
    image = np.round(synthetic_person(256, 256)[0] * 255).astype(np.uint8)
    fns = end_to_end_fns(data, image)
    out: dict = {"cpu": cpu_summary(), "notes": {}}
    peer = None
    if mediapipe:
        py, note = mediapipe_python()
        out["notes"]["mediapipe"] = note
        if py is not None:
            try:
                peer = MediaPipePeer(py, image)
                out["notes"]["mediapipe"] = f"{note}; mediapipe {peer.info['mediapipe']}, numpy {peer.info['numpy']}"
            except (RuntimeError, OSError, ValueError) as exc:
                out["notes"]["mediapipe"] = f"{note}; failed: {exc}"
    try:
        masks = {k: f() for k, f in fns.items()}
        if peer is not None:
            masks["mediapipe"] = peer.mask()
        out["max_abs_diff_vs_opaque_ops"] = {
            k: float(np.abs(m - masks["opaque_ops"]).max()) for k, m in masks.items() if k != "opaque_ops"
        }
        n, rounds = (2, 3) if quick else (5, 9)
        for f in fns.values():
            for _ in range(2):
                f()
        if peer is not None:
            peer.seconds(2)
        samples: dict = {k: [] for k in list(fns) + (["mediapipe"] if peer else [])}
        keys = list(samples)
        for r in range(rounds):
            for k in keys[r % len(keys) :] + keys[: r % len(keys)]:
                if k == "mediapipe":
                    samples[k].append(peer.seconds(n) / n * 1e3)
                    continue
                f = fns[k]
                t0 = time.perf_counter()
                for _ in range(n):
                    f()
                samples[k].append((time.perf_counter() - t0) / n * 1e3)
        out["ms"] = {k: statistics.median(v) for k, v in samples.items()}
    finally:
        if peer is not None:
            peer.close()
    return out


# ------------------------------------------------------------------ the op alone


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


def interp_fn(model, x, kernel=True, **kw):
    """``invoke`` of an interpreter on ``model`` with input ``x``; our kernels unless ``kernel=False``."""
    it = oo.Interpreter(model_content=model, custom_ops=[K.mediapipe()] if kernel else [], **kw)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    return it.invoke


def bench_op_alone(runs: int, warmup: int) -> list:
    rows = []
    path = selfie_path()
    if path is None:
        return rows
    m, in_shape, w, bias = op_model(path)
    xo = np.abs(np.random.default_rng(1).standard_normal(in_shape)).astype(np.float32)
    t_op = median_time(interp_fn(m, xo, use_xnnpack=False), runs, warmup)
    t_opx = median_time(interp_fn(m, xo, kernel=False, use_xnnpack=True), runs, warmup)
    t_np = median_time(lambda: reference(xo, w, bias, 1, 2, 2), max(3, runs // 3), 1)
    case = f"Convolution2DTransposeBias alone {list(in_shape)}"
    rows.append(
        {
            "case": case,
            "baseline": "numpy reference",
            "baseline_ms": t_np * 1e3,
            "other": "our C kernel",
            "other_ms": t_op * 1e3,
            "ratio": t_np / t_op,
        }
    )
    rows.append(
        {
            "case": case,
            "baseline": "our C kernel",
            "baseline_ms": t_op * 1e3,
            "other": "XNNPACK's copy",
            "other_ms": t_opx * 1e3,
            "ratio": t_op / t_opx,
        }
    )
    return rows


ROW_NAMES = {
    "opaque_ops": "opaque_ops default (XNNPACK + our kernel)",
    "ai_edge_litert": "ai-edge-litert (XNNPACK + its op)",
    "mediapipe": "MediaPipe 0.10.14 solution",
    "opaque_ops_xnnpack_op": "opaque_ops, use_xnnpack=True, no kernel",
    "opaque_ops_no_xnnpack": "opaque_ops, use_xnnpack=False",
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=30, help="runs of the op-alone timing")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-mediapipe", action="store_true", help="leave MediaPipe's runtime out")
    ap.add_argument("--mediapipe-python", help=f"a Python with {MEDIAPIPE} (default: a cached venv)")
    args = ap.parse_args(argv)
    if args.mediapipe_python:
        os.environ[ENV_MEDIAPIPE] = args.mediapipe_python
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    e2e = bench_end_to_end(args.quick, mediapipe=not args.no_mediapipe)
    ops = bench_op_alone(5 if args.quick else args.runs, 2 if args.quick else 5)
    if args.json:
        print(json.dumps({"end_to_end": e2e, "op_alone": ops}, indent=2))
        return
    if "error" in e2e:
        sys.exit(e2e["error"])
    print(f"CPU: {e2e['cpu']}")
    for k, v in e2e["notes"].items():
        print(f"{k}: {v}")
    base = e2e["ms"]["opaque_ops"]
    print("\nselfie_segmentation.tflite end to end, one 256x256 frame, 1 thread; median ms per frame")
    print(f"{'implementation':46s} {'ms':>8s} {'vs ours':>8s} {'max|mask - ours|':>17s}")
    for k, ms in e2e["ms"].items():
        diff = e2e["max_abs_diff_vs_opaque_ops"].get(k)
        print(f"{ROW_NAMES.get(k, k):46s} {ms:8.3f} {ms / base:8.2f} {'' if diff is None else f'{diff:17.2e}'}")
    print(f"\n{'case':52s} {'baseline':>16s} {'ms':>9s} {'other':>14s} {'ms':>9s} {'ratio':>7s}")
    for r in ops:
        print(
            f"{r['case']:52s} {r['baseline']:>16s} {r['baseline_ms']:9.3f} {r['other']:>14s} "
            f"{r['other_ms']:9.3f} {r['ratio']:7.2f}"
        )


if __name__ == "__main__":
    main()
