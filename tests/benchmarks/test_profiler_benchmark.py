"""benchmarks/profiler.py keeps working (its figures are not asserted: timing
belongs in the benchmark's output, not in tests)."""

import re

import pytest

from tests.benchmarks._helpers import run_benchmark
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only


@pytest.mark.benchmarks
class TestProfilerBenchmarkRuns:
    hw_classification = HW.ACCELERATOR

    def test_quick_run_prints_the_ratio(self):
        r = run_benchmark("profiler.py", "--quick", timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        for case in ["openreg, CPU + PrivateUse1 activities", "openreg, CPU activity only",
                     "cpu, CPU activity only"]:
            assert case in r.stdout, r.stdout
        assert re.search(r"^overhead ratio \(openreg, CPU \+ PrivateUse1, on/off\): \d+\.\d+x",
                         r.stdout, re.M), r.stdout
