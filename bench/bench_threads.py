"""Throughput of two Python threads, each with its own interpreter, against one thread.

    python bench/bench_threads.py [--quick] [--json out.json]

opaque_ops releases the GIL inside ``invoke()`` (cffi ABI calls drop it), so
two threads running two interpreters should use two cores.  The real model is
openWakeWord's ``embedding_model`` (about 2 ms per invoke, one thread per
interpreter).  ai-edge-litert runs the same test in the same process as the
peer: when the machine is busy with other work, its ratio shows how much
parallelism the cores actually had to offer.  Target on 2 idle cores: ≥ 1.6×.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_models import loops_for_model, model_paths  # noqa: E402


def _make(kind: str, data: bytes):
    """One independent interpreter's iteration function (set + invoke + get)."""
    fns = loops_for_model(data, peers=(kind != "opaque_ops"))
    return fns[kind]


def _run_threads(fns, iters: int) -> float:
    """Wall time for every function in ``fns`` to run ``iters`` times, each in its own thread."""
    start = threading.Barrier(len(fns) + 1)

    def work(f):
        start.wait()
        for _ in range(iters):
            f()

    threads = [threading.Thread(target=work, args=(f,)) for f in fns]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def bench_threads(quick: bool = False) -> dict:
    """Two-thread vs one-thread throughput ratio for opaque_ops and ai-edge-litert.

    Returns
    -------
    dict
        ``{impl: {"one_thread_ips": .., "two_threads_ips": .., "ratio": ..}}``
        (invokes per second; ratio = two-thread throughput / one-thread).
    """
    path = model_paths().get("embedding_model")
    if path is None:
        return {"error": "pyopen-wakeword (embedding_model.tflite) is not installed"}
    data = path.read_bytes()
    kinds = ["opaque_ops"]
    try:
        import ai_edge_litert.interpreter  # noqa: F401

        kinds.append("ai_edge_litert")
    except ImportError:  # pragma: no cover
        pass
    pairs = {k: (_make(k, data), _make(k, data)) for k in kinds}
    iters = 20 if quick else 100
    rounds = 3 if quick else 7
    ratios = {k: [] for k in kinds}
    one = {k: [] for k in kinds}
    two = {k: [] for k in kinds}
    for a, b in pairs.values():
        for _ in range(5):
            a(), b()
    for _ in range(rounds):
        for k, (a, b) in pairs.items():
            t1 = _run_threads([a], iters)
            t2 = _run_threads([a, b], iters)
            one[k].append(iters / t1)
            two[k].append(2 * iters / t2)
            ratios[k].append((2 * iters / t2) / (iters / t1))
    return {
        k: {
            "one_thread_ips": statistics.median(one[k]),
            "two_threads_ips": statistics.median(two[k]),
            "ratio": statistics.median(ratios[k]),
        }
        for k in kinds
    }


def gil_probe(quick: bool = False) -> dict:
    """How much a pure-Python thread progresses while another thread invokes.

    A counting thread runs alone, then next to a thread that invokes
    ``embedding_model`` in a loop.  If ``invoke()`` held the GIL, the counter
    would advance only between invokes (a few per cent); with the GIL
    released it gets whatever CPU the machine has left, so on a loaded
    machine this is a cleaner sign of GIL release than throughput.

    Returns
    -------
    dict
        ``{impl: {"counter_progress": fraction of the solo rate, "invoke_share": ..}}``.
    """
    path = model_paths().get("embedding_model")
    if path is None:
        return {}
    data = path.read_bytes()
    seconds = 0.5 if quick else 2.0
    kinds = ["opaque_ops"]
    try:
        import ai_edge_litert.interpreter  # noqa: F401

        kinds.append("ai_edge_litert")
    except ImportError:  # pragma: no cover
        pass

    def count(stop, out):
        n = 0
        while not stop.is_set():
            for _ in range(1000):
                n += 1
        out.append(n)

    def solo_count() -> float:
        stop, out = threading.Event(), []
        t = threading.Thread(target=count, args=(stop, out))
        t.start()
        time.sleep(seconds)
        stop.set()
        t.join()
        return out[0] / seconds

    res = {}
    for k in kinds:
        f = _make(k, data)
        f()
        base = solo_count()
        stop, out = threading.Event(), []
        t = threading.Thread(target=count, args=(stop, out))
        t.start()
        t0, n_inv = time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds:
            f()
            n_inv += 1
        stop.set()
        t.join()
        elapsed = time.perf_counter() - t0
        res[k] = {"counter_progress": (out[0] / elapsed) / base, "invokes_per_s": n_inv / elapsed}
    return res


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    res = bench_threads(args.quick)
    res["gil_probe"] = gil_probe(args.quick)
    for k, r in res["gil_probe"].items():
        print(f"{k:<16} a Python thread keeps {r['counter_progress']:.0%} of its solo speed while this invokes")
    for k, r in res.items():
        if k == "gil_probe":
            continue
        if isinstance(r, dict):
            print(
                f"{k:<16} 1 thread {r['one_thread_ips']:8.1f} inv/s   2 threads {r['two_threads_ips']:8.1f} inv/s"
                f"   ratio {r['ratio']:.2f}x (target >= 1.6x)"
            )
        else:
            print(k, r)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":
    main()
