"""The torch.cuda-style APIs beyond the basics: torch.accelerator's device
capability, memory debugging (summaries, snapshots with stack traces that
torch.cuda._memory_viz renders), pinned-host statistics, the per-process
memory fraction, peer access, device properties and OutOfMemoryError."""

import gc
import pickle
import re
import uuid
from pathlib import Path

import pytest
import torch
from torch.cuda import _memory_viz

from tests import target
from tests._subprocess import REPO, run_python
from tests.target import DEVICE, HW, device

MB = 1 << 20
QUANTIZED = {torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4}


def fresh():
    gc.collect()
    target.device_module.synchronize()
    target.device_module.empty_cache()


@pytest.fixture
def history():
    """Record memory history for one test, and always stop afterwards."""
    fresh()
    yield target.device_module.memory._record_memory_history
    target.device_module.memory._record_memory_history(None)


def allocate_in_named_function(n):
    return torch.empty(n, dtype=torch.uint8, device=DEVICE)


def block_at(snapshot, addr):
    for seg in snapshot["segments"]:
        for b in seg["blocks"]:
            if b["address"] == addr:
                return seg, b
    raise AssertionError(f"no block at {addr:#x}")


@pytest.mark.device
class TestDeviceCapability:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.openreg_only  # openreg's set of dtypes
    def test_accelerator_capability(self):
        cap = torch.accelerator.get_device_capability()
        dtypes = cap["supported_dtypes"]
        for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64,
                   torch.complex128, torch.bool, torch.uint8, torch.int64, torch.uint16,
                   torch.float8_e4m3fn, torch.float8_e5m2):
            assert dt in dtypes, dt
        assert QUANTIZED <= dtypes  # tests/ops/test_quantized.py uses each of them
        assert torch.int4 not in dtypes and torch.bits8 not in dtypes  # no kernel converts them
        assert len(dtypes) == 26
        assert torch.accelerator.get_device_capability("openreg:1") == cap

    @pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
    def test_every_supported_dtype_is_allocatable_and_convertible(self):
        # (Quantized dtypes are made by quantizing, not by zeros/to: their
        # test is tests/ops/test_quantized.py.)
        for dt in torch.accelerator.get_device_capability()["supported_dtypes"] - QUANTIZED:
            x = torch.zeros(4, dtype=dt, device=DEVICE)
            assert x.dtype == dt and x.cpu().dtype == dt
            target = torch.complex64 if dt.is_complex else torch.float32
            # As the CPU converts (float8_e8m0fnu has no zero, for example).
            assert torch.equal(x.to(target).cpu(), torch.zeros(4, dtype=dt).to(target)), dt
            assert torch.ones(4, device=DEVICE).to(dt).dtype == dt

    @pytest.mark.openreg_only  # openreg's message
    def test_invalid_device(self):
        with pytest.raises(RuntimeError, match=r"Invalid openreg device index 7: 2 openreg device\(s\)"):
            torch.accelerator.get_device_capability("openreg:7")


@pytest.mark.device
class TestMemorySummaries:
    hw_classification = HW.ACCELERATOR

    def test_nested_dict_matches_flat_stats(self):
        keep = torch.empty(1000, device=DEVICE)
        flat = target.device_module.memory_stats()
        nested = target.device_module.memory_stats_as_nested_dict()
        assert nested["allocated_bytes"]["all"]["current"] == flat["allocated_bytes.all.current"]
        assert nested["num_ooms"] == flat["num_ooms"]
        count = 0

        def walk(d):
            nonlocal count
            for v in d.values():
                if isinstance(v, dict):
                    walk(v)
                else:
                    count += 1
        walk(nested)
        assert count == len(flat)
        del keep

    @pytest.mark.openreg_only  # the summary openreg writes (its wording, orMalloc)
    def test_summary(self):
        # Tests that ran before may legitimately leave a little allocated on the
        # device (SDPA keeps its dropout state cached): count from there.
        torch.openreg.reset_peak_memory_stats(1)
        before = torch.openreg.memory_allocated(1)
        keep = torch.empty(3 * MB, dtype=torch.uint8, device="openreg:1")
        s = torch.openreg.memory_summary(1)
        assert "PyTorch openreg memory summary, device ID 1" in s
        assert "openreg OOMs:" in s and "orMalloc retries:" in s
        row = next(line for line in s.splitlines() if "Allocated memory" in line)
        current = str((before + 3 * MB) // 1024)
        assert row.split("|")[2].split() == [current, "KiB"], row  # torch.cuda's units
        assert "from small pool" in s and "from small pool" not in torch.openreg.memory_summary(1, abbreviated=True)
        del keep


@pytest.mark.device
@pytest.mark.skipif(target.MEMCHECK, reason="block sizes, segments and reuse are the caching "
                    "allocator's; memcheck mode (docs/memcheck.md) bypasses it")
class TestMemoryHistory:
    hw_classification = HW.ACCELERATOR

    def test_python_stacks_per_allocation(self, history):
        history(stacks="python")
        x = allocate_in_named_function(5000)
        addr = x.untyped_storage().data_ptr()
        snap = target.device_module.memory._snapshot()
        seg, block = block_at(snap, addr)
        assert block["state"] == "active_allocated"
        assert block["requested_size"] == 5000 and block["size"] == 5120
        names = [(f["name"], Path(f["filename"]).name) for f in block["frames"]]
        assert ("allocate_in_named_function", "test_apis.py") in names
        assert ("test_python_stacks_per_allocation", "test_apis.py") in names
        assert seg["segment_type"] == "small" and seg["device"] == 0
        assert seg["allocated_size"] >= 5120
        allocs = [e for e in snap["device_traces"][0] if e["action"] == "alloc" and e["addr"] == addr]
        assert allocs and allocs[-1]["size"] == 5000 and allocs[-1]["frames"]
        del x
        trace = target.device_module.memory._snapshot()["device_traces"][0]
        actions = [e["action"] for e in trace if e["addr"] == addr]
        assert actions[-3:] == ["alloc", "free_requested", "free_completed"]
        assert target.device_module.memory_snapshot() == target.device_module.memory._snapshot()["segments"]

    @pytest.mark.openreg_only  # C++ frames of torch_openreg's allocator
    def test_cpp_stacks(self, history):
        history(stacks="all")
        x = allocate_in_named_function(100)
        block = block_at(torch.openreg.memory._snapshot(), x.untyped_storage().data_ptr())[1]
        names = [f["name"] for f in block["frames"]]
        assert "allocate_in_named_function" in names
        # C++ frames come along, down to the openreg allocator: named where
        # torch's symbolizer reads debug information (addr2line, 2.13 and
        # 2.14), as the library and its offset where it reads only dynamic
        # symbols (2.15; the glue's functions are hidden, docs/upgrading.md).
        ours = [f for f in block["frames"]
                if "torch_openreg" in f["name"]
                or Path(f["filename"]).name in ("libtorch_openreg.so", "OpenRegAllocator.cpp")]
        assert ours, block["frames"]

    def test_dump_renders_with_memory_viz(self, history, tmp_path):
        history(stacks="python")
        x = allocate_in_named_function(3 * MB)
        y = torch.randn(100, 100, device=device(1)) @ torch.randn(100, 100, device=device(1))
        z = allocate_in_named_function(700)
        del z
        path = tmp_path / "snap.pickle"
        target.device_module.memory._dump_snapshot(str(path))
        with open(path, "rb") as f:
            snap = pickle.load(f)
        assert "Memory accounting error" not in _memory_viz.segsum(snap)
        assert "segments:" in _memory_viz.segsum(snap)
        trace = _memory_viz.trace(snap)
        assert "Device 0" in trace and "Device 1" in trace and "cudaMalloc(" in trace
        for plot in (_memory_viz.trace_plot(snap), _memory_viz.segment_plot(snap),
                     _memory_viz.trace_plot(snap, plot_segments=True)):
            assert "MemoryViz.js" in plot and len(plot) > 1000
        flame = _memory_viz.segments(snap, format_flamegraph=lambda lines: lines)
        assert re.search(r"active_allocated;.*allocate_in_named_function.* 3145728", flame), flame
        mem = _memory_viz.memory(snap, format_flamegraph=lambda lines: lines)
        assert "allocate_in_named_function" in mem
        target.device_module.memory._record_memory_history(None)
        w = allocate_in_named_function(100)
        after = target.device_module.memory._snapshot()
        diff = _memory_viz.compare(snap["segments"], after["segments"], format_flamegraph=lambda lines: lines)
        assert "only_after" in diff or "only_before" in diff or diff == ""
        del x, y, w

    def test_stopping_and_state_only(self, history):
        history("state", stacks="python")
        x = allocate_in_named_function(100)
        snap = target.device_module.memory._snapshot()
        assert block_at(snap, x.untyped_storage().data_ptr())[1]["frames"]
        assert snap["device_traces"] == [[], []]
        history(None)
        y = allocate_in_named_function(100)
        snap = target.device_module.memory._snapshot()
        assert block_at(snap, y.untyped_storage().data_ptr())[1]["frames"] == []
        assert block_at(snap, x.untyped_storage().data_ptr())[1]["frames"]  # kept while live
        del x, y

    def test_no_context(self, history):
        history(context=None)
        x = allocate_in_named_function(100)
        snap = target.device_module.memory._snapshot()
        assert block_at(snap, x.untyped_storage().data_ptr())[1]["frames"] == []
        assert any(e["action"] == "alloc" for e in snap["device_traces"][0])
        del x

    def test_max_entries_keeps_newest(self, history):
        history(stacks="python", max_entries=3, clear_history=True)
        xs = [allocate_in_named_function(1000 * (i + 1)) for i in range(5)]
        trace = target.device_module.memory._snapshot()["device_traces"][0]
        assert [e["size"] for e in trace] == [3000, 4000, 5000]
        history(stacks="python", max_entries=2)  # shrinking keeps the newest, in order
        assert [e["size"] for e in target.device_module.memory._snapshot()["device_traces"][0]] == [4000, 5000]
        history(stacks="python", max_entries=3)  # growing again keeps the order
        xs.append(allocate_in_named_function(6000))
        assert [e["size"] for e in target.device_module.memory._snapshot()["device_traces"][0]] == [4000, 5000, 6000]
        del xs

    def test_awaiting_free_after_record_stream(self, history):
        history(stacks="python")
        side = target.device_module.Stream()
        x = allocate_in_named_function(4096)
        addr = x.untyped_storage().data_ptr()
        with target.device_module.stream(side):
            target.busy(100_000)
        x.record_stream(side)
        del x
        assert block_at(target.device_module.memory._snapshot(), addr)[1]["state"] == "active_awaiting_free"
        side.synchronize()
        allocate_in_named_function(10)  # the allocator notices completed events
        snap = target.device_module.memory._snapshot()
        actions = [e["action"] for e in snap["device_traces"][0] if e["addr"] == addr]
        assert actions[-2:] == ["free_requested", "free_completed"]
        assert "Memory accounting error" not in _memory_viz.segsum(snap)

    @pytest.mark.openreg_only  # openreg's capacity (5 GiB does not fit in 4)
    def test_segment_and_oom_actions(self, history):
        history(stacks="python")
        x = allocate_in_named_function(30 * MB)
        with pytest.raises(torch.OutOfMemoryError):
            allocate_in_named_function(5 << 30)
        del x
        torch.openreg.empty_cache()
        trace = torch.openreg.memory._snapshot()["device_traces"][0]
        actions = [e["action"] for e in trace]
        assert "segment_alloc" in actions and "segment_free" in actions
        oom = next(e for e in trace if e["action"] == "oom")
        assert oom["size"] == 5 << 30 and oom["device_free"] > 0
        assert "raise OutOfMemoryError" in _memory_viz.trace(torch.openreg.memory._snapshot())

    @pytest.mark.parametrize("kwargs, message", [
        ({"enabled": "sometimes"}, "expected enabled to be None, 'state' or 'all', got 'sometimes'"),
        ({"context": "nope"}, "expected context to be None, 'state', 'alloc' or 'all', got 'nope'"),
        ({"stacks": "cpp"}, "expected stacks to be 'python' or 'all', got 'cpp'"),
    ])
    @pytest.mark.openreg_only  # openreg's messages
    def test_bad_arguments(self, history, kwargs, message):
        with pytest.raises(RuntimeError, match=re.escape(message)):
            history(**kwargs)


@pytest.mark.device
class TestHostMemoryStats:
    hw_classification = HW.ACCELERATOR

    def test_pinned_allocations_are_counted(self):
        target.device_module.init()
        # Earlier tests may leave pinned blocks whose frees wait on device
        # events; the host allocator retires them at its next allocation, so
        # make that happen before counting.
        gc.collect()
        target.device_module.synchronize()
        torch.empty(1, dtype=torch.uint8).pin_memory()
        before = target.device_module.host_memory_stats()
        p = torch.empty(1 << 20, dtype=torch.uint8).pin_memory()
        s = target.device_module.host_memory_stats()
        assert s["active_requests.current"] == before.get("active_requests.current", 0) + 1
        assert s["active_bytes.current"] >= before.get("active_bytes.current", 0) + (1 << 20)
        assert s["allocations.current"] >= 1 and s["allocated_bytes.current"] >= 1 << 20
        for key in ("num_host_alloc", "num_host_free", "host_alloc_time.count", "active_bytes.peak"):
            assert key in s
        nested = target.device_module.host_memory_stats_as_nested_dict()
        assert nested["active_bytes"]["current"] == s["active_bytes.current"]
        del p

    def test_reset_peak(self):
        target.device_module.init()
        p = torch.empty(4 << 20, dtype=torch.uint8).pin_memory()
        del p
        target.device_module.reset_peak_host_memory_stats()
        s = target.device_module.host_memory_stats()
        assert s["active_bytes.peak"] == s["active_bytes.current"]
        target.device_module.reset_accumulated_host_memory_stats()
        assert target.device_module.host_memory_stats()["active_bytes.allocated"] == 0


@pytest.mark.device
@pytest.mark.openreg_only  # openreg's capacity (0.01 of 4 GiB) and messages
class TestMemoryFraction:
    hw_classification = HW.ACCELERATOR

    def test_fraction_is_enforced(self):
        fresh()
        assert torch.openreg.get_per_process_memory_fraction(1) == 1.0
        try:
            torch.openreg.set_per_process_memory_fraction(0.01, 1)  # 40.96 MiB of 4 GiB
            assert torch.openreg.get_per_process_memory_fraction("openreg:1") == 0.01
            ok = torch.empty(20 * MB, dtype=torch.uint8, device="openreg:1")
            with pytest.raises(torch.OutOfMemoryError) as info:
                torch.empty(30 * MB, dtype=torch.uint8, device="openreg:1")
            msg = str(info.value)
            assert "openreg out of memory. Tried to allocate 30.00 MiB. Device openreg:1" in msg
            assert ("This process may reserve at most 40.96 MiB of it "
                    "(set_per_process_memory_fraction(0.01) on openreg:1).") in msg
            # Device 0 is not limited, and the limit counts reserved memory.
            big = torch.empty(100 * MB, dtype=torch.uint8, device="openreg:0")
            del ok
            again = torch.empty(30 * MB, dtype=torch.uint8, device="openreg:1")  # after a flush
            del big, again
        finally:
            torch.openreg.set_per_process_memory_fraction(1.0, 1)
        x = torch.empty(100 * MB, dtype=torch.uint8, device="openreg:1")
        del x

    def test_arguments_checked(self):
        with pytest.raises(TypeError, match="Invalid type for fraction argument, must be `float`"):
            torch.openreg.set_per_process_memory_fraction(1)
        with pytest.raises(ValueError, match=r"Invalid fraction value: 1.5. Allowed range: 0~1"):
            torch.openreg.set_per_process_memory_fraction(1.5)
        with pytest.raises(RuntimeError, match="Invalid openreg device index 3"):
            torch.openreg.set_per_process_memory_fraction(0.5, 3)


@pytest.mark.device
class TestPeersAndProperties:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.openreg_only  # openreg's message
    def test_can_device_access_peer(self):
        assert torch.openreg.can_device_access_peer(0, 1)
        assert torch.openreg.can_device_access_peer("openreg:1", torch.device("openreg:0"))
        assert not torch.openreg.can_device_access_peer(1, 1)
        with pytest.raises(RuntimeError, match="Invalid openreg device index 2"):
            torch.openreg.can_device_access_peer(0, 2)

    def test_peer_copy(self):
        a = torch.arange(10.0, device=device(0))
        assert torch.equal(a.to(device(1)).cpu(), torch.arange(10.0))

    @pytest.mark.openreg_only  # openreg's UUIDs (version 8) and integrated memory
    def test_properties(self):
        p0, p1 = (torch.openreg.get_device_properties(i) for i in range(2))
        assert isinstance(p0.uuid, uuid.UUID) and p0.uuid.version == 8
        assert p0.uuid.variant == uuid.RFC_4122
        assert p0.uuid != p1.uuid
        assert torch.openreg.get_device_properties(0).uuid == p0.uuid
        assert p0.is_integrated == 1 and p0.is_multi_gpu_board == 0
        assert (p0.major, p0.minor) == torch.openreg.get_device_capability(0)
        assert f"uuid={p0.uuid}" in repr(p0)

    def test_uuid_is_the_same_in_another_process(self):
        r = run_python("import torch\n"
                       "from tests.target import device_module\n"
                       "print(device_module.get_device_properties(1).uuid)", timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == str(target.device_module.get_device_properties(1).uuid)

    @pytest.mark.openreg_only  # openreg's message and capacity
    def test_out_of_memory_error_alias(self):
        assert torch.openreg.OutOfMemoryError is torch.OutOfMemoryError
        with pytest.raises(torch.openreg.OutOfMemoryError, match="openreg out of memory"):
            torch.empty(5 << 30, dtype=torch.uint8, device="openreg")


@pytest.mark.device
class TestTorchCudaCoverage:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.openreg_only  # this repository's docs/device.md
    def test_every_public_torch_cuda_name_is_provided_or_documented(self):
        def _documented_missing():
            """Names in docs/device.md's table of torch.cuda APIs openreg lacks, with
            whether their row says from which release they exist."""
            text = (Path(REPO) / "docs" / "device.md").read_text()
            section = text.split("## torch.cuda APIs that openreg does not provide", 1)[1].split("\n## ", 1)[0]
            names = {}
            for line in section.splitlines():
                if line.startswith("| `") and "name(s)" not in line:
                    since = bool(re.search(r"\| From 2\.\d+", line))
                    for n in re.findall(r"`([A-Za-z_][\w.]*)`", line.split("|")[1]):
                        names[n] = since
            return names

        public = {n for n in dir(torch.cuda) if not n.startswith("_")}
        modules = {n for n in public if type(getattr(torch.cuda, n)).__name__ == "module"}
        missing = {n for n in public - modules if not hasattr(torch.openreg, n)}
        documented = _documented_missing()
        assert missing - set(documented) == set(), "undocumented: add them to docs/device.md"
        assert set(documented) & (public - missing) == set(), "documented as missing but provided"
        # A documented name this release's torch.cuda lacks belongs to a newer
        # release of the window: its row says from which.
        assert {n for n in set(documented) - public if not documented[n]} == set(), \
            "documented names torch.cuda does not have (mark the row 'From 2.x')"

    def test_memory_module_names(self):
        for name in ("memory_summary", "memory_snapshot", "memory_stats_as_nested_dict",
                     "_record_memory_history", "_snapshot", "_dump_snapshot",
                     "host_memory_stats", "reset_peak_host_memory_stats",
                     "set_per_process_memory_fraction", "get_per_process_memory_fraction"):
            assert callable(getattr(target.device_module.memory, name)), name
