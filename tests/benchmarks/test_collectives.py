"""benchmarks/collectives.py keeps working in its quick mode (figures are not
asserted)."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.benchmarks
@pytest.mark.slow
class TestCollectivesBenchmarkRuns:
    def test_quick_run_prints_ratios(self):
        r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "collectives.py"), "--quick",
                            "--ranks", "2"], capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert r.returncode == 0, r.stderr[-3000:]
        for case in ["allreduce", "allgather", "reduce_scatter", "ratio"]:
            assert case in r.stdout, r.stdout
