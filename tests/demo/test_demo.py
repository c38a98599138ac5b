"""The README's main job (make demo) runs and reports a CPU match."""

import pathlib
import subprocess
import sys

import pytest
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.demo
@pytest.mark.smoke
class TestDemo:
    hw_classification = HW.ACCELERATOR

    def test_demo_runs_and_matches_cpu(self):
        r = subprocess.run([sys.executable, str(ROOT / "examples" / "demo.py")], capture_output=True,
                           text=True, timeout=300, cwd=ROOT)
        assert r.returncode == 0, r.stdout + r.stderr
        out = r.stdout
        assert "-> MATCH" in out
        assert "openreg:1  OpenReg Simulated Device 1" in out
        assert "out of memory is real" in out
        assert "right after queuing: stream idle? False" in out
        assert "copy result correct: True" in out
        assert "1 + 2 on every element: correct" in out
        assert "-> COMPILED MATCH" in out
        assert "SUCCESS" in out
