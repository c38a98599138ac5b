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


def paired(steps, syncs, pairs, group):
    """Seconds per step of each device (median of its samples) and the median
    of the pairwise ratios openreg / cpu. A sample is `group` steps and a
    synchronize; the two samples of a pair run back to back, in alternating
    order so that neither device always goes first."""
    devs = list(steps)
    times = {dev: [] for dev in devs}
    ratios = []
    for i in range(pairs):
        sample = {}
        for dev in (devs if i % 2 == 0 else devs[::-1]):
            t0 = time.perf_counter()
            for _ in range(group):
                steps[dev]()
            syncs[dev]()
            sample[dev] = (time.perf_counter() - t0) / group
        for dev in devs:
            times[dev].append(sample[dev])
        ratios.append(sample["openreg"] / sample["cpu"])
    return {dev: statistics.median(t) for dev, t in times.items()}, statistics.median(ratios)
