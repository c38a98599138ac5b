"""The table .ci/run ends with (tools/ci_report.py): steps, the slowest tests and
files of the suite's JUnit file, ccache's line, and the budget warnings."""

import subprocess
import sys
import textwrap

import pytest

from tests._subprocess import REPO
from tests.target import HW

# The project's own CI tooling (tests/target.py)
pytestmark = pytest.mark.openreg_only

TOOL = f"{REPO}/tools/ci_report.py"

JUNIT = textwrap.dedent("""\
    <?xml version="1.0" encoding="utf-8"?>
    <testsuites><testsuite name="pytest" tests="4">
      <testcase classname="tests.template.test_scaffold_build.TestScaffoldedBackend"
                name="test_builds" time="530.5"/>
      <testcase classname="tests.ops.test_opinfo.TestOpInfo" name="test_add[float32]" time="1.5"/>
      <testcase classname="tests.ops.test_opinfo.TestOpInfo" name="test_mul[float32]" time="2.5">
        <skipped message="no"/>
      </testcase>
      <testcase classname="tests.device.test_streams.TestStreams" name="test_query" time="0.5">
        <failure message="boom"/>
      </testcase>
    </testsuite></testsuites>
""")


def report(tmp_path, steps, *extra):
    times = tmp_path / "times.tsv"
    times.write_text("".join(f"{n}\t{s}\t{d}\n" for n, s, d in steps))
    junit = tmp_path / "suite.xml"
    junit.write_text(JUNIT)
    r = subprocess.run([sys.executable, TOOL, str(times), str(junit), *extra],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.ci
class TestCiReport:
    hw_classification = HW.GENERIC

    def test_steps_tests_files_and_ccache(self, tmp_path):
        out = report(tmp_path, [("build 2.15.0", 0, 84), ("suite", 120, 1342)],
                     "--total", "2400", "--ccache", "217 compiles from the cache, 2 compiled",
                     "--top", "2")
        lines = out.splitlines()
        assert "   2.0   22.4  suite" in lines and "   0.0    1.4  build 2.15.0" in lines
        assert ("total: 40.0 min (budget 45 min on a quiet 2-core machine, a machine that "
                "ran it before; CI stops at 90)" in out)
        assert "4 test cases (1 failure, 2 passed, 1 skipped)" in out
        slowest = lines[lines.index("--- the 2 slowest tests (seconds)") + 1:][:2]
        assert slowest[0].split() == ["530.5", "tests.template.test_scaffold_build."
                                      "TestScaffoldedBackend::test_builds"]
        assert slowest[1].split()[0] == "2.5"
        files = lines[lines.index("--- the 2 slowest files (minutes, tests)") + 1:][:2]
        assert files[0].split() == ["8.8", "1", "tests/template/test_scaffold_build.py"]
        assert files[1].split() == ["0.1", "2", "tests/ops/test_opinfo.py"]
        assert "--- ccache: 217 compiles from the cache, 2 compiled" in out
        assert "WARNING" not in out

    def test_a_step_over_its_budget_is_a_warning(self, tmp_path):
        out = report(tmp_path, [("suite", 60, 26 * 60), ("lane 1: check-tsan", 1620, 1800)])
        assert "total: 57.0 min" in out
        assert ("WARNING (CI budget): the suite took 26.0 min, over its budget of 25 min"
                in out)
        assert "WARNING (CI budget): the run took 57.0 min, over its budget of 45 min" in out

    @pytest.mark.parametrize("total, warned", [(3540, False), (3660, True)])
    def test_a_machines_first_run_has_its_own_budget(self, tmp_path, total, warned):
        # ccache compiled more than it found: a machine's first run, whose
        # budget is 60 minutes; the suite's 25 is a warm run's.
        out = report(tmp_path, [("suite", 300, 36 * 60)], "--total", str(total),
                     "--ccache", "46 compiles from the cache, 167 compiled")
        assert (f"total: {total / 60:.1f} min (budget 60 min on a quiet 2-core machine, "
                "a machine's first run (cold caches); CI stops at 90)") in out
        assert "the suite took" not in out
        assert ("WARNING (CI budget): the run took 61.0 min, over its budget of 60 min on a "
                "quiet machine, a machine's first run (cold caches)" in out) == warned
        assert out.count("WARNING") == int(warned)
