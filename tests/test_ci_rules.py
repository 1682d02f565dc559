"""The suite's own rules: under CI=true a skipped test fails the run (tests/conftest.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.helpers.child_process import run_python

PROBE = """
import pytest

def test_needs_a_tool():
    pytest.skip("some-tool is not installed")

@pytest.mark.skipif(True, reason="needs another tool")
def test_marked():
    pass

@pytest.mark.xfail(reason="a known bug", strict=True)
def test_known_bug():
    assert False

def test_runs():
    pass
"""


def _pytest(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_probe.py").write_text(PROBE)
    return run_python(
        "-m", "pytest", "-q", "-p", "no:cacheprovider", tmp_path, env={"CI": ci}, cwd=tmp_path, timeout=120
    )


def test_a_skip_fails_the_run_under_ci(tmp_path):
    r = _pytest(tmp_path, "true")
    assert r.returncode == 1, r.stdout
    assert "skipped under CI=true, where every test must run: Skipped: some-tool is not installed" in r.stdout
    assert "needs another tool" in r.stdout
    assert "1 passed" in r.stdout and "1 xfailed" in r.stdout  # xfail is not a skip


def test_outside_ci_a_skip_is_a_skip(tmp_path):
    r = _pytest(tmp_path, None)
    assert r.returncode == 0, r.stdout
    assert "1 passed, 2 skipped, 1 xfailed" in r.stdout
