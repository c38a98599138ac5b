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

    # The caching allocator poisons its free memory in ASan builds
    # (OpenRegAllocatorAsan.h): a block's bytes past what was requested, free
    # blocks once their stream reaches the free, new segments whole.

    @pytest.mark.skipif(not GLUE, reason="runs under make check-asan-glue")
    def test_asan_reports_a_copy_into_the_free_block_next_door(self):
        # A copy that reads past its tensor's 64 bytes, into the rest of its
        # 512-byte block and the free one after it: the runtime only checks
        # that the range lies in the 2 MiB segment; ASan's memmove check
        # reports it.
        res = self.run_asan(
            "import ctypes, torch\n"
            "from torch_openreg import _runtime as rt\n"
            "x = torch.ones(16, device='openreg')\n"
            "torch.openreg.synchronize()\n"
            "buf = ctypes.create_string_buffer(1024)\n"
            "rt.memcpy(ctypes.addressof(buf), x.data_ptr(), 1024, rt.DeviceToHost)\n")
        assert res.returncode != 0
        assert "ERROR: AddressSanitizer: use-after-poison" in res.stderr, res.stderr[-3000:]

    @pytest.mark.skipif(not GLUE, reason="runs under make check-asan-glue")
    def test_asan_reports_a_kernel_writing_one_element_past_its_tensor(self):
        # fill_i32, a C++ kernel launched through the runtime's C API, given
        # 101 elements for a 100-element tensor: the 401st..404th bytes lie
        # in the block's unrequested tail.
        res = self.run_asan(
            "import torch\n"
            "from torch_openreg import _runtime as rt\n"
            "x = torch.zeros(100, dtype=torch.int32, device='openreg')\n"
            "rt.launch_fill_i32(0, x.data_ptr(), 101, 7, sync=True)\n")
        assert res.returncode != 0
        assert "ERROR: AddressSanitizer: use-after-poison" in res.stderr, res.stderr[-3000:]
        assert "WRITE of size 4" in res.stderr

    @pytest.mark.skipif(not GLUE, reason="runs under make check-asan-glue")
    def test_asan_reports_a_use_after_free_behind_a_forgotten_record_stream(self):
        # A side stream copies x out after a sleep; the host frees x at once
        # without record_stream, so x's own (idle) stream has reached the
        # free and the block is poisoned before the side stream reads it.
        res = self.run_asan(self.SIDE_STREAM_COPY.format(record=""))
        assert res.returncode != 0
        assert "ERROR: AddressSanitizer: use-after-poison" in res.stderr, res.stderr[-3000:]

    @pytest.mark.skipif(not GLUE, reason="runs under make check-asan-glue")
    def test_record_stream_given_is_not_reported(self):
        res = self.run_asan(self.SIDE_STREAM_COPY.format(record="x.record_stream(s)"))
        assert res.returncode == 0, res.stderr[-3000:]
        assert "copied: [0.0, 1.0, 2.0, 3.0]" in res.stdout

    @pytest.mark.skipif(not GLUE, reason="runs under make check-asan-glue")
    def test_a_block_freed_while_its_stream_still_reads_it_is_not_reported(self):
        # The queued copy still reads x after its free; the poison waits
        # for the stream. The block is reused on that stream before the
        # poison lands, and the poison leaves the live tensor alone.
        res = self.run_asan(
            "import torch\n"
            "x = torch.arange(1 << 14, dtype=torch.float32, device='openreg')\n"
            "pinned = torch.empty(1 << 14, pin_memory=True)\n"
            "torch.openreg._sleep(300000)\n"
            "pinned.copy_(x, non_blocking=True)\n"
            "ptr = x.data_ptr()\n"
            "del x\n"
            "y = torch.empty(1 << 14, device='openreg')\n"
            "print('reused:', y.data_ptr() == ptr)\n"
            "torch.openreg.synchronize()\n"
            "y.fill_(7.0)\n"
            "print('copied:', pinned[:3].tolist(), y[:2].cpu().tolist())\n")
        assert res.returncode == 0, res.stderr[-3000:]
        assert "reused: True" in res.stdout
        assert "copied: [0.0, 1.0, 2.0] [7.0, 7.0]" in res.stdout

    @pytest.mark.skipif(not GLUE, reason="runs under make check-asan-glue")
    def test_memory_allocated_inside_a_running_kernel_is_usable_at_once(self):
        # normal_ fills through std_normals, whose scratch tensor is
        # allocated while the kernel runs on its stream: it is unpoisoned
        # at the allocation, not when the (busy) stream gets there.
        res = self.run_asan(
            "import torch\n"
            "torch.manual_seed(0)\n"
            "a = torch.empty(4096, device='openreg').normal_()\n"
            "torch.manual_seed(0)\n"
            "b = torch.empty(4096, device='openreg').normal_()\n"
            "print('equal:', torch.equal(a.cpu(), b.cpu()), abs(a.mean().item()) < 0.1)\n")
        assert res.returncode == 0, res.stderr[-3000:]
        assert "equal: True True" in res.stdout

    SIDE_STREAM_COPY = (
        "import torch\n"
        "s = torch.openreg.Stream()\n"
        "x = torch.arange(1 << 16, dtype=torch.float32, device='openreg')\n"
        "pinned = torch.empty(1 << 16, pin_memory=True)\n"
        "s.wait_stream(torch.openreg.current_stream())\n"
        "with torch.openreg.stream(s):\n"
        "    torch.openreg._sleep(300000)\n"
        "    pinned.copy_(x, non_blocking=True)\n"
        "    {record}\n"
        "del x\n"
        "torch.empty(10, device='openreg')  # the allocator's next call frees x\n"
        "torch.openreg.synchronize()\n"
        "print('copied:', pinned[:4].tolist())\n")

    @staticmethod
    def run_asan(code):
        return run_python(code, timeout=180,
                          env=sanitizer_reports_to_stderr("ASAN_OPTIONS", "UBSAN_OPTIONS"))

    def test_normal_builds_do_not_carry_the_planted_bug(self):
        if GLUE:
            pytest.skip("the sanitizer build carries it")
        import torch_openreg

        assert not hasattr(torch_openreg._C, "_planted_heap_overflow")
        assert not hasattr(torch_openreg._C, "_planted_signed_overflow")
