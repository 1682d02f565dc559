"""Differential fuzzing of the compiled model reader against the Python one.

    python tools/fuzz_reader.py --n 200000 [--seed 1] [--structured 0.1]

The compiled reader (``c/src/modelreader.c``, in the fast calls module) may
return None for any model; when it returns a model, the Python reader must
accept the same bytes and build the same model, value for value
(``tests/helpers/model_compare.py``).  Inputs are the seed models of
``tools/fuzz_structured.py`` (the one-op models, the Atan model, the
wake-word, MediaPipe models present) mutated by ``tools/fuzz_models.py``'s
byte mutations (truncation, bit flips, word overwrites, offset corruption,
splices), a share of them by ``fuzz_structured``'s schema-level mutations
(shapes, types, indices, options, quantization, sparsity, signatures, ...),
and some by both.  Input i is a pure function of (seed, i).

It prints the counts: ``compiled`` (the C reader returned a model, equal to
the Python reader's), ``refused_rejected`` (C returned None, Python raised
ModelError), ``refused_accepted`` (C returned None, Python accepted: the
cases C leaves to Python), and ``findings`` (a mismatch: C returned a model
for bytes Python rejects, or a different model).  Run it under valgrind or
with an AddressSanitizer build of the module to check memory safety
(bench/README.md, "Sixth pass").  The ASan + UBSan module is the fast calls
module's build spec with ``sanitize`` set, through the one build path::

    python -c 'from opaque_ops.build import compiler, extension
    spec = extension.build_spec(); spec.sanitize = ["address", "undefined"]
    print(compiler.compile_cached(spec, "asan-cache")[0])'

and it runs with the sanitizers' runtimes preloaded, as the compiler finds them::

    OPAQUE_OPS_FASTCALLS=<that .so> PYTHONMALLOC=malloc \\
    LD_PRELOAD=$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so) \\
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \\
    python tools/fuzz_reader.py --n 5000 --seed 20261127 --start 0

(``opaque_ops.interpreter.fast_calls.status()`` names the module in use.)
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from opaque_ops.errors import ModelError  # noqa: E402
from opaque_ops.model import reader  # noqa: E402
from tests.helpers.model_compare import differences  # noqa: E402
from tools import fuzz_models, fuzz_structured  # noqa: E402

_SMALL = 300_000  # seeds above this size get fewer byte-level cases (each costs a full read)


def _seeds() -> list[tuple[str, bytes, int]]:
    return fuzz_structured.seed_models()


def input_for(seed: int, i: int, structured: float = 0.1) -> tuple[str, bytes]:
    """Input ``i`` of run ``seed``: (what it is, the bytes)."""
    rng = random.Random(f"reader:{seed}:{i}")
    if rng.random() < structured:
        case = fuzz_structured.make_case(seed, i)
        data, what = case.data, f"structured {case.seed_model} {case.mutations}"
        if rng.random() < 0.3:
            data, what = fuzz_models.mutate(data, rng), what + " + bytes"
        return what, data
    seeds = _seeds()
    name, data, w = rng.choices(seeds, [w * (1 if len(b) < _SMALL else 0.2) for _, b, w in seeds])[0]
    return f"bytes {name}", fuzz_models.mutate(data, rng) if rng.random() < 0.97 else data


def compare(data: bytes) -> str:
    """``compiled``, ``refused_rejected``, ``refused_accepted``, or ``finding: ...``."""
    compiled = reader._read_compiled(data) if len(data) >= 8 else None
    saved, reader._compiled = reader._compiled, None
    try:
        python = reader._read(data)
    except ModelError as exc:
        python = exc
    finally:
        reader._compiled = saved
    if compiled is None:
        return "refused_rejected" if isinstance(python, ModelError) else "refused_accepted"
    if isinstance(python, ModelError):
        return f"finding: the compiled reader accepted what Python rejects ({python})"
    compiled.has_identifier = python.has_identifier  # set by _read, around either reader
    diff = differences(compiled, python)
    return f"finding: {'; '.join(diff[:5])}" if diff else "compiled"


def run(n: int, seed: int = 1, start: int = 0, structured: float = 0.1) -> dict:
    """Counts of :func:`compare`'s outcomes over inputs ``start`` to ``start + n``, and the findings."""
    if reader._compiled is None:
        raise RuntimeError("the compiled reader is not loaded (the fast calls module is not here)")
    counts = {"compiled": 0, "refused_rejected": 0, "refused_accepted": 0, "findings": 0}
    findings = []
    for i in range(start, start + n):
        what, data = input_for(seed, i, structured)
        out = compare(data)
        if out.startswith("finding"):
            counts["findings"] += 1
            findings.append(f"{seed}:{i} {what}: {out}")
        else:
            counts[out] += 1
    return {"counts": counts, "findings": findings[:50]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--structured", type=float, default=0.1, help="share of schema-level mutations")
    ap.add_argument("--save", metavar="SEED:INDEX OUT", nargs=2, help="write one input, to replay it")
    args = ap.parse_args(argv)
    if args.save:
        s, i = (int(x) for x in args.save[0].split(":"))
        Path(args.save[1]).write_bytes(input_for(s, i, args.structured)[1])
        return 0
    from opaque_ops.interpreter import fast_calls

    used, where = fast_calls.status()
    if not used:
        print(f"no fast calls module: {where}", file=sys.stderr)
        return 2
    result = run(args.n, args.seed, args.start, args.structured)
    print(json.dumps(result, indent=1))
    return 1 if result["counts"]["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
