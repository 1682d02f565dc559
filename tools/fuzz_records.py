"""Fuzzing the verdict records: a damaged or forged record never crashes a creation or changes its outputs.

    python tools/fuzz_records.py --n 20000 [--seed 1] [--start 0] [--chunk 500]

A verdict record (``opaque_ops.model.cache``) is marshal data, trusted for
its origin (owner, mode, the digest in its name) and still checked before
use.  Each case takes the record the first creation of a model wrote,
changes it (``tools/fuzz_models.py``'s byte mutations: truncation, bit
flips, word overwrites, splices; or a value of the record replaced by a
random object that marshal can write: nested lists, tuples, sets, huge
integers, floats, bytes, code objects), plants it under the name the cache
gives those bytes (so the digest check passes and the contents are what is
tested), and creates, allocates and runs the model as a new process would.
The outputs must equal the first run's, bit for bit, and nothing may be
raised.  Cases run in child processes, a chunk each; a child that dies is a
crash, and its case is named.  Input i is a pure function of (seed, i).

Prints the counts as JSON: ``used`` (the planted record was read and
trusted), ``rewritten`` (it was refused, the checks ran and a valid record
replaced it), ``crash_count`` and ``findings`` (an exception, other
outputs, or no valid record afterwards).
"""

from __future__ import annotations

import argparse
import json
import marshal
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _random_value(rng: random.Random, depth: int = 0):
    kinds = ["int", "big", "neg", "float", "str", "bytes", "none", "bool", "list", "tuple", "set", "dict", "code"]
    kind = rng.choice(kinds if depth < 3 else kinds[:8])
    if kind == "int":
        return rng.randrange(0, 1 << 31)
    if kind == "big":
        return rng.choice([1 << 31, 1 << 63, 10**30, 10**400])
    if kind == "neg":
        return -rng.randrange(1, 1 << 40)
    if kind == "float":
        return rng.choice([0.0, -1.5, float("inf"), float("nan"), 1e308])
    if kind == "str":
        return rng.choice(["", "ModelError", "ShapeError", "SystemExit", "x" * 1000, "\udcff"[:0] + "é"])
    if kind == "bytes":
        return bytes(rng.randrange(256) for _ in range(rng.randrange(8)))
    if kind == "none":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "code":
        return compile("1 + 1", "<record>", "eval")
    items = [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == "list":
        return items
    if kind == "tuple":
        return tuple(items)
    if kind == "set":
        return frozenset(x for x in items if isinstance(x, (int, str, bytes, type(None), bool, float)))
    return {str(i): v for i, v in enumerate(items)}


def _replace_somewhere(doc, rng: random.Random):
    """``doc`` with one value, at a random path inside it, replaced by a random one."""
    if not isinstance(doc, (dict, list)) or not doc or rng.random() < 0.25:
        return _random_value(rng)
    if isinstance(doc, dict):
        key = rng.choice(sorted(doc))
        return dict(doc, **{key: _replace_somewhere(doc[key], rng)})
    k = rng.randrange(len(doc))
    return doc[:k] + [_replace_somewhere(doc[k], rng)] + doc[k + 1 :]


def mutated_record(raw: bytes, seed: int, i: int) -> bytes:
    """Case ``i`` of run ``seed``: the record ``raw``, changed."""
    from tools import fuzz_models

    rng = random.Random(f"records:{seed}:{i}")
    if rng.random() < 0.5:
        return fuzz_models.mutate(raw, rng)
    doc = marshal.loads(raw)
    for _ in range(rng.randrange(1, 4)):
        doc = _replace_somewhere(doc, rng)
    try:
        return marshal.dumps(doc)
    except ValueError:  # nested past what marshal writes
        return raw[: len(raw) // 2]


_CHILD = r"""
import hashlib, json, marshal, os, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import opaque_ops as oo
from opaque_ops.model import cache
from tests.helpers.reference_models import add_mul_model
from tools.fuzz_records import mutated_record

seed, start, stop, vdir = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
data, _offset, _scale = add_mul_model()
x = np.arange(5, dtype=np.float32).reshape(1, 5)

def run():
    it = oo.Interpreter(model_content=data)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"]).tobytes()

def records():
    return sorted(n for n in os.listdir(vdir) if n.endswith(cache.RECORD_SUFFIX))

want = run()
[name] = records()
with open(os.path.join(vdir, name), "rb") as f:
    raw = f.read()
stem = name[: -len(cache.RECORD_SUFFIX)].rsplit("-", 1)[0]
counts = {"used": 0, "rewritten": 0, "findings": []}
for i in range(start, stop):
    print("CASE", i, flush=True)
    for n in records():
        os.unlink(os.path.join(vdir, n))
    bad = mutated_record(raw, seed, i)
    planted = f"{stem}-{hashlib.blake2b(bad, digest_size=32).hexdigest()}{cache.RECORD_SUFFIX}"
    with open(os.path.join(vdir, planted), "wb") as f:
        f.write(bad)
    os.chmod(os.path.join(vdir, planted), 0o600)
    cache.clear()
    try:
        got = run()
    except BaseException as exc:
        counts["findings"].append([i, f"{type(exc).__name__}: {exc}"[:300]])
        continue
    if got != want:
        counts["findings"].append([i, "other outputs"])
    after = records()
    if after == [planted]:
        counts["used"] += 1
    elif len(after) == 1 and cache._valid_record(marshal.loads(open(os.path.join(vdir, after[0]), "rb").read())):
        counts["rewritten"] += 1
    else:
        counts["findings"].append([i, f"records afterwards: {after}"])
print("RESULT " + json.dumps(counts), flush=True)
"""


def run(n: int, seed: int, chunk: int = 500, start: int = 0) -> dict:
    """Cases ``start`` to ``start + n - 1`` of run ``seed``, ``chunk`` to a child process; the counts."""
    total = {"cases": n, "seed": seed, "used": 0, "rewritten": 0, "crash_count": 0, "crashes": [], "findings": []}
    end = start + n
    while start < end:
        stop = min(end, start + chunk)
        with tempfile.TemporaryDirectory(prefix="oo_fuzz_records_") as tmp:
            vdir = os.path.join(tmp, "verdicts")
            env = dict(os.environ, OPAQUE_OPS_VERDICT_CACHE=vdir)
            p = subprocess.run(
                [sys.executable, "-c", _CHILD, str(ROOT), str(seed), str(start), str(stop), vdir],
                capture_output=True,
                text=True,
                env=env,
                timeout=3600,
            )
        lines = p.stdout.splitlines()
        result = next((line for line in lines if line.startswith("RESULT ")), None)
        if result is None:
            last = next((int(line.split()[1]) for line in reversed(lines) if line.startswith("CASE ")), start)
            total["crash_count"] += 1
            total["crashes"].append([last, p.returncode, p.stderr[-500:]])
            start = last + 1  # go on after the case that killed it
            continue
        counts = json.loads(result[len("RESULT ") :])
        total["used"] += counts["used"]
        total["rewritten"] += counts["rewritten"]
        total["findings"] += counts["findings"]
        start = stop
    total["finding_count"] = len(total["findings"])
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--chunk", type=int, default=500)
    args = ap.parse_args()
    print(json.dumps(run(args.n, args.seed, args.chunk, args.start), indent=1))


if __name__ == "__main__":
    main()
