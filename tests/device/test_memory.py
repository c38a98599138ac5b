"""The caching allocator, pinned memory and strict device memory."""

import gc

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import target
from tests._subprocess import run_python
from tests.target import DEVICE, HW, device

MB = 1 << 20


# Block sizes and reuse are the caching allocator's; memcheck mode has none
# (as CUDA tests skip them under PYTORCH_NO_CUDA_MEMORY_CACHING=1).
CACHING = "memcheck mode (docs/memcheck.md) bypasses the caching allocator"


def fresh():
    gc.collect()
    target.device_module.synchronize()
    target.device_module.empty_cache()
    target.device_module.reset_peak_memory_stats()


@pytest.mark.device
@pytest.mark.smoke
class TestAllocationStats:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.skipif(target.MEMCHECK, reason=CACHING)
    def test_allocated_tracks_tensors(self):
        fresh()
        base = target.device_module.memory_allocated()
        a = torch.empty(1000, dtype=torch.float32, device=DEVICE)  # 4000 B -> 4096 B block
        assert target.device_module.memory_allocated() == base + 4096
        b = torch.empty(3 * MB, dtype=torch.uint8, device=DEVICE)  # large pool
        assert target.device_module.memory_allocated() == base + 4096 + 3 * MB
        stats = target.device_module.memory_stats()
        assert stats["allocated_bytes.small_pool.current"] >= 4096
        assert stats["allocated_bytes.large_pool.current"] >= 3 * MB
        assert stats["allocation.all.current"] >= 2
        del a, b
        assert target.device_module.memory_allocated() == base

    def test_peak_and_reset(self):
        fresh()
        base = target.device_module.memory_allocated()
        x = torch.empty(8 * MB, dtype=torch.uint8, device=DEVICE)
        del x
        assert target.device_module.max_memory_allocated() >= base + 8 * MB
        target.device_module.reset_peak_memory_stats()
        assert target.device_module.max_memory_allocated() == target.device_module.memory_allocated()

    @pytest.mark.skipif(target.MEMCHECK, reason=CACHING)
    def test_reserved_includes_cache_and_empty_cache_releases(self):
        fresh()
        reserved0 = target.device_module.memory_reserved()
        x = torch.empty(30 * MB, dtype=torch.uint8, device=DEVICE)
        assert target.device_module.memory_reserved() >= reserved0 + 30 * MB
        del x
        assert target.device_module.memory_reserved() >= reserved0 + 30 * MB  # cached
        target.device_module.empty_cache()
        assert target.device_module.memory_reserved() == reserved0

    @pytest.mark.skipif(target.MEMCHECK, reason=CACHING)
    def test_free_block_is_reused(self):
        fresh()
        x = torch.empty(2048, device=DEVICE)
        ptr = x.data_ptr()
        del x
        y = torch.empty(2048, device=DEVICE)
        assert y.data_ptr() == ptr
        segments = target.device_module.memory_stats()["segment.all.current"]
        z = torch.empty(16, device=DEVICE)  # split from the same 2 MiB segment
        assert target.device_module.memory_stats()["segment.all.current"] == segments
        assert z.data_ptr() != y.data_ptr()

    @pytest.mark.openreg_only  # openreg's capacity (4 GiB)
    def test_accelerator_api_agrees(self):
        fresh()
        x = torch.ones(1234, device="openreg:1")
        assert torch.accelerator.memory_allocated(1) == torch.openreg.memory_allocated(1)
        assert torch.accelerator.memory_reserved(1) == torch.openreg.memory_reserved(1)
        assert torch.accelerator.max_memory_allocated(1) >= x.nbytes
        free, total = torch.accelerator.get_memory_info(1)
        assert (free, total) == torch.openreg.mem_get_info(1)
        assert total == 4 << 30 and free <= total - torch.openreg.memory_reserved(1)

    def test_devices_are_accounted_separately(self):
        fresh()
        before0 = target.device_module.memory_allocated(0)
        x = torch.empty(MB, dtype=torch.uint8, device=device(1))
        assert target.device_module.memory_allocated(0) == before0
        assert target.device_module.memory_allocated(1) >= MB
        del x

    @pytest.mark.skipif(target.MEMCHECK, reason=CACHING)
    def test_kernel_outputs_are_device_memory(self):
        fresh()
        a = torch.randn(1000, device=DEVICE)
        before = target.device_module.memory_allocated()
        b = a * 2  # produced by a kernel (on openreg, a CPU kernel running on device memory)
        assert b.device.type == DEVICE
        assert target.device_module.memory_allocated() == before + 4096
        assert target.device_module.get_device_properties(0).name


@pytest.mark.device
@pytest.mark.openreg_only  # openreg's message, capacity and OPENREG_DEVICE_MEMORY
class TestOutOfMemory:
    hw_classification = HW.ACCELERATOR

    def test_oom_raises_and_process_recovers(self):
        fresh()
        keep = torch.ones(10, device="openreg")
        with pytest.raises(torch.OutOfMemoryError) as info:
            torch.empty(5 << 30, dtype=torch.uint8, device="openreg")
        msg = str(info.value)
        assert "openreg out of memory. Tried to allocate 5.00 GiB" in msg
        assert "total capacity of 4.00 GiB" in msg
        assert "is allocated by PyTorch" in msg and "reserved by PyTorch but unallocated" in msg
        assert torch.openreg.memory_stats()["num_ooms"] >= 1
        # Nothing was corrupted, and allocation still works.
        assert keep.sum().item() == 10
        assert torch.ones(1000, device="openreg").sum().item() == 1000

    @pytest.mark.skipif(target.MEMCHECK, reason=CACHING)
    def test_oom_flushes_cache_before_failing(self):
        code = """
import torch
MB = 1 << 20
xs = [torch.empty(20 * MB, dtype=torch.uint8, device='openreg') for _ in range(3)]
del xs  # 60 MiB cached, 4 MiB left
y = torch.empty(50 * MB, dtype=torch.uint8, device='openreg')  # fits only after a flush
s = torch.openreg.memory_stats()
print(s['num_alloc_retries'], s['num_ooms'])
try:
    torch.empty(100 * MB, dtype=torch.uint8, device='openreg')
except torch.OutOfMemoryError as e:
    print('OOM', 'Tried to allocate 100.00 MiB' in str(e))
print(torch.ones(3, device='openreg').sum().item())
"""
        r = run_python(code, env={"OPENREG_DEVICE_MEMORY": "64M"}, timeout=120)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.split("\n")
        assert lines[0] == "1 0"
        assert lines[1] == "OOM True"
        assert lines[2] == "3.0"

    def test_oom_in_kernel_output(self):
        code = """
import torch
a = torch.ones(6 << 20, dtype=torch.uint8, device='openreg')  # 6 MiB of 8
try:
    b = torch.cat([a, a])  # the kernel's output does not fit
except torch.OutOfMemoryError as e:
    print('OOM')
print(a[-100:].sum().item())
"""
        r = run_python(code, env={"OPENREG_DEVICE_MEMORY": "8M"}, timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["OOM", "100"]


@pytest.mark.device
class TestRecordStream:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.skipif(target.MEMCHECK, reason=CACHING)
    def test_block_not_reused_until_other_stream_done(self):
        fresh()
        # A size with a segment of its own (13 MiB and a bit: a 14 MiB
        # segment, no split): best fit cannot prefer a free block that
        # tensors of earlier tests in this worker leave in the pools.
        n = (13 << 20) // 4 + 1
        s = target.device_module.Stream()
        x = torch.empty(n, device=DEVICE)
        ptr = x.data_ptr()
        with target.device_module.stream(s):
            target.busy(100_000)  # s is busy for 100 ms
        x.record_stream(s)
        del x
        y = torch.empty(n, device=DEVICE)
        assert y.data_ptr() != ptr  # still in use by s
        s.synchronize()
        del y
        z = torch.empty(n, device=DEVICE)
        w = torch.empty(n, device=DEVICE)
        assert ptr in (z.data_ptr(), w.data_ptr())


# A record_stream whose stream the free cannot use: the free runs in the
# tensor's deleter, where an error can only terminate the process, so the
# call itself must refuse it; the tensor stays usable and frees cleanly.
RECORD_STREAM_CHILD = """
import gc, torch
from tests.target import DEVICE, device_module
x = torch.ones(1024, device=DEVICE)
for bad in {streams}:
    try:
        x.record_stream(bad)
    except RuntimeError as e:
        print("REFUSED", str(e).splitlines()[0])
    else:
        print("ACCEPTED", bad)
y = (x * 2).cpu()
del x
gc.collect()
device_module.synchronize()
print("SUM", float(y.sum()))
"""


@pytest.mark.device
class TestRecordStreamBadInput:
    hw_classification = HW.ACCELERATOR

    def run(self, streams):
        r = run_python(RECORD_STREAM_CHILD.format(streams=streams), timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout.splitlines()

    def test_stream_of_another_device_type_is_refused(self):
        out = self.run('[torch.Stream(device="cpu")]')
        assert out[0].startswith("REFUSED") and "got a stream on cpu" in out[0], out
        assert out[-1] == "SUM 2048.0", out

    @pytest.mark.openreg_only  # a stream id openreg never handed out, and its message
    def test_unknown_stream_id_is_refused(self):
        out = self.run("[torch.Stream(stream_id=999, device_index=0, "
                       "device_type=device_module.Stream().device_type)]")
        assert out[0] == "REFUSED openreg: unknown stream id 999 on device openreg:0", out
        assert out[-1] == "SUM 2048.0", out


@pytest.mark.device
class TestNegativeSizes:
    """Sizes that are negative (or wrap to 2^64 - k as size_t): refused with
    a RuntimeError, as the CPU refuses them, leaving no allocation behind.
    A block rounded up from 2^64 - 3 bytes wrapped to a small one that
    claimed 2^64 - 3 bytes."""
    hw_classification = HW.ACCELERATOR

    @given(n=st.integers(min_value=-(2 ** 62), max_value=-1))
    @settings(max_examples=15, deadline=None)
    def test_untyped_storage(self, n):
        for dev in ("cpu", DEVICE):
            with pytest.raises(RuntimeError, match="negative"):
                torch.UntypedStorage(n, device=dev)

    @given(n=st.integers(min_value=-(2 ** 60), max_value=-1))
    @settings(max_examples=15, deadline=None)
    @pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
    def test_typed_storage(self, n):
        for dev in ("cpu", DEVICE):
            with pytest.raises(RuntimeError, match="negative"):
                torch.TypedStorage(n, device=dev, dtype=torch.float32)

    @given(n=st.integers(min_value=-(2 ** 62), max_value=-1))
    @settings(max_examples=15, deadline=None)
    def test_storage_resize(self, n):
        fresh()
        base = target.device_module.memory_allocated()
        x = torch.arange(4.0, device=DEVICE)
        with pytest.raises(RuntimeError, match="negative"):
            torch.arange(4.0).untyped_storage().resize_(n)
        with pytest.raises(RuntimeError, match="negative"):
            x.untyped_storage().resize_(n)
        assert x.untyped_storage().nbytes() == 16
        assert x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
        del x
        assert target.device_module.memory_allocated() == base


@pytest.mark.device
@pytest.mark.smoke
class TestPinnedMemory:
    hw_classification = HW.ACCELERATOR

    def test_pin_memory(self):
        t = torch.randn(100)
        assert not t.is_pinned()
        p = t.pin_memory()
        assert p.is_pinned() and torch.equal(p, t)
        assert torch.empty(10, pin_memory=True).is_pinned()

    def test_empty_host_cache(self):
        p = torch.empty(1 << 16, pin_memory=True)
        del p
        torch.accelerator.empty_host_cache()
        assert torch.empty(10, pin_memory=True).is_pinned()

    def test_device_tensor_cannot_be_pinned(self):
        with pytest.raises(RuntimeError, match="Only dense CPU tensors can be pinned"):
            torch.empty(3, device=DEVICE, pin_memory=True)


@pytest.mark.device
@pytest.mark.openreg_only  # openreg's strict memory (OPENREG_STRICT_MEMORY)
class TestStrictMemory:
    hw_classification = HW.ACCELERATOR

    STRICT_READ = """
import ctypes, torch
t = torch.full((4,), 7.0, device='openreg')
print(hex(t.data_ptr()), flush=True)
print(ctypes.c_float.from_address(t.data_ptr()).value, flush=True)
"""

    def test_host_read_of_device_pointer_faults_with_diagnostic(self):
        r = run_python(self.STRICT_READ, timeout=120)
        assert r.returncode == -11, (r.returncode, r.stderr)
        addr = int(r.stdout.split()[0], 16)
        assert "illegal host access to device memory at address" in r.stderr
        assert f"{addr:#018x}" in r.stderr
        assert "device openreg:0" in r.stderr

    def test_read_succeeds_with_strict_mode_off(self):
        r = run_python(self.STRICT_READ, env={"OPENREG_STRICT_MEMORY": "0"}, timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split()[1] == "7.0"

    def test_properties_report_mode(self):
        r = run_python("import torch; print(torch.openreg.get_device_properties().strict_memory)",
                       env={"OPENREG_STRICT_MEMORY": "0"}, timeout=120)
        assert r.stdout.strip() == "False"
        assert torch.openreg.get_device_properties().strict_memory
