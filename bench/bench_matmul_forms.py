"""x @ B (B a constant [257, 32]) as four operator forms, on the runtime in use.

What decided ``opaque_ops/interpreter/matmul.py``'s policy: the time of one
``invoke()`` of a one-operator model, x of shape [1, 1, ROWS, 257] (ROWS=5
is melspectrogram's [1, 1280] input), in each form, with XNNPACK on and off,
and ai-edge-litert on BATCH_MATMUL and FULLY_CONNECTED as the peer.  The
forms run through ``oo.Interpreter`` with the rewrite switched off, so each
is the form named:

- ``bmm``: BATCH_MATMUL(x, B), the model's own form;
- ``bmm_adj_y``: BATCH_MATMUL(x, B.T) with adj_y;
- ``fc``: FULLY_CONNECTED(x, B.T, no bias) with keep_num_dims (what the
  rewrite builds);
- ``fc_2in``: the same with two inputs instead of an omitted bias.

Interleaved rounds, best of 15 per form.  Run once per runtime::

    python bench/bench_matmul_forms.py [ROWS]
    OPAQUE_OPS_TFLITE_LIB=.../litert_lm/liblitert-lm.so python bench/bench_matmul_forms.py
"""

from __future__ import annotations

import sys

import numpy as np

import opaque_ops as oo
from _timing import best_of_rounds  # this folder's (the script's directory is on sys.path)
from opaque_ops.interpreter import matmul
from opaque_ops.model.writer import ModelBuilder

K, N = 257, 32
WEIGHTS = np.random.default_rng(0).standard_normal((K, N)).astype(np.float32)


def model(form: str, rows: int) -> bytes:
    """A one-operator model computing x @ WEIGHTS in ``form``."""
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 1, rows, K])
    y = b.add_tensor("y", [1, 1, rows, N])
    if form == "bmm":
        b.add_op("BATCH_MATMUL", [x, b.add_constant("w", WEIGHTS)], [y])
    elif form == "bmm_adj_y":
        b.add_op("BATCH_MATMUL", [x, b.add_constant("w", np.ascontiguousarray(WEIGHTS.T))], [y], {"adj_y": True})
    else:
        w = b.add_constant("w", np.ascontiguousarray(WEIGHTS.T))
        ins = [x, w, -1] if form == "fc" else [x, w]
        b.add_op("FULLY_CONNECTED", ins, [y], {"keep_num_dims": True})
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    matmul.worth_it = lambda *a, **k: False  # each form as written
    its = {}
    for form in ("bmm", "bmm_adj_y", "fc", "fc_2in"):
        for xnnpack in (True, False):
            it = oo.Interpreter(model_content=model(form, rows), use_xnnpack=xnnpack)
            it.allocate_tensors()
            its[f"{form}, XNNPACK {'on' if xnnpack else 'off'}"] = it
    try:
        from ai_edge_litert.interpreter import Interpreter as Litert
    except ImportError:
        Litert = None
    if Litert is not None:
        for form in ("bmm", "fc"):
            it = Litert(model_content=model(form, rows))
            it.allocate_tensors()
            its[f"{form}, ai-edge-litert"] = it
    best = best_of_rounds({name: it.invoke for name, it in its.items()})
    print(f"TFLite {oo.runtime_info().version}, x [1, 1, {rows}, {K}] @ [{K}, {N}], invoke only, best of 15")
    for name, us in best.items():
        print(f"  {name:32s} {us:6.2f} µs")


if __name__ == "__main__":
    main()
