"""The isolated Interpreter keeps the in-process API: same results, same errors, same lifetime rules."""

from __future__ import annotations

import subprocess
import textwrap
import warnings

import numpy as np
import pytest

import opaque_ops as oo
from tests.helpers import string_models as sm
from tests.helpers.atan import make_model
from tests.helpers.child_process import run_python
from tests.helpers.locations import ADD_DELEGATE_PLUGIN_C
from tests.helpers.misbehaving_kernels import one_op, twice

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.fixture
def pair(atan_model_bytes, guide_atan):
    """The Atan seed model, in-process and isolated."""
    a = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[guide_atan])
    b = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[guide_atan], isolate=True)
    yield a, b
    b.close()


def _same_details(d1, d2):
    assert len(d1) == len(d2)
    for x, y in zip(d1, d2):
        assert x.keys() == y.keys()
        for k in x:
            if isinstance(x[k], np.ndarray):
                np.testing.assert_array_equal(x[k], y[k])
            elif isinstance(x[k], dict):
                assert x[k].keys() == y[k].keys()
                for kk in x[k]:
                    np.testing.assert_array_equal(x[k][kk], y[k][kk])
            else:
                assert x[k] == y[k], k


def test_it_is_an_interpreter(pair):
    _, b = pair
    assert isinstance(b, oo.Interpreter) and isinstance(b, oo.isolate.IsolatedInterpreter)
    assert b.worker_pid is not None and b.xnnpack == pair[0].xnnpack


def test_details_match_in_process(pair):
    a, b = pair
    _same_details(a.get_input_details(), b.get_input_details())
    _same_details(a.get_output_details(), b.get_output_details())
    _same_details(a.get_tensor_details(), b.get_tensor_details())
    assert a.get_signature_list() == b.get_signature_list()
    # Cached details are copies: changing one does not change the next.
    d = b.get_input_details()
    d[0]["shape"][0] = 99
    d[0]["name"] = "changed"
    assert b.get_input_details()[0]["shape"][0] == a.get_input_details()[0]["shape"][0]
    assert b.get_input_details()[0]["name"] == a.get_input_details()[0]["name"]


def test_what_the_model_says_is_answered_after_close_as_in_process(pair):
    """get_signature_list() and num_subgraphs() read the model: in-process they answer after close(); isolated too.

    (A review found the isolated ones raising ClosedError there.)
    """
    a, b = pair
    before = (a.get_signature_list(), a.num_subgraphs())
    assert (b.get_signature_list(), b.num_subgraphs()) == before
    assert before[0], "the seed model has a signature: the comparison must see one"
    a.close()
    b.close()
    assert (a.get_signature_list(), a.num_subgraphs()) == before
    assert (b.get_signature_list(), b.num_subgraphs()) == before
    b.get_signature_list()[next(iter(before[0]))]["inputs"].append("changed")  # a copy each time
    assert b.get_signature_list() == before[0]
    for it in (a, b):
        with pytest.raises(oo.ClosedError):
            it.get_signature_runner()


def test_results_and_resizes_match_in_process(pair):
    a, b = pair
    rng = np.random.default_rng(1)
    for n in (5, 1, 300, 7, 4096):
        outs = []
        x = rng.uniform(-50, 50, n).astype(np.float32)
        for it in (a, b):
            it.resize_tensor_input(0, [n])
            it.allocate_tensors()
            it.set_tensor(0, x)
            it.invoke()
            outs.append(it.get_tensor(it.get_output_details()[0]["index"]))
        assert outs[0].tobytes() == outs[1].tobytes() and outs[1].shape == (n,)
        _same_details(a.get_input_details(), b.get_input_details())


def test_same_errors_as_in_process(pair):
    a, b = pair
    for it in (a, b):
        it.allocate_tensors()
    cases = [
        lambda it: it.set_tensor(0, np.zeros(5, np.float64)),
        lambda it: it.set_tensor(0, np.zeros(6, np.float32)),
        lambda it: it.set_tensor(10**6, np.zeros(5, np.float32)),
        lambda it: it.set_tensor("0", np.zeros(5, np.float32)),
        lambda it: it.resize_tensor_input(3, [2]),
        lambda it: it.get_signature_runner("nope"),
        lambda it: it.tensor(10**6),
        lambda it: it.set_tensor(1, np.zeros(1, np.float32)),  # a constant: read-only
    ]
    for case in cases:
        errors = []
        for it in (a, b):
            with pytest.raises(Exception) as info:
                case(it)
            errors.append(info.value)
        assert type(errors[0]) is type(errors[1]) and str(errors[0]) == str(errors[1])
    # The interpreter is still fine after all those refusals.
    b.set_tensor(0, np.ones(5, np.float32))
    b.invoke()


def test_resize_without_allocate_answers_as_in_process(pair):
    """After a resize and before allocate_tensors, the shared buffers are not used: set_tensor,
    get_tensor and invoke answer as in-process."""
    a, b = pair
    for it in (a, b):
        it.allocate_tensors()
        it.resize_tensor_input(0, [7])
    for case in (
        lambda it: it.set_tensor(0, np.zeros(5, np.float32)),
        lambda it: it.set_tensor(0, np.zeros(7, np.float32)),
        lambda it: it.get_tensor(it.get_output_details()[0]["index"]),
        lambda it: it.invoke(),
    ):
        outcomes = []
        for it in (a, b):
            try:
                outcomes.append(("ok", case(it) is None))
            except Exception as exc:  # noqa: BLE001 - compared below
                outcomes.append((type(exc).__name__, str(exc)))
        assert outcomes[0] == outcomes[1]
    # Same-shape resize of an allocated interpreter keeps the fast path (a no-op in-process).
    for it in (a, b):
        it.allocate_tensors()
        it.resize_tensor_input(0, [7])
    assert 0 in b._slots
    b.set_tensor(0, np.ones(7, np.float32))
    b.invoke()


def test_errors_of_unknown_models_are_the_same():
    for kwargs in ({"model_content": b"not a model" * 10}, {"model_path": "/nonexistent/model.tflite"}):
        errors = []
        for isolate in (False, True):
            with pytest.raises(oo.OpaqueOpsError) as info:
                oo.Interpreter(**kwargs, isolate=isolate)
            errors.append(info.value)
        assert type(errors[0]) is type(errors[1]) and str(errors[0]) == str(errors[1])


def test_unresolved_op_error_keeps_its_details(atan_model_bytes):
    with pytest.raises(oo.UnresolvedOpsError) as a:
        oo.Interpreter(model_content=atan_model_bytes).allocate_tensors()
    it = oo.Interpreter(model_content=atan_model_bytes, isolate=True)
    with pytest.raises(oo.UnresolvedOpsError) as b:
        it.allocate_tensors()
    assert b.value.missing == a.value.missing and b.value.registered == a.value.registered
    assert str(a.value) == str(b.value) and b.value.status == 7
    it.close()


def test_dynamic_output_shapes_follow_each_invoke():
    """An output whose shape depends on input values stays in TFLite's arena; its shape,
    details and data still follow every invoke."""
    from opaque_ops.model import ModelBuilder

    b = ModelBuilder()
    x = b.add_tensor("x", [4], np.float32)
    s = b.add_tensor("s", [2], np.int32)
    y = b.add_tensor("y", [2, 2], np.float32, shape_signature=[-1, -1])
    b.add_op("RESHAPE", [x, s], [y])
    b.set_inputs([x, s])
    b.set_outputs([y])
    its = [oo.Interpreter(model_content=b.build(), isolate=iso) for iso in (False, True)]
    for it in its:
        it.allocate_tensors()
        it.set_tensor(0, np.arange(4, dtype=np.float32))
    for shape in ([2, 2], [1, 4], [4, 1]):
        results = []
        for it in its:
            it.set_tensor(1, np.array(shape, np.int32))
            it.invoke()
            results.append((it.get_tensor(2), it.get_output_details()[0]["shape"].tolist()))
        assert results[1][1] == results[0][1] == shape
        np.testing.assert_array_equal(results[1][0], np.arange(4, dtype=np.float32).reshape(shape))
    its[1].close()


def test_tensor_views_map_the_shared_buffers(pair):
    _, b = pair
    b.allocate_tensors()
    out = b.get_output_details()[0]["index"]
    x_view = b.tensor(0)()
    y_view = b.tensor(out)()
    x_view[...] = np.array([-8, 0.5, 2, 2.2, 201], np.float32)  # no set_tensor at all
    b.invoke()
    np.testing.assert_array_equal(y_view, b.get_tensor(out))
    ref = np.arctan(x_view.astype(np.float64) + np.float64(np.float32(0.99999905))).astype(np.float32)
    np.testing.assert_allclose(y_view, ref, rtol=0, atol=2e-7)
    # Another run changes what the same view shows: it is the worker's memory.
    x_view[...] = 0
    b.invoke()
    np.testing.assert_array_equal(y_view, b.get_tensor(out))
    # As in-process, live views block calls that may move tensors.
    with pytest.raises(oo.OpaqueOpsError, match="numpy view"):
        b.allocate_tensors()
    with pytest.raises(oo.OpaqueOpsError, match="numpy view"):
        b.resize_tensor_input(0, [3])
    # Intermediate tensors are not shared: a clear error, and get_tensor works.
    with pytest.raises(ValueError, match="not in shared memory"):
        b.tensor(1)()
    del x_view, y_view
    b.allocate_tensors()
    # Views outlive close().
    v = b.tensor(out)()
    before = v.copy()
    b.close()
    np.testing.assert_array_equal(v, before)


def test_signature_runner(pair):
    a, b = pair
    ra, rb = a.get_signature_runner(), b.get_signature_runner("serving_default")
    assert isinstance(rb, oo.SignatureRunner)
    x = np.linspace(-3, 3, 11).astype(np.float32)
    oa, ob = ra(x=x), rb(x=x)
    assert oa.keys() == ob.keys() and all(oa[k].tobytes() == ob[k].tobytes() for k in oa)
    assert rb.get_input_details().keys() == ra.get_input_details().keys()
    with pytest.raises(ValueError) as ea:
        ra(y=x)
    with pytest.raises(ValueError) as eb:
        rb(y=x)
    assert str(ea.value) == str(eb.value)
    # The interpreter's own fast path still follows the runner's resize.
    b.resize_tensor_input(0, [5])
    b.allocate_tensors()
    b.set_tensor(0, x[:5])
    b.invoke()
    np.testing.assert_array_equal(b.get_tensor(b.get_output_details()[0]["index"]), oa["y"][:5])


def test_context_manager_and_idempotent_close(atan_model_bytes, guide_atan):
    with oo.Interpreter(model_content=atan_model_bytes, custom_ops=[guide_atan], isolate=True) as it:
        pid = it.worker_pid
        it.allocate_tensors()
    with pytest.raises(oo.ClosedError):
        it.allocate_tensors()
    it.close()
    assert it.worker_pid is None
    import os

    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(") ")[1][0] in "ZX"


def test_delegate_plugins_are_recreated_in_the_worker(tmp_path):
    """The worker loads the same plugin with the same options (tests/helpers/add_delegate_plugin.c:
    it claims float32 ADD and computes a + b + extra, so its result tells it ran)."""
    import shutil

    from opaque_ops.model import ModelBuilder

    cc = shutil.which("cc") or shutil.which("gcc")
    plugin = tmp_path / "add_delegate.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(plugin), str(ADD_DELEGATE_PLUGIN_C)], check=True)
    c = np.array([1, 2, 3, 4], np.float32)
    b = ModelBuilder()
    x = b.add_tensor("x", [4], np.float32)
    k = b.add_constant("c", c)
    y = b.add_tensor("y", [4], np.float32)
    z = b.add_tensor("z", [4], np.float32)
    b.add_op("ADD", [x, k], [y])
    b.add_op("MUL", [y, k], [z])
    b.set_inputs([x])
    b.set_outputs([z])
    x0 = np.array([0.5, -1, 2, 10], np.float32)
    results = []
    for isolate in (False, True):
        d = oo.load_delegate(str(plugin), {"extra": 100})
        with oo.Interpreter(model_content=b.build(), experimental_delegates=[d], isolate=isolate) as it:
            it.allocate_tensors()
            it.set_tensor(0, x0)
            it.invoke()
            results.append(it.get_tensor(it.get_output_details()[0]["index"]))
    np.testing.assert_array_equal(results[1], (x0 + c + np.float32(100)) * c)
    assert results[0].tobytes() == results[1].tobytes()
    with pytest.raises(TypeError, match="load_delegate"):
        oo.Interpreter(model_content=b.build(), experimental_delegates=[object()], isolate=True)


def test_unknown_arguments_are_refused_as_in_process(atan_model_bytes):
    with pytest.raises(TypeError):
        oo.Interpreter(model_content=atan_model_bytes, isolate=True, no_such_argument=1)


def test_python_op_from_an_importable_module(bad_ops):
    from tests.helpers.isolate_python_ops import twice_op

    x = np.arange(4, dtype=np.float32)
    it = oo.Interpreter(model_content=one_op("Twice"), custom_ops=[twice_op()], isolate=True)
    it.allocate_tensors()
    it.set_tensor(0, x)
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), twice(x))
    it.close()


def test_python_op_that_cannot_travel_is_a_clear_error():
    op = oo.python_op("Twice", invoke=lambda inputs, outputs: None)
    with pytest.raises(oo.OpaqueOpsError, match="module level"):
        oo.Interpreter(model_content=one_op("Twice"), custom_ops=[op], isolate=True)


def test_python_op_defined_in_a_script(tmp_path):
    """A script's own functions reach the worker (it imports the script as __mp_main__)."""
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent("""
        import numpy as np
        import opaque_ops as oo
        from tests.helpers.misbehaving_kernels import one_op

        def invoke(inputs, outputs):
            outputs[0][...] = inputs[0] * 3

        if __name__ == "__main__":
            op = oo.python_op("Twice", invoke=invoke)
            with oo.Interpreter(model_content=one_op("Twice"), custom_ops=[op], isolate=True) as it:
                it.allocate_tensors()
                it.set_tensor(0, np.arange(4, dtype=np.float32))
                it.invoke()
                print(it.get_tensor(it.get_output_details()[0]["index"]).tolist())
    """)
    )
    out = run_python(script, timeout=300)  # the repository root on its PYTHONPATH: tests.helpers imports
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[0.0, 3.0, 6.0, 9.0]"


def test_a_script_without_a_main_guard_is_told_to_add_one(tmp_path):
    """The worker imports the script as multiprocessing does, which runs its top-level code: say so.

    Without ``if __name__ == "__main__":`` the worker ran the script's own
    isolated Interpreter, whose worker could not import the script's
    functions, and the user read "No module named '__mp_main__'".
    """
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent("""
        import numpy as np
        import opaque_ops as oo
        from tests.helpers.misbehaving_kernels import one_op

        def invoke(inputs, outputs):
            outputs[0][...] = inputs[0] * 3

        op = oo.python_op("Twice", invoke=invoke)
        with oo.Interpreter(model_content=one_op("Twice"), custom_ops=[op], isolate=True) as it:
            it.allocate_tensors()
    """)
    )
    out = run_python(script, timeout=300)
    assert out.returncode == 1, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("opaque_ops.errors.OpaqueOpsError: the isolated worker imports your script"), last
    assert str(script) in last and 'if __name__ == "__main__":' in last, last


def test_a_worker_hosts_one_interpreter_at_a_time(bad_ops):
    with oo.isolate.Worker() as w:
        it = oo.Interpreter(model_content=one_op("Twice"), custom_ops=[bad_ops], isolate=w)
        with pytest.raises(oo.OpaqueOpsError, match="already hosts"):
            oo.Interpreter(model_content=one_op("Twice"), custom_ops=[bad_ops], isolate=w)
        pid = w.pid
        it.close()
        it2 = oo.Interpreter(model_content=one_op("Twice"), custom_ops=[bad_ops], isolate=w)
        assert w.pid == pid and w.starts == 1  # reused, not restarted
        it2.close()


def test_isolate_by_default(atan_model_bytes, guide_atan):
    with oo.isolate.isolate_by_default():
        it = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[guide_atan])
        in_process = oo.Interpreter(model_content=atan_model_bytes, custom_ops=[guide_atan], isolate=False)
    assert isinstance(it, oo.isolate.IsolatedInterpreter)
    assert not isinstance(in_process, oo.isolate.IsolatedInterpreter)
    assert not isinstance(oo.Interpreter(model_content=atan_model_bytes), oo.isolate.IsolatedInterpreter)
    it.close()


def test_a_subclass_asked_to_run_isolated_is_refused_not_run_in_process(atan_model_bytes, guide_atan):
    # It ran in this process without a word: no crash protection.
    class Mine(oo.Interpreter):
        pass

    with pytest.raises(oo.UnsupportedError, match=r"Mine is a subclass of opaque_ops.Interpreter.*isolate=True"):
        Mine(model_content=atan_model_bytes, custom_ops=[guide_atan], isolate=True)
    # Under the default, warned (once per class); asked for in-process, nothing is said.
    with oo.isolate.isolate_by_default():
        with pytest.warns(RuntimeWarning, match="runs in this process despite isolate_by_default"):
            a = Mine(model_content=atan_model_bytes, custom_ops=[guide_atan])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            b = Mine(model_content=atan_model_bytes, custom_ops=[guide_atan])
            c = Mine(model_content=atan_model_bytes, custom_ops=[guide_atan], isolate=False)
    for it in (a, b, c):
        assert type(it) is Mine
        it.close()


def test_a_subclass_asking_for_isolation_from_its_init_is_refused(atan_model_bytes, guide_atan):
    class Mine(oo.Interpreter):
        def __init__(self, content):
            super().__init__(model_content=content, custom_ops=[guide_atan], isolate=True)

    with pytest.raises(oo.UnsupportedError, match="Mine is a subclass"):
        Mine(atan_model_bytes)


def test_under_w_error_the_isolation_warning_is_raised_every_time(atan_model_bytes, guide_atan):
    class Mine(oo.Interpreter):
        pass

    with oo.isolate.isolate_by_default(), warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):  # (it was marked as warned before the warning raised)
            with pytest.raises(RuntimeWarning, match="runs in this process"):
                Mine(model_content=atan_model_bytes, custom_ops=[guide_atan])


def test_bundled_kernels_go_by_name_and_fall_back_to_their_file(tmp_path, monkeypatch, atan_model_bytes):
    import pickle

    from opaque_ops.isolate.shipping import pack_ops

    atan = oo.kernels.atan()
    packed, _ = pack_ops([oo.kernels.mediapipe(), atan])
    # The same pickles as any process pool's: by name, with the parent's file as the fallback.
    assert packed[1] == (None, pickle.dumps(atan))
    assert b"atan" in packed[1][1] and str(atan.path).encode() in packed[1][1]
    assert pickle.loads(packed[0][1]).names == oo.kernels.mediapipe().names
    # A worker that can neither find nor build its own copy (an empty compile
    # cache, a compiler that does not exist; the dev tree has no prebuilt
    # libraries) loads the parent's file instead of failing.
    monkeypatch.setenv("OPAQUE_OPS_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("CC", "/nonexistent/cc")
    x = np.linspace(-50, 50, 101, dtype=np.float32)
    with oo.Interpreter(model_content=atan_model_bytes, custom_ops=[atan], isolate=True) as it:
        d = it.get_input_details()[0]
        it.resize_tensor_input(d["index"], x.shape)
        it.allocate_tensors()
        it.set_tensor(d["index"], x)
        it.invoke()
        got = it.get_tensor(it.get_output_details()[0]["index"])
    # The guide's model: y = atan(x + offset) (examples/atan/make_model.py).
    want = np.arctan((x + np.float32(make_model.OFFSET)).astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_pickles_as_an_isolated_interpreter_with_its_own_worker(atan_model_bytes):
    import pickle

    from opaque_ops.isolate.proxy import IsolatedInterpreter

    x = np.linspace(-3, 3, 7, dtype=np.float32)
    with oo.Interpreter(model_content=atan_model_bytes, custom_ops=[oo.kernels.atan()], isolate=True, timeout=30) as it:
        d = it.get_input_details()[0]
        it.resize_tensor_input(d["index"], x.shape)
        it.allocate_tensors()
        it.set_tensor(d["index"], x)
        it.invoke()
        want = it.get_tensor(it.get_output_details()[0]["index"])
        with pickle.loads(pickle.dumps(it)) as copy:
            assert isinstance(copy, IsolatedInterpreter)
            assert copy.worker_pid not in (None, it.worker_pid)
            assert copy._timeout == 30
            # Resized and allocated as the original was; tensor contents do not travel.
            assert list(copy.get_input_details()[0]["shape"]) == [7]
            copy.set_tensor(d["index"], x)
            copy.invoke()
            assert copy.get_tensor(copy.get_output_details()[0]["index"]).tobytes() == want.tobytes()
    with pytest.raises(oo.ClosedError):
        pickle.dumps(it)


def _strings_outcome(shape, value, isolate):
    try:
        with oo.Interpreter(model_content=sm.reshape_model(shape), isolate=isolate) as it:
            it.allocate_tensors()
            it.set_tensor(0, value)
            it.invoke()
            out = it.get_tensor(it.get_output_details()[0]["index"])
            details = [d["dtype"] for d in it.get_input_details() + it.get_output_details()]
            return out.dtype, out.shape, [type(x) for x in out.ravel()], out.ravel().tolist(), details
    except oo.OpaqueOpsError as exc:
        return type(exc), str(exc)


@pytest.mark.parametrize("name", [*sm.VALUES, "an int element"])
def test_string_tensors_answer_as_in_process(name):
    """Before: "cannot be set from numpy", and an object array of strings could not cross at all."""
    shape, value = sm.VALUES.get(name, ((3,), np.array([b"a", 2, "c"], dtype=object)))
    isolated = _strings_outcome(shape, value, True)
    assert isolated == _strings_outcome(shape, value, False)
    if name in sm.VALUES:
        flat = np.asarray(value).ravel().tolist()
        assert isolated[3] == [x.encode("utf-8") if isinstance(x, str) else x for x in flat]
        assert isolated[4] == [np.bytes_, np.bytes_]
    else:  # the element the worker never saw is named as in-process
        assert isolated[0] is oo.InvalidInputError and "the element at (1,) is a int" in isolated[1]


def test_string_signature_runner_and_broken_buffers_answer_as_in_process():
    lib = oo.compile_ops(sm.BROKEN_STRINGS)
    outcomes = []
    for isolate in (False, True):
        got = []
        with oo.Interpreter(model_content=sm.reshape_model([2]), isolate=isolate) as it:
            got.append(it.get_signature_runner()(words=np.array([b"q\x00", "\u00e9"], dtype=object))["same"].tolist())
        for how in (0, 3):
            with oo.Interpreter(model_content=sm.broken_strings_model(), custom_ops=[lib], isolate=isolate) as it:
                it.allocate_tensors()
                it.set_tensor(0, np.array([how], np.int32))
                it.invoke()
                try:
                    got.append(it.get_tensor(it.get_output_details()[0]["index"]).tolist())
                except oo.ModelError as exc:
                    got.append(str(exc))
        outcomes.append(got)
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][:2] == [[b"q\x00", b"\xc3\xa9"], [b"ab", b"c"]] and "do not run forward" in outcomes[0][2]


def _outcome(call):
    """``("ok", value bytes or None)`` or ``(exception type, message)``: what a call gave."""
    try:
        value = call()
    except Exception as exc:  # noqa: BLE001 - compared by the caller
        return type(exc).__name__, str(exc)
    return "ok", None if value is None else np.asarray(value).tobytes()


def _unallocated_subgraph_0_cases():
    """Every way to reach subgraph 0's tensors and run it, on the two-subgraph model (x: 0, y: 2)."""
    x = np.full((1, 4), 5, np.float32)
    return {
        "set_tensor(x)": lambda it: it.set_tensor(0, x),
        "get_tensor(x)": lambda it: it.get_tensor(0),
        "get_tensor(y)": lambda it: it.get_tensor(2),
        "tensor(x)()": lambda it: it.tensor(0)().copy(),
        "tensor(y)()": lambda it: it.tensor(2)().copy(),
        "invoke()": lambda it: it.invoke(),
        "get_tensor(y) after invoke": lambda it: it.get_tensor(2),
    }


@pytest.mark.parametrize("before", ["nothing", "the other subgraph's runner"])
def test_subgraph_0_never_allocated_is_refused_as_in_process(before):
    """Before subgraph 0 was ever allocated, isolated refuses what in-process refuses, with its error.

    A signature runner of subgraph 1 used to give subgraph 0's inputs and
    outputs their shared buffers, so the isolated interpreter took
    set_tensor and returned zeros nothing computed from get_tensor; and a
    tensor() view said "not in shared memory" where in-process says
    "call allocate_tensors() first".  ai-edge-litert refuses each one too.
    """
    from ai_edge_litert.interpreter import Interpreter as Litert

    from tests.helpers.interpreter_models import two_subgraph_model

    model = two_subgraph_model()
    inp = np.linspace(-2, 3, 6, dtype=np.float32).reshape(1, 6)
    its = {
        "litert": Litert(model_content=model),
        "in-process": oo.Interpreter(model_content=model),
        "isolated": oo.Interpreter(model_content=model, isolate=True),
    }
    try:
        if before != "nothing":
            for name, it in its.items():
                out = it.get_signature_runner("second")(inp=inp)["out"]
                assert out.tobytes() == (inp + np.float32(2)).tobytes(), name  # out = inp + 2
        for what, case in _unallocated_subgraph_0_cases().items():
            got = {name: _outcome(lambda: case(it)) for name, it in its.items()}
            assert got["isolated"] == got["in-process"], what
            assert got["in-process"][0] == "NotAllocatedError", what
            assert got["litert"][0] in ("ValueError", "RuntimeError"), what  # it refuses too
        # Once allocated, subgraph 0 runs: y = x + 1.
        x = np.array([[-1.5, 0, 2, 7]], np.float32)
        for it in its.values():
            it.allocate_tensors()
            it.set_tensor(0, x)
            it.invoke()
            assert it.get_tensor(2).tobytes() == (x + np.float32(1)).tobytes()
    finally:
        its["isolated"].close()


def test_an_input_resized_stays_unallocated_across_the_other_subgraphs_runner():
    """allocate, resize, a runner of subgraph 1, no allocate_tensors(): the resized input has no memory
    (NotAllocatedError as in-process, ValueError in ai-edge-litert); the output keeps its last result.

    The runner's allocation used to make the isolated worker forget the
    resize, so the resized input took a write of its new shape into the old
    buffer and read back what it held before.
    """
    from ai_edge_litert.interpreter import Interpreter as Litert

    from tests.helpers.interpreter_models import two_subgraph_model

    model = two_subgraph_model()
    x = np.array([[1, 2, 3, 4]], np.float32)
    its = {
        "litert": Litert(model_content=model),
        "in-process": oo.Interpreter(model_content=model),
        "isolated": oo.Interpreter(model_content=model, isolate=True),
    }
    try:
        for it in its.values():
            it.allocate_tensors()
            it.set_tensor(0, x)
            it.invoke()
            it.resize_tensor_input(0, [1, 3])
            it.get_signature_runner("second")(inp=np.ones((1, 6), np.float32))
        cases = {
            "get_tensor(x)": lambda it: it.get_tensor(0),
            "set_tensor(x)": lambda it: it.set_tensor(0, np.ones((1, 3), np.float32)),
            "tensor(x)()": lambda it: it.tensor(0)().copy(),
            "invoke()": lambda it: it.invoke(),
        }
        for what, case in cases.items():
            got = {name: _outcome(lambda: case(it)) for name, it in its.items()}
            assert got["isolated"] == got["in-process"], what
            assert got["in-process"][0] == "NotAllocatedError", what
            assert got["litert"][0] in ("ValueError", "RuntimeError"), what
        # The output was not resized: it still holds the last invoke's y = x + 1, everywhere.
        for name, it in its.items():
            assert it.get_tensor(2).tobytes() == (x + np.float32(1)).tobytes(), name
        # allocate_tensors() gives the input its new shape's memory.
        x3 = np.array([[9, -9, 0.5]], np.float32)
        for it in its.values():
            it.allocate_tensors()
            it.set_tensor(0, x3)
            it.invoke()
            assert it.get_tensor(2).tobytes() == (x3 + np.float32(1)).tobytes()
    finally:
        its["isolated"].close()


def test_an_output_tflite_allocates_only_in_invoke_has_no_data_before_as_in_process():
    """After allocate_tensors(), an output whose node TFLite prepares only in invoke (it follows a
    dynamic tensor) has no memory: NotAllocatedError as in-process, ValueError in ai-edge-litert.

    The worker used to give it a shared buffer at the allocation, so the
    isolated get_tensor returned zeros nothing computed.
    """
    from ai_edge_litert.interpreter import Interpreter as Litert

    from tests.helpers.interpreter_models import tile_model

    model = tile_model()  # y (3) = 2 * tile(x (0), multiples (1))
    its = {
        "litert": Litert(model_content=model),
        "in-process": oo.Interpreter(model_content=model),
        "isolated": oo.Interpreter(model_content=model, isolate=True),
    }
    try:
        for it in its.values():
            it.allocate_tensors()
        got = {name: _outcome(lambda: it.get_tensor(3)) for name, it in its.items()}
        assert got["isolated"] == got["in-process"]
        assert got["in-process"][0] == "NotAllocatedError"
        assert got["litert"][0] == "ValueError"
        x = np.array([1.5, -2, 0, 3], np.float32)
        for it in its.values():
            it.set_tensor(0, x)
            it.set_tensor(1, np.array([3], np.int32))
            it.invoke()
            assert it.get_tensor(3).tobytes() == (np.tile(x, 3) * np.float32(2)).tobytes()
    finally:
        its["isolated"].close()
