"""benchmarks/aoti.py keeps working (its figures are not asserted)."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.benchmarks
@pytest.mark.slow
class TestAOTIBenchmarkRuns:
    def test_quick_mode(self):
        r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "aoti.py"), "--quick"],
                           capture_output=True, text=True, timeout=900, cwd=ROOT)
        assert r.returncode == 0, r.stderr
        for case in ["MLP", "transformer block"]:
            assert case in r.stdout, r.stdout
        assert r.stdout.count("openreg/cpu: aoti run time") == 2, r.stdout
        assert r.stdout.count("package build: openreg") == 2, r.stdout
