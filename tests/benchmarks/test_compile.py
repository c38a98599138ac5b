"""benchmarks/compile.py keeps working (its figures are not asserted)."""

import pytest

from tests.benchmarks._helpers import run_benchmark
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only


@pytest.mark.benchmarks
@pytest.mark.slow
class TestCompileBenchmarkRuns:
    hw_classification = HW.ACCELERATOR

    def test_quick_mode(self):
        r = run_benchmark("compile.py", "--quick", timeout=900)
        assert r.returncode == 0, r.stderr
        for case in ["pointwise chain 4M", "MLP", "transformer block"]:
            assert case in r.stdout, r.stdout
        assert r.stdout.count("openreg/cpu: speedup") == 3, r.stdout
