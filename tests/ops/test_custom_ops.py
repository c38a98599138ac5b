"""Custom operators as a template: openreg::fused_bias_gelu (C++ op with autograd),
openreg::scaled_add (structured, three variants), ATen's addcmul through openreg's
DispatchStub kernel, and openreg::rms_norm (torch.library in Python). CPU is the
oracle; opcheck and torch.compile(backend="aot_eager") check the registrations."""

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.library import opcheck

from tests.target import DEVICE, HW

# opcheck's test_autograd_registration only knows CPU/CUDA/XPU tensors
# (NotImplementedError otherwise); the registration is device-independent
# and is checked with CPU inputs.
OPCHECK_OPENREG = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")


def opcheck_everywhere(op, make_args, kwargs=None):
    """opcheck with CPU inputs (all checks) and device inputs."""
    opcheck(op, make_args("cpu"), kwargs and kwargs("cpu"))
    opcheck(op, make_args(DEVICE), kwargs and kwargs(DEVICE), test_utils=OPCHECK_OPENREG)


def rand(*shape, dtype=torch.float32, seed=0, device="cpu", requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point or dtype.is_complex:
        t = torch.randn(*shape, generator=g, dtype=dtype)
    else:
        t = torch.randint(-5, 6, shape, generator=g, dtype=dtype)
    return t.to(device).requires_grad_(requires_grad)


def assert_same(dev, cpu, **tol):
    assert dev.device.type == DEVICE
    assert dev.dtype == cpu.dtype and dev.shape == cpu.shape
    torch.testing.assert_close(dev.cpu(), cpu, **tol)


def loose(dtype):
    return dict(atol=2e-2, rtol=2e-2) if dtype in (torch.bfloat16, torch.float16) else {}


def compiled_matches_eager(fn, *args):
    """fn compiled (aot_eager, fullgraph) on the device: same value and gradients as eager."""
    eager_args = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    comp_args = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    expected = fn(*eager_args)
    got = torch.compile(fn, backend="aot_eager", fullgraph=True)(*comp_args)
    torch.testing.assert_close(got.cpu(), expected.cpu())
    if expected.requires_grad:
        expected.sum().backward()
        got.sum().backward()
        for a, b in zip(comp_args, eager_args):
            if b.requires_grad:
                torch.testing.assert_close(a.grad.cpu(), b.grad.cpu())
    torch._dynamo.reset()


# ---------------------------------------------------------------- fused_bias_gelu


@pytest.mark.ops
@pytest.mark.smoke
@pytest.mark.openreg_only  # openreg's own operators (torch.ops.openreg)
class TestFusedBiasGeluQuick:
    hw_classification = HW.ACCELERATOR

    ops = torch.ops.openreg  # openreg's own operator library

    def test_forward_backward_match_cpu(self):
        x, b = rand(4, 16), rand(16, seed=1)
        xd, bd = x.to(DEVICE).requires_grad_(), b.to(DEVICE).requires_grad_()
        xc, bc = x.clone().requires_grad_(), b.clone().requires_grad_()
        y = self.ops.fused_bias_gelu(xd, bd)
        ref = F.gelu(xc + bc)
        assert_same(y, ref.detach())
        grad = rand(4, 16, seed=2)
        y.backward(grad.to(DEVICE))
        ref.backward(grad)
        assert_same(xd.grad, xc.grad)
        assert_same(bd.grad, bc.grad)


@pytest.mark.ops
@pytest.mark.openreg_only  # openreg's own operators (torch.ops.openreg)
class TestFusedBiasGelu:
    hw_classification = HW.ACCELERATOR

    ops = torch.ops.openreg  # openreg's own operator library

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
    @pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 8), (0, 4)])
    def test_matches_cpu(self, shape, dtype):
        x, b = rand(*shape, dtype=dtype), rand(shape[-1], dtype=dtype, seed=1)
        cpu = self.ops.fused_bias_gelu(x, b)  # the CPU kernel
        # The fused kernel adds in opmath before GELU; the unfused reference
        # rounds x + b to the dtype first.
        ref = F.gelu((x.double() + b.double())).to(dtype)
        torch.testing.assert_close(cpu, ref, **loose(dtype))
        assert_same(self.ops.fused_bias_gelu(x.to(DEVICE), b.to(DEVICE)), cpu, rtol=0, atol=0)

    def test_non_contiguous_input(self):
        x, b = rand(6, 4).t(), rand(6, seed=1)
        y = self.ops.fused_bias_gelu(x.to(DEVICE), b.to(DEVICE))
        assert y.is_contiguous()
        assert_same(y, F.gelu(x + b))

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
    def test_gradients_match_cpu(self, dtype):
        x, b = rand(3, 5, 6, dtype=dtype), rand(6, dtype=dtype, seed=1)
        grad = rand(3, 5, 6, dtype=dtype, seed=2)
        xc, bc = x.clone().requires_grad_(), b.clone().requires_grad_()
        F.gelu(xc + bc).backward(grad)
        xd, bd = x.to(DEVICE).requires_grad_(), b.to(DEVICE).requires_grad_()
        self.ops.fused_bias_gelu(xd, bd).backward(grad.to(DEVICE))
        assert_same(xd.grad, xc.grad, **loose(dtype))
        assert_same(bd.grad, bc.grad, **(dict(atol=0.1, rtol=2e-2) if dtype == torch.bfloat16 else {}))
        assert xd.grad.device == xd.device  # the backward op ran on the device

    @pytest.mark.parametrize("device", ["cpu", DEVICE])
    def test_gradcheck(self, device):
        x = rand(3, 4, dtype=torch.float64, device=device, requires_grad=True)
        b = rand(4, dtype=torch.float64, seed=1, device=device, requires_grad=True)
        assert torch.autograd.gradcheck(self.ops.fused_bias_gelu, (x, b))

    def test_opcheck(self):
        opcheck_everywhere(self.ops.fused_bias_gelu.default,
                           lambda d: (rand(3, 4, device=d, requires_grad=True),
                                      rand(4, seed=1, device=d, requires_grad=True)))
        opcheck_everywhere(self.ops.fused_bias_gelu_backward.default,
                           lambda d: (rand(3, 4, seed=2, device=d), rand(3, 4, device=d),
                                      rand(4, seed=1, device=d)))

    def test_compile(self):
        def mlp(x, w, b):
            return self.ops.fused_bias_gelu(x @ w, b).sum(-1)

        compiled_matches_eager(mlp, rand(4, 8, device=DEVICE, requires_grad=True),
                               rand(8, 6, seed=1, device=DEVICE, requires_grad=True),
                               rand(6, seed=2, device=DEVICE, requires_grad=True))

    def test_meta_and_fake(self):
        y = self.ops.fused_bias_gelu(torch.empty(2, 3, 5, device="meta"), torch.empty(5, device="meta"))
        assert y.shape == (2, 3, 5) and y.device.type == "meta"

    @pytest.mark.parametrize("device", ["cpu", DEVICE, "meta"])
    def test_bad_input(self, device):
        x = torch.zeros(3, 4, device=device)
        with pytest.raises(ValueError, match=r"bias must be 1-D with x.size\(-1\) = 4 elements, got shape \[3\]"):
            self.ops.fused_bias_gelu(x, torch.zeros(3, device=device))
        with pytest.raises(ValueError, match=r"got shape \[1, 4\]"):
            self.ops.fused_bias_gelu(x, torch.zeros(1, 4, device=device))
        with pytest.raises(TypeError, match=r"bias must have x's dtype \(Float\), got Double"):
            self.ops.fused_bias_gelu(x, torch.zeros(4, dtype=torch.float64, device=device))
        with pytest.raises(TypeError, match="x must be float32, float64, float16 or bfloat16, got Long"):
            self.ops.fused_bias_gelu(x.long(), torch.zeros(4, dtype=torch.long, device=device))
        with pytest.raises(ValueError, match="at least one dimension"):
            self.ops.fused_bias_gelu(torch.zeros((), device=device), torch.zeros(1, device=device))

    def test_device_mismatch(self):
        with pytest.raises(RuntimeError, match="x and bias must be on the same device, got x on openreg:0 and bias on cpu"):
            self.ops.fused_bias_gelu(torch.zeros(3, 4, device=DEVICE), torch.zeros(4))
        if torch.openreg.device_count() > 1:
            with pytest.raises(RuntimeError, match="bias on openreg:1"):
                self.ops.fused_bias_gelu(torch.zeros(3, 4, device=DEVICE), torch.zeros(4, device="openreg:1"))

    def test_runs_on_the_tensors_device(self):
        if torch.openreg.device_count() < 2:
            pytest.skip("needs OPENREG_DEVICE_COUNT >= 2")
        x, b = rand(3, 4, device="openreg:1"), rand(4, seed=1, device="openreg:1")
        y = self.ops.fused_bias_gelu(x, b)
        assert y.device == torch.device("openreg", 1)
        torch.testing.assert_close(y.cpu(), F.gelu(x.cpu() + b.cpu()))


# ---------------------------------------------------------------- scaled_add (structured)


@pytest.mark.ops
@pytest.mark.openreg_only  # openreg's own operators (torch.ops.openreg)
class TestScaledAddStructured:
    hw_classification = HW.ACCELERATOR

    ops = torch.ops.openreg  # openreg's own operator library

    CASES = [  # self, other, alpha: broadcasting and type promotion as torch.add
        (dict(shape=(3, 4)), dict(shape=(4,)), 2.5),
        (dict(shape=(2, 1, 4)), dict(shape=(3, 1)), -1.0),
        (dict(shape=(3, 4)), dict(shape=(3, 4), dtype=torch.float64), 0.5),
        (dict(shape=(3, 4), dtype=torch.int64), dict(shape=(4,), dtype=torch.int32), 3),
        (dict(shape=(3, 4), dtype=torch.int64), dict(shape=(4,)), 2),
        (dict(shape=(5,), dtype=torch.bfloat16), dict(shape=(5,), dtype=torch.bfloat16), 0.25),
        (dict(shape=(2, 3), dtype=torch.complex64), dict(shape=(3,)), 1.5),
    ]

    def make(self, spec, seed, device="cpu"):
        return rand(*spec["shape"], dtype=spec.get("dtype", torch.float32), seed=seed, device=device)

    @pytest.mark.parametrize("case", range(len(CASES)))
    @pytest.mark.parametrize("device", ["cpu", DEVICE])
    def test_functional(self, case, device):
        a, b, alpha = self.CASES[case]
        x, y = self.make(a, 0), self.make(b, 1)
        got = self.ops.scaled_add(x.to(device), y.to(device), alpha)
        expected = torch.add(x, y, alpha=alpha)
        assert got.device.type == device and got.dtype == expected.dtype
        torch.testing.assert_close(got.cpu(), expected)

    @pytest.mark.parametrize("case", range(len(CASES)))
    def test_meta_matches(self, case):
        a, b, alpha = self.CASES[case]
        x, y = self.make(a, 0), self.make(b, 1)
        m = self.ops.scaled_add(x.to("meta"), y.to("meta"), alpha)
        expected = torch.add(x, y, alpha=alpha)
        assert m.device.type == "meta" and m.shape == expected.shape and m.dtype == expected.dtype

    @pytest.mark.parametrize("device", ["cpu", DEVICE])
    def test_out_variant(self, device, capfd):
        x, y = rand(3, 4, device=device), rand(4, seed=1, device=device)
        expected = torch.add(x.cpu(), y.cpu(), alpha=2.0)
        out = torch.empty(3, 4, device=device)
        storage = out.untyped_storage().data_ptr()
        assert self.ops.scaled_add.out(x, y, 2.0, out=out) is out
        assert out.untyped_storage().data_ptr() == storage  # written in place
        torch.testing.assert_close(out.cpu(), expected)
        # An empty out is resized silently, a wrong-sized one with ATen's warning.
        out = torch.empty(0, device=device)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            self.ops.scaled_add.out(x, y, 2.0, out=out)
        torch.testing.assert_close(out.cpu(), expected)
        out = torch.empty(5, device=device)
        capfd.readouterr()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.ops.scaled_add.out(x, y, 2.0, out=out)
        # torch.ops calls print C++ warnings to stderr up to torch 2.14 and
        # raise them as Python warnings from 2.15, aten's own ops as well.
        said = capfd.readouterr().err + "".join(str(w.message) for w in caught)
        assert "An output with one or more elements was resized" in said
        torch.testing.assert_close(out.cpu(), expected)
        # A wider out dtype receives the cast result.
        out = torch.empty(3, 4, dtype=torch.float64, device=device)
        self.ops.scaled_add.out(x, y, 2.0, out=out)
        torch.testing.assert_close(out.cpu(), expected.double())
        # A non-contiguous out is written through its strides.
        base = torch.zeros(4, 3, device=device)
        self.ops.scaled_add.out(x, y, 2.0, out=base.t())
        torch.testing.assert_close(base.t().cpu(), expected)

    @pytest.mark.parametrize("device", ["cpu", DEVICE])
    def test_inplace_variant(self, device):
        x, y = rand(3, 4, device=device), rand(4, seed=1, device=device)
        expected = torch.add(x.cpu(), y.cpu(), alpha=-0.5)
        ptr = x.data_ptr()
        assert self.ops.scaled_add_(x, y, -0.5) is x
        assert x.data_ptr() == ptr
        torch.testing.assert_close(x.cpu(), expected)
        # self may alias other
        z = rand(5, device=device)
        expected = z.cpu() * 3
        self.ops.scaled_add_(z, z, 2.0)
        torch.testing.assert_close(z.cpu(), expected)

    @pytest.mark.parametrize("device", ["cpu", DEVICE, "meta"])
    def test_bad_input(self, device):
        x, y = torch.zeros(3, 4, device=device), torch.zeros(4, device=device)
        with pytest.raises(RuntimeError, match=r"The size of tensor a \(4\) must match the size of tensor b \(5\)"):
            self.ops.scaled_add(x, torch.zeros(5, device=device), 1.0)
        with pytest.raises(RuntimeError, match="For integral input tensors, argument alpha must not be a floating point number"):
            self.ops.scaled_add(x.long(), y.long(), 0.5)
        with pytest.raises(RuntimeError, match=r"output with shape \[4\] doesn't match the broadcast shape \[3, 4\]"):
            self.ops.scaled_add_(torch.zeros(4, device=device), x, 1.0)
        with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
            self.ops.scaled_add_(x.long(), y, 1.0)
        with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
            self.ops.scaled_add.out(x, y, 1.0, out=torch.zeros(3, 4, dtype=torch.long, device=device))

    def test_device_mismatch(self):
        x = torch.zeros(3, 4, device=DEVICE)
        with pytest.raises(RuntimeError, match="self and other must be on the same device, got openreg:0 and cpu"):
            self.ops.scaled_add(x, torch.zeros(4), 1.0)
        with pytest.raises(RuntimeError, match="out is on cpu but the inputs are on openreg:0"):
            self.ops.scaled_add.out(x, x, 1.0, out=torch.zeros(3, 4))

    @pytest.mark.parametrize("device", ["cpu", DEVICE])
    def test_gradients(self, device):
        x = rand(2, 3, 4, device=device, requires_grad=True)
        y = rand(3, 1, dtype=torch.float64, seed=1, device=device, requires_grad=True)
        xc, yc = (t.detach().cpu().requires_grad_() for t in (x, y))
        grad = rand(2, 3, 4, dtype=torch.float64, seed=2)
        self.ops.scaled_add(x, y, 1.5).backward(grad.to(device))
        torch.add(xc, yc, alpha=1.5).backward(grad)
        for d, c in [(x, xc), (y, yc)]:
            assert d.grad.dtype == c.grad.dtype and d.grad.shape == c.grad.shape
            torch.testing.assert_close(d.grad.cpu(), c.grad)

    @pytest.mark.parametrize("device", ["cpu", DEVICE])
    def test_gradcheck(self, device):
        x = rand(3, 4, dtype=torch.float64, device=device, requires_grad=True)
        y = rand(4, dtype=torch.float64, seed=1, device=device, requires_grad=True)
        assert torch.autograd.gradcheck(lambda a, b: self.ops.scaled_add(a, b, -0.7), (x, y))

    @pytest.mark.parametrize("device", ["cpu", DEVICE])
    def test_mutating_variants_refuse_gradients(self, device):
        w = rand(4, device=device, requires_grad=True)
        with pytest.raises(RuntimeError, match="don't support automatic differentiation.*use openreg::scaled_add"):
            self.ops.scaled_add_(w * 2, torch.ones(4, device=device), 1.0)
        with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
            self.ops.scaled_add.out(w, w, 1.0, out=torch.empty(4, device=device))
        with torch.no_grad():  # allowed, as for any in-place update of a parameter
            self.ops.scaled_add_(w, torch.ones(4, device=device), 1.0)

    @pytest.mark.parametrize("device", ["cpu", DEVICE])
    def test_version_counter(self, device):
        x, out = torch.zeros(3, device=device), torch.zeros(3, device=device)
        v, vo = x._version, out._version
        self.ops.scaled_add_(x, x, 1.0)
        self.ops.scaled_add.out(x, x, 1.0, out=out)
        assert x._version == v + 1 and out._version == vo + 1

    def test_opcheck(self):
        opcheck_everywhere(self.ops.scaled_add.default,
                           lambda d: (rand(3, 4, device=d, requires_grad=True),
                                      rand(4, seed=1, device=d, requires_grad=True), 0.5))
        opcheck_everywhere(self.ops.scaled_add_.default,
                           lambda d: (rand(3, 4, device=d), rand(4, seed=1, device=d), 0.5))
        opcheck_everywhere(self.ops.scaled_add.out,
                           lambda d: (rand(3, 4, device=d), rand(4, seed=1, device=d), 0.5),
                           lambda d: {"out": torch.empty(3, 4, device=d)})

    def test_compile_functional(self):
        compiled_matches_eager(lambda x, y: self.ops.scaled_add(x, y, 0.5).square(),
                               rand(3, 4, device=DEVICE, requires_grad=True),
                               rand(4, seed=1, device=DEVICE, requires_grad=True))

    def test_compile_mutating_variants(self):
        def f(x, y, out):
            self.ops.scaled_add_(x, y, 2.0)
            self.ops.scaled_add.out(x, y, -1.0, out=out)
            return out * 2

        # (An out= that needs resizing is a graph break in Dynamo, for any op.)
        args = (rand(3, 4, device=DEVICE), rand(4, seed=1, device=DEVICE),
                torch.empty(3, 4, device=DEVICE))
        eager = [t.clone() for t in args]
        comp = [t.clone() for t in args]
        expected = f(*eager)
        got = torch.compile(f, backend="aot_eager", fullgraph=True)(*comp)
        torch.testing.assert_close(got.cpu(), expected.cpu())
        for a, b in zip(comp, eager):  # the mutations reached the inputs
            assert a.shape == b.shape
            torch.testing.assert_close(a.cpu(), b.cpu())
        torch._dynamo.reset()


# ---------------------------------------------------------------- addcmul via DispatchStub


@pytest.mark.ops
class TestAddcmulDispatchStub:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.openreg_only  # openreg's recorded kernel names (torch_openreg.testing)
    def test_openreg_kernel_runs_for_every_variant(self):
        from torch_openreg.testing import recorded_kernels

        a, t1, t2 = rand(3, 4), rand(4, seed=1), rand(3, 1, seed=2)
        expected = torch.addcmul(a, t1, t2, value=0.5)
        ad, t1d, t2d = a.to(DEVICE), t1.to(DEVICE), t2.to(DEVICE)
        with recorded_kernels() as k:
            r = torch.addcmul(ad, t1d, t2d, value=0.5)
        assert k == ["addcmul_stub"]
        assert_same(r, expected)
        out = torch.empty(3, 4, device=DEVICE)
        with recorded_kernels() as k:
            torch.addcmul(ad, t1d, t2d, value=0.5, out=out)
        assert k == ["addcmul_stub"]
        assert_same(out, expected)
        x = a.to(DEVICE)
        with recorded_kernels() as k:
            x.addcmul_(t1d, t2d, value=0.5)
        assert k == ["addcmul_stub"]
        assert_same(x, expected)
        with recorded_kernels() as k:
            torch.addcmul(a, t1, t2)  # the CPU keeps its own kernel
        assert k == []

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16,
                                       torch.int64, torch.int32, torch.complex64])
    def test_dtypes(self, dtype):
        a, t1, t2 = (rand(5, 6, dtype=dtype, seed=s) for s in range(3))
        value = 2 if not (dtype.is_floating_point or dtype.is_complex) else 0.75
        expected = torch.addcmul(a, t1, t2, value=value)
        assert_same(torch.addcmul(a.to(DEVICE), t1.to(DEVICE), t2.to(DEVICE), value=value),
                    expected, **loose(dtype))

    def test_mixed_dtypes_and_cpu_scalars(self):
        # TensorIterator leaves mixed dtypes to device kernels: cast per element.
        a, t1 = rand(3, 4), rand(3, 4, dtype=torch.float64, seed=1)
        t2 = rand(4, dtype=torch.bfloat16, seed=2)
        expected = torch.addcmul(a, t1, t2, value=-1.25)
        assert_same(torch.addcmul(a.to(DEVICE), t1.to(DEVICE), t2.to(DEVICE), value=-1.25),
                    expected)
        scalar = torch.tensor(3.0, dtype=torch.float64)  # a 0-dim CPU tensor, read from host memory
        expected = torch.addcmul(a, t1.float(), scalar)
        assert_same(torch.addcmul(a.to(DEVICE), t1.float().to(DEVICE), scalar), expected)
        out = torch.empty(3, 4, dtype=torch.float64, device=DEVICE)
        torch.addcmul(a.to(DEVICE), a.to(DEVICE), a.to(DEVICE), out=out)
        assert_same(out, torch.addcmul(a, a, a).double())

    def test_non_contiguous_and_broadcast(self):
        a = rand(6, 5).t()
        t1, t2 = rand(5, 1, seed=1), rand(6, seed=2)[::2].repeat(2)
        expected = torch.addcmul(a, t1, t2, value=3.0)
        assert_same(torch.addcmul(a.to(DEVICE), t1.to(DEVICE), t2.to(DEVICE), value=3.0), expected)
        empty = torch.addcmul(torch.zeros(0, 4, device=DEVICE), torch.zeros(4, device=DEVICE),
                              torch.zeros(0, 1, device=DEVICE))
        assert empty.shape == (0, 4)

    def test_gradients_and_gradcheck(self):
        args = [rand(3, 4, dtype=torch.float64, seed=s, requires_grad=True) for s in range(3)]
        dev = [a.detach().to(DEVICE).requires_grad_() for a in args]
        torch.addcmul(*args, value=0.3).sum().backward()
        torch.addcmul(*dev, value=0.3).sum().backward()
        for d, c in zip(dev, args):
            assert_same(d.grad, c.grad)
        assert torch.autograd.gradcheck(lambda a, b, c: torch.addcmul(a, b, c, value=0.3),
                                        [d.detach().requires_grad_() for d in dev])

    @pytest.mark.openreg_only  # the dtype error names the CPU loop openreg's kernel reuses
    def test_errors(self):
        x = torch.zeros(3, device=DEVICE)
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            torch.addcmul(x, torch.zeros(3), x)
        # Unsupported dtypes fail exactly as on the CPU (same loop, same message).
        with pytest.raises(NotImplementedError, match="\"addcmul_cpu_out\" not implemented for 'Bool'"):
            torch.addcmul(x.bool(), x.bool(), x.bool())
        # ATen's meta function raises the CPU's own messages.
        for call in [lambda d: torch.zeros(3, device=d).long().addcmul_(torch.zeros(3, device=d), torch.zeros(3, device=d)),
                     lambda d: torch.zeros(3, device=d).addcmul_(torch.zeros(2, 3, device=d), torch.zeros(3, device=d)),
                     lambda d: torch.addcmul(torch.zeros(3, device=d), torch.zeros(4, device=d), torch.zeros(3, device=d))]:
            with pytest.raises(RuntimeError) as cpu:
                call("cpu")
            with pytest.raises(RuntimeError) as dev:
                call(DEVICE)
            assert str(dev.value) == str(cpu.value)

    def test_opcheck(self):
        opcheck(torch.ops.aten.addcmul.default,
                tuple(rand(3, 4, seed=s, device=DEVICE) for s in range(3)), {"value": 0.5},
                test_utils=OPCHECK_OPENREG)

    def test_compile(self):
        compiled_matches_eager(lambda a, b, c: torch.addcmul(a, b, c, value=2.0).relu(),
                               *(rand(3, 4, seed=s, device=DEVICE, requires_grad=True) for s in range(3)))


# ---------------------------------------------------------------- rms_norm (torch.library)


@pytest.mark.ops
@pytest.mark.openreg_only  # openreg's own operators (torch.ops.openreg, torch_openreg.ops)
class TestRmsNormPythonOp:
    hw_classification = HW.ACCELERATOR

    ops = torch.ops.openreg  # openreg's own operator library

    def reference(self, x, w, eps):
        return F.rms_norm(x, (x.shape[-1],), w, eps)

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
    def test_both_implementations_match_cpu(self, dtype):
        import torch_openreg
        from torch_openreg.testing import recorded_kernels

        x, w = rand(4, 3, 8, dtype=dtype), rand(8, dtype=dtype, seed=1)
        expected = self.reference(x, w, 1e-5)
        torch.testing.assert_close(self.ops.rms_norm(x, w, 1e-5), expected, **loose(dtype))  # default impl
        xd, wd = x.to(DEVICE), w.to(DEVICE)
        with recorded_kernels() as k:
            assert_same(self.ops.rms_norm(xd, wd, 1e-5), expected, **loose(dtype))
        # openreg's implementation ran: its one reduction is a vector norm (the
        # default implementation squares and takes a mean instead).
        assert any("vector_norm" in name for name in k), k
        assert not any("aten::mean" in name for name in k), k
        assert_same(torch_openreg.ops.rms_norm(x.to(DEVICE), w.to(DEVICE)),
                    self.reference(x, w, 1e-6), **loose(dtype))

    @pytest.mark.parametrize("device", ["cpu", DEVICE])
    def test_gradients(self, device):
        x = rand(2, 5, 6, device=device, requires_grad=True)
        w = rand(6, seed=1, device=device, requires_grad=True)
        xc, wc = (t.detach().cpu().requires_grad_() for t in (x, w))
        grad = rand(2, 5, 6, seed=2)
        self.ops.rms_norm(x, w, 1e-5).backward(grad.to(device))
        self.reference(xc, wc, 1e-5).backward(grad)
        torch.testing.assert_close(x.grad.cpu(), xc.grad)
        torch.testing.assert_close(w.grad.cpu(), wc.grad)

    @pytest.mark.parametrize("device", ["cpu", DEVICE])
    def test_gradcheck(self, device):
        x = rand(3, 4, dtype=torch.float64, device=device, requires_grad=True)
        w = rand(4, dtype=torch.float64, seed=1, device=device, requires_grad=True)
        assert torch.autograd.gradcheck(lambda a, b: self.ops.rms_norm(a, b, 1e-3), (x, w))

    def test_opcheck(self):
        opcheck_everywhere(self.ops.rms_norm.default,
                           lambda d: (rand(3, 4, device=d, requires_grad=True),
                                      rand(4, seed=1, device=d, requires_grad=True), 1e-5))

    def test_compile(self):
        compiled_matches_eager(lambda x, w: self.ops.rms_norm(x, w, 1e-5) * 2,
                               rand(3, 8, device=DEVICE, requires_grad=True),
                               rand(8, seed=1, device=DEVICE, requires_grad=True))

    @pytest.mark.parametrize("device", ["cpu", DEVICE, "meta"])
    def test_bad_input(self, device):
        x = torch.zeros(3, 4, device=device)
        with pytest.raises(ValueError, match=r"weight must be 1-D with x.shape\[-1\] = 4 elements, got shape \(3,\)"):
            self.ops.rms_norm(x, torch.zeros(3, device=device), 1e-5)
        with pytest.raises(TypeError, match=r"weight must have x's dtype \(torch.float32\), got torch.float64"):
            self.ops.rms_norm(x, torch.zeros(4, dtype=torch.float64, device=device), 1e-5)
        with pytest.raises(TypeError, match="x must be a floating-point tensor, got torch.int64"):
            self.ops.rms_norm(x.long(), torch.zeros(4, dtype=torch.long, device=device), 1e-5)

    def test_device_mismatch(self):
        with pytest.raises(RuntimeError, match="x and weight must be on the same device, got x on openreg:0 and weight on cpu"):
            self.ops.rms_norm(torch.zeros(3, 4, device=DEVICE), torch.zeros(4), 1e-5)
