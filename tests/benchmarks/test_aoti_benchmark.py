"""benchmarks/aoti.py keeps working (its figures are not asserted)."""

import pytest

from tests.benchmarks._helpers import run_benchmark
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only


@pytest.mark.benchmarks
@pytest.mark.slow
class TestAOTIBenchmarkRuns:
    hw_classification = HW.ACCELERATOR

    def test_quick_mode(self):
        r = run_benchmark("aoti.py", "--quick", timeout=900)
        assert r.returncode == 0, r.stderr
        for case in ["MLP", "transformer block"]:
            assert case in r.stdout, r.stdout
        assert r.stdout.count("openreg/cpu: aoti run time") == 2, r.stdout
        assert r.stdout.count("package build: openreg") == 2, r.stdout
