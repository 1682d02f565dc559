"""okay_nabu's STRIDED_SLICEs as SLICE: instructions per invoke and a bit-for-bit check, by runtime.

    python bench/slice_rewrite.py [--model PATH] [--runs K] [--tree] [--no-grind]

Why: TFLite 2.17.1 runs microWakeWord's okay_nabu about 1.33x the
instructions of ai-edge-litert per call.  Its XNNPACK delegate leaves all
twelve STRIDED_SLICE nodes to TFLite's own kernel (about 1.9 K instructions
each, with the interpreter's per-node cost on top), where litert's and
2.23.0's delegate take them.  Every one of them is a unit-stride slice
(``begin_mask`` / ``end_mask`` cover every axis but one, negative begins),
which SLICE says exactly, and 2.17.1's delegate does take SLICE.  The three
SPLIT_Vs (TFLite's kernel on every runtime) each feed only slices, so a
slice of a SPLIT_V output is also a SLICE of the SPLIT_V's input.

This script writes two scratch copies of the model (``slice``: each
STRIDED_SLICE as SLICE; ``slice+split``: the same with the SPLIT_Vs folded
into the slices that read them), then, on the loaded runtime (set
``OPAQUE_OPS_TFLITE_LIB`` for another):

* checks each copy against the original, bit for bit, over a stream of
  invokes (the model has state: six variables carried from call to call),
  with the state tensors written to the variables and the last layers made
  extra outputs, with and without XNNPACK;
* counts the instructions of ``invoke`` alone (the raw C API, input set
  once) under callgrind for each, and ai-edge-litert's ``invoke()`` on the
  original, split by where they ran (see ``start_instructions.py``);
* with ``--tree``, prints the original's invoke call tree two levels deep
  (calls and inclusive instructions per invoke): in a stripped library the
  node kernels are told apart by their call counts (12: STRIDED_SLICE,
  3: SPLIT_V, 6: each variable op, one per delegate partition...).

Nothing here changes the library or the Interpreter; the copies are
scratch files.  (The Interpreter now makes the first of these rewrites
itself on 2.17 with XNNPACK, for slices whose input shape no resize can
change: ``opaque_ops/interpreter/slices.py``.  The SPLIT_V folding is
not made: it removes tensors a caller can read.)  The rewrite reads the flatbuffer with ai-edge-litert's
generated schema module (the peer must be installed).  Needs valgrind.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from start_instructions import COLUMNS, self_cost_by_group  # noqa: E402

_DEFAULT_MODEL = "pymicro_wakeword/models/okay_nabu.tflite"
# okay_nabu's tensors that the check also compares: the FULLY_CONNECTED's
# input and output, and the six slices written back to the variables.
_EXTRA_OUTPUTS = (102, 101, 59, 63, 68, 79, 89, 99)


def _ints(m, sg, index: int) -> np.ndarray:
    return np.frombuffer(bytes(bytearray(m.buffers[sg.tensors[index].buffer].data)), np.int32)


def rewrite(data: bytes, fold_split: bool, extra_outputs=()) -> bytes:
    """A copy of ``data`` whose unit-stride STRIDED_SLICEs are SLICEs (``fold_split``: SPLIT_Vs folded in too).

    Only slices with constant bounds, unit strides and no ellipsis, new-axis
    or shrink masks are rewritten (okay_nabu's twelve); the bounds are
    resolved as TFLite's kernel resolves them (``tensorflow/lite/kernels/
    strided_slice.cc``: a masked axis takes its whole extent, a negative
    index counts from the end, then clamped to the axis).
    """
    import flatbuffers
    from ai_edge_litert import schema_py_generated as s

    op_ss, op_slice, op_split_v = s.BuiltinOperator.STRIDED_SLICE, s.BuiltinOperator.SLICE, s.BuiltinOperator.SPLIT_V
    m = s.ModelT.InitFromPackedBuf(data, 0)
    sg = m.subgraphs[0]
    sg.outputs = list(sg.outputs) + list(extra_outputs)

    def code(op) -> int:
        c = m.operatorCodes[op.opcodeIndex]
        return max(c.builtinCode, c.deprecatedBuiltinCode)

    def constant(name: str, values) -> int:
        buf = s.BufferT()
        buf.data = np.asarray(values, np.int32).tobytes()
        m.buffers.append(buf)
        t = s.TensorT()
        t.shape, t.type, t.buffer, t.name = [len(values)], s.TensorType.INT32, len(m.buffers) - 1, name.encode()
        sg.tensors.append(t)
        return len(sg.tensors) - 1

    slice_code = next((i for i, c in enumerate(m.operatorCodes) if c.builtinCode == op_slice), None)
    if slice_code is None:
        oc = s.OperatorCodeT()
        oc.builtinCode = oc.deprecatedBuiltinCode = op_slice
        oc.version = 1
        m.operatorCodes.append(oc)
        slice_code = len(m.operatorCodes) - 1
    producer = {o: op for op in sg.operators for o in op.outputs}
    users = collections.defaultdict(list)
    for op in sg.operators:
        for i in op.inputs:
            users[i].append(op)
    folded = []
    for k, op in enumerate(sg.operators):
        o = op.builtinOptions
        if code(op) != op_ss or o.ellipsisMask or o.newAxisMask or o.shrinkAxisMask or o.offset:
            continue
        if any(sg.tensors[i].buffer == 0 for i in op.inputs[1:4]) or not (_ints(m, sg, op.inputs[3]) == 1).all():
            continue
        shape = list(sg.tensors[op.inputs[0]].shape)
        b, e = _ints(m, sg, op.inputs[1]), _ints(m, sg, op.inputs[2])
        begin, end = [], []
        for d, n in enumerate(shape):
            lo = 0 if o.beginMask >> d & 1 else int(b[d]) + (n if b[d] < 0 else 0)
            hi = n if o.endMask >> d & 1 else int(e[d]) + (n if e[d] < 0 else 0)
            begin.append(min(max(lo, 0), n))
            end.append(min(max(hi, 0), n))
        source = op.inputs[0]
        split = producer.get(source)
        if (
            fold_split
            and split is not None
            and code(split) == op_split_v
            and all(code(u) in (op_ss, op_slice) for t in split.outputs for u in users[t])
        ):
            sizes = _ints(m, sg, split.inputs[1])
            axis = int(_ints(m, sg, split.inputs[2])[0]) % len(sg.tensors[split.inputs[0]].shape)
            offset = int(sizes[: list(split.outputs).index(source)].sum())
            begin[axis] += offset
            end[axis] += offset
            source = split.inputs[0]
            if not any(f is split for f in folded):
                folded.append(split)
        size = [hi - lo for lo, hi in zip(begin, end)]
        op.opcodeIndex = slice_code
        op.inputs = [source, constant(f"slice{k}/begin", begin), constant(f"slice{k}/size", size)]
        op.builtinOptionsType, op.builtinOptions = s.BuiltinOptions.SliceOptions, s.SliceOptionsT()
    sg.operators = [op for op in sg.operators if not any(op is f for f in folded)]
    fb = flatbuffers.Builder(0)
    fb.Finish(m.Pack(fb), file_identifier=b"TFL3")
    return bytes(fb.Output())


# A stream of invokes on one model through the raw C API (the loaded
# runtime, XNNPACK on or off): every output's bytes per call, saved.
_STREAM = """
import sys
import numpy as np
sys.path.insert(0, {repo!r})
from opaque_ops import _native
path, xnnpack, n, out = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), sys.argv[4]
nat = _native.NativeInterpreter(_native.NativeModel(open(path, "rb").read()), [], num_threads=1, use_xnnpack=xnnpack)
assert nat.allocate() == 0
lib, h = nat.rt.lib, nat._interp
rin = nat.input_tensor(0).view()
xs = np.random.default_rng(1).integers(-128, 127, size=(n, *rin.shape), endpoint=True).astype(rin.dtype)
outs = []
for x in xs:
    rin[...] = x
    assert lib.TfLiteInterpreterInvoke(h) == 0
    count = lib.TfLiteInterpreterGetOutputTensorCount(h)
    outs.append(np.concatenate([nat.output_tensor(j).view().view(np.uint8).ravel() for j in range(count)]))
np.save(out, np.array(outs))
"""

# invoke() alone, K times between the two markers start_instructions.py cuts at.
_GRIND = """
import os, sys
import numpy as np
sys.path.insert(0, {repo!r})
path, which, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(path, "rb").read()
if which == "litert":
    from ai_edge_litert.interpreter import Interpreter
    it = Interpreter(model_content=data, num_threads=1)
    it.allocate_tensors()
    d = it.get_input_details()[0]
    it.set_tensor(d["index"], np.full(d["shape"], 3, d["dtype"]))
    f = it.invoke
else:
    from opaque_ops import _native
    nat = _native.NativeInterpreter(_native.NativeModel(data), [], num_threads=1, use_xnnpack=True)
    assert nat.allocate() == 0
    nat.input_tensor(0).view()[...] = 3
    invoke, h = nat.rt.lib.TfLiteInterpreterInvoke, nat._interp
    f = lambda: invoke(h)
f()
f()
os.getppid()
for _ in range(k):
    f()
os.getpgrp()
"""


def _env() -> dict:
    return dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")


def stream(path: str, xnnpack: bool, n: int, tmp: str) -> np.ndarray:
    """Every output's bytes over ``n`` invokes of ``path`` in a child process (one row per invoke)."""
    out = os.path.join(tmp, "stream.npy")
    code = _STREAM.format(repo=str(HERE.parent))
    r = subprocess.run(
        [sys.executable, "-c", code, path, "1" if xnnpack else "0", str(n), out],
        env=_env(),
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise RuntimeError(f"{path}: stream failed ({r.returncode}): {r.stderr.strip()[-1500:]}")
    return np.load(out)


def grind(path: str, which: str, k: int, tmp: str, keep: str | None = None) -> dict[str, int]:
    """Instructions of ``k`` invokes by group (``keep``: also copy the window's callgrind file there)."""
    out_file = os.path.join(tmp, "callgrind.out")
    cmd = ["valgrind", "--tool=callgrind", "--dump-before=os_getppid*", "--dump-before=os_getpgrp*"]
    cmd += [f"--callgrind-out-file={out_file}", sys.executable, "-c", _GRIND.format(repo=str(HERE.parent))]
    r = subprocess.run([*cmd, path, which, str(k)], env=_env(), cwd=tmp, capture_output=True, text=True, timeout=1800)
    window = out_file + ".2"
    if r.returncode != 0 or not os.path.exists(window):
        raise RuntimeError(f"{path} ({which}) under callgrind failed: {r.stderr.strip()[-1500:]}")
    if keep:
        shutil.copy(window, keep)
    return self_cost_by_group(window)


def call_tree(path: str, k: int, depth: int = 3, floor: float = 50.0) -> list[str]:
    """The invoke's call tree in a callgrind file: callees of the runtime's entry, per invoke."""
    names: dict[tuple[str, str], str] = {}

    def name(kind: str, rest: str) -> str:
        rest = rest.strip()
        if rest.startswith("("):
            key, _, text = rest.partition(" ")
            if text:
                names[(kind, key)] = text
            return names.get((kind, key), key)
        return rest

    self_cost: collections.Counter = collections.Counter()
    edges: dict = collections.defaultdict(lambda: [0, 0])
    obj_of: dict[str, str] = {}
    ob = fn = cfn = cob = ""
    calls = None
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("ob="):
                ob = name("ob", line[3:])
            elif line.startswith("fn="):
                fn, cob = name("fn", line[3:]), ""
                obj_of[fn] = ob
            elif line.startswith("cob="):
                cob = name("ob", line[4:])
            elif line.startswith("cfn="):
                cfn = name("fn", line[4:])
            elif line.startswith("calls="):
                calls = int(line[6:].split()[0])
            elif line[:1].isdigit() or line[:1] in "+-*":
                parts = line.split()
                if len(parts) < 2:
                    continue
                if calls is not None:
                    edge = edges[(fn, cfn)]
                    edge[0] += calls
                    edge[1] += int(parts[1])
                    obj_of.setdefault(cfn, cob or ob)
                    calls, cob = None, ""  # cob= names the callee's object for one call only
                else:
                    self_cost[fn] += int(parts[1])
    marks = ("libtensorflowlite_c", "liblitert-lm", "_pywrap_litert")
    in_rt = {f for f, o in obj_of.items() if any(mk in (o or "") for mk in marks)}
    entries = [(b, c) for (a, b), c in edges.items() if b in in_rt and a not in in_rt]
    kids = collections.defaultdict(list)
    for (a, b), (n, c) in edges.items():
        kids[a].append((b, n, c))
    lines = []

    def walk(f: str, level: int, seen: frozenset) -> None:
        for b, n, c in sorted(kids[f], key=lambda x: -x[2]):
            if c / k < floor:
                continue
            label = ("  " * level + b)[:72]
            lines.append(
                f"  {label:72s} {n / k:7.2f} calls {c / k:9.0f} incl {self_cost[b] / max(n, 1):8.0f} self/call"
            )
            if level + 1 < depth and b not in seen:
                walk(b, level + 1, seen | {b})

    for entry, (n, c) in entries:
        lines.append(f"  {entry[:72]:72s} {n / k:7.2f} calls {c / k:9.0f} incl")
        walk(entry, 1, frozenset({entry}))
    return lines


def _model_path(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    import sysconfig

    return Path(sysconfig.get_paths()["purelib"]) / _DEFAULT_MODEL


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="the .tflite (default: pymicro-wakeword's okay_nabu)")
    ap.add_argument("--runs", type=int, default=500, help="invokes counted per row")
    ap.add_argument("--stream", type=int, default=3000, help="invokes compared per copy")
    ap.add_argument("--tree", action="store_true", help="print the original's invoke call tree")
    ap.add_argument("--no-grind", action="store_true", help="only the bit-for-bit check")
    args = ap.parse_args(argv)
    from opaque_ops import _native

    model = _model_path(args.model)
    if not model.exists():
        print(f"no model at {model}", file=sys.stderr)
        return 2
    data = model.read_bytes()
    print(f"TFLite {_native.load_runtime().version}; {model.name}")
    with tempfile.TemporaryDirectory(prefix="oo_slice_rw_") as tmp:
        copies = {"original": data, "slice": rewrite(data, False), "slice+split": rewrite(data, True)}
        paths = {}
        for label, blob in copies.items():
            paths[label] = os.path.join(tmp, f"{label}.tflite")
            Path(paths[label]).write_bytes(blob)
        # The check: the same copies with the state and the last layers as outputs.
        checked = {label: os.path.join(tmp, f"{label}-outputs.tflite") for label in copies}
        for label, fold in (("slice", False), ("slice+split", True)):
            Path(checked[label]).write_bytes(rewrite(data, fold, _EXTRA_OUTPUTS))
        Path(checked["original"]).write_bytes(_with_outputs(data, _EXTRA_OUTPUTS))
        for xnnpack in (True, False):
            ref = stream(checked["original"], xnnpack, args.stream, tmp)
            varying = int((ref.min(0) != ref.max(0)).sum())
            for label in ("slice", "slice+split"):
                same = np.array_equal(stream(checked[label], xnnpack, args.stream, tmp), ref)
                verdict = "bit-identical" if same else "OUTPUTS DIFFER"
                print(
                    f"  {label:12s} XNNPACK {'on ' if xnnpack else 'off'}: {verdict} over {args.stream} invokes"
                    f" ({ref.shape[1]} output bytes a call, {varying} of them varying)"
                )
        if args.no_grind:
            return 0
        if shutil.which("valgrind") is None:
            print("needs valgrind (apt-get install valgrind)", file=sys.stderr)
            return 2
        print(f"thousands of instructions per invoke ({args.runs} invokes; the input set once, outside the window):")
        print(f"  {'':28s}" + "".join(f"{c:>9s}" for c in COLUMNS))
        rows = [(label, "raw") for label in copies] + [("original", "litert")]
        tree_file = os.path.join(tmp, "tree.out")
        for label, which in rows:
            keep = tree_file if args.tree and (label, which) == ("original", "raw") else None
            c = grind(paths[label], which, args.runs, tmp, keep)
            name = f"{label} ({'C API' if which == 'raw' else 'ai-edge-litert'})"
            print(f"  {name:28s}" + "".join(f"{c[g] / args.runs / 1e3:9.1f}" for g in COLUMNS), flush=True)
        if args.tree:
            print("the original's invoke (C API), per invoke: callee, calls, inclusive, self per call")
            print("\n".join(call_tree(tree_file, args.runs)))
    return 0


def _with_outputs(data: bytes, extra) -> bytes:
    """``data`` unchanged but for ``extra`` appended to the main subgraph's outputs."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as s

    m = s.ModelT.InitFromPackedBuf(data, 0)
    m.subgraphs[0].outputs = list(m.subgraphs[0].outputs) + list(extra)
    fb = flatbuffers.Builder(0)
    fb.Finish(m.Pack(fb), file_identifier=b"TFL3")
    return bytes(fb.Output())


if __name__ == "__main__":
    sys.exit(main())
