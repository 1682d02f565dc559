"""pytest plugin: run a test's opaque_ops work in isolated workers, so a crashing kernel fails one test.

Installed with opaque_ops (entry point ``pytest11``), it adds:

- the marker ``@pytest.mark.isolate``: inside the test (its fixtures
  included), ``Interpreter(...)`` and ``testing.run_op(...)`` called without
  ``isolate=`` run in a worker process.  Mark a whole file with
  ``pytestmark = pytest.mark.isolate``.  A segfault in a kernel then
  becomes a :class:`opaque_ops.RuntimeCrashError` -- one failed test whose
  report carries the C backtrace -- and the session goes on;
- the option ``--oo-isolate``: the same for every test of the session;
- the fixture ``oo_worker``: a :class:`opaque_ops.isolate.Worker` for the
  test, to pass as ``isolate=oo_worker`` (one worker process reused by the
  test's interpreters).

Without the plugin (``-p no:opaque_ops``), add this to a ``conftest.py``
for the same effect::

    @pytest.fixture(autouse=True)
    def _isolated():
        with opaque_ops.isolate.isolate_by_default():
            yield
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("opaque_ops")
    group.addoption(
        "--oo-isolate",
        action="store_true",
        default=False,
        help="run every test's opaque_ops interpreters and run_op calls in isolated workers",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "isolate: run this test's opaque_ops Interpreter(...) and run_op(...) calls in a worker "
        "process, so a crashing kernel fails only this test",
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    on = item.config.getoption("--oo-isolate") or item.get_closest_marker("isolate") is not None
    if not on:
        yield
        return
    from . import set_isolated_default

    old = set_isolated_default(True)
    try:
        yield
    finally:
        set_isolated_default(old)


@pytest.fixture
def oo_worker():
    """A worker process for this test's isolated interpreters (``isolate=oo_worker``)."""
    from .workers import Worker

    worker = Worker()
    yield worker
    worker.close()
