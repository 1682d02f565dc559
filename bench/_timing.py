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
