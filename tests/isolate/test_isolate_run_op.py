"""run_op(..., isolate=True): a kernel under development can crash without taking the caller along."""

from __future__ import annotations

import numpy as np
import pytest

import opaque_ops as oo
from opaque_ops.testing import GuardError, run_op
from tests.helpers.misbehaving_kernels import twice

pytestmark = pytest.mark.usefixtures("no_leaks")
X = np.linspace(-2, 2, 9, dtype=np.float32)


def test_same_outputs_as_in_process(bad_ops):
    (a,) = run_op(bad_ops, "Twice", inputs=[X])
    (b,) = run_op(bad_ops, "Twice", inputs=[X], isolate=True)
    np.testing.assert_array_equal(a, twice(X))
    assert a.tobytes() == b.tobytes()


def test_crashing_kernel_raises_with_the_backtrace(bad_ops):
    with pytest.raises(oo.RuntimeCrashError) as info:
        run_op(bad_ops, "CrashNull", inputs=[X], isolate=True)
    err = info.value
    assert err.signal == "SIGSEGV" and err.stage == "invoke" and err.op == "CrashNull"
    assert err.backtrace[0].startswith("CrashNullInvoke")


def test_guard_errors_cross_as_guard_errors():
    src = r"""
    #include "opaque_ops.h"
    static TfLiteStatus Past(TfLiteOpaqueContext* c, TfLiteOpaqueNode* n) {
      float* y = (float*)TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetOutput(c, n, 0));
      size_t k = TfLiteOpaqueTensorByteSize(TfLiteOpaqueNodeGetOutput(c, n, 0)) / sizeof(float);
      for (size_t i = 0; i <= k; ++i) y[i] = 1.0f;   /* one past the end */
      return kTfLiteOk;
    }
    OPAQUE_OP("Past", 1, .invoke = Past);
    """
    lib = oo.compile_ops(src)
    with pytest.raises(GuardError, match="past the end") as info:
        run_op(lib, "Past", inputs=[X], num_outputs=[(X.shape, np.float32)], isolate=True)
    assert "raised in the isolated worker" in str(info.value.__cause__)


def test_timeout(bad_ops):
    with pytest.raises(oo.RuntimeTimeoutError) as info:
        run_op(bad_ops, "Spin", inputs=[X], isolate=True, timeout=0.5)
    assert info.value.killed and "SpinInvoke" in str(info.value)


def test_python_op_runs_in_the_worker():
    from tests.helpers.isolate_python_ops import twice_op

    (y,) = run_op(twice_op(), "Twice", inputs=[X], isolate=True)
    np.testing.assert_array_equal(y, twice(X))


def test_reusable_worker(bad_ops):
    with oo.isolate.Worker() as w:
        for _ in range(3):
            (y,) = run_op(bad_ops, "Twice", inputs=[X], isolate=w)
            np.testing.assert_array_equal(y, twice(X))
        assert w.starts == 1
        with pytest.raises(oo.RuntimeCrashError):
            run_op(bad_ops, "CrashAbort", inputs=[X], isolate=w)
        (y,) = run_op(bad_ops, "Twice", inputs=[X], isolate=w)
        assert w.starts == 2
