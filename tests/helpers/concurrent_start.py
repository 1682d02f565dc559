"""A process's first interpreters created on several threads at once (tests/interpreter/test_concurrent_start.py).

Run as a child: ``python -c "from tests.helpers.concurrent_start import main; main()" SPEC``.
SPEC (JSON) gives ``models`` {kind: path} and ``threads`` [kind, ...]: one
thread per entry, all released together by a barrier (then thread ``k``
waits ``k * stagger`` seconds, if ``"stagger"`` is given), each importing
opaque_ops and running its model (:func:`run_kind`); with ``"preimport"``
the main thread imports opaque_ops' public names first.  With ``"serial"``
the kinds run one after the other on the main thread instead (the
single-threaded reference); with ``"later"`` each runs with the model reader
replaced by a function that fails, so a start that reads or checks a model
again (instead of taking its verdicts from the record) is seen.  The child
prints one JSON document: each run's outputs or exception, whether the
collector is on, and whether the rules were imported.

This module imports nothing of opaque_ops or numpy at its top, so that the
threads are the first to import them.
"""

from __future__ import annotations

import json
import sys
import threading
import time


def inputs(kind: str, k: int) -> list:
    """The values the run number ``k`` (0 or 1) of a ``kind`` model sets, in input order."""
    import numpy as np

    rng = np.random.default_rng(k)
    f32 = np.float32
    if kind == "builtin":  # y = (x + offset) * scale
        return [rng.uniform(-5, 5, (1, 5)).astype(f32)]
    if kind == "select":  # SELECT(c, x, y), all [2, 3]
        return [
            rng.random((2, 3)) > 0.5,
            rng.standard_normal((2, 3)).astype(f32),
            rng.standard_normal((2, 3)).astype(f32),
        ]
    if kind == "reverse_sequence":  # x [2, 3] and fed lengths [2]
        return [rng.standard_normal((2, 3)).astype(f32), np.array([[2, 3], [1, 3]][k], np.int32)]
    if kind == "strings":  # GATHER of a string [3]
        return [np.array([[b"ab", b"", b"xyz\x00q"], ["\u00e9", b"c", b"d" * 300]][k], dtype=object)]
    if kind in ("atan", "python_op"):
        return [rng.uniform(-50, 50, 5).astype(f32)]
    if kind == "matmul":  # x [2, 3, 37] (K of tests/interpreter/test_matmul.py)
        return [rng.standard_normal((2, 3, 37)).astype(f32)]
    raise ValueError(kind)


def _encoded(a) -> dict:
    if a.dtype == object:
        return {"dtype": "object", "shape": list(a.shape), "items": [bytes(v).hex() for v in a.ravel()]}
    return {"dtype": a.dtype.str, "shape": list(a.shape), "hex": a.tobytes().hex()}


def decoded(d: dict):
    """The array :func:`run_kind` encoded in ``d``."""
    import numpy as np

    if d["dtype"] == "object":
        return np.array([bytes.fromhex(v) for v in d["items"]], dtype=object).reshape(d["shape"])
    return np.frombuffer(bytes.fromhex(d["hex"]), np.dtype(d["dtype"])).reshape(d["shape"])


def run_kind(kind: str, path: str) -> dict:
    """Create, allocate, set, invoke (twice, with two sets of inputs) and read; the outputs, or the exception."""
    try:
        import opaque_ops

        if kind == "atan":
            ops = [opaque_ops.kernels.atan()]
        elif kind == "python_op":
            import numpy as np

            ops = [opaque_ops.python_op("Atan", invoke=lambda ins, outs: np.arctan(ins[0], out=outs[0]))]
        else:
            ops = None
        it = opaque_ops.Interpreter(model_path=path, custom_ops=ops)
        it.allocate_tensors()
        runs = []
        for k in (0, 1):  # (the second invoke is the one the C fast call runs)
            for d, x in zip(it.get_input_details(), inputs(kind, k)):
                it.set_tensor(d["index"], x)
            it.invoke()
            runs.append([_encoded(it.get_tensor(d["index"])) for d in it.get_output_details()])
        return {"out": runs}
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(exc)}


def _later(kind: str, path: str) -> dict:
    from opaque_ops.model import cache

    def boom(*_a, **_k):
        raise AssertionError("the model was read or checked again")

    real, cache.read_model = cache.read_model, boom
    try:
        return run_kind(kind, path)
    finally:
        cache.read_model = real


def main() -> None:
    spec = json.loads(sys.argv[1])
    models = spec["models"]
    if spec.get("serial") or spec.get("later"):
        run = _later if spec.get("later") else run_kind
        results = [run(kind, models[kind]) for kind in spec["threads"]]
    else:
        kinds = spec["threads"]
        results = [None] * len(kinds)
        barrier = threading.Barrier(len(kinds))

        stagger = spec.get("stagger", 0)
        if spec.get("preimport"):
            # A program that imports opaque_ops at its top and creates its first
            # interpreters on threads later: the threads race at the memos set
            # on first use, not at the imports, which Python's lock serializes.
            import opaque_ops

            opaque_ops.Interpreter, opaque_ops.kernels, opaque_ops.python_op  # noqa: B018

        def work(k: int, kind: str) -> None:
            try:
                barrier.wait(timeout=60)
            except threading.BrokenBarrierError as exc:  # pragma: no cover - reported as the result
                results[k] = {"error": type(exc).__name__, "message": "the barrier broke"}
                return
            if stagger:
                time.sleep(k * stagger)  # other interleavings: each thread a little later than the last
            results[k] = run_kind(kind, models[kind])

        threads = [threading.Thread(target=work, args=(k, kind)) for k, kind in enumerate(kinds)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        results = [r if r is not None else {"error": "Hang", "message": "the thread did not finish"} for r in results]
    import gc

    print(
        json.dumps(
            {
                "results": results,
                "gc_enabled": gc.isenabled(),
                "rules_imported": "opaque_ops.model.checks" in sys.modules,
            }
        )
    )
