"""opaque_ops.load_delegate: tflite_runtime's delegate plugins, with a plugin of our own.

tests/helpers/add_delegate_plugin.c is compiled here.  It claims every float32 ADD
through the opaque delegate API and computes ``a + b + extra`` (``extra`` is a
plugin option), and counts its runs, so each test can tell that the delegate,
not the builtin ADD, produced a result.  ai-edge-litert loads the same plugin
with its own ``load_delegate`` as the reference (in a child process: it mixes
two runtimes in one process).
"""

from __future__ import annotations

import gc
import json
import shutil
import subprocess

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.model import ModelBuilder
from tests.helpers.child_process import crashed, run_child
from tests.helpers.delegate_plugin import build_add_delegate_plugin

C = np.array([1, 2, 3, 4], np.float32)
X = np.array([0.5, -1, 2, 10], np.float32)


@pytest.fixture(scope="module")
def plugin(tmp_path_factory) -> str:
    return build_add_delegate_plugin(tmp_path_factory.mktemp("delegate"))


@pytest.fixture(scope="module")
def counters(plugin):
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(
        "int oo_test_delegate_invocations(void); int oo_test_delegate_live(void);int oo_test_delegate_claimed(void);"
    )
    oo.load_runtime()  # the plugin's TfLite* symbols come from the runtime
    return ffi.dlopen(plugin)  # the same handle opaque_ops gets for this path


def add_mul_model() -> bytes:
    """z = (x + c) * c: one ADD (the delegate's) and one MUL (not)."""
    b = ModelBuilder()
    x = b.add_tensor("x", [4], np.float32)
    c = b.add_constant("c", C)
    y = b.add_tensor("y", [4], np.float32)
    z = b.add_tensor("z", [4], np.float32)
    b.add_op("ADD", [x, c], [y])
    b.add_op("MUL", [y, c], [z])
    b.set_inputs([x])
    b.set_outputs([z])
    return b.build()


def run(it):
    it.allocate_tensors()
    it.set_tensor(0, X)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


@pytest.mark.parametrize("xnnpack", [False, True])
def test_the_delegate_runs_the_nodes_it_claims(plugin, counters, xnnpack):
    d = oo.load_delegate(plugin, {"extra": 100})
    before, claimed = counters.oo_test_delegate_invocations(), counters.oo_test_delegate_claimed()
    it = oo.Interpreter(model_content=add_mul_model(), experimental_delegates=[d], use_xnnpack=xnnpack)
    out = run(it)
    # Only the delegate adds `extra`: (x + c + 100) * c, not (x + c) * c.
    np.testing.assert_array_equal(out, (X + C + np.float32(100)) * C)
    assert counters.oo_test_delegate_claimed() == claimed + 1
    it.invoke()
    assert counters.oo_test_delegate_invocations() == before + 2
    assert it.xnnpack == xnnpack  # XNNPACK took what the delegate left (the MUL)


def test_delegates_is_the_third_positional_argument(plugin):
    d = oo.load_delegate(plugin, {"extra": 1})
    it = oo.Interpreter(None, add_mul_model(), [d])
    np.testing.assert_array_equal(run(it), (X + C + 1) * C)


def test_same_results_and_errors_as_ai_edge_litert(plugin):
    # The plugin's opaque-API helpers (TfLiteOpaqueDelegateCreate, ...) must
    # come from a TFLite C library loaded in the process; ai-edge-litert
    # exports none, so the child loads the default 2.17.1 one whatever runtime
    # this run tests (it is the one known to share ai-edge-litert's structs).
    data = add_mul_model()
    code = f"""
        import json, numpy as np, opaque_ops as oo
        oo.load_runtime()
        from ai_edge_litert.interpreter import Interpreter, load_delegate
        from tests.ops.test_delegates import X
        res = {{}}
        for extra in (0, 100):
            d = load_delegate({plugin!r}, {{"extra": extra}})
            it = Interpreter(model_content={data!r}, experimental_delegates=[d])
            it.allocate_tensors(); it.set_tensor(0, X); it.invoke()
            res[str(extra)] = it.get_tensor(it.get_output_details()[0]["index"]).tolist()
        try:
            load_delegate({plugin!r}, {{"fail": 1}})
        except ValueError as e:
            res["error"] = str(e)
        print(json.dumps(res))
    """
    p = run_child(code, unset=["OPAQUE_OPS_TFLITE_LIB"])
    assert p.returncode == 0, crashed(p)
    ref = json.loads(p.stdout.strip().splitlines()[-1])
    for extra in (0, 100):
        d = oo.load_delegate(plugin, {"extra": extra})
        ours = run(oo.Interpreter(model_content=data, experimental_delegates=[d]))
        np.testing.assert_array_equal(ours, np.array(ref[str(extra)], np.float32))
    with pytest.raises(oo.DelegateError) as err:
        oo.load_delegate(plugin, {"fail": 1})
    assert isinstance(err.value, ValueError)
    assert str(err.value) == ref["error"]
    assert "asked to fail (option fail=1)" in str(err.value)


def test_load_errors_are_clear(tmp_path, plugin):
    with pytest.raises(oo.DelegateError, match="Failed to load delegate from .*nope.so"):
        oo.load_delegate(tmp_path / "nope.so")
    # A shared library that is not a delegate plugin.
    not_plugin = tmp_path / "empty.so"
    cc = shutil.which("cc") or shutil.which("gcc")
    (tmp_path / "empty.c").write_text("int unrelated(void) { return 1; }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(not_plugin), str(tmp_path / "empty.c")], check=True)
    with pytest.raises(oo.DelegateError, match="does not export tflite_plugin_create_delegate"):
        oo.load_delegate(not_plugin)
    with pytest.raises(TypeError, match="load_delegate"):
        oo.Interpreter(model_content=add_mul_model(), experimental_delegates=[object()])
    d = oo.load_delegate(plugin)
    with pytest.raises(oo.UnsupportedError, match="clustering"):
        oo.Interpreter(
            model_content=add_mul_model(), experimental_delegates=[d], experimental_disable_delegate_clustering=True
        )


def test_the_delegate_is_destroyed_after_its_last_user(plugin, counters):
    gc.collect()
    base = counters.oo_test_delegate_live()
    d = oo.load_delegate(plugin, {"extra": 2})
    it = oo.Interpreter(model_content=add_mul_model(), experimental_delegates=[d])
    view = it.tensor(3)
    assert counters.oo_test_delegate_live() == base + 1
    del d
    gc.collect()
    # The interpreter still uses it: alive, and it still runs.
    assert counters.oo_test_delegate_live() == base + 1
    np.testing.assert_array_equal(run(it), (X + C + 2) * C)
    it.close()
    gc.collect()
    assert counters.oo_test_delegate_live() == base + 1  # an accessor keeps the memory alive
    np.testing.assert_array_equal(view(), (X + C + 2) * C)
    del view, it
    gc.collect()
    assert counters.oo_test_delegate_live() == base
