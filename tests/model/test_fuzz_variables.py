"""A short run of tools/fuzz_variables.py: random resource-variable programs, opaque_ops against ai-edge-litert.

The fuzzer's findings of longer runs are reported apart (its module
docstring says what counts as one); this keeps its machinery working: the
cases are built, run three ways in child processes, compared, and a range
known to be clean on 2.17.1 and 2.23.0 stays clean.
"""

from __future__ import annotations

import pytest

pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is a test dependency")


def test_variable_fuzz_short_run_has_no_crash(tmp_path):
    from tools import fuzz_variables

    totals = fuzz_variables.run(40, seed=2, workdir=tmp_path, chunk=40)
    assert totals["crashes"] == [], totals["crashes"]
    assert totals["findings"] == [], totals["findings"]
    assert totals["run"] == 40


def test_cases_are_a_function_of_seed_and_index():
    from tools.fuzz_variables import make_case

    a, b = make_case(7, 11), make_case(7, 11)
    assert a.data == b.data and a.calls == b.calls
    assert make_case(7, 12).data != a.data


def test_overreads_follow_the_stored_sizes():
    """A read declared with 12 values of a variable an IF's branch gave 6 reads past it (fuzz_variables 1:96)."""
    from tools.fuzz_variables import make_case, overreads

    case = make_case(1, 96)
    assert overreads(case) == [False, True, False, False, True]
