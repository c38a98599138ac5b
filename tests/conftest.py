"""Shared pytest set-up for the OpenReg suite.

Every test class (or test outside a class) carries exactly one component
marker, its classification (named in pyproject.toml and the README), so that
CI can select subsets (``pytest -m distributed``) and nothing is left
unclassified or counted twice; collection fails otherwise.

``--device NAME`` (and ``--dist-backend B``) run the device-generic tests
against another PrivateUse1 backend and deselect the ``openreg_only`` ones;
the name reaches the tests through ``tests/target.py``.

Child interpreters (``run_python``) are in ``tests/_subprocess.py``.
"""

import importlib
import importlib.util
import os
import pathlib
import tempfile
import time

import pytest

COMPONENTS = {"runtime", "device", "ops", "model", "models", "docs", "demo", "benchmarks",
              "profiler", "distributed", "compile", "graphs", "template", "ci"}

# The suite runs several processes at once on 2 cores (two pytest-xdist
# workers, `make test`; and the ranks and compile workers they start), each
# with its own OpenMP pool. libgomp's default waits by spinning: pools of
# different processes then burn each other's cores, and the operator sweep on
# two workers took more CPU time than on one (415 against 188 s) and longer
# (217 against 160 s). Waiting passively it took 101 s and 183 s of CPU. The
# wait policy changes no result; a run that sets its own keeps it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Inductor and friends write caches to the system temp dir by default; keep
# the suite's own.
_CACHE = os.path.join(tempfile.gettempdir(), f"openreg-test-cache-{os.getuid()}")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_CACHE, "inductor"))
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_CACHE, "triton"))


def pytest_addoption(parser):
    group = parser.getgroup("openreg", "the device under test (tests/target.py)")
    group.addoption("--device", default=None, metavar="NAME",
                    help="run the device-generic tests against this PrivateUse1 backend "
                         "(loaded by its own autoload entry point) and deselect the "
                         "openreg_only tests; default: openreg")
    group.addoption("--dist-backend", default=None, metavar="NAME",
                    help="the device's c10d backend for the distributed tests "
                         "(default: occl for openreg; without it they are skipped)")
    group.addoption("--hw-classification", nargs="+", type=str.upper, default=None,
                    metavar="CLASS",
                    help="run only the test classes of these hardware classifications "
                         "(PyTorch's HardwareClassification: GENERIC, ACCELERATOR, ...), "
                         "selected by torch's own filter (2.14 on) or its twin (2.13)")


def pytest_configure(config):
    # The options reach tests/target.py and child processes through the
    # environment, in the variables target.py names. target.py reads them at
    # import, which naming them here has just done: read them again once set.
    from tests import target

    device = config.getoption("--device")
    if device:
        os.environ[target.DEVICE_VAR] = device
    dist_backend = config.getoption("--dist-backend")
    if dist_backend:
        os.environ[target.DIST_BACKEND_VAR] = dist_backend
    if device or dist_backend:
        importlib.reload(target)

    # A component marker must also be registered in pyproject.toml
    # (--strict-markers rejects unregistered ones, but only once a test uses it).
    registered = {line.split(":")[0].strip() for line in config.getini("markers")}
    missing = COMPONENTS - registered
    if missing:
        raise pytest.UsageError(
            "component markers missing from [tool.pytest.ini_options] markers in "
            "pyproject.toml: " + ", ".join(sorted(missing))
        )


def _check_and_select_hw_classification(config, items):
    """Every test class declares PyTorch's hardware classification (docs/testing.md):
    ``hw_classification = HW.ACCELERATOR`` (it uses the device) or ``HW.GENERIC``
    (it does not). ``--hw-classification`` selects as PyTorch's runner does."""
    from tests.target import gates

    g = gates()
    HW = g.HardwareClassification
    missing = []
    for item in items:
        cls = getattr(item, "cls", None)
        value = getattr(cls, "hw_classification", None) if cls is not None else None
        if not isinstance(value, HW):
            missing.append(item.nodeid if cls is None else f"{cls.__module__}.{cls.__qualname__}")
    if missing:
        missing = list(dict.fromkeys(missing))
        raise pytest.UsageError(
            "test classes without a hardware classification (hw_classification = "
            "HW.ACCELERATOR or HW.GENERIC, HW from tests.target; a test outside a class "
            "cannot carry one): " + ", ".join(missing[:10]))
    names = config.getoption("--hw-classification")
    if names is None:
        return
    unknown = [n for n in names if n not in HW.__members__]
    if unknown:
        raise pytest.UsageError(f"--hw-classification: unknown {', '.join(unknown)} "
                                f"(choose from {', '.join(HW.__members__)})")
    keep = []
    g.filter_by_hw_classification(items, {HW[n] for n in names},
                                  lambda item: getattr(item, "cls", None), on_match=keep.append)
    kept = set(map(id, keep))
    dropped = [item for item in items if id(item) not in kept]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_collection_modifyitems(config, items):
    unclassified, twice = [], []
    for item in items:
        names = {m.name for m in item.iter_markers() if m.name in COMPONENTS}
        if not names:
            unclassified.append(item.nodeid)
        elif len(names) > 1:
            twice.append(f"{item.nodeid} ({', '.join(sorted(names))})")
    if unclassified or twice:
        problems = []
        if unclassified:
            problems.append("tests without a component marker: " + ", ".join(unclassified[:10]))
        if twice:
            problems.append("tests with more than one component marker: " + ", ".join(twice[:10]))
        raise pytest.UsageError(
            "; ".join(problems) + ". Each test class carries exactly one of: "
            + ", ".join(sorted(COMPONENTS))
        )

    _check_and_select_hw_classification(config, items)

    from tests.target import IS_OPENREG
    if not IS_OPENREG:
        keep, dropped = [], []
        for item in items:
            (dropped if item.get_closest_marker("openreg_only") else keep).append(item)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep


# ---------------------------------------------------------------- the suite's budget
# A run of the whole suite (`make test`, no -m/-k selection) longer than its
# budget in CI (tools/ci_report.py, one place for the figures) ends with a
# warning, so the next person sees it before CI's 90-minute limit does. A
# report, not a failure: the machines are noisy.
_SESSION_START = [None]


def pytest_sessionstart(session):
    _SESSION_START[0] = time.monotonic()


def _ci_budget_minutes():
    path = pathlib.Path(__file__).resolve().parents[1] / "tools" / "ci_report.py"
    spec = importlib.util.spec_from_file_location("_ci_report", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.BUDGET_SUITE_MIN


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _SESSION_START[0] is None or hasattr(config, "workerinput"):
        return
    tests_dir = pathlib.Path(__file__).resolve().parent
    whole = [pathlib.Path(a).resolve() for a in config.args] == [tests_dir]
    if not whole or config.option.markexpr or config.option.keyword:
        return
    minutes = (time.monotonic() - _SESSION_START[0]) / 60
    budget = _ci_budget_minutes()
    if minutes > budget:
        terminalreporter.write_line(
            f"WARNING (CI budget): the suite took {minutes:.1f} min, over its budget of "
            f"{budget} min on a quiet 2-core machine (CI stops the whole run at 90): "
            f"see the slowest tests (--durations=25, or the table .ci/run ends with) "
            f"before adding more", yellow=True, bold=True)
