"""The fast calls module for tests that compare it with the Python path it stands in for."""

from __future__ import annotations

import pytest

from opaque_ops.interpreter import fast_calls


def required_fast_calls() -> str:
    """Where the module in use came from; skips when it is not in use.

    Under CI a skip fails (tests/conftest.py): there, a build that silently
    fell back to the Python methods cannot hide behind it.
    """
    used, where = fast_calls.status()
    if not used:
        pytest.skip(f"the fast calls are not in use here: {where}")
    return where
