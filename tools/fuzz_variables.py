"""Differential fuzzing of resource-variable programs: opaque_ops (XNNPACK on and off) against ai-edge-litert.

    python tools/fuzz_variables.py --n 2000 [--seed 1] [--workers 1] [--json out.json] [--library LIB] [--malloc-check]
    python tools/fuzz_variables.py --save SEED:INDEX out.tflite   # write one case's model, print its program
    python tools/fuzz_variables.py --replay SEED:INDEX            # run one case here, verbosely
    python tools/fuzz_variables.py --case '{"program": ..., "calls": ...}'  # run a hand-written case here

Each case is a small random model built with TFLite's own schema module
(``ai_edge_litert.schema_py_generated``, through tests' ``SchemaModel`` way
of writing it): one to three resource variables known by (container,
shared_name), VAR_HANDLEs of them in several subgraphs, an optional
CALL_ONCE init subgraph that assigns constants (of a read's shape or
another), ASSIGN_VARIABLE and READ_VARIABLE in subgraph 0 in random order,
IFs whose branches assign (the condition an input, or computed from it),
and an optional second signature ``init`` that assigns; then a random
sequence of calls: ``invoke()``, the signature runners, and
``reset_all_variables()``.  Three cases in five also resize subgraph 0's x
between calls (``["resize", shape]``: ``resize_tensor_input`` and
``allocate_tensors()``, to twelve values in another shape, fewer or more;
some make x smaller before the first call and larger after it), and some
declare their reads with rank 0 (dynamic: the read takes its variable's
shape) or store constants of x's other sizes (:func:`resize_program`,
:func:`resize_calls`: a stream of their own, so a seed's base programs stay
what they were before resizes came in).

Every case runs in a child process, three ways: ai-edge-litert with no
delegates (the reference: TFLite's builtin kernels,
tensorflow/lite/kernels/{var_handle,assign_variable,read_variable}.cc), and
opaque_ops with XNNPACK off and on.  Findings:

- a signal, abort or hang of the child (``crashes``; stderr names the stage).
  Heap damage may kill the child a few cases later, so each crash's case is
  run again alone (``alone``: ``clean`` when it does not die then), and
  ``--malloc-check`` preloads glibc's checking allocator in the children to
  catch the damage at the case that made it.  A crash on 2.23 with XNNPACK
  in a case that stores a value of another size than its variable's first
  (:func:`xnnpack_store_change`) is listed apart
  (``crashes_xnnpack_store_larger`` / ``_smaller`` / ``_reshaped``);
- an exception from opaque_ops that is not an ``OpaqueOpsError``;
- a call whose outputs differ, bit for bit (shape, type and bytes), from the
  reference's where both ran;
- a call opaque_ops ran where the reference failed with READ_VARIABLE's
  error (the values read are not defined: uninitialised memory on 2.23 with
  XNNPACK).
- a call opaque_ops ran whose READ_VARIABLE reads past its variable's
  value (:func:`read_checks`: the reference reads heap bytes there too).

A refusal (``OpaqueOpsError`` raised before TFLite ran) where the reference
ran is a *false refusal*: counted and listed apart (``false_refusals``), not
a finding; those marked ``[read mismatch ahead]``
(``false_refusals_mismatch_ahead``) are at a call from which on a read
disagrees with its variable's value (:func:`read_checks`), which the
declared-shape rules refuse on purpose.  After the first call where either
side fails, a case's sequence stops (the two interpreters' states may differ
from there on).
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
from tools._fuzz_pool import keep_case, last_stage, run_child, run_ranges  # noqa: E402 - the fuzzers' one pool

#: Shapes of constants and of declared reads; x, subgraph 0's input, is the first.
SHAPES = [(2, 6), (3, 4), (12,), (1, 6), (2, 6)]
#: Variable names: (container, shared_name); one pair shares a name across containers.
NAMES = [(None, b"a"), (None, b"b"), (b"c", b"a"), (b"c", b"b"), (None, b"state")]
X_SHAPE = (2, 6)
#: Shapes a ``["resize", shape]`` call gives x (and constants of the sizes x
#: takes then): twelve values in other shapes, fewer, and more.
X_SHAPES = [(2, 6), (2, 3), (4, 6), (1, 12), (3, 4), (1, 6), (2, 9), (12,)]
#: The mark of a false refusal at a call from which on a read disagrees with its variable's value.
MISMATCH_AHEAD = "[read mismatch ahead]"
#: glibc's checking allocator (``--malloc-check``).
MALLOC_DEBUG = Path("/lib/x86_64-linux-gnu/libc_malloc_debug.so.0")

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


def resize_program(rng: random.Random, program: dict) -> None:
    """Reshape ``program`` for resized inputs: some reads declared with rank 0, some constants of x's other sizes.

    A READ_VARIABLE declared with rank 0 is dynamic (it takes its variable's
    shape at each read, tensorflow/lite/kernels/read_variable.cc), the one
    declaration that stays right when a resize changes the x a variable
    holds.  A constant of one of :data:`X_SHAPES` stored in a branch or at
    CALL_ONCE makes a variable hold fewer or more values than x does.  The
    program is changed in place, from ``rng`` alone (a stream apart from
    :func:`make_program`'s, so each case's base program stays what it was).
    """
    p_rank0 = rng.choice([0.0, 0.5, 1.0])

    def steps():
        for step in program["main"]:
            yield step
            if step[0] == "if":
                yield from step[2]
                yield from step[3]
        yield from program["call_once"]
        yield from program["init"] or []

    for step in steps():
        if step[0] == "read" and rng.random() < p_rank0:
            step[2] = []
        elif step[0] == "assign" and not isinstance(step[2], str) and rng.random() < 0.2:
            step[2] = _const(rng, rng.choice(X_SHAPES[1:]))


def resize_calls(rng: random.Random, calls: list) -> list:
    """``calls`` with ``["resize", shape]`` calls of x put in between, or none (two cases in five).

    A resize is ``resize_tensor_input`` of subgraph 0's x and
    ``allocate_tensors()``; the inputs of subgraph 0 fed after it take the
    new shape (the ``init`` runner's x keeps its own).  One case in three of
    those that resize also makes x smaller before any call and larger after
    the first invoke: the variables then hold a smaller x before a larger
    one.
    """
    if rng.random() < 0.4:
        return calls
    out = list(calls)
    for _ in range(rng.choice([1, 1, 2, 3])):
        out.insert(rng.randint(0, len(out)), ["resize", list(rng.choice(X_SHAPES))])
    if rng.random() < 1 / 3:
        small = rng.choice([(2, 3), (1, 6), (3, 4), (2, 6)])
        large = rng.choice([s for s in X_SHAPES if np.prod(s) > np.prod(small)])
        first = next((k for k, c in enumerate(out) if c[0] in ("invoke", "main")), len(out) - 1)
        out.insert(first + 1, ["resize", list(large)])
        out.insert(first + 2, ["invoke", round(rng.uniform(-50, 50), 2), rng.random() < 0.5])
        out.insert(0, ["resize", list(small)])
    return out


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
    more = random.Random(f"variables-resize:{seed}:{index}")
    resize_program(more, program)
    calls = resize_calls(more, calls)
    return Case(seed, index, program, calls, build(program))


# ---------------------------------------------------------------- running one


def _x(value: float, shape=X_SHAPE) -> np.ndarray:
    shape = tuple(shape)
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + np.float32(value)


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
    shape = X_SHAPE
    for call in case.calls:
        kind = call[0]
        try:
            if kind == "reset":
                it.reset_all_variables()
                rows.append(["ok", []])
                continue
            if kind == "resize":
                shape = tuple(call[1])
                it.resize_tensor_input(it.get_input_details()[0]["index"], list(shape))
                it.allocate_tensors()
                rows.append(["ok", []])
                continue
            _, xv, cv = call
            if kind in ("main", "init"):
                runner = it.get_signature_runner(kind)
                # The init runner's own x is never resized: TFLite's C API
                # resizes a signature input strictly (its dimensions are
                # fixed), where ai-edge-litert resizes it as it likes.
                ins = {"x": _x(xv, shape if kind == "main" else X_SHAPE)}
                if kind == "main" and has_cond:
                    ins["cond"] = np.array([cv])
                got = runner(**ins)
                rows.append(["ok", _outcome([np.asarray(got[k]) for k in sorted(got)])])
                continue
            details = it.get_input_details()
            it.set_tensor(details[0]["index"], _x(xv, shape))
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
    """Findings and false refusals (``(call, message)``) of opaque_ops' rows ``got`` against the reference's ``ref``."""
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
                false.append((k, f"call {k}: {g[1][:200]}"))
            else:
                false.append((k, f"call {k} (TFLite failed here, the reference ran): {g[1][:200]}"))
            break
        else:
            break
    return findings, false


def _short(outs: list) -> str:
    return json.dumps(
        [[s, d, np.frombuffer(bytes.fromhex(h), np.dtype(d)).tolist()[:6]] for s, d, h in outs if d.startswith("float")]
    )


def read_checks(case: Case) -> list:
    """Per call, how its READ_VARIABLEs compare with what their variables hold, by TFLite's builtin semantics.

    A model of tensorflow/lite/kernels/read_variable.cc: a read declared
    with rank 0 is dynamic and takes its variable's shape; any other read
    copies as many bytes as its declared output holds out of the variable's
    buffer, which ASSIGN_VARIABLE (assign_variable.cc) sizes to the value
    stored.  Each row is ``{"over": ..., "mismatch": ...}``: a read declared
    larger than the value reads past the buffer (its values are not
    defined, whichever runtime runs it); one declared in any other shape
    than the value's (fewer values: the first ones only) disagrees.  An
    ``x`` stored has x's shape at that call: the last ``["resize", shape]``
    before it (the ``init`` runner's x keeps :data:`X_SHAPE`).
    CALL_ONCE runs its subgraph at the interpreter's first invoke of
    subgraph 0 only; ``reset_all_variables()`` and allocations leave
    resource variables as they are.  The list stops at the first call that
    reads a variable never assigned (TFLite fails it).
    """
    held: dict = {}  # variable -> shape of its value
    once_done = False
    has_cond = any(s[0] == "if" for s in case.program["main"])
    shape = X_SHAPE

    def assigns(steps):
        for _, v, value in steps:
            held[v] = tuple(shape) if isinstance(value, str) else np.shape(value)

    out = []
    for call in case.calls:
        kind = call[0]
        row = {"over": False, "mismatch": False}
        if kind == "resize":
            shape = tuple(call[1])
        elif kind == "init":
            now, shape = shape, X_SHAPE  # the init runner is fed an x of its own shape
            assigns(case.program["init"])
            shape = now
        elif kind in ("invoke", "main"):
            cond = call[2]
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
                elif step[2]:  # rank 0: dynamic, it takes the variable's shape
                    row["over"] |= int(np.prod(step[2])) > int(np.prod(held[step[1]]))
                    row["mismatch"] |= tuple(step[2]) != held[step[1]]
        out.append(row)
    return out


def overreads(case: Case) -> list:
    """Per call, whether a READ_VARIABLE in it copies past its variable's value (:func:`read_checks`' ``over``)."""
    return [row["over"] for row in read_checks(case)]


def xnnpack_store_change(case: Case) -> tuple[int, str] | None:
    """The first call at which a store puts a value of another size or shape than the variable's first in it.

    2.23's XNNPACK delegate keeps the buffer and shape of the first value
    stored in a variable, across allocations and subgraphs.  A larger value
    stored there later is written past that buffer (measured before the
    run-time rule of opaque_ops.model.variable_buffers refused it: every
    case of seed 21's first 1500 that died alone on 2.23 with XNNPACK had a
    later store larger than the first, in whichever subgraph, or, three of
    them, a smaller one right after a larger one: 21:355).  A value of the
    same size in another shape is kept in the first one's shape: a read
    declared with rank 0 returns the first shape (21:17, 21:93).  Returns
    the first call of the gravest change the sequence makes: ``(call,
    "larger")``, else ``(call, "smaller")``, else ``(call, "reshaped")``, so
    that the rule's refusals on 2.23 with XNNPACK, and any crash or wrong
    value it misses, stand apart from others.  The ``init``
    runner's x has :data:`X_SHAPE`.
    """
    first: dict = {}
    once_done = False
    has_cond = any(s[0] == "if" for s in case.program["main"])
    shape = X_SHAPE
    changes: set = set()
    seen: dict = {}  # change -> the first call that makes it

    def store(steps):
        for _, v, value in steps:
            got = tuple(shape) if isinstance(value, str) else np.shape(value)
            if v not in first:
                first[v] = got
            elif got != first[v]:
                n, m = int(np.prod(got)), int(np.prod(first[v]))
                changes.add("larger" if n > m else "smaller" if n < m else "reshaped")

    for k, call in enumerate(case.calls):
        kind = call[0]
        if kind == "resize":
            shape = tuple(call[1])
        elif kind == "init":
            now, shape = shape, X_SHAPE
            store(case.program["init"])
            shape = now
        elif kind in ("invoke", "main"):
            if not once_done:
                store(case.program["call_once"])
                once_done = True
            for step in case.program["main"]:
                if step[0] == "assign":
                    store([step])
                elif step[0] == "if":
                    picked = (not call[2]) if step[1] else call[2]
                    store(step[2] if (picked and has_cond) else step[3])
        for change in changes:
            seen.setdefault(change, k)
        changes.clear()
    for change in ("larger", "smaller", "reshaped"):
        if change in seen:
            return seen[change], change
    return None


def run_case(case: Case, library=None, stage=None) -> dict:
    """Run one case three ways and compare; returns ``{"findings": [...], "false_refusals": [...], "rows": ...}``.

    An exception from opaque_ops that is not an ``OpaqueOpsError`` is a
    finding.  A false refusal at a call from which on a read disagrees with
    its variable's value (:func:`read_checks`: the reference reads past it,
    or returns part of it or another shape) is marked
    :data:`MISMATCH_AHEAD`: the declared-shape rules refuse those on
    purpose.  With XNNPACK from 2.23 on, a finding of a case that outgrows
    a variable's first value, or stores a smaller one or another shape
    (:func:`xnnpack_store_change`), is marked ``[xnnpack store larger at
    call K]`` (or ``smaller``, ``reshaped``).
    """
    say = stage or (lambda s: None)
    say("reference")
    ref = reference(case)
    out = {"findings": [], "false_refusals": [], "rows": {"reference": ref}}
    checks = read_checks(case)
    from opaque_ops.model.runtime_versions import affected
    from opaque_ops.runtime import load_runtime

    # The first-buffer defect is 2.23's XNNPACK's (runtimes from 2.23 on: not the "affected" older ones).
    change = None if affected(load_runtime(library).version) else xnnpack_store_change(case)
    for xnnpack in (False, True):
        tag = "xnnpack" if xnnpack else "builtin"
        if xnnpack and change is not None:
            tag += f" [xnnpack store {change[1]} at call {change[0]}]"
        say(tag)
        try:
            got = ours(case, xnnpack, library)
        except Exception as exc:  # noqa: BLE001 - any other exception is a finding
            out["findings"].append(f"{tag}: {type(exc).__name__}: {str(exc)[:300]}")
            continue
        out["rows"][tag] = got
        f, fr = compare(ref, got)
        out["findings"] += [f"{tag}: {m}" for m in f]
        for k, m in fr:
            ahead = any(row["mismatch"] for row in checks[k:])
            out["false_refusals"].append(f"{tag}: {MISMATCH_AHEAD + ' ' if ahead else ''}{m}")
        for k, row in enumerate(checks):
            if row["over"] and k < len(got) and got[k][0] == "ok":
                out["findings"].append(f"{tag}: call {k}: a READ_VARIABLE read past its variable's value, not refused")
                break
    return out


CHILD = r"""
import gc, sys
sys.path.insert(0, {root!r})
from tools._fuzz_pool import Child
from tools.fuzz_variables import make_case, run_case
stats = {{"cases": 0, "findings": 0}}
child = Child(case_timeout={case_timeout})
for i in child.cases({start}, {stop}):
    case = make_case({seed}, i)
    res = run_case(case, library={library!r}, stage=child.stage)
    stats["cases"] += 1
    for f in res["findings"]:
        child.finding(i, f.replace(chr(10), " "))
    stats["findings"] += len(res["findings"])
    for f in res["false_refusals"]:
        child.note(i, f.replace(chr(10), " "))
    # The interpreters' deletion frees what they hold: heap damage aborts there, under this case's index.
    child.stage("teardown")
    del case, res
    gc.collect()
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
    from opaque_ops.model.runtime_versions import affected
    from opaque_ops.runtime import load_runtime

    newer = not affected(load_runtime(library).version)  # 2.23's XNNPACK stores (see xnnpack_store_change)
    t0 = time.time()

    def take(res: dict, a: int) -> None:
        st = res["stats"]
        if st is not None:
            totals["run"] += st["cases"]
        totals["false_refusals"] += res["notes"]
        totals["findings"] += res["findings"]
        if res["crash"] is not None:
            c = res["crash"]
            totals["run"] += max(res["partial"], 0) + 1
            if c["index"] >= a:
                case = make_case(seed, c["index"])
                c["xnnpack_store_change"] = xnnpack_store_change(case) if newer else None
                # Heap damage may kill the child cases later: does it die on this case alone?
                alone = _run_range(seed, c["index"], c["index"] + 1, library=library)
                c["alone"] = "clean" if alone["crash"] is None else alone["crash"]["returncode"]
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
    ap.add_argument("--case", metavar="JSON", help="a case as --replay prints it (program and calls), to shrink one")
    ap.add_argument(
        "--malloc-check",
        action="store_true",
        help="preload glibc's checking allocator in the children: heap damage aborts at the case that made it",
    )
    args = ap.parse_args(argv)
    if args.malloc_check and not MALLOC_DEBUG.is_file():
        ap.error(f"--malloc-check needs glibc's {MALLOC_DEBUG} (glibc 2.34 or later), which is not here")
    if args.malloc_check:
        # The children inherit it (tools._fuzz_pool.run_child copies os.environ); this process is not affected.
        os.environ.update(LD_PRELOAD=str(MALLOC_DEBUG), GLIBC_TUNABLES="glibc.malloc.check=3")
    if args.case:
        given = json.loads(args.case)
        case = Case(0, 0, given["program"], given["calls"], build(given["program"]))
        print(json.dumps(run_case(case, library=args.library), indent=1))
        return 0
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
    # The 2.23 XNNPACK stores apart from the rest (see xnnpack_store_change).
    for change in ("larger", "smaller", "reshaped"):
        totals[f"crashes_xnnpack_store_{change}"] = [
            c["index"]
            for c in totals["crashes"]
            if (c.get("xnnpack_store_change") or [None, None])[1] == change
            and (c.get("stage") or "").startswith(("xnnpack", "teardown"))
        ]
        totals[f"findings_xnnpack_store_{change}"] = sum(f"[xnnpack store {change}" in f for f in totals["findings"])
    totals["false_refusals_mismatch_ahead"] = sum(MISMATCH_AHEAD in f for f in totals["false_refusals"])
    text = json.dumps(totals, indent=1, default=str)
    if args.json:
        Path(args.json).write_text(text)
    print(text[-20000:])
    return 1 if totals["crashes"] or totals["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
