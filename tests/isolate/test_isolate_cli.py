"""opaque-ops run --isolate and opaque-ops inspect --check."""

from __future__ import annotations

import numpy as np
import pytest

from opaque_ops.cli.commands import CHECK_OK, CHECK_REFUSED, CHECK_UNSAFE, main
from tests.helpers.misbehaving_kernels import one_op

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.fixture
def bad_lib_path(bad_ops):
    return str(bad_ops.path)


def _model(tmp_path, op):
    p = tmp_path / f"{op}.tflite"
    p.write_bytes(one_op(op))
    return str(p)


def test_check_safe_model(tmp_path, bad_lib_path, capsys):
    assert main(["inspect", _model(tmp_path, "Twice"), "--ops", bad_lib_path, "--check"]) == CHECK_OK
    out = capsys.readouterr().out
    assert "Twice v1" in out and "check: SAFE" in out


def test_check_crashing_model(tmp_path, bad_lib_path, capsys):
    assert main(["inspect", _model(tmp_path, "CrashNull"), "--ops", bad_lib_path, "--check"]) == CHECK_UNSAFE
    out = capsys.readouterr().out
    assert "check: NOT SAFE" in out and "CRASHED at invoke" in out and "SIGSEGV" in out
    assert "CrashNullInvoke" in out


def test_check_hanging_model(tmp_path, bad_lib_path, capsys):
    rc = main(["inspect", _model(tmp_path, "Spin"), "--ops", bad_lib_path, "--check", "--timeout", "0.5"])
    assert rc == CHECK_UNSAFE
    out = capsys.readouterr().out
    assert "HUNG at invoke" in out and "SpinInvoke" in out


def test_check_refused_model(tmp_path, capsys):
    # No library provides the op: a clean refusal, safe to load.
    assert main(["inspect", _model(tmp_path, "Twice"), "--check"]) == CHECK_REFUSED
    out = capsys.readouterr().out
    assert "REFUSED CLEANLY at allocate" in out and "UnresolvedOpsError" in out


def test_run_isolate(tmp_path, bad_lib_path, capsys):
    x = tmp_path / "x.npy"
    np.save(x, np.arange(4, dtype=np.float32))
    out_dir = tmp_path / "out"
    assert (
        main(
            [
                "run",
                _model(tmp_path, "Twice"),
                "--ops",
                bad_lib_path,
                "--input",
                f"0={x}",
                "--isolate",
                "--output-dir",
                str(out_dir),
                "--timeout",
                "60",
            ]
        )
        == 0
    )
    (f,) = out_dir.glob("*.npy")
    np.testing.assert_array_equal(np.load(f), 2 * np.arange(4, dtype=np.float32) + 1)


def test_run_isolate_crash_is_reported(tmp_path, bad_lib_path, capsys):
    x = tmp_path / "x.npy"
    np.save(x, np.arange(4, dtype=np.float32))
    assert (
        main(["run", _model(tmp_path, "CrashAbort"), "--ops", bad_lib_path, "--input", f"0={x}", "--isolate"])
        == CHECK_UNSAFE
    )
    err = capsys.readouterr().err
    assert "SIGABRT" in err and "CrashAbortInvoke" in err


def test_limits_need_isolate(tmp_path, bad_lib_path, capsys):
    assert main(["run", _model(tmp_path, "Twice"), "--ops", bad_lib_path, "--timeout", "1"]) == 1
    assert "add --isolate" in capsys.readouterr().err
