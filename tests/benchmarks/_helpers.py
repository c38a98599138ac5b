"""Shared by the benchmark tests (not a test module)."""

import pathlib
import subprocess
import sys

# Used only by openreg-only tests (tests/target.py).
openreg_only = True

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_benchmark(script: str, *args: str, timeout: float, env: dict = None):
    """``python benchmarks/<script> <args>`` in a child process from the
    repository root; its CompletedProcess (text output captured)."""
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
