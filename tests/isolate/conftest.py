"""Fixtures of the isolation tests: the misbehaving kernels, and the leak check around a test."""

from __future__ import annotations

import gc
import time

import pytest

import opaque_ops as oo
from tests.helpers.misbehaving_kernels import KERNELS
from tests.helpers.worker_resources import resources


@pytest.fixture(scope="session")
def bad_ops():
    return oo.compile_ops(KERNELS)


@pytest.fixture
def no_leaks():
    """Fail the test if it leaves a worker process, a /dev/shm entry, a shared mapping or a descriptor behind."""
    gc.collect()
    before = resources()
    yield before
    deadline = time.monotonic() + 15
    while True:
        gc.collect()
        after = resources()
        leaked = {
            k: (before[k], after[k])
            for k in after
            if (after[k] - before[k] if k == "children" else after[k] > before[k])
        }
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not leaked, f"leaked (before, after): {leaked}"
