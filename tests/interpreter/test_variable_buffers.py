"""A variable's buffer on TFLite 2.23 with XNNPACK (opaque_ops/interpreter/variable_buffers.py, model/variable_buffers.py).

2.23's XNNPACK delegate gives a resource variable one buffer and one shape,
those of the first value stored in it, and keeps them for the interpreter's
life, across allocations and subgraphs; TFLite's own ASSIGN_VARIABLE gives
the variable the shape and size of each value
(tensorflow/lite/kernels/assign_variable.cc).  The expected values here are
numpy's (x stored and read back; y = x + 0), which 2.17.1 and every runtime
without XNNPACK give.  On 2.23 with XNNPACK a store larger than the
variable's first, or of another shape where a read declared with rank 0
takes the variable's shape, is refused; the tests marked "without the rule"
show what it does then (found by tools/fuzz_variables.py: 2.23.0, seed 2,
cases 178, 333 and others; and by hand, resizing a stateful model).
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.model.runtime_versions import affected
from opaque_ops.runtime import runtime_info
from tests.helpers.child_process import crashed, run_child
from tools.fuzz_variables import build

pytest.importorskip("ai_edge_litert.schema_py_generated", reason="the models are built with ai-edge-litert's schema")

XNNPACK = pytest.mark.parametrize("xnnpack", [False, True], ids=["reference", "xnnpack"])
SMALL = [[-3.0, -2.0, -1.0, 0.0, 1.0, 2.0]]  # a [1, 6] constant: 24 bytes, where x [2, 6] is 48
PAST = "would write past the buffer of its variable ('state')"
SHAPE = "stores another shape than the first value of its variable ('state')"


def _program(main, call_once=(), init=None) -> bytes:
    return build({"names": [[None, "state"]], "main": main, "call_once": list(call_once), "init": init})


# x stored in the variable; the model's output y = x + 0 (tools/fuzz_variables.build's first output).
STORE_ONLY = _program([["assign", 0, "x"]])
# x stored, then read back with rank 0 (the read takes the variable's shape, whatever x's is).
STORE_X = _program([["assign", 0, "x"], ["read", 0, []]])


def _x(shape, k=0.0) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + np.float32(k)


def _run(it, x, cond=None) -> list:
    details = it.get_input_details()
    it.set_tensor(details[0]["index"], x)
    if cond is not None:
        it.set_tensor(details[1]["index"], np.array([cond]))
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def _resize(it, shape) -> None:
    it.resize_tensor_input(it.get_input_details()[0]["index"], shape)
    it.allocate_tensors()


def _refuses(it) -> bool:
    """Whether 2.23's XNNPACK keeps each variable's first buffer and shape here (then the rule refuses)."""
    return bool(it.xnnpack) and not affected(runtime_info().version)


# -- resizing a model that stores x ---------------------------------------------------------------


@XNNPACK
def test_a_resize_larger_than_the_first_store_is_refused_on_2_23_with_xnnpack_only(xnnpack):
    """x [2, 3] stored, then x resized to [2, 6]: refused at the allocation on 2.23 with XNNPACK (the child
    below: the heap is corrupted), and the interpreter runs on at a smaller shape.  Elsewhere y is x."""
    it = oo.Interpreter(model_content=STORE_ONLY, use_xnnpack=xnnpack)
    _resize(it, [2, 3])
    np.testing.assert_array_equal(_run(it, _x([2, 3]))[0], _x([2, 3]))
    if _refuses(it):
        with pytest.raises(oo.ModelError, match=re.escape(PAST)) as err:
            _resize(it, [2, 6])
        message = str(err.value)
        assert "subgraph 0 operator 2 (ASSIGN_VARIABLE) storing 'x' of shape [2, 6] (48 bytes)" in message
        assert (
            "first value may be subgraph 0 operator 2 (ASSIGN_VARIABLE) storing 'x' of shape [2, 3] (24 bytes)"
            in message
        )
        assert "use_xnnpack=False" in message
        _resize(it, [1, 6])  # (24 bytes too, and no read takes the variable's shape)
        np.testing.assert_array_equal(_run(it, _x([1, 6], 5))[0], _x([1, 6], 5))
        return
    _resize(it, [2, 6])
    for k in range(2):
        np.testing.assert_array_equal(_run(it, _x([2, 6], k))[0], _x([2, 6], k))


@XNNPACK
def test_resizes_within_the_first_store_run_everywhere(xnnpack):
    """[2, 6] first, then [2, 3], [2, 6] and [3, 4]: the first buffer holds each (measured in child processes on
    2.23.0 with glibc's checking allocator: clean), and no read takes the variable's shape: not refused."""
    it = oo.Interpreter(model_content=STORE_ONLY, use_xnnpack=xnnpack)
    for shape in ([2, 6], [2, 3], [2, 6], [3, 4]):
        _resize(it, shape)
        np.testing.assert_array_equal(_run(it, _x(shape, 1))[0], _x(shape, 1))


@XNNPACK
@pytest.mark.parametrize("second", [[2, 3], [3, 4], [2, 9]], ids=["smaller", "same-size", "larger"])
def test_a_read_with_rank_0_after_a_store_of_another_shape_is_refused_on_2_23_with_xnnpack_only(second, xnnpack):
    """x stored at [2, 6] and read back with rank 0, then at another shape: 2.23 with XNNPACK would read back
    [2, 6] (below, without the rule), so the allocation is refused there; a larger x is refused for its size
    first.  Elsewhere the read is x at each shape."""
    it = oo.Interpreter(model_content=STORE_X, use_xnnpack=xnnpack)
    it.allocate_tensors()
    np.testing.assert_array_equal(_run(it, _x([2, 6]))[-1], _x([2, 6]))
    if _refuses(it):
        with pytest.raises(oo.ModelError, match=re.escape(PAST if second == [2, 9] else SHAPE)) as err:
            _resize(it, second)
        if second != [2, 9]:
            assert "the read would return the first value's shape [2, 6]" in str(err.value)
        _resize(it, [2, 6])  # back at the first shape
        np.testing.assert_array_equal(_run(it, _x([2, 6], 3))[-1], _x([2, 6], 3))
        return
    _resize(it, second)
    np.testing.assert_array_equal(_run(it, _x(second, 2))[-1], _x(second, 2))


@XNNPACK
def test_without_the_rule_a_read_with_rank_0_returns_the_first_shape_on_2_23_with_xnnpack(monkeypatch, xnnpack):
    """The rule turned off (a smaller store: safe in this process): 2.23 with XNNPACK reads x [2, 3] back as
    [2, 6], its six values and then six that are not the variable's; every other runtime reads x."""
    from opaque_ops.interpreter import variable_buffers

    monkeypatch.setattr(variable_buffers.VariableBuffers, "allocated", lambda self, *a: None)
    it = oo.Interpreter(model_content=STORE_X, use_xnnpack=xnnpack)
    it.allocate_tensors()
    _run(it, _x([2, 6]))
    _resize(it, [2, 3])
    out = _run(it, _x([2, 3], 100))[-1]
    if _refuses(it):
        assert out.shape == (2, 6)
        np.testing.assert_array_equal(out.ravel()[:6], _x([2, 3], 100).ravel())
        assert not np.array_equal(out.ravel()[6:], np.zeros(6))  # (the earlier x's values: not the variable's)
    else:
        np.testing.assert_array_equal(out, _x([2, 3], 100))


@XNNPACK
def test_reset_all_variables_does_not_give_the_variable_a_new_first_value(xnnpack):
    """reset_all_variables() (TfLiteInterpreterResetVariableTensors) resets the tensors marked is_variable, not
    the delegate's variables: measured on 2.23.0 with XNNPACK (the rule off), a read with rank 0 after x [2, 6],
    a reset and x [2, 3] still gives [2, 6].  So the refusal stays after a reset; elsewhere x is read back."""
    it = oo.Interpreter(model_content=STORE_X, use_xnnpack=xnnpack)
    it.allocate_tensors()
    _run(it, _x([2, 6]))
    it.reset_all_variables()
    if _refuses(it):
        with pytest.raises(oo.ModelError, match=re.escape(SHAPE)):
            _resize(it, [2, 3])
        return
    _resize(it, [2, 3])
    np.testing.assert_array_equal(_run(it, _x([2, 3], 1))[-1], _x([2, 3], 1))


@XNNPACK
def test_allocations_with_no_invoke_between_store_nothing(xnnpack):
    """Only an invoke stores: allocated at [1, 6], resized to [2, 6] before any invoke, x runs there."""
    it = oo.Interpreter(model_content=STORE_X, use_xnnpack=xnnpack)
    _resize(it, [1, 6])
    _resize(it, [2, 6])
    np.testing.assert_array_equal(_run(it, _x([2, 6]))[-1], _x([2, 6]))


# -- two stores in one run of a subgraph ----------------------------------------------------------

# x [2, 6], then a [1, 6] constant: two sizes in one run of subgraph 0; y = x + 0 is the output.
X_THEN_SMALL = _program([["assign", 0, "x"], ["assign", 0, SMALL]])
# x [2, 6], then a [3, 4] constant: one size, two shapes.
X_THEN_SAME_SIZE = _program([["assign", 0, "x"], ["assign", 0, np.arange(12.0).reshape(3, 4).tolist()]])


@XNNPACK
def test_two_sizes_stored_in_one_run_of_a_subgraph_are_refused_on_2_23_with_xnnpack_only(xnnpack):
    """x [2, 6] then a [1, 6] constant, one after the other: 2.23's XNNPACK corrupts the heap at the first invoke
    (the child below), so the allocation is refused there.  Elsewhere y is x."""
    it = oo.Interpreter(model_content=X_THEN_SMALL, use_xnnpack=xnnpack)
    if _refuses(it):
        with pytest.raises(
            oo.ModelError, match=re.escape("store values of two sizes in one variable ('state')")
        ) as err:
            it.allocate_tensors()
        message = str(err.value)
        assert "subgraph 0 operator 2 (ASSIGN_VARIABLE) storing 'x' of shape [2, 6] (48 bytes) and " in message
        assert "with no READ_VARIABLE or control-flow operator between them" in message
        assert "of shape [1, 6] (24 bytes)" in message
        return
    it.allocate_tensors()
    np.testing.assert_array_equal(_run(it, _x([2, 6], 1))[0], _x([2, 6], 1))


# The same two stores with a READ_VARIABLE between them.
X_READ_SMALL = _program([["assign", 0, "x"], ["read", 0, [2, 6]], ["assign", 0, SMALL]])


@XNNPACK
def test_two_sizes_with_a_read_between_them_run_everywhere(xnnpack):
    """x [2, 6], a read, then the [1, 6] constant: measured clean on 2.23.0 with XNNPACK and glibc's checking
    allocator (so is an IF between them); the constant fits the first value's buffer: not refused.  The read is
    x at every invoke (the constant the invoke before stored is overwritten first)."""
    it = oo.Interpreter(model_content=X_READ_SMALL, use_xnnpack=xnnpack)
    it.allocate_tensors()
    for k in range(3):
        np.testing.assert_array_equal(_run(it, _x([2, 6], k))[-1], _x([2, 6], k))


@XNNPACK
def test_one_size_in_two_shapes_in_one_run_runs_everywhere(xnnpack):
    """x [2, 6] then a [3, 4] constant (48 bytes each): measured clean on 2.23.0 with XNNPACK and glibc's
    checking allocator; no read takes the variable's shape, so nothing is refused."""
    it = oo.Interpreter(model_content=X_THEN_SAME_SIZE, use_xnnpack=xnnpack)
    it.allocate_tensors()
    for k in range(2):
        np.testing.assert_array_equal(_run(it, _x([2, 6], k))[0], _x([2, 6], k))


# -- IF branches ----------------------------------------------------------------------------------

# CALL_ONCE's init stores a [1, 6] constant; an IF (on the input cond) whose then-branch stores x [2, 6]; a read.
BRANCH_AFTER_INIT = _program(
    [["if", False, [["assign", 0, "x"]], []], ["read", 0, []]], call_once=[["assign", 0, SMALL]]
)
# An IF whose then-branch stores a [1, 6] constant and whose else-branch stores x [2, 6], then a read; the IF
# on the input cond (decided before the invoke), or on LOGICAL_NOT of it (computed: not known before).
TWO_SIZES = [["if", False, [["assign", 0, SMALL]], [["assign", 0, "x"]]], ["read", 0, []]]
BRANCHES_OF_TWO_SIZES = _program(TWO_SIZES)
COMPUTED_BRANCHES_OF_TWO_SIZES = _program([["if", True, *TWO_SIZES[0][2:]], TWO_SIZES[1]])


@XNNPACK
def test_an_if_branch_storing_more_than_the_init_constant_is_refused_on_2_23_with_xnnpack_only(xnnpack):
    """Subgraph 0 never stores in the variable itself: the init's [1, 6] constant comes first, and the branch's
    x [2, 6] would go into its buffer on 2.23 with XNNPACK (the child below).  The IF is decided by the input
    cond: an invoke with cond false runs there (the read is the constant), one with cond true is refused.
    Elsewhere: the constant, then x once the branch ran, and x again when it does not run."""
    it = oo.Interpreter(model_content=BRANCH_AFTER_INIT, use_xnnpack=xnnpack)
    it.allocate_tensors()
    np.testing.assert_array_equal(_run(it, _x([2, 6]), cond=False)[-1], np.float32(SMALL))
    if _refuses(it):
        with pytest.raises(
            oo.KernelError, match=re.escape("subgraph 1 operator 1 (ASSIGN_VARIABLE) storing 'x'")
        ) as err:
            _run(it, _x([2, 6], 1), cond=True)
        assert str(err.value).startswith("invoke(): ") and PAST in str(err.value)
        np.testing.assert_array_equal(_run(it, _x([2, 6], 2), cond=False)[-1], np.float32(SMALL))
        return
    np.testing.assert_array_equal(_run(it, _x([2, 6], 1), cond=True)[-1], _x([2, 6], 1))
    np.testing.assert_array_equal(_run(it, _x([2, 6], 2), cond=False)[-1], _x([2, 6], 1))


@XNNPACK
@pytest.mark.parametrize("first", [True, False], ids=["constant-first", "x-first"])
def test_an_if_whose_branches_store_two_shapes_is_refused_at_the_second_on_2_23_with_xnnpack_only(first, xnnpack):
    """The branch the input cond picks first stores first: after the [1, 6] constant, x [2, 6] would go past
    its buffer (measured: glibc aborts); after x, the constant would be read back as [2, 6].  So on 2.23 with
    XNNPACK the first invoke runs and the one that picks the other branch is refused; the same branch again
    runs.  Elsewhere each invoke reads what its branch stored."""
    it = oo.Interpreter(model_content=BRANCHES_OF_TWO_SIZES, use_xnnpack=xnnpack)
    it.allocate_tensors()

    def expected(cond, k):
        return np.float32(SMALL) if cond else _x([2, 6], k)

    np.testing.assert_array_equal(_run(it, _x([2, 6], 1), cond=first)[-1], expected(first, 1))
    if _refuses(it):
        with pytest.raises(oo.KernelError, match=re.escape(SHAPE if not first else PAST)):
            _run(it, _x([2, 6], 2), cond=not first)
        np.testing.assert_array_equal(_run(it, _x([2, 6], 3), cond=first)[-1], expected(first, 3))
        return
    np.testing.assert_array_equal(_run(it, _x([2, 6], 2), cond=not first)[-1], expected(not first, 2))


@XNNPACK
def test_an_if_on_a_computed_condition_whose_branches_store_two_shapes_is_refused_on_2_23_with_xnnpack_only(xnnpack):
    """The condition is LOGICAL_NOT of the input: which branch stores first is known only while the invoke runs,
    so on 2.23 with XNNPACK the allocation is refused (also for the order that would run: the rule cannot tell
    them apart).  Elsewhere each invoke reads what its branch stored."""
    it = oo.Interpreter(model_content=COMPUTED_BRANCHES_OF_TWO_SIZES, use_xnnpack=xnnpack)
    if _refuses(it):
        with pytest.raises(oo.ModelError, match=re.escape("may be the first value of its variable ('state')")) as err:
            it.allocate_tensors()
        assert "which runs first is known only while the invoke runs" in str(err.value)
        return
    it.allocate_tensors()
    np.testing.assert_array_equal(_run(it, _x([2, 6], 1), cond=False)[-1], np.float32(SMALL))
    np.testing.assert_array_equal(_run(it, _x([2, 6], 2), cond=True)[-1], _x([2, 6], 2))


# -- another subgraph's invoke stores first -------------------------------------------------------

# Two signatures: "main" (subgraph 0) stores its x and reads it back with rank 0; "init" stores its own x [2, 6].
TWO_SIGNATURES = build(
    {
        "names": [[None, "state"]],
        "main": [["assign", 0, "x"], ["read", 0, []]],
        "call_once": [],
        "init": [["assign", 0, "x"]],
    }
)


@XNNPACK
def test_a_smaller_store_by_another_subgraph_refuses_a_larger_one_after_it(xnnpack):
    """main, resized to [1, 6], stores first; init's x [2, 6] would then go past that buffer on 2.23 with
    XNNPACK.  init allocated before main's invoke was checked against nothing stored yet: its invoke is
    refused (KernelError); allocated after it, its allocation is (ModelError).  Elsewhere both run."""
    it = oo.Interpreter(model_content=TWO_SIGNATURES, use_xnnpack=xnnpack)
    init = it.get_signature_runner("init")
    init.allocate_tensors()
    _resize(it, [1, 6])
    np.testing.assert_array_equal(_run(it, _x([1, 6]))[-1], _x([1, 6]))
    if _refuses(it):
        with pytest.raises(oo.KernelError, match=re.escape(PAST)) as err:
            init(x=_x([2, 6]))
        assert str(err.value).startswith("signature 'init': invoke: ")
        again = oo.Interpreter(model_content=TWO_SIGNATURES, use_xnnpack=True)
        _resize(again, [1, 6])
        _run(again, _x([1, 6]))
        with pytest.raises(oo.ModelError, match=re.escape(PAST)):
            again.get_signature_runner("init")(x=_x([2, 6]))
        return
    np.testing.assert_array_equal(init(x=_x([2, 6], 3))["y"], _x([2, 6], 3))
    np.testing.assert_array_equal(_run(it, _x([1, 6], 4))[-1], _x([1, 6], 4))


# -- pickling and isolation ---------------------------------------------------------------------


@XNNPACK
def test_an_unpickled_copy_starts_with_nothing_stored(xnnpack):
    """A copy is a new interpreter (a new delegate): its first store sizes its own buffer, so the resize the
    original refuses runs in the copy, with numpy's values."""
    it = oo.Interpreter(model_content=STORE_X, use_xnnpack=xnnpack)
    _resize(it, [2, 3])
    _run(it, _x([2, 3]))
    copy = pickle.loads(pickle.dumps(it))
    _resize(copy, [2, 6])
    np.testing.assert_array_equal(_run(copy, _x([2, 6], 7))[-1], _x([2, 6], 7))
    if _refuses(it):
        with pytest.raises(oo.ModelError, match=re.escape(PAST)):
            _resize(it, [2, 6])


def test_an_isolated_interpreter_refuses_the_same_resize():
    """isolate=True runs the rule in the worker: the same ModelError reaches the caller, and the worker runs on."""
    with oo.Interpreter(model_content=STORE_X, use_xnnpack=True, isolate=True) as it:
        _resize(it, [2, 3])
        np.testing.assert_array_equal(_run(it, _x([2, 3]))[-1], _x([2, 3]))
        if _refuses(it):
            with pytest.raises(oo.ModelError, match=re.escape(PAST)):
                _resize(it, [2, 6])
            _resize(it, [2, 3])
            np.testing.assert_array_equal(_run(it, _x([2, 3], 1))[-1], _x([2, 3], 1))
        else:
            _resize(it, [2, 6])
            np.testing.assert_array_equal(_run(it, _x([2, 6], 1))[-1], _x([2, 6], 1))


# -- without the rule: the heap ---------------------------------------------------------------------

_CHILD = """
import sys
import numpy as np
import opaque_ops as oo
from opaque_ops.interpreter import variable_buffers
from tests.interpreter.test_variable_buffers import BRANCH_AFTER_INIT, STORE_ONLY, X_THEN_SMALL, _resize, _run, _x

variable_buffers.VariableBuffers.allocated = lambda self, *a: None  # (no plan: no check at the invoke either)
if sys.argv[1] == "one-run":
    it = oo.Interpreter(model_content=X_THEN_SMALL, use_xnnpack=True)
    it.allocate_tensors()
    for k in range(3):
        out = _run(it, _x([2, 6], k))[0]
elif sys.argv[1] == "resize":
    it = oo.Interpreter(model_content=STORE_ONLY, use_xnnpack=True)
    _resize(it, [2, 3])
    _run(it, _x([2, 3]))
    _resize(it, [2, 6])
    for k in range(3):
        out = _run(it, _x([2, 6], k))[0]
else:
    it = oo.Interpreter(model_content=BRANCH_AFTER_INIT, use_xnnpack=True)
    it.allocate_tensors()
    for k in range(3):
        out = _run(it, _x([2, 6], k), cond=True)[-1]
print(out.shape, np.array_equal(out, _x([2, 6], 2)), flush=True)
del it
print("closed", flush=True)
"""


def _debug_env(tmp_path) -> dict:
    env = {"OPAQUE_OPS_VERDICT_CACHE": str(tmp_path)}
    # glibc's checking allocator catches the overrun at the next free; without it, what follows is the heap
    # layout's choice.
    debug = Path("/lib/x86_64-linux-gnu/libc_malloc_debug.so.0")
    if debug.is_file():
        env.update(LD_PRELOAD=str(debug), GLIBC_TUNABLES="glibc.malloc.check=3")
    return env


@pytest.mark.parametrize("case", ["resize", "branch", "one-run"])
def test_without_the_rule_the_refused_stores_corrupt_the_heap_on_2_23_with_xnnpack(tmp_path, case):
    """The rule turned off, in a child: on 2.23 with XNNPACK x [2, 6] goes into the buffer of the first value (x
    [2, 3]; the init's [1, 6] constant), or x and a [1, 6] constant share one run, and glibc aborts ("free():
    invalid pointer"); on 2.17.1 the child gets x and closes."""
    p = run_child(_CHILD, case, env=_debug_env(tmp_path))
    if affected(runtime_info().version):
        assert p.returncode == 0 and "(2, 6) True\nclosed" in p.stdout, crashed(p)
    else:
        assert p.signal is not None, crashed(p)  # (killed by glibc's abort: not an exception)
