"""Shared pytest set-up for the OpenReg suite.

Every test must belong to a component (a marker named in pyproject.toml), so
that CI can select subsets (``pytest -m distributed``) and nothing is left
unclassified; collection fails otherwise.
"""

import os
import subprocess
import sys
import tempfile

import pytest

COMPONENTS = {"runtime", "device", "ops", "model", "docs", "demo", "profiler", "distributed", "compile"}

# Inductor and friends write caches to the system temp dir by default; keep
# the suite's own.
_CACHE = os.path.join(tempfile.gettempdir(), f"openreg-test-cache-{os.getuid()}")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_CACHE, "inductor"))
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_CACHE, "triton"))

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pytest_collection_modifyitems(config, items):
    unclassified = [
        item.nodeid for item in items
        if not any(m.name in COMPONENTS for m in item.iter_markers())
    ]
    if unclassified:
        raise pytest.UsageError(
            "tests without a component marker (" + ", ".join(sorted(COMPONENTS)) + "): "
            + ", ".join(unclassified[:10])
        )


def run_python(code: str, env: dict = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (for per-process settings and crashes)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code], env=full_env, capture_output=True, text=True,
        timeout=timeout, cwd=REPO,
    )


@pytest.fixture
def python_subprocess():
    return run_python
