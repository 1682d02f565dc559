"""opaque_ops.compat: unmodified tflite_runtime / ai-edge-litert code running on opaque_ops.

Every test runs its client code in a child process: the import hook changes
``sys.modules`` and ``sys.meta_path``, and the test process itself imports
the real ai-edge-litert as the reference.
"""

from __future__ import annotations

import json
import subprocess
import textwrap

import numpy as np
import pytest

from tests.helpers.atan import ATAN_INPUT
from tests.helpers.child_process import crashed, run_child, run_python
from tests.helpers.fork_locks import assert_child_returns
from tests.helpers.locations import ROOT, package_file

# is given and prints its outputs and which Interpreter class it got.
CLIENT = """
import json, sys
import numpy as np
import tflite_runtime.interpreter as tflite

it = tflite.Interpreter(model_path=sys.argv[1], num_threads=1)
inp = it.get_input_details()[0]
shape = [int(d) for d in json.loads(sys.argv[2])]
if list(inp["shape"]) != shape:
    it.resize_tensor_input(inp["index"], shape, strict=True)
it.allocate_tensors()
x = np.load(sys.argv[3])
it.set_tensor(inp["index"], x)
it.invoke()
y = it.get_tensor(it.get_output_details()[0]["index"])
np.save(sys.argv[4], y)
print(json.dumps({"class": type(it).__module__ + "." + type(it).__qualname__}))
"""


def _run(args, timeout=180, **kw) -> subprocess.CompletedProcess:
    return run_python(*args, timeout=timeout, **kw)


def _code(code: str, timeout=180) -> subprocess.CompletedProcess:
    return run_child(code, timeout=timeout)


def _litert(model_path, x, shape=None) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(model_path), num_threads=1)
    d = it.get_input_details()[0]
    if shape is not None and list(d["shape"]) != list(shape):
        it.resize_tensor_input(d["index"], shape, strict=True)
    it.allocate_tensors()
    it.set_tensor(d["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    path = tmp_path_factory.mktemp("client") / "client.py"
    path.write_text(CLIENT)
    return path


def test_unmodified_tflite_runtime_client_matches_ai_edge_litert(client, tmp_path):
    # openWakeWord's embedding model, which ai-edge-litert and TFLite 2.17.1 /
    # 2.23 compute bit for bit alike with XNNPACK (the melspectrogram model
    # differs in the last bit on 2.17.1).
    model = package_file("pyopen_wakeword", "models", "embedding_model.tflite")
    x = np.random.default_rng(3).random((2, 76, 32, 1), dtype=np.float32) * 4
    np.save(tmp_path / "x.npy", x)
    p = _run(
        ["-m", "opaque_ops.compat", client, model, json.dumps([2, 76, 32, 1]), tmp_path / "x.npy", tmp_path / "y.npy"]
    )
    assert p.returncode == 0, crashed(p)
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {"class": "opaque_ops.compat.Interpreter"}
    ours = np.load(tmp_path / "y.npy")
    ref = _litert(model, x, [2, 76, 32, 1])
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    assert np.array_equal(ours, ref)


def test_without_compat_the_client_does_not_find_tflite_runtime(client, tmp_path):
    # The control: the same client, started without the hook, has no runtime
    # (tflite_runtime is not installed), so the test above really used the hook.
    if _code("import importlib.util, sys; sys.exit(importlib.util.find_spec('tflite_runtime') is not None)").returncode:
        pytest.fail("tflite_runtime is installed in the test environment; this control needs it absent")
    p = _run([client, "m", "[1]", "x", "y"])
    assert p.returncode != 0 and "No module named 'tflite_runtime'" in p.stderr


def test_custom_ops_reach_unmodified_code(client, tmp_path, atan_model_bytes):
    # The Atan model has a custom op no reference runtime can load; --ops
    # gives it to every interpreter the client creates.
    (tmp_path / "atan.tflite").write_bytes(atan_model_bytes)
    np.save(tmp_path / "x.npy", ATAN_INPUT)
    args = [client, tmp_path / "atan.tflite", json.dumps([5]), tmp_path / "x.npy", tmp_path / "y.npy"]
    p = _run(["-m", "opaque_ops.compat", "--ops", "kernels:atan", *args])
    assert p.returncode == 0, crashed(p)
    # The model is atan(x + 0.99999905) (examples/atan/make_model.py); the
    # bundled kernel is within 2 ulp of float64 atan (c/kernels/atan.c).
    expected = np.arctan((ATAN_INPUT + np.float32(0.99999905)).astype(np.float64)).astype(np.float32)
    np.testing.assert_array_max_ulp(np.load(tmp_path / "y.npy"), expected, maxulp=2)
    # Without the op library the unmodified client gets the missing-op error.
    p = _run(["-m", "opaque_ops.compat", *args])
    assert p.returncode != 0 and "UnresolvedOpsError" in p.stderr and "Atan" in p.stderr


def test_install_serves_both_names_and_find_spec():
    p = _code("""
        import importlib.util, json, opaque_ops.compat as compat
        compat.install()
        import tflite_runtime, tflite_runtime.interpreter as a, ai_edge_litert.interpreter as b
        from ai_edge_litert.interpreter import Interpreter, load_delegate, OpResolverType, SignatureRunner
        import opaque_ops
        spec = importlib.util.find_spec("ai_edge_litert.interpreter")
        print(json.dumps({
            "same": a.Interpreter is b.Interpreter is Interpreter,
            "subclass": issubclass(Interpreter, opaque_ops.Interpreter),
            "load_delegate": load_delegate is opaque_ops.load_delegate,
            "resolver": OpResolverType is opaque_ops.OpResolverType,
            "origin": spec.origin,
            "version": tflite_runtime.__version__ == opaque_ops.runtime_info().version,
            "installed": compat.installed(),
        }))
        compat.uninstall()
        import sys
        try:
            import tflite_runtime.interpreter
            print("still importable")
        except ImportError:
            print(json.dumps({"after_uninstall": "ImportError", "installed": compat.installed()}))
    """)
    assert p.returncode == 0, crashed(p)
    first, second = p.stdout.strip().splitlines()[-2:]
    assert json.loads(first) == {
        "same": True,
        "subclass": True,
        "load_delegate": True,
        "resolver": True,
        "origin": "opaque_ops.compat",
        "version": True,
        "installed": True,
    }
    assert json.loads(second) == {"after_uninstall": "ImportError", "installed": False}


def test_both_names_imported_first_on_two_threads_at_once_serve_one_class():
    # Each served module builds its classes when first imported; the two
    # names' modules are two imports, which Python's lock does not order, and
    # functools.cache let both threads build (and keep) a class of their own:
    # then isinstance(it, ai_edge_litert.interpreter.Interpreter) was False for
    # an interpreter of tflite_runtime's.  A trace function sleeps at each
    # line of the builders so the threads are inside them together; the code
    # runs unchanged.
    p = _code("""
        import importlib, json, threading, time
        import opaque_ops.compat as compat
        from opaque_ops.interpreter import core, signature_runner  # (only the builders are left to race)
        compat.install()

        def body(f):
            while hasattr(f, "__wrapped__"):  # (behind functools.cache, or a wrapper)
                f = f.__wrapped__
            return f.__code__

        builders = {body(compat._interpreter_class), body(compat._with_custom_ops_class)}

        def slow_lines(frame, event, arg):
            time.sleep(0.002)
            return slow_lines

        def tracer(frame, event, arg):
            return slow_lines if event == "call" and frame.f_code in builders else None

        names = ["tflite_runtime.interpreter", "ai_edge_litert.interpreter"]
        barrier, got = threading.Barrier(2), {}

        def work(name):
            barrier.wait()
            got[name] = importlib.import_module(name)

        threading.settrace(tracer)
        threads = [threading.Thread(target=work, args=(n,)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        threading.settrace(None)
        a, b = (got[n] for n in names)
        print(json.dumps({
            "Interpreter": a.Interpreter is b.Interpreter,
            "InterpreterWithCustomOps": a.InterpreterWithCustomOps is b.InterpreterWithCustomOps,
        }))
    """)
    assert p.returncode == 0, crashed(p)
    assert json.loads(p.stdout.splitlines()[-1]) == {"Interpreter": True, "InterpreterWithCustomOps": True}


def test_install_after_the_real_runtime_was_imported_is_refused():
    p = _code("""
        import ai_edge_litert.interpreter
        import opaque_ops, opaque_ops.compat as compat
        try:
            compat.install()
        except opaque_ops.OpaqueOpsError as e:
            print("refused:", e)
        print("installed:", compat.installed())
    """)
    assert p.returncode == 0, crashed(p)
    assert "refused: opaque_ops.compat.install() came too late: ai_edge_litert, ai_edge_litert.interpreter" in p.stdout
    assert "python -m opaque_ops.compat" in p.stdout and "installed: False" in p.stdout


def test_install_defaults_reach_every_interpreter_and_arguments_win(atan_model_bytes, tmp_path):
    (tmp_path / "atan.tflite").write_bytes(atan_model_bytes)
    p = _code(f"""
        import opaque_ops as oo, opaque_ops.compat as compat
        compat.install(custom_ops=[oo.kernels.atan()], use_xnnpack=False)
        from tflite_runtime.interpreter import Interpreter
        a = Interpreter(model_path={str(tmp_path / "atan.tflite")!r})
        a.allocate_tensors()
        b = Interpreter(model_path={str(tmp_path / "atan.tflite")!r}, use_xnnpack=True)
        print(a.xnnpack, b.xnnpack)
        compat.install(use_xnnpack=False)   # again: replaces the defaults (no custom ops now)
        from tflite_runtime.interpreter import Interpreter
        c = Interpreter(model_path={str(tmp_path / "atan.tflite")!r})
        try:
            c.allocate_tensors()
        except oo.UnresolvedOpsError as e:
            print("missing", e.missing)
    """)
    assert p.returncode == 0, crashed(p)
    assert p.stdout.split("\n")[:2] == ["False True", "missing [('Atan', 1)]"]


def test_tensorflow_stub_only_on_request():
    p = _code("""
        import opaque_ops.compat as compat
        compat.install()
        try:
            import tensorflow
            print("tensorflow importable")
        except ImportError:
            print("no tensorflow")
        compat.install(tensorflow=True)
        import tensorflow as tf
        import opaque_ops
        print(issubclass(tf.lite.Interpreter, opaque_ops.Interpreter),
              tf.lite.experimental.load_delegate is opaque_ops.load_delegate)
        try:
            tf.keras
        except AttributeError as e:
            print("AttributeError:", e)
    """)
    assert p.returncode == 0, crashed(p)
    lines = p.stdout.strip().splitlines()
    assert lines[0] == "no tensorflow"
    assert lines[1] == "True True"
    assert lines[2].startswith("AttributeError: tensorflow.keras is not available: opaque_ops.compat")


def test_interpreter_with_custom_ops_and_litert_only_flags():
    model = package_file("pyopen_wakeword", "models", "hey_jarvis.tflite")
    p = _code(f"""
        import warnings, opaque_ops, opaque_ops.compat as compat
        compat.install()
        from tflite_runtime.interpreter import InterpreterWithCustomOps, Interpreter
        try:
            InterpreterWithCustomOps(custom_op_registerers=["TF_AtanOpRegistrar"], model_path={str(model)!r})
        except opaque_ops.UnsupportedError as e:
            print("unsupported:", "C++" in str(e), "opaque_ops.compat" in str(e))
        it = InterpreterWithCustomOps(model_path={str(model)!r})
        it.allocate_tensors()
        print("plain:", type(it).__name__)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            Interpreter(model_path={str(model)!r}, experimental_disable_delegate_node_fusion=False)
            print("false flags warn:", len(w))
            Interpreter(model_path={str(model)!r}, experimental_default_delegate_latest_features=True)
            print("true flag warns:", [str(x.message) for x in w])
    """)
    assert p.returncode == 0, crashed(p)
    out = p.stdout
    assert "unsupported: True True" in out and "plain: InterpreterWithCustomOps" in out
    assert "false flags warn: 0" in out
    assert "experimental_default_delegate_latest_features=True has no effect" in out


def test_runner_passes_argv_exit_codes_and_modules(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(
        textwrap.dedent("""
        import sys, tflite_runtime.interpreter as t, helper
        print(sys.argv, helper.NAME, t.Interpreter.__module__)
        sys.exit(int(sys.argv[1]))
    """)
    )
    (tmp_path / "helper.py").write_text("NAME = 'helper beside the script'\n")
    p = _run(["-m", "opaque_ops.compat", script, "3", "--flag"])
    assert p.returncode == 3, crashed(p)
    assert p.stdout.strip() == f"[{str(script)!r}, '3', '--flag'] helper beside the script opaque_ops.compat"
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(
        "import sys, ai_edge_litert.interpreter as t\nprint(sys.argv[1:], t.Interpreter.__module__)\n"
    )
    p = run_python("-m", "opaque_ops.compat", "-m", "mypkg", "a", pythonpath=[ROOT, tmp_path], cwd=None, timeout=120)
    assert p.returncode == 0, crashed(p)
    assert p.stdout.strip() == "['a'] opaque_ops.compat"


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "name a script or -m MODULE"),
        (["--bogus", "x.py"], "unknown option --bogus"),
        (["--ops"], "--ops needs a value"),
        (["missing_script.py"], "no such script: missing_script.py"),
    ],
)
def test_runner_usage_errors(args, message):
    p = _run(["-m", "opaque_ops.compat", *args])
    assert p.returncode == 2 and message in p.stderr, crashed(p)


def test_runner_reports_a_bad_op_library_without_a_traceback(tmp_path):
    p = _run(["-m", "opaque_ops.compat", "--ops", tmp_path / "nope.so", "x.py"])
    assert p.returncode == 1, crashed(p)
    assert p.stderr.startswith("python -m opaque_ops.compat: error:") and "nope.so" in p.stderr
    assert "Traceback" not in p.stderr


def test_compat_interpreters_take_the_fast_calls_with_the_same_results_and_errors():
    # Unmodified tflite_runtime code (the wake-word clients) creates the
    # compat class: it took the Python methods, about five times the
    # per-call cost of opaque_ops.Interpreter (bench/README.md).
    model = package_file("pyopen_wakeword", "models", "hey_jarvis.tflite")
    p = _code(f"""
        import numpy as np, opaque_ops as oo, opaque_ops.compat as compat
        compat.install()
        import tflite_runtime.interpreter as tfl

        class Counting(tfl.Interpreter):  # a client's own subclass: its override must run
            calls = 0
            def invoke(self):
                Counting.calls += 1
                return super().invoke()

        x = np.random.default_rng(0).standard_normal((1, 16, 96)).astype(np.float32)
        def run(cls):
            it = cls(model_path={str(model)!r})
            it.allocate_tensors()
            fast = it._fast is not None
            i, o = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
            y = []
            for k in range(3):
                it.set_tensor(i, x * (k + 1))
                it.invoke()
                y.append(it.get_tensor(o).copy())
            errors = []
            for bad in (x.astype(np.float64), x[:, :8], "text"):
                try:
                    it.set_tensor(i, bad)
                except Exception as e:
                    errors.append(f"{{type(e).__name__}}: {{e}}")
            it.close()
            for call in (lambda: it.set_tensor(i, x), it.invoke, lambda: it.get_tensor(o)):
                try:
                    call()
                except Exception as e:
                    errors.append(f"{{type(e).__name__}}: {{e}}")
            return fast, np.stack(y), errors

        fast0, y0, e0 = run(oo.Interpreter)
        assert fast0 and len(e0) == 6, e0
        for cls in (tfl.Interpreter, tfl.InterpreterWithCustomOps, Counting):
            fast, y, e = run(cls)
            print(cls.__name__, "fast:", fast, "same bits:", y.tobytes() == y0.tobytes(), "same errors:", e == e0)
        print("counted:", Counting.calls)
    """)
    assert p.returncode == 0, crashed(p)
    out = p.stdout
    assert "Interpreter fast: True same bits: True same errors: True" in out, out
    assert "InterpreterWithCustomOps fast: True same bits: True same errors: True" in out, out
    # A subclass of the compat class is not admitted: its own invoke runs (three times, and once more after close).
    assert "Counting fast: False same bits: True same errors: True" in out and "counted: 4" in out, out


def test_compat_interpreters_run_isolated_when_asked_with_installs_defaults(atan_model_bytes, tmp_path):
    # They ran in this process, without a word, under isolate=True and isolate_by_default.
    model = tmp_path / "atan.tflite"
    model.write_bytes(atan_model_bytes)
    p = _code(f"""
        import numpy as np, opaque_ops as oo, opaque_ops.compat as compat
        compat.install(custom_ops=[oo.kernels.atan()])  # the defaults must reach the isolated worker
        import tflite_runtime.interpreter as tfl
        x = np.array({ATAN_INPUT.tolist()!r}, np.float32)
        def run(it):
            it.allocate_tensors()
            it.set_tensor(it.get_input_details()[0]["index"], x)
            it.invoke()
            y = it.get_tensor(it.get_output_details()[0]["index"]).copy()
            it.close()
            return y
        y0 = run(tfl.Interpreter(model_path={str(model)!r}))
        made = [tfl.Interpreter(model_path={str(model)!r}, isolate=True),
                tfl.InterpreterWithCustomOps(model_path={str(model)!r}, isolate=True)]
        with oo.isolate.isolate_by_default():
            made.append(tfl.Interpreter(model_path={str(model)!r}))
        for it in made:
            print(type(it).__name__, isinstance(it, oo.isolate.IsolatedInterpreter), isinstance(it, tfl.Interpreter),
                  run(it).tobytes() == y0.tobytes())
        class Counting(tfl.Interpreter):  # a client's subclass: its methods cannot run in a worker
            def invoke(self):
                return super().invoke()
        try:
            Counting(model_path={str(model)!r}, isolate=True)
        except oo.UnsupportedError as e:
            print("subclass refused:", "Counting is a subclass" in str(e))
        try:
            tfl.InterpreterWithCustomOps(custom_op_registerers=["Reg"], model_path={str(model)!r}, isolate=True)
        except oo.UnsupportedError as e:
            print("registerers refused:", "C++" in str(e))
    """)
    assert p.returncode == 0, crashed(p)
    assert p.stdout.count("Interpreter True True True") == 2, p.stdout
    assert "InterpreterWithCustomOps True True True" in p.stdout and "subclass refused: True" in p.stdout, p.stdout
    assert "registerers refused: True" in p.stdout


def test_allow_fast_calls_admits_only_subclasses_that_change_init():
    from opaque_ops.interpreter.core import Interpreter, allow_fast_calls

    class OnlyInit(Interpreter):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)

    assert allow_fast_calls(OnlyInit) is OnlyInit

    class Overrides(Interpreter):
        def get_tensor(self, i, subgraph_index=0):
            return super().get_tensor(i, subgraph_index)

    class Attribute(Interpreter):
        limit = 3

    class Grandchild(Overrides):
        pass

    with pytest.raises(TypeError, match=r"defines \['get_tensor'\]"):
        allow_fast_calls(Overrides)
    with pytest.raises(TypeError, match=r"defines \['limit'\]"):
        allow_fast_calls(Attribute)
    with pytest.raises(TypeError, match="direct subclass"):
        allow_fast_calls(Grandchild)
    with pytest.raises(TypeError, match="direct subclass"):
        allow_fast_calls(dict)


COMPAT_FORK_SETUP = """
import importlib
from opaque_ops import compat
from opaque_ops.interpreter import core, signature_runner
from opaque_ops.ops import delegates

path = sys.argv[1]
"""


def test_a_fork_while_another_thread_builds_the_served_class_leaves_the_child_able_to_import_it(guide_atan):
    # The thread imports tflite_runtime.interpreter and stops where its
    # Interpreter class is built, holding _classes_lock: the child's copy
    # stayed held, and its import of ai_edge_litert.interpreter (which needs
    # the same class) waited forever.
    assert_child_returns(
        "opaque_ops.compat",
        COMPAT_FORK_SETUP + "compat.install()\n",
        code="compat._interpreter_class.__code__",
        lock="compat._classes_lock",
        worker="importlib.import_module('tflite_runtime.interpreter')",
        child="importlib.import_module('ai_edge_litert.interpreter').Interpreter.__module__",
        args=[guide_atan.path],
    )


def test_a_fork_while_another_thread_installs_leaves_the_child_able_to_install(guide_atan):
    # The thread stops inside install(), holding _lock, before it loads the op library.
    assert_child_returns(
        (None, True, {"use_xnnpack": False}),
        COMPAT_FORK_SETUP,
        code="compat.install.__code__",
        lock="compat._lock",
        worker="compat.install(custom_ops=[path])",
        child="(compat.install(use_xnnpack=False), compat.installed(), compat._settings)",
        args=[guide_atan.path],
    )
