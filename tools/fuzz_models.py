"""Structured mutation fuzzing of model bytes fed to opaque_ops.Interpreter.

    python tools/fuzz_models.py --n 100000 [--seed 1] [--workers 2]

Every input is a real model (the Atan seed model, the openWakeWord and
microWakeWord models from their wheels) mutated by truncation, bit flips, byte
and word overwrites, offset corruption (a uoffset pointed elsewhere), huge
shape values and out-of-range tensor indices.  Each goes through
Interpreter(...), allocate_tensors() and invoke().  A rejection must be an
OpaqueOpsError; anything else is a finding.  The work runs in child processes
so that a crash (signal) is detected and the input that caused it is saved.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def seed_models() -> list[bytes]:
    sys.path.insert(0, str(ROOT / "examples" / "atan"))
    import make_model

    seeds = [make_model.build()]
    for pkg, rel in (("pyopen_wakeword", "models/melspectrogram.tflite"),
                     ("pymicro_wakeword", "models/okay_nabu.tflite")):
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
            val = rng.choice([0, 1, 0x7FFFFFFF, 0xFFFFFFFF, 0x80000000, len(b), len(b) - 4,
                              rng.randrange(len(b)), rng.randrange(1 << 32), 0xFFFF, 1 << 20])
            struct.pack_into("<I", b, pos - pos % 4, val)
        elif kind == 5 and pos + 4 <= len(b):  # small delta to an aligned word (offset corruption)
            p = pos - pos % 4
            (v,) = struct.unpack_from("<I", b, p)
            struct.pack_into("<I", b, p, (v + rng.choice([-8, -4, 4, 8, 16, -16])) & 0xFFFFFFFF)
        else:  # splice: copy a chunk from elsewhere
            q = rng.randrange(len(b))
            ln = rng.randrange(1, 64)
            b[pos:pos + ln] = b[q:q + ln]
    return bytes(b)


CHILD = r"""
import os, random, sys, json
import numpy as np
sys.path.insert(0, {root!r})
import opaque_ops as oo
from tools.fuzz_models import mutate, seed_models
seeds = seed_models()
rng = random.Random({seed})
last = {last!r}
stats = {{"ok": 0, "rejected": 0, "reasons": {{}}}}
for i in range({n}):
    data = mutate(rng.choice(seeds), rng)
    with open(last, "wb") as f:
        f.write(data)
    try:
        it = oo.Interpreter(model_content=data, use_xnnpack={xnnpack})
        it.allocate_tensors()
        for d in it.get_input_details():
            it.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
        it.invoke()
        for d in it.get_output_details():
            it.get_tensor(d["index"])
        stats["ok"] += 1
    except oo.OpaqueOpsError as e:
        stats["rejected"] += 1
        key = type(e).__name__ + ": " + str(e).split(":")[0][:60]
        stats["reasons"][key] = stats["reasons"].get(key, 0) + 1
    except Exception as e:
        print("FINDING", type(e).__name__, e, file=sys.stderr)
        os.replace(last, last + ".finding-%d" % i)
        sys.exit(3)
print(json.dumps(stats))
"""


def run(n: int, seed: int, workdir: Path, chunk: int = 2000, xnnpack: bool = False) -> dict:
    """Run n inputs in child processes of `chunk` inputs each; return totals."""
    totals = {"inputs": 0, "ok": 0, "rejected": 0, "crashes": 0, "findings": 0, "reasons": {}, "crash_files": []}
    done = 0
    s = seed
    while done < n:
        k = min(chunk, n - done)
        last = str(workdir / f"last-{s}.bin")
        code = CHILD.format(root=str(ROOT), seed=s, n=k, last=last, xnnpack=xnnpack)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        if p.returncode == 0:
            st = json.loads(p.stdout.strip().splitlines()[-1])
            totals["ok"] += st["ok"]
            totals["rejected"] += st["rejected"]
            for r, c in st["reasons"].items():
                totals["reasons"][r] = totals["reasons"].get(r, 0) + c
            totals["inputs"] += k
        elif p.returncode == 3:
            totals["findings"] += 1
            totals["inputs"] += k
        else:
            # Killed by a signal: keep the input that did it, continue with a new seed.
            totals["crashes"] += 1
            keep = workdir / f"crash-seed{s}.bin"
            if os.path.exists(last):
                os.replace(last, keep)
                totals["crash_files"].append(str(keep))
            totals["inputs"] += k
            totals.setdefault("crash_stderr", []).append(p.stderr[-500:])
        done += k
        s += 1
    return totals


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--xnnpack", action="store_true", help="apply the XNNPACK delegate (see the module notes)")
    args = ap.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="oo_fuzz_"))
    workdir.mkdir(parents=True, exist_ok=True)
    t = time.time()
    totals = run(args.n, args.seed, workdir, xnnpack=args.xnnpack)
    totals["seconds"] = round(time.time() - t, 1)
    print(json.dumps(totals, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(totals, indent=2))
    return 1 if totals["crashes"] or totals["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
