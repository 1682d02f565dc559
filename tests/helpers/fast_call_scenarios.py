"""Call sequences run once with the fast calls and once without, for tests/interpreter/test_fast_calls.py.

``python -m tests.helpers.fast_call_scenarios`` runs every scenario in this
process and prints one JSON object: scenario name -> list of outcomes, each
either the bytes (hex), dtype and shape a call returned, or the class and
message of what it raised.  The test runs it with ``OPAQUE_OPS_FASTCALLS``
naming the compiled module and with it set to ``0``, and compares the two
printouts: bit for bit, error for error.
"""

from __future__ import annotations

import gc
import json
import threading
import weakref

import numpy as np

import opaque_ops as oo
from tests.helpers.interpreter_models import add_model, pyop_model, tile_model, valid_conv_model


def outcome(fn):
    """What ``fn()`` gave: ``["ok", dtype, shape, hex]`` (or ``["ok", None]``), or ``["raised", class, message]``."""
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001 - the class and message are what is compared
        return ["raised", type(e).__name__, str(e)]
    if isinstance(out, np.ndarray):
        return ["ok", out.dtype.str, list(out.shape), out.tobytes().hex(), bool(out.flags.writeable)]
    return ["ok", repr(out)]


def _fresh(data=None, **kw):
    it = oo.Interpreter(model_content=data or add_model(), **kw)
    it.allocate_tensors()
    return it


X = np.array([[1.5, -2.0, np.nan], [-0.0, np.inf, 1e-45]], np.float32)


def values() -> dict:
    """Inputs for tensor 0 of the add model: the usual one and every kind the fast call leaves to Python."""
    return {
        "exact": X,
        "fortran order": np.asfortranarray(X),
        "strided": np.repeat(X, 2, axis=1)[:, ::2],
        "big-endian": X.astype(">f4"),
        "float64": X.astype(np.float64),
        "int32": np.ones((2, 3), np.int32),
        "flat": X.ravel(),
        "broadcastable": X[:1],
        "extra dim": X[None],
        "0-d": np.float32(1.0),
        "list": X.tolist(),
        "read-only": np.frombuffer(X.tobytes(), np.float32).reshape(2, 3),
        "None": None,
    }


def indices() -> dict:
    return {
        "int": 0,
        "np.int64": np.int64(0),
        "bool": True,
        "float": 0.0,
        "str": "0",
        "negative": -1,
        "out of range": 99,
        "huge": 2**70,
        "the constant": 1,
        "the output": 2,
    }


def _own_view(it) -> list:
    view = it.tensor(0)()  # dropped on return: a live view blocks nothing here, but keep it short
    return [outcome(lambda: it.set_tensor(0, view)), outcome(lambda: it.get_tensor(0))]


def scenarios() -> dict:
    out = {}

    # Every value kind, through a warm interpreter (both tensors cached by the fast path).
    for name, value in values().items():
        it = _fresh()
        it.set_tensor(0, X)
        it.invoke()
        it.get_tensor(2)
        res = [outcome(lambda: it.set_tensor(0, value))]
        res.append(outcome(it.invoke))
        res += [outcome(lambda: it.get_tensor(2)), outcome(lambda: it.get_tensor(0))]
        out[f"set value: {name}"] = res

    # Every index kind, for set and get, cold and warm.
    for name, index in indices().items():
        for warm in (False, True):
            it = _fresh()
            if warm:
                it.set_tensor(0, X)
                it.invoke()
                it.get_tensor(2)
            out[f"index {name}, warm={warm}"] = [
                outcome(lambda: it.set_tensor(index, X)),
                outcome(lambda: it.get_tensor(index)),
                outcome(lambda: it.get_tensor(index, 0)),
            ]

    # Arguments by keyword, missing, extra; subgraph_index kinds.
    it = _fresh()
    it.set_tensor(0, X)
    it.invoke()
    out["arguments"] = [
        outcome(lambda: it.set_tensor(tensor_index=0, value=X)),
        outcome(lambda: it.set_tensor(0, value=X)),
        outcome(lambda: it.set_tensor(0)),
        outcome(lambda: it.set_tensor(0, X, 1)),
        outcome(lambda: it.set_tensor()),
        outcome(lambda: it.invoke(1)),
        outcome(lambda: it.invoke(now=True)),
        outcome(lambda: it.get_tensor()),
        outcome(lambda: it.get_tensor(2, 0, 0)),
        outcome(lambda: it.get_tensor(tensor_index=2)),
        outcome(lambda: it.get_tensor(2, subgraph_index=0)),
        outcome(lambda: it.get_tensor(2, 1)),
        outcome(lambda: it.get_tensor(2, np.int64(0))),
        outcome(lambda: it.get_tensor(2, -1)),
        outcome(lambda: it.get_tensor(2, 2**70)),
        outcome(lambda: it.get_tensor(2, False)),
        outcome(lambda: oo.Interpreter.get_tensor(it, 2)),
        outcome(lambda: oo.Interpreter.invoke(it)),
        outcome(lambda: oo.Interpreter.invoke()),
        outcome(lambda: oo.Interpreter.set_tensor(None, 0, X)),
    ]

    # The value is a view of the very tensor it is written to.
    it = _fresh()
    it.set_tensor(0, X)
    it.invoke()
    out["value is the tensor's own view"] = _own_view(it)

    # The state machine: before allocation, after a resize, after close.
    it = oo.Interpreter(model_content=add_model())
    res = [outcome(lambda: it.set_tensor(0, X)), outcome(it.invoke), outcome(lambda: it.get_tensor(2))]
    it.allocate_tensors()
    res += [
        outcome(lambda: it.set_tensor(0, X)),
        outcome(it.invoke),
        outcome(it.invoke),
        outcome(lambda: it.get_tensor(2)),
    ]
    it.resize_tensor_input(0, [3, 2, 3])
    res += [outcome(lambda: it.set_tensor(0, X)), outcome(it.invoke), outcome(lambda: it.get_tensor(2))]
    it.allocate_tensors()
    big = np.arange(18, dtype=np.float32).reshape(3, 2, 3)
    res += [outcome(lambda: it.set_tensor(0, big)), outcome(it.invoke), outcome(it.invoke)]
    res += [outcome(lambda: it.get_tensor(2))]
    it.resize_tensor_input(0, [2, 3])
    it.allocate_tensors()
    res += [
        outcome(lambda: it.set_tensor(0, X)),
        outcome(it.invoke),
        outcome(it.invoke),
        outcome(lambda: it.get_tensor(2)),
    ]
    it.close()
    res += [outcome(lambda: it.set_tensor(0, X)), outcome(it.invoke), outcome(lambda: it.get_tensor(2))]
    res.append(outcome(it.close))
    out["lifecycle"] = res

    # A dynamic tensor: invoke may move memory (never the C invoke).
    it = _fresh(tile_model())
    res = []
    for m in (1, 1000, 3, 100_000, 5):
        res += [
            outcome(lambda: it.set_tensor(0, np.array([1.0, -2.0, 3.5, 4.0], np.float32))),
            outcome(lambda m=m: it.set_tensor(1, np.array([m], np.int32))),
            outcome(it.invoke),
        ]
        y = it.get_tensor(3)
        res.append(["ok", y.dtype.str, list(y.shape), __import__("hashlib").sha256(y.tobytes()).hexdigest()])
    view = it.tensor(0)()
    res.append(outcome(it.invoke))
    del view
    out["dynamic tensors"] = res

    # Python ops: results, an op that raises, an op that calls back into its interpreter.
    twice = oo.python_op("Twice", invoke=lambda i, o: o[0].__setitem__(..., i[0] * np.float32(2)))
    it = _fresh(pyop_model(), custom_ops=[twice])
    x4 = np.array([1.0, -0.5, 3.0, np.nan], np.float32)
    res = []
    for _ in range(3):
        res += [outcome(lambda: it.set_tensor(0, x4)), outcome(it.invoke), outcome(lambda: it.get_tensor(1))]
    out["python op"] = res

    # The allocated-shape checks (the planned shapes read in one C call with
    # the module, tensor by tensor without): a shape they refuse, then good ones.
    for xnnpack in (True, False):
        it = oo.Interpreter(model_content=valid_conv_model(), use_xnnpack=xnnpack)
        res = []
        for width in (16, 4, 8, 0, 12):
            x = np.linspace(-1, 1, width, dtype=np.float32).reshape(1, 1, width, 1)
            res += [
                outcome(lambda w=width: it.resize_tensor_input(0, [1, 1, w, 1])),
                outcome(it.allocate_tensors),
                outcome(lambda x=x: it.set_tensor(0, x)),
                outcome(it.invoke),
                outcome(lambda: it.get_tensor(3)),
            ]
        out[f"allocated-shape checks, XNNPACK {'on' if xnnpack else 'off'}"] = res

    def fails(i, o):
        raise ValueError("the op's own error")

    it = _fresh(pyop_model(), custom_ops=[oo.python_op("Twice", invoke=fails)])
    # (Its output was never written: its bytes are whatever the arena held.)
    out["python op raises"] = [outcome(it.invoke), outcome(it.invoke), outcome(lambda: it.get_tensor(1).shape)]

    holder = {}

    def calls_back(i, o):
        o[0][...] = i[0]
        holder["it"].get_tensor(0)

    it = _fresh(pyop_model(), custom_ops=[oo.python_op("Twice", invoke=calls_back)])
    holder["it"] = it
    res = [outcome(it.invoke), outcome(it.invoke)]
    res.append(["owner after", it._calls.owner is None, it._lock.locked()])
    out["python op calls back"] = res
    holder.clear()

    # Methods taken as values keep their Interpreter; a dropped Interpreter is freed at once.
    def make():
        it = _fresh()
        return it.set_tensor, it.invoke, it.get_tensor

    s, i, g = make()
    out["bound methods outlive the name"] = [outcome(lambda: s(0, X)), outcome(i), outcome(i), outcome(lambda: g(2))]
    it = _fresh()
    it.set_tensor(0, X)
    it.invoke()
    it.invoke()
    ref = weakref.ref(it)
    del it
    out["freed when dropped"] = [ref() is None]
    gc.collect()

    # Two threads on one interpreter: every output is one of the inputs plus c.
    it = _fresh()
    seen = []

    def worker(k):
        x = np.full((2, 3), k, np.float32)
        for _ in range(300):
            it.set_tensor(0, x)
            it.invoke()
            seen.append(it.get_tensor(2)[0, 0] in (0.0, 1.0, 2.0))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out["threads"] = [all(seen), len(seen), it._calls.owner is None, it._lock.locked()]
    return out


def main() -> None:
    from opaque_ops.interpreter import fast_calls

    result = scenarios()
    result["fast calls"] = fast_calls.status()[0]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
