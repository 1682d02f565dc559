"""run_model / run_models: any model generator through isolate=True, every outcome classified."""

from __future__ import annotations

import pytest

import opaque_ops as oo
from opaque_ops.isolate import run_model, run_models
from tests.helpers.misbehaving_kernels import chain, one_op

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_each_outcome(bad_ops):
    assert run_model(one_op("Twice"), custom_ops=[bad_ops]).status == "ok"
    crash = run_model(one_op("CrashNull"), custom_ops=[bad_ops])
    assert crash.status == "crash" and crash.stage == "invoke" and isinstance(crash.error, oo.RuntimeCrashError)
    hang = run_model(one_op("Spin"), custom_ops=[bad_ops], timeout=0.5)
    assert hang.status == "timeout" and hang.error.killed
    refused = run_model(b"\x00" * 64)
    assert refused.status == "rejected" and refused.stage == "create" and "ModelError" in refused.reason
    unresolved = run_model(one_op("Twice"))
    assert unresolved.status == "rejected" and unresolved.stage == "allocate"


def test_many_models_one_worker_restarted_after_each_crash(bad_ops):
    models = [
        one_op("Twice"),
        one_op("CrashAbort"),
        one_op("Twice"),
        (one_op("CrashNull"), {}),
        (chain("Twice", 3), {"resize": [7]}),
        b"garbage",
    ]
    seen = []
    summary = run_models(models, custom_ops=[bad_ops], on_outcome=lambda i, d, o, out: seen.append(out.status))
    assert seen == ["ok", "crash", "ok", "crash", "ok", "rejected"]
    assert summary.cases == 6 and summary.counts == {"ok": 3, "crash": 2, "rejected": 1}
    assert summary.worker_starts == 3  # the first one, and one after each crash
    assert [i for i, _ in summary.findings] == [1, 3]


def test_signature_runner_mode(atan_model_bytes, guide_atan):
    out = run_model(atan_model_bytes, custom_ops=[guide_atan], runner=True, resize=[9])
    assert out.status == "ok", out.error


def test_kept_findings_do_not_hold_the_workers_memory(bad_ops):
    """A long fuzz run keeps its findings: they must not keep the crashed workers' shared
    tensor buffers (nor the inputs and models in their tracebacks) alive."""
    import gc

    from tests.helpers.worker_resources import resources

    before = resources()["shared mappings"]
    big = one_op("CrashNull", n=1 << 20)  # 4 MiB tensors in shared memory
    summary = run_models([big, big, big], custom_ops=[bad_ops])
    assert summary.counts == {"crash": 3} and len(summary.findings) == 3
    gc.collect()
    assert resources()["shared mappings"] <= before
    assert all(o.error.__traceback__ is None for _, o in summary.findings)
