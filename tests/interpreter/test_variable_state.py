"""A READ_VARIABLE of a variable nothing has assigned yet (opaque_ops/interpreter/variable_state.py).

tensorflow/lite/kernels/read_variable.cc fails the invoke when its variable
has no value yet (``variable != nullptr``): so do 2.17.1 (with XNNPACK or
without), 2.23.0 without XNNPACK and ai-edge-litert without delegates.
2.23's XNNPACK delegate, which runs the variable operators itself, returns
uninitialised memory with no error (ai-edge-litert with XNNPACK too).  What
assigns a variable first is only known at run time (a CALL_ONCE init, an
earlier invoke, an "init" signature the user runs first, an IF's branch
picked by a condition the caller gives), so each invoke of a subgraph whose
read comes first checks what the interpreter's invokes that succeeded
assigned so far, on 2.23 with XNNPACK only; everywhere else TFLite's own
error stands.  ``reset_all_variables()`` leaves resource variables as they
are on every runtime (it resets the tensors marked is_variable).
"""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.model import cache as model_cache
from opaque_ops.model import read_model
from opaque_ops.model.runtime_versions import affected
from opaque_ops.model.variable_state import reads_before_assignment
from opaque_ops.runtime import runtime_info
from tests.helpers.child_process import run_child_json
from tests.helpers.variable_models import (
    fails_on_negative_op,
    if_assigned_model,
    if_init_signature_model,
    init_signature_model,
    litert_allocated,
    named_variables_model,
)

litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is a test dependency")

X = np.arange(12, dtype=np.float32).reshape(2, 6) + 1
X2 = X + 100
OURS = "nothing has assigned yet in this interpreter"
TFLITES = "read_variable.cc:67 variable != nullptr"
XNNPACK = pytest.mark.parametrize("xnnpack", [False, True], ids=["reference", "xnnpack"])

# (a) a name nothing assigns; (b) a read before subgraph 0's own assignment, no init.
UNASSIGNED = named_variables_model([("read", b"nothing", (2, 6))])
READ_FIRST = named_variables_model([("read", b"state", (2, 6)), ("assign", b"state", "x")])


def _refuses(it) -> bool:
    """Whether this interpreter checks the reads: 2.23 with XNNPACK, whose delegate would return garbage."""
    return bool(it.xnnpack) and not affected(runtime_info().version)


def _failure(it) -> str:
    """The error of an invoke that reads a variable never assigned: ours where the check runs, else TFLite's."""
    return OURS if _refuses(it) else re.escape(TFLITES)


def _interpreter(data: bytes, xnnpack: bool, **kw):
    it = oo.Interpreter(model_content=data, use_xnnpack=xnnpack, **kw)
    it.allocate_tensors()
    return it


def _invoke(it, x=X):
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


# -- refused where the data is garbage, TFLite's error elsewhere ------------------------------------


@XNNPACK
@pytest.mark.parametrize("data", [UNASSIGNED, READ_FIRST], ids=["never-assigned", "read-before-assign"])
def test_a_read_of_a_variable_nothing_assigned_fails_at_every_invoke(data, xnnpack):
    """Both forms fail every invoke on every runtime: the read comes first, so the assignment after it never
    runs (2.17.1 and every runtime without XNNPACK stop at the read, so a second invoke fails alike), and on
    2.23 with XNNPACK the check refuses the first invoke, and so the next ones, with the fix in its message."""
    it = _interpreter(data, xnnpack)
    for x in (X, X2, X):
        with pytest.raises(oo.KernelError, match=_failure(it)) as err:
            _invoke(it, x)
    if _refuses(it):
        message = str(err.value)
        assert "operator 1 (READ_VARIABLE) of subgraph 0" in message
        assert "uninitialised memory" in message and "CALL_ONCE" in message
        assert ("assigns it only after this read" in message) == (data is READ_FIRST)


@XNNPACK
@pytest.mark.parametrize("data", [UNASSIGNED, READ_FIRST], ids=["never-assigned", "read-before-assign"])
def test_without_the_check_2_23_with_xnnpack_returns_garbage_silently(monkeypatch, data, xnnpack):
    """What the check prevents: with it off (no read found in the model), 2.23's XNNPACK invokes with no error
    and returns memory nothing wrote (ai-edge-litert with XNNPACK likewise); every other runtime fails the
    invoke at the read (ai-edge-litert without delegates too).  On the read-before-assign form, 2.23's second
    invoke then reads what the first assigned."""
    monkeypatch.setattr(model_cache, "variable_reads", lambda info: ())
    it = _interpreter(data, xnnpack)
    peer = litert_allocated(data, xnnpack)
    peer.set_tensor(peer.get_input_details()[0]["index"], X)
    if _refuses(it):
        _invoke(it)  # no error: uninitialised memory
        peer.invoke()
        if data is READ_FIRST:
            np.testing.assert_array_equal(_invoke(it, X2), X)
    else:
        with pytest.raises(oo.KernelError, match=re.escape(TFLITES)):
            _invoke(it)
        if not xnnpack:
            with pytest.raises(RuntimeError, match=re.escape("variable != nullptr")):
                peer.invoke()


# -- what assigns first at run time: never refused ----------------------------------------------------


@XNNPACK
def test_an_init_signature_run_first_gives_numpys_values(xnnpack):
    """``init`` stores x; ``main`` (a runner of subgraph 0, and invoke()) then reads x, on this runtime and on
    ai-edge-litert alike.  After that nothing is left to check: the check is dropped."""
    it = _interpreter(init_signature_model(), xnnpack)
    np.testing.assert_array_equal(it.get_signature_runner("init")(x=X)["y"], X)
    np.testing.assert_array_equal(it.get_signature_runner("main")(x=X2)["read"], X)
    np.testing.assert_array_equal(_invoke(it, X2), X)
    assert it._variables is None
    peer = litert_allocated(init_signature_model(), xnnpack)
    peer.get_signature_runner("init")(x=X)
    np.testing.assert_array_equal(peer.get_signature_runner("main")(x=X2)["read"], X)


@XNNPACK
def test_main_before_its_init_signature_fails_then_runs_once_init_ran(xnnpack):
    it = _interpreter(init_signature_model(), xnnpack)
    main = it.get_signature_runner("main")
    it.get_tensor(it.get_output_details()[0]["index"])  # (its view is cached: the runner's short path is open)
    for _ in range(2):  # (the second call finds its input's view cached too)
        with pytest.raises(oo.KernelError, match=_failure(it)) as err:
            main(x=X2)
    if _refuses(it):
        assert "Run the signature that assigns it first ('init')" in str(err.value)
    with pytest.raises(oo.KernelError, match=_failure(it)):
        _invoke(it, X2)
    it.get_signature_runner("init")(x=X)
    np.testing.assert_array_equal(main(x=X2)["read"], X)
    np.testing.assert_array_equal(_invoke(it, X2), X)


@XNNPACK
@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "isolated"])
@pytest.mark.parametrize("fails", ["before", "after"])
def test_an_init_that_fails_assigns_nothing_that_counts(xnnpack, fails, isolate):
    """An ``init`` whose invoke fails (its custom operator raises, before or after the ASSIGN_VARIABLE) is not
    counted as having assigned the variable: ``main`` is then refused on 2.23 with XNNPACK, whose read would
    be garbage when the failure came first.  Elsewhere the runtime's own answer stands: its READ_VARIABLE
    error when the assignment never ran, the value it stored when it did (what ai-edge-litert without
    delegates gives too).  Once an init succeeds, main reads its x on every runtime."""
    data = init_signature_model(fails)
    with _interpreter(data, xnnpack, custom_ops=[fails_on_negative_op()], isolate=isolate) as it:
        init, main = it.get_signature_runner("init"), it.get_signature_runner("main")
        for _ in range(2):
            with pytest.raises(ValueError, match="x\\[0, 0\\] is negative"):
                init(x=-X)
            if _refuses(it):
                with pytest.raises(oo.KernelError, match=OURS):
                    main(x=X2)
                with pytest.raises(oo.KernelError, match=OURS):
                    _invoke(it, X2)
            elif fails == "before":
                with pytest.raises(oo.KernelError, match=re.escape(TFLITES)):
                    main(x=X2)
            else:
                np.testing.assert_array_equal(main(x=X2)["read"], -X)
        np.testing.assert_array_equal(init(x=X)["y"], X)
        np.testing.assert_array_equal(main(x=X2)["read"], X)
        np.testing.assert_array_equal(_invoke(it, X2), X)
    if fails == "after":
        peer = litert_allocated(init_signature_model(), False)  # (the same assignment, with an init that succeeds)
        peer.get_signature_runner("init")(x=-X)
        np.testing.assert_array_equal(peer.get_signature_runner("main")(x=X2)["read"], -X)


@XNNPACK
def test_a_call_once_init_assigns_first_so_nothing_is_checked(xnnpack):
    """The converters' form: a CALL_ONCE init subgraph stores a constant before subgraph 0 reads it, at the
    first invoke; read = the constant, on every runtime, and the model needs no check at all."""
    init = np.arange(12, dtype=np.float32).reshape(2, 6) * 3
    data = named_variables_model([("read", b"state", (2, 6)), ("assign", b"state", "x")], [("assign", b"state", init)])
    it = _interpreter(data, xnnpack)
    assert it._variables is None
    np.testing.assert_array_equal(_invoke(it, X), init)
    # (The first invoke after an allocation counts the values it stores on 2.23 with XNNPACK: variable_buffers.)
    assert not it._prechecks
    np.testing.assert_array_equal(_invoke(it, X2), X)
    peer = litert_allocated(data, xnnpack)
    peer.set_tensor(peer.get_input_details()[0]["index"], X)
    peer.invoke()
    np.testing.assert_array_equal(peer.get_tensor(peer.get_output_details()[0]["index"]), init)


@XNNPACK
def test_reset_all_variables_leaves_an_assigned_variable_assigned(xnnpack):
    """TfLiteInterpreterResetVariableTensors resets the tensors marked is_variable, not resource variables:
    after it, main still reads what init stored, on this runtime and on ai-edge-litert, and is not refused."""
    it = _interpreter(init_signature_model(), xnnpack)
    it.get_signature_runner("init")(x=X)
    it.reset_all_variables()
    np.testing.assert_array_equal(it.get_signature_runner("main")(x=X2)["read"], X)
    peer = litert_allocated(init_signature_model(), xnnpack)
    peer.get_signature_runner("init")(x=X)
    peer.reset_all_variables()
    np.testing.assert_array_equal(peer.get_signature_runner("main")(x=X2)["read"], X)


def _if_invoke(it, cond: bool, x=X):
    index = {d["name"]: d["index"] for d in it.get_input_details()}
    it.set_tensor(index["x"], x)
    it.set_tensor(index["cond"], np.array([cond]))
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


@XNNPACK
@pytest.mark.parametrize("passed", [True, False], ids=["handle-passed", "own-handle"])
def test_a_read_after_an_if_is_decided_by_the_branch_its_condition_picks(xnnpack, passed):
    """``IF(cond) {assign x to state} else {}`` then a read of state, cond an input: with cond false first the
    read is of a variable never assigned (measured: uninitialised memory on 2.23 with XNNPACK and on
    ai-edge-litert with XNNPACK, TFLite's error elsewhere): refused there, TFLite's error elsewhere, as
    ai-edge-litert without delegates.  With cond true the read is x on every runtime (numpy: the value
    assigned), and a later invoke with cond false reads that x (the variable stays assigned): never refused."""
    data = if_assigned_model(passed)
    it = _interpreter(data, xnnpack)
    assert (it._variables is not None) == _refuses(it)
    for _ in range(2):
        with pytest.raises(oo.KernelError, match=_failure(it)) as err:
            _if_invoke(it, False)
    if _refuses(it):
        assert "(else-branch taken) before the read runs a branch that does not assign it" in str(err.value)
        assert "Invoke first with a condition whose branch assigns it" in str(err.value)
    peer = litert_allocated(data, False)
    index = {d["name"]: d["index"] for d in peer.get_input_details()}
    peer.set_tensor(index["x"], X)
    peer.set_tensor(index["cond"], np.array([False]))
    with pytest.raises(RuntimeError, match=re.escape("variable != nullptr")):
        peer.invoke()
    np.testing.assert_array_equal(_if_invoke(it, True, X), X)
    assert it._variables is None  # (nothing waits now: the check is dropped)
    np.testing.assert_array_equal(_if_invoke(it, False, X2), X)
    peer.set_tensor(index["cond"], np.array([True]))
    peer.invoke()
    np.testing.assert_array_equal(peer.get_tensor(peer.get_output_details()[0]["index"]), X)


@XNNPACK
def test_a_read_after_an_if_on_a_computed_condition_is_never_refused(xnnpack):
    """IF(LOGICAL_NOT(cond)): the condition is only known once the model computed it, so the read after the IF
    is not checked (a refusal could refuse a run that reads what the branch assigned).  With cond false the
    then-branch runs: read = x on every runtime, as on ai-edge-litert.  (With cond true first, 2.23 with XNNPACK
    returns uninitialised memory, which no check before the invoke can see: documented in model.variable_state.)"""
    data = if_assigned_model(computed=True)
    assert reads_before_assignment(read_model(data)) == ()
    it = _interpreter(data, xnnpack)
    assert it._variables is None
    np.testing.assert_array_equal(_if_invoke(it, False), X)
    peer = litert_allocated(data, xnnpack)
    index = {d["name"]: d["index"] for d in peer.get_input_details()}
    peer.set_tensor(index["x"], X)
    peer.set_tensor(index["cond"], np.array([False]))
    peer.invoke()
    np.testing.assert_array_equal(peer.get_tensor(peer.get_output_details()[0]["index"]), X)


@XNNPACK
def test_an_isolated_interpreter_decides_the_if_in_its_worker(xnnpack):
    with _interpreter(if_assigned_model(), xnnpack, isolate=True) as it:
        with pytest.raises(oo.KernelError, match=OURS if xnnpack and not affected(runtime_info().version) else TFLITES):
            _if_invoke(it, False)
        np.testing.assert_array_equal(_if_invoke(it, True), X)
        np.testing.assert_array_equal(_if_invoke(it, False, X2), X)


@XNNPACK
def test_an_init_whose_if_did_not_assign_counts_nothing(xnnpack):
    """``init`` assigns state only in its IF's then-branch: after an init run with cond false (which succeeds),
    main still reads a variable never assigned: refused on 2.23 with XNNPACK, TFLite's error elsewhere (and
    on ai-edge-litert without delegates).  After init with cond true, main reads that x on every runtime."""
    data = if_init_signature_model()
    it = _interpreter(data, xnnpack)
    init, main = it.get_signature_runner("init"), it.get_signature_runner("main")
    np.testing.assert_array_equal(init(x=X, cond=np.array([False]))["y"], X)
    with pytest.raises(oo.KernelError, match=_failure(it)) as err:
        main(x=X2)
    if _refuses(it):
        assert "Run the signature that assigns it first ('init')" in str(err.value)
    peer = litert_allocated(data, False)
    peer.get_signature_runner("init")(x=X, cond=np.array([False]))
    with pytest.raises(RuntimeError, match=re.escape("variable != nullptr")):
        peer.get_signature_runner("main")(x=X2)
    init(x=X, cond=np.array([True]))
    np.testing.assert_array_equal(main(x=X2)["read"], X)
    assert it._variables is None
    peer.get_signature_runner("init")(x=X, cond=np.array([True]))
    np.testing.assert_array_equal(peer.get_signature_runner("main")(x=X2)["read"], X)


# -- every path that invokes ---------------------------------------------------------------------------


@XNNPACK
def test_a_pickled_copy_starts_with_fresh_variables(xnnpack):
    """The copy is a new interpreter: its variables are not assigned, whatever the original's were."""
    it = _interpreter(init_signature_model(), xnnpack)
    it.get_signature_runner("init")(x=X)
    copy = pickle.loads(pickle.dumps(it))
    with pytest.raises(oo.KernelError, match=_failure(copy)):
        _invoke(copy, X2)
    np.testing.assert_array_equal(_invoke(it, X2), X)


@XNNPACK
def test_an_isolated_interpreter_checks_in_its_worker(xnnpack):
    with _interpreter(init_signature_model(), xnnpack, isolate=True) as it:
        with pytest.raises(oo.KernelError, match=OURS if xnnpack and not affected(runtime_info().version) else TFLITES):
            it.get_signature_runner("main")(x=X2)
        it.get_signature_runner("init")(x=X)
        np.testing.assert_array_equal(_invoke(it, X2), X)


@pytest.mark.parametrize("fast", ["1", "0"], ids=["fast-calls", "no-fast-calls"])
def test_with_and_without_the_c_invoke(fast):
    """The C invoke (fast_calls) is bound only once nothing is left to check; OPAQUE_OPS_FASTCALLS=0 runs the
    Python invoke throughout.  Both refuse (2.23 with XNNPACK) or fail (elsewhere) before init, and read x after."""
    code = """
        import json, numpy as np, opaque_ops as oo
        from tests.helpers.variable_models import init_signature_model
        it = oo.Interpreter(model_content=init_signature_model(), use_xnnpack=True)
        it.allocate_tensors()
        x = np.arange(12, dtype=np.float32).reshape(2, 6)
        def run():
            it.set_tensor(it.get_input_details()[0]["index"], x)
            it.invoke()
            return it.get_tensor(it.get_output_details()[0]["index"]).tolist()
        out = []
        try:
            run()
        except oo.KernelError as exc:
            out.append(str(exc))
        it.get_signature_runner("init")(x=x + 1)
        out.append([run(), run()])
        print(json.dumps(out))
    """
    _child, (error, reads) = run_child_json(code, env={"OPAQUE_OPS_FASTCALLS": fast})
    it = _interpreter(init_signature_model(), True)
    assert (OURS in error) == _refuses(it) and (TFLITES in error) != _refuses(it)
    assert reads == [(X).tolist()] * 2


# -- the model's part ---------------------------------------------------------------------------------


def test_only_certain_reads_are_found():
    """A read after its own assignment, or after a CALL_ONCE whose subgraph assigns the name, comes first nowhere;
    a read of a name nothing assigns does, and so does one before subgraph 0's own assignment."""
    after = named_variables_model([("assign", b"state", "x"), ("read", b"state", (2, 6))])
    assert reads_before_assignment(read_model(after)) == ()
    init = named_variables_model([("read", b"state", (2, 6))], [("assign", b"state", X)])
    assert reads_before_assignment(read_model(init)) == ()
    (entry,) = reads_before_assignment(read_model(READ_FIRST))
    assert entry == (0, (("", "state", 1),), (("", "state"),), False, (), ())
    signatures = reads_before_assignment(read_model(init_signature_model()))
    assert signatures == ((0, (("", "state", 1),), (), False, (), ()), (1, (), (("", "state"),), False, (), ()))


@pytest.mark.parametrize("passed", [True, False], ids=["handle-passed", "own-handle"])
def test_an_if_on_an_input_is_decided_and_others_count_as_assigning(passed):
    """IF(cond input) {assign state} else {} before the read: the read waits on that IF (operator 2), whose
    then-branch assigns state, through the handle it is given or its own.  The same IF in init's signature
    subgraph is decided there too, and main's read stays certain."""
    (entry,) = reads_before_assignment(read_model(if_assigned_model(passed)))
    assert entry == (0, (), (), False, ((1, (("", "state"),), ()),), (("", "state", 2, (0,)),))
    main, init = reads_before_assignment(read_model(if_init_signature_model()))
    assert main == (0, (("", "state", 1),), (), False, (), ())
    assert init == (1, (), (), False, ((1, (("", "state"),), ()),), ())
