"""Module-level functions that worker processes import (tests/ops/test_pickle.py).

Pickle sends functions by module and name, so python_op callables and pool
tasks live here, not inside test functions.
"""

from __future__ import annotations

import os

import numpy as np

from opaque_ops.model import ModelBuilder

SCALE = np.float32(3.0)


def py_triple(inputs, outputs):
    """A python_op: y = 3x."""
    np.multiply(inputs[0], SCALE, out=outputs[0])


def triple_atan_model(n: int = 6) -> bytes:
    """x -> PyTriple (Python) -> Atan (C) -> y, with a dynamic-size input."""
    b = ModelBuilder()
    x = b.add_tensor("x", [n], np.float32, shape_signature=[-1])
    t = b.add_tensor("tripled", [n], np.float32, shape_signature=[-1])
    y = b.add_tensor("y", [n], np.float32, shape_signature=[-1])
    b.add_custom_op("PyTriple", [x], [t])
    b.add_custom_op("Atan", [t], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    b.add_signature("run", {"x": x}, {"y": y})
    return b.build()


def reference(x):
    return np.arctan((x * SCALE).astype(np.float64)).astype(np.float32)


# ------------------------------------------------------------ pool tasks
_worker_interpreter = None


def init_worker(interpreter) -> None:
    """Pool initializer: keep the interpreter that was unpickled in this worker."""
    global _worker_interpreter
    _worker_interpreter = interpreter


def run(it, x):
    """Resize to ``x``'s shape if needed, allocate, set, invoke, get."""
    d = it.get_input_details()[0]
    if tuple(d["shape"]) != x.shape:
        it.resize_tensor_input(d["index"], x.shape)
    it.allocate_tensors()  # nothing to do when nothing changed
    it.set_tensor(d["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


def run_in_worker(x):
    """Run the worker's interpreter on ``x``; returns (output, worker pid)."""
    return run(_worker_interpreter, x), os.getpid()


def run_passed(interpreter, x):
    """A task that receives the interpreter itself as an argument."""
    init_worker(interpreter)
    return run_in_worker(x)


def describe(interpreter):
    """What an unpickled interpreter looks like in the worker."""
    d = interpreter.get_input_details()[0]
    try:
        interpreter.invoke()
        state = "allocated"
    except Exception as exc:  # noqa: BLE001 - the class is the answer
        state = type(exc).__name__
    return {
        "shape": [int(s) for s in d["shape"]],
        "state": state,
        "xnnpack": interpreter.xnnpack,
        "ops": sorted(n for lib in interpreter._libs for n in lib.names),
    }
