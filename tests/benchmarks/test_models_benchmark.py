"""benchmarks/models.py keeps working (its figures are not asserted)."""

import pytest

from tests.benchmarks._helpers import run_benchmark
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

pytest.importorskip("transformers", reason="the model suite needs transformers "
                                           "(requirements-dev.txt)")


@pytest.mark.benchmarks
@pytest.mark.slow
class TestModelsBenchmarkRuns:
    hw_classification = HW.ACCELERATOR

    def test_quick_mode(self):
        r = run_benchmark("models.py", "--quick", timeout=900)
        assert r.returncode == 0, r.stderr
        assert "openreg/cpu: eager step" in r.stdout, r.stdout
        assert "openreg/cpu: compiled step" in r.stdout, r.stdout
