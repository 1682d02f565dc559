"""A signature runner's call on the interpreter's cached views gives what the full path gives.

``SignatureRunner.__call__`` takes a short path (``_call_cached``) when every
input is an ndarray of its tensor's dtype and current shape and every
tensor has a view the interpreter cached.  Each scenario here runs twice on
fresh interpreters, once as it is and once with the short path switched
off on the runner (``_cached_in = None``: every call takes the full path,
the reference), and the two must agree bit for bit, exception for
exception.  Other tests check that the short path is taken at all, and that
it never serves what it must leave to the full path.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.interpreter import signature_runner as _runner_module
from opaque_ops.model import ModelBuilder
from tests.helpers.interpreter_models import pyop_model, tile_model


def two_io_model() -> bytes:
    """s = a + b, p = a * b over [2, 3] float32 (a, b resizable); signature "calc" with names of its own."""
    b = ModelBuilder()
    a = b.add_tensor("a", [2, 3], np.float32, shape_signature=[-1, 3])
    x = b.add_tensor("b", [2, 3], np.float32, shape_signature=[-1, 3])
    s = b.add_tensor("s", [2, 3], np.float32, shape_signature=[-1, 3])
    p = b.add_tensor("p", [2, 3], np.float32, shape_signature=[-1, 3])
    b.add_op("ADD", [a, x], [s])
    b.add_op("MUL", [a, x], [p])
    b.set_inputs([a, x])
    b.set_outputs([s, p])
    b.add_signature("calc", {"lhs": a, "rhs": x}, {"total": s, "product": p})
    return b.build()


def tile_sum_model() -> bytes:
    """y = sum(tile(x, multiples)): the tiled tensor is dynamic, x and y are not; signature "run".

    The runner's inputs and output all get cached views, but every invoke may
    move the arena (the dynamic tensor is resized while the model runs).
    """
    b = ModelBuilder()
    x = b.add_tensor("x", [4], np.float32)
    m = b.add_tensor("multiples", [1], np.int32)
    t = b.add_tensor("tiled", [4], np.float32, shape_signature=[-1])
    axis = b.add_constant("axis", np.array([0], np.int32))
    y = b.add_tensor("y", [], np.float32)
    b.add_op("TILE", [x, m], [t])
    b.add_op("SUM", [t, axis], [y], options={"keep_dims": False})
    b.set_inputs([x, m])
    b.set_outputs([y])
    b.add_signature("run", {"x": x, "multiples": m}, {"y": y})
    return b.build()


A = np.array([[1.5, -2.0, np.nan], [-0.0, np.inf, 1e-45]], np.float32)
B = np.array([[3.0, 0.5, 1.0], [2.0, -np.inf, 7.0]], np.float32)


def outcome(fn) -> list:
    """What ``fn()`` gave: each output's name, dtype, shape, bytes and flags; or the exception's class and message."""
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001 - the class and message are what is compared
        return ["raised", type(e).__name__, str(e)]
    if isinstance(out, dict):
        return [
            "ok",
            [
                (n, v.dtype.str, v.shape, v.tobytes().hex(), v.flags.c_contiguous, v.flags.writeable, v.flags.owndata)
                for n, v in out.items()
            ],
        ]
    if isinstance(out, np.ndarray):
        return ["ok", out.dtype.str, out.shape, out.tobytes().hex()]
    return ["ok", repr(out)]


def _scenarios(short_path: bool) -> dict:
    def runner_of(it, key=None):
        r = it.get_signature_runner(key)
        if not short_path:
            r._cached_in = None
        return r

    out = {}
    it = oo.Interpreter(model_content=two_io_model())
    r = runner_of(it)
    res = []
    values = {
        "exact": A,
        "again": B,
        "fortran order": np.asfortranarray(A),
        "strided": np.ascontiguousarray(np.repeat(A, 2, axis=1))[:, ::2],
        "a list": A.tolist(),
        "float64": A.astype(np.float64),
        "big-endian": A.astype(">f4"),
        "a subclass": A.view(np.matrix),
        "a 0-d array": np.array(1.0, np.float32),
        "one more row": np.vstack([A, B[:1]]),
        "back to two rows": B,
        "an empty batch": np.zeros((0, 3), np.float32),
        "after the empty batch": A,
    }
    for name, v in values.items():
        res.append(
            [name, outcome(lambda v=v: r(lhs=v, rhs=B if v.__class__ is not list and np.shape(v) == B.shape else v))]
        )
        res.append([name + ", then exact", outcome(lambda: r(lhs=A, rhs=B))])
    res.append(["missing", outcome(lambda: r(lhs=A))])
    res.append(["unknown", outcome(lambda: r(lhs=A, rhs=B, more=A))])
    res.append(["renamed", outcome(lambda: r(lhs=A, other=B))])
    res.append(["positional names as keywords", outcome(lambda: r(**{"rhs": B, "lhs": A}))])
    # The interpreter's own calls in between: they share the cached views.
    it.set_tensor(0, B)
    res.append(["after set_tensor", outcome(lambda: r(lhs=A, rhs=A))])
    res.append(["get_tensor after", outcome(lambda: it.get_tensor(2))])
    it.resize_tensor_input(0, [3, 3])
    res.append(["after the interpreter's resize", outcome(lambda: r(lhs=A, rhs=B))])
    it.allocate_tensors()
    res.append(["after allocate", outcome(lambda: r(lhs=A, rhs=B))])
    # An output the caller changes is its own copy.
    first = r(lhs=A, rhs=B)
    first["total"][...] = 42
    res.append(["outputs are copies", outcome(lambda: r(lhs=A, rhs=B))])
    res.append(["second runner of the same signature", outcome(lambda: runner_of(it, "calc")(lhs=B, rhs=A))])
    it.close()
    res.append(["closed", outcome(lambda: r(lhs=A, rhs=B))])
    out["two inputs, two outputs"] = res

    # A model whose invoke moves memory (a dynamic tensor, here its output):
    # the short path reads the output through the runner.
    it = oo.Interpreter(model_content=tile_model())
    r = runner_of(it, "run")
    x4 = np.array([1.0, 2.0, -3.0, 0.5], np.float32)
    out["dynamic tensors"] = [
        outcome(lambda m=m: r(x=x4, multiples=np.array([m], np.int32))) for m in (1, 2, 2, 3, 1, 1, 4096, 4096, 2)
    ]
    # The same with the interpreter's own calls and a tensor() view in between.
    res = [outcome(lambda: r(x=x4, multiples=np.array([2], np.int32))) for _ in range(2)]
    it.set_tensor(0, x4[::-1].copy())
    res.append(outcome(lambda: it.get_tensor(0)))
    res.append(outcome(lambda: r(x=x4 * 2, multiples=np.array([2], np.int32))))
    view = it.tensor(0)
    held = view()  # a live view: this model's invoke must refuse while it exists
    res.append(outcome(lambda: r(x=x4, multiples=np.array([2], np.int32))))
    del held
    res.append(outcome(lambda: r(x=x4, multiples=np.array([3], np.int32))))
    del view
    res.append(outcome(lambda: r(x=x4, multiples=np.array([3], np.int32))))
    res.append(outcome(lambda: it.get_tensor(3)))
    out["dynamic tensors, with the interpreter's calls and views"] = res

    # The same with outputs of static shape: every tensor the runner reads
    # and writes has a view to cache, and the arena moves under them.
    it = oo.Interpreter(model_content=tile_sum_model())
    r = runner_of(it, "run")
    out["dynamic tensor inside, static outputs"] = [
        outcome(lambda m=m: r(x=x4 * m, multiples=np.array([m], np.int32))) for m in (1, 64, 2, 4096, 3, 1, 1)
    ]

    # Python ops: a result, an error of the op's own, and an op calling back into the runner.
    twice = oo.python_op("Twice", invoke=lambda i, o: o[0].__setitem__(..., i[0] * np.float32(2)))
    r = runner_of(oo.Interpreter(model_content=pyop_model("run"), custom_ops=[twice]))
    out["python op"] = [outcome(lambda: r(x=x4)) for _ in range(3)]

    def fails(i, o):
        raise ValueError("the op's own error")

    r = runner_of(oo.Interpreter(model_content=pyop_model("run"), custom_ops=[oo.python_op("Twice", invoke=fails)]))
    out["python op raises"] = [outcome(lambda: r(x=x4)) for _ in range(3)]

    holder = {}

    def calls_back(i, o):
        o[0][...] = i[0]
        holder["r"](x=i[0])

    it = oo.Interpreter(model_content=pyop_model("run"), custom_ops=[oo.python_op("Twice", invoke=calls_back)])
    r = runner_of(it)
    holder["r"] = r
    res = [outcome(lambda: r(x=x4)) for _ in range(3)]
    res.append(["owner after", it._calls.owner is None, it._lock.locked()])
    out["python op calls back"] = res
    holder.clear()
    return out


def test_short_path_agrees_with_the_full_path():
    short, full = _scenarios(True), _scenarios(False)
    assert short.keys() == full.keys()
    for name in full:
        assert short[name] == full[name], name
    # The scenarios do reach both outcomes (a comparison of two empty lists proves nothing).
    flat = [step for steps in full.values() for step in steps]
    assert any("raised" in repr(s) for s in flat) and any("'ok'" in repr(s) for s in flat)


@pytest.fixture
def writes(monkeypatch):
    """Count the full path's input writes (``tensors.write``)."""
    count = [0]
    real = _runner_module._tensors.write

    def counted(*args):
        count[0] += 1
        return real(*args)

    monkeypatch.setattr(_runner_module._tensors, "write", counted)
    return count


def test_repeated_calls_take_the_short_path(writes):
    r = oo.Interpreter(model_content=two_io_model()).get_signature_runner()
    r(lhs=A, rhs=B)  # the first call is watched for Ctrl-C and caches the views
    assert writes[0] == 2
    for _ in range(5):
        got = r(lhs=A, rhs=B)
    assert writes[0] == 2, "the calls after the first took the full path"
    # The reference: the ops' definitions in numpy (on normal numbers: XNNPACK
    # flushes subnormal products such as A's 1e-45 * 7 to zero).
    a, b = np.nan_to_num(A, nan=0.5, posinf=8.0), np.nan_to_num(B, neginf=-4.0)
    a[1, 2] = 0.25
    got = r(lhs=a, rhs=b)
    assert writes[0] == 2
    np.testing.assert_array_equal(got["total"], a + b)
    np.testing.assert_array_equal(got["product"], a * b)


def test_anything_unusual_takes_the_full_path(writes):
    it = oo.Interpreter(model_content=two_io_model())
    r = it.get_signature_runner()
    r(lhs=A, rhs=B)
    n = writes[0]
    for unusual in (A.tolist(), A.astype(np.float64), A.astype(">f4"), np.vstack([A, A])):
        try:
            r(lhs=unusual, rhs=B if np.shape(unusual) == B.shape else unusual)
        except oo.OpaqueOpsError:
            pass
        assert writes[0] > n, f"{type(unusual).__name__} {getattr(unusual, 'dtype', '')} took the short path"
        n = writes[0]
        r(lhs=A, rhs=B)  # back to the shape the model was allocated for
        n = writes[0]


def test_a_model_whose_invoke_moves_memory_takes_it_while_its_inputs_stay(writes):
    # The output is dynamic (no cached view): read through the runner.  The
    # reference is TILE's definition (numpy's tile), then the ADD: y = 2 * tile.
    it = oo.Interpreter(model_content=tile_model())
    r = it.get_signature_runner("run")
    x4 = np.arange(4, dtype=np.float32)
    for k, m in enumerate((2, 2, 2, 5, 5)):
        got = r(x=x4 + k, multiples=np.array([m], np.int32))
        np.testing.assert_array_equal(got["y"], 2 * np.tile(x4 + k, m))
    assert it._moves
    # The first call cached the inputs' views; later calls took the short
    # path, except where an input's tensor had moved (the full path then
    # wrote it again and cached it anew).
    assert writes[0] < 2 * 5, writes[0]


def test_a_model_with_a_dynamic_tensor_inside_takes_it(writes):
    r = oo.Interpreter(model_content=tile_sum_model()).get_signature_runner("run")
    x4 = np.array([1.0, 2.0, -3.0, 0.5], np.float32)
    for m in (1, 1000, 3, 3, 3):
        got = r(x=x4, multiples=np.array([m], np.int32))
        assert got["y"] == np.float32(x4.sum() * m)
    assert writes[0] < 2 * 5, writes[0]


def test_threads_get_their_own_results():
    # Each thread calls the one runner with inputs of its own; a call must
    # never return another thread's sums (the lock spans write, invoke, read).
    r = oo.Interpreter(model_content=two_io_model()).get_signature_runner()
    r(lhs=A, rhs=B)
    errors = []

    def work(k):
        a = np.full((2, 3), k, np.float32)
        for _ in range(300):
            got = r(lhs=a, rhs=a)
            if not (np.all(got["total"] == 2 * k) and np.all(got["product"] == k * k)):
                errors.append((k, got))
                return

    threads = [threading.Thread(target=work, args=(k,)) for k in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:1]


def test_a_python_op_calling_back_is_refused_on_the_short_path_too():
    # The short path marks the lock's owner as the full path does: a Python
    # op that calls back into its runner is refused at once.  Without the
    # mark, a call from any thread but the main one would wait for a lock its
    # own thread holds, forever; so the calls run in a thread.
    holder = {"back": False}

    def maybe_calls_back(i, o):
        o[0][...] = i[0]
        if holder["back"]:
            holder["r"](x=i[0])

    it = oo.Interpreter(model_content=pyop_model("run"), custom_ops=[oo.python_op("Twice", invoke=maybe_calls_back)])
    r = holder["r"] = it.get_signature_runner()
    x4 = np.arange(4, dtype=np.float32)
    result = {}

    def work():
        r(x=x4)
        r(x=x4)  # the views are cached now: the next call takes the short path
        holder["back"] = True
        try:
            r(x=x4)
            result["got"] = "no error"
        except oo.ReentrantCallError as e:
            result["got"] = e

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "the call back waited for the lock its own call holds"
    assert isinstance(result["got"], oo.ReentrantCallError), result
    assert it._calls.owner is None and not it._lock.locked()
    holder.clear()
