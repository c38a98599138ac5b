"""benchmarks/graphs.py keeps working (its figures are not asserted)."""

import re

import pytest

from tests.benchmarks._helpers import run_benchmark
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only


@pytest.mark.benchmarks
class TestGraphsBenchmarkRuns:
    hw_classification = HW.ACCELERATOR

    def test_quick_mode(self):
        r = run_benchmark("graphs.py", "--quick", timeout=600)
        assert r.returncode == 0, r.stderr
        assert re.search(r"replay/eager = \d+\.\d+x", r.stdout), r.stdout
        assert re.search(r"replayed/launch = \d+\.\d+x", r.stdout), r.stdout
        assert re.search(r"replay/compiled = \d+\.\d+x", r.stdout), r.stdout
        assert re.search(r"replay/eager DDP = \d+\.\d+x", r.stdout), r.stdout
        assert "forward-only step" in r.stdout, r.stdout
        assert re.search(r"replay, no prepared nodes\s+\d+\.\d+ us", r.stdout), r.stdout
        assert re.search(r"its nodes' kernels \d+% of the launch \(aten::", r.stdout), r.stdout
        # One row per kind of node, each with its three times and ratio.
        for kind in ("elementwise in place", "reduction", "copy", "matmul"):
            row = next((line for line in r.stdout.splitlines() if kind in line), None)
            assert row and re.search(r"(\d+\.\d+us\s*){3}\d+\.\d+x$", row.strip()), r.stdout
