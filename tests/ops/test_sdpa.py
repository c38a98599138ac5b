"""Scaled dot-product attention on openreg: the overrideable fused kernel against
the CPU math path, dropout reproducibility and statistics, backend selection
and errors."""

import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

from tests import target
from tests.target import DEVICE, HW, device

aten = torch.ops.aten
FWD = aten._scaled_dot_product_fused_attention_overrideable.default
BWD = aten._scaled_dot_product_fused_attention_overrideable_backward.default


class RecordOps(TorchDispatchMode):
    """Records the ATen operators that reach the backend (below autograd)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


def cpu_math(q, k, v, **kw):
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, **kw)


def to_dev(x):
    return (x.detach().to(DEVICE).requires_grad_(x.requires_grad)
            if isinstance(x, torch.Tensor) else x)


def tolerances(dtype):
    return dict(atol=3e-2, rtol=3e-2) if dtype in (torch.bfloat16, torch.float16) else {}


def check_against_cpu(q, k, v, dtype=torch.float32, **kw):
    """Forward and gradients (q, k, v and a float mask that requires grad) on
    openreg through the fused kernel equal the CPU math path."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (t.detach().clone().to(dtype).requires_grad_() for t in (q, k, v))
    out = cpu_math(q, k, v, **kw)
    grad = torch.randn(out.shape, generator=gen).to(dtype)
    out.backward(grad)

    qd, kd, vd = (to_dev(t) for t in (q, k, v))
    kwd = {name: to_dev(val) for name, val in kw.items()}
    rec = RecordOps()
    with rec:
        outd = F.scaled_dot_product_attention(qd, kd, vd, **kwd)
        outd.backward(grad.to(DEVICE))
    assert FWD in rec.ops and BWD in rec.ops, "the overrideable kernels did not run"

    tol = tolerances(dtype)
    assert outd.device.type == DEVICE and outd.dtype == out.dtype
    torch.testing.assert_close(outd.cpu(), out.detach(), **tol)
    for dev_t, cpu_t in [(qd, q), (kd, k), (vd, v)]:
        assert dev_t.grad.dtype == cpu_t.grad.dtype and dev_t.grad.shape == cpu_t.grad.shape
        torch.testing.assert_close(dev_t.grad.cpu(), cpu_t.grad, **tol)
    mask = kw.get("attn_mask")
    if mask is not None and mask.requires_grad:
        torch.testing.assert_close(kwd["attn_mask"].grad.cpu(), mask.grad, **tol)


def qkv(B=2, Hq=4, Hkv=4, L=5, S=7, E=8, Ev=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = lambda *s: tuple(x for x in s if x is not None)  # noqa: E731
    return (torch.randn(shape(B, Hq, L, E), generator=g),
            torch.randn(shape(B, Hkv, S, E), generator=g),
            torch.randn(shape(B, Hkv, S, Ev), generator=g))


@pytest.mark.ops
@pytest.mark.smoke
class TestSDPAQuick:
    hw_classification = HW.ACCELERATOR

    def test_fused_choice_is_overrideable(self):
        q, k, v = (t.to(DEVICE) for t in qkv())
        assert torch._fused_sdp_choice(q, k, v) == SDPBackend.OVERRIDEABLE.value
        # The CPU's own choice is untouched.
        assert torch._fused_sdp_choice(*qkv()) != SDPBackend.OVERRIDEABLE.value

    def test_forward_backward_match_cpu_math(self):
        check_against_cpu(*qkv())

    @pytest.mark.openreg_only  # openreg's conventions for the unused outputs and seed/offset
    def test_outputs_are_real(self):
        q, k, v = (t.to(DEVICE) for t in qkv())
        out, lse, cq, ck, max_q, max_k, seed, offset, dbg = FWD(q, k, v)
        s = (q.cpu() @ k.cpu().transpose(-2, -1)) / 8 ** 0.5
        torch.testing.assert_close(lse.cpu(), torch.logsumexp(s, -1))
        assert lse.dtype == torch.float32 and (max_q, max_k) == (5, 7)
        assert cq is None and ck is None and dbg is None
        assert seed.item() == 0 and offset.item() == 0  # no dropout: no seed drawn


@pytest.mark.ops
class TestSDPAMatchesCPU:
    hw_classification = HW.ACCELERATOR

    CASES = {
        "plain": (dict(), {}),
        "causal": (dict(L=6, S=6), dict(is_causal=True)),
        "causal_L_lt_S": (dict(L=4, S=7), dict(is_causal=True)),
        "causal_L_gt_S": (dict(L=7, S=4), dict(is_causal=True)),
        "scale": (dict(), dict(scale=0.37)),
        "negative_scale": (dict(), dict(scale=-0.2)),
        "gqa": (dict(Hq=6, Hkv=2), dict(enable_gqa=True)),
        "mqa_broadcast": (dict(Hq=3, Hkv=1), {}),
        "single_query": (dict(L=1, S=9), {}),
    }

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
    @pytest.mark.parametrize("case", sorted(CASES))
    def test_configurations(self, case, dtype):
        shape, kw = self.CASES[case]
        check_against_cpu(*qkv(**shape), dtype=dtype, **kw)

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
    @pytest.mark.parametrize("mask_shape", [(5, 7), (2, 1, 5, 7), (1, 4, 1, 7), (2, 4, 5, 7)])
    def test_bool_mask_broadcast(self, mask_shape, dtype):
        g = torch.Generator().manual_seed(1)
        mask = torch.rand(mask_shape, generator=g) > 0.3
        check_against_cpu(*qkv(), dtype=dtype, attn_mask=mask)

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
    @pytest.mark.parametrize("mask_shape", [(5, 7), (2, 1, 5, 7), (2, 4, 5, 7)])
    def test_float_mask_with_gradient(self, mask_shape, dtype):
        g = torch.Generator().manual_seed(2)
        mask = torch.randn(mask_shape, generator=g, dtype=dtype).requires_grad_()
        check_against_cpu(*qkv(), dtype=dtype, attn_mask=mask)

    # Small float32 attention (T5's sizes) has a backward of its own, in loops
    # rather than ATen operators (Attention.cpp, small_attention_backward):
    # random sizes, trainable masks of every broadcast shape, causality,
    # scales and transposed (non-contiguous) inputs against the CPU math path.
    @settings(max_examples=30, deadline=None)
    @given(B=st.integers(1, 3), H=st.integers(1, 4), L=st.integers(1, 20), S=st.integers(1, 20),
           E=st.integers(1, 12), Ev=st.integers(1, 12),
           mask=st.sampled_from(["none", "LS", "BHLS", "B1LS", "1H1S"]),
           causal=st.booleans(), scale=st.sampled_from([None, 1.0, 0.3]),
           transposed=st.booleans(), seed=st.integers(0, 2**16))
    def test_small_float32_backward(self, B, H, L, S, E, Ev, mask, causal, scale, transposed,
                                    seed):
        q, k, v = qkv(B=B, Hq=H, Hkv=H, L=L, S=S, E=E, Ev=Ev, seed=seed)
        if transposed:  # (B, L, H, E) memory seen as (B, H, L, E), as attention layers do
            q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
        kw = {} if scale is None else {"scale": scale}
        if mask == "none":
            kw["is_causal"] = causal and L <= S  # causal with L > S leaves rows empty
        else:
            shape = {"LS": (L, S), "BHLS": (B, H, L, S), "B1LS": (B, 1, L, S),
                     "1H1S": (1, H, 1, S)}[mask]
            g = torch.Generator().manual_seed(seed + 1)
            kw["attn_mask"] = torch.randn(shape, generator=g).requires_grad_()
        check_against_cpu(q, k, v, **kw)

    def test_float32_mask_with_bfloat16_inputs(self):
        mask = torch.randn(5, 7)
        check_against_cpu(*qkv(), dtype=torch.bfloat16, attn_mask=mask)

    def test_fully_masked_rows_are_zero_like_math(self):
        mask = torch.ones(5, 7, dtype=torch.bool)
        mask[2] = False
        check_against_cpu(*qkv(), attn_mask=mask)

    @pytest.mark.openreg_only  # openreg's kernel accepts a mask with is_causal
    def test_mask_and_causal_combine(self):
        # Inputs the CPU's flash kernel takes (Ev == E). Up to torch 2.14 it
        # applies both the mask and causality (the math path refuses both at
        # once), and so does openreg: equal to math with the combined mask.
        # From 2.15 PyTorch's frontend refuses both at once on every device,
        # and openreg fails as the CPU does.
        q, k, v = qkv(L=6, S=6, Ev=8)
        mask = torch.rand(6, 6, generator=torch.Generator().manual_seed(3)) > 0.2
        dev_args = [t.to(DEVICE) for t in (q, k, v)]
        try:
            on_cpu = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True)
        except RuntimeError as refused:
            with pytest.raises(RuntimeError, match=re.escape(str(refused).splitlines()[0])):
                F.scaled_dot_product_attention(*dev_args, attn_mask=mask.to(DEVICE), is_causal=True)
            return
        expected = cpu_math(q, k, v, attn_mask=mask & torch.ones(6, 6, dtype=torch.bool).tril())
        torch.testing.assert_close(on_cpu, expected)
        got = F.scaled_dot_product_attention(*dev_args, attn_mask=mask.to(DEVICE), is_causal=True)
        torch.testing.assert_close(got.cpu(), expected)

    def test_three_dimensional_inputs(self):
        q, k, v = qkv(B=None)
        assert q.dim() == 3
        check_against_cpu(q, k, v)
        check_against_cpu(q, k, v, attn_mask=torch.rand(5, 7, generator=torch.Generator().manual_seed(7)) > 0.5)

    def test_non_contiguous_inputs_and_matching_layout(self):
        # (B, L, H, E) tensors viewed as (B, H, L, E), as attention layers do.
        g = torch.Generator().manual_seed(4)
        q, k, v = (torch.randn(2, n, 4, 8, generator=g).transpose(1, 2) for n in (5, 7, 7))
        check_against_cpu(q, k, v)
        out = F.scaled_dot_product_attention(*(t.to(DEVICE) for t in (q, k, v)))
        assert out.stride() == q.stride()  # the meta function's layout, see below

    def test_strides_equal_the_meta_function(self):
        # Eager outputs must match what torch.compile's fake tensors predict.
        from torch._subclasses.fake_tensor import FakeTensorMode

        g = torch.Generator().manual_seed(5)
        base = [torch.randn(2, n, 4, d, generator=g) for n, d in ((5, 8), (7, 8), (7, 6))]
        args = [t.transpose(1, 2).to(DEVICE) for t in base]
        real = FWD(*args)
        with FakeTensorMode() as mode:
            fake = FWD(*(mode.from_tensor(t) for t in args))
        for r, f in zip(real[:2], fake[:2]):
            assert r.shape == f.shape and r.stride() == f.stride() and r.dtype == f.dtype
        grads = BWD(torch.randn_like(real[0]), *args, None, [True, True, True, False], real[0],
                    real[1], None, None, 5, 7, 0.0, False, real[6], real[7])
        for gr, t in zip(grads[:3], args):
            assert gr.shape == t.shape and gr.stride() == t.stride()
        assert grads[3] is None

    def test_direct_op_backward_respects_grad_input_mask(self):
        q, k, v = (t.to(DEVICE) for t in qkv())
        out, lse, *_, seed, offset, _ = FWD(q, k, v)
        dq, dk, dv, db = BWD(torch.ones_like(out), q, k, v, None, [False, True, False, False],
                             out, lse, None, None, 5, 7, 0.0, False, seed, offset)
        assert dq is None and dv is None and db is None and dk.shape == k.shape


@pytest.mark.ops
class TestSDPADropout:
    hw_classification = HW.ACCELERATOR

    def sdpa(self, q, k, v, p=0.3, seed=None, **kw):
        if seed is not None:
            target.device_module.manual_seed(seed)
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, **kw)

    def test_same_seed_same_result_new_draw_differs(self):
        q, k, v = (t.to(DEVICE) for t in qkv())
        a = self.sdpa(q, k, v, seed=7).cpu()
        b = self.sdpa(q, k, v, seed=7).cpu()
        c = self.sdpa(q, k, v).cpu()  # the generator moved on
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        assert not torch.equal(a, c)
        assert not torch.equal(a, cpu_math(*qkv()))  # dropout did something

    def test_uses_the_openreg_generator_not_the_cpu_one(self):
        q, k, v = (t.to(DEVICE) for t in qkv())
        cpu_state = torch.get_rng_state()
        dev_state = target.device_module.get_rng_state()
        self.sdpa(q, k, v)
        assert torch.equal(torch.get_rng_state(), cpu_state)
        assert not torch.equal(target.device_module.get_rng_state(), dev_state)
        # Restoring the openreg state reproduces the draw.
        target.device_module.set_rng_state(dev_state)
        a = self.sdpa(q, k, v).cpu()
        target.device_module.set_rng_state(dev_state)
        torch.testing.assert_close(self.sdpa(q, k, v).cpu(), a, rtol=0, atol=0)

    @pytest.mark.parametrize("p", [0.1, 0.3, 0.7])
    def test_fraction_dropped(self, p):
        # Uniform attention (q = k = 0) over S keys with V = identity makes
        # out[i, j] = keep[i, j] / (S * (1 - p)): the output *is* the mask.
        S = 256
        z = torch.zeros(1, 1, S, 8, device=DEVICE)
        eye = torch.eye(S, device=DEVICE).view(1, 1, S, S)
        out = self.sdpa(z, z, eye, p=p, seed=0).cpu()
        dropped = (out == 0).float().mean().item()
        # S*S = 65536 draws: the standard deviation of the fraction is < 0.002.
        assert abs(dropped - p) < 0.01, dropped
        kept = out[out != 0]
        torch.testing.assert_close(kept, torch.full_like(kept, 1 / (S * (1 - p))))

    def test_dropout_one_drops_everything(self):
        q, k, v = (t.to(DEVICE) for t in qkv())
        out = self.sdpa(q, k, v, p=1.0)
        assert torch.equal(out.cpu(), torch.zeros(out.shape))

    @pytest.mark.openreg_only  # openreg's debug-mask output
    def test_backward_uses_the_forward_mask(self):
        # The same seed reproduces the mask; read it from the debug output and
        # give it to the CPU math path as an explicit dropout mask.
        q, k, v = qkv()
        qd, kd, vd = (t.to(DEVICE).requires_grad_() for t in (q, k, v))
        target.device_module.manual_seed(11)
        weights = FWD(qd, kd, vd, None, 0.4, False, True)[-1]
        keep = (weights != 0).cpu()
        assert 0.3 < 1 - keep.float().mean().item() < 0.5
        out = self.sdpa(qd, kd, vd, p=0.4, seed=11)
        grad = torch.randn(out.shape)
        out.backward(grad.to(DEVICE))

        qc, kc, vc = (t.clone().requires_grad_() for t in (q, k, v))
        expected = aten._scaled_dot_product_attention_math(qc, kc, vc, None, 0.4, False, keep)[0]
        expected.backward(grad)
        torch.testing.assert_close(out.detach().cpu(), expected.detach())
        for dev_t, cpu_t in [(qd, qc), (kd, kc), (vd, vc)]:
            torch.testing.assert_close(dev_t.grad.cpu(), cpu_t.grad)

    @pytest.mark.parametrize("kw", [dict(), dict(is_causal=True), dict(mask=True),
                                    dict(gqa=True)], ids=["plain", "causal", "mask", "gqa"])
    def test_gradcheck_float64(self, kw):
        q, k, v = qkv(B=1, Hq=4 if kw.get("gqa") else 2, Hkv=2, L=4, S=4 if "is_causal" in kw else 5,
                      E=3, Ev=2)
        args = [t.double().to(DEVICE).requires_grad_() for t in (q, k, v)]
        extra = {}
        if kw.get("mask"):
            args.append(torch.randn(1, 1, 4, 5, dtype=torch.float64, device=DEVICE, requires_grad=True))
        if kw.get("is_causal"):
            extra["is_causal"] = True
        if kw.get("gqa"):
            extra["enable_gqa"] = True

        def f(q, k, v, mask=None):
            target.device_module.manual_seed(1234)  # every evaluation: the same dropout mask
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.3, **extra)

        assert torch.autograd.gradcheck(f, tuple(args))


@pytest.mark.ops
class TestSDPASecondDevice:
    hw_classification = HW.ACCELERATOR

    @pytest.fixture(autouse=True)
    def _needs_two_devices(self):
        if target.device_module.device_count() < 2:
            pytest.skip(f"needs two {DEVICE} devices")

    def test_runs_on_the_inputs_device_with_its_generator(self):
        q, k, v = qkv()
        qd, kd, vd = (t.to(device(1)).requires_grad_() for t in (q, k, v))
        out = F.scaled_dot_product_attention(qd, kd, vd)
        assert out.device == torch.device(DEVICE, 1)
        torch.testing.assert_close(out.detach().cpu(), cpu_math(q, k, v))
        out.sum().backward()
        assert qd.grad.device == torch.device(DEVICE, 1)
        # Dropout draws from openreg:1's generator: reseeding openreg:0 only
        # does not reproduce it, reseeding openreg:1 does.
        with target.device_module.device(1):
            target.device_module.manual_seed(9)
        a = F.scaled_dot_product_attention(qd, kd, vd, dropout_p=0.5).detach().cpu()
        target.device_module.manual_seed(9)  # current device: openreg:0
        b = F.scaled_dot_product_attention(qd, kd, vd, dropout_p=0.5).detach().cpu()
        with target.device_module.device(1):
            target.device_module.manual_seed(9)
        c = F.scaled_dot_product_attention(qd, kd, vd, dropout_p=0.5).detach().cpu()
        assert torch.equal(a, c) and not torch.equal(a, b)


@pytest.mark.ops
class TestSDPABackendSelection:
    hw_classification = HW.ACCELERATOR

    def test_math_backend_on_openreg_skips_the_fused_kernel(self):
        q, k, v = (t.to(DEVICE) for t in qkv())
        rec = RecordOps()
        with sdpa_kernel(SDPBackend.MATH), rec:
            assert torch._fused_sdp_choice(q, k, v) == SDPBackend.MATH.value
            out = F.scaled_dot_product_attention(q, k, v)
        assert FWD not in rec.ops
        torch.testing.assert_close(out.cpu(), cpu_math(*qkv()))

    def test_priority_order_is_honoured(self):
        q, k, v = (t.to(DEVICE) for t in qkv())
        with sdpa_kernel([SDPBackend.MATH, SDPBackend.OVERRIDEABLE], set_priority=True):
            assert torch._fused_sdp_choice(q, k, v) == SDPBackend.MATH.value
        with sdpa_kernel([SDPBackend.OVERRIDEABLE, SDPBackend.MATH], set_priority=True):
            assert torch._fused_sdp_choice(q, k, v) == SDPBackend.OVERRIDEABLE.value

    def test_other_ranks_take_the_math_path(self):
        q = torch.randn(2, 2, 3, 5, 8)
        rec = RecordOps()
        with rec:
            out = F.scaled_dot_product_attention(q.to(DEVICE), q.to(DEVICE), q.to(DEVICE))
        assert FWD not in rec.ops
        torch.testing.assert_close(out.cpu(), cpu_math(q, q, q))

    @pytest.mark.openreg_only  # openreg's own message
    def test_only_overrideable_enabled_names_the_reason(self):
        q = torch.randn(2, 2, 3, 5, 8, device=DEVICE)
        with sdpa_kernel(SDPBackend.OVERRIDEABLE):
            with pytest.raises(RuntimeError, match="no enabled backend.*must all be 3-D or 4-D"):
                F.scaled_dot_product_attention(q, q, q)

    def test_heads_without_gqa_fail_like_cpu(self):
        q, k, v = qkv(Hq=4, Hkv=2)
        with pytest.raises(RuntimeError) as cpu_err:
            cpu_math(q, k, v)
        with pytest.raises(RuntimeError) as dev_err:
            F.scaled_dot_product_attention(q.to(DEVICE), k.to(DEVICE), v.to(DEVICE))
        assert str(dev_err.value).splitlines()[0] == str(cpu_err.value).splitlines()[0]


@pytest.mark.ops
class TestSDPAErrors:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.openreg_only  # openreg's kernel's own message
    def test_dtype_mismatch(self):
        q, k, v = (t.to(DEVICE) for t in qkv())
        with pytest.raises(RuntimeError, match="same dtype"):
            F.scaled_dot_product_attention(q, k.double(), v)
        with pytest.raises(RuntimeError, match="same dtype"):
            FWD(q, k.double(), v)

    @pytest.mark.openreg_only  # openreg's own message
    def test_integer_inputs(self):
        q = torch.ones(1, 1, 2, 2, dtype=torch.int64, device=DEVICE)
        with pytest.raises(RuntimeError, match="query dtype must be float32, float64, float16 or bfloat16"):
            FWD(q, q, q)

    def test_device_mismatch(self):
        q, k, v = (t.to(DEVICE) for t in qkv())
        with pytest.raises(RuntimeError, match="same device type"):
            F.scaled_dot_product_attention(q, k.cpu(), v)
        # CUDA's wrapper check and message (DeviceCheck.h), before any work
        same = "Expected all tensors to be on the same device, but got "
        with pytest.raises(RuntimeError, match=same + f"key is on cpu, different from other tensors on {device(0)}"):
            FWD(q, k.cpu(), v)
        if target.device_module.device_count() > 1:
            with pytest.raises(RuntimeError, match=same + f"value is on {device(1)}"):
                FWD(q, k, v.to(device(1)))
        with pytest.raises(RuntimeError, match=same + "attn_bias is on cpu"):
            FWD(q, k, v, torch.zeros(5, 7))

    @pytest.mark.openreg_only  # openreg's own message
    def test_mask_shape(self):
        q, k, v = (t.to(DEVICE) for t in qkv())
        mask = torch.ones(5, 6, dtype=torch.bool, device=DEVICE)
        with pytest.raises(RuntimeError, match=r"attn_mask of shape \[5, 6\] is not broadcastable "
                                               r"to the attention weights' shape \[2, 4, 5, 7\]"):
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    @pytest.mark.openreg_only  # openreg's kernel's own message
    def test_mask_dtype(self):
        q, k, v = (t.to(DEVICE) for t in qkv())
        with pytest.raises(RuntimeError, match="attn_mask dtype"):
            F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(5, 7, dtype=torch.int32, device=DEVICE))
        with pytest.raises(RuntimeError, match="attn_mask must be bool or floating point, got Int"):
            FWD(q, k, v, torch.ones(5, 7, dtype=torch.int32, device=DEVICE))

    @pytest.mark.parametrize("p", [-0.1, 1.5])
    @pytest.mark.openreg_only  # openreg's own message
    def test_dropout_range(self, p):
        q, k, v = (t.to(DEVICE) for t in qkv())
        with pytest.raises(RuntimeError, match="dropout probability has to be between 0 and 1"):
            F.scaled_dot_product_attention(q, k, v, dropout_p=p)

    @pytest.mark.openreg_only  # openreg's own messages
    def test_shape_mismatches(self):
        q, k, v = (t.to(DEVICE) for t in qkv())
        with pytest.raises(RuntimeError, match=r"key's last dimension \(4\) must equal query's \(8\)"):
            FWD(q, k[..., :4], v)
        with pytest.raises(RuntimeError, match="must agree in heads and sequence length"):
            FWD(q, k, v[:, :, :3])
        with pytest.raises(RuntimeError, match="same batch size"):
            FWD(q, k[:1], v[:1])
        with pytest.raises(RuntimeError, match=r"key/value heads \(3\) must divide the number of query heads \(4\)"):
            FWD(q, k[:, :3], v[:, :3])
        with pytest.raises(RuntimeError, match="must all be 3-D"):
            FWD(q[0, 0], k[0, 0], v[0, 0])

    @pytest.mark.openreg_only  # openreg's own message
    def test_backward_with_dropout_needs_the_seed(self):
        q, k, v = (t.to(DEVICE) for t in qkv())
        out, lse, *_ = FWD(q, k, v)
        with pytest.raises(RuntimeError, match="needs the philox_seed"):
            BWD(torch.ones_like(out), q, k, v, None, [True] * 4, out, lse, None, None, 5, 7,
                0.5, False, torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long))

    @pytest.mark.parametrize("Ev", [6, 8])  # the small float32 kernel; the CPU flash kernel
    def test_backward_grad_out_must_have_the_output_shape(self, Ev):
        q, k, v = (t.to(DEVICE) for t in qkv(Ev=Ev))
        out, lse, *_, seed, offset, _ = FWD(q, k, v)
        bad = torch.ones(2, 4, 5, Ev + 3, device=DEVICE)
        with pytest.raises(RuntimeError, match=r"grad_out must have the output's shape "
                                               rf"\[2, 4, 5, {Ev}\], got \[2, 4, 5, {Ev + 3}\]"):
            BWD(bad, q, k, v, None, [True] * 4, out, lse, None, None, 5, 7, 0.0, False, seed,
                offset)

    def test_errors_leave_the_device_usable(self):
        q, k, v = (t.to(DEVICE) for t in qkv())
        with pytest.raises(RuntimeError):
            FWD(q, k[..., :4], v)
        torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v).cpu(), cpu_math(*qkv()))


@pytest.mark.ops
class TestSDPACompile:
    hw_classification = HW.ACCELERATOR

    def test_aot_eager_fullgraph_forward_and_backward(self):
        def attn(q, k, v, mask):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).relu().sum()

        q, k, v = qkv()
        mask = torch.rand(5, 7, generator=torch.Generator().manual_seed(6)) > 0.3
        eager_args = [t.to(DEVICE).requires_grad_() for t in (q, k, v)]
        comp_args = [t.to(DEVICE).requires_grad_() for t in (q, k, v)]
        compiled = torch.compile(attn, backend="aot_eager", fullgraph=True)
        attn(*eager_args, mask.to(DEVICE)).backward()
        rec = RecordOps()
        loss = compiled(*comp_args, mask.to(DEVICE))
        with rec:
            loss.backward()
        assert BWD in rec.ops
        for a, b in zip(comp_args, eager_args):
            torch.testing.assert_close(a.grad.cpu(), b.grad.cpu())
        torch._dynamo.reset()

    def test_aot_eager_with_dropout_matches_eager(self):
        # Tracing runs the meta function (no draw); the compiled forward draws
        # the same seed as eager, and its backward regenerates the same mask.
        def attn(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, dropout_p=0.4).sum(-1)

        eager_args = [t.to(DEVICE).requires_grad_() for t in qkv()]
        comp_args = [t.to(DEVICE).requires_grad_() for t in qkv()]
        compiled = torch.compile(attn, backend="aot_eager", fullgraph=True)
        target.device_module.manual_seed(3)
        expected = attn(*eager_args)
        target.device_module.manual_seed(3)
        got = compiled(*comp_args)
        torch.testing.assert_close(got.detach().cpu(), expected.detach().cpu(), rtol=0, atol=0)
        expected.sum().backward()
        got.sum().backward()
        for a, b in zip(comp_args, eager_args):
            torch.testing.assert_close(a.grad.cpu(), b.grad.cpu())
        torch._dynamo.reset()
