"""benchmarks/sparse.py keeps working (its figures are not asserted)."""

import pytest

from tests._subprocess import child_env
from tests.benchmarks._helpers import run_benchmark
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only


@pytest.mark.benchmarks
class TestSparseBenchmarkRuns:
    hw_classification = HW.ACCELERATOR

    def test_quick_run(self):
        r = run_benchmark("sparse.py", "--quick", env=child_env(), timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        for case in ["openreg/cpu: sparse.mm COO", "openreg/cpu: sparse.mm CSR",
                     "openreg/cpu: embedding bag step"]:
            assert case in r.stdout, r.stdout
