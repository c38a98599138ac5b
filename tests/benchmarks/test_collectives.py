"""benchmarks/collectives.py keeps working in its quick mode (figures are not
asserted)."""

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
        for case in ["allreduce", "allgather", "reduce_scatter", "ratio"]:
            assert case in r.stdout, r.stdout
