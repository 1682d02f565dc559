"""pytest examples/clamp: the C Clamp matches its Python prototype and the definition."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import check  # noqa: E402

from opaque_ops.testing import run_op  # noqa: E402


def test_c_matches_python_prototype():
    check.check(seed=1)


def test_definition_on_special_values():
    x = np.array([np.nan, -np.inf, np.inf, -1.5, -0.0, 0.25, 1.0, 7.0], np.float32)
    (y,) = run_op(check.c_clamp(), "Clamp", inputs=[x])
    assert np.isnan(y[0])
    np.testing.assert_array_equal(y[1:], [0, 1, 0, 0, 0.25, 1, 1])
