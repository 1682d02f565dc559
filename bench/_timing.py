"""Timing helper shared by the benchmarks in this folder (not part of the package)."""

from __future__ import annotations

import statistics
import time


def median_time(fn, runs: int, warmup: int = 1) -> float:
    """Median wall time of one call of ``fn``, in seconds.

    Parameters
    ----------
    fn : callable
        Called with no arguments; its result is ignored.
    runs : int
        Timed calls; the median of their times is returned.
    warmup : int, optional
        Untimed calls first (caches, lazy allocation, first-call costs).

    Returns
    -------
    float
        Median seconds per call (``time.perf_counter``).
    """
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def best_of_rounds(calls: dict, n: int = 2000, rounds: int = 15, clock=time.perf_counter) -> dict:
    """Best over ``rounds`` of the mean µs per call of each function, interleaved per round.

    Parameters
    ----------
    calls : dict
        Name -> callable with no arguments; each round runs every one ``n``
        times, in the dict's order, so that machine load hits all alike.
    n, rounds : int
        Calls per timing, and rounds.
    clock : callable, optional
        ``time.perf_counter`` (wall time) by default; ``time.thread_time``
        leaves out the time other processes take the core away.

    Returns
    -------
    dict
        Name -> µs per call, the fastest round's.
    """
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(rounds):
        for name, call in calls.items():
            t = clock()
            for _ in range(n):
                call()
            best[name] = min(best[name], (clock() - t) / n * 1e6)
    return best
