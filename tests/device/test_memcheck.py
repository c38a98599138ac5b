"""Memcheck (OPENREG_MEMCHECK, docs/memcheck.md): planted memory bugs are
reported with their kind, kernel and allocation, as compute-sanitizer's
memcheck reports them on a GPU; correct code is not.

Every case runs in a child process: memcheck is chosen when the runtime
loads, and a report stops the process by default.
"""

import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from tests._subprocess import run_python
from tests.target import HW

pytestmark = pytest.mark.openreg_only  # openreg's own debugging mode

TIMEOUT = 120

# A torch.library operator whose CPU kernel (run on device memory by
# openreg's fallback, as any CPU kernel is) accesses a byte it does not own:
# the planted bug.
BUGGY_OPS = textwrap.dedent("""\
    import ctypes, sys, torch
    lib = torch.library.Library("mcbug", "DEF")
    lib.define("past_end(Tensor x) -> Tensor")
    lib.define("before_start(Tensor x) -> Tensor")
    lib.define("address_of(Tensor x) -> int")
    lib.define("read_at(Tensor x, int address) -> Tensor")

    def past_end(x):  # writes one element past its output
        out = torch.empty_like(x)
        out.copy_(x)
        ctypes.c_float.from_address(out.data_ptr() + out.numel() * 4).value = 1.0
        return out

    def before_start(x):  # reads the element before its input
        return x + ctypes.c_float.from_address(x.data_ptr() - 4).value

    def read_at(x, address):  # reads what a pointer kept from an earlier call points at
        return x + ctypes.c_float.from_address(address).value

    def past_end_in_a_helper_thread(x):  # as a kernel fanning out to intra-op threads
        import threading
        out = torch.empty_like(x)
        out.copy_(x)
        end = out.data_ptr() + out.numel() * 4
        t = threading.Thread(target=lambda: setattr(ctypes.c_float.from_address(end), "value", 1.0))
        t.start()
        t.join()
        return out

    lib.define("past_end_in_a_helper_thread(Tensor x) -> Tensor")
    lib.impl("past_end_in_a_helper_thread", past_end_in_a_helper_thread, "CPU")
    lib.impl("past_end", past_end, "CPU")
    lib.impl("before_start", before_start, "CPU")
    lib.impl("address_of", lambda x: x.data_ptr(), "CPU")
    lib.impl("read_at", read_at, "CPU")
""")


@pytest.fixture(scope="module")
def planted_cpp_op(tmp_path_factory):
    """memcheck_planted_op.cpp built as a vendor builds a C++ operator
    library against the glue's headers (about 10 s): the shared object's
    path, for torch.ops.load_library."""
    import torch_openreg
    from torch.utils import cpp_extension

    root = Path(__file__).resolve().parents[2]
    lib = Path(torch_openreg.__file__).parent / "lib"
    with pytest.MonkeyPatch.context() as mp:  # the venv's ninja, where there is no other
        mp.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
        return cpp_extension.load(
            name="memcheck_planted_op", sources=[str(root / "tests/device/memcheck_planted_op.cpp")],
            extra_include_paths=[str(root / "openreg_python/csrc"), str(root / "openreg_runtime/include")],
            extra_cflags=["-O1"],
            extra_ldflags=[f"-L{lib}", "-ltorch_openreg", "-lopenreg", f"-Wl,-rpath,{lib}"],
            is_python_module=False, build_directory=str(tmp_path_factory.mktemp("planted_op")))


def run(code: str, **env):
    env = {"OPENREG_MEMCHECK": "1", **env}
    return run_python(BUGGY_OPS + textwrap.dedent(code), timeout=TIMEOUT, env=env)


def assert_aborted_with(p, *parts):
    assert p.returncode == -signal.SIGABRT, (p.returncode, p.stdout, p.stderr[-3000:])
    for part in parts:
        assert part in p.stderr, (part, p.stderr[-3000:])
    assert "========= ERROR SUMMARY: 1 error" in p.stderr


@pytest.mark.device
class TestMemcheckReports:
    hw_classification = HW.ACCELERATOR

    def test_write_past_the_end_stops_the_process(self):
        p = run("""
            x = torch.arange(10, dtype=torch.float32, device="openreg")
            print("before", flush=True)
            torch.ops.mcbug.past_end(x)
            print("not reached", flush=True)
        """)
        assert "before" in p.stdout and "not reached" not in p.stdout
        assert_aborted_with(
            p, "OPENREG MEMCHECK: invalid write by kernel 'mcbug::past_end'",
            "is 0 bytes after the end of allocation", "of 40 bytes", "out of bounds")

    def test_an_access_from_another_thread_of_the_kernel(self):
        p = run("""
            x = torch.arange(10, dtype=torch.float32, device="openreg")
            torch.ops.mcbug.past_end_in_a_helper_thread(x)
        """)
        assert_aborted_with(
            p, "invalid write by kernel 'mcbug::past_end_in_a_helper_thread'",
            "0 bytes after the end of allocation", "by another thread than the kernel's own")

    def test_an_access_outside_every_allocation_is_reported_then_the_process_stops(self):
        # A view keeps its offset into a storage that was resized to 0: the
        # kernel reads an address of no allocation, which no page can be
        # opened for (compute-sanitizer: "Address ... is out of bounds").
        # Raise mode stops too: the kernel cannot go on.
        for mode in ("abort", "raise"):
            p = run("""
                x = torch.arange(4096, dtype=torch.float32, device="openreg")
                v = x[1024:]
                x.untyped_storage().resize_(0)
                print("before", flush=True)
                v.add(1)
                print("not reached", flush=True)
            """, OPENREG_MEMCHECK_ON_ERROR=mode)
            assert "before" in p.stdout and "not reached" not in p.stdout
            assert p.returncode == -signal.SIGSEGV, (mode, p.returncode, p.stderr[-3000:])
            assert "OPENREG MEMCHECK: invalid read by kernel 'aten::add" in p.stderr, p.stderr[-3000:]
            assert "is out of bounds: it is in no allocation of any openreg device" in p.stderr
            assert "the process stops" in p.stderr

    def test_raise_mode_reports_as_a_python_error_and_the_process_goes_on(self):
        p = run("""
            x = torch.arange(10, dtype=torch.float32, device="openreg")
            try:
                torch.ops.mcbug.past_end(x)
            except RuntimeError as e:
                print("raised:", e)
            print("after:", (x * 2).cpu().tolist())
        """, OPENREG_MEMCHECK_ON_ERROR="raise")
        assert p.returncode == 0, p.stderr[-3000:]
        assert "raised: openreg error: orErrorIllegalAddress" in p.stdout
        assert "invalid write by kernel 'mcbug::past_end'" in p.stdout
        assert "0 bytes after the end of allocation" in p.stdout
        assert "after: [0.0, 2.0, 4.0" in p.stdout

    def test_read_before_the_start_with_the_guard_at_the_start(self):
        p = run("""
            x = torch.arange(10, dtype=torch.float32, device="openreg")
            torch.ops.mcbug.before_start(x)
        """, OPENREG_MEMCHECK_GUARD="start")
        assert_aborted_with(
            p, "invalid read by kernel 'mcbug::before_start'",
            "is 4 bytes before allocation", "of 40 bytes", "out of bounds")

    def test_read_of_a_freed_tensor_from_a_later_kernel(self):
        p = run("""
            t = torch.ones(16, device="openreg")
            stale = torch.ops.mcbug.address_of(t)
            del t
            x = torch.zeros(4, device="openreg")
            torch.ops.mcbug.read_at(x, stale + 8)
        """)
        assert_aborted_with(
            p, "invalid read by kernel 'mcbug::read_at'",
            "is 8 bytes inside allocation", "of 64 bytes", "which was freed: use after free")

    def test_the_report_shows_where_the_allocation_was_made_and_freed(self):
        p = run("""
            torch.openreg.memory._record_memory_history()
            t = torch.ones(16, device="openreg")           # allocated here
            stale = torch.ops.mcbug.address_of(t)
            del t                                          # freed here
            torch.ops.mcbug.read_at(torch.zeros(4, device="openreg"), stale)
        """)
        assert_aborted_with(p, "which was freed: use after free",
                            "allocated at (Python, most recent call first):",
                            "freed at (Python, most recent call first):")
        # The innermost Python frame of each: the child's own lines.
        source = p.args[-1].splitlines()
        for heading, marker in [("allocated at (Python", "# allocated here"),
                                ("freed at (Python", "# freed here")]:
            frame = p.stderr.split(heading)[1].split("\n")[1]
            line = next(i for i, text in enumerate(source, 1) if marker in text)
            assert f"<string>:{line} in <module>" in frame, (heading, line, p.stderr[-3000:])

    def test_without_memory_history_the_report_says_how_to_get_stacks(self):
        p = run("""
            x = torch.arange(10, dtype=torch.float32, device="openreg")
            torch.ops.mcbug.past_end(x)
        """)
        assert_aborted_with(p, "stacks: none recorded; call "
                               "torch.openreg.memory._record_memory_history() first")

    def test_a_cpp_torch_library_operator_writing_past_its_output(self, planted_cpp_op):
        # TORCH_LIBRARY(planted, ...), its PrivateUse1 kernel launched through
        # run_on_device_of as the custom-operator examples are: one float
        # past its 100-element output.
        p = run(f"""
            torch.ops.load_library({str(planted_cpp_op)!r})
            x = torch.ones(100, device="openreg")
            torch.ops.planted.fill_past_end(x)
        """)
        assert_aborted_with(p, "invalid write by kernel 'planted::fill_past_end'",
                            "is 0 bytes after the end of allocation", "of 400 bytes", "out of bounds")

    def test_a_cpp_kernel_writing_past_its_buffer(self):
        # A C++ kernel launched through the runtime's C API (fill_i32 fills
        # n int32 through the kernel view): given one element too many.
        p = run_python(textwrap.dedent("""
            from torch_openreg import _runtime as rt
            p = rt.malloc(4 * 100)
            rt.launch_fill_i32(0, p, 101, 7, sync=True)
        """), timeout=TIMEOUT, env={"OPENREG_MEMCHECK": "1"})
        assert_aborted_with(p, "invalid write by kernel 'fill_i32'",
                            "is 0 bytes after the end of allocation", "of 400 bytes")

    def test_an_asynchronous_cpp_kernel_fails_its_stream_in_raise_mode(self):
        p = run_python(textwrap.dedent("""
            from torch_openreg import _runtime as rt
            p = rt.malloc(4 * 100)
            rt.launch_fill_i32(0, p, 101, 7, sync=False)
            try:
                rt.device_synchronize()
            except rt.OpenRegError as e:
                print("raised:", e)
        """), timeout=TIMEOUT, env={"OPENREG_MEMCHECK": "1", "OPENREG_MEMCHECK_ON_ERROR": "raise"})
        assert p.returncode == 0, p.stderr[-3000:]
        assert "raised:" in p.stdout and "orErrorIllegalAddress" in p.stdout
        assert "invalid write by kernel 'fill_i32'" in p.stdout


# A side stream copies `x` out after a sleep; the host drops `x` at once.
SIDE_STREAM_COPY = """
    s = torch.openreg.Stream()
    x = torch.arange(1 << 16, dtype=torch.float32, device="openreg")
    pinned = torch.empty(1 << 16, pin_memory=True)
    s.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(s):
        torch.openreg._sleep(600000)
        pinned.copy_(x, non_blocking=True)
        {record}
    del x
    torch.empty(10, device="openreg")  # the allocator's next call frees x
    try:
        torch.openreg.synchronize()
        print("copied:", pinned[:4].tolist())
    except RuntimeError as e:
        print("raised:", e)
"""


@pytest.mark.device
class TestMemcheckStreamOrder:
    hw_classification = HW.ACCELERATOR

    def test_use_after_free_behind_a_forgotten_record_stream(self):
        p = run(SIDE_STREAM_COPY.format(record="pass"))
        assert p.returncode == 0, p.stderr[-3000:]
        assert "raised:" in p.stdout and "orMemcpyAsync" in p.stdout
        assert "which was freed: use after free" in p.stdout

    def test_record_stream_keeps_the_block_alive(self):
        p = run(SIDE_STREAM_COPY.format(record="x.record_stream(s)"))
        assert p.returncode == 0, p.stderr[-3000:]
        assert "copied: [0.0, 1.0, 2.0, 3.0]" in p.stdout

    def test_a_free_while_its_own_stream_still_uses_the_block_is_not_reported(self):
        p = run("""
            x = torch.arange(1 << 16, dtype=torch.float32, device="openreg")
            pinned = torch.empty(1 << 16, pin_memory=True)
            torch.openreg._sleep(600000)
            pinned.copy_(x, non_blocking=True)
            del x
            torch.empty(10, device="openreg")
            torch.openreg.synchronize()
            print("copied:", pinned[:4].tolist())
        """)
        assert p.returncode == 0, p.stderr[-3000:]
        assert "copied: [0.0, 1.0, 2.0, 3.0]" in p.stdout
        assert "MEMCHECK" not in p.stderr


@pytest.mark.device
class TestMemcheckAllocator:
    hw_classification = HW.ACCELERATOR

    def test_no_caching_each_allocation_is_its_exact_size(self):
        p = run("""
            m = torch.openreg.memory_allocated
            x = torch.empty(10, device="openreg")
            y = torch.empty(1000, device="openreg")
            print("allocated:", m(), "page end:", (x.data_ptr() + 40) % 4096,
                  (y.data_ptr() + 4000) % 4096)
            del x, y
            torch.openreg.synchronize()
            torch.empty(0, device="openreg")
            z = torch.empty(1, device="openreg")  # processes the pending frees
            print("reserved:", torch.openreg.memory_reserved())
        """)
        assert p.returncode == 0, p.stderr[-3000:]
        assert "allocated: 4040 page end: 0 0" in p.stdout
        assert "reserved: 4" in p.stdout

    def test_the_quarantine_keeps_freed_memory_out_of_use(self):
        # 64 KiB of quarantine: a freed 4-byte block's pages come back only
        # after 8 more (2 pages each) were freed.
        p = run_python(textwrap.dedent("""
            from torch_openreg import _runtime as rt
            first = rt.malloc(4)
            rt.free(first)
            seen = []
            for _ in range(12):
                q = rt.malloc(4)
                seen.append(q == first)
                rt.free(q)
            print("reused at:", seen.index(True) if True in seen else None)
        """), timeout=TIMEOUT,
            env={"OPENREG_MEMCHECK": "1", "OPENREG_MEMCHECK_QUARANTINE": "64K"})
        assert p.returncode == 0, p.stderr[-3000:]
        assert "reused at: None" not in p.stdout, p.stdout
        assert int(p.stdout.split("reused at:")[1]) >= 7, p.stdout

    @pytest.mark.parametrize("var, value, expected", [
        ("OPENREG_MEMCHECK", "yes", "expected 0, 1, memcheck or initcheck"),
        ("OPENREG_MEMCHECK_ON_ERROR", "warn", "expected abort or raise"),
        ("OPENREG_MEMCHECK_GUARD", "middle", "expected end or start"),
        ("OPENREG_MEMCHECK_QUARANTINE", "lots", "a size in bytes"),
    ])
    def test_invalid_settings_fail_initialisation_by_name(self, var, value, expected):
        p = run_python(textwrap.dedent("""
            import torch
            try:
                torch.empty(1, device="openreg")
            except RuntimeError as e:
                print("raised:", e)
        """), timeout=TIMEOUT, env={"OPENREG_MEMCHECK": "1", var: value})
        assert p.returncode == 0, p.stderr[-3000:]
        assert f"{var}='{value}' is invalid" in p.stdout, p.stdout
        assert expected in p.stdout


def run_init(code: str, **env):
    return run(code, OPENREG_MEMCHECK="initcheck", **env)


@pytest.mark.device
class TestInitcheck:
    """OPENREG_MEMCHECK=initcheck: reads of device pages nothing has written."""

    hw_classification = HW.ACCELERATOR

    def test_device_to_host_copy_of_uninitialised_memory(self):
        p = run_init("""
            x = torch.empty(10, device="openreg")
            x.cpu()
        """)
        assert_aborted_with(p, "uninitialised read by orMemcpy", "0 bytes inside allocation",
                            "of 40 bytes", "in a page nothing has written since it was allocated")

    def test_a_kernel_reading_uninitialised_memory(self):
        p = run_init("""
            x = torch.empty(10, device="openreg")
            x + 1
        """)
        assert_aborted_with(p, "uninitialised read by kernel 'aten::add'", "of 40 bytes")

    def test_raise_mode(self):
        p = run_init("""
            x = torch.empty(10, device="openreg")
            try:
                x.cpu()
            except RuntimeError as e:
                print("raised:", e)
            x.fill_(3)
            print("after:", x.cpu()[:2].tolist())
        """, OPENREG_MEMCHECK_ON_ERROR="raise")
        assert p.returncode == 0, p.stderr[-3000:]
        assert "raised:" in p.stdout and "uninitialised read by orMemcpy" in p.stdout
        assert "after: [3.0, 3.0]" in p.stdout

    def test_memory_written_by_kernels_copies_and_memsets_is_not_reported(self):
        p = run_init("""
            a = torch.empty(10, device="openreg")
            a.fill_(1)                                        # a kernel's write
            b = torch.empty(10, device="openreg")
            b.copy_(torch.arange(10.))                        # a host-to-device copy
            c = torch.zeros(10, device="openreg")             # a memset or a kernel
            d = a * 2 + b + c                                 # kernel outputs
            e = torch.empty(10, device="openreg")
            e.copy_(d)                                        # a device-to-device copy
            print("sum:", e.sum().item())
        """)
        assert p.returncode == 0, p.stderr[-3000:]
        assert "sum: 65.0" in p.stdout
        assert "MEMCHECK" not in p.stderr

    def test_the_granularity_is_a_page_of_an_allocation(self):
        # 8 KiB: two pages of its own. Writing the first page does not make
        # the second one initialised.
        p = run_init("""
            x = torch.empty(2048, device="openreg")
            x[:1024].fill_(1)
            x.cpu()
        """)
        assert_aborted_with(p, "uninitialised read by orMemcpy", "4096 bytes inside allocation",
                            "of 8192 bytes")
