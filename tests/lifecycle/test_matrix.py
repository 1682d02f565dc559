"""The lifecycle attack matrix, short version: every (object, event) case of issue 17 once.

Each case is its own test; it runs in a fresh child process (see
tests/helpers/lifecycle_cases.py) and passes when every output was
bit-identical to the in-process reference run, or when the case ended in a
clean OpaqueOpsError.  A crash, a hang, a different number or another
exception class fails it.  The cases run three at a time in the background as
soon as the first one is asked for, so the whole matrix takes about as long as
half its cases.  ``python tools/lifecycle_matrix.py`` is the long version.

Cases that fail today for a defect another part of issue 17 fixes are marked
``xfail(strict=True)`` with the item's number: once the fix is merged the mark
turns into a failure and comes off.  Cases whose known defect shows only on
some runs (a race) are ``strict=False``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers import lifecycle_cases as lc

FORK = "issue 17 item 6: fork() with an isolated interpreter shares one worker between parent and child"
FORK_HANG = "issue 17 items 6/7: a forked child's isolated call waits forever (no worker watcher in the child)"
PICKLE_LOADED = "issue 17 items 3/4: a loaded library's file is not verified when it is unpickled"
TRUNCATED = "issue 17 item 3: a truncated shared library kills the process with SIGBUS inside dlopen"
REENTRANT = "issue 17 item 12: the set_tensor/get_tensor fast paths take the lock without recording the owner"
KEEPS = "issue 17 item 10: a python_op that keeps its output array writes into freed memory"
OOM = "issue 17 item 12: hitting memory_limit gives a bare MemoryError that does not name the cap"

# case id -> (reason, strict)
KNOWN: dict[str, tuple[str, bool]] = {
    "isolated-fork_before_use": (FORK_HANG, True),
    "isolated_pyop-fork_before_use": (FORK_HANG, True),
    "isolated-fork_after_use": (FORK, False),  # mixes on most runs, not all
    "isolated_pyop-fork_after_use": (FORK, True),
    "isolated-fork_with_threads": (FORK_HANG, True),
    "isolated_pyop-fork_with_threads": (FORK_HANG, True),
    "isolated-fork_then_new_worker_dies": (FORK_HANG, True),
    "isolated_pyop-fork_then_new_worker_dies": (FORK_HANG, True),
    "loaded-pickle_source_changed": (PICKLE_LOADED, True),
    "loaded-pickle_source_damaged": (TRUNCATED, True),
    "delegate-pickle_source_damaged": (TRUNCATED, True),
    "pyop-op_keeps_its_array": (KEEPS, True),
    "isolated_pyop-worker_oom": (OOM, True),
    **{
        f"{kind}-signal_handler_reenters": (REENTRANT, False)
        for kind in ("interp", "view", "pyop", "delegate", "compiled", "loaded", "bundled")
    },
}

CASES = lc.cases()


def _param(case: lc.MatrixCase):
    marks = []
    if case.id in KNOWN:
        reason, strict = KNOWN[case.id]
        marks.append(pytest.mark.xfail(strict=strict, reason=reason))
    return pytest.param(case, id=case.id, marks=marks)


@pytest.fixture(scope="module")
def matrix(request, tmp_path_factory):
    """Every selected case, started three at a time in the background; each test waits for its own.

    Three, on two cores: most of a case's time is spent waiting (a worker starting, a
    hang's deadline), not computing."""
    root = tmp_path_factory.mktemp("lifecycle")
    shared = lc.prepare_shared(root / "shared")
    selected = [
        item.callspec.params["case"]
        for item in request.session.items
        if item.module is request.module and hasattr(item, "callspec")
    ]
    pool = ThreadPoolExecutor(3)
    futures = {c.id: pool.submit(lc.run_case, c, shared, root / c.id) for c in selected}
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_lifecycle_case_gives_the_reference_bits_or_a_clean_error(case, matrix):
    outcome = matrix[case.id].result()
    assert not lc.failed(outcome), f"{case.id}: {outcome}"


def test_the_matrix_covers_every_object_and_every_event():
    from tests.helpers import lifecycle_subjects as ls

    assert {c.kind for c in CASES} == set(ls.KINDS)
    assert {c.event for c in CASES} == set(lc.EVENTS)
    assert set(KNOWN) <= {c.id for c in CASES}
