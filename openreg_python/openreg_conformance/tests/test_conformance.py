"""What PyTorch expects of a PrivateUse1 backend, through public APIs only.

The device name comes from the ``device`` fixture (``--conformance-device``), the
device module from ``device_module`` (``torch.get_device_module``); the CPU is the
oracle. Each test's docstring is the PyTorch convention it checks: a failing test
reports it. CUDA's behaviour is the reference where PyTorch's own tests use it.
"""

import io
import threading

import pytest
import torch
from hypothesis import given, settings, strategies as st

from openreg_conformance import HW


def close(got, want, **kw):
    torch.testing.assert_close(got.cpu(), want, **kw)


@pytest.mark.device
class TestDevice:
    hw_classification = HW.ACCELERATOR

    def test_device_strings(self, device):
        """torch.device("<name>:0") parses to the backend's device type and index."""
        d = torch.device(f"{device}:0")
        assert d.type == device and d.index == 0
        assert torch.empty(1, device=device).device.type == device

    def test_availability_and_count(self, device_module):
        """is_available() is true and device_count() is at least 1, as torch.cuda."""
        assert device_module.is_available()
        assert device_module.device_count() >= 1

    def test_current_device_round_trip(self, device, device_module):
        """set_device(i) makes current_device() return i (torch.cuda.set_device)."""
        prev = device_module.current_device()
        last = device_module.device_count() - 1
        device_module.set_device(last)
        try:
            assert device_module.current_device() == last
            assert torch.empty(1, device=device).device.index == last
        finally:
            device_module.set_device(prev)

    def test_accelerator(self, device):
        """torch.accelerator.current_accelerator() is the backend's device type."""
        assert torch.accelerator.is_available()
        assert torch.accelerator.current_accelerator().type == device

    def test_tensor_methods(self, device):
        """Tensor.<name>() and Tensor.is_<name> exist (generate_methods_for_privateuse1_backend)."""
        t = getattr(torch.ones(2), device)()
        assert getattr(t, f"is_{device}") and t.device.type == device

    def test_round_trip_to_the_device(self, device):
        """Copies to the device and back keep every value and dtype."""
        for dtype in (torch.float32, torch.float64, torch.int64, torch.bool, torch.bfloat16):
            x = (torch.arange(24) - 7).reshape(2, 3, 4).to(dtype)
            y = x.to(device)
            assert y.dtype == dtype
            assert torch.equal(y.cpu(), x)


@pytest.mark.memory
class TestMemory:
    hw_classification = HW.ACCELERATOR

    def test_allocated_follows_tensors(self, device, device_module):
        """memory_allocated() grows by a tensor's (rounded) size and returns when it is freed."""
        device_module.synchronize()
        base = device_module.memory_allocated()
        x = torch.empty(1 << 20, dtype=torch.uint8, device=device)
        assert device_module.memory_allocated() >= base + (1 << 20)
        del x
        assert device_module.memory_allocated() == base

    def test_memory_stats_keys(self, device, device_module):
        """memory_stats keys as torch.cuda ("allocated_bytes.all.current", ...)."""
        torch.ones(16, device=device)
        stats = device_module.memory_stats()
        for key in ("allocated_bytes.all.current", "reserved_bytes.all.peak",
                    "active_bytes.all.current", "num_alloc_retries", "num_ooms"):
            assert key in stats, key

    def test_empty_cache_keeps_live_tensors(self, device, device_module):
        """empty_cache() gives back cached blocks but never live tensors."""
        x = torch.full((1000,), 3.0, device=device)
        device_module.empty_cache()
        assert torch.equal(x.cpu(), torch.full((1000,), 3.0))

    def test_out_of_memory(self, device):
        """An allocation beyond the device raises torch.OutOfMemoryError."""
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(1 << 50, dtype=torch.uint8, device=device)


@pytest.mark.streams
class TestStreams:
    hw_classification = HW.ACCELERATOR

    def test_stream_context(self, device, device_module):
        """with torch.Stream(...) makes it the current stream (torch.accelerator.current_stream)."""
        s = torch.Stream(device=device)
        with s:
            assert torch.accelerator.current_stream() == s
        assert torch.accelerator.current_stream() != s

    def test_query_while_work_is_queued(self, device, device_module):
        """A stream's query is false while work is queued (torch.cuda._sleep)."""
        if not hasattr(device_module, "_sleep"):
            pytest.skip("the device module has no _sleep to queue device work")
        s = torch.Stream(device=device)
        with s:
            device_module._sleep(200_000)
            busy = s.query()
        s.synchronize()
        assert not busy and s.query()

    def test_elapsed_time_needs_timing(self, device):
        """An event's elapsed_time needs enable_timing (as CUDA events)."""
        a, b = torch.Event(device=device), torch.Event(device=device)
        a.record()
        b.record()
        b.synchronize()
        with pytest.raises((RuntimeError, ValueError), match="enable_timing"):
            a.elapsed_time(b)
        t0 = torch.Event(device=device, enable_timing=True)
        t1 = torch.Event(device=device, enable_timing=True)
        t0.record()
        torch.ones(1000, device=device).sum()
        t1.record()
        t1.synchronize()
        assert t0.elapsed_time(t1) >= 0

    def test_wait_stream_orders_work(self, device):
        """Work on a stream after wait_stream sees the other stream's results."""
        s1, s2 = torch.Stream(device=device), torch.Stream(device=device)
        with s1:
            x = torch.ones(4096, device=device) * 3
        s2.wait_stream(s1)
        with s2:
            y = x + 1
        s2.synchronize()
        assert torch.equal(y.cpu(), torch.full((4096,), 4.0))

    def test_record_stream(self, device):
        """Tensor.record_stream accepts the device's streams."""
        s = torch.Stream(device=device)
        x = torch.ones(8, device=device)
        x.record_stream(s)


@pytest.mark.ops
class TestOperators:
    hw_classification = HW.ACCELERATOR

    @settings(max_examples=10, deadline=None)
    @given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=3),
           scalar=st.floats(-2, 2, allow_nan=False))
    def test_pointwise(self, device, shape, scalar):
        """Pointwise operators give the CPU's results."""
        x = torch.randn(shape)
        d = x.to(device)
        close(((d + scalar) * d).exp().tanh() - d.abs().sqrt(),
              ((x + scalar) * x).exp().tanh() - x.abs().sqrt())

    def test_matmul_reductions_indexing(self, device):
        """matmul, reductions, indexing, cat and sort give the CPU's results."""
        a, b = torch.randn(7, 5), torch.randn(5, 3)
        da, db = a.to(device), b.to(device)
        close(da @ db, a @ b, rtol=1e-5, atol=1e-5)
        close(da.sum(0), a.sum(0), rtol=1e-5, atol=1e-6)
        close(da.amax(1), a.amax(1))
        close(da[[0, 2, 4], 1:], a[[0, 2, 4], 1:])
        close(torch.cat([da, da], 1), torch.cat([a, a], 1))
        close(da.sort(1).values, a.sort(1).values)

    def test_same_device_check(self, device):
        """Mixing a CPU tensor with a device tensor raises CUDA's same-device error."""
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            torch.ones(3, device=device) + torch.ones(3)

    def test_cpu_scalars_are_allowed(self, device):
        """0-dim CPU tensors act as scalars with device tensors, as on CUDA."""
        close(torch.ones(3, device=device) * torch.tensor(2.0), torch.full((3,), 2.0))


@pytest.mark.autograd
class TestAutograd:
    hw_classification = HW.ACCELERATOR

    def test_gradients_match_the_cpu(self, device):
        """backward() on the device gives the CPU's gradients, on the device."""
        torch.manual_seed(0)
        cpu = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        dev = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(),
                                  torch.nn.Linear(8, 2)).to(device)
        dev.load_state_dict(cpu.state_dict())
        x = torch.randn(4, 6)
        cpu(x).square().sum().backward()
        dev(x.to(device)).square().sum().backward()
        for p, q in zip(cpu.parameters(), dev.parameters()):
            assert q.grad.device.type == device
            close(q.grad, p.grad, rtol=1e-5, atol=1e-6)

    def test_backward_from_another_thread(self, device):
        """The autograd engine runs the device's backward when called from any thread."""
        errors = []

        def work():
            try:
                w = torch.ones(3, device=device, requires_grad=True)
                (w * 2).sum().backward()
                assert torch.equal(w.grad.cpu(), torch.full((3,), 2.0))
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(e)

        t = threading.Thread(target=work)
        t.start()
        t.join(timeout=60)
        assert not errors and not t.is_alive()


@pytest.mark.amp
class TestAutocast:
    hw_classification = HW.ACCELERATOR

    def test_autocast_lowers_matmul(self, device):
        """torch.autocast(device_type) runs matmul in the lower precision and keeps sums in float32."""
        a = torch.randn(4, 4, device=device)
        with torch.autocast(device_type=device):
            y = a @ a
            s = torch.sum(a)
        assert y.dtype in (torch.float16, torch.bfloat16)
        assert s.dtype == torch.float32

    def test_get_amp_supported_dtype(self, device_module):
        """The device module names its autocast dtypes (get_amp_supported_dtype)."""
        assert torch.bfloat16 in device_module.get_amp_supported_dtype()


@pytest.mark.rng
class TestRandom:
    hw_classification = HW.ACCELERATOR

    def test_manual_seed_reproduces(self, device):
        """torch.manual_seed seeds the device: the same seed gives the same numbers."""
        torch.manual_seed(7)
        a = torch.rand(64, device=device).cpu()
        torch.manual_seed(7)
        assert torch.equal(torch.rand(64, device=device).cpu(), a)

    def test_rng_state_round_trip(self, device, device_module):
        """get_rng_state/set_rng_state restore the stream (as torch.cuda)."""
        state = device_module.get_rng_state()
        a = torch.randn(16, device=device).cpu()
        device_module.set_rng_state(state)
        assert torch.equal(torch.randn(16, device=device).cpu(), a)

    def test_device_generator(self, device):
        """torch.Generator(device=...) drives the device's random operators."""
        g1 = torch.Generator(device=device).manual_seed(3)
        g2 = torch.Generator(device=device).manual_seed(3)
        a = torch.rand(8, device=device, generator=g1)
        assert torch.equal(a.cpu(), torch.rand(8, device=device, generator=g2).cpu())

    def test_cpu_generator_is_refused(self, device):
        """A random operator on the device refuses a CPU generator."""
        with pytest.raises(RuntimeError):
            torch.rand(4, device=device, generator=torch.Generator())


@pytest.mark.serialization
class TestSerialization:
    hw_classification = HW.ACCELERATOR

    def test_save_load_keeps_the_device(self, device):
        """torch.save/torch.load of device tensors restores them on the device."""
        x = torch.arange(6.0, device=device)
        buf = io.BytesIO()
        torch.save({"x": x}, buf)
        buf.seek(0)
        y = torch.load(buf)["x"]
        assert y.device == x.device and torch.equal(y.cpu(), x.cpu())

    def test_map_location_cpu(self, device):
        """map_location="cpu" loads device tensors on the CPU."""
        buf = io.BytesIO()
        torch.save(torch.ones(3, device=device), buf)
        buf.seek(0)
        assert torch.load(buf, map_location="cpu").device.type == "cpu"


@pytest.mark.profiler
class TestProfiler:
    hw_classification = HW.ACCELERATOR

    def test_device_activity(self, device, device_module):
        """torch.profiler with ProfilerActivity.PrivateUse1 records device events."""
        from torch.profiler import ProfilerActivity, profile

        x = torch.ones(256, device=device)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            (x * 2).sum()
            device_module.synchronize()
        dev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]
        if not dev:
            pytest.fail("no device events: the backend has no profiler plugin "
                        "(REGISTER_PRIVATEUSE1_PROFILER)")


@pytest.mark.distributed
class TestDistributed:
    hw_classification = HW.ACCELERATOR

    def test_collectives_on_the_device(self, device, dist_backend):
        """init_process_group(<backend>) runs collectives on device tensors (a world of one)."""
        import datetime

        import torch.distributed as dist

        assert dist.is_backend_available(dist_backend)
        dist.init_process_group(dist_backend, store=dist.HashStore(), rank=0, world_size=1,
                                timeout=datetime.timedelta(seconds=60))
        try:
            x = torch.arange(8.0, device=device)
            dist.all_reduce(x)
            dist.broadcast(x, src=0)
            out = [torch.empty_like(x)]
            dist.all_gather(out, x)
            work = dist.all_reduce(x, async_op=True)
            work.wait()
            assert torch.equal(out[0].cpu(), torch.arange(8.0))
            assert torch.equal(x.cpu(), torch.arange(8.0))
            assert dist.get_backend() == dist_backend
        finally:
            dist.destroy_process_group()


@pytest.mark.compile
class TestCompile:
    hw_classification = HW.ACCELERATOR

    def test_compiled_matches_eager(self, device):
        """torch.compile of a function on device tensors gives eager's results."""
        f = torch.compile(lambda a, b: (a * b + 1).relu().sum(1))
        a, b = torch.randn(4, 8), torch.randn(4, 8)
        close(f(a.to(device), b.to(device)), (a * b + 1).relu().sum(1), rtol=1e-5, atol=1e-5)


@pytest.mark.graphs
class TestGraphs:
    hw_classification = HW.ACCELERATOR

    def test_capture_and_replay(self, device):
        """torch.accelerator.Graph captures work on a side stream and replays it."""
        try:
            g = torch.accelerator.Graph()
        except RuntimeError as e:
            pytest.skip(f"no graph implementation: {e}")
        x = torch.zeros(16, device=device)
        with torch.Stream(device=device), g:
            x += 1
        g.replay()
        g.replay()
        assert torch.equal(x.cpu(), torch.full((16,), 2.0))
