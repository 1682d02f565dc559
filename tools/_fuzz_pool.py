"""The child-process pool of the fuzzers: cases run in children, and a child's death names its case.

tools/fuzz_models.py, tools/fuzz_structured.py, tools/fuzz_deep_shapes.py and
tools/fuzz_variables.py each run a range of cases (every case a pure function
of ``(seed, index)``) where a crash may kill the process running it.  They
share one way of doing it, kept here so that it is written once:

- the parent splits the range into chunks, runs each chunk in a child
  process (``python -c CODE``, a few chunks at once with ``workers``) and,
  when a child dies, records the death and starts a fresh child after the
  case that killed it (:func:`run_ranges`, :func:`run_child`);
- the child prints a line-based progress protocol on stdout, written by
  :class:`Child`: ``I <index>`` before each case, ``FINDING <index> ...``,
  ``NOTE <index> ...`` for what a fuzzer counts apart from its findings,
  ``R <index>`` / ``D <index>`` around a reference run whose death is the
  reference's and not a finding, ``HANG <index>`` when its own watchdog ends
  a case that ran past its time, and ``STATS <json>`` at the end; and, on
  stderr, ``STAGE <name>`` lines that say which part of a case it was in.

The parent learns a death's case from the last ``I`` line before it, so the
cases a dead child had finished count as run (their outcomes are lost with
it) and the case that killed it is reported and saved by the fuzzer.

Not the tests' runner (tests.helpers.child_process): this one reads the
child's progress protocol, keeps a timed-out child's partial output to name
the case that hung, and serves the tools run on their own, where the tests
package is not imported.  Only the standard library is imported here: a
child imports this module before it caps its address space and before the
fuzzer's own imports (numpy, opaque_ops).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Address-space cap of a fuzzing child whose cases may plan huge tensors (bytes).
MEM_LIMIT = 8 << 30


# ----------------------------------------------------------- the child's side


class Child:
    """The child's end of the progress protocol (see the module notes).

    Parameters
    ----------
    case_timeout : float, optional
        Seconds one case may take; past them the child prints ``HANG <index>``
        and ends itself (exit status 3), so that a fresh child carries on after
        that case.  ``None``: no watchdog (the parent's timeout of the whole
        child still holds).
    mem_limit : int, optional
        Cap of the child's address space (``RLIMIT_AS``, bytes), so that a case
        that plans a huge tensor fails its allocation instead of taking the
        machine's memory.  Set before the fuzzer's own imports when the
        ``Child`` is made first.
    """

    def __init__(self, case_timeout: float | None = None, mem_limit: int | None = None) -> None:
        if mem_limit is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (mem_limit, mem_limit))
        self.out = sys.stdout
        self.case_timeout = case_timeout
        # (index, monotonic deadline) of the case running; the watchdog reads it.
        self.deadline: list = [None, None]
        if case_timeout is not None:
            threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while True:
            time.sleep(0.25)
            index, until = self.deadline
            if until is not None and time.monotonic() > until:
                self.out.write("HANG %d\n" % index)
                self.out.flush()
                os._exit(3)

    def _say(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    def cases(self, start: int, stop: int) -> Iterator[int]:
        """Yield ``start .. stop-1``, announcing each (``I <index>``) and arming the watchdog for it."""
        for i in range(start, stop):
            # The parent reads the last index printed to find the case of a death.
            self._say("I %d" % i)
            if self.case_timeout is not None:
                self.deadline[:] = [i, time.monotonic() + self.case_timeout]
            yield i

    def finding(self, index: int, text: str) -> None:
        """Report a finding of case ``index``; ``text`` is written as given (one line)."""
        self._say("FINDING %d %s" % (index, text))

    def note(self, index: int, text: str) -> None:
        """Report something of case ``index`` counted apart from the findings (one line, as given).

        Streamed at once, like a finding, so that a child that dies on a later
        case keeps it (a count in ``STATS`` would be lost with the child).
        """
        self._say("NOTE %d %s" % (index, text))

    def reference(self, index: int, running: bool) -> None:
        """Say that case ``index``'s reference starts (``running``) or is done: a death in between is its."""
        self._say("%s %d" % ("R" if running else "D", index))

    def stage(self, name: str) -> None:
        """Name the part of a case about to run, on stderr, where the parent keeps a dead child's last lines."""
        sys.stderr.write("STAGE %s\n" % name)
        sys.stderr.flush()

    def stats(self, stats: dict) -> None:
        """End the child's report with its counts (the parent takes a child without them as dead)."""
        self.out.write("STATS " + json.dumps(stats) + "\n")


# ---------------------------------------------------------- the parent's side


def run_child(code: str, start: int, stop: int, timeout: float) -> dict:
    """Run a fuzzing child (``python -c code``) over cases [start, stop) and read its report.

    Parameters
    ----------
    code : str
        The child's program; it speaks the protocol of :class:`Child`.
    start, stop : int
        The cases it runs.
    timeout : float
        Seconds the whole child may take; past them it is killed and taken
        as a hang of the last case it announced.

    Returns
    -------
    dict
        ``done`` (where a fresh child should carry on: ``stop``, or the case
        after a death), ``stats`` (the child's ``STATS``, or None), ``findings``
        (the ``FINDING`` lines, without the tag), ``notes`` (the ``NOTE``
        lines, without the tag), ``crash`` (None, or the
        ``index``, ``returncode`` -- ``"timeout"`` for a hang -- and the last
        800 characters of ``stderr`` of a death), ``reference_died`` (None, or
        the ``index`` and ``returncode`` of a death between ``R`` and ``D``,
        which is not a crash), and after a death ``partial``: how many cases
        before the dead one the child had run.
    """
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # Every case runs the checks, and no verdict records of throw-away models
    # pile up in the user's cache (OPAQUE_OPS_VERDICT_CACHE set here wins).
    env.setdefault("OPAQUE_OPS_VERDICT_CACHE", "off")
    res: dict = {"done": start, "stats": None, "crash": None, "findings": [], "notes": [], "reference_died": None}
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)
        stdout, stderr, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr, rc = "", "timeout"
    last, in_reference = start - 1, False
    for line in stdout.splitlines():
        tag, _, rest = line.partition(" ")
        if tag == "I":
            last, in_reference = int(rest), False
        elif tag == "R":
            in_reference = True
        elif tag == "D":
            in_reference = False
        elif tag == "FINDING":
            res["findings"].append(rest)
        elif tag == "NOTE":  # counted apart by the fuzzer; kept even if the child dies later
            res["notes"].append(rest)
        elif tag == "STATS":
            res["stats"] = json.loads(rest)
        elif tag == "HANG":  # the child's own per-case watchdog
            last, rc = int(rest), "timeout"
    if res["stats"] is not None and rc == 0:
        res["done"] = stop
        return res
    # Crash (signal or abort) or hang at case `last`: the cases before it are
    # counted as run (their outcomes are lost with the child, but they did
    # not crash it); the child is restarted after it.
    res["done"] = last + 1
    res["partial"] = last - start
    if in_reference and rc != "timeout":
        res["reference_died"] = {"index": last, "returncode": rc}
    else:
        res["crash"] = {"index": last, "returncode": rc, "stderr": stderr[-800:]}
    return res


def last_stage(stderr: str) -> str | None:
    """The name of the last ``STAGE`` line (:meth:`Child.stage`) in a dead child's stderr, or None."""
    stages = [ln for ln in stderr.splitlines() if ln.startswith("STAGE ")]
    return stages[-1][6:] if stages else None


def run_ranges(
    start: int,
    stop: int,
    chunk: int,
    run_range: Callable[[int, int], dict],
    take: Callable[[dict, int], None],
    workers: int = 1,
    chunk_done: Callable[[int, int], None] | None = None,
) -> None:
    """Run cases ``start .. stop-1`` in chunks of ``chunk``, a child at a time per chunk, ``workers`` at once.

    Parameters
    ----------
    run_range : callable
        ``run_range(a, b)`` runs cases [a, b) in one child and returns
        :func:`run_child`'s report.
    take : callable
        ``take(res, a)`` adds a child's report (of a range from ``a``) to the
        fuzzer's totals; called under a lock, one report at a time.  After a
        death the chunk carries on in a fresh child from ``res["done"]`` (one
        case further, when the child died before its first case).
    chunk_done : callable, optional
        ``chunk_done(k, count)`` after chunk ``k`` of ``count`` (in order),
        under the same lock: for progress lines and snapshots.
    """
    from concurrent.futures import ThreadPoolExecutor

    lock = threading.Lock()
    todo = [(s, min(s + chunk, stop)) for s in range(start, stop, chunk)]

    def work(span: tuple[int, int]) -> None:
        a, b = span
        while a < b:
            res = run_range(a, b)
            with lock:
                take(res, a)
            a = res["done"] if res["done"] > a else a + 1

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for k, _ in enumerate(pool.map(work, todo)):
            if chunk_done is not None:
                with lock:
                    chunk_done(k, len(todo))


def add_counts(totals: dict, counts: dict) -> None:
    """Add a child's ``{key: count}`` to the run's."""
    for key, v in counts.items():
        totals[key] = totals.get(key, 0) + v


def add_stats(totals: dict, stats: dict, sums: tuple, counts: tuple = ()) -> None:
    """Add a finished child's ``STATS`` to the run's totals.

    Parameters
    ----------
    sums : tuple of str
        Keys whose values add up as they are (numbers, or lists that join).
    counts : tuple of str
        Keys of ``{key: count}`` tables, added key by key (:func:`add_counts`).
    """
    for k in sums:
        totals[k] += stats[k]
    for k in counts:
        add_counts(totals[k], stats[k])


def keep_case(workdir: Path, name: str, data: bytes) -> str:
    """Save the model of a case that killed its child as ``workdir/name.tflite``; returns the path."""
    keep = workdir / f"{name}.tflite"
    keep.write_bytes(data)
    return str(keep)
