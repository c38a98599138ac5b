"""Where CI's time went: the table `.ci/run` ends with (docs/testing.md, "CI's time").

    python tools/ci_report.py build/ci-times.tsv build/ci-suite.xml [--ccache STATS]

``build/ci-times.tsv`` holds one line per step, ``<name>\\t<start s>\\t<seconds>``,
written by ``.ci/run``'s ``timed`` (background steps included, so lanes that ran
side by side overlap in the table). The JUnit file is the suite's (pytest
``--junitxml``): its test cases give the slowest tests and files. Each test's
time is its set-up, call and tear-down (a module fixture's cost lands on the
first test that uses it). With pytest-xdist the files run on two workers, so
the files' times add up to about twice the suite's wall time.

The budgets are the issues' (CI-headroom, #53): the whole run at most 45
minutes on a quiet 2-core machine that ran it before, of which the suite 25,
and at most 60 on a machine's first run (cold compiler, Inductor and pip
caches: the run is a first run when ccache compiled more than it found); a step
over its budget is printed as a warning (a report, never a failure: the
machines are noisy, and CI's own limit, 90 minutes, is the only hard one).
"""

import argparse
import collections
import pathlib
import sys
import xml.etree.ElementTree as ET

# Minutes on a quiet 2-core machine (CI stops at 90).
BUDGET_TOTAL_MIN = 45
BUDGET_SUITE_MIN = 25
# A machine's first run: everything compiles, Inductor's and pip's caches are
# empty (docs/testing.md, "CI's time").
BUDGET_FIRST_RUN_MIN = 60
# The step whose time is the suite's (the name .ci/run gives it).
SUITE_STEP = "suite"


def read_steps(path: pathlib.Path):
    steps = []
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) == 3:
                steps.append((parts[0], float(parts[1]), float(parts[2])))
    return steps


def read_cases(path: pathlib.Path):
    """[(nodeid, seconds, outcome)] of every test case in a JUnit file."""
    if not path.exists():
        return []
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        cls, name = case.get("classname", ""), case.get("name", "")
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = child.tag
        cases.append((f"{cls}::{name}", float(case.get("time", 0) or 0), outcome))
    return cases


def module_of(classname_and_name: str) -> str:
    """tests.device.test_streams.TestX::test_y -> tests/device/test_streams.py"""
    dotted = classname_and_name.split("::")[0]
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        if parts[i - 1].startswith("test_"):
            return "/".join(parts[:i]) + ".py"
    return dotted


def minutes(s: float) -> str:
    return f"{s / 60:5.1f}"


def first_run(ccache):
    """Whether ccache's line ("N compiles from the cache, M compiled") says a
    machine's first run: more compiled than found in the cache."""
    try:
        hits, misses = (int(part.split()[0]) for part in ccache.split(","))
    except (AttributeError, ValueError):
        return False
    return misses > hits


def report(steps, cases, total_s=None, ccache=None, top=25, out=sys.stdout):
    w = out.write
    warnings = []
    cold = first_run(ccache)
    if steps:
        w("=== CI time by step (minutes; start is minutes into the run)\n")
        w(f"{'start':>6} {'min':>6}  step\n")
        for name, start, secs in sorted(steps, key=lambda s: s[1]):
            w(f"{start / 60:6.1f} {secs / 60:6.1f}  {name}\n")
        if total_s is None:
            total_s = max(start + secs for _, start, secs in steps)
        suite = [secs for name, _, secs in steps if name == SUITE_STEP]
        # The suite's budget is a warm run's (a first run compiles the
        # scaffold test's tree and Inductor's kernels from nothing).
        if suite and suite[0] > BUDGET_SUITE_MIN * 60 and not cold:
            warnings.append(f"the suite took {suite[0] / 60:.1f} min, over its budget of "
                            f"{BUDGET_SUITE_MIN} min on a quiet machine")
    if total_s is not None:
        if cold:
            budget, which = BUDGET_FIRST_RUN_MIN, "a machine's first run (cold caches)"
        else:
            budget, which = BUDGET_TOTAL_MIN, "a machine that ran it before"
        w(f"total: {total_s / 60:.1f} min (budget {budget} min on a quiet 2-core "
          f"machine, {which}; CI stops at 90)\n")
        if total_s > budget * 60:
            warnings.append(f"the run took {total_s / 60:.1f} min, over its budget of "
                            f"{budget} min on a quiet machine, {which}")
    if cases:
        counts = collections.Counter(o for _, _, o in cases)
        w(f"=== the suite: {len(cases)} test cases ("
          + ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
          + f"), {sum(t for _, t, _ in cases) / 60:.1f} test-minutes\n")
        w(f"--- the {top} slowest tests (seconds)\n")
        for nodeid, secs, _ in sorted(cases, key=lambda c: -c[1])[:top]:
            w(f"{secs:7.1f}  {nodeid}\n")
        by_file = collections.defaultdict(lambda: [0.0, 0])
        for nodeid, secs, _ in cases:
            entry = by_file[module_of(nodeid)]
            entry[0] += secs
            entry[1] += 1
        w(f"--- the {top} slowest files (minutes, tests)\n")
        for path, (secs, n) in sorted(by_file.items(), key=lambda kv: -kv[1][0])[:top]:
            w(f"{minutes(secs)} {n:5d}  {path}\n")
    if ccache:
        w(f"--- ccache: {ccache.strip()}\n")
    for msg in warnings:
        w(f"WARNING (CI budget): {msg}: see the slowest steps and tests above\n")
    return warnings


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("times", type=pathlib.Path)
    p.add_argument("junit", type=pathlib.Path, nargs="?")
    p.add_argument("--total", type=float, help="the run's wall seconds")
    p.add_argument("--ccache", help="a one-line ccache summary")
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args(argv)
    report(read_steps(a.times), read_cases(a.junit) if a.junit else [], a.total, a.ccache, a.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
