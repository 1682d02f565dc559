"""Shape-lie fuzzing: small graphs of deep tensors whose declared shapes are not the planned ones.

    python tools/fuzz_deep_shapes.py --n 2000 [--seed 1] [--workers 1] [--json out.json] [--library LIB]
    python tools/fuzz_deep_shapes.py --save SEED:INDEX out.tflite   # write one case, to replay it
    python tools/fuzz_deep_shapes.py --replay SEED:INDEX            # run one case here, verbosely

The model checks let a tensor be deeper than 6 dimensions where only
operators of any rank touch it (``opaque_ops.model.checks.limits``), and
follow the shapes from the inputs to see where that depth reaches
(``checks.allocated.deep_reach``).  The runtime plans every tensor from its
inputs' shapes, whatever the model declares, so a declared shape can hide a
depth that the allocation (operator prepare, XNNPACK's delegate prepare)
then meets.  This fuzzer builds chains and small DAGs with
``opaque_ops.model.ModelBuilder`` of the any-rank operators, ADD, SUB, MUL,
TRANSPOSE, RESHAPE, CONCATENATION, NEG and RELU, from inputs of rank 1 to
13; each operator output is declared at its true shape or at a lie
(shallower, deeper, other dimensions), inputs are sometimes declared
shallower and resized to their real shape before the allocation, and
XNNPACK is on or off.

Each case runs Interpreter(...), resize, allocate_tensors(), set_tensor(),
invoke() and get_tensor().  A finding is a child that dies by a signal or
hangs, an exception that is not an ``OpaqueOpsError``, or -- when opaque_ops
runs the case -- outputs that differ (shape, type or a single bit) from
ai_edge_litert's without delegates on the same model and resize.  The
reference runs after opaque_ops in the same child; a reference that raises
or takes the child down is counted as ``no_reference``, not a finding.

Case number i of a run is a pure function of (seed, i).  Cases run in child
processes of ``--chunk`` cases; a dead child is reported with its case, the
case is saved to the work directory, and a fresh child carries on after it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: tools.* must import like in the children
    sys.path.insert(0, str(ROOT))
from tools._fuzz_pool import MEM_LIMIT, add_stats, keep_case, run_child, run_ranges  # noqa: E402 - the fuzzers' one pool

# Dimensions drawn for a shape: mostly 1, so that 13 dimensions stay small.
_DIMS = (1, 1, 1, 1, 2, 2, 3)
# The largest element count of a generated input (and of PACK's and CONCATENATION's inputs).
_MAX_ELEMENTS = 96
# The largest element count and rank of an operator's output; GATHER and GATHER_ND by indices the
# graph makes are sized before numpy runs them.
_MAX_MADE = 4096
_MAX_MADE_RANK = 24


@dataclasses.dataclass
class Case:
    """One case: model bytes, the inputs' values, the resizes and the delegate."""

    seed: int
    index: int
    data: bytes
    inputs: list  # numpy arrays, in the graph's input order (their real shapes)
    resize: list  # (input position, shape) for each input declared at another shape
    xnnpack: bool
    ops: list  # a readable summary: "OP in-shapes -> true out-shape (declared ...)"

    def config(self) -> str:
        return f"xnnpack={'on' if self.xnnpack else 'off'} resize={bool(self.resize)}"


def _shape(rng: random.Random, rank: int) -> list[int]:
    shape = [rng.choice(_DIMS) for _ in range(rank)]
    while int(np.prod(shape)) > _MAX_ELEMENTS:
        shape[shape.index(max(shape))] = 1
    return shape


def _lie(rng: random.Random, shape: list[int]) -> list[int]:
    """The shape to declare for a tensor whose true shape is ``shape``: itself, or a lie."""
    r = rng.random()
    if len(shape) > 6 and r < 0.7:  # deep: declared shallow, which the model checks take
        return _shape(rng, rng.randint(1, 6))
    if r < 0.7:
        return list(shape)
    if r < 0.78:  # shallower: drop leading dimensions
        return list(shape[rng.randrange(len(shape) + 1) :]) if shape else []
    if r < 0.86:  # deeper: leading ones
        return [1] * rng.randrange(1, 5) + list(shape)
    if r < 0.93 and shape:  # other dimensions, the same rank
        return [rng.choice((1, 2, 3, 5)) for _ in shape]
    return _shape(rng, rng.choice((1, 2, 2, 3, 4, 6)))  # an unrelated small shape ([2, 3]-like)


class _Graph:
    """A model under construction, with the true value of every tensor (numpy runs the ops)."""

    def __init__(self, rng: random.Random):
        from opaque_ops.model import ModelBuilder

        self.rng = rng
        self.b = ModelBuilder()
        self.values: dict[int, np.ndarray] = {}  # tensor index -> true value (inputs and op outputs)
        self.ops: list[str] = []
        self.n = 0

    def tensor(self, value: np.ndarray, declared=None) -> int:
        self.n += 1
        shape = _lie(self.rng, list(value.shape)) if declared is None else declared
        t = self.b.add_tensor(f"t{self.n}", shape, value.dtype)
        self.values[t] = value
        return t

    def const(self, value: np.ndarray) -> int:
        self.n += 1
        return self.b.add_constant(f"c{self.n}", value)

    def pick(self, dtype=None) -> int:
        ts = [t for t, v in self.values.items() if dtype is None or v.dtype == dtype]
        # Later tensors more often: chains, with now and then a branch back.
        return ts[-1] if self.rng.random() < 0.6 else self.rng.choice(ts)

    def op(self, name, ins, values, options=None) -> list[int]:
        values = values if isinstance(values, list) else [values]
        if any(v.size > _MAX_MADE or v.ndim > _MAX_MADE_RANK for v in values):
            return []  # (kept small: the reference runs every case too)
        outs = [self.tensor(v) for v in values]
        self.b.add_op(name, ins, outs, options)
        self.ops.append(
            f"{name}{'' if options is None else options} "
            f"{[list(self.values[t].shape) if t in self.values else 'const' for t in ins]} -> "
            f"{[list(v.shape) for v in values]}"
        )
        return outs


# The operators of any rank that make a tensor deeper than their inputs, and CAST (int32 indices).
_DEEPENING = "EXPAND_DIMS PACK GATHER GATHER_ND CAST".split()
# Operators that take at most 6 (or 8) dimensions, to end a deepening chain with.
_SHALLOW = "ADD SUB MUL TRANSPOSE RESHAPE CONCATENATION NEG RELU".split()


def _step(g: _Graph, kinds=None) -> None:
    """Add one operator on tensors already made (if the draw fits; else nothing); ``kinds``: the choice."""
    rng = g.rng
    x = g.pick()
    if kinds is not None and rng.random() < 0.5:  # a deepening chain: mostly from the deepest tensor
        x = max(g.values, key=lambda t: g.values[t].ndim)
    v = g.values[x]
    r = v.ndim
    if kinds is not None:
        kind = rng.choice(kinds)
    elif r > 6 and rng.random() < 0.7:  # deep: mostly the operators that may read it
        kind = rng.choice("EXPAND_DIMS SQUEEZE GATHER GATHER_ND CAST PACK UNPACK".split())
    else:
        kind = rng.choice(
            "EXPAND_DIMS SQUEEZE GATHER GATHER_ND CAST PACK UNPACK ADD SUB MUL TRANSPOSE RESHAPE "
            "CONCATENATION NEG RELU EXPAND_DIMS ADD".split()
        )
    if kind == "EXPAND_DIMS":
        axis = rng.randint(-r - 1, r)
        g.op(kind, [x, g.const(np.array([axis], np.int32))], np.expand_dims(v, axis))
    elif kind == "SQUEEZE":
        ones = [k for k, d in enumerate(v.shape) if d == 1]
        dims = [] if not ones or rng.random() < 0.3 else sorted(rng.sample(ones, rng.randint(1, len(ones))))
        g.op(kind, [x], np.squeeze(v, tuple(dims)) if dims else np.squeeze(v), {"squeeze_dims": dims})
    elif kind == "GATHER" and r >= 1:
        axis = rng.randrange(r)
        # Indices made by the graph (an int32 input, a CAST) when their values fit: their depth
        # then follows the inputs' resize, where a constant's never does.
        made = [
            t for t, w in g.values.items() if w.dtype == np.int32 and w.size and 0 <= w.min() <= w.max() < v.shape[axis]
        ]
        if made and rng.random() < 0.5:
            t = rng.choice(made) if rng.random() < 0.5 else max(made, key=lambda t: g.values[t].ndim)
            w = g.values[t]
            if v.size // v.shape[axis] * w.size <= _MAX_MADE and r + w.ndim <= _MAX_MADE_RANK:
                g.op(kind, [x, t], np.take(v, w, axis=axis), {"axis": axis})
            return
        idx = np.array([rng.randrange(v.shape[axis]) for _ in range(rng.randint(1, 3))], np.int32)
        idx = idx.reshape([1] * rng.randrange(3) + [len(idx)])
        g.op(kind, [x, g.const(idx)], np.take(v, idx, axis=axis), {"axis": axis})
    elif kind == "GATHER_ND" and r >= 1:
        made = [
            t
            for t, w in g.values.items()
            if w.dtype == np.int32
            and w.ndim
            and 1 <= w.shape[-1] <= r
            and w.size
            and w.min() >= 0
            and all(w[..., k].max() < v.shape[k] for k in range(w.shape[-1]))
        ]
        if made and rng.random() < 0.5:
            idx = g.values[rng.choice(made)]
            t = next(t for t, w in g.values.items() if w is idx)
        else:
            depth = rng.randint(1, r)
            rows = rng.randint(1, 2)
            idx = np.array([[rng.randrange(d) for d in v.shape[:depth]] for _ in range(rows)], np.int32)
            idx = idx.reshape([1] * rng.randrange(3) + [rows, depth])
            t = g.const(idx)
        depth = idx.shape[-1]
        if idx.size // depth * int(np.prod(v.shape[depth:])) > _MAX_MADE or idx.ndim + r > _MAX_MADE_RANK:
            return
        g.op(kind, [x, t], v[tuple(np.moveaxis(idx, -1, 0))])
    elif kind == "CAST":
        to = np.int32 if v.dtype == np.float32 else np.float32
        g.op(kind, [x], v.astype(to))
    elif kind == "PACK":
        axis = rng.randint(-r - 1, r)
        if v.size * 2 > _MAX_ELEMENTS:
            return
        g.op(kind, [x, x], np.stack([v, v], axis), {"values_count": 2, "axis": axis})
    elif kind == "UNPACK" and r >= 1:
        axis = rng.randrange(r)
        if not 1 <= v.shape[axis] <= 3:
            return
        parts = [np.take(v, k, axis=axis) for k in range(v.shape[axis])]
        g.op(kind, [x], parts, {"num": len(parts), "axis": axis})
    elif kind in ("ADD", "SUB", "MUL"):
        how = rng.random()
        if how < 0.4:
            y = x
        elif how < 0.7:  # another tensor of the graph, when numpy broadcasts the two
            y = g.pick(v.dtype)
            try:
                np.broadcast_shapes(v.shape, g.values[y].shape)
            except ValueError:
                y = x
        else:  # a constant that broadcasts: a suffix of the shape, some dimensions made 1
            k = rng.randint(0, r)
            cshape = [d if rng.random() < 0.5 else 1 for d in v.shape[r - k :]]
            c = (np.arange(int(np.prod(cshape))).reshape(cshape) % 5 - 2).astype(v.dtype)
            y = g.const(c)
        w = g.values[y] if y in g.values else c
        f = {"ADD": np.add, "SUB": np.subtract, "MUL": np.multiply}[kind]
        g.op(kind, [x, y], f(v, w).astype(v.dtype))
    elif kind == "TRANSPOSE" and 1 <= r <= 10:
        perm = list(range(r))
        rng.shuffle(perm)
        g.op(kind, [x, g.const(np.array(perm, np.int32))], np.transpose(v, perm))
    elif kind == "RESHAPE":
        new = _factor(rng, v.size, rng.randint(0 if v.size == 1 else 1, 11))
        g.op(kind, [x, g.const(np.array(new, np.int32))], v.reshape(new))
    elif kind == "CONCATENATION" and r >= 1:
        axis = rng.randrange(r)
        if v.size * 2 > _MAX_ELEMENTS:
            return
        g.op(kind, [x, x], np.concatenate([v, v], axis), {"axis": axis})
    elif kind == "NEG":
        g.op(kind, [x], -v)
    elif kind == "RELU" and v.dtype == np.float32:
        g.op(kind, [x], np.maximum(v, 0).astype(np.float32))


def _factor(rng: random.Random, size: int, rank: int) -> list[int]:
    """A shape of ``rank`` dimensions with ``size`` elements (the factors of size, then ones)."""
    factors, n = [], size
    for p in (2, 3, 5, 7):
        while n % p == 0:
            factors.append(p)
            n //= p
    if n > 1:
        factors.append(n)
    shape = [1] * max(rank, 1)
    for f in factors:
        shape[rng.randrange(len(shape))] *= f
    return shape if rank else []


def make_case(seed: int, index: int) -> Case:
    """Case ``index`` of run ``seed``: a pure function of the two."""
    rng = random.Random(f"deepshapes:{seed}:{index}")
    g = _Graph(rng)
    inputs, resize = [], []
    # A deepening case: inputs of at most 6 dimensions, declared shallower and resized, through a
    # chain of operators that add dimensions, into one that takes few (see the chain below).
    deepening = rng.random() < 0.4
    for k in range(rng.choice((1, 2, 2)) if deepening else rng.choice((1, 1, 2))):
        real = _shape(rng, rng.randint(5, 6) if deepening else rng.randint(1, 13))
        declared = list(real)
        r = rng.random()
        if r < 0.25 or (
            deepening and r < 0.7
        ):  # declared shallower (the leading dimensions dropped), resized to the real shape
            declared = real[rng.randrange(1, len(real) + 1) :] or [1]
        elif r < 0.35:  # declared at the real shape, resized deeper
            real = [1] * rng.randint(1, 6) + real
        dtype = np.float32 if rng.random() < (0.5 if deepening else 0.7) else np.int32
        # (int32 inputs of 0 and 1, so that they may index: see GATHER.)
        value = (np.arange(int(np.prod(real))).reshape(real) % (7 if dtype == np.float32 else 2)).astype(dtype)
        value = value - 3 if dtype == np.float32 else value
        t = g.tensor(value, declared=declared)
        inputs.append(t)
        if declared != real:
            resize.append((k, real))
    if deepening:
        # The declared shapes of the chain hide the depth it reaches.
        for _ in range(rng.randint(1, 5)):
            _step(g, _DEEPENING)
        _step(g, _SHALLOW)
    else:
        for _ in range(rng.randint(1, 6)):
            _step(g)
    made = [t for t in g.values if t not in inputs]
    outs = [made[-1]] if made else list(inputs[:1])
    if len(made) > 1 and rng.random() < 0.3:
        outs.append(rng.choice(made[:-1]))
    g.b.set_inputs(inputs)
    g.b.set_outputs(outs)
    return Case(
        seed,
        index,
        g.b.build(),
        [g.values[t] for t in inputs],
        resize,
        xnnpack=rng.random() < 0.6,
        ops=g.ops,
    )


def cases(seed: int, start: int = 0, stop: int | None = None):
    """Yield :class:`Case` ``start``, ``start + 1``, ... (forever if ``stop`` is None)."""
    i = start
    while stop is None or i < stop:
        yield make_case(seed, i)
        i += 1


# ---------------------------------------------------------------- running one


def _drive(it, case: Case) -> list[np.ndarray]:
    """Resize, allocate, set the inputs, invoke, read the outputs (copies)."""
    details = it.get_input_details()
    for k, shape in case.resize:
        it.resize_tensor_input(details[k]["index"], shape)
    it.allocate_tensors()
    for d, v in zip(it.get_input_details(), case.inputs):
        it.set_tensor(d["index"], v)
    it.invoke()
    return [np.array(it.get_tensor(d["index"])) for d in it.get_output_details()]


def run_case(case: Case, library=None) -> tuple[str, list | None]:
    """Run one case on opaque_ops in this process.

    Returns ``("ok", outputs)`` or ``("refused: <reason>", None)``.  An
    exception that is not an ``OpaqueOpsError`` propagates: it is a finding.
    """
    import opaque_ops as oo

    try:
        with oo.Interpreter(model_content=case.data, use_xnnpack=case.xnnpack, library=library) as it:
            return "ok", _drive(it, case)
    except oo.OpaqueOpsError as exc:
        return f"refused: {type(exc).__name__}: {exc}", None


def reference(case: Case) -> list | None:
    """ai_edge_litert's outputs without delegates, or None when it does not run the case."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    try:
        it = Interpreter(
            model_content=case.data, experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        )
        return _drive(it, case)
    except Exception:  # noqa: BLE001 - any failure of the peer means no reference
        return None


def compare(got: list, want: list) -> str | None:
    """None when the outputs are bit for bit the same, else what differs."""
    if len(got) != len(want):
        return f"{len(got)} outputs, the reference {len(want)}"
    for k, (a, b) in enumerate(zip(got, want)):
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"output {k}: {a.dtype}{list(a.shape)}, the reference {b.dtype}{list(b.shape)}"
        if a.tobytes() != b.tobytes():
            flat_a, flat_b = a.reshape(-1), b.reshape(-1)  # (a 0-d array has no byte view)
            at = int(np.flatnonzero(flat_a.view(np.uint8) != flat_b.view(np.uint8))[0]) // a.itemsize
            what = SIGNED_ZEROS if a.dtype.kind == "f" and np.array_equal(a, b) else "values differ"
            return f"{what}: output {k}, element {at}: {a.ravel()[at]!r}, the reference {b.ravel()[at]!r}"
    return None


# What :func:`compare` says of outputs equal but for the sign of zeros.  Counted
# apart (``signed_zeros``), not as findings: TFLite 2.23.0's XNNPACK NEG gives
# +0.0 for -(+0.0) where its own kernel, 2.17.1 (XNNPACK on and off) and
# ai_edge_litert give -0.0; numerically the same, and no shape matter.
SIGNED_ZEROS = "signed zeros only"


def reason_key(outcome: str) -> str:
    """A count-friendly outcome: numbers and quoted names masked."""
    import re

    msg = outcome.replace("<model_content> is not a usable TFLite model: ", "")
    msg = re.sub(r"'[^']*'", "'…'", msg)
    msg = re.sub(r"\[[-\d, .]*\]", "[…]", msg)
    msg = re.sub(r"-?\d+", "N", msg)
    return msg[:120]


CHILD = r"""
import sys
sys.path.insert(0, {root!r})
from tools._fuzz_pool import Child
child = Child(case_timeout={case_timeout}, mem_limit={mem_limit})
from tools.fuzz_deep_shapes import SIGNED_ZEROS, compare, make_case, reason_key, reference, run_case
stats = {{"ok": 0, "refused": 0, "compared": 0, "no_reference": 0, "signed_zeros": [], "reasons": {{}}, "configs": {{}}}}
for i in child.cases({start}, {stop}):
    case = make_case({seed}, i)
    stats["configs"][case.config()] = stats["configs"].get(case.config(), 0) + 1
    try:
        res, got = run_case(case, library={library!r})
    except Exception as e:
        child.finding(i, "%s: %s" % (type(e).__name__, str(e)[:300].replace(chr(10), " ")))
        continue
    if res != "ok":
        stats["refused"] += 1
        k = reason_key(res)
        stats["reasons"][k] = stats["reasons"].get(k, 0) + 1
        continue
    stats["ok"] += 1
    # The parent reads a death after "R" as the reference's, not a finding.
    child.reference(i, running=True)
    want = reference(case)
    child.reference(i, running=False)
    if want is None:
        stats["no_reference"] += 1
        continue
    stats["compared"] += 1
    diff = compare(got, want)
    if diff is not None and diff.startswith(SIGNED_ZEROS):
        stats["signed_zeros"].append(i)
    elif diff is not None:
        child.finding(i, "mismatch: %s" % diff)
child.stats(stats)
"""


def _run_range(seed, start, stop, library, case_timeout) -> dict:
    """Run cases [start, stop) in one child; on a death, report it and where."""
    code = CHILD.format(
        root=str(ROOT),
        seed=seed,
        start=start,
        stop=stop,
        library=library,
        mem_limit=MEM_LIMIT,
        case_timeout=case_timeout,
    )
    return run_child(code, start, stop, 60 + case_timeout * (stop - start))


def run(
    n: int,
    seed: int,
    workdir: Path,
    chunk: int = 100,
    workers: int = 1,
    start: int = 0,
    progress: bool = False,
    library=None,
    case_timeout: float = 20.0,
) -> dict:
    """Run cases ``start .. start+n-1`` in child processes and return the totals.

    ``ok``, ``refused`` and ``compared`` count the cases of children that
    finished; ``unaccounted`` those a dead child had run (their outcomes died
    with it); ``reference_deaths`` the cases whose reference took the child
    down after opaque_ops ran them (no reference: not findings);
    ``signed_zeros`` the cases whose outputs differ from the reference's in
    the sign of zeros alone (see :data:`SIGNED_ZEROS`).
    """
    totals = {
        "cases": n,
        "seed": seed,
        "start": start,
        "library": library or os.environ.get("OPAQUE_OPS_TFLITE_LIB"),
        "ok": 0,
        "refused": 0,
        "compared": 0,
        "no_reference": 0,
        "signed_zeros": [],
        "unaccounted": 0,
        "reference_deaths": [],
        "crashes": [],
        "findings": [],
        "reasons": {},
        "configs": {},
    }
    t0 = time.time()

    def take(res: dict, a: int) -> None:
        st = res["stats"]
        if st is not None:
            add_stats(totals, st, ("ok", "refused", "compared", "no_reference", "signed_zeros"), ("reasons", "configs"))
        else:
            totals["unaccounted"] += max(res["partial"], 0)
        totals["findings"].extend(res["findings"])
        if res["reference_died"] is not None:
            totals["reference_deaths"].append(res["reference_died"])
        c = res["crash"]
        if c is not None:
            case = make_case(seed, c["index"])
            c.update(
                file=keep_case(workdir, f"deep-{seed}-{c['index']}", case.data),
                config=case.config(),
                resize=case.resize,
                ops=case.ops,
            )
            totals["crashes"].append(c)
        if progress:
            for f in res["findings"]:
                print(f"FINDING {f}", file=sys.stderr, flush=True)
            if c is not None:
                print(f"DEATH at case {c['index']} (rc {c['returncode']})", file=sys.stderr, flush=True)

    def chunk_done(k: int, count: int) -> None:
        if progress:
            print(
                f"[{time.time() - t0:6.0f}s] chunk {k + 1}/{count}: ok {totals['ok']} refused "
                f"{totals['refused']} compared {totals['compared']} crashes {len(totals['crashes'])} "
                f"findings {len(totals['findings'])}",
                file=sys.stderr,
                flush=True,
            )

    run_ranges(
        start,
        start + n,
        chunk,
        lambda a, b: _run_range(seed, a, b, library, case_timeout),
        take,
        workers=workers,
        chunk_done=chunk_done,
    )
    totals["seconds"] = round(time.time() - t0, 1)
    return totals


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=100)
    ap.add_argument("--library", default=None, help="the libtensorflowlite_c to run on (else OPAQUE_OPS_TFLITE_LIB)")
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--save", nargs=2, metavar=("SEED:INDEX", "OUT"))
    ap.add_argument("--replay", metavar="SEED:INDEX")
    args = ap.parse_args(argv)
    if args.save or args.replay:
        seed, index = (int(v) for v in (args.save[0] if args.save else args.replay).split(":"))
        case = make_case(seed, index)
        about = {"config": case.config(), "resize": case.resize, "ops": case.ops}
        if args.save:
            Path(args.save[1]).write_bytes(case.data)
            print(json.dumps(about))
            return 0
        print(json.dumps(about), flush=True)
        res, got = run_case(case, library=args.library)
        print(res)
        if got is not None:
            want = reference(case)
            print("reference:", "none" if want is None else compare(got, want) or "the same")
        return 0
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="oo_deepfuzz_"))
    workdir.mkdir(parents=True, exist_ok=True)
    totals = run(
        args.n,
        args.seed,
        workdir,
        chunk=args.chunk,
        workers=args.workers,
        start=args.start,
        progress=args.progress,
        library=args.library,
    )
    totals["reasons"] = dict(sorted(totals["reasons"].items(), key=lambda kv: -kv[1]))
    text = json.dumps(totals, indent=1, default=str)
    if args.json:
        Path(args.json).write_text(text)
    print(text[-20000:])
    return 1 if totals["crashes"] or totals["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
