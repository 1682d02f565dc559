"""Shared fixtures: real runtime, real compiler, models built without TensorFlow."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "atan"))

# Under CI=true every test must run: a skip (a missing compiler, qemu, a
# package that failed to install...) fails the run instead of letting it go
# green with part of the suite unexercised.  xfail is not a skip.
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _skip_reason(longrepr) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, where every test must run: {_skip_reason(report.longrepr)}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped:
        report.outcome = "failed"
        report.longrepr = (f"{collector.nodeid} skipped under CI=true, where every test must run: "
                           f"{_skip_reason(report.longrepr)}")


@pytest.fixture(scope="session", autouse=True)
def _compile_cache(tmp_path_factory):
    """One compile cache for the whole run, away from the user's own cache."""
    if "OPAQUE_OPS_CACHE_DIR" not in os.environ:
        os.environ["OPAQUE_OPS_CACHE_DIR"] = str(tmp_path_factory.mktemp("oo_cache"))
    yield


@pytest.fixture(scope="session")
def atan_model_bytes() -> bytes:
    import make_model

    return make_model.build()


@pytest.fixture(scope="session")
def atan_source() -> Path:
    return ROOT / "examples" / "atan" / "atan.c"


@pytest.fixture(scope="session")
def guide_atan(atan_source):
    import opaque_ops as oo

    return oo.compile_ops(atan_source, ops={"Atan": "AtanOpRegistrationExternal"})


def package_file(package: str, *parts: str) -> Path:
    """A file inside an installed distribution, found without importing the package.

    The packages asked for are dependencies of the test suite, so a missing
    one fails the test (a skip would hide that the suite did not run).
    """
    if package == "mediapipe":  # its 0.10.14 models, also where that release has no wheel (3.13)
        from helpers.mediapipe_models import mediapipe_dir

        return mediapipe_dir().joinpath(*parts)
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(f"{package} is not installed; it is a test dependency: pip install -e '.[test]'")
    return Path(list(spec.submodule_search_locations)[0]).joinpath(*parts)


ATAN_INPUT = np.array([-8, 0.5, 2, 2.2, 201], np.float32)
