"""Timing shared by the benchmark scripts (run as scripts: `python benchmarks/x.py`)."""

import statistics
import time


def bench(fn, sync, inner: int, repeats: int) -> float:
    """Median seconds per call of fn over `repeats` timed loops of `inner` calls."""
    fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        sync()
        times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times)
