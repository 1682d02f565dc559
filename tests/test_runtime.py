"""Finding and loading libtensorflowlite_c."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import opaque_ops as oo


def _py(code: str, **env):
    import os

    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e)


def test_runtime_info_reports_version_and_path():
    info = oo.runtime_info()
    assert info.version.startswith("2.")
    assert info.path.endswith("libtensorflowlite_c.so")
    assert info.api in ("TfLiteOperator", "TfLiteRegistrationExternal")


def test_environment_variable_wins_and_a_bad_one_is_reported(tmp_path):
    bad = tmp_path / "libtensorflowlite_c.so"
    bad.write_bytes(b"not a library")
    r = _py(
        """
        import opaque_ops as oo
        print(oo.runtime_info().path)
        """,
        OPAQUE_OPS_TFLITE_LIB=str(bad),
    )
    # A broken file named by the variable is skipped with a reason; the wheel is used next.
    assert r.returncode == 0, r.stderr
    assert "pymicro_wakeword" in r.stdout


def test_explicit_library_argument(tmp_path):
    import shutil

    src = oo.runtime_info().path
    copy = tmp_path / "copy" / "libtensorflowlite_c.so"
    copy.parent.mkdir()
    shutil.copy(src, copy)
    r = _py(
        f"""
        import opaque_ops as oo
        print(oo.load_runtime({str(copy)!r}).path)
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(copy)


def test_nothing_found_lists_every_place_tried(tmp_path):
    # Hide the wheel by running from a directory where a fake, empty
    # pymicro_wakeword package shadows the real one.
    fake = tmp_path / "pymicro_wakeword"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    r = _py(
        """
        import opaque_ops as oo
        try:
            oo.runtime_info()
        except oo.RuntimeNotFoundError as e:
            print("ERR", e)
        """,
        PYTHONPATH=str(tmp_path),
        OPAQUE_OPS_TFLITE_LIB=str(tmp_path / "missing.so"),
        LD_LIBRARY_PATH="",
    )
    out = r.stdout
    assert "ERR no usable libtensorflowlite_c" in out
    assert "$OPAQUE_OPS_TFLITE_LIB" in out and "missing.so does not exist" in out
    assert "pymicro-wakeword wheel" in out
    assert "find_library" in out
    assert "pip install pymicro-wakeword" in out


def test_import_is_cheap():
    r = _py(
        """
        import sys, time
        t = time.perf_counter()
        import opaque_ops
        print("numpy" in sys.modules, "cffi" in sys.modules)
        """
    )
    assert r.stdout.split() == ["False", "False"], r.stdout + r.stderr
