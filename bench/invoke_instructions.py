"""One invoke of each wake-word model counted in instructions (valgrind's callgrind), by library.

    python bench/invoke_instructions.py [--runs K] [--xnnpack-flags F]...

For ``bench_models.py``'s rows (openWakeWord's melspectrogram and
embedding_model, microWakeWord's okay_nabu), the instructions one
``set_tensor + invoke + get_tensor`` costs with opaque_ops, with
ai-edge-litert and with the raw C API of the loaded TFLite (the same closures
``bench_models.loops_for_model`` times, at its input shapes), split by where they ran: the Python
interpreter, the TFLite runtime, the C library, the rest.  Each row is one
process under callgrind; the window (``K`` calls after a first, warm one) is
cut out at two marker calls, as ``start_instructions.py`` does.

Why: item 2 of the per-call issue asks why a runtime build is slower than
ai-edge-litert on a model.  Wall times of these models move by more than
the gap on a shared machine; instruction counts do not, and their split
says whether the runtime does more work per invoke (more instructions in its
own library) or the same work more slowly (the same count, a longer time:
memory, or a micro-kernel choice).  Under valgrind the CPU has no AVX-512
(the same micro-kernels as an AVX2-only CPU); compare rows with each other,
not with wall times.

``--xnnpack-flags F`` (repeatable; e.g. ``0x13``) adds an opaque_ops row
(``alone``: that Interpreter only in its process) whose XNNPACK delegate is created with ``TfLiteXNNPackDelegateOptions.flags = F``
(``tensorflow/lite/delegates/xnnpack/xnnpack_delegate.h``:
``TFLITE_XNNPACK_DELEGATE_FLAG_*``; the runtime's default is printed), to
see whether a delegate option changes the work.  Its outputs are compared
with the ``alone`` row of the default options, bit for bit, over the same inputs.

Needs valgrind (``apt-get install valgrind``); about a minute per model.
Numbers only, no assertions.  Set ``OPAQUE_OPS_TFLITE_LIB`` to count another
runtime.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from start_instructions import COLUMNS, grind_window  # noqa: E402

# The child: build bench_models' closures for one model (all of them, so
# every row's process did the same set-up), call the chosen one once (warm:
# first-invoke costs stay out of the window), then K times between markers.
# A flags row ("alone") is an opaque_ops Interpreter alone, made after the
# delegate's options are swapped in at the one place opaque_ops creates its
# XNNPACK delegate (a private function: this is a probe, not an API).  The
# outputs of the window's calls are written and compared, bit for bit, with
# those of the same row made with the default options: the same calls in
# the same order, since a model with variables (okay_nabu's streaming
# state) answers each call from the ones before.
_CHILD = """
import os, sys
sys.path[:0] = [{bench!r}, {repo!r}]
import numpy as np
from bench_models import INPUT_SHAPES, _input_for, loops_for_model, model_paths
name, which, k, flags, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
# Under valgrind an invoke of the larger models takes longer than the 20 ms
# after which the Interpreter arms its Ctrl-C watcher for the next invoke
# (a thread per call, on the Python path): natively these invokes take
# 8 us to 1.2 ms and never are.  The threshold is lifted so that the counted
# calls take the path they take natively.
from opaque_ops.interpreter import core as _core, signature_runner as _runner
_core.WATCH_AFTER_S = _runner.WATCH_AFTER_S = float("inf")
data = model_paths()[name].read_bytes()
if which != "alone":
    fns = loops_for_model(data, INPUT_SHAPES.get(name))
    if which not in fns:
        sys.exit(3)  # (raw_c_api_private: only where the Interpreter rewrites its copy)
    f = fns[which]
else:
    import opaque_ops as oo
    from opaque_ops._native import native_interpreter
    from opaque_ops._native.ffi import ffi

    def _delegate(rt, num_threads):
        opts = ffi.new("oo_xnnpack_options*", rt.lib.TfLiteXNNPackDelegateOptionsDefault())
        opts.num_threads = 1
        opts.oo_opaque_tail[0] = int(flags, 0)  # the field after num_threads: uint32_t flags
        return rt.lib.TfLiteXNNPackDelegateCreate(opts)

    if flags != "default":
        native_interpreter._xnnpack_delegate = _delegate
    it = oo.Interpreter(model_content=data, num_threads=1)
    if name in INPUT_SHAPES:
        it.resize_tensor_input(it.get_input_details()[0]["index"], INPUT_SHAPES[name])
    it.allocate_tensors()
    d_in = it.get_input_details()[0]
    i_in, i_out = d_in["index"], it.get_output_details()[0]["index"]
    x = _input_for(d_in, tuple(d_in["shape"]))  # bench_models' input: the same values as the opaque_ops row

    def f():
        it.set_tensor(i_in, x)
        it.invoke()
        return it.get_tensor(i_out)
f()
outs = []
os.getppid()
for _ in range(k):
    outs.append(f())
os.getpgrp()
np.save(out, np.array(outs))
"""


def default_flags() -> int:
    """The loaded runtime's ``TfLiteXNNPackDelegateOptionsDefault().flags``."""
    from opaque_ops import _native

    rt = _native.load_runtime()
    return int(rt.lib.TfLiteXNNPackDelegateOptionsDefault().oo_opaque_tail[0])


def count(name: str, which: str, runs: int, flags: str, tmp: str) -> tuple[dict[str, int], str] | None:
    """Instructions of ``runs`` calls of one closure, by group, and the file holding its outputs (None: no such row)."""
    code = _CHILD.format(bench=str(HERE), repo=str(HERE.parent))
    outputs = os.path.join(tmp, f"{name}-{which}-{flags}.npy")
    env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
    cmd = [sys.executable, "-c", code, name, which, str(runs), flags, outputs]
    r, counts = grind_window(cmd, env, tmp, tmp, timeout=1800)
    if r.returncode == 3:
        return None
    if counts is None:
        raise RuntimeError(f"{name} {which} under callgrind failed: {r.stderr.strip()[-2000:]}")
    return counts, outputs


def main(argv=None) -> int:
    import numpy as np

    from bench_models import model_paths

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=0, help="calls counted per row (default: by model)")
    ap.add_argument(
        "--xnnpack-flags", action="append", default=[], help="an extra opaque_ops row with these delegate flags"
    )
    ap.add_argument("--models", nargs="*", help="short names (default: every installed one)")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    from opaque_ops import _native

    rt = _native.load_runtime()
    print(f"TFLite {rt.version}; XNNPACK default flags {default_flags():#x}")
    # Enough calls that the window's fixed cost (the markers, the loop) is
    # under 0.1 % of it: embedding_model is ~15 M instructions a call.
    default_runs = {"embedding_model": 10, "melspectrogram": 200}
    rows = [("opaque_ops", "default"), ("ai_edge_litert", "default"), ("raw_c_api", "default")]
    rows += [("raw_c_api_private", "default")]
    if args.xnnpack_flags:
        rows += [("alone", "default")] + [("alone", f) for f in args.xnnpack_flags]
    with tempfile.TemporaryDirectory(prefix="oo_invoke_instr_") as tmp:
        for name in args.models or list(model_paths()):
            runs = args.runs or default_runs.get(name, 1000)
            print(f"{name} (thousands of instructions per set_tensor + invoke + get_tensor, {runs} calls):")
            print(f"  {'':24s}" + "".join(f"{c:>10s}" for c in COLUMNS) + "   runtime vs litert's")
            counted = {}
            for which, flags in rows:
                got = count(name, which, runs, flags, tmp)
                if got is not None:
                    counted[(which, flags)] = got
            peer = counted[("ai_edge_litert", "default")][0]["runtime"]
            base_out = np.load(counted[("alone", "default")][1]) if args.xnnpack_flags else None
            for (which, flags), (c, out) in counted.items():
                label = which if flags == "default" else f"{which} flags={flags}"
                cells = "".join(f"{c[k] / runs / 1e3:10.1f}" for k in COLUMNS)
                note = ""
                if which == "alone" and flags != "default":
                    same = np.array_equal(np.load(out), base_out)
                    note = "  outputs bit-identical" if same else "  OUTPUTS DIFFER from the default flags"
                print(f"  {label[-24:]:24s}{cells}   {c['runtime'] / peer:5.2f}x{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
