"""Compiled kernels are device work on the current stream: ordered with eager
work, visible in the runtime trace, and stream code inside compiled functions
works."""

import pytest
import torch._dynamo.testing
import torch

from tests import target
from tests.target import DEVICE, HW, gates


@pytest.mark.compile
class TestStreamOrder:
    hw_classification = HW.ACCELERATOR

    def test_compiled_kernel_waits_for_earlier_work_on_its_stream(self):
        f = torch.compile(lambda t: t * 2 + 1)
        dev = torch.zeros(1 << 16, device=DEVICE)
        f(dev)  # compile first
        host = torch.full((1 << 16,), 3.0).pin_memory()
        target.busy(30_000)                       # the stream is busy for 30 ms...
        dev.copy_(host, non_blocking=True)        # ...then an asynchronous H2D copy
        out = f(dev)                              # must run after both
        assert torch.equal(out.cpu(), torch.full((1 << 16,), 7.0))

    def test_compiled_kernels_run_on_the_current_stream(self):
        f = torch.compile(lambda t: t.sin() * 2)
        x = torch.randn(64, device=DEVICE)
        f(x)
        side = target.device_module.Stream()
        side.wait_stream(target.device_module.current_stream())
        with target.device_module.stream(side):
            target.busy(30_000)
            y = f(x)
        target.device_module.current_stream().wait_stream(side)
        torch.testing.assert_close(y.cpu(), x.cpu().sin() * 2)


@pytest.mark.compile
class TestStreamsInCompiledCode:
    hw_classification = HW.ACCELERATOR

    def test_stream_context_and_waits_compile_without_graph_break(self):
        device_module = target.device_module

        def fn(x, s):
            y = x + 1
            # torch.accelerator.current_stream() is the form Dynamo turns
            # into a stream object it can order against (docs/compile.md).
            s.wait_stream(torch.accelerator.current_stream())
            with device_module.stream(s):
                z = y * 2
            torch.accelerator.current_stream().wait_stream(s)
            return z - 1

        counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
        f = torch.compile(fn, backend=counter, fullgraph=True)
        x, s = torch.randn(100, device=DEVICE), device_module.Stream()
        torch.testing.assert_close(f(x, s).cpu(), (x.cpu() + 1) * 2 - 1)
        assert counter.frame_count == 1

    def test_current_stream_inside_compiled_code(self):
        device_module = target.device_module
        f = torch.compile(lambda t: (t * 3, device_module.current_stream()), fullgraph=True)
        x = torch.randn(8, device=DEVICE)
        y, s = f(x)
        assert s == device_module.current_stream()
        torch.testing.assert_close(y.cpu(), x.cpu() * 3)

    @pytest.mark.openreg_only
    def test_creating_streams_inside_compiled_code(self):
        # docs/compile.md: from 2.15 Dynamo takes a device's Stream class
        # from its registered device interface and traces the creation; on
        # older releases torch.openreg.Stream() runs Python that Dynamo
        # cannot trace (a graph break: pass streams in instead).
        def fn(x):
            s = torch.openreg.Stream()
            with torch.openreg.stream(s):
                return x * 2

        x = torch.ones(2, device="openreg")
        if gates().DYNAMO_DEVICE_STREAM_CLASSES:
            counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
            out = torch.compile(fn, backend=counter, fullgraph=True)(x)
            torch.testing.assert_close(out.cpu(), torch.full((2,), 2.0))
            assert counter.frame_count == 1
        else:
            with pytest.raises(torch._dynamo.exc.Unsupported, match="marked as skipped"):
                torch.compile(fn, fullgraph=True)(x)


@pytest.mark.compile
class TestTrace:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.openreg_only
    def test_kernels_are_named_device_work_in_the_runtime_trace(self):
        from torch_openreg.testing import recorded_kernels

        f = torch.compile(lambda a, b: (a @ b).relu().sum(1))
        a, b = torch.randn(16, 16, device="openreg"), torch.randn(16, 16, device="openreg")
        f(a, b)
        with recorded_kernels() as names:
            f(a, b)
        fused = [n for n in names if n.startswith("cpp_fused")]
        assert fused and any("mm" in n for n in names), names

    @pytest.mark.openreg_only
    def test_compiled_kernels_in_a_profiler_trace(self):
        from torch.profiler import ProfilerActivity, profile

        f = torch.compile(lambda a: (a * 2).sin().sum(0))
        a = torch.randn(32, 32, device="openreg")
        f(a)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            f(a)
        kernels = [e for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.PrivateUse1]
        fused = [e for e in kernels if e.name.startswith("cpp_fused")]
        assert fused, [e.name for e in kernels]
        assert all(e.device_index == 0 and e.time_range.elapsed_us() > 0 for e in fused)
