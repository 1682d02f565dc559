"""Fixtures of the model tests (the verdict cache's tests and those that read its records)."""

from __future__ import annotations

import pytest

from opaque_ops.model import cache


@pytest.fixture
def verdicts(tmp_path, monkeypatch):
    """A private verdict directory for this test, and no model kept in memory before or after."""
    d = tmp_path / "verdicts"
    monkeypatch.setenv(cache.ENV_VERDICTS, str(d))
    cache.clear()
    yield d
    cache.clear()
