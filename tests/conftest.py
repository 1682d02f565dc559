"""Shared fixtures: real runtime, real compiler, models built without TensorFlow.

Helpers live in the ``tests.helpers`` package (``from tests.helpers.atan import
ATAN_INPUT``); this file holds only fixtures and hooks, and is never imported by name.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.atan import ATAN_SOURCE, make_model

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
        report.longrepr = (
            f"{collector.nodeid} skipped under CI=true, where every test must run: {_skip_reason(report.longrepr)}"
        )


@pytest.fixture(scope="session", autouse=True)
def _compile_cache(tmp_path_factory):
    """One compile cache for the whole run, away from the user's own cache."""
    if "OPAQUE_OPS_CACHE_DIR" not in os.environ:
        os.environ["OPAQUE_OPS_CACHE_DIR"] = str(tmp_path_factory.mktemp("oo_cache"))
    # The fast calls module (opaque_ops.interpreter.fast_calls) is built once,
    # into that cache, and named to every child process: one with a cache of
    # its own (the lifecycle cases) would otherwise build it again.
    if "OPAQUE_OPS_FASTCALLS" not in os.environ:
        from opaque_ops.interpreter import fast_calls

        used, where = fast_calls.status()
        if used:
            os.environ["OPAQUE_OPS_FASTCALLS"] = where
    yield


@pytest.fixture(scope="session")
def atan_model_bytes() -> bytes:
    return make_model.build()


@pytest.fixture(scope="session")
def atan_source() -> Path:
    return ATAN_SOURCE


@pytest.fixture(scope="session")
def guide_atan(atan_source):
    import opaque_ops as oo

    return oo.compile_ops(atan_source, ops={"Atan": "AtanOpRegistrationExternal"})
