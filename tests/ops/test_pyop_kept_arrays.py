"""A python_op that keeps its input or output arrays after returning is stopped at once (issue 17, item 10).

The arrays a python_op's ``invoke`` receives are views of the interpreter's
memory, valid only during the call.  ``results.append(outputs[0])`` kept one:
later it read other values, or wrote into freed memory once the interpreter
was gone.  Now the op's invoke fails when it returns with such an array still
referenced (a view of it, the list, a memoryview...), with a ``KernelError``
that names the op and the array and says to keep a copy.  Code that keeps
copies, or returns its result, runs as before.  The kept-array cases run in a
child process: before the fix they went on to write into freed memory.
"""

from __future__ import annotations

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.testing import run_op
from tests.helpers.child_process import crashed, run_child

X = np.arange(6, dtype=np.float32).reshape(2, 3)

KEEP = r"""
import sys, gc
import numpy as np
import opaque_ops as oo
from tests.ops.test_pyop_kept_arrays import KEEPERS, X
from tests.helpers.atan import make_model
how = sys.argv[1]
kept = []
op = oo.python_op("PySquare", invoke=KEEPERS[how](kept))
from tests.ops.test_pyop import _chain_model
it = oo.Interpreter(model_content=_chain_model(), custom_ops=[op, oo.kernels.atan()])
it.allocate_tensors()
it.set_tensor(it.get_input_details()[0]["index"], np.ones(it.get_input_details()[0]["shape"], np.float32))
try:
    it.invoke()
except oo.KernelError as exc:
    print("REFUSED", str(exc).replace(chr(10), " "))
else:
    print("RAN")
# What the kept arrays would do next: write after the interpreter is gone.
del it
gc.collect()
big = [np.full(1 << 16, 7.0, np.float32) for _ in range(64)]
for a in kept:
    arr = np.asarray(a)
    if arr.flags.writeable:
        arr[...] = 12345.0
print("DONE")
"""


def _append_output(kept):
    def invoke(inputs, outputs):
        np.multiply(inputs[0], inputs[0], out=outputs[0])
        kept.append(outputs[0])

    return invoke


def _append_row(kept):
    def invoke(inputs, outputs):
        np.multiply(inputs[0], inputs[0], out=outputs[0])
        kept.append(outputs[0][1:])  # a view of part of it

    return invoke


def _keep_input(kept):
    def invoke(inputs, outputs):
        kept.append(inputs[0].reshape(-1))
        return inputs[0] * inputs[0]

    return invoke


def _keep_list(kept):
    def invoke(inputs, outputs):
        kept.append(outputs)  # the list itself
        outputs[0][...] = inputs[0] * inputs[0]

    return invoke


def _keep_memoryview(kept):
    def invoke(inputs, outputs):
        outputs[0][...] = inputs[0] * inputs[0]
        kept.append(memoryview(outputs[0]))

    return invoke


def _keep_input_then_raise(kept):
    def invoke(inputs, outputs):
        kept.append(inputs[0])
        raise ValueError("bad input")

    return invoke


def _output_in_the_exception(kept):
    def invoke(inputs, outputs):
        # The exception outlives the call, and its arguments with it.
        kept.append(outputs[0])
        raise ValueError("cannot square", outputs[0])

    return invoke


KEEPERS = {
    "output": _append_output,
    "row of output": _append_row,
    "input": _keep_input,
    "outputs list": _keep_list,
    "memoryview": _keep_memoryview,
    # An op that raised used to skip the count: its kept views went on to
    # read freed memory (SIGSEGV, in a review's attack).
    "input, then raise": _keep_input_then_raise,
    "output in the exception": _output_in_the_exception,
}


@pytest.mark.parametrize("how", list(KEEPERS))
def test_kept_array_is_refused_with_the_op_named(how):
    p = run_child(KEEP, how, timeout=120)
    assert p.returncode == 0, crashed(p)
    first = p.stdout.splitlines()[0]
    assert first.startswith("REFUSED "), p.stdout
    assert "'PySquare'" in first and "copy" in first
    want = "inputs[0]" if how.startswith("input") else "outputs[0]"
    assert want in first, first
    if "raise" in how or "exception" in how:
        assert "The op also raised ValueError" in first, first


def test_a_raising_op_leaves_no_views_in_its_traceback():
    """The exception of an op that raised keeps its traceback's lines, not the frames' variables.

    Those variables held the op's arrays, views of the interpreter's
    memory: a debugger reading them after ``close()`` (``pdb.pm()``, a
    logger's ``exc_info``) would read freed memory.
    """

    def invoke(inputs, outputs):
        x = inputs[0]  # noqa: F841 - a local holding a view
        raise ValueError("bad input")

    op = oo.python_op("Bad", invoke=invoke)
    with pytest.raises(ValueError, match="bad input") as info:
        run_op(op, "Bad", inputs=[X])
    frames = []
    tb = info.value.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    names = [f.f_code.co_name for f in frames]
    assert names[-3:] == ["_on_invoke", "_call_invoke", "invoke"], names  # the lines are still there
    # The callback's own frame was running when it was cleared: it dropped its arrays itself.
    held = frames[-3].f_locals
    assert all(held.get(name) is None for name in ("inputs", "outputs", "owners")), held
    for f in frames[-2:]:
        assert f.f_locals == {}, (f.f_code.co_name, list(f.f_locals))


def test_the_callers_exception_keeps_its_frames():
    """invoke() called while handling an exception: the op's error chains to it, and only the op's frames are cleared."""

    def invoke(inputs, outputs):
        raise ValueError("bad input")

    def fails():
        here = "a local of the caller's"  # noqa: F841
        raise KeyError("earlier")

    op = oo.python_op("Bad", invoke=invoke)
    with pytest.raises(ValueError, match="bad input") as info:
        try:
            fails()
        except KeyError:
            run_op(op, "Bad", inputs=[X])
    earlier = info.value.__context__
    assert isinstance(earlier, KeyError)
    tb = earlier.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    assert tb.tb_frame.f_code.co_name == "fails" and tb.tb_frame.f_locals.get("here") == "a local of the caller's"


def test_an_exception_raised_while_handling_one_inside_the_op_leaves_no_views():
    def compute(x):
        return x / 0 if x.dtype == np.int64 else 1 // 0

    def invoke(inputs, outputs):
        try:
            compute(inputs[0])  # its frame holds the view when it raises
        except ZeroDivisionError:
            raise ValueError("bad input") from None

    op = oo.python_op("Bad", invoke=invoke)
    with pytest.raises(ValueError, match="bad input") as info:
        run_op(op, "Bad", inputs=[X])
    tb = info.value.__context__.__traceback__
    while tb is not None:
        assert tb.tb_frame.f_locals == {} or tb.tb_frame.f_code.co_name == "_on_invoke", tb.tb_frame.f_code.co_name
        tb = tb.tb_next


@pytest.mark.parametrize(
    "invoke",
    [
        lambda i, o: np.multiply(i[0], i[0], out=o[0]),
        lambda i, o: i[0] * i[0],
        lambda i, o: i[0],  # returns the input view itself: copied in, not kept
    ],
    ids=["write in place", "return new", "return the input view"],
)
def test_ops_that_keep_nothing_run_as_before(invoke):
    op = oo.python_op("Sq", invoke=invoke)
    (y,) = run_op(op, "Sq", inputs=[X])
    assert y.shape == X.shape


def test_copies_may_be_kept():
    kept = []

    def invoke(inputs, outputs):
        np.multiply(inputs[0], inputs[0], out=outputs[0])
        kept.append(outputs[0].copy())
        kept.append(np.array(inputs[0]))

    op = oo.python_op("Sq", invoke=invoke)
    (y,) = run_op(op, "Sq", inputs=[X])
    np.testing.assert_array_equal(y, X * X)
    np.testing.assert_array_equal(kept[0], X * X)
    np.testing.assert_array_equal(kept[1], X)


def test_state_keeping_a_view_is_refused():
    def init(options):
        return {}

    def invoke(inputs, outputs, state):
        outputs[0][...] = inputs[0]
        state["last"] = outputs[0]

    op = oo.python_op("Keep", invoke=invoke, init=init)
    with pytest.raises(oo.KernelError, match=r"'Keep'.*outputs\[0\]"):
        run_op(op, "Keep", inputs=[X])
