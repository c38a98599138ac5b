"""A pytest plugin of tools/pytorch_suite.py (loaded with ``-p``):

* each test's start and outcome, one JSON line each, flushed at once, to the
  file named by PYTORCH_SUITE_PROGRESS. The runner reads its results from
  here rather than from the JUnit file, which pytest writes only at the end:
  a file that times out or crashes still tells which tests finished, how, and
  which one was running when it stopped;
* with PYTORCH_SUITE_SELECT (a file of node ids, one a line), only those
  tests run. pytest's own node-id arguments abort the whole run when one id
  does not exist (a CPU twin that the file does not define); here it is
  simply not run, and the runner reports it as not found.

Standard library only: it runs inside PyTorch's test files' interpreter.
"""

import json
import os

_PATH = os.environ.get("PYTORCH_SUITE_PROGRESS")
_out = open(_PATH, "a", buffering=1) if _PATH else None  # line-buffered
_state: dict = {}  # nodeid -> (outcome, message) so far, over its phases


def _write(record: dict) -> None:
    if _out is not None:
        _out.write(json.dumps(record) + "\n")


def _message(report) -> str:
    """The exception line of a failure, or the reason of a skip."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, reason)
        reason = str(longrepr[2])
        return reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return crash.message
    text = str(longrepr or "")
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _lines(var: str) -> list:
    path = os.environ.get(var)
    if not path:
        return []
    with open(path) as f:
        return [line.strip() for line in f if line.strip()]


def pytest_collection_modifyitems(config, items):
    import fnmatch

    wanted = set(_lines("PYTORCH_SUITE_SELECT")) if os.environ.get("PYTORCH_SUITE_SELECT") \
        else None
    # PYTORCH_SUITE_DESELECT: patterns of tests not to run (the expectations
    # file's resource entries with "run": false); each is reported as such.
    unwanted = _lines("PYTORCH_SUITE_DESELECT")
    keep, drop = [], []
    for item in items:
        if wanted is not None and item.nodeid not in wanted:
            drop.append(item)
        elif any(fnmatch.fnmatchcase(item.nodeid, p) for p in unwanted):
            drop.append(item)
            _write({"deselected": item.nodeid})
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


def pytest_runtest_logstart(nodeid, location):
    _write({"start": nodeid})


def pytest_runtest_logreport(report):
    outcome, message = _state.get(report.nodeid, ("passed", ""))
    if hasattr(report, "wasxfail"):
        # The test's own expected failure (unittest's expectedFailure, xfail):
        # it failed as its author expected, or passed where it need not.
        if report.skipped:
            outcome, message = "xfailed", str(report.wasxfail)
        elif report.passed and report.when == "call":
            outcome, message = "xpassed", str(report.wasxfail)
    elif report.failed:
        if outcome != "failed":  # the first failing phase says why
            where = "" if report.when == "call" else f" (in {report.when})"
            outcome, message = "failed", _message(report) + where
    elif report.skipped and outcome == "passed":
        outcome, message = "skipped", _message(report)
    _state[report.nodeid] = (outcome, message)


def pytest_runtest_logfinish(nodeid, location):
    outcome, message = _state.pop(nodeid, ("passed", ""))
    _write({"end": nodeid, "outcome": outcome, "message": message[:2000]})
