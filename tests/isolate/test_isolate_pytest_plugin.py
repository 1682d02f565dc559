"""The pytest plugin: a segfaulting kernel in a marked test is one failed test, and the session goes on."""

from __future__ import annotations

import pytest

from tests.helpers.child_process import run_python
from tests.helpers.locations import ROOT
from tests.helpers.misbehaving_kernels import KERNELS

pytestmark = pytest.mark.usefixtures("no_leaks")

TEST_FILE = """
import numpy as np
import pytest
import opaque_ops as oo
from opaque_ops.testing import run_op

KERNELS = {kernels!r}
{mark}

def test_crashes():
    run_op(oo.compile_ops(KERNELS), "CrashNull", inputs=[np.zeros(4, np.float32)])

def test_after_the_crash():
    (y,) = run_op(oo.compile_ops(KERNELS), "Twice", inputs=[np.ones(4, np.float32)])
    assert y.tolist() == [3.0] * 4

def test_interpreter_too(oo_worker):
    from opaque_ops.testing import build_op_model
    it = oo.Interpreter(model_content=build_op_model("Twice", [np.ones(2, np.float32)], [([2], np.float32)]),
                        custom_ops=[oo.compile_ops(KERNELS)], isolate=oo_worker)
    assert oo_worker.pid is not None
    it.close()
"""


def _run(tmp_path, mark: str, *args):
    f = tmp_path / "test_kernels.py"
    f.write_text(TEST_FILE.format(kernels=KERNELS, mark=mark))
    return run_python(
        "-m", "pytest", "-q", "-p", "no:cacheprovider", f, *args, cwd=tmp_path, timeout=600, env=_env(tmp_path)
    )


def _env(tmp_path):
    import os

    return {"OPAQUE_OPS_CACHE_DIR": os.environ.get("OPAQUE_OPS_CACHE_DIR", str(tmp_path / "cache"))}


def test_marker_turns_a_segfault_into_one_failed_test(tmp_path):
    out = _run(tmp_path, "pytestmark = pytest.mark.isolate")
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "1 failed, 2 passed" in text, text
    assert "RuntimeCrashError" in text and "SIGSEGV" in text and "CrashNullInvoke" in text


def test_command_line_option_does_the_same(tmp_path):
    out = _run(tmp_path, "", "--oo-isolate")
    assert "1 failed, 2 passed" in out.stdout, out.stdout + out.stderr


def test_without_isolation_the_session_dies(tmp_path):
    """What the plugin prevents: the same file, unmarked, kills pytest itself."""
    import signal

    out = _run(tmp_path, "")
    assert out.returncode == -signal.SIGSEGV, out.stdout + out.stderr


def test_plugin_is_registered():
    out = run_python("-m", "pytest", "--markers", cwd=ROOT, timeout=300)
    assert "@pytest.mark.isolate" in out.stdout
