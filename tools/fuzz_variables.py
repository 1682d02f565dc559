"""Differential fuzzing of resource-variable programs: opaque_ops (XNNPACK on and off) against ai-edge-litert.

    python tools/fuzz_variables.py --n 2000 [--seed 1] [--workers 1] [--json out.json] [--library LIB]
    python tools/fuzz_variables.py --save SEED:INDEX out.tflite   # write one case's model, print its program
    python tools/fuzz_variables.py --replay SEED:INDEX            # run one case here, verbosely

Each case is a small random model built with TFLite's own schema module
(``ai_edge_litert.schema_py_generated``, through tests' ``SchemaModel`` way
of writing it): one to three resource variables known by (container,
shared_name), VAR_HANDLEs of them in several subgraphs, an optional
CALL_ONCE init subgraph that assigns constants (of a read's shape or
another), ASSIGN_VARIABLE and READ_VARIABLE in subgraph 0 in random order,
IFs whose branches assign (the condition an input, or computed from it),
and an optional second signature ``init`` that assigns; then a random
sequence of calls: ``invoke()``, the signature runners, and
``reset_all_variables()``.

Every case runs in a child process, three ways: ai-edge-litert with no
delegates (the reference: TFLite's builtin kernels,
tensorflow/lite/kernels/{var_handle,assign_variable,read_variable}.cc), and
opaque_ops with XNNPACK off and on.  Findings:

- a signal, abort or hang of the child (``crashes``; stderr names the stage);
- an exception from opaque_ops that is not an ``OpaqueOpsError``;
- a call whose outputs differ, bit for bit (shape, type and bytes), from the
  reference's where both ran;
- a call opaque_ops ran where the reference failed with READ_VARIABLE's
  error (the values read are not defined: uninitialised memory on 2.23 with
  XNNPACK).

A refusal (``OpaqueOpsError`` raised before TFLite ran) where the reference
ran is a *false refusal*: counted and listed apart (``false_refusals``), not
a finding.  After the first call where either side fails, a case's sequence
stops (the two interpreters' states may differ from there on).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: tools.* must import like in the children
    sys.path.insert(0, str(ROOT))
from tools._fuzz_pool import keep_case, last_stage, run_child, run_ranges  # noqa: E402 - the fuzzers' one pool

#: Shapes of constants and of declared reads; x, subgraph 0's input, is the first.
SHAPES = [(2, 6), (3, 4), (12,), (1, 6), (2, 6)]
#: Variable names: (container, shared_name); one pair shares a name across containers.
NAMES = [(None, b"a"), (None, b"b"), (b"c", b"a"), (b"c", b"b"), (None, b"state")]
X_SHAPE = (2, 6)

# ------------------------------------------------------------------ the programs


@dataclasses.dataclass
class Case:
    """One case: a program (the model's steps) and the calls made on it."""

    seed: int
    index: int
    program: dict
    calls: list
    data: bytes

    def describe(self) -> str:
        return json.dumps({"program": self.program, "calls": self.calls}, default=str)


def _const(rng: random.Random, shape) -> list:
    base = rng.choice([0.5, 7.0, -3.0, 100.0])
    return (np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + base).tolist()


def _assign(rng: random.Random, var: int, has_x: bool, shapes) -> list:
    if has_x and rng.random() < 0.5:
        return ["assign", var, "x"]
    return ["assign", var, _const(rng, rng.choice(shapes))]


def make_program(rng: random.Random) -> dict:
    """A random program: variables, subgraph 0's steps, IFs' branches, CALL_ONCE init and an ``init`` signature."""
    names = rng.sample(NAMES, rng.choice([1, 1, 2, 2, 3]))
    nvar = len(names)
    # Each variable's "own" shape: that of x or another; assignments mostly keep to it.
    own = [rng.choice(SHAPES) for _ in names]

    def shapes_for(v):
        return [own[v]] * 3 + [rng.choice(SHAPES)]

    main = []
    for _ in range(rng.randint(1, 5)):
        r = rng.random()
        v = rng.randrange(nvar)
        if r < 0.4:
            main.append(["read", v, list(rng.choice([own[v]] * 2 + [rng.choice(SHAPES)]))])
        elif r < 0.75:
            main.append(_assign(rng, v, True, shapes_for(v)))
        else:
            branches = []
            for _b in range(2):
                steps = []
                for _s in range(rng.choice([0, 1, 1, 2])):
                    w = rng.randrange(nvar)
                    steps.append(_assign(rng, w, True, shapes_for(w)))
                branches.append(steps)
            main.append(["if", rng.random() < 0.3, branches[0], branches[1]])
    if not any(s[0] == "read" for s in main):
        v = rng.randrange(nvar)
        main.append(["read", v, list(own[v])])
    once = []
    if rng.random() < 0.4:
        for _ in range(rng.randint(1, 2)):
            v = rng.randrange(nvar)
            once.append(["assign", v, _const(rng, rng.choice(shapes_for(v)))])
    init = None
    if rng.random() < 0.35:
        init = []
        for _ in range(rng.randint(1, 2)):
            v = rng.randrange(nvar)
            init.append(_assign(rng, v, True, shapes_for(v)))
    return {
        "names": [[c.decode() if c else None, s.decode()] for c, s in names],
        "main": main,
        "call_once": once,
        "init": init,
    }


def make_calls(rng: random.Random, program: dict) -> list:
    """A call sequence: ``invoke``, ``main``/``init`` (signature runners) and ``reset``, each with its inputs."""
    kinds = ["invoke", "invoke", "reset"]
    if program["init"] is not None:
        kinds += ["main", "init", "init"]
    calls = []
    for _ in range(rng.randint(1, 5)):
        k = rng.choice(kinds)
        x = round(rng.uniform(-50, 50), 2)
        calls.append([k, x, rng.random() < 0.5])
    return calls


def build(program: dict) -> bytes:
    """The model of ``program`` (see :func:`make_program`), as TFLite flatbuffer bytes."""
    from ai_edge_litert import schema_py_generated as schema

    ops = schema.BuiltinOperator
    model = schema.ModelT()
    model.version = 3
    model.buffers = [schema.BufferT()]
    model.operatorCodes = []
    names = [(c.encode() if c else None, s.encode()) for c, s in program["names"]]
    ifs = [s for s in program["main"] if s[0] == "if"]
    once_index = 1 + 2 * len(ifs) if program["call_once"] else None
    init_index = 1 + 2 * len(ifs) + (1 if program["call_once"] else 0) if program["init"] is not None else None

    class Sub:
        def __init__(self):
            self.t = schema.SubGraphT()
            self.t.tensors, self.t.operators, self.t.inputs, self.t.outputs = [], [], [], []

        def tensor(self, name, shape, kind=schema.TensorType.FLOAT32, values=None):
            t = schema.TensorT()
            t.name, t.shape, t.type, t.buffer = name.encode(), list(shape), kind, 0
            if values is not None:
                buf = schema.BufferT()
                buf.data = np.asarray(values).tobytes()
                model.buffers.append(buf)
                t.buffer = len(model.buffers) - 1
            self.t.tensors.append(t)
            return len(self.t.tensors) - 1

        def op(self, code, ins, outs, options_type=0, options=None):
            codes = [c.builtinCode for c in model.operatorCodes]
            if code not in codes:
                c = schema.OperatorCodeT()
                c.builtinCode, c.deprecatedBuiltinCode, c.version = code, min(code, 127), 1
                model.operatorCodes.append(c)
                codes.append(code)
            o = schema.OperatorT()
            o.opcodeIndex = codes.index(code)
            o.inputs, o.outputs = list(ins), list(outs)
            o.builtinOptionsType, o.builtinOptions = options_type, options
            self.t.operators.append(o)

        def handle(self, v):
            h = self.tensor(f"handle{len(self.t.tensors)}", [], schema.TensorType.RESOURCE)
            options = schema.VarHandleOptionsT()
            options.container, options.sharedName = names[v]
            self.op(ops.VAR_HANDLE, [], [h], schema.BuiltinOptions.VarHandleOptions, options)
            return h

        def add_zero(self, x):
            y = self.tensor(f"y{len(self.t.tensors)}", X_SHAPE)
            self.op(ops.ADD, [x, self.tensor("zero", [1], values=np.zeros(1, np.float32))], [y])
            return y

        def assign(self, step, x):
            _, v, value = step
            if isinstance(value, str):
                src = x
            else:
                arr = np.asarray(value, np.float32)
                src = self.tensor(f"value{len(self.t.tensors)}", arr.shape, values=arr)
            self.op(ops.ASSIGN_VARIABLE, [self.handle(v), src], [])

    subs = []
    main = Sub()
    subs.append(main)
    x = main.tensor("x", X_SHAPE)
    cond = main.tensor("cond", [1], schema.TensorType.BOOL) if ifs else None
    main.t.inputs = [x] + ([cond] if ifs else [])
    if once_index is not None:
        options = schema.CallOnceOptionsT()
        options.initSubgraphIndex = once_index
        main.op(ops.CALL_ONCE, [], [], schema.BuiltinOptions.CallOnceOptions, options)
    outs = {"y": main.add_zero(x)}
    k_if = 0
    for n, step in enumerate(program["main"]):
        if step[0] == "assign":
            main.assign(step, x)
        elif step[0] == "read":
            r = main.tensor(f"read{n}", step[2])
            main.op(ops.READ_VARIABLE, [main.handle(step[1])], [r])
            outs[f"read{n}"] = r
        else:
            picks = cond
            if step[1]:
                picks = main.tensor(f"not{n}", [1], schema.TensorType.BOOL)
                main.op(ops.LOGICAL_NOT, [cond], [picks])
            y = main.tensor(f"if{n}", X_SHAPE)
            options = schema.IfOptionsT()
            options.thenSubgraphIndex, options.elseSubgraphIndex = 1 + 2 * k_if, 2 + 2 * k_if
            main.op(ops.IF, [picks, x], [y], schema.BuiltinOptions.IfOptions, options)
            outs[f"if{n}"] = y
            k_if += 1
    main.t.outputs = list(outs.values())
    for step in ifs:
        for steps in (step[2], step[3]):
            b = Sub()
            xb = b.tensor("x", X_SHAPE)
            for s in steps:
                b.assign(s, xb)
            b.t.inputs, b.t.outputs = [xb], [b.add_zero(xb)]
            subs.append(b)
    if once_index is not None:
        b = Sub()
        for s in program["call_once"]:
            b.assign(s, None)
        subs.append(b)
    if init_index is not None:
        b = Sub()
        xb = b.tensor("x", X_SHAPE)
        for s in program["init"]:
            b.assign(s, xb)
        b.t.inputs, b.t.outputs = [xb], [b.add_zero(xb)]
        subs.append(b)

        def tensor_maps(named):
            out = []
            for name, index in named.items():
                m = schema.TensorMapT()
                m.name, m.tensorIndex = name, index
                out.append(m)
            return out

        sigs = []
        main_ins = {"x": x} | ({"cond": cond} if ifs else {})
        for key, k, ins, o in (("main", 0, main_ins, outs), ("init", init_index, {"x": xb}, {"y": b.t.outputs[0]})):
            sig = schema.SignatureDefT()
            sig.signatureKey, sig.subgraphIndex = key, k
            sig.inputs, sig.outputs = tensor_maps(ins), tensor_maps(o)
            sigs.append(sig)
        model.signatureDefs = sigs
    model.subgraphs = [s.t for s in subs]
    import flatbuffers

    fb = flatbuffers.Builder(0)
    fb.Finish(model.Pack(fb), file_identifier=b"TFL3")
    return bytes(fb.Output())


def make_case(seed: int, index: int) -> Case:
    """Case ``index`` of run ``seed``: a pure function of the two."""
    rng = random.Random(f"variables:{seed}:{index}")
    program = make_program(rng)
    calls = make_calls(rng, program)
    return Case(seed, index, program, calls, build(program))


# ---------------------------------------------------------------- running one


def _x(value: float) -> np.ndarray:
    return np.arange(12, dtype=np.float32).reshape(X_SHAPE) + np.float32(value)


def _outcome(values) -> list:
    return [[list(v.shape), str(v.dtype), v.tobytes().hex()] for v in values]


def run_calls(it, case: Case, error_type) -> list:
    """Make the case's calls on ``it`` (opaque_ops' or ai-edge-litert's interpreter, allocated).

    Returns one row per call made: ``["ok", outputs]`` (each ``[shape,
    dtype, hex bytes]``), or ``["error", "Class: message"]`` for an
    ``error_type`` exception, after which no further call is made.  Other
    exceptions propagate.
    """
    has_cond = any(s[0] == "if" for s in case.program["main"])
    rows = []
    for kind, xv, cv in case.calls:
        try:
            if kind == "reset":
                it.reset_all_variables()
                rows.append(["ok", []])
                continue
            if kind in ("main", "init"):
                runner = it.get_signature_runner(kind)
                ins = {"x": _x(xv)}
                if kind == "main" and has_cond:
                    ins["cond"] = np.array([cv])
                got = runner(**ins)
                rows.append(["ok", _outcome([np.asarray(got[k]) for k in sorted(got)])])
                continue
            details = it.get_input_details()
            it.set_tensor(details[0]["index"], _x(xv))
            if has_cond:
                it.set_tensor(details[1]["index"], np.array([cv]))
            it.invoke()
            rows.append(["ok", _outcome([np.array(it.get_tensor(d["index"])) for d in it.get_output_details()])])
        except error_type as exc:
            rows.append(["error", f"{type(exc).__name__}: {str(exc)[:300]}"])
            break
    return rows


def reference(case: Case) -> list:
    """The calls on ai-edge-litert with no delegates (its builtin kernels only)."""
    from ai_edge_litert import interpreter as litert

    try:
        it = litert.Interpreter(
            model_content=case.data,
            experimental_op_resolver_type=litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
        )
        it.allocate_tensors()
    except (RuntimeError, ValueError) as exc:
        return [["error", f"{type(exc).__name__}: {str(exc)[:300]}"]]
    return run_calls(it, case, (RuntimeError, ValueError))


def ours(case: Case, xnnpack: bool, library=None) -> list:
    """The calls on opaque_ops; an ``OpaqueOpsError`` ends them (``["refused", ...]`` when TFLite did not run)."""
    import opaque_ops as oo

    try:
        it = oo.Interpreter(model_content=case.data, use_xnnpack=xnnpack, library=library)
        it.allocate_tensors()
    except oo.OpaqueOpsError as exc:
        return [["error", f"{type(exc).__name__}: {str(exc)[:300]}"]]
    return run_calls(it, case, oo.OpaqueOpsError)


def _is_tflite_failure(message: str) -> bool:
    """Whether our error is TFLite's own (an invoke that ran and failed), not a refusal before it."""
    return "failed to invoke" in message.lower() or "read_variable.cc" in message or "TFLiteError:" in message


def compare(ref: list, got: list) -> tuple[list, list]:
    """Findings and false refusals of opaque_ops' rows ``got`` against the reference's ``ref``."""
    findings, false = [], []
    for k, g in enumerate(got):
        r = ref[k] if k < len(ref) else ["error", "(reference stopped)"]
        if g[0] == "ok" and r[0] == "ok":
            if g[1] != r[1]:
                findings.append(f"call {k}: values differ from the reference's: ours {_short(g[1])} ref {_short(r[1])}")
                break
        elif g[0] == "ok":
            if "read_variable" in r[1].lower() or "READ_VARIABLE" in r[1]:
                findings.append(f"call {k}: ran where the reference failed ({r[1][:160]}): ours {_short(g[1])}")
            break
        elif r[0] == "ok":
            if not g[1].startswith("KernelError") or "nothing has assigned" in g[1]:
                false.append(f"call {k}: {g[1][:200]}")
            else:
                false.append(f"call {k} (TFLite failed here, the reference ran): {g[1][:200]}")
            break
        else:
            break
    return findings, false


def _short(outs: list) -> str:
    return json.dumps(
        [[s, d, np.frombuffer(bytes.fromhex(h), np.dtype(d)).tolist()[:6]] for s, d, h in outs if d.startswith("float")]
    )


def overreads(case: Case) -> list:
    """Per call, whether a READ_VARIABLE in it copies past its variable's value, by TFLite's builtin semantics.

    A model of tensorflow/lite/kernels/read_variable.cc: the read
    copies as many bytes as its declared output holds out of the variable's
    buffer, which ASSIGN_VARIABLE (assign_variable.cc) sizes to the value
    stored; a read declared larger than that reads past the buffer (its
    values are not defined, whichever runtime runs it).  CALL_ONCE runs its
    subgraph at the interpreter's first invoke of subgraph 0 only;
    ``reset_all_variables()`` leaves resource variables as they are.  The
    list stops at the first call that reads a variable never assigned (TFLite
    fails it).
    """
    held: dict = {}  # variable -> elements of its value
    once_done = False
    has_cond = any(s[0] == "if" for s in case.program["main"])

    def size(value):
        return 12 if isinstance(value, str) else int(np.size(value))

    def assigns(steps):
        for _, v, value in steps:
            held[v] = size(value)

    out = []
    for kind, _x, cond in case.calls:
        over = False
        if kind == "init":
            assigns(case.program["init"])
        elif kind in ("invoke", "main"):
            if not once_done:
                assigns(case.program["call_once"])
                once_done = True
            for step in case.program["main"]:
                if step[0] == "assign":
                    assigns([step])
                elif step[0] == "if":
                    picked = (not cond) if step[1] else cond
                    assigns(step[2] if (picked and has_cond) else step[3])
                elif step[1] not in held:
                    return out
                elif int(np.prod(step[2])) > held[step[1]]:
                    over = True
        out.append(over)
    return out


def run_case(case: Case, library=None, stage=None) -> dict:
    """Run one case three ways and compare; returns ``{"findings": [...], "false_refusals": [...], "rows": ...}``.

    An exception from opaque_ops that is not an ``OpaqueOpsError`` is a finding.
    """
    say = stage or (lambda s: None)
    say("reference")
    ref = reference(case)
    out = {"findings": [], "false_refusals": [], "rows": {"reference": ref}}
    for xnnpack in (False, True):
        tag = "xnnpack" if xnnpack else "builtin"
        say(tag)
        try:
            got = ours(case, xnnpack, library)
        except Exception as exc:  # noqa: BLE001 - any other exception is a finding
            out["findings"].append(f"{tag}: {type(exc).__name__}: {str(exc)[:300]}")
            continue
        out["rows"][tag] = got
        f, fr = compare(ref, got)
        out["findings"] += [f"{tag}: {m}" for m in f]
        out["false_refusals"] += [f"{tag}: {m}" for m in fr]
        for k, over in enumerate(overreads(case)):
            if over and k < len(got) and got[k][0] == "ok":
                out["findings"].append(f"{tag}: call {k}: a READ_VARIABLE read past its variable's value, not refused")
                break
    return out


CHILD = r"""
import sys
sys.path.insert(0, {root!r})
from tools._fuzz_pool import Child
from tools.fuzz_variables import make_case, run_case
stats = {{"cases": 0, "false_refusals": [], "findings": 0}}
child = Child(case_timeout={case_timeout})
for i in child.cases({start}, {stop}):
    case = make_case({seed}, i)
    res = run_case(case, library={library!r}, stage=child.stage)
    stats["cases"] += 1
    for f in res["findings"]:
        child.finding(i, f.replace(chr(10), " "))
    stats["findings"] += len(res["findings"])
    stats["false_refusals"] += ["%d %s" % (i, f) for f in res["false_refusals"]]
child.stats(stats)
"""


def _run_range(seed: int, start: int, stop: int, library=None, case_timeout: float = 20.0) -> dict:
    code = CHILD.format(root=str(ROOT), seed=seed, start=start, stop=stop, library=library, case_timeout=case_timeout)
    return run_child(code, start, stop, 60 + case_timeout * (stop - start))


def run(
    n: int, seed: int, workdir: Path, chunk: int = 100, start: int = 0, library=None, progress: bool = False
) -> dict:
    """Run cases ``start .. start+n-1`` in child processes (one at a time) and return the totals.

    A child that dies or hangs is reported with its case (saved to
    ``workdir``) and the stage it was in; a fresh child carries on after it.
    """
    totals: dict = {"cases": n, "seed": seed, "start": start, "run": 0, "crashes": [], "findings": []}
    totals["false_refusals"] = []
    t0 = time.time()

    def take(res: dict, a: int) -> None:
        st = res["stats"]
        if st is not None:
            totals["run"] += st["cases"]
            totals["false_refusals"] += st["false_refusals"]
        totals["findings"] += res["findings"]
        if res["crash"] is not None:
            c = res["crash"]
            totals["run"] += max(res["partial"], 0) + 1
            if c["index"] >= a:
                case = make_case(seed, c["index"])
                file = keep_case(workdir, f"crash-{seed}-{c['index']}", case.data)
                c.update(file=file, stage=last_stage(c["stderr"]), case=case.describe())
            totals["crashes"].append(c)
            if progress:
                print(f"CRASH at {c['index']}: {c.get('stage')} rc {c['returncode']}", file=sys.stderr, flush=True)
        if progress:
            print(
                f"[{time.time() - t0:6.0f}s] {max(res['done'], a + 1) - start}/{n}: findings {len(totals['findings'])} "
                f"crashes {len(totals['crashes'])} false refusals {len(totals['false_refusals'])}",
                file=sys.stderr,
                flush=True,
            )

    run_ranges(start, start + n, chunk, lambda a, b: _run_range(seed, a, b, library=library), take)
    totals["seconds"] = round(time.time() - t0, 1)
    return totals


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--workers", type=int, default=1, help="accepted for the fuzzers' common usage; cases run serially")
    ap.add_argument("--chunk", type=int, default=100)
    ap.add_argument("--library", default=None, help="the libtensorflowlite_c to run on")
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--save", nargs=2, metavar=("SEED:INDEX", "OUT"))
    ap.add_argument("--replay", metavar="SEED:INDEX")
    args = ap.parse_args(argv)
    if args.save or args.replay:
        seed, index = (int(v) for v in (args.save[0] if args.save else args.replay).split(":"))
        case = make_case(seed, index)
        print(case.describe(), flush=True)
        if args.save:
            Path(args.save[1]).write_bytes(case.data)
            return 0
        print(json.dumps(run_case(case, library=args.library), indent=1))
        return 0
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="oo_vfuzz_"))
    workdir.mkdir(parents=True, exist_ok=True)
    totals = run(
        args.n, args.seed, workdir, chunk=args.chunk, start=args.start, library=args.library, progress=args.progress
    )
    totals["finding_count"] = len(totals["findings"])
    totals["false_refusal_count"] = len(totals["false_refusals"])
    text = json.dumps(totals, indent=1, default=str)
    if args.json:
        Path(args.json).write_text(text)
    print(text[-20000:])
    return 1 if totals["crashes"] or totals["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
