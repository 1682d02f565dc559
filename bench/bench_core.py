"""Core binding benchmarks: per-call overhead against peers measured in the same run.

    python bench/bench_core.py [--quick] [--json out.json]

Measures
- set_tensor + invoke + get_tensor on a tiny ADD model: opaque_ops vs
  ai-edge-litert (and tflite-runtime if installed) vs raw C-API calls via cffi;
- the zero-copy path (tensor() views) vs raw C-API calls;
- compile_ops cold vs warm cache;
- `import opaque_ops` time.
Prints ratios; never asserts on time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def tiny_model(signature: bool = False) -> bytes:
    """y = x + c on [5] float32; with ``signature``, also a SignatureDef "run" (x -> y)."""
    from opaque_ops.model import ModelBuilder

    b = ModelBuilder()
    x = b.add_tensor("x", [5], np.float32)
    c = b.add_constant("c", np.arange(5, dtype=np.float32))
    y = b.add_tensor("y", [5], np.float32)
    b.add_op("ADD", [x, c], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    if signature:
        b.add_signature("run", {"x": x}, {"y": y})
    return b.build()


def per_call(fn, n: int, repeats: int = 7) -> float:
    """Median over repeats of the mean time of one call, in microseconds."""
    for _ in range(min(n, 2000)):
        fn()
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(samples)


def tiny_loops() -> dict:
    """The per-iteration loops on the tiny ADD model, by implementation name.

    ``opaque_ops``: set_tensor + invoke + get_tensor; ``opaque_ops_views``:
    write into a ``tensor()`` view, invoke, copy the output view;
    ``raw_cffi``: the same with a cached view and the cffi invoke function
    (the floor); ``opaque_ops_runner``: the signature runner's call;
    ``opaque_ops_compat``: set+invoke+get through opaque_ops.compat's class
    (tflite_runtime code run unmodified); peers: ai-edge-litert (and
    tflite-runtime when importable).
    """
    import opaque_ops as oo
    from opaque_ops import _native

    data = tiny_model()
    x = np.ones(5, np.float32)
    it = oo.Interpreter(model_content=data)
    it.allocate_tensors()
    i_in, i_out = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]

    def ours():
        it.set_tensor(i_in, x)
        it.invoke()
        return it.get_tensor(i_out)

    vin, vout = it.tensor(i_in)(), it.tensor(i_out)()

    def ours_views():
        vin[:] = x
        it.invoke()
        return vout.copy()

    native = _native.NativeInterpreter(_native.NativeModel(data), [])
    native.allocate()
    rin, rout = native.input_tensor(0).view(), native.output_tensor(0).view()
    raw_invoke, handle = native.rt.lib.TfLiteInterpreterInvoke, native._interp

    def raw(native=native):  # the default argument keeps the C interpreter alive
        rin[:] = x
        raw_invoke(handle)
        return rout.copy()

    # The same loop through the Python methods alone, as where the fast
    # calls module cannot be built (opaque_ops.interpreter.fast_calls).
    slow = oo.Interpreter(model_content=data)
    slow.allocate_tensors()
    slow._fast = None

    def ours_python():
        slow.set_tensor(i_in, x)
        slow.invoke()
        return slow.get_tensor(i_out)

    # Unmodified tflite_runtime code on opaque_ops (python -m opaque_ops.compat):
    # its Interpreter class, made without installing the import hook here.
    from opaque_ops import compat

    shim = compat._interpreter_class()(model_content=data)
    shim.allocate_tensors()

    def ours_compat():
        shim.set_tensor(i_in, x)
        shim.invoke()
        return shim.get_tensor(i_out)

    signed = tiny_model(signature=True)
    runner = oo.Interpreter(model_content=signed).get_signature_runner("run")

    def ours_runner():
        return runner(x=x)["y"]

    # The same call on the full path only (resize check, allocation check, a
    # tensor lookup by name per input and output): where the short path
    # (SignatureRunner._call_cached) does not apply.
    full = oo.Interpreter(model_content=signed).get_signature_runner("run")
    full._cached_in = None

    def ours_runner_full():
        return full(x=x)["y"]

    loops = {
        "opaque_ops": ours,
        "opaque_ops_python": ours_python,
        "opaque_ops_compat": ours_compat,
        "opaque_ops_views": ours_views,
        "raw_cffi": raw,
        "opaque_ops_runner": ours_runner,
        "opaque_ops_runner_full": ours_runner_full,
    }
    for modname in ("ai_edge_litert.interpreter", "tflite_runtime.interpreter"):
        try:
            mod = __import__(modname, fromlist=["Interpreter"])
        except Exception:  # noqa: BLE001 - not installed, or broken under numpy 2
            continue
        peer = mod.Interpreter(model_content=data)
        peer.allocate_tensors()
        p_in, p_out = peer.get_input_details()[0]["index"], peer.get_output_details()[0]["index"]

        def theirs(peer=peer, p_in=p_in, p_out=p_out):
            peer.set_tensor(p_in, x)
            peer.invoke()
            return peer.get_tensor(p_out)

        loops[modname.split(".")[0]] = theirs
        if modname.startswith("ai_edge_litert"):
            peer_runner = mod.Interpreter(model_content=signed).get_signature_runner("run")

            def theirs_runner(peer_runner=peer_runner):
                return peer_runner(x=x)["y"]

            loops["ai_edge_litert_runner"] = theirs_runner
    return loops


def bench_tiny(n: int) -> dict:
    return {name: per_call(fn, n) for name, fn in tiny_loops().items()}


def bench_compile() -> dict:
    import opaque_ops as oo

    src = (ROOT / "examples" / "atan" / "atan.c").read_text() + f"\n/* {time.time_ns()} */\n"
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        oo.compile_ops(src, ops={"Atan": "AtanOpRegistrationExternal"}, cache_dir=d)
        cold = time.perf_counter() - t
        warm = []
        for _ in range(20):
            t = time.perf_counter()
            oo.compile_ops(src, ops={"Atan": "AtanOpRegistrationExternal"}, cache_dir=d)
            warm.append(time.perf_counter() - t)
    return {"compile_cold_ms": cold * 1e3, "compile_warm_ms": statistics.median(warm) * 1e3}


def bench_import(runs: int = 7) -> dict:
    code = "import time; t=time.perf_counter(); import opaque_ops; print(time.perf_counter()-t)"
    times = [
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout) for _ in range(runs)
    ]
    code_np = "import time; t=time.perf_counter(); import opaque_ops, numpy; opaque_ops.Interpreter; print(time.perf_counter()-t)"
    times_full = [
        float(subprocess.run([sys.executable, "-c", code_np], capture_output=True, text=True).stdout)
        for _ in range(runs)
    ]
    return {
        "import_ms": statistics.median(times) * 1e3,
        "import_with_numpy_and_interpreter_ms": statistics.median(times_full) * 1e3,
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    n = 5000 if args.quick else 50000
    tiny = bench_tiny(n)
    comp = bench_compile()
    imp = bench_import(3 if args.quick else 7)
    peer = tiny.get("ai_edge_litert")
    print("\n== set_tensor + invoke + get_tensor, 5-element ADD model (µs per iteration) ==")
    print(f"{'implementation':<22}{'µs':>8}{'vs ai-edge-litert':>20}{'vs raw cffi':>14}")
    for k, v in tiny.items():
        r1 = f"{v / peer:.2f}x" if peer else "-"
        print(f"{k:<22}{v:8.2f}{r1:>20}{v / tiny['raw_cffi']:>13.2f}x")
    print("\n== compile_ops ==")
    print(f"cold {comp['compile_cold_ms']:.0f} ms, warm (cache hit) {comp['compile_warm_ms']:.2f} ms")
    print("\n== import ==")
    print(
        f"import opaque_ops: {imp['import_ms']:.1f} ms; with numpy + Interpreter: {imp['import_with_numpy_and_interpreter_ms']:.1f} ms"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"tiny_us": tiny, **comp, **imp}, indent=2))


if __name__ == "__main__":
    main()
