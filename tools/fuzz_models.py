"""Structured mutation fuzzing of model bytes fed to opaque_ops.Interpreter.

    python tools/fuzz_models.py --n 100000 [--seed 1] [--workers 2] [--xnnpack] [--json out.json]
    python tools/fuzz_models.py --save SEED:INDEX out.tflite     # write one input, to replay it

Every input is a real model (the Atan seed model, the openWakeWord and
microWakeWord models from their wheels) mutated by truncation, bit flips, byte
and word overwrites, offset corruption (a uoffset pointed elsewhere), huge
shape values and out-of-range tensor indices.  Each goes through
Interpreter(...), allocate_tensors(), set_tensor() and invoke() (a model with
a dynamic input that fails to allocate at its declared size -- melspectrogram
at 1x1 -- is retried at 1x1760 so its kernels run too).  A rejection must be
an OpaqueOpsError; anything else is a finding.  ``--xnnpack`` applies the
XNNPACK delegate (the Interpreter's default); without it the reference
kernels run.

Input number i of a run is a pure function of (seed, i), so a crash is
reported by index and replayed exactly.  The work runs in child processes of
``--chunk`` inputs; a child that dies from a signal (or hangs) is reported
with the input it was on, that input is saved to the work directory, and a
new child carries on after it.  The summary counts inputs accepted (ran to
the end), rejected (by reason, and grouped: ``reason_groups``), crashes and
findings; ``unaccounted`` counts inputs whose outcome died with a crashed
child (they did not crash it).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import re
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: tools.* must import like in the children
    sys.path.insert(0, str(ROOT))
from tools._fuzz_pool import add_stats, keep_case, run_child, run_ranges  # noqa: E402 - the fuzzers' one pool


def seed_models() -> list[bytes]:
    sys.path.insert(0, str(ROOT / "examples" / "atan"))
    import make_model

    seeds = [make_model.build()]
    for pkg, rel in (
        ("pyopen_wakeword", "models/melspectrogram.tflite"),
        ("pymicro_wakeword", "models/okay_nabu.tflite"),
    ):
        spec = importlib.util.find_spec(pkg)
        if spec and spec.submodule_search_locations:
            p = Path(list(spec.submodule_search_locations)[0]) / rel
            if p.is_file() and p.stat().st_size < 2_000_000:
                seeds.append(p.read_bytes())
    return seeds


def mutate(data: bytes, rng) -> bytes:
    b = bytearray(data)
    kind = rng.randrange(7)
    if kind == 0:  # truncation
        return bytes(b[: rng.randrange(len(b))])
    n = rng.randrange(1, 9)
    for _ in range(n):
        pos = rng.randrange(len(b))
        if kind == 1:  # bit flip
            b[pos] ^= 1 << rng.randrange(8)
        elif kind == 2:  # byte overwrite
            b[pos] = rng.randrange(256)
        elif kind in (3, 4) and pos + 4 <= len(b):
            # word overwrite with values that hit edge cases: offsets past
            # the end, huge shape dims, negative indices, small indices
            val = rng.choice(
                [
                    0,
                    1,
                    0x7FFFFFFF,
                    0xFFFFFFFF,
                    0x80000000,
                    len(b),
                    len(b) - 4,
                    rng.randrange(len(b)),
                    rng.randrange(1 << 32),
                    0xFFFF,
                    1 << 20,
                ]
            )
            struct.pack_into("<I", b, pos - pos % 4, val)
        elif kind == 5 and pos + 4 <= len(b):  # small delta to an aligned word (offset corruption)
            p = pos - pos % 4
            (v,) = struct.unpack_from("<I", b, p)
            struct.pack_into("<I", b, p, (v + rng.choice([-8, -4, 4, 8, 16, -16])) & 0xFFFFFFFF)
        else:  # splice: copy a chunk from elsewhere
            q = rng.randrange(len(b))
            ln = rng.randrange(1, 64)
            b[pos : pos + ln] = b[q : q + ln]
    return bytes(b)


CHILD = r"""
import os, random, sys, json
import numpy as np
sys.path.insert(0, {root!r})
import opaque_ops as oo
from tools._fuzz_pool import Child
from tools.fuzz_models import input_for, reason_key, seed_models
seeds = seed_models()
stats = {{"ok": 0, "rejected": 0, "reasons": {{}}}}
child = Child()
for i in child.cases({start}, {stop}):
    data = input_for(seeds, {seed}, i)
    try:
        it = oo.Interpreter(model_content=data, use_xnnpack={xnnpack})
        try:
            it.allocate_tensors()
        except oo.OpaqueOpsError as e:
            # melspectrogram declares a 1x1 input that its convolutions refuse;
            # retry dynamic-shaped inputs at a working size so its kernels get
            # exercised too.
            sigs = [[int(v) for v in d["shape_signature"]] for d in it.get_input_details()]
            if not any(-1 in sg for sg in sigs) or any(v < -1 for sg in sigs for v in sg):
                raise
            for d in it.get_input_details():
                sig = [int(v) for v in d["shape_signature"]]
                if -1 in sig:
                    first = sig.index(-1)
                    it.resize_tensor_input(d["index"], [1 if k == first else (1760 if v == -1 else v)
                                                        for k, v in enumerate(sig)])
            it.allocate_tensors()
        for d in it.get_input_details():
            it.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
        it.invoke()
        for d in it.get_output_details():
            it.get_tensor(d["index"])
        stats["ok"] += 1
    except oo.OpaqueOpsError as e:
        stats["rejected"] += 1
        key = reason_key(e)
        stats["reasons"][key] = stats["reasons"].get(key, 0) + 1
    except Exception as e:
        child.finding(i, "%s: %s" % (type(e).__name__, str(e)[:300]))
child.stats(stats)
"""


def input_for(seeds: list[bytes], seed: int, i: int) -> bytes:
    """Input number ``i`` of a run: deterministic, so a crash can be replayed from its index."""
    rng = random.Random(f"{seed}:{i}")
    return mutate(rng.choice(seeds), rng)


def reason_key(exc: BaseException) -> str:
    """A short, count-friendly reason: exception class and message with numbers and names masked."""
    msg = str(exc).replace("<model_content>", "").strip()
    msg = re.sub(r"'[^']*'", "'…'", msg)
    msg = re.sub(r"\d+", "N", msg)
    msg = re.sub(r"^ ?is not a usable TFLite model: ", "", msg)
    return f"{type(exc).__name__}: {msg[:90]}"


_GROUPS = [
    # (substring of the reason, group name); the first match wins.
    ("already writes", "check_model: tensor with two producers"),
    ("also one of its own inputs", "check_model: op writes its own input"),
    ("which is an input of the subgraph", "check_model: op writes a graph input"),
    ("which is a constant", "check_model: op writes a constant"),
    ("before operator", "check_model: tensor read before written"),
    ("omitted (-N) input", "check_model: omitted input on a builtin without optional inputs"),
    ("omitted (-N) output", "check_model: omitted output"),
    ("is written by no operator", "check_model: graph output written by nobody"),
    ("has no bias input", "check_model: quantized conv without bias"),
    ("READ_VARIABLE) declares", "check_model: READ_VARIABLE shape != stored value"),
    ("must be at least N", "check_model: zero/negative stride, dilation or filter"),
    ("window, but its input", "allocate: VALID window larger than input"),
    ("has zero point(s)", "check_model: zero point outside the type's range"),
    ("has quantization scale(s)", "check_model: scale not finite/positive/normal"),
    ("bytes of data", "check_model: constant data longer than its shape"),
    ("it must be SAME or VALID", "check_model: unknown padding"),
    ("takes at least", "check_model: too few inputs"),
    ("has no outputs", "check_model: op without outputs"),
    ("has no subgraphs", "check_model: no subgraphs"),
    ("truncated", "read_model: offset/length past the end"),
    ("invalid size", "read_model: bad table/vtable size"),
    ("lies outside its", "read_model: field outside its table"),
    ("UTF-N", "read_model: invalid UTF-8 string"),
    ("no '…' file identifier", "read_model: not a TFLite flatbuffer"),
    ("far more data than it contains", "read_model: self-referencing offsets"),
    ("nested too deeply", "read_model: nesting too deep"),
    ("refers to", "read_model: index out of range"),
    ("opcode index", "read_model: index out of range"),
    ("unresolved custom op", "TFLite: unresolved custom op"),
    ("custom ops that no library provides", "TFLite: unresolved custom op"),
]


def reason_group(key: str) -> str:
    """Coarse category of a :func:`reason_key`, for the summary."""
    for needle, group in _GROUPS:
        if needle in key:
            return group
    m = re.search(r"tensorflow/lite/([\w/]+\.cc)", key)
    if m:
        return f"TFLite check in {m.group(1)}"
    cls, _, msg = key.partition(": ")
    return f"{cls}: {' '.join(msg.split()[:8])}"


def group_reasons(reasons: dict) -> dict:
    """Sum reason counts by :func:`reason_group`, largest first."""
    out: dict[str, int] = {}
    for k, c in reasons.items():
        g = reason_group(k)
        out[g] = out.get(g, 0) + c
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _run_range(seed: int, start: int, stop: int, xnnpack: bool, timeout: float) -> dict:
    """Run inputs [start, stop) in one child; on a crash or hang, report it and return."""
    code = CHILD.format(root=str(ROOT), seed=seed, start=start, stop=stop, xnnpack=xnnpack)
    return run_child(code, start, stop, timeout)


def run(
    n: int, seed: int, workdir: Path, chunk: int = 1000, xnnpack: bool = False, workers: int = 1, progress: bool = False
) -> dict:
    """Run inputs 0..n-1 in child processes; return the totals.

    Returns
    -------
    dict
        ``inputs``, ``ok`` and ``rejected`` (counted by children that finished),
        ``unaccounted`` (inputs run by a child that later crashed), ``reasons``
        (rejection reason -> count), ``crashes`` (with the index and saved file
        of each), ``findings`` (non-OpaqueOpsError exceptions).
    """
    seeds = seed_models()
    totals = {"inputs": n, "ok": 0, "rejected": 0, "unaccounted": 0, "crashes": [], "findings": [], "reasons": {}}

    def take(res: dict, start: int) -> None:
        st = res["stats"]
        if st is not None:
            add_stats(totals, st, ("ok", "rejected"), ("reasons",))
        totals["findings"].extend(res["findings"])
        if res["crash"] is not None:
            c = res["crash"]
            totals["unaccounted"] += res["partial"]
            if c["index"] >= start:
                c["file"] = keep_case(workdir, f"crash-{seed}-{c['index']}", input_for(seeds, seed, c["index"]))
            totals["crashes"].append(c)
            if progress:
                print(f"crash at input {c['index']} (rc {c['returncode']})", file=sys.stderr, flush=True)

    def chunk_done(k: int, count: int) -> None:
        if progress:
            print(
                f"chunk {k + 1}/{count}: ok {totals['ok']} rejected {totals['rejected']} "
                f"crashes {len(totals['crashes'])}",
                file=sys.stderr,
                flush=True,
            )

    run_ranges(
        0,
        n,
        chunk,
        lambda a, b: _run_range(seed, a, b, xnnpack, timeout=60 + 2.0 * (b - a)),
        take,
        workers=workers,
        chunk_done=chunk_done,
    )
    return totals


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--xnnpack", action="store_true", help="apply the XNNPACK delegate (see the module notes)")
    ap.add_argument("--workers", type=int, default=1, help="child processes run at once")
    ap.add_argument("--chunk", type=int, default=1000, help="inputs per child process")
    ap.add_argument("--progress", action="store_true", help="print progress to stderr")
    ap.add_argument("--save", nargs=2, metavar=("SEED:INDEX", "OUT"), help="write one input and exit")
    args = ap.parse_args(argv)
    if args.save:
        seed, index = (int(v) for v in args.save[0].split(":"))
        Path(args.save[1]).write_bytes(input_for(seed_models(), seed, index))
        return 0
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="oo_fuzz_"))
    workdir.mkdir(parents=True, exist_ok=True)
    t = time.time()
    totals = run(
        args.n, args.seed, workdir, chunk=args.chunk, xnnpack=args.xnnpack, workers=args.workers, progress=args.progress
    )
    totals["reason_groups"] = group_reasons(totals["reasons"])
    totals["crash_count"] = len(totals["crashes"])
    totals["finding_count"] = len(totals["findings"])
    totals["seconds"] = round(time.time() - t, 1)
    print(json.dumps(totals, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(totals, indent=2))
    return 1 if totals["crashes"] or totals["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
