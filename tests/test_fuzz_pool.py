"""tools/_fuzz_pool.py, the fuzzers' child pool: a child's death names its case, and the run carries on after it.

The fuzzers' smoke runs (tests/model/test_checks.py, test_any_rank.py,
test_fuzz_variables.py) run clean ranges, where no child dies; these drive
the pool with children that really die (a signal, a hang its watchdog ends,
an abort inside a reference run) and check what the parent makes of each.
"""

from __future__ import annotations

import time

from tools._fuzz_pool import ROOT, add_counts, last_stage, run_child, run_ranges

# A child of the pool's protocol: cases [start, stop); case `kill` dies by SIGSEGV in its
# "work" stage, case `hang` sleeps past its time, case `ref` aborts inside its reference run,
# odd cases report a finding, cases divisible by 3 a note (counted apart, streamed like a finding).
CHILD = r"""
import os, signal, sys, time
sys.path.insert(0, {root!r})
from tools._fuzz_pool import Child
child = Child(case_timeout=1.0)
stats = {{"cases": 0, "kinds": {{}}}}
for i in child.cases({start}, {stop}):
    child.stage("work %d" % i)
    if i == {kill}:
        os.kill(os.getpid(), signal.SIGSEGV)
    if i == {hang}:
        time.sleep(60)
    child.reference(i, running=True)
    if i == {ref}:
        os.abort()
    child.reference(i, running=False)
    if i % 2:
        child.finding(i, "odd case")
    if i % 3 == 0:
        child.note(i, "third")
    stats["cases"] += 1
    kind = "odd" if i % 2 else "even"
    stats["kinds"][kind] = stats["kinds"].get(kind, 0) + 1
child.stats(stats)
"""


def _child(start: int, stop: int, kill: int = -1, hang: int = -1, ref: int = -1) -> dict:
    code = CHILD.format(root=str(ROOT), start=start, stop=stop, kill=kill, hang=hang, ref=ref)
    return run_child(code, start, stop, timeout=30)


def test_a_clean_child_reports_its_counts_and_findings():
    res = _child(0, 4)
    assert res["crash"] is None and res["reference_died"] is None
    assert res["done"] == 4
    assert res["stats"] == {"cases": 4, "kinds": {"even": 2, "odd": 2}}
    assert res["findings"] == ["1 odd case", "3 odd case"]
    assert res["notes"] == ["0 third", "3 third"]


def test_a_death_by_a_signal_names_its_case_and_its_stage():
    res = _child(0, 6, kill=3)
    assert res["stats"] is None
    assert res["crash"]["index"] == 3 and res["crash"]["returncode"] == -11
    assert last_stage(res["crash"]["stderr"]) == "work 3"
    # The cases before it ran (their findings were read); a fresh child starts after it.
    assert res["findings"] == ["1 odd case"]
    # Notes too: streamed, they outlive the child that printed them (a count in STATS would not).
    assert res["notes"] == ["0 third"]
    assert res["partial"] == 3 and res["done"] == 4


def test_a_hang_is_ended_by_the_childs_watchdog_and_named():
    t0 = time.monotonic()
    res = _child(2, 6, hang=4)
    # The child's own watchdog (1 s a case) ended it, long before the parent's 30 s for the child.
    assert time.monotonic() - t0 < 15
    assert res["crash"]["index"] == 4 and res["crash"]["returncode"] == "timeout"
    assert res["partial"] == 2 and res["done"] == 5


def test_a_death_inside_the_reference_run_is_not_a_crash():
    res = _child(0, 4, ref=2)
    assert res["crash"] is None
    assert res["reference_died"] == {"index": 2, "returncode": -6}
    assert res["done"] == 3


def test_run_ranges_carries_on_after_each_death_and_covers_every_case():
    """Cases 0..11 in chunks of 5, two at once: the dead cases are reported once each, and
    every other case is either counted by a child that finished or run by one that died."""
    deaths = {3: "kill", 6: "hang", 10: "ref"}
    seen: list = []
    totals: dict = {"cases": 0, "kinds": {}, "findings": [], "crashes": [], "reference_deaths": [], "before": 0}

    def run_range(a: int, b: int) -> dict:
        at = {v: k for k, v in deaths.items() if a <= k < b}
        return _child(a, b, kill=at.get("kill", -1), hang=at.get("hang", -1), ref=at.get("ref", -1))

    def take(res: dict, a: int) -> None:
        seen.append((a, res["done"]))
        if res["stats"] is not None:
            totals["cases"] += res["stats"]["cases"]
            add_counts(totals["kinds"], res["stats"]["kinds"])
        else:
            totals["before"] += res["partial"]
        totals["findings"] += res["findings"]
        if res["crash"] is not None:
            totals["crashes"].append((res["crash"]["index"], res["crash"]["returncode"]))
        if res["reference_died"] is not None:
            totals["reference_deaths"].append(res["reference_died"]["index"])

    chunks: list = []
    run_ranges(0, 12, 5, run_range, take, workers=2, chunk_done=lambda k, count: chunks.append((k, count)))
    assert sorted(totals["crashes"]) == [(3, -11), (6, "timeout")]
    assert totals["reference_deaths"] == [10]
    # 12 cases: 3 died, the others were counted by a finished child or run before a death.
    assert totals["cases"] + totals["before"] + 3 == 12
    assert sorted(seen) == [(0, 4), (4, 5), (5, 7), (7, 10), (10, 11), (11, 12)]
    assert chunks == [(0, 3), (1, 3), (2, 3)]
    assert sorted(totals["findings"]) == sorted(f"{i} odd case" for i in (1, 5, 7, 9, 11))
