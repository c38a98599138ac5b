"""benchmarks/eager.py keeps working (its figures are not asserted: timing
belongs in the benchmark's output, not in tests)."""

import os

import pytest

from tests.benchmarks._helpers import ROOT, run_benchmark
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only


@pytest.mark.benchmarks
@pytest.mark.slow
class TestEagerBenchmarkRuns:
    hw_classification = HW.ACCELERATOR

    def test_one_round_in_strict_mode(self):
        env = dict(os.environ, OPENREG_STRICT_MEMORY="1", BENCH_ROUNDS="1")
        r = run_benchmark("eager.py", "--strict", "1", env=env, timeout=600)
        assert r.returncode == 0, r.stderr
        for case in ["add, 1 element", "mm 512x512", "conv2d ResNet block", "softmax", "layer_norm",
                     "train step d=256 8x64", "train step d=256 8x64, fresh processes",
                     "train step d=512 16x128 (arithmetic)",
                     "train step d=512 16x128 (arithmetic), fresh processes"]:
            assert case in r.stdout, r.stdout
        assert "strict memory ON" in r.stdout

    def test_saved_figures_report_and_plot(self, tmp_path):
        # The committed before/after figures redraw the plot in docs/ (no timing).
        results = ROOT / "benchmarks" / "results"
        png = tmp_path / "ratios.png"
        r = run_benchmark("eager.py", "--from-json", str(results / "eager_after.json"),
                          "--before", str(results / "eager_before.json"), "--plot", str(png),
                          timeout=300)
        assert r.returncode == 0, r.stderr
        assert "strict memory ON" in r.stdout and "strict memory OFF" in r.stdout
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
