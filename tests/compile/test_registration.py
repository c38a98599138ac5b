"""How torch.compile finds the openreg backend: lazily, and completely."""

import re

import pytest
import torch

from tests._subprocess import run_python
from tests.target import HW, gates

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only


@pytest.mark.compile
class TestLazyRegistration:
    hw_classification = HW.ACCELERATOR

    def test_import_torch_imports_neither_dynamo_nor_inductor(self):
        r = run_python(
            "import sys, torch\n"
            "x = torch.ones(2, device='openreg')\n"
            "bad = [m for m in sys.modules if m.startswith(('torch._dynamo', 'torch._inductor'))]\n"
            "assert not bad, bad\n"
            "assert 'torch_openreg.inductor' in sys.modules\n"
            "print('lazy')", timeout=120)
        assert r.returncode == 0 and "lazy" in r.stdout, r.stderr

    def test_first_compile_in_a_fresh_process_uses_the_backend(self):
        # Registration happens on the way: Dynamo's interface when torch._dynamo
        # is imported, Inductor's backend when Inductor looks it up.
        r = run_python(
            "import torch\n"
            "from torch._inductor.utils import run_and_get_code\n"
            "x = torch.arange(8., device='openreg')\n"
            "y, (code,) = run_and_get_code(torch.compile(lambda t: t.sin() + 1), x)\n"
            "assert 'openreg_compile' in code\n"
            "torch.testing.assert_close(y.cpu(), x.cpu().sin() + 1)\n"
            "from torch._dynamo.device_interface import get_interface_for_device\n"
            "from torch_openreg.inductor.device_interface import OpenRegInterface\n"
            "assert get_interface_for_device('openreg') is OpenRegInterface\n"
            "assert get_interface_for_device('openreg:1') is OpenRegInterface\n"
            "print('ok')", timeout=300)
        assert r.returncode == 0 and "ok" in r.stdout, r.stderr

    def test_backend_registered_for_openreg(self):
        from torch._inductor.codegen.common import (
            get_custom_backend_config_for_device, get_device_op_overrides,
            get_scheduling_for_device, init_backend_registration)

        from torch_openreg.inductor import config
        from torch_openreg.inductor.device_op_overrides import OpenRegDeviceOpOverrides
        from torch_openreg.inductor.scheduling import OpenRegScheduling

        init_backend_registration()
        assert get_scheduling_for_device("openreg") is OpenRegScheduling
        assert isinstance(get_device_op_overrides("openreg"), OpenRegDeviceOpOverrides)
        # Inductor's own PrivateUse1 hook (torch.openreg.Scheduling) serves the
        # same classes; the per-device config is registered too.
        assert torch.openreg.Scheduling is OpenRegScheduling
        assert get_custom_backend_config_for_device("openreg") is config
        with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
            torch.openreg.NoSuchThing


@pytest.mark.compile
class TestDeviceInterface:
    hw_classification = HW.ACCELERATOR

    def test_interface_answers_for_the_device(self):
        import torch._dynamo.device_interface as di

        iface = di.get_interface_for_device("openreg")
        assert iface.device_count() == torch.openreg.device_count() and iface.is_available()
        assert iface.Stream is torch.openreg.Stream and iface.Event is torch.openreg.Event
        prev = iface.exchange_device(1)
        try:
            assert iface.current_device() == 1
        finally:
            iface.maybe_exchange_device(prev)
        assert iface.current_device() == prev
        assert isinstance(iface.current_stream(), torch.openreg.Stream)
        assert iface.get_raw_stream(0) != 0
        s = torch.openreg.Stream()
        with torch.openreg.stream(s):
            raw_side = iface.get_raw_stream(0)
        assert raw_side != iface.get_raw_stream(0)  # the current stream's handle
        assert iface.get_device_properties(0).name == torch.openreg.get_device_name(0)
        assert iface.get_compute_capability(0) == 10 * torch.openreg.get_device_capability(0)[0] \
            + torch.openreg.get_device_capability(0)[1]
        assert iface.memory_allocated(0) == torch.openreg.memory_allocated(0)
        assert iface.is_bf16_supported() is True
        iface.synchronize()

    def test_worker_serves_cached_properties(self):
        import torch._dynamo.device_interface as di

        iface = di.get_interface_for_device("openreg")
        props = iface.Worker.get_device_properties("openreg:1")
        assert props.name == torch.openreg.get_device_properties(1).name
        assert di.caching_worker_device_properties["openreg"][1] is props
        iface.Worker.set_device(1)
        try:
            assert iface.Worker.current_device() == 1
            assert iface.Worker.get_device_properties() is props
        finally:
            di.caching_worker_current_devices.pop("openreg")
        with pytest.raises(ValueError, match="expected an openreg device, got cpu"):
            iface.Worker.get_device_properties("cpu")


@pytest.mark.compile
class TestDebugBackend:
    hw_classification = HW.ACCELERATOR

    def test_named_backend_runs_eager_kernels(self):
        from torch_openreg.testing import recorded_kernels

        f = torch.compile(lambda t: (t.cos() * 3).sum(), backend="openreg", fullgraph=True)
        x = torch.randn(16)
        with recorded_kernels() as names:
            y = f(x.to("openreg"))
        torch.testing.assert_close(y.cpu(), (x.cos() * 3).sum())
        assert not any(n.startswith("cpp_") for n in names), names  # no Inductor kernels
        assert any("cos" in n for n in names), names

    def test_named_backend_rejects_other_devices(self):
        from torch_openreg.inductor.debug_backend import UnsupportedDeviceError

        f = torch.compile(lambda t: t + 1, backend="openreg")
        with pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as info:
            f(torch.ones(2, device="meta"))
        inner = info.value.inner_exception
        assert isinstance(inner, UnsupportedDeviceError)
        assert "placeholder 'l_t_' is a FakeTensor on meta; only openreg and cpu" in str(inner)


@pytest.mark.compile
class TestCacheKey:
    hw_classification = HW.ACCELERATOR

    def test_the_backend_source_hash_reaches_the_fx_graph_cache_key(self):
        # Gap 22: through the per-device config before 2.15, through the device
        # interface's get_cache_system_info() (the official hook) from 2.15.
        import torch._dynamo  # noqa: F401  (registers the device interface)
        from torch_openreg.inductor import config
        from torch_openreg.inductor.source_hash import source_hash

        if gates().has_gap(22):
            assert config.backend_source_hash == source_hash()
            return
        from torch._inductor.codecache import CacheBase

        assert config.backend_source_hash == ""
        system = CacheBase.get_system()
        assert system["device_interfaces"]["openreg"] == {"backend_source_hash": source_hash()}


@pytest.mark.compile
class TestBufferAllocation:
    """Compiled graphs allocate their buffers with the allocator called
    directly (torch_openreg._C._empty_strided, as _empty_strided_cuda for CUDA
    graphs), on the buffer's device, with the layout Inductor planned."""

    hw_classification = HW.ACCELERATOR

    def test_compiled_buffers_come_from_the_fast_allocator(self):
        from torch._inductor.utils import run_and_get_code

        def f(x):
            return (x - x.sum(dim=-1, keepdim=True)).t() * 2

        torch._dynamo.reset()
        for device in ("openreg:0", "openreg:1"):
            x = torch.randn(6, 5, device=device)
            out, codes = run_and_get_code(torch.compile(f), x)
            code = "\n".join(codes)
            index = device[-1]
            assert re.search(rf"= empty_strided_openreg\(\([^\n]*torch\.float32, {index}\)",
                             code), code
            assert out.device == torch.device(device)
            expected = f(x.cpu())
            assert out.stride() == expected.stride()
            torch.testing.assert_close(out.cpu(), expected)

    def test_allocation_matches_empty_strided(self):
        from torch_openreg._C import _empty_strided

        t = _empty_strided((3, 4), (1, 3), torch.float16, 1)
        ref = torch.empty_strided((3, 4), (1, 3), dtype=torch.float16, device="openreg:1")
        assert (t.device, t.shape, t.stride(), t.dtype) == (ref.device, ref.shape, ref.stride(),
                                                            ref.dtype)
        assert _empty_strided((), (), torch.int64, 0).shape == ()

    @pytest.mark.parametrize("args, error, message", [
        (((2,), (1, 1), torch.float32, 0), RuntimeError,
         "size has 1 dimensions but stride has 2"),
        (([2], (1,), torch.float32, 0), TypeError, "size must be a tuple of ints, got list"),
        (((2.0,), (1,), torch.float32, 0), TypeError, r"size\[0\] must be an int, got float"),
        (((2,), (1,), "float32", 0), TypeError, "dtype must be a torch.dtype, got str"),
        (((2,), (1,), torch.float32, 99), RuntimeError, "Invalid openreg device index 99"),
        (((-1,), (1,), torch.float32, 0), RuntimeError, "negative dimension -1"),
        (((2,), (1,), torch.float32), TypeError, "takes 4 arguments, got 3"),
    ])
    def test_bad_arguments_raise(self, args, error, message):
        from torch_openreg._C import _empty_strided

        with pytest.raises(error, match=message):
            _empty_strided(*args)
