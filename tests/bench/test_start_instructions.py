"""bench/start_instructions.py's reading of callgrind's output, on a file written by hand.

The file follows callgrind's format (valgrind's docs, "Callgrind Format
Specification"): ``ob=``/``fn=`` name compression (``(id) name`` the first
time, ``(id)`` after), cost lines with absolute and relative (``+N``)
positions, and a call's ``calls=`` line followed by the callee's inclusive
cost, which belongs to the callee's own lines and must not be counted twice.
The expected totals are summed by hand from the lines below.
"""

from __future__ import annotations

import sys

from tests.helpers.locations import ROOT

sys.path.insert(0, str(ROOT / "bench"))

from start_instructions import self_cost_by_group  # noqa: E402

_FILE = """\
version: 1
creator: callgrind-3.19.0
positions: line
events: Ir
summary: 1000

ob=(1) /usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0
fl=(1) Python/ceval.c
fn=(1) _PyEval_EvalFrameDefault
10 100
cob=(2) /venv/site-packages/pymicro_wakeword/lib/libtensorflowlite_c.so
cfi=(2) ???
cfn=(2) 0x0000000000397b10
calls=1 0
11 500
+1 20

ob=(2)
fl=(2)
fn=(2)
0 500

ob=(3) /usr/lib/x86_64-linux-gnu/libc.so.6
fl=(3) memset.S
fn=(3) memset
0 300
+2 80
ob=(4) /venv/site-packages/_cffi_backend.cpython-311-x86_64-linux-gnu.so
fl=(4) ???
fn=(4) b_call
0 0
ob=(1)
fl=(1)
fn=(1)
-3 0
"""


def test_costs_are_each_functions_own_by_library(tmp_path):
    path = tmp_path / "callgrind.out.2"
    path.write_text(_FILE)
    got = self_cost_by_group(str(path))
    # Python: 100 + 20 (the 500 after calls= is the callee's, counted on its own lines).
    assert got == {"total": 1000, "python": 120, "runtime": 500, "libc": 380, "other": 0}


def test_the_other_runtime_and_its_loader_count_as_runtime_and_other(tmp_path):
    text = _FILE.replace("pymicro_wakeword/lib/libtensorflowlite_c.so", "ai_edge_litert/libpywrap_litert_common.so")
    text = text.replace("fn=(4) b_call\n0 0", "fn=(4) b_call\n0 7")
    path = tmp_path / "callgrind.out.2"
    path.write_text(text)
    got = self_cost_by_group(str(path))
    assert got == {"total": 1007, "python": 120, "runtime": 500, "libc": 380, "other": 7}
