"""benchmarks/rng.py keeps working (its figures are not asserted)."""

import pathlib
import subprocess
import sys

import pytest

from tests._subprocess import child_env

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.benchmarks
class TestRngBenchmarkRuns:
    def test_quick_run(self):
        r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rng.py"), "--quick"],
                           env=child_env(), capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert r.returncode == 0, r.stdout + r.stderr
        for case in ["uniform_ float32", "normal_ float32", "bernoulli_(0.5)"]:
            assert case in r.stdout, r.stdout
        assert "ratio (openreg/cpu)" in r.stdout
