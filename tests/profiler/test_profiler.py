"""Device activity in torch.profiler (the backend's Kineto plugin), the legacy
device-time path (ProfilerStubs), range markers and memory profiling. The names
of openreg's activities (kernels named by their ATen operator, ``or*`` runtime
calls) and torch_openreg.profiler are openreg's: those tests are openreg-only."""

import gc
import json
import os
import threading

import pytest
import torch
import torch.nn as nn
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

from tests import target
from tests.target import DEVICE, HW, device

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(DEVICE)


def train_step(m, opt):
    x = torch.randn(8, 16, device=DEVICE)
    y = torch.randn(8, 4, device=DEVICE)
    loss = nn.functional.mse_loss(m(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def device_events(prof):
    return [e for e in prof.events() if e.device_type == torch.device(DEVICE).type
            or str(e.device_type).endswith(DEVICE.upper())]


def chrome_trace(prof, tmp_path):
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    with open(path) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def step_profile():
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    train_step(m, opt)  # warm up outside the trace
    with profile(activities=ACTIVITIES) as prof:
        train_step(m, opt)
    return prof


@pytest.mark.profiler
@pytest.mark.smoke
class TestTrainingStepTrace:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.openreg_only
    def test_kernels_for_the_model_ops(self, step_profile):
        kernels = [e for e in device_events(step_profile) if not e.name.startswith("or")]
        names = {e.name for e in kernels}
        # forward, backward and optimizer kernels, named by their ATen operator
        # named by their ATen operator, as the launching op is
        for expected in ("aten::addmm", "aten::relu", "aten::threshold_backward", "aten::mse_loss"):
            assert expected in names, (expected, sorted(names))
        assert all(e.device_index == 0 for e in kernels)
        assert all(e.time_range.elapsed_us() > 0 for e in kernels)
        stream = torch.openreg.current_stream()
        assert {e.device_resource_id for e in kernels} == {stream.native_id}

    @pytest.mark.openreg_only
    def test_every_kernel_correlates_to_its_cpu_op(self, step_profile):
        events = step_profile.events()
        cpu_ids = {e.id: e for e in events if e.device_type == torch.autograd.DeviceType.CPU
                   and not e.name.startswith("or")}
        kernels = device_events(step_profile)
        assert kernels
        for k in kernels:
            assert k.linked_correlation_id in cpu_ids, k.name
            op = cpu_ids[k.linked_correlation_id]
            assert op.name.startswith("aten::"), (k.name, op.name)

    def test_key_averages_report_device_time(self, step_profile):
        avg = {e.key: e for e in step_profile.key_averages()}
        assert avg["aten::addmm"].device_time_total > 0
        assert avg["aten::addmm"].self_device_time_total > 0
        assert all(e.device_time_total >= 0 and e.cpu_time_total >= 0 for e in avg.values())

    @pytest.mark.openreg_only
    def test_chrome_trace_is_valid_json_with_flows(self, step_profile, tmp_path):
        trace = chrome_trace(step_profile, tmp_path)
        events = trace["traceEvents"]
        kernels = [e for e in events if e.get("cat") == "kernel"]
        assert kernels and all(e["dur"] > 0 for e in kernels)
        assert all("External id" in e["args"] for e in kernels)
        launches = [e for e in events if e.get("cat") == "privateuse1_runtime"]
        assert {e["name"] for e in launches} >= {"orLaunchKernel"}
        flows = [e for e in events if e.get("cat") == "ac2g"]
        starts = {e["id"] for e in flows if e["ph"] == "s"}
        ends = {e["id"] for e in flows if e["ph"] == "f"}
        assert starts and starts == ends
        # rows are named: the device process and its stream threads
        names = [e for e in events if e.get("ph") == "M"]
        assert any(e["name"] == "process_name" and e["args"]["name"].startswith("openreg")
                   for e in names)
        assert any(e["name"] == "thread_name" and e["args"]["name"].startswith("stream")
                   for e in names)


@pytest.mark.profiler
class TestCopiesStreamsDevices:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.openreg_only
    def test_copies_carry_bytes_and_kind(self, tmp_path):
        a = torch.randn(256)  # 1 KiB
        with profile(activities=ACTIVITIES) as prof:
            d = a.to(DEVICE)
            back = d.cpu()
        assert torch.equal(back, a)
        trace = chrome_trace(prof, tmp_path)
        copies = [e for e in trace["traceEvents"] if e.get("cat") == "gpu_memcpy"]
        kinds = {e["args"]["kind"]: e["args"]["bytes"] for e in copies}
        assert kinds == {"HtoD": 1024, "DtoH": 1024}
        assert sorted(e["name"] for e in copies) == ["Memcpy DtoH", "Memcpy HtoD"]
        launches = {e["name"] for e in trace["traceEvents"] if e.get("cat") == "privateuse1_runtime"}
        assert "orMemcpyAsync" in launches

    @pytest.mark.openreg_only
    def test_memset_is_recorded(self, tmp_path):
        # torch.zeros on openreg fills with a kernel; a runtime memset shows up
        # through the runtime's own call, made by the test module.
        from torch_openreg import _runtime as rt

        with profile(activities=ACTIVITIES) as prof:
            p = rt.malloc(4096)
            rt.memset(p, 0, 4096)
            rt.free(p)
        trace = chrome_trace(prof, tmp_path)
        memsets = [e for e in trace["traceEvents"] if e.get("cat") == "gpu_memset"]
        assert [e["args"]["bytes"] for e in memsets] == [4096]

    @pytest.mark.openreg_only
    def test_two_streams_two_rows(self):
        s1, s2 = torch.openreg.Stream(), torch.openreg.Stream()
        x = torch.randn(64, 64, device=DEVICE)
        with profile(activities=ACTIVITIES) as prof:
            with torch.openreg.stream(s1):
                a = x @ x
            with torch.openreg.stream(s2):
                b = x + 1
            torch.openreg.synchronize()
        rows = {(e.name, e.device_resource_id) for e in device_events(prof)}
        assert {stream for name, stream in rows if name == "aten::mm"} == {s1.native_id}, rows
        assert {stream for name, stream in rows if name == "aten::add"} == {s2.native_id}, rows
        del a, b

    @pytest.mark.skipif(torch.accelerator.device_count() < 2,
                        reason=f"needs two {DEVICE} devices")
    def test_two_devices_two_rows(self, tmp_path):
        x0 = torch.randn(32, device=device(0))
        x1 = torch.randn(32, device=device(1))
        with profile(activities=ACTIVITIES) as prof:
            (x0 * 2).sum()
            (x1 * 3).sum()
        devices = {e.device_index for e in device_events(prof)}
        assert devices == {0, 1}
        trace = chrome_trace(prof, tmp_path)
        pids = {e["pid"] for e in trace["traceEvents"] if e.get("cat") == "kernel"}
        assert pids == {0, 1}


@pytest.mark.profiler
class TestRangesAndMarkers:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.openreg_only
    def test_record_function_and_range_markers(self, tmp_path):
        from torch_openreg import profiler as orprof

        x = torch.randn(32, 32, device=DEVICE)
        with profile(activities=ACTIVITIES) as prof:
            with record_function("my_block"):
                with orprof.range("my_range"):
                    y = x @ x
                orprof.mark("my_mark")
            torch.openreg.synchronize()
        del y
        trace = chrome_trace(prof, tmp_path)
        annotations = {e["name"]: e for e in trace["traceEvents"]
                       if e.get("cat") == "gpu_user_annotation"}
        assert {"my_range", "my_mark"} <= set(annotations)
        assert annotations["my_range"]["pid"] == 0  # on the device timeline
        assert annotations["my_range"]["dur"] > 0
        assert any(e.get("name") == "my_block" and e.get("cat") == "user_annotation"
                   for e in trace["traceEvents"])

    @pytest.mark.openreg_only
    def test_push_pop_depths_and_errors(self):
        from torch_openreg import profiler as orprof

        assert orprof.range_pop() == -1  # nothing open
        assert orprof.range_push("a") == 1
        assert orprof.range_push("b") == 2
        assert orprof.range_pop() == 1
        assert orprof.range_pop() == 0
        with pytest.raises(TypeError, match="expected a str range name"):
            orprof.range_push(3)


@pytest.mark.profiler
class TestProfilerLifecycle:
    hw_classification = HW.ACCELERATOR

    def test_schedule_and_tensorboard_handler(self, tmp_path):
        m = model()
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        ready = []
        handler = tensorboard_trace_handler(str(tmp_path / "tb"))

        def on_ready(p):
            ready.append(sum(1 for e in device_events(p)))
            handler(p)

        with profile(activities=ACTIVITIES, schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
                     on_trace_ready=on_ready) as prof:
            for _ in range(5):
                train_step(m, opt)
                prof.step()
        assert len(ready) == 1 and ready[0] > 0
        files = os.listdir(tmp_path / "tb")
        assert len(files) == 1 and files[0].endswith(".pt.trace.json")
        with open(tmp_path / "tb" / files[0]) as f:
            assert any(e.get("cat") == "kernel" for e in json.load(f)["traceEvents"])

    @pytest.mark.openreg_only
    def test_nothing_recorded_outside_a_profile(self):
        x = torch.randn(16, device=DEVICE)
        with profile(activities=ACTIVITIES):
            x.mul(2)
        for _ in range(3):
            x.div(2)  # profiling is off: none of these may show up later
        with profile(activities=ACTIVITIES) as prof:
            x.add(1)
        names = [e.name for e in device_events(prof)]
        assert "aten::add" in names, names
        assert not any(n in ("aten::div", "aten::mul") for n in names), names

    def test_cpu_only_profile_has_no_device_events(self):
        x = torch.randn(16, device=DEVICE)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            x.mul(2).sum().item()
        assert device_events(prof) == []

    def test_fifty_cycles_leak_no_threads_or_memory(self):
        x = torch.randn(64, device=DEVICE)

        def cycle():
            with profile(activities=ACTIVITIES):
                (x * 2).sum()

        for _ in range(5):
            cycle()
        gc.collect()
        threads = threading.active_count()
        os_threads = len(os.listdir("/proc/self/task"))
        rss = _rss_kib()
        for _ in range(50):
            cycle()
        gc.collect()
        assert threading.active_count() == threads
        assert len(os.listdir("/proc/self/task")) <= os_threads
        assert _rss_kib() - rss < 64 * 1024, "50 profiling cycles grew RSS by more than 64 MiB"


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.profiler
class TestLegacyPath:
    hw_classification = HW.ACCELERATOR

    def test_use_device_openreg_reports_non_negative_device_time(self, recwarn):
        x = torch.randn(128, 128, device=DEVICE)
        with torch.autograd.profiler.profile(use_device=DEVICE) as prof:
            y = (x @ x).relu()
            target.device_module.synchronize()
        del y
        events = prof.function_events
        assert events
        assert all(e.device_time_total >= 0 and e.cpu_time_total >= 0 for e in events)
        mm = [e for e in events if e.name == "aten::mm"]
        assert mm and mm[0].device_time_total > 0
        avg = prof.key_averages()
        assert all(e.device_time_total >= 0 for e in avg)
        assert not [w for w in recwarn if "not enabled" in str(w.message)]


@pytest.mark.profiler
class TestMemoryProfiling:
    hw_classification = HW.ACCELERATOR

    def test_profile_memory_shows_openreg_allocations(self):
        with profile(activities=ACTIVITIES, profile_memory=True) as prof:
            x = torch.empty(1024, 1024, device=DEVICE)  # 4 MiB
            del x
        avg = {e.key: e for e in prof.key_averages()}
        assert avg["aten::empty"].device_memory_usage >= 4 << 20

    def test_memory_timeline(self, tmp_path):
        m = model()
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        with profile(activities=ACTIVITIES, profile_memory=True, record_shapes=True,
                     with_stack=True) as prof:
            train_step(m, opt)
        path = tmp_path / "timeline.json"
        prof.export_memory_timeline(str(path), device=device(0))
        with open(path) as f:
            times, sizes = json.load(f)
        assert len(times) == len(sizes) > 0
        assert max(max(row) for row in sizes) > 0


@pytest.mark.profiler
class TestLaunchAnnotations:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.openreg_only
    def test_annotation_becomes_activity_arguments(self, tmp_path):
        from torch_openreg import _runtime as rt

        with profile(activities=ACTIVITIES) as prof:
            p = rt.malloc(4096)
            rt.set_launch_annotation('Collective name="allreduce"\nIn msg nelems=1024\n'
                                     'dtype="Float"\nGroup size=2')
            rt.memset(p, 0, 4096)
            rt.free(p)
        trace = chrome_trace(prof, tmp_path)
        (memset,) = [e for e in trace["traceEvents"] if e.get("cat") == "gpu_memset"]
        assert memset["args"]["Collective name"] == "allreduce"
        assert memset["args"]["In msg nelems"] == 1024
        assert memset["args"]["dtype"] == "Float"
        assert memset["args"]["Group size"] == 2
