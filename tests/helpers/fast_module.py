"""The fast calls module for tests that compare it with the Python path it stands in for."""

from __future__ import annotations

import os

import pytest

from opaque_ops.interpreter import fast_calls

IN_CI = os.environ.get("CI", "").lower() == "true"


def required_fast_calls() -> str:
    """Where the module in use came from; skips when it is turned off, fails under CI when it is missing.

    ``OPAQUE_OPS_FASTCALLS=0`` is CI's second pass, where the Python path is
    the one under test; anywhere else under CI the module must be there
    (a build that silently fell back would hide a missing feature).
    """
    used, where = fast_calls.status()
    if used:
        return where
    if os.environ.get(fast_calls.ENV, "").strip().lower() in ("0", "off", "no", "false"):
        pytest.skip(f"the fast calls are turned off for this run: {where}")
    if IN_CI:
        pytest.fail(f"the fast calls must be in use under CI: {where}")
    pytest.skip(f"the fast calls are not in use here: {where}")
