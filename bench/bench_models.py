"""Real models and scaling: opaque_ops against ai-edge-litert and the raw C API, in one run.

    python bench/bench_models.py [--quick] [--json out.json]

Measures
- openWakeWord's ``melspectrogram`` and ``embedding_model`` and one
  microWakeWord streaming model: ``set_tensor + invoke + get_tensor`` per
  iteration with opaque_ops, ai-edge-litert, and raw C-API calls through
  ``opaque_ops._native`` (a cached numpy view of the input, the cffi invoke
  function, a copy of the output): the floor any Python binding over this
  library can reach.  All three use XNNPACK with one thread.
- ``num_threads`` sweep (1, 2) on ``embedding_model``.
- Scaling: time per element of the Atan kernel from 1e3 to 1e7 floats, and
  time per audio sample of ``melspectrogram`` as its input grows
  (``resize_tensor_input``).

The implementations are interleaved round by round (A, B, C, A, B, C, ...) so
that load from other processes hits all of them alike; each figure is the
median over rounds.  Models are found with ``importlib.util.find_spec``; the
wake-word packages themselves are never imported.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import opaque_ops as oo

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def package_dir(name: str) -> Path | None:
    """Directory of an installed package, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def model_paths() -> dict[str, Path]:
    """The real models this benchmark uses that are installed, by short name."""
    out = {}
    oww = package_dir("pyopen_wakeword")
    if oww is not None:
        for stem in ("melspectrogram", "embedding_model"):
            p = oww / "models" / f"{stem}.tflite"
            if p.exists():
                out[stem] = p
    mww = package_dir("pymicro_wakeword")
    if mww is not None:
        cands = sorted((mww / "models").glob("*.tflite"))
        pick = [p for p in cands if p.stem == "okay_nabu"] or cands
        if pick:
            out[f"microwakeword_{pick[0].stem}"] = pick[0]
    return out


# Input shapes for models whose inputs are dynamic (-1 in the signature).
INPUT_SHAPES = {"melspectrogram": [1, 1280]}  # 80 ms of 16 kHz audio, openWakeWord's chunk


def one_op_interpreter(op: str, shape, out_shape, lib, options=None, **kw) -> oo.Interpreter:
    """An allocated interpreter for a model of one float32 custom op (the kernel benchmarks' unit)."""
    import opaque_ops as oo
    from opaque_ops.model import ModelBuilder

    b = ModelBuilder(description=f"bench {op}")
    x = b.add_tensor("x", shape, np.float32)
    y = b.add_tensor("y", out_shape, np.float32)
    b.add_custom_op(op, inputs=[x], outputs=[y], options=options, version=1)
    b.set_inputs([x])
    b.set_outputs([y])
    it = oo.Interpreter(model_content=b.build(), custom_ops=[lib], **kw)
    it.allocate_tensors()
    return it


def interleaved(fns: dict, n: int, rounds: int, clock=time.perf_counter) -> dict:
    """Median over ``rounds`` of the mean µs per call of each function, interleaved per round.

    ``clock`` is wall time by default; ``time.thread_time`` (this thread's CPU
    time) leaves out the time other processes take the core away, which on
    a loaded machine is most of the noise, for code that runs on this thread.
    """
    for f in fns.values():
        for _ in range(max(1, min(n, 50))):
            f()
    samples = {k: [] for k in fns}
    keys = list(fns)
    for r in range(rounds):
        # Rotate who goes first, so no implementation always follows the same one.
        for k in keys[r % len(keys) :] + keys[: r % len(keys)]:
            f = fns[k]
            t = clock()
            for _ in range(n):
                f()
            samples[k].append((clock() - t) / n * 1e6)
    return {k: statistics.median(v) for k, v in samples.items()}


def _input_for(detail, shape, seed=0):
    rng = np.random.default_rng(seed)
    dt = np.dtype(detail["dtype"])
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dt)


def loops_for_model(data: bytes, shape=None, num_threads: int = 1, peers: bool = True) -> dict:
    """Build the per-iteration closures for one model: ours, ai-edge-litert, raw C API."""
    import opaque_ops as oo
    from opaque_ops import _native

    fns = {}
    it = oo.Interpreter(model_content=data, num_threads=num_threads)
    d_in = it.get_input_details()[0]
    if shape is not None:
        it.resize_tensor_input(d_in["index"], shape)
    it.allocate_tensors()
    d_in = it.get_input_details()[0]
    i_in, i_out = d_in["index"], it.get_output_details()[0]["index"]
    x = _input_for(d_in, tuple(d_in["shape"]))

    def ours():
        it.set_tensor(i_in, x)
        it.invoke()
        return it.get_tensor(i_out)

    fns["opaque_ops"] = ours
    # The same call through the model's signature runner, where it has one
    # (the API TensorFlow's guides now show), on an interpreter of its own:
    # ours and litert's below (litert's runner keeps references to its
    # interpreter's memory, which its own invoke() then refuses).
    runner_input = None
    if it.get_signature_list():
        runner = oo.Interpreter(model_content=data, num_threads=num_threads).get_signature_runner()
        names = list(runner.get_input_details())
        if len(names) == 1:
            runner_input = names[0]
            fns["opaque_ops_runner"] = lambda: runner(**{runner_input: x})

    if peers:
        try:
            from ai_edge_litert.interpreter import Interpreter as LiteRT
        except ImportError:  # pragma: no cover - the peer is optional
            LiteRT = None
        if LiteRT is not None:
            peer = LiteRT(model_content=data, num_threads=num_threads)
            if shape is not None:
                peer.resize_tensor_input(peer.get_input_details()[0]["index"], shape)
            peer.allocate_tensors()
            p_in, p_out = peer.get_input_details()[0]["index"], peer.get_output_details()[0]["index"]

            def theirs():
                peer.set_tensor(p_in, x)
                peer.invoke()
                return peer.get_tensor(p_out)

            fns["ai_edge_litert"] = theirs
            if runner_input is not None:
                peer_runner = LiteRT(model_content=data, num_threads=num_threads).get_signature_runner()
                fns["ai_edge_litert_runner"] = lambda: peer_runner(**{runner_input: x})

        def raw_loop(model_bytes):
            nat = _native.NativeInterpreter(
                _native.NativeModel(model_bytes), [], num_threads=num_threads, use_xnnpack=True
            )
            if shape is not None:
                nat.resize_input(0, shape)
            if nat.allocate() != 0:
                raise RuntimeError("raw C-API interpreter failed to allocate")
            rin = nat.input_tensor(0).view()
            rout = nat.output_tensor(0).view()
            raw_invoke = nat.rt.lib.TfLiteInterpreterInvoke
            handle = nat._interp

            def raw(nat=nat):  # the default argument keeps the C interpreter alive
                rin[...] = x
                raw_invoke(handle)
                return rout.copy()

            return raw

        fns["raw_c_api"] = raw_loop(data)
        # The model as the Interpreter handed it to TFLite, where it rewrote
        # its private copy (interpreter/matmul.py, interpreter/slices.py):
        # the floor for the binding's own cost is the C API on that same copy.
        private = bytes(it._native._model._bytes)
        if private != data:
            fns["raw_c_api_private"] = raw_loop(private)
        # Same inputs, same answers: compare like with like before timing.
        ref = ours()
        for k in ("ai_edge_litert", "raw_c_api", "raw_c_api_private"):
            if k in fns:
                got = fns[k]()
                if got.shape != ref.shape or not np.allclose(
                    got.astype(np.float64), ref.astype(np.float64), rtol=1e-4, atol=1e-4 if ref.dtype.kind == "f" else 1
                ):
                    print(f"warning: {k} output differs from opaque_ops", file=sys.stderr)
    return fns


def oww_frame_loops(Interpreter) -> dict | None:
    """openWakeWord's streaming frame with ``Interpreter`` (ours or a peer's class).

    What openwakeword's ``AudioFeatures`` and ``Model.predict`` do for every
    80 ms of audio with the tflite backend: the melspectrogram model gets a
    same-shape ``resize_tensor_input(strict=True)`` and ``allocate_tensors()``
    before ``set_tensor``/``invoke``/``get_tensor`` (1760 samples: 1280 new
    plus 480 of context); then the embedding model and one wake-word
    classifier run set/invoke/get.  Returns ``{"mel_step": fn, "frame": fn}``.
    """
    oww = package_dir("pyopen_wakeword")
    if oww is None:
        return None
    models = oww / "models"
    mel = Interpreter(model_path=str(models / "melspectrogram.tflite"))
    emb = Interpreter(model_path=str(models / "embedding_model.tflite"))
    ww = Interpreter(model_path=str(models / "hey_jarvis.tflite"))
    for m in (emb, ww):
        m.allocate_tensors()
    mi, mo = mel.get_input_details()[0]["index"], mel.get_output_details()[0]["index"]
    ei, eo = emb.get_input_details()[0]["index"], emb.get_output_details()[0]["index"]
    wd = ww.get_input_details()[0]
    wi, wo = wd["index"], ww.get_output_details()[0]["index"]
    rng = np.random.default_rng(0)
    audio = (rng.standard_normal((1, 1760)) * 1000).astype(np.float32)
    feats = rng.standard_normal((1, 76, 32, 1)).astype(np.float32)
    wx = rng.standard_normal(tuple(wd["shape"])).astype(np.float32)

    def mel_step():
        mel.resize_tensor_input(mi, [1, 1760], strict=True)
        mel.allocate_tensors()
        mel.set_tensor(mi, audio)
        mel.invoke()
        return mel.get_tensor(mo)

    def frame():
        mel_step()
        emb.set_tensor(ei, feats)
        emb.invoke()
        emb.get_tensor(eo)
        ww.set_tensor(wi, wx)
        ww.invoke()
        return ww.get_tensor(wo)

    return {"mel_step": mel_step, "frame": frame}


def bench_oww_frame(quick: bool) -> dict:
    """openWakeWord's frame and its melspectrogram step, ours vs ai-edge-litert interleaved (µs)."""
    import opaque_ops as oo

    ours = oww_frame_loops(oo.Interpreter)
    if ours is None:
        return {}
    fns = {f"opaque_ops_{k}": f for k, f in ours.items()}
    try:
        from ai_edge_litert.interpreter import Interpreter as LiteRT
    except ImportError:  # pragma: no cover - the peer is optional
        LiteRT = None
    if LiteRT is not None:
        fns.update({f"ai_edge_litert_{k}": f for k, f in oww_frame_loops(LiteRT).items()})
    return interleaved(fns, 50 if quick else 200, 5 if quick else 15)


def bench_tiny_interleaved(quick: bool) -> dict:
    """bench_core's tiny ADD model loops, interleaved round by round (µs per iteration)."""
    from bench_core import tiny_loops

    return interleaved(tiny_loops(), 2000 if quick else 10000, 7 if quick else 25)


def bench_real_models(quick: bool) -> dict:
    """Per-iteration µs of every real model for ours / ai-edge-litert / raw C API."""
    res = {}
    for name, path in model_paths().items():
        data = path.read_bytes()
        fns = loops_for_model(data, INPUT_SHAPES.get(name))
        probe = time.perf_counter()
        fns["opaque_ops"]()
        one = time.perf_counter() - probe
        # About 0.1 s (quick: 0.02 s) per implementation per round.
        n = max(3, int((0.02 if quick else 0.1) / max(one, 1e-6)))
        r = interleaved(fns, n, 5 if quick else 15)
        r["path"] = str(path)
        res[name] = r
    return res


def bench_threads_sweep(quick: bool) -> dict:
    """``num_threads`` 1 and 2 on embedding_model, ours and ai-edge-litert interleaved."""
    path = model_paths().get("embedding_model")
    if path is None:
        return {}
    data = path.read_bytes()
    fns = {}
    for nt in (1, 2):
        loops = loops_for_model(data, num_threads=nt)
        fns[f"opaque_ops_t{nt}"] = loops["opaque_ops"]
        if "ai_edge_litert" in loops:
            fns[f"ai_edge_litert_t{nt}"] = loops["ai_edge_litert"]
    return interleaved(fns, 5 if quick else 20, 5 if quick else 11)


def bench_atan_scaling(quick: bool) -> list:
    """Atan kernel vs np.arctan, ns per element, 1e3..1e7 elements."""
    import opaque_ops.kernels as K

    lib = K.atan()
    rows = []
    sizes = [10**3, 10**4, 10**5, 10**6] + ([] if quick else [10**7])
    for size in sizes:
        it = one_op_interpreter("Atan", [size], [size], lib)
        x = (np.random.default_rng(3).standard_normal(size) * 4).astype(np.float32)
        it.set_tensor(0, x)
        out = np.empty_like(x)
        n = max(1, int(2e6 // size)) if not quick else max(1, int(3e5 // size))
        r = interleaved({"kernel": it.invoke, "numpy": lambda: np.arctan(x, out=out)}, n, 5 if quick else 9)
        rows.append(
            {
                "elements": size,
                "kernel_ns_per_elem": r["kernel"] * 1e3 / size,
                "numpy_ns_per_elem": r["numpy"] * 1e3 / size,
                "kernel/numpy": r["kernel"] / r["numpy"],
            }
        )
    return rows


def bench_melspec_scaling(quick: bool) -> list:
    """melspectrogram at growing audio lengths (resize_tensor_input): ns per audio sample."""
    import opaque_ops as oo

    path = model_paths().get("melspectrogram")
    if path is None:
        return []
    data = path.read_bytes()
    rows = []
    lengths = [1280, 5120, 20480] + ([] if quick else [81920])
    for length in lengths:
        fns = loops_for_model(data, [1, length], peers=not quick)
        n = max(2, int((1.5e5 if quick else 1e6) // length))
        r = interleaved(fns, n, 3 if quick else 7)
        row = {"samples": length, "opaque_ops_ns_per_sample": r["opaque_ops"] * 1e3 / length}
        if "ai_edge_litert" in r:
            row["ai_edge_litert_ns_per_sample"] = r["ai_edge_litert"] * 1e3 / length
            row["ours/litert"] = r["opaque_ops"] / r["ai_edge_litert"]
        rows.append(row)
    del oo
    return rows


def melspec_op_models() -> dict:
    """melspectrogram's two costly layers as one-op models, with the model's own constants.

    ``conv``: the first CONV_2D (the STFT as a 1x512 convolution, stride 160,
    257 filters) on 1280 samples; ``batch_matmul``: the mel filterbank,
    [1,1,5,257] x constant [257,32].  Returns name -> (bytes, input shape).
    """
    from opaque_ops.model import ModelBuilder, read_model

    path = model_paths().get("melspectrogram")
    if path is None:
        return {}
    sg = read_model(path.read_bytes()).subgraphs[0]
    conv = next(op for op in sg.operators if op.op_name == "CONV_2D")
    bmm = next(op for op in sg.operators if op.op_name == "BATCH_MATMUL")
    out = {}
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 1, 1280, 1], np.float32)
    w, bias = (b.add_constant(n, sg.tensors[i].array()) for n, i in zip(("w", "b"), conv.inputs[1:]))
    n_filters = sg.tensors[conv.inputs[1]].shape[0]
    opts = conv.builtin_options
    frames = (1280 - sg.tensors[conv.inputs[1]].shape[2]) // opts["stride_w"] + 1
    y = b.add_tensor("y", [1, 1, frames, n_filters], np.float32)
    b.add_op("CONV_2D", [x, w, bias], [y], {k: opts[k] for k in ("padding", "stride_w", "stride_h")})
    b.set_inputs([x])
    b.set_outputs([y])
    out["conv"] = (b.build(), None)
    rhs = sg.tensors[bmm.inputs[1]].array()
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 1, frames, rhs.shape[0]], np.float32)
    r = b.add_constant("r", rhs)
    y = b.add_tensor("y", [1, 1, frames, rhs.shape[1]], np.float32)
    b.add_op("BATCH_MATMUL", [x, r], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    out["batch_matmul"] = (b.build(), None)
    return out


def bench_melspec_breakdown(quick: bool) -> dict:
    """Where melspectrogram's time goes: the model, its CONV_2D alone, its BATCH_MATMUL alone.

    Each one: ours, ai-edge-litert and the raw C API interleaved, plus the raw
    C API with XNNPACK off for the single layers (TFLite's own kernel).
    µs of CPU time per iteration (everything runs on this thread: one
    thread, no thread pool), so load from other processes does not count.
    """
    from opaque_ops import _native

    path = model_paths().get("melspectrogram")
    if path is None:
        return {}
    cases = {"model": (path.read_bytes(), INPUT_SHAPES["melspectrogram"])}
    cases.update(melspec_op_models())
    res = {}
    for name, (data, shape) in cases.items():
        fns = loops_for_model(data, shape)
        if name != "model":
            nat = _native.NativeInterpreter(_native.NativeModel(data), [], num_threads=1, use_xnnpack=False)
            if nat.allocate() != 0:
                raise RuntimeError(f"melspectrogram {name}: allocate failed without XNNPACK")
            rin, rout = nat.input_tensor(0).view(), nat.output_tensor(0).view()
            rin[...] = np.random.default_rng(0).standard_normal(rin.shape).astype(np.float32)
            raw_invoke, handle = nat.rt.lib.TfLiteInterpreterInvoke, nat._interp

            def no_xnnpack(nat=nat):  # the default argument keeps the C interpreter alive
                raw_invoke(handle)
                return rout.copy()

            fns["raw_c_api_no_xnnpack"] = no_xnnpack
        res[name] = interleaved(fns, 200 if quick else 1000, 5 if quick else 11, clock=time.thread_time)
    return res


def bench_selfie(quick: bool) -> dict:
    """selfie_segmentation end to end: ours, ai-edge-litert, MediaPipe's runtime (ms per frame).

    See bench_selfie.bench_end_to_end; MediaPipe runs in its own venv, made on first use.
    """
    from bench_selfie import bench_end_to_end

    return bench_end_to_end(quick)


def bench_python_op(quick: bool) -> dict:
    """Invoke of a one-op model: the op as a Python callback vs the same op in C (µs)."""
    import opaque_ops as oo
    from bench_harness import prebuilt

    c_op = oo.kernels.clamp()
    py_op = oo.python_op("Clamp", invoke=lambda i, o: np.clip(i[0], 0.0, 1.0, out=o[0]))
    x = np.random.default_rng(0).uniform(-1, 2, 16).astype(np.float32)
    return interleaved(
        {"c_op": prebuilt(c_op, x), "python_op": prebuilt(py_op, x)}, 500 if quick else 3000, 5 if quick else 11
    )


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    out = {
        "real_models_us": bench_real_models(args.quick),
        "threads_sweep_us": bench_threads_sweep(args.quick),
        "atan_scaling": bench_atan_scaling(args.quick),
        "melspec_scaling": bench_melspec_scaling(args.quick),
    }
    for name, r in out["real_models_us"].items():
        peer, raw = r.get("ai_edge_litert"), r.get("raw_c_api")
        print(
            f"{name:<30} ours {r['opaque_ops']:9.1f} µs  litert {peer or float('nan'):9.1f} µs  "
            f"raw {raw or float('nan'):9.1f} µs  ours/litert {r['opaque_ops'] / peer if peer else float('nan'):.3f}  "
            f"ours/raw {r['opaque_ops'] / raw if raw else float('nan'):.3f}"
        )
    print("threads:", {k: round(v, 1) for k, v in out["threads_sweep_us"].items()})
    for row in out["atan_scaling"]:
        print("atan", row)
    for row in out["melspec_scaling"]:
        print("melspec", row)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
