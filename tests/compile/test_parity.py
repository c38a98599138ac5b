"""Compiled equals eager: on the device (its eager kernels) and on the CPU
(the oracle), for inference and training, gradients included; and the code
that ran was Inductor's (on openreg: its backend's kernels), with no graph
break or fallback."""

import copy

import pytest
import torch
import torch.nn as nn
from hypothesis import example, given, settings, strategies as st

from tests.target import DEVICE, HW

from ._helpers import assert_inductor_code, compile_and_run, to

UNARY = {"sin": torch.sin, "exp": lambda t: torch.exp(t.clamp(max=5)), "relu": torch.relu,
         "tanh": torch.tanh, "sigmoid": torch.sigmoid, "neg": torch.neg,
         "abs": torch.abs, "square": torch.square}


def close(a, b, tol=1e-5, atol=None):
    torch.testing.assert_close(a.cpu(), b.cpu(), atol=tol if atol is None else atol, rtol=tol)


@pytest.mark.compile
class TestKernels:
    hw_classification = HW.ACCELERATOR

    @settings(max_examples=4, deadline=None)
    @given(ops=st.lists(st.sampled_from(sorted(UNARY)), min_size=1, max_size=4),
           n=st.integers(1, 3000), scale=st.floats(-3, 3))
    @example(ops=["abs", "exp", "sin"], n=52, scale=3.0)  # once 4.5e-5 apart (see below)
    def test_pointwise_chain(self, ops, n, scale):
        peak = [1.0]  # the largest magnitude a unary op was given (eager, CPU)

        def chain(x, y):
            for name in ops:
                if x.device.type == "cpu" and not torch.compiler.is_compiling():
                    peak[0] = max(peak[0], x.abs().max().item() if x.numel() else 0.0)
                x = UNARY[name](x) * scale + y
            return x

        x, y = torch.randn(n), torch.randn(n)
        out, codes, counter = compile_and_run(chain, x.to(DEVICE), y.to(DEVICE),
                                              dynamic=True)
        assert_inductor_code(codes)
        assert counter.frame_count == 1
        expected = chain(x, y)                          # CPU oracle, eager
        # Inductor's vectorised exp/sin differ from eager's by an ulp or so, and
        # a later op sees that ulp of its argument: sin(3 * exp(5)) of an
        # argument near 445, whose ulp is 3e-5, differed by 4.5e-5. So the
        # bound is a few ulps of the largest argument as well as 1e-5.
        atol = max(1e-5, 8 * torch.finfo(torch.float32).eps * peak[0])
        close(out, chain(x.to(DEVICE), y.to(DEVICE)), atol=atol)   # eager, on the device
        close(out, expected, atol=atol)

    @pytest.mark.parametrize("op,dim", [("sum", 0), ("amax", 1), ("mean", -1), ("var", 0),
                                        ("softmax", 1), ("logsumexp", 0)])
    def test_reductions(self, op, dim):
        fn = {"softmax": lambda t: t.softmax(dim), "var": lambda t: t.var(dim),
              "logsumexp": lambda t: t.logsumexp(dim)}.get(op, lambda t: getattr(t, op)(dim))
        x = torch.randn(33, 17)
        out, codes, _ = compile_and_run(fn, x.to(DEVICE))
        assert_inductor_code(codes)
        close(out, fn(x.to(DEVICE)))
        close(out, fn(x))

    @pytest.mark.openreg_only
    def test_matmul_with_epilogue(self):
        from torch_openreg.testing import recorded_kernels

        from ._helpers import assert_openreg_code

        def fn(a, b, bias):
            return torch.nn.functional.gelu(a @ b + bias) * 2

        a, b, bias = torch.randn(64, 32), torch.randn(32, 48), torch.randn(48)
        args = to((a, b, bias), DEVICE)
        with recorded_kernels() as names:
            out, codes, _ = compile_and_run(fn, *args)
        code = assert_openreg_code(codes)
        assert "extern_kernels.mm" in code or "extern_kernels.addmm" in code, code
        close(out, fn(*args), 1e-4)
        close(out, fn(a, b, bias), 1e-4)
        # The epilogue is a generated kernel, the matmul the eager openreg one,
        # both launched on the device.
        assert any(n.startswith("cpp_fused") for n in names), names
        assert any("mm" in n for n in names), names

    @pytest.mark.openreg_only
    def test_generated_kernels_run_as_device_kernels(self):
        from torch_openreg.testing import recorded_kernels

        x = torch.randn(1000, device=DEVICE)
        f = torch.compile(lambda t: (t * 2).sin() + 1)
        f(x)  # compile outside the trace
        with recorded_kernels() as names:
            y = f(x)
        assert len(names) == 1 and names[0].startswith("cpp_fused_add_mul_sin_"), names
        close(y, (x.cpu() * 2).sin() + 1)


def make_mlp():
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 10))


def make_transformer():
    return nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)


def make_convnet():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 4 * 4, 10))


MODELS = {"mlp": (make_mlp, (8, 32)), "transformer": (make_transformer, (2, 8, 32)),
          "convnet": (make_convnet, (4, 3, 8, 8))}


@pytest.mark.compile
class TestModels:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("name", sorted(MODELS))
    def test_training_step_matches_eager_and_cpu(self, name):
        make, shape = MODELS[name]
        torch.manual_seed(0)
        cpu_model = make()
        eager_model = copy.deepcopy(cpu_model).to(DEVICE)
        model = copy.deepcopy(cpu_model).to(DEVICE)
        x = torch.randn(*shape)
        out, codes, counter = compile_and_run(model, x.to(DEVICE))
        out.square().mean().backward()
        ref = eager_model(x.to(DEVICE))
        ref.square().mean().backward()
        cpu = cpu_model(x)
        cpu.square().mean().backward()
        assert_inductor_code(codes)
        assert counter.frame_count == 1  # no graph break
        close(out, ref, 1e-4)
        close(out, cpu, 1e-4)
        for (pname, p), e, c in zip(model.named_parameters(), eager_model.parameters(),
                                    cpu_model.parameters()):
            close(p.grad, e.grad, 1e-4)
            close(p.grad, c.grad, 1e-4)

    def test_inference_under_no_grad(self):
        torch.manual_seed(0)
        model = make_mlp().eval()
        dev = copy.deepcopy(model).to(DEVICE)
        x = torch.randn(8, 32)
        with torch.no_grad():
            out, codes, _ = compile_and_run(dev, x.to(DEVICE))
            close(out, model(x), 1e-4)
        assert_inductor_code(codes)

    def test_conv_net_with_batch_norm_under_layout_optimisation(self):
        # Inductor's layout optimisation makes the weights channels_last; the
        # convolution kernel must still return the strides its meta function
        # (FakeTensor) promised, which Inductor asserts on the kernel's output.
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64),
                              nn.ReLU(), nn.Conv2d(64, 128, 3, padding=1)).eval()
        dev = copy.deepcopy(model).to(DEVICE)
        x = torch.randn(2, 3, 16, 16)
        with torch.no_grad():
            out, codes, counter = compile_and_run(dev, x.to(DEVICE))
            close(out, model(x), 1e-4)
        assert_inductor_code(codes)
        assert counter.frame_count == 1


@pytest.mark.compile
class TestFallback:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.openreg_only
    def test_operator_without_lowering_runs_its_eager_openreg_kernel(self):
        from torch_openreg.testing import recorded_kernels

        # aten.median has no Inductor lowering (a "fallback" kernel): the
        # compiled graph calls the eager openreg kernel for it and generates
        # kernels for the rest. Expected, and visible in the code and trace.
        def fn(x):
            return torch.median(x.sin(), dim=1).values * 2

        x = torch.randn(16, 9)
        with recorded_kernels() as names:
            out, codes, counter = compile_and_run(fn, x.to(DEVICE))
        code = "\n".join(codes)
        assert "torch.ops.aten.median.dim" in code, code
        assert any("median" in n for n in names), names
        assert any(n.startswith("cpp_fused") for n in names), names
        assert counter.frame_count == 1
        close(out, fn(x))

    @pytest.mark.parametrize("case", ["nonzero_static", "max_unpool2d_channels_last"])
    def test_fallback_kernel_returns_the_layout_its_meta_function_promises(self, case):
        # Inductor calls these through the eager kernel and asserts its
        # result's sizes and strides against the meta function's. The CPU's
        # kernels answer row-major (n, ndim) for nonzero_static (the meta
        # function, as CUDA, column-major) and channels_last for max_unpool2d
        # of a channels_last input (the meta function: contiguous).
        if case == "nonzero_static":
            def fn(x):
                return torch.nonzero_static(x.relu(), size=6) * 2

            args = (torch.randn(5, 4),)
        else:
            def fn(x, idx):
                return torch.nn.functional.max_unpool2d(x.sin(), idx, 2) + 1

            pooled, idx = torch.nn.functional.max_pool2d(torch.randn(2, 3, 8, 8), 2,
                                                         return_indices=True)
            args = (pooled.contiguous(memory_format=torch.channels_last),
                    idx.contiguous(memory_format=torch.channels_last))
        out, codes, counter = compile_and_run(fn, *[a.to(DEVICE) for a in args])
        code = "\n".join(codes)
        assert "assert_size_stride" in code, code
        assert counter.frame_count == 1
        close(out, fn(*args))
