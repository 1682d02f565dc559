"""opaque_ops.python_op: numpy ops registered with TFLite, mixed with builtins and C ops."""

from __future__ import annotations

import gc
import threading
import traceback

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.model import ModelBuilder
from opaque_ops.testing import run_op
from tests.helpers import atan
from tests.helpers.child_process import crashed, run_child_json

OFFSET = np.float32(0.5)


def _chain_model(py_name="PySquare", version=1, options=None) -> bytes:
    """x -> ADD(offset) -> <Python op> -> Atan (C) -> y."""
    b = ModelBuilder()
    x = b.add_tensor("x", [6], np.float32)
    off = b.add_constant("offset", np.array([OFFSET], np.float32))
    a = b.add_tensor("added", [6], np.float32)
    s = b.add_tensor("squared", [6], np.float32)
    y = b.add_tensor("y", [6], np.float32)
    b.add_op("ADD", [x, off], [a])
    b.add_custom_op(py_name, [a], [s], version=version, options=options)
    b.add_custom_op("Atan", [s], [y], version=1)
    b.set_inputs([x])
    b.set_outputs([y])
    return b.build()


def _run(model: bytes, ops, x):
    it = oo.Interpreter(model_content=model, custom_ops=ops)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


X = np.array([-3.0, -0.5, 0.0, 0.25, 2.0, 40.0], np.float32)


def _reference(x, scale=1.0):
    sq = (x + OFFSET) * (x + OFFSET) * np.float32(scale)
    return np.arctan(sq.astype(np.float64)).astype(np.float32)


def test_builtin_python_c_chain():
    def square(inputs, outputs):
        np.multiply(inputs[0], inputs[0], out=outputs[0])

    op = oo.python_op("PySquare", invoke=square)
    y = _run(_chain_model(), [op, oo.kernels.atan()], X)
    np.testing.assert_array_max_ulp(y, _reference(X), maxulp=1)


def test_returned_array_is_copied_in():
    op = oo.python_op("PySquare", invoke=lambda i, o: i[0] ** 2)
    y = _run(_chain_model(), [op, oo.kernels.atan()], X)
    np.testing.assert_array_max_ulp(y, _reference(X), maxulp=1)


def test_init_receives_options_and_state_is_passed():
    from opaque_ops.model import decode_flex_options

    seen = []

    def init(options: bytes):
        seen.append(options)
        return decode_flex_options(options)

    def invoke(inputs, outputs, state):
        outputs[0][...] = inputs[0] * inputs[0] * np.float32(state["scale"])

    op = oo.python_op("PySquare", invoke=invoke, init=init)
    y = _run(_chain_model(options={"scale": 3.0}), [op, oo.kernels.atan()], X)
    np.testing.assert_array_max_ulp(y, _reference(X, 3.0), maxulp=1)
    assert decode_flex_options(seen[0]) == {"scale": 3.0}


def test_prepare_sets_output_shapes_and_gets_specs():
    seen = []

    def prepare(inputs):
        seen.append(inputs)
        return [(1,), inputs[0].shape[::-1]]

    def invoke(inputs, outputs):
        return inputs[0].sum(keepdims=False).reshape(1), inputs[0].T * 2

    op = oo.python_op("SumAndT", invoke=invoke, prepare=prepare)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    s, t = run_op(op, "SumAndT", inputs=[x], num_outputs=2)
    np.testing.assert_array_equal(s, [15.0])
    np.testing.assert_array_equal(t, x.T * 2)
    assert seen[0][0].shape == (2, 3) and seen[0][0].dtype == np.float32


def test_inputs_are_read_only_views():
    def invoke(inputs, outputs):
        inputs[0][0] = 1  # must not be allowed to modify an input tensor

    op = oo.python_op("Scribble", invoke=invoke)
    with pytest.raises(ValueError, match="read-only"):
        run_op(op, "Scribble", inputs=[np.zeros(3, np.float32)])


def test_exception_in_invoke_is_reraised_with_traceback():
    def failing_square(inputs, outputs):
        raise ZeroDivisionError("kernel bug in failing_square")

    op = oo.python_op("PySquare", invoke=failing_square)
    it = oo.Interpreter(model_content=_chain_model(), custom_ops=[op, oo.kernels.atan()])
    it.allocate_tensors()
    with pytest.raises(ZeroDivisionError, match="kernel bug") as info:
        it.invoke()
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert "failing_square" in frames
    assert frames[0] == "test_exception_in_invoke_is_reraised_with_traceback"


def test_interpreter_usable_after_python_error():
    calls = {"n": 0}

    def flaky(inputs, outputs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("first call fails")
        outputs[0][...] = inputs[0] * inputs[0]

    op = oo.python_op("PySquare", invoke=flaky)
    it = oo.Interpreter(model_content=_chain_model(), custom_ops=[op, oo.kernels.atan()])
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], X)
    with pytest.raises(RuntimeError, match="first call fails"):
        it.invoke()
    it.invoke()  # no stale exception is left behind
    np.testing.assert_array_max_ulp(it.get_tensor(it.get_output_details()[0]["index"]), _reference(X), 1)


def test_exception_in_prepare_and_init_surface_at_allocate():
    def bad_prepare(inputs):
        raise KeyError("no such axis")

    op = oo.python_op("P", invoke=lambda i, o: None, prepare=bad_prepare)
    with pytest.raises(KeyError, match="no such axis"):
        run_op(op, "P", inputs=[np.ones(2, np.float32)])

    def bad_init(options):
        raise ValueError("bad options in init")

    op2 = oo.python_op("I", invoke=lambda i, o, s: None, init=bad_init)
    with pytest.raises(ValueError, match="bad options in init"):
        run_op(op2, "I", inputs=[np.ones(2, np.float32)])


def test_bad_return_values_are_clear_errors():
    op = oo.python_op("Wrong", invoke=lambda i, o: np.zeros(7, np.float32))
    with pytest.raises(ValueError, match=r"returned shape \(7,\) for output 0"):
        run_op(op, "Wrong", inputs=[np.ones(3, np.float32)])
    op2 = oo.python_op("WrongPrep", invoke=lambda i, o: None, prepare=lambda ins: [(1,), (2,)])
    with pytest.raises(ValueError, match="2 shapes for 1 outputs"):
        run_op(op2, "WrongPrep", inputs=[np.ones(3, np.float32)])
    op3 = oo.python_op("Cast", invoke=lambda i, o: np.array([1.5, 2.5]))
    with pytest.raises(TypeError):  # float64 -> int32 is not a same_kind cast
        run_op(op3, "Cast", inputs=[np.ones(2, np.int32)])


def test_library_interface_and_version():
    op = oo.python_op("PySquare", invoke=lambda i, o: i[0] ** 2, version=2)
    assert op.ops == [("PySquare", 2)] and op.names == ["PySquare"]
    assert [(o.name, o.version) for o in op.operators()] == [("PySquare", 2)]
    with pytest.raises(oo.UnresolvedOpsError):
        _run(_chain_model(version=1), [op, oo.kernels.atan()], X)
    y = _run(_chain_model(version=2), [op, oo.kernels.atan()], X)
    np.testing.assert_array_max_ulp(y, _reference(X), 1)


def test_argument_validation():
    with pytest.raises(ValueError):
        oo.python_op("", invoke=lambda i, o: None)
    with pytest.raises(TypeError):
        oo.python_op("X", invoke=None)
    with pytest.raises(ValueError):
        oo.python_op("X", invoke=lambda i, o: None, version=0)


def test_callables_that_cannot_take_their_arguments_are_refused_at_creation():
    # A one-argument invoke was a TypeError from inside invoke(), at the first run.
    def negate(x):
        return -x

    with pytest.raises(TypeError, match=r"invoke is called as invoke\(inputs, outputs\), but .*negate\(x\)"):
        oo.python_op("Neg", invoke=negate)
    with pytest.raises(TypeError, match=r"invoke\(inputs, outputs, state\)"):
        oo.python_op("Neg", invoke=lambda i, o: None, init=lambda opts: None)
    with pytest.raises(TypeError, match=r"prepare is called as prepare\(inputs\)"):
        oo.python_op("Neg", invoke=lambda i, o: None, prepare=lambda: [1])
    with pytest.raises(TypeError, match=r"init is called as init\(options\)"):
        oo.python_op("Neg", invoke=lambda i, o, s: None, init=lambda: None)
    # What fits is taken: defaults, *args, a partial, a callable object, a builtin.
    import functools

    class Op:
        def __call__(self, inputs, outputs):
            return None

    def scaled(f):  # a decorator: the wrapper is what gets called, not the function it wraps
        @functools.wraps(f)
        def wrapper(inputs, outputs):
            return f(inputs, outputs, 2.0)

        return wrapper

    @scaled
    def times(inputs, outputs, scale):
        return inputs[0] * scale

    for fn in (lambda i, o, extra=1: None, lambda *a: None, functools.partial(lambda k, i, o: None, 1), Op(), print):
        assert oo.python_op("Ok", invoke=fn).name == "Ok"
    (y,) = run_op(oo.python_op("Times", invoke=times), "Times", inputs=[np.arange(3.0)])
    np.testing.assert_array_equal(y, [0.0, 2.0, 4.0])


def test_op_object_may_die_before_interpreter():
    import weakref

    class State:
        pass

    states = []

    def init(options):
        st = State()
        states.append(weakref.ref(st))
        return st

    op = oo.python_op("PySquare", invoke=lambda i, o, s: i[0] ** 2, init=init)
    it = oo.Interpreter(model_content=_chain_model(), custom_ops=[op, oo.kernels.atan()])
    del op
    gc.collect()
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], X)
    it.invoke()
    assert len(states) == 1 and states[0]() is not None
    del it
    gc.collect()
    # Deleting the interpreter ran the op's free(), which dropped the node state
    # (the callbacks outlived the PythonOp object).
    assert states[0]() is None


def test_exceptions_stay_on_their_thread():
    def failing(inputs, outputs):
        raise LookupError("from the worker thread")

    op = oo.python_op("PySquare", invoke=failing)
    caught = []

    def worker():
        it = oo.Interpreter(model_content=_chain_model(), custom_ops=[op, oo.kernels.atan()])
        it.allocate_tensors()
        try:
            it.invoke()
        except LookupError as exc:
            caught.append(exc)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert len(caught) == 1
    # Nothing leaked to this thread: a good model runs cleanly here.
    good = oo.python_op("PySquare", invoke=lambda i, o: i[0] ** 2)
    np.testing.assert_array_max_ulp(_run(_chain_model(), [good, oo.kernels.atan()], X), _reference(X), 1)


def _captured_op(payload):
    """A Python op whose callable captures ``payload`` (a closure, as real ops do)."""

    def square(inputs, outputs):
        np.multiply(inputs[0], inputs[0] + payload[:1] * 0, out=outputs[0])

    return oo.python_op("PySquare", invoke=square)


def test_deleting_an_op_releases_what_its_callables_capture():
    # Before: every python_op's callbacks were kept for the life of the
    # process, and with them an 80 MB array the op had captured.
    import weakref

    from opaque_ops import _native

    gc.collect()
    base = _native.live_python_operators()
    payload = np.zeros(20_000_000, np.float32)  # 80 MB
    r_payload = weakref.ref(payload)
    op = _captured_op(payload)
    del payload
    it = oo.Interpreter(model_content=_chain_model(), custom_ops=[op, oo.kernels.atan()])
    it.allocate_tensors()
    it.set_tensor(0, X)
    it.invoke()
    del op
    gc.collect()
    # The interpreter still uses the op: everything stays alive and runs.
    assert r_payload() is not None
    it.invoke()
    np.testing.assert_array_max_ulp(it.get_tensor(it.get_output_details()[0]["index"]), _reference(X), 1)
    del it
    gc.collect()
    assert r_payload() is None
    assert _native.live_python_operators() == base  # the C operator is deleted too


def test_an_op_never_given_to_an_interpreter_is_released():
    import weakref

    payload = np.zeros(1000, np.float32)
    r_payload = weakref.ref(payload)
    op = _captured_op(payload)
    op.operators()  # its C operator exists now
    del payload, op
    gc.collect()
    assert r_payload() is None


def test_many_ops_do_not_accumulate():
    from opaque_ops import _native

    gc.collect()
    base = _native.live_python_operators()
    for _ in range(200):
        op = oo.python_op("PySquare", invoke=lambda i, o: i[0] ** 2)
        it = oo.Interpreter(model_content=_chain_model(), custom_ops=[op, oo.kernels.atan()])
        it.allocate_tensors()
        del it, op
    gc.collect()
    assert _native.live_python_operators() == base


PYOP_FORK_SETUP = (
    atan.PYTHON_OP_INTERPRETER
    + """
op = oo.python_op("Atan", invoke=lambda ins, outs, state: np.arctan(ins[0], out=outs[0]), init=lambda options: 1)

oo.runtime_info()
"""
)


@pytest.mark.parametrize(
    "code, lock",
    [
        ("type(op).operators.__code__", "op._operator_lock"),  # the op's operator made on first use
        ("type(op)._on_init.__code__", "op._states_lock"),  # a node's state stored
    ],
    ids=["operator", "node states"],
)
def test_a_fork_while_another_thread_uses_a_python_op_leaves_the_child_able_to_use_it(
    atan_model_bytes, tmp_path, code, lock
):
    # The op is made before the fork; the thread stops holding one of its locks.
    atan.assert_python_op_fork(
        atan_model_bytes, tmp_path, PYOP_FORK_SETUP, code=code, lock=lock, call="interpreter(op)"
    )


STATE_OWNS_AN_INTERPRETER = """
import gc, json, os, sys, threading
import numpy as np
import opaque_ops as oo
from opaque_ops._native import lifetime

model = sys.argv[1]
inner_op = oo.python_op("Atan", invoke=lambda ins, outs: np.arctan(ins[0], out=outs[0]))

freeing = threading.Event()

class State:
    # The node's state owns an interpreter (with a Python op of its own).
    def __init__(self):
        self.inner = oo.Interpreter(model_path=model, custom_ops=[inner_op])
        self.inner.allocate_tensors()

    def __del__(self):
        freeing.set()
        self.inner = None  # deleting it takes lifetime's lock

def init(options):
    return State()

op = oo.python_op("Atan", invoke=lambda ins, outs, state: np.arctan(ins[0], out=outs[0]), init=init)

def interpreter():
    it = oo.Interpreter(model_path=model, custom_ops=[op])
    it.allocate_tensors()
    return it

first = interpreter()
garbage = [interpreter()]
garbage.append(garbage)  # deleted by the next collection, which runs op's free()
del garbage
gc.disable()

holding = threading.Event()

def lines(frame, event, arg):
    if event == "line" and lifetime._lock._is_owned() and not holding.is_set():
        holding.set()
        freeing.wait(10)  # the other thread is freeing a node state (in op's free())
        gc.collect()  # what an allocation inside the locked region can start
    return lines

def tracer(frame, event, arg):
    return lines if frame.f_code is lifetime.Shared.hold.__code__ else None

def add_and_collect():
    sys.settrace(tracer)
    try:
        interpreter()  # gives op's operator to a new interpreter: Shared.hold
    finally:
        sys.settrace(None)

def drop_first():
    global first
    holding.wait()
    first = None  # op's free() drops the node state, whose interpreter is deleted

threads = [threading.Thread(target=f, daemon=True) for f in (drop_first, add_and_collect)]
for t in threads:
    t.start()
for t in threads:
    t.join(10)
done = not any(t.is_alive() for t in threads)
if done:
    gc.collect()
print(json.dumps({"done": done, "states": len(op._states)}), flush=True)
os._exit(0)  # (deadlocked threads would hold the locks at shutdown)
"""


def test_freeing_a_node_state_that_owns_an_interpreter_while_another_thread_collects(atan_model_bytes, tmp_path):
    # One thread deletes an interpreter: the op's free() held _states_lock
    # while the node's state (an interpreter) was freed, which takes
    # lifetime's lock.  The other held lifetime's lock (Shared.hold) and
    # collected an interpreter with the same op, whose free() waited for
    # _states_lock.  free() now drops the state after releasing the lock.
    model = tmp_path / "atan.tflite"
    model.write_bytes(atan_model_bytes)
    p, got = run_child_json(STATE_OWNS_AN_INTERPRETER, model, timeout=90)
    assert got["done"], "freeing the node state and the collection deadlocked: " + crashed(p)
    assert got["states"] == 0, got  # every node's free() ran and dropped its state
