"""The sanitizer runs check something (make check-asan / make check-tsan).

Under a sanitizer build, the runtime test module carries two planted bugs; a
child process that runs one must be stopped with the sanitizer's report. A
harness that loads the wrong build, preloads nothing or swallows reports
would let these pass silently, and with them every other test of the run.
Outside a sanitizer run the planted bugs are not compiled in: skipped.
"""

import os

import pytest

from tests._subprocess import run_python, sanitizer_reports_to_stderr
from tests.runtime._helpers import CHILD_PRELUDE, rt
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

SANITIZER = os.environ.get("OPENREG_TEST_SANITIZER", "")


@pytest.mark.runtime
class TestSanitizerHarness:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.skipif(SANITIZER != "asan", reason="runs under make check-asan (an ASan/UBSan build)")
    def test_asan_reports_a_planted_heap_overflow(self):
        assert hasattr(rt, "_planted_heap_overflow"), "the ASan build lacks its self-test"
        res = run_python(CHILD_PRELUDE + "rt._planted_heap_overflow()\n", timeout=120,
                         env=sanitizer_reports_to_stderr("ASAN_OPTIONS"))
        assert res.returncode != 0
        assert "ERROR: AddressSanitizer: heap-buffer-overflow" in res.stderr, res.stderr[-3000:]
        assert "runtime_module.cpp" in res.stderr  # symbolised, in our code

    @pytest.mark.skipif(SANITIZER != "tsan", reason="runs under make check-tsan (a TSan build)")
    def test_tsan_reports_a_planted_race(self):
        assert hasattr(rt, "_planted_race"), "the TSan build lacks its self-test"
        res = run_python(CHILD_PRELUDE + "rt._planted_race()\n", timeout=120,
                         env=sanitizer_reports_to_stderr("TSAN_OPTIONS"))
        assert res.returncode != 0
        assert "WARNING: ThreadSanitizer: data race" in res.stderr, res.stderr[-3000:]
        assert "runtime_module.cpp" in res.stderr

    def test_normal_builds_do_not_carry_the_planted_bugs(self):
        if SANITIZER:
            pytest.skip("a sanitizer build carries them")
        assert not hasattr(rt, "_planted_heap_overflow") and not hasattr(rt, "_planted_race")
