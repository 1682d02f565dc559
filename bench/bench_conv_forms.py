"""melspectrogram's first CONV_2D (the STFT) as three operator forms, on the runtime in use.

Where melspectrogram's gap to ai-edge-litert comes from (bench/README.md,
"Tenth pass"): the one CONV_2D with a 1x512 kernel, stride 160, one input
channel and 257 filters, over 1280 samples (5 frames).  The forms, each a
model of its own with the model's own weights:

- ``conv``: the model's CONV_2D as it is;
- ``folded``: the same convolution on the samples reshaped to 8 rows of 160
  (one row per stride): a CONV_2D with a 1x4 kernel, stride 1 and 160 input
  channels, whose weights are the model's, zero-padded from 512 to 640 taps.
  It sums the same products in the same order (plus zeros), so its output
  is bit-identical to ``conv``'s (printed);
- ``fc_taps``: four FULLY_CONNECTED, one per 160-tap block, on slices of
  the folded rows, added up (another summation order).

Each form runs through the raw C API (``TfLiteInterpreterInvoke`` on a
native interpreter with XNNPACK, one thread); ai-edge-litert runs ``conv``
as the peer.  Interleaved rounds, CPU time of this thread, best of 15.  Run
once per runtime::

    python bench/bench_conv_forms.py
    OPAQUE_OPS_TFLITE_LIB=.../litert_lm/liblitert-lm.so python bench/bench_conv_forms.py

Numbers only, no assertions.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import opaque_ops as oo  # noqa: E402
from _timing import best_of_rounds  # noqa: E402
from bench_models import model_paths  # noqa: E402
from opaque_ops import _native  # noqa: E402
from opaque_ops.model import ModelBuilder, read_model  # noqa: E402

SAMPLES = 1280


def _weights():
    sg = read_model(model_paths()["melspectrogram"].read_bytes()).subgraphs[0]
    conv = next(op for op in sg.operators if op.op_name == "CONV_2D")
    w, bias = (sg.tensors[i].array() for i in conv.inputs[1:])
    return w, bias, conv.builtin_options["stride_w"]


def model(form: str) -> bytes:
    """A model from the samples [1, 1, SAMPLES, 1] to the frames [1, 1, 5, 257] in ``form``."""
    w, bias, stride = _weights()
    filters, _, k, _ = w.shape
    frames = (SAMPLES - k) // stride + 1
    rows, taps = SAMPLES // stride, -(-k // stride)
    padded = np.zeros((filters, taps * stride), np.float32)
    padded[:, :k] = w[:, 0, :, 0]
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 1, SAMPLES, 1], np.float32)
    y = b.add_tensor("y", [1, 1, frames, filters], np.float32)
    if form == "conv":
        ins = [x, b.add_constant("w", w), b.add_constant("b", bias)]
        b.add_op("CONV_2D", ins, [y], {"padding": "VALID", "stride_w": stride, "stride_h": 1})
    elif form == "folded":
        xr = b.add_tensor("rows", [1, 1, rows, stride], np.float32)
        b.add_op("RESHAPE", [x, b.add_constant("shape", np.array([1, 1, rows, stride], np.int32))], [xr])
        ins = [xr, b.add_constant("w", padded.reshape(filters, 1, taps, stride)), b.add_constant("b", bias)]
        b.add_op("CONV_2D", ins, [y], {"padding": "VALID", "stride_w": 1, "stride_h": 1})
    else:
        xr = b.add_tensor("rows", [rows, stride], np.float32)
        b.add_op("RESHAPE", [x, b.add_constant("shape", np.array([rows, stride], np.int32))], [xr])
        total = None
        for j in range(taps):
            part = b.add_tensor(f"rows{j}", [frames, stride], np.float32)
            bounds = [np.array(v, np.int32) for v in ([j, 0], [j + frames, stride], [1, 1])]
            b.add_op("STRIDED_SLICE", [xr, *(b.add_constant(f"{n}{j}", v) for n, v in zip("bes", bounds))], [part])
            wj = b.add_constant(f"w{j}", np.ascontiguousarray(padded[:, j * stride : (j + 1) * stride]))
            bj = b.add_constant(f"b{j}", bias if j == 0 else np.zeros_like(bias))
            yj = b.add_tensor(f"y{j}", [frames, filters], np.float32)
            b.add_op("FULLY_CONNECTED", [part, wj, bj], [yj])
            if total is not None:
                s = b.add_tensor(f"sum{j}", [frames, filters], np.float32)
                b.add_op("ADD", [total, yj], [s])
                yj = s
            total = yj
        b.add_op("RESHAPE", [total, b.add_constant("out_shape", np.array([1, 1, frames, filters], np.int32))], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


def main() -> None:
    if "melspectrogram" not in model_paths():
        sys.exit("needs pyopen-wakeword (it carries melspectrogram.tflite)")
    x = np.random.default_rng(0).standard_normal((1, 1, SAMPLES, 1)).astype(np.float32)
    calls, outs, keep = {}, {}, []
    for form in ("conv", "folded", "fc_taps"):
        nat = _native.NativeInterpreter(_native.NativeModel(model(form)), [], num_threads=1, use_xnnpack=True)
        if nat.allocate() != 0:
            raise RuntimeError(f"{form}: allocate failed")
        nat.input_tensor(0).view()[...] = x
        invoke, handle = nat.rt.lib.TfLiteInterpreterInvoke, nat._interp
        calls[form] = lambda invoke=invoke, handle=handle: invoke(handle)
        calls[form]()
        outs[form] = nat.output_tensor(0).view().copy()
        keep.append(nat)  # the native interpreter lives as long as its call
    try:
        from ai_edge_litert.interpreter import Interpreter as Litert
    except ImportError:
        Litert = None
    if Litert is not None:
        it = Litert(model_content=model("conv"), num_threads=1)
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x)
        calls["conv, ai-edge-litert"] = it.invoke
    best = best_of_rounds(calls, clock=time.thread_time)
    print(f"TFLite {oo.runtime_info().version}, XNNPACK, one thread: invoke only, CPU µs, best of 15")
    for name, us in best.items():
        print(f"  {name:24s} {us:6.2f} µs")
    for form in ("folded", "fc_taps"):
        diff = float(np.abs(outs[form] - outs["conv"]).max())
        print(f"  {form} vs conv: " + ("bit-identical" if diff == 0 else f"max |diff| {diff:.2e}"))


if __name__ == "__main__":
    main()
