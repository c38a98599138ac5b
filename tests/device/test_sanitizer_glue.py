"""The glue's ASan run checks the glue (make check-asan-glue).

That run builds the whole project with ASan + UBSan into build-asan-glue/,
installs it there and puts it first on PYTHONPATH
(``tools/sanitizers/run.py asan-glue``, which names the install directory in
``OPENREG_TEST_SANITIZER_GLUE``). If the venv's uninstrumented package were
imported instead, every test of the run would pass and prove nothing: here
the package, its extension modules and every library of ours mapped into the
process must come from the sanitizer build, and the bugs planted in the
glue's ``_C`` (sanitizer builds only) must be reported, one by ASan, one by
UBSan. Outside that run the planted bugs must not be compiled in.
"""

import os

import pytest

from tests._subprocess import run_python, sanitizer_reports_to_stderr
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

GLUE = os.environ.get("OPENREG_TEST_SANITIZER_GLUE", "")

# Our libraries that `import torch_openreg` maps (the Inductor ones load
# only when torch.compile first needs them).
LIBRARIES = {"libopenreg.so", "libtorch_openreg.so", "libopenreg_profiler.so", "liboccl.so",
             "libtorch_openreg_occl.so"}


def mapped_files():
    with open("/proc/self/maps") as f:
        return {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6}


@pytest.mark.device
@pytest.mark.smoke
class TestSanitizerGlue:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.skipif(not GLUE, reason="runs under make check-asan-glue")
    def test_the_instrumented_package_is_loaded(self):
        import torch  # noqa: F401
        import torch_openreg
        import torch_openreg.distributed  # noqa: F401

        package = os.path.join(GLUE, "torch_openreg")
        assert os.path.dirname(os.path.abspath(torch_openreg.__file__)) == package
        assert os.path.dirname(os.path.abspath(torch_openreg._C.__file__)) == package
        files = mapped_files()
        # Every shared object of a torch_openreg package, wherever it lies.
        ours = {f for f in files if os.path.basename(f) in LIBRARIES
                or (f.endswith(".so") and f"{os.sep}torch_openreg{os.sep}" in f)}
        assert {os.path.basename(f) for f in ours} >= LIBRARIES, sorted(ours)
        assert any(os.path.basename(f).startswith("_C.") for f in ours), sorted(ours)
        stray = sorted(f for f in ours if not f.startswith(package + os.sep))
        assert not stray, f"libraries of ours loaded from outside {package}: {stray}"
        assert any(os.path.basename(f).startswith("libasan.so") for f in files)

    @pytest.mark.skipif(not GLUE, reason="runs under make check-asan-glue")
    def test_asan_reports_a_planted_heap_overflow_in_the_glue(self):
        import torch_openreg

        assert hasattr(torch_openreg._C, "_planted_heap_overflow"), \
            "the ASan glue build lacks its self-test"
        res = run_python("import torch, torch_openreg\n"
                         "torch_openreg._C._planted_heap_overflow()\n",
                         timeout=180,
                         env=sanitizer_reports_to_stderr("ASAN_OPTIONS", "UBSAN_OPTIONS"))
        assert res.returncode != 0
        assert "ERROR: AddressSanitizer: heap-buffer-overflow" in res.stderr, res.stderr[-3000:]
        assert "Module.cpp" in res.stderr  # symbolised, in the glue

    @pytest.mark.skipif(not GLUE, reason="runs under make check-asan-glue")
    def test_ubsan_reports_a_planted_signed_overflow_in_the_glue(self):
        # UBSan is compiled into the glue too, and stops the process
        # (-fno-sanitize-recover=undefined).
        res = run_python("import torch, torch_openreg\n"
                         "torch_openreg._C._planted_signed_overflow(1)\n",
                         timeout=180,
                         env=sanitizer_reports_to_stderr("ASAN_OPTIONS", "UBSAN_OPTIONS"))
        assert res.returncode != 0
        assert "runtime error: signed integer overflow" in res.stderr, res.stderr[-3000:]
        assert "Module.cpp" in res.stderr

    def test_normal_builds_do_not_carry_the_planted_bug(self):
        if GLUE:
            pytest.skip("the sanitizer build carries it")
        import torch_openreg

        assert not hasattr(torch_openreg._C, "_planted_heap_overflow")
        assert not hasattr(torch_openreg._C, "_planted_signed_overflow")
