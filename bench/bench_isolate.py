"""Isolated interpreters (isolate=True) against in-process ones, measured in the same run.

    python bench/bench_isolate.py [--quick] [--json out.json]

Measures
- tiny ADD model (5 floats): ``set_tensor + invoke + get_tensor``, isolated
  vs in-process, and the floor of the design: two processes passing a
  request and a reply through the same pair of shared semaphores, with no
  work in between (``semaphore round trip``);
- MediaPipe selfie_segmentation end to end (set the 256x256x3 input,
  invoke, get the mask; our kernels, one thread), isolated vs in-process;
- openWakeWord embedding_model (XNNPACK, one thread), isolated vs in-process;
- start-up: ``Interpreter(..., isolate=True)`` (a fresh worker process)
  until the first result, vs in-process;
- whether the outputs are bit-identical.

Implementations are interleaved round by round so load hits them alike.
Prints numbers and ratios; never asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_models import interleaved, package_dir  # noqa: E402
from bench_selfie import cpu_summary  # noqa: E402

_PONG = r"""
import mmap, sys
sys.path.insert(0, {root!r})
from opaque_ops._native.isolation_helper import SharedSemaphore
m = mmap.mmap({fd}, 4096)
req, rep = SharedSemaphore(m, 0), SharedSemaphore(m, 64)
while True:
    req.wait()
    if m[200]:
        break
    rep.post()
"""


def semaphore_round_trip():
    """A ping function through two shared semaphores to a child process, and its cleanup."""
    import mmap

    from opaque_ops._native.isolation_helper import SharedSemaphore

    fd = os.memfd_create("bench-round-trip")
    os.ftruncate(fd, 4096)
    m = mmap.mmap(fd, 4096)
    req, rep = SharedSemaphore(m, 0, create=True), SharedSemaphore(m, 64, create=True)
    child = subprocess.Popen([sys.executable, "-c", _PONG.format(root=str(HERE.parent), fd=fd)], pass_fds=[fd])
    os.close(fd)
    post, wait = req.post, rep.wait

    def ping():
        post()
        wait()

    def stop():
        m[200] = 1
        req.post()
        child.wait()

    return ping, stop


def _loop(it, x):
    i_in, i_out = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]

    def run():
        it.set_tensor(i_in, x)
        it.invoke()
        return it.get_tensor(i_out)

    return run


def _pair(**kwargs):
    import opaque_ops as oo

    a = oo.Interpreter(**kwargs)
    b = oo.Interpreter(**kwargs, isolate=True)
    for it in (a, b):
        it.allocate_tensors()
    return a, b


def bench_tiny(quick: bool) -> dict:
    from bench_core import tiny_model

    a, b = _pair(model_content=tiny_model())
    x = np.ones(5, np.float32)
    ping, stop = semaphore_round_trip()
    try:
        r = interleaved(
            {"in_process": _loop(a, x), "isolated": _loop(b, x), "semaphore_round_trip": ping},
            2000 if quick else 10000,
            7 if quick else 21,
        )
    finally:
        stop()
        b.close()
    return r


def _model_pair(path, x, **kwargs) -> dict:
    a, b = _pair(model_path=str(path), num_threads=1, **kwargs)
    fa, fb = _loop(a, x), _loop(b, x)
    same = fa().tobytes() == fb().tobytes()
    return {"fns": {"in_process": fa, "isolated": fb}, "same": same, "close": b.close}


def bench_selfie(quick: bool) -> dict:
    import opaque_ops as oo

    mp = package_dir("mediapipe")
    if mp is None:
        return {"error": "mediapipe (for the model file) is not installed"}
    x = np.random.default_rng(4).random((1, 256, 256, 3), dtype=np.float32)
    p = _model_pair(
        mp / "modules" / "selfie_segmentation" / "selfie_segmentation.tflite", x, custom_ops=[oo.kernels.mediapipe()]
    )
    try:
        r = interleaved(p["fns"], 3 if quick else 10, 5 if quick else 15)
    finally:
        p["close"]()
    return {**{k: v / 1e3 for k, v in r.items()}, "bit_identical": p["same"]}  # ms


def bench_embedding(quick: bool) -> dict:
    oww = package_dir("pyopen_wakeword")
    if oww is None:
        return {"error": "pyopen-wakeword is not installed"}
    x = np.random.default_rng(5).standard_normal((1, 76, 32, 1)).astype(np.float32)
    p = _model_pair(oww / "models" / "embedding_model.tflite", x)
    try:
        r = interleaved(p["fns"], 20 if quick else 100, 5 if quick else 15)
    finally:
        p["close"]()
    return {**r, "bit_identical": p["same"]}  # µs


def bench_startup(quick: bool) -> dict:
    """Seconds from Interpreter(...) to the first output, a fresh worker each time."""
    import opaque_ops as oo
    from bench_core import tiny_model

    data, x = tiny_model(), np.ones(5, np.float32)
    out = {}
    for name, kw in (("in_process", {}), ("isolated", {"isolate": True})):
        times = []
        for _ in range(2 if quick else 5):
            t = time.perf_counter()
            it = oo.Interpreter(model_content=data, **kw)
            it.allocate_tensors()
            _loop(it, x)()
            times.append(time.perf_counter() - t)
            it.close()
        out[name] = float(np.median(times))
    return out


def run(quick: bool) -> dict:
    # The runtime's banner goes to fd 2 once per worker; keep the output readable.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return {
        "cpu": cpu_summary(),
        "tiny_us": bench_tiny(quick),
        "selfie_ms": bench_selfie(quick),
        "embedding_us": bench_embedding(quick),
        "startup_s": bench_startup(quick),
    }


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    r = run(args.quick)
    print(f"CPU: {r['cpu']}; load average {os.getloadavg()[0]:.2f}")
    t = r["tiny_us"]
    print(
        f"tiny set+invoke+get: isolated {t['isolated']:.2f} µs, in-process {t['in_process']:.2f} µs, "
        f"semaphore round trip {t['semaphore_round_trip']:.2f} µs"
    )
    for name, unit in (("selfie_ms", "ms"), ("embedding_us", "µs")):
        m = r[name]
        if "error" in m:
            print(f"{name}: {m['error']}")
        else:
            print(
                f"{name}: isolated {m['isolated']:.3f} {unit}, in-process {m['in_process']:.3f} {unit}, ratio "
                f"{m['isolated'] / m['in_process']:.3f}, bit-identical {m['bit_identical']}"
            )
    s = r["startup_s"]
    print(f"start-up to first output: isolated {s['isolated'] * 1e3:.0f} ms, in-process {s['in_process'] * 1e3:.1f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2, default=str))
    return r


if __name__ == "__main__":
    main()
