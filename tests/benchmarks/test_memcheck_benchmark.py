"""benchmarks/memcheck.py keeps working (its figures are not asserted)."""

import pytest

from tests._subprocess import child_env
from tests.benchmarks._helpers import run_benchmark
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only


@pytest.mark.benchmarks
class TestMemcheckBenchmarkRuns:
    hw_classification = HW.ACCELERATOR

    def test_quick_run(self):
        r = run_benchmark("memcheck.py", "--quick", env=child_env(), timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        for case in ["tiny in-place op", "tiny op with an output", "MLP train step",
                     "transformer train step"]:
            assert case in r.stdout, r.stdout
        assert "ratio" in r.stdout
