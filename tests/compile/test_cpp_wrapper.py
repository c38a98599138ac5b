"""``torch.compile(..., options={"cpp_wrapper": True})`` on openreg: Inductor's
C++ wrapper allocates openreg buffers, launches the compiled kernels as device
work on the current stream and calls operators without a lowering through
openreg's C shim; results equal eager."""

import copy

import pytest
import torch
import torch.nn as nn

from torch._inductor.utils import run_and_get_code
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

CPP = {"cpp_wrapper": True}


def close(a, b, tol=1e-5):
    torch.testing.assert_close(a.cpu(), b.cpu(), atol=tol, rtol=tol)


def assert_cpp_wrapper_code(codes):
    """The generated wrapper is the C++ one and does openreg's work."""
    code = "\n".join(codes)
    assert "CppWrapperCodeCache.load_pybinding" in code, code  # C++ wrapper, JIT
    assert "openreg_compile(" not in code, code                  # not the Python wrapper
    assert "openreg_inductor::launch(" in code, code             # kernels launched on openreg
    return code


def run(fn, *args, **kwargs):
    torch._dynamo.reset()
    out, codes = run_and_get_code(torch.compile(fn, options=CPP, **kwargs), *args)
    return out, assert_cpp_wrapper_code(codes)


@pytest.mark.compile
class TestCppWrapper:
    hw_classification = HW.ACCELERATOR

    def test_pointwise_chain(self):
        x = torch.randn(1000)
        f = lambda t: ((t * 2).sin() + 1).relu() * t.cos()  # noqa: E731
        out, code = run(f, x.to("openreg"), fullgraph=True)
        assert out.device == torch.device("openreg:0")
        close(out, f(x))

    def test_buffers_are_openreg_allocations(self):
        x = torch.randn(64, 64)
        f = lambda t: (t.exp() + 1).sum(0) * t.mean()  # noqa: E731  (intermediate buffers)
        out, code = run(f, x.to("openreg"))
        assert "aoti_torch_empty_strided(" in code and "cached_torch_device_type_privateuse1" in code
        close(out, f(x), 1e-4)

    def test_reduction(self):
        x = torch.randn(32, 100)
        f = lambda t: t.softmax(-1) * t.sum(-1, keepdim=True)  # noqa: E731
        out, _ = run(f, x.to("openreg"))
        close(out, f(x), 1e-4)

    def test_mm_with_epilogue_calls_the_openreg_c_shim(self):
        a, b, c = torch.randn(64, 32), torch.randn(32, 48), torch.randn(48)
        f = lambda a, b, c: (a @ b + c).relu() * 2  # noqa: E731
        out, code = run(f, a.to("openreg"), b.to("openreg"), c.to("openreg"))
        assert "aoti_torch_openreg_" in code, code
        close(out, f(a, b, c), 1e-4)

    def test_dynamic_shapes(self):
        torch._dynamo.reset()
        f = lambda t: (t * 2).softmax(-1) + t.sum()  # noqa: E731
        compiled = torch.compile(f, dynamic=True, options=CPP)
        for n in (3, 5, 8):
            x = torch.randn(n, n + 1)
            close(compiled(x.to("openreg")), f(x), 1e-4)

    def test_device_index(self):
        x = torch.randn(16, 16)
        f = lambda t: t.tanh() * 3  # noqa: E731
        out, _ = run(f, x.to("openreg:1"))
        assert out.device == torch.device("openreg:1")
        close(out, f(x))

    def test_mlp_training_step(self):
        torch.manual_seed(0)
        ref = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 10))
        model = copy.deepcopy(ref).to("openreg")
        x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))

        def step(m, x, y):
            loss = nn.functional.cross_entropy(m(x), y)
            loss.backward()
            return loss

        torch._dynamo.reset()
        compiled = torch.compile(lambda x, y: step(model, x, y), options=CPP)
        loss, codes = run_and_get_code(compiled, x.to("openreg"), y.to("openreg"))
        assert len(codes) >= 2, codes  # forward and backward graphs
        for code in codes:
            assert_cpp_wrapper_code([code])
        ref_loss = step(ref, x, y)
        close(loss, ref_loss, 1e-4)
        for p, q in zip(model.parameters(), ref.parameters()):
            assert p.grad.device.type == "openreg"
            close(p.grad, q.grad, 1e-4)

    def test_kernels_are_device_work_on_the_current_stream(self):
        from torch_openreg.testing import recorded_kernels

        torch._dynamo.reset()
        f = torch.compile(lambda t: (t * 2).sin() + 1, options=CPP)
        x = torch.randn(1 << 16, device="openreg")
        f(x)  # compile outside the trace
        host = torch.full((1 << 16,), 3.0).pin_memory()
        torch.openreg._sleep(20_000)      # the stream is busy for 20 ms,
        x.copy_(host, non_blocking=True)  # then an asynchronous copy is queued
        with recorded_kernels() as names:
            y = f(x)                      # runs after both, on the same stream
        assert names and names[0].startswith("cpp_fused_add_mul_sin_"), names
        close(y, (host * 2).sin() + 1)

    def test_fallback_operator(self):
        x = torch.randn(7, 9)
        f = lambda t: torch.median(t, dim=1).values + 1  # noqa: E731  (no lowering)
        out, code = run(f, x.to("openreg"))
        # Not in torch's C-shim list: Inductor calls it through the dispatcher.
        assert 'aoti_torch_call_dispatcher("aten::median"' in code, code
        close(out, f(x))
