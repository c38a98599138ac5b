"""Shared pytest set-up for the OpenReg suite.

Every test must belong to a component (a marker named in pyproject.toml), so
that CI can select subsets (``pytest -m distributed``) and nothing is left
unclassified; collection fails otherwise.

Child interpreters (``run_python``) are in ``tests/_subprocess.py``.
"""

import os
import tempfile

import pytest

COMPONENTS = {"runtime", "device", "ops", "model", "docs", "demo", "benchmarks",
              "profiler", "distributed", "compile", "graphs", "template"}

# Inductor and friends write caches to the system temp dir by default; keep
# the suite's own.
_CACHE = os.path.join(tempfile.gettempdir(), f"openreg-test-cache-{os.getuid()}")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_CACHE, "inductor"))
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_CACHE, "triton"))


def pytest_configure(config):
    # A component marker must also be registered in pyproject.toml
    # (--strict-markers rejects unregistered ones, but only once a test uses it).
    registered = {line.split(":")[0].strip() for line in config.getini("markers")}
    missing = COMPONENTS - registered
    if missing:
        raise pytest.UsageError(
            "component markers missing from [tool.pytest.ini_options] markers in "
            "pyproject.toml: " + ", ".join(sorted(missing))
        )


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
