"""Beyond dense real tensors: complex tensors work and equal the CPU; named
tensors behave exactly as on the CPU in torch 2.13 (the API is gone); nested
and Mkldnn tensors are refused with a NotImplementedError naming the
operator. (Quantized tensors are supported: tests/ops/test_quantized.py;
sparse ones: tests/ops/test_sparse.py.)"""


import pytest
import torch

from tests.target import DEVICE, HW, device

COMPLEX = [torch.complex64, torch.complex128]


def same(dev_result, cpu_result, **kw):
    assert dev_result.device.type == DEVICE
    assert dev_result.dtype == cpu_result.dtype
    assert dev_result.shape == cpu_result.shape
    torch.testing.assert_close(dev_result.cpu(), cpu_result, **kw)


def cplx(*shape, dtype=torch.complex64, seed=0):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


@pytest.mark.ops
class TestComplex:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("dtype", COMPLEX, ids=str)
    @pytest.mark.parametrize("op", [
        lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b, lambda a, b: a / b,
        lambda a, b: a ** 2, lambda a, b: a ** b, lambda a, b: -a, lambda a, b: a.reciprocal(),
        lambda a, b: a * 2.5, lambda a, b: a + (1 - 2j), lambda a, b: a == b, lambda a, b: a.exp(),
        lambda a, b: a.log(), lambda a, b: a.sqrt(), lambda a, b: a.sgn(), lambda a, b: a.tanh(),
        lambda a, b: a.sum(), lambda a, b: a.mean(0), lambda a, b: a.prod(1), lambda a, b: a.cumsum(0),
    ], ids=["add", "sub", "mul", "div", "pow2", "pow", "neg", "reciprocal", "mul_scalar",
            "add_complex_scalar", "eq", "exp", "log", "sqrt", "sgn", "tanh", "sum", "mean", "prod", "cumsum"])
    def test_arithmetic(self, op, dtype):
        a, b = cplx(4, 5, dtype=dtype), cplx(4, 5, dtype=dtype, seed=1)
        same(op(a.to(DEVICE), b.to(DEVICE)), op(a, b))

    @pytest.mark.parametrize("dtype", COMPLEX, ids=str)
    def test_matmul_family(self, dtype):
        a, b = cplx(3, 4, dtype=dtype), cplx(4, 5, dtype=dtype, seed=1)
        A, B = a.to(DEVICE), b.to(DEVICE)
        same(A @ B, a @ b)
        same(torch.bmm(A.expand(2, 3, 4), B.expand(2, 4, 5)), torch.bmm(a.expand(2, 3, 4), b.expand(2, 4, 5)))
        same(torch.einsum("ij,jk->ik", A, B), torch.einsum("ij,jk->ik", a, b))
        # Lazy conjugation (conj bit) and the adjoint, as inputs to a matmul.
        same(A.conj() @ B, a.conj() @ b)
        same(A.mH @ A, a.mH @ a)
        same(torch.vdot(A[0], A[1]), torch.vdot(a[0], a[1]))
        same(torch.linalg.inv(A[:, :3]), torch.linalg.inv(a[:, :3]))

    @pytest.mark.parametrize("dtype", COMPLEX, ids=str)
    def test_parts_abs_angle(self, dtype):
        z = cplx(6, dtype=dtype)
        Z = z.to(DEVICE)
        for f in (torch.abs, torch.angle, torch.real, torch.imag, torch.conj_physical,
                  lambda t: t.conj().resolve_conj(), lambda t: t.conj().imag.resolve_neg()):
            same(f(Z), f(z))
        real_dtype = torch.float32 if dtype == torch.complex64 else torch.float64
        assert Z.abs().dtype == real_dtype and Z.angle().dtype == real_dtype
        same(torch.polar(Z.abs(), Z.angle()), torch.polar(z.abs(), z.angle()), rtol=1e-5, atol=1e-5)
        same(torch.complex(Z.real, Z.imag), z)
        assert Z.conj().is_conj() and Z.conj().imag.is_neg()
        assert Z[2].item() == z[2].item()

    @pytest.mark.parametrize("dtype", COMPLEX, ids=str)
    def test_fft(self, dtype):
        z = cplx(4, 8, dtype=dtype)
        x = z.real.contiguous()
        Z, X = z.to(DEVICE), x.to(DEVICE)
        fft = torch.fft
        tol = dict(rtol=1e-5, atol=1e-5)
        same(fft.fft(Z), fft.fft(z), **tol)
        same(fft.ifft(Z), fft.ifft(z), **tol)
        same(fft.ifft(fft.fft(Z)), z, **tol)
        same(fft.rfft(X), fft.rfft(x), **tol)
        same(fft.irfft(fft.rfft(X), n=8), x, **tol)
        same(fft.fft(Z, n=12, dim=0, norm="ortho"), fft.fft(z, n=12, dim=0, norm="ortho"), **tol)
        same(fft.fft2(Z), fft.fft2(z), **tol)
        same(fft.fftn(Z, norm="forward"), fft.fftn(z, norm="forward"), **tol)
        same(fft.hfft(Z), fft.hfft(z), **tol)
        same(fft.ihfft(X), fft.ihfft(x), **tol)
        same(fft.fftshift(Z), fft.fftshift(z))
        same(fft.fftfreq(8, device=DEVICE), fft.fftfreq(8))

    def test_view_as_real_and_complex_are_views(self):
        z = cplx(3, 2)
        Z = z.to(DEVICE)
        r = torch.view_as_real(Z)
        same(r, torch.view_as_real(z))
        assert r.untyped_storage().data_ptr() == Z.untyped_storage().data_ptr()
        r[:, :, 1] = 0          # writing the imaginary parts through the real view
        assert Z.imag.cpu().eq(0).all()
        back = torch.view_as_complex(r)
        assert back.dtype == torch.complex64 and back.untyped_storage().data_ptr() == Z.untyped_storage().data_ptr()
        same(back, torch.complex(z.real, torch.zeros_like(z.real)))
        with pytest.raises(RuntimeError, match="Tensor must have a last dimension of size 2"):
            torch.view_as_complex(torch.zeros(3, 3, device=DEVICE))

    def test_autograd(self):
        z = cplx(5)
        w = z.clone().requires_grad_()
        W = z.to(DEVICE).requires_grad_()
        ((w * w.conj()).real.sum() + w.angle().sum()).backward()
        ((W * W.conj()).real.sum() + W.angle().sum()).backward()
        same(W.grad, w.grad, rtol=1e-5, atol=1e-5)

    def test_copies_between_devices(self):
        z = cplx(4, 4)
        assert torch.equal(z.to(DEVICE).cpu(), z)
        assert torch.equal(z.to(DEVICE).conj().cpu(), z.conj())   # conj bit applied in the copy
        Z = torch.empty(4, 4, dtype=torch.complex64, device=DEVICE)
        Z.copy_(z.t())
        assert torch.equal(Z.cpu(), z.t())
        assert torch.equal(z.to(device(1)).to(device(0)).cpu(), z)


@pytest.mark.ops
class TestNamedTensors:
    """torch 2.13 has no named tensors: no ``names=`` argument, no
    ``Tensor.names``/``refine_names``/``rename``/``align_to``, no Dimname
    overloads in the dispatcher. There is nothing for a backend to implement;
    openreg fails exactly as the CPU does."""
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("factory", [torch.zeros, torch.ones, torch.empty, torch.randn])
    def test_names_argument_fails_like_cpu(self, factory):
        errors = {}
        for device in ("cpu", DEVICE):
            with pytest.raises(TypeError) as info:
                factory(2, 3, names=("N", "C"), device=device)
            errors[device] = str(info.value)
        assert errors[DEVICE] == errors["cpu"]
        assert "names" in errors[DEVICE]

    def test_named_tensor_api_is_absent(self):
        t = torch.zeros(2, 3, device=DEVICE)
        for attr in ("names", "refine_names", "rename", "align_to", "has_names"):
            assert not hasattr(t, attr), attr
        assert not any("Dimname" in str(s) for s in torch._C._jit_get_all_schemas())


@pytest.mark.ops
@pytest.mark.openreg_only  # openreg refuses Mkldnn tensors, with its own message
class TestMkldnn:
    """(Sparse tensors are supported: tests/ops/test_sparse.py.)"""
    hw_classification = HW.ACCELERATOR

    def test_mkldnn_is_refused_too(self):
        with pytest.raises(NotImplementedError, match="openreg does not support Mkldnn tensors: the operator 'aten::to_mkldnn'"):
            torch.randn(2, 2, device=DEVICE).to_mkldnn()


@pytest.mark.ops
class TestNestedTensors:
    """Nested (jagged) tensors are not supported on openreg: a clear error."""
    hw_classification = HW.ACCELERATOR

    @pytest.mark.openreg_only  # openreg refuses nested tensors, with its own message
    def test_nested_result_is_refused_by_name(self):
        x = torch.randn(2, 5, 16, device="openreg")
        mask = torch.ones(2, 5, dtype=torch.bool, device="openreg")
        with pytest.raises(NotImplementedError,
                           match="openreg does not support nested tensors: the operator "
                                 "'aten::_nested_tensor_from_mask'"):
            torch._nested_tensor_from_mask(x, mask)

    def test_transformer_fast_path_without_padding_mask_works(self):
        import copy

        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(16, 4, 32, batch_first=True).eval()
        dev = copy.deepcopy(layer).to(DEVICE)
        x = torch.randn(2, 5, 16)
        with torch.no_grad():
            torch.testing.assert_close(dev(x.to(DEVICE)).cpu(), layer(x))
