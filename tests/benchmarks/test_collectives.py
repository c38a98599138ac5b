"""benchmarks/collectives.py keeps working in its quick mode (figures are not
asserted)."""

import re

import pytest

from tests.benchmarks._helpers import run_benchmark
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only


@pytest.mark.benchmarks
@pytest.mark.slow
class TestCollectivesBenchmarkRuns:
    hw_classification = HW.ACCELERATOR

    def test_quick_run_prints_ratios(self):
        r = run_benchmark("collectives.py", "--quick", "--ranks", "2", timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        for case in ["allreduce", "allgather", "reduce_scatter", "ratio", "of memcpy"]:
            assert case in r.stdout, r.stdout
        # The machine's limit, measured in the same run, and each 1 MiB
        # row's fraction of it.
        bound = float(r.stdout.split("one core's memcpy: ")[1].split()[0])
        assert bound > 0
        rows = [line.split() for line in r.stdout.splitlines() if " MiB " in f" {line} "]
        assert rows and all(float(row[-1]) > 0 for row in rows), r.stdout
        # Each core's bandwidth while both copy, and all-reduce's bound from it.
        assert re.search(r"with 2 copying at once: \d+\.\d+ GB/s each \(\d+\.\d+ of one alone\)",
                         r.stdout), r.stdout
        assert re.search(r"bounds from the ranks' memory traffic, of memcpy: allgather \d+\.\d+, "
                         r"reduce_scatter \d+\.\d+, allreduce \d+\.\d+", r.stdout), r.stdout
