"""Automatic mixed precision on openreg: torch.autocast("openreg") and
torch.amp.GradScaler("openreg").

openreg follows CUDA's autocast policy, not the CPU's. The expected policy of
every operator tested here is written down explicitly (the CUDA lists of
ATen/autocast_mode.h); values are checked against the CPU running the same
operator on inputs cast the way that policy casts them, and loosely against a
plain float32 CPU run.
"""

import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tests import target
from tests.target import DEVICE, HW, device

LOW_DTYPES = [torch.float16, torch.bfloat16]

# Policies (names as in ATen's CastPolicy).
LOW = "lower_precision_fp"    # run in the autocast dtype
FP32 = "fp32"                 # run in float32 (incl. fp32_set_opt_dtype / fp32_append_dtype)
PROMOTE = "promote"           # run in the widest floating dtype among the inputs
NONE = "none"                 # not on CUDA's lists: autocast leaves the op alone


def tree_map(fn, x):
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, (list, tuple)):
        return type(x)(tree_map(fn, e) for e in x)
    return x


def tensors(x):
    out = []
    tree_map(out.append, x)
    return out


def cast_floats(x, dtype):
    return tree_map(lambda t: t.to(dtype) if t.is_floating_point() else t, x)


def to_dev(x):
    return tree_map(lambda t: t.to(DEVICE), x)


# ---------------------------------------------------------------- inputs
def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def rn(*shape, g):
    return torch.randn(*shape, generator=g)


def pos(*shape, g):  # in [0.5, 2): log, rsqrt, reciprocal, pow
    return torch.rand(*shape, generator=g) * 1.5 + 0.5


def unit(*shape, g):  # in (-0.9, 0.9): acos, asin, erfinv
    return (torch.rand(*shape, generator=g) * 2 - 1) * 0.9


def prob(*shape, g):
    return torch.rand(*shape, generator=g) * 0.8 + 0.1


def lng(high, *shape, g):
    return torch.randint(0, high, shape, generator=g)


# (id, CUDA policy, function, inputs(g), CPU autocast agrees with CUDA here)
LOW_CASES = [
    ("mm", torch.mm, lambda g: (rn(3, 4, g=g), rn(4, 5, g=g)), True),
    ("matmul", torch.matmul, lambda g: (rn(2, 3, 4, g=g), rn(4, 5, g=g)), True),
    ("bmm", torch.bmm, lambda g: (rn(2, 3, 4, g=g), rn(2, 4, 5, g=g)), True),
    ("addmm", torch.addmm, lambda g: (rn(3, 5, g=g), rn(3, 4, g=g), rn(4, 5, g=g)), True),
    ("baddbmm", torch.baddbmm, lambda g: (rn(2, 3, 5, g=g), rn(2, 3, 4, g=g), rn(2, 4, 5, g=g)), True),
    ("addbmm", torch.addbmm, lambda g: (rn(3, 5, g=g), rn(2, 3, 4, g=g), rn(2, 4, 5, g=g)), True),
    ("addmv", torch.addmv, lambda g: (rn(3, g=g), rn(3, 4, g=g), rn(4, g=g)), False),
    ("addr", torch.addr, lambda g: (rn(3, 4, g=g), rn(3, g=g), rn(4, g=g)), False),
    ("mv", torch.mv, lambda g: (rn(3, 4, g=g), rn(4, g=g)), False),
    ("linear", F.linear, lambda g: (rn(2, 4, g=g), rn(3, 4, g=g), rn(3, g=g)), True),
    ("conv1d", F.conv1d, lambda g: (rn(1, 2, 8, g=g), rn(3, 2, 3, g=g)), True),
    ("conv2d", F.conv2d, lambda g: (rn(1, 2, 6, 6, g=g), rn(3, 2, 3, 3, g=g), rn(3, g=g)), True),
    ("conv3d", F.conv3d, lambda g: (rn(1, 2, 4, 4, 4, g=g), rn(3, 2, 2, 2, 2, g=g)), True),
    ("conv_transpose1d", F.conv_transpose1d, lambda g: (rn(1, 2, 5, g=g), rn(2, 3, 3, g=g)), True),
    ("conv_transpose2d", F.conv_transpose2d, lambda g: (rn(1, 2, 4, 4, g=g), rn(2, 3, 3, 3, g=g)), True),
    ("prelu", F.prelu, lambda g: (rn(2, 3, 4, g=g), pos(3, g=g) * 0.1), True),
    ("einsum", lambda a, b: torch.einsum("ij,jk->ik", a, b), lambda g: (rn(3, 4, g=g), rn(4, 5, g=g)), False),
    ("chain_matmul", lambda *m: torch.linalg.multi_dot(m), lambda g: (rn(3, 4, g=g), rn(4, 5, g=g), rn(5, 2, g=g)), False),
    ("linalg_vecdot", torch.linalg.vecdot, lambda g: (rn(3, 4, g=g), rn(3, 4, g=g)), True),
    # lstm_cell and gru_cell are on the list too, but ATen sends them to the
    # CUDA-only _thnn_fused_*_cell kernels on openreg (see test below).
    ("rnn_tanh_cell", torch.rnn_tanh_cell,
     lambda g: (rn(2, 4, g=g), rn(2, 3, g=g), rn(3, 4, g=g), rn(3, 3, g=g), rn(3, g=g), rn(3, g=g)), False),
    ("rnn_relu_cell", torch.rnn_relu_cell,
     lambda g: (rn(2, 4, g=g), rn(2, 3, g=g), rn(3, 4, g=g), rn(3, 3, g=g), rn(3, g=g), rn(3, g=g)), False),
    ("sdpa", lambda q, k, v: math_sdpa(q, k, v), lambda g: (rn(1, 2, 4, 8, g=g), rn(1, 2, 4, 8, g=g), rn(1, 2, 4, 8, g=g)), True),
]

FP32_CASES = [
    ("acos", torch.acos, lambda g: (unit(5, g=g),), False),
    ("asin", torch.asin, lambda g: (unit(5, g=g),), False),
    ("cosh", torch.cosh, lambda g: (rn(5, g=g),), False),
    ("erfinv", torch.erfinv, lambda g: (unit(5, g=g),), False),
    ("exp", torch.exp, lambda g: (rn(5, g=g),), False),
    ("expm1", torch.expm1, lambda g: (rn(5, g=g),), False),
    ("log", torch.log, lambda g: (pos(5, g=g),), False),
    ("log10", torch.log10, lambda g: (pos(5, g=g),), False),
    ("log2", torch.log2, lambda g: (pos(5, g=g),), False),
    ("log1p", torch.log1p, lambda g: (pos(5, g=g),), False),
    ("reciprocal", torch.reciprocal, lambda g: (pos(5, g=g),), False),
    ("rsqrt", torch.rsqrt, lambda g: (pos(5, g=g),), False),
    ("sinh", torch.sinh, lambda g: (rn(5, g=g),), False),
    ("tan", torch.tan, lambda g: (unit(5, g=g),), False),
    ("pow_tensor_scalar", lambda x: torch.pow(x, 3), lambda g: (pos(5, g=g),), False),
    ("pow_tensor_tensor", torch.pow, lambda g: (pos(5, g=g), pos(5, g=g)), False),
    ("pow_scalar", lambda x: torch.pow(2.0, x), lambda g: (rn(5, g=g),), False),
    ("softplus", F.softplus, lambda g: (rn(5, g=g),), False),
    ("layer_norm", lambda x, w, b: F.layer_norm(x, (4,), w, b), lambda g: (rn(3, 4, g=g), rn(4, g=g), rn(4, g=g)), False),
    ("group_norm", lambda x: F.group_norm(x, 2), lambda g: (rn(2, 4, 3, g=g),), False),
    ("rms_norm", lambda x: F.rms_norm(x, (4,)), lambda g: (rn(3, 4, g=g),), False),
    ("nuclear_norm", torch.nuclear_norm, lambda g: (rn(3, 4, g=g),), False),
    ("cosine_similarity", F.cosine_similarity, lambda g: (rn(3, 4, g=g), rn(3, 4, g=g)), False),
    ("poisson_nll_loss", F.poisson_nll_loss, lambda g: (rn(6, g=g), pos(6, g=g)), True),
    ("cosine_embedding_loss", F.cosine_embedding_loss, lambda g: (rn(3, 4, g=g), rn(3, 4, g=g), torch.tensor([1, -1, 1])), True),
    ("nll_loss", F.nll_loss, lambda g: (rn(4, 3, g=g).log_softmax(-1), lng(3, 4, g=g)), True),
    ("nll_loss2d", F.nll_loss, lambda g: (rn(2, 3, 2, 2, g=g).log_softmax(1), lng(3, 2, 2, 2, g=g)), True),
    ("hinge_embedding_loss", F.hinge_embedding_loss, lambda g: (rn(6, g=g), torch.tensor([1, -1, 1, 1, -1, -1])), True),
    ("kl_div", lambda x, y: F.kl_div(x, y, reduction="batchmean"), lambda g: (rn(3, 4, g=g).log_softmax(-1), prob(3, 4, g=g)), True),
    ("l1_loss", F.l1_loss, lambda g: (rn(6, g=g), rn(6, g=g)), True),
    ("smooth_l1_loss", F.smooth_l1_loss, lambda g: (rn(6, g=g), rn(6, g=g)), True),
    ("huber_loss", F.huber_loss, lambda g: (rn(6, g=g), rn(6, g=g)), True),
    ("mse_loss", F.mse_loss, lambda g: (rn(6, g=g), rn(6, g=g)), True),
    ("margin_ranking_loss", F.margin_ranking_loss, lambda g: (rn(6, g=g), rn(6, g=g), torch.tensor([1., -1, 1, 1, -1, -1])), True),
    ("multilabel_margin_loss", F.multilabel_margin_loss, lambda g: (rn(2, 4, g=g), torch.tensor([[3, 0, -1, 1], [1, 2, 3, -1]])), True),
    ("soft_margin_loss", F.soft_margin_loss, lambda g: (rn(6, g=g), torch.tensor([1., -1, 1, 1, -1, -1])), True),
    ("triplet_margin_loss", F.triplet_margin_loss, lambda g: (rn(3, 4, g=g), rn(3, 4, g=g), rn(3, 4, g=g)), True),
    ("multi_margin_loss", F.multi_margin_loss, lambda g: (rn(4, 3, g=g), lng(3, 4, g=g)), True),
    ("bce_with_logits", F.binary_cross_entropy_with_logits, lambda g: (rn(6, g=g), prob(6, g=g)), True),
    ("dist", torch.dist, lambda g: (rn(5, g=g), rn(5, g=g)), False),
    ("pdist", F.pdist, lambda g: (rn(4, 3, g=g),), False),
    ("cdist", torch.cdist, lambda g: (rn(3, 4, g=g), rn(2, 4, g=g)), True),
    ("renorm", lambda x: torch.renorm(x, 2, 0, 1.0), lambda g: (rn(3, 4, g=g),), False),
    ("logsumexp", lambda x: torch.logsumexp(x, 1), lambda g: (rn(3, 4, g=g),), False),
    ("upsample_nearest2d", lambda x: F.interpolate(x, scale_factor=2), lambda g: (rn(1, 2, 3, 3, g=g),), False),
    ("upsample_bilinear2d", lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), lambda g: (rn(1, 2, 3, 3, g=g),), False),
    ("upsample_bicubic2d", lambda x: F.interpolate(x, scale_factor=2, mode="bicubic"), lambda g: (rn(1, 2, 3, 3, g=g),), False),
    ("upsample_linear1d", lambda x: F.interpolate(x, scale_factor=2, mode="linear"), lambda g: (rn(1, 2, 4, g=g),), False),
    ("upsample_trilinear3d", lambda x: F.interpolate(x, scale_factor=2, mode="trilinear"), lambda g: (rn(1, 1, 2, 2, 2, g=g),), False),
    # fp32_set_opt_dtype: run in fp32 unless dtype= is given
    ("softmax", lambda x: torch.softmax(x, -1), lambda g: (rn(3, 4, g=g),), False),
    ("log_softmax", lambda x: torch.log_softmax(x, -1), lambda g: (rn(3, 4, g=g),), False),
    ("sum", torch.sum, lambda g: (rn(3, 4, g=g),), False),
    ("sum_dim", lambda x: x.sum(1), lambda g: (rn(3, 4, g=g),), False),
    ("cumsum", lambda x: torch.cumsum(x, 0), lambda g: (rn(5, g=g),), False),
    ("cumprod", lambda x: torch.cumprod(x, 0), lambda g: (pos(5, g=g),), False),
    ("prod", torch.prod, lambda g: (pos(5, g=g),), True),
    ("vector_norm", torch.linalg.vector_norm, lambda g: (rn(3, 4, g=g),), False),
    ("matrix_norm", torch.linalg.matrix_norm, lambda g: (rn(3, 4, g=g),), False),
    # the str_ord overload ("nuc" refuses half inputs even with dtype=, on every device)
    ("matrix_norm_fro", lambda x: torch.linalg.matrix_norm(x, "fro"), lambda g: (rn(3, 4, g=g),), False),
    # fp32_append_dtype: norm without dtype= is redispatched with dtype=float32
    ("norm", lambda x: x.norm(), lambda g: (rn(3, 4, g=g),), False),
    ("norm_dim", lambda x: x.norm(2, dim=1), lambda g: (rn(3, 4, g=g),), False),
]

# Inputs are mixed: the first floating tensor in the low dtype, the others float32.
PROMOTE_CASES = [
    ("addcmul", torch.addcmul, lambda g: (rn(5, g=g), rn(5, g=g), rn(5, g=g))),
    ("addcdiv", torch.addcdiv, lambda g: (rn(5, g=g), rn(5, g=g), pos(5, g=g))),
    ("atan2", torch.atan2, lambda g: (rn(5, g=g), rn(5, g=g))),
    # aten::cross is listed; torch.linalg.cross (aten::linalg_cross) is not, for CUDA either
    ("cross", lambda a, b: torch.cross(a, b, dim=1), lambda g: (rn(2, 3, g=g), rn(2, 3, g=g))),
    ("dot", torch.dot, lambda g: (rn(5, g=g), rn(5, g=g))),
    ("vdot", torch.vdot, lambda g: (rn(5, g=g), rn(5, g=g))),
    ("bilinear", F.bilinear, lambda g: (rn(2, 3, g=g), rn(2, 4, g=g), rn(5, 3, 4, g=g), rn(5, g=g))),
    ("tensordot", lambda a, b: torch.tensordot(a, b, dims=1), lambda g: (rn(3, 4, g=g), rn(4, 2, g=g))),
    ("scatter_add", lambda x, i, s: torch.scatter_add(x, 0, i, s), lambda g: (rn(5, g=g), torch.tensor([0, 1, 1, 4]), rn(4, g=g))),
    ("index_put", lambda x, i, v: x.index_put((i,), v), lambda g: (rn(5, g=g), torch.tensor([0, 3]), rn(2, g=g))),
    ("grid_sampler", lambda x, grid: F.grid_sample(x, grid, align_corners=False),
     lambda g: (rn(1, 2, 4, 4, g=g), unit(1, 3, 3, 2, g=g))),
]

# Not on CUDA's lists: autocast does nothing; the kernel's own type promotion applies.
NONE_CASES = [
    ("relu", torch.relu, lambda g: (rn(5, g=g),)),
    ("sigmoid", torch.sigmoid, lambda g: (rn(5, g=g),)),
    ("add", torch.add, lambda g: (rn(5, g=g), rn(5, g=g))),
    ("cat", lambda a, b: torch.cat([a, b]), lambda g: (rn(5, g=g), rn(5, g=g))),
    ("stack", lambda a, b: torch.stack([a, b]), lambda g: (rn(5, g=g), rn(5, g=g))),
    ("batch_norm", lambda x: F.batch_norm(x, None, None, training=True), lambda g: (rn(4, 3, g=g),)),
    ("max_pool2d", lambda x: F.max_pool2d(x, 2), lambda g: (rn(1, 2, 4, 4, g=g),)),
]


def math_sdpa(q, k, v):
    # openreg runs SDPA's math path; the CPU would pick its flash kernel,
    # whose half-precision rounding differs. Compare like with like.
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v)


def first_low(args, low):
    """The first floating tensor in `low`, the other floating tensors float32."""
    done = False

    def f(t):
        nonlocal done
        if t.is_floating_point() and not done:
            done = True
            return t.to(low)
        return t

    return tree_map(f, args)


def run_autocast(fn, args, dtype):
    with torch.autocast(DEVICE, dtype=dtype):
        return fn(*to_dev(args))


def check(out, ref, expected_dtype, loose_ref=None, loose_tol=None):
    outs, refs = tensors(out), tensors(ref)
    assert len(outs) == len(refs)
    for o, r in zip(outs, refs):
        assert o.device.type == DEVICE
        if r.is_floating_point():
            assert o.dtype == expected_dtype, (o.dtype, expected_dtype)
        torch.testing.assert_close(o.cpu(), r)
    if loose_ref is not None:
        for o, r in zip(outs, tensors(loose_ref)):
            torch.testing.assert_close(o.cpu().to(r.dtype), r, **loose_tol)


LOOSE = {torch.float16: dict(rtol=2e-2, atol=2e-2), torch.bfloat16: dict(rtol=8e-2, atol=8e-2)}


def ids(cases):
    return [c[0] for c in cases]


@pytest.mark.ops
@pytest.mark.smoke
class TestAutocastQuick:
    hw_classification = HW.ACCELERATOR

    def test_availability_and_default_dtype(self):
        assert torch.amp.is_autocast_available(DEVICE)
        # CUDA's default: float16.
        assert torch.get_autocast_dtype(DEVICE) == torch.float16
        assert target.device_module.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
        assert target.device_module.is_bf16_supported()
        assert not torch.is_autocast_enabled(DEVICE)

    @pytest.mark.parametrize("dtype", LOW_DTYPES, ids=str)
    def test_linear_softmax_cat(self, dtype):
        x = torch.randn(4, 8, device=DEVICE)
        lin = nn.Linear(8, 3).to(DEVICE)
        with torch.autocast(DEVICE, dtype=dtype):
            assert torch.is_autocast_enabled(DEVICE)
            assert torch.get_autocast_dtype(DEVICE) == dtype
            y = lin(x)
            p = y.softmax(-1)
            c = torch.cat([y, x[:, :3]])
        assert (y.dtype, p.dtype, c.dtype) == (dtype, torch.float32, torch.float32)
        assert not torch.is_autocast_enabled(DEVICE)
        assert torch.get_autocast_dtype(DEVICE) == torch.float16
        ref = F.linear(x.cpu().to(dtype), lin.weight.detach().cpu().to(dtype), lin.bias.detach().cpu().to(dtype))
        torch.testing.assert_close(y.cpu(), ref)
        torch.testing.assert_close(p.cpu(), ref.float().softmax(-1))


@pytest.mark.ops
class TestAutocastPolicy:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.openreg_only  # the exact set openreg's Autocast.cpp registers
    def test_registered_operators_are_cudas(self):
        # Same operator set as AutocastCUDA in this very torch build, except
        # cuDNN's own entry points, which openreg never reaches (_cudnn_rnn's
        # is registered by CUDA builds of torch only).
        names = torch._C._dispatch_get_all_op_names()
        cuda = {n for n in names if torch._C._dispatch_has_kernel_for_dispatch_key(n, "AutocastCUDA")}
        mine = {n for n in names if torch._C._dispatch_has_kernel_for_dispatch_key(n, "AutocastPrivateUse1")}
        assert cuda - mine <= {"aten::cudnn_convolution", "aten::cudnn_convolution_transpose",
                               "aten::_cudnn_rnn"}
        assert {"aten::cudnn_convolution", "aten::cudnn_convolution_transpose"} <= cuda - mine
        assert mine - cuda == set()
        assert len(mine) > 100

    def test_cases_cover_each_list(self):
        # Guards the tables above against silently shrinking.
        assert len(LOW_CASES) >= 22 and len(FP32_CASES) >= 55 and len(PROMOTE_CASES) >= 10

    @pytest.mark.parametrize("dtype", LOW_DTYPES, ids=str)
    @pytest.mark.parametrize("case", LOW_CASES, ids=ids(LOW_CASES))
    def test_lower_precision_ops(self, case, dtype):
        _, fn, make, _ = case
        args = make(_gen())
        out = run_autocast(fn, args, dtype)
        check(out, fn(*cast_floats(args, dtype)), dtype, loose_ref=fn(*args), loose_tol=LOOSE[dtype])

    # On a PrivateUse1 device ATen's cells call _thnn_fused_lstm_cell /
    # _thnn_fused_gru_cell (openreg_python/csrc/aten/kernels/Recurrent.cpp).
    @pytest.mark.parametrize("cell", ["lstm", "gru"])
    def test_fused_rnn_cells(self, cell):
        torch.manual_seed(0)
        m = (nn.LSTMCell if cell == "lstm" else nn.GRUCell)(4, 3)
        x = torch.randn(2, 4)
        dev_m = copy.deepcopy(m).to(DEVICE)
        with torch.autocast(DEVICE):
            out = dev_m(x.to(DEVICE))
        with torch.autocast("cpu", dtype=torch.float16):
            ref = m(x.half())
        for o, r in zip(tensors(out), tensors(ref)):
            assert o.dtype == torch.float16
            torch.testing.assert_close(o.cpu(), r, rtol=1e-2, atol=1e-2)

    @pytest.mark.filterwarnings("ignore:.*nuclear_norm is deprecated")
    @pytest.mark.parametrize("dtype", LOW_DTYPES, ids=str)
    @pytest.mark.parametrize("case", FP32_CASES, ids=ids(FP32_CASES))
    def test_fp32_ops(self, case, dtype):
        # Low-precision inputs; CUDA's policy computes these in float32.
        _, fn, make, _ = case
        args = cast_floats(make(_gen()), dtype)
        out = run_autocast(fn, args, dtype)
        check(out, fn(*cast_floats(args, torch.float32)), torch.float32)

    @pytest.mark.parametrize("dtype", LOW_DTYPES, ids=str)
    @pytest.mark.parametrize("case", PROMOTE_CASES, ids=ids(PROMOTE_CASES))
    def test_promote_ops(self, case, dtype):
        _, fn, make = case
        args = make(_gen())
        mixed = first_low(args, dtype)
        check(run_autocast(fn, mixed, dtype), fn(*cast_floats(mixed, torch.float32)), torch.float32)
        # All inputs in the low dtype: the widest is the low dtype.
        low = cast_floats(args, dtype)
        check(run_autocast(fn, low, dtype), fn(*low), dtype)

    @pytest.mark.parametrize("case", NONE_CASES, ids=ids(NONE_CASES))
    def test_unlisted_ops_untouched(self, case):
        _, fn, make = case
        args = make(_gen())
        for inputs in (args, cast_floats(args, torch.float16), first_low(args, torch.float16)):
            ref = fn(*inputs)
            check(run_autocast(fn, inputs, torch.float16), ref, tensors(ref)[0].dtype)

    @pytest.mark.parametrize("dtype", LOW_DTYPES, ids=str)
    def test_agrees_with_cpu_autocast_where_the_lists_agree(self, dtype):
        agreeing = [(c[0], c[1], c[2]) for c in LOW_CASES + FP32_CASES if c[3]]
        assert len(agreeing) >= 25
        for name, fn, make in agreeing:
            args = make(_gen())
            if any(name == c[0] for c in FP32_CASES):
                args = cast_floats(args, dtype)
            with torch.autocast("cpu", dtype=dtype):
                ref = fn(*args)
            out = run_autocast(fn, args, dtype)
            for o, r in zip(tensors(out), tensors(ref)):
                assert o.dtype == r.dtype, name
                torch.testing.assert_close(o.cpu(), r, msg=name)

    def test_follows_cuda_where_cpu_autocast_differs(self):
        x = torch.randn(5, dtype=torch.float16)
        with torch.autocast("cpu", dtype=torch.float16):
            assert torch.exp(x).dtype == torch.float16     # not on the CPU's fp32 list
        with torch.autocast(DEVICE, dtype=torch.float16):
            assert torch.exp(x.to(DEVICE)).dtype == torch.float32   # on CUDA's
            a, b = torch.randn(3, 4, device=DEVICE), torch.randn(4, device=DEVICE)
            assert torch.mv(a, b).dtype == torch.float16     # CUDA-only lower-precision op

    def test_explicit_dtype_argument_is_respected(self):
        x = torch.randn(3, 4, device=DEVICE, dtype=torch.float16)
        with torch.autocast(DEVICE):
            assert torch.softmax(x, -1, dtype=torch.float16).dtype == torch.float16
            assert x.sum(dtype=torch.float64).dtype == torch.float64
            assert torch.softmax(x, -1).dtype == torch.float32

    def test_ineligible_inputs_are_not_cast(self):
        a64 = torch.randn(3, 3, dtype=torch.float64, device=DEVICE)
        cpu = torch.randn(3, 3)
        i = torch.ones(3, 3, dtype=torch.int64, device=DEVICE)
        with torch.autocast(DEVICE):
            assert torch.mm(a64, a64).dtype == torch.float64   # float64 is never autocast
            assert torch.mm(cpu, cpu).dtype == torch.float32    # CPU tensors: not this autocast
            assert torch.mm(i, i).dtype == torch.int64

    def test_binary_cross_entropy_is_refused_like_cuda(self):
        p, t = torch.rand(4, device=DEVICE), torch.rand(4, device=DEVICE)
        with torch.autocast(DEVICE):
            with pytest.raises(RuntimeError, match="binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast"):
                F.binary_cross_entropy(p, t)
        F.binary_cross_entropy(p, t)  # fine outside autocast

    def test_backward_under_autocast_gives_fp32_grads_like_cpu(self):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
        dev_model = copy.deepcopy(model).to(DEVICE)
        x, y = torch.randn(5, 6), torch.randn(5, 2)
        # linear (low) and mse_loss (fp32) are on both CPU's and CUDA's lists.
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(x), y)
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            dev_loss = F.mse_loss(dev_model(x.to(DEVICE)), y.to(DEVICE))
        assert dev_loss.dtype == torch.float32
        loss.backward()
        dev_loss.backward()
        torch.testing.assert_close(dev_loss.cpu(), loss)
        for p, pd in zip(model.parameters(), dev_model.parameters()):
            assert pd.grad.dtype == torch.float32 and pd.grad.device.type == DEVICE
            torch.testing.assert_close(pd.grad.cpu(), p.grad)


@pytest.mark.ops
class TestAutocastContext:
    hw_classification = HW.ACCELERATOR

    def test_nested_and_disabled(self):
        a = torch.randn(3, 3, device=DEVICE)
        with torch.autocast(DEVICE):
            assert (a @ a).dtype == torch.float16
            with torch.autocast(DEVICE, enabled=False):
                assert not torch.is_autocast_enabled(DEVICE)
                assert (a @ a).dtype == torch.float32
                with torch.autocast(DEVICE, dtype=torch.bfloat16):
                    assert (a @ a).dtype == torch.bfloat16
                assert (a @ a).dtype == torch.float32
            assert (a @ a).dtype == torch.float16
            assert torch.get_autocast_dtype(DEVICE) == torch.float16
        assert (a @ a).dtype == torch.float32
        assert not torch.is_autocast_enabled(DEVICE)

    def test_cpu_and_openreg_autocast_are_independent(self):
        a, c = torch.randn(3, 3, device=DEVICE), torch.randn(3, 3)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert (a @ a).dtype == torch.float32
            assert (c @ c).dtype == torch.bfloat16
            assert not torch.is_autocast_enabled(DEVICE)
        with torch.autocast(DEVICE):
            assert (c @ c).dtype == torch.float32
            assert not torch.is_autocast_enabled("cpu")

    def test_decorator_and_exception_restore_state(self):
        @torch.autocast(DEVICE, dtype=torch.bfloat16)
        def f(x):
            return x @ x

        assert f(torch.randn(2, 2, device=DEVICE)).dtype == torch.bfloat16
        with pytest.raises(ValueError, match="boom"):
            with torch.autocast(DEVICE):
                raise ValueError("boom")
        assert not torch.is_autocast_enabled(DEVICE)

    def test_custom_fwd_casts_inputs(self):
        class Square(torch.autograd.Function):
            @staticmethod
            @torch.amp.custom_fwd(device_type=DEVICE, cast_inputs=torch.float32)
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            @torch.amp.custom_bwd(device_type=DEVICE)
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return 2 * x * g

        x = torch.randn(4, device=DEVICE, dtype=torch.float16, requires_grad=True)
        with torch.autocast(DEVICE):
            y = Square.apply(x)
            assert y.dtype == torch.float32
        y.sum().backward()
        torch.testing.assert_close(x.grad.cpu(), (2 * x.detach().float()).half().cpu())

    @pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.int32])
    def test_unsupported_dtype_warns_and_disables(self, dtype):
        a = torch.randn(3, 3, device=DEVICE)
        with pytest.warns(UserWarning) as record:
            with torch.autocast(DEVICE, dtype=dtype):
                assert not torch.is_autocast_enabled(DEVICE)
                assert (a @ a).dtype == torch.float32
                assert torch.softmax(a.half(), -1).dtype == torch.float16
        messages = [str(w.message) for w in record]
        assert any(
            f"In {DEVICE} autocast, but the target dtype is not supported. Disabling autocast." in m
            and f"{DEVICE} Autocast only supports dtypes of torch.float16, torch.bfloat16" in m
            for m in messages
        ), messages
        assert torch.get_autocast_dtype(DEVICE) == torch.float16

    def test_unknown_device_type(self):
        with pytest.raises(RuntimeError, match=f"Invalid device string: '{DEVICE}2'"):
            torch.autocast(f"{DEVICE}2")


# ---------------------------------------------------------------- GradScaler
def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))


def scaler_loop(device, steps, *, autocast_dtype=None, poison=(), opt_kwargs=None, **scaler_kwargs):
    """A small training loop with a GradScaler; `poison` maps step -> value
    written into one gradient element (inf/nan) before the step."""
    model = mlp().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, **(opt_kwargs or {}))
    scaler = torch.amp.GradScaler(device, **scaler_kwargs)
    g = torch.Generator().manual_seed(1)
    trace = []
    for step in range(steps):
        x, y = torch.randn(8, 6, generator=g).to(device), torch.randn(8, 2, generator=g).to(device)
        opt.zero_grad()
        if autocast_dtype is not None:
            with torch.autocast(device, dtype=autocast_dtype):
                loss = F.mse_loss(model(x), y)
        else:
            loss = F.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        if step in poison:
            with torch.no_grad():
                model[2].weight.grad[0, 0] = poison[step]
        before = [p.detach().cpu().clone() for p in model.parameters()]
        scaler.step(opt)
        scaler.update()
        after = [p.detach().cpu().clone() for p in model.parameters()]
        skipped = all(torch.equal(b, a) for b, a in zip(before, after))
        trace.append((loss.item(), scaler.get_scale(), skipped, after))
    return trace


@pytest.mark.ops
class TestGradScaler:
    hw_classification = HW.ACCELERATOR

    def test_scale_and_unscale(self):
        scaler = torch.amp.GradScaler(DEVICE, init_scale=1024.0)
        assert scaler.get_scale() == 1024.0   # before any step: the initial scale
        loss = torch.tensor(0.5, device=DEVICE)
        scaled = scaler.scale(loss)
        assert scaled.device.type == DEVICE and scaled.item() == 512.0
        w = torch.ones(3, device=DEVICE, requires_grad=True)
        opt = torch.optim.SGD([w], lr=1.0)
        scaler.scale((w * torch.tensor([1.0, 2.0, 3.0], device=DEVICE)).sum()).backward()
        assert w.grad.cpu().tolist() == [1024.0, 2048.0, 3072.0]
        scaler.unscale_(opt)
        assert w.grad.cpu().tolist() == [1.0, 2.0, 3.0]
        with pytest.raises(RuntimeError, match=r"unscale_\(\) has already been called on this optimizer since the last update\(\)"):
            scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
        assert w.detach().cpu().tolist() == [0.0, -1.0, -2.0]
        assert isinstance(scaler.get_scale(), float)

    def test_scale_state_lives_on_the_device(self):
        scaler = torch.amp.GradScaler(DEVICE)
        scaler.scale(torch.ones((), device=device(1)))
        assert scaler._scale.device == torch.device(DEVICE, 1)
        assert scaler._growth_tracker.dtype == torch.int32

    @pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")], ids=["inf", "-inf", "nan"])
    def test_non_finite_grad_skips_step_and_backs_off(self, bad):
        trace = scaler_loop(DEVICE, 3, poison={1: bad}, init_scale=256.0, backoff_factor=0.25)
        scales = [t[1] for t in trace]
        skipped = [t[2] for t in trace]
        assert skipped == [False, True, False]
        assert scales == [256.0, 64.0, 64.0]
        for p_before, p_after in zip(trace[0][3], trace[1][3]):
            assert torch.equal(p_before, p_after)
            assert torch.isfinite(p_after).all()

    def test_growth_after_growth_interval(self):
        trace = scaler_loop(DEVICE, 5, init_scale=8.0, growth_factor=2.0, growth_interval=2)
        assert [t[1] for t in trace] == [8.0, 16.0, 16.0, 32.0, 32.0]
        assert not any(t[2] for t in trace)

    def test_disabled_scaler(self):
        scaler = torch.amp.GradScaler(DEVICE, enabled=False)
        loss = torch.tensor(3.0, device=DEVICE)
        assert scaler.scale(loss) is loss
        assert scaler.get_scale() == 1.0
        assert not scaler.is_enabled()

    def test_loop_matches_cpu_step_for_step(self):
        kw = dict(init_scale=2.0 ** 12, growth_interval=3)
        poison = {2: float("inf"), 5: float("nan")}
        dev = scaler_loop(DEVICE, 8, poison=poison, **kw)
        cpu = scaler_loop("cpu", 8, poison=poison, **kw)
        assert [t[2] for t in dev] == [False, False, True, False, False, True, False, False]
        for step, (d, c) in enumerate(zip(dev, cpu)):
            assert d[1] == c[1], f"scale differs at step {step}"
            assert d[2] == c[2], f"skip differs at step {step}"
            torch.testing.assert_close(d[0], c[0], rtol=1e-5, atol=1e-6)
            for pd, pc in zip(d[3], c[3]):
                torch.testing.assert_close(pd, pc, rtol=1e-5, atol=1e-6, msg=f"step {step}")

    @pytest.mark.parametrize("dtype", LOW_DTYPES, ids=str)
    def test_autocast_loop_matches_cpu_autocast(self, dtype):
        # Linear (low precision) and mse_loss (fp32) have the same policy on
        # the CPU's and CUDA's lists, so the two loops compute the same thing.
        poison = {3: float("inf")}
        dev = scaler_loop(DEVICE, 6, autocast_dtype=dtype, poison=poison, init_scale=2.0 ** 10)
        cpu = scaler_loop("cpu", 6, autocast_dtype=dtype, poison=poison, init_scale=2.0 ** 10)
        for step, (d, c) in enumerate(zip(dev, cpu)):
            assert (d[1], d[2]) == (c[1], c[2]), f"step {step}"
            torch.testing.assert_close(d[0], c[0], rtol=1e-5, atol=1e-6)
            for pd, pc in zip(d[3], c[3]):
                torch.testing.assert_close(pd, pc, rtol=1e-5, atol=1e-6, msg=f"step {step}")
        assert dev[-1][0] < dev[0][0]  # it trains

    @pytest.mark.parametrize("opt_kwargs", [dict(foreach=True), dict(foreach=False)], ids=["foreach", "for-loop"])
    def test_optimizer_implementations(self, opt_kwargs):
        dev = scaler_loop(DEVICE, 4, poison={1: float("inf")}, opt_kwargs=opt_kwargs)
        cpu = scaler_loop("cpu", 4, poison={1: float("inf")}, opt_kwargs=opt_kwargs)
        assert [t[2] for t in dev] == [False, True, False, False]
        for d, c in zip(dev, cpu):
            assert d[1] == c[1]
            for pd, pc in zip(d[3], c[3]):
                torch.testing.assert_close(pd, pc, rtol=1e-5, atol=1e-6)

    def test_fused_adam_with_scaler(self):
        # Fused optimizers take the scale and found_inf tensors themselves
        # (_step_supports_amp_scaling); openreg runs the CPU's fused kernel.
        results = {}
        for device in (DEVICE, "cpu"):
            model = mlp().to(device)
            opt = torch.optim.Adam(model.parameters(), lr=1e-2, fused=True)
            scaler = torch.amp.GradScaler(device, init_scale=128.0)
            g = torch.Generator().manual_seed(0)
            scales = []
            for step in range(4):
                x = torch.randn(8, 6, generator=g).to(device)
                opt.zero_grad()
                scaler.scale(model(x).square().mean()).backward()
                if step == 1:
                    with torch.no_grad():
                        model[0].bias.grad[0] = float("inf")
                scaler.step(opt)
                scaler.update()
                scales.append(scaler.get_scale())
            results[device] = (scales, [p.detach().cpu() for p in model.parameters()],
                               opt.state[model[0].weight]["step"].item())
        assert results[DEVICE][0] == results["cpu"][0] == [128.0, 64.0, 64.0, 64.0]
        assert results[DEVICE][2] == results["cpu"][2] == 3.0  # the skipped step is not counted
        for pd, pc in zip(results[DEVICE][1], results["cpu"][1]):
            torch.testing.assert_close(pd, pc, rtol=1e-5, atol=1e-6)

    def test_state_dict_round_trip(self):
        trace_scaler = torch.amp.GradScaler(DEVICE, init_scale=32.0, growth_interval=7)
        trace_scaler.scale(torch.ones((), device=DEVICE))
        state = trace_scaler.state_dict()
        assert state["scale"] == 32.0 and state["growth_interval"] == 7
        other = torch.amp.GradScaler(DEVICE)
        other.load_state_dict(state)
        assert other.get_scale() == 32.0 and other.get_growth_interval() == 7
