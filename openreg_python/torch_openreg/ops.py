"""Custom operators defined from Python with ``torch.library`` (``torch.ops.openreg.*``).

The C++ side defines ``openreg::fused_bias_gelu`` (``csrc/aten/custom_ops/CustomOpBiasGelu.cpp``) and
the structured ``openreg::scaled_add`` (``csrc/aten/custom_ops/CustomOpScaledAdd.cpp``). This module shows the Python route, for operators
whose kernels are themselves written with torch operations:

``openreg::rms_norm(x, weight, eps)`` -- ``x / sqrt(mean(x**2, -1) + eps) * weight``, as
``torch.nn.functional.rms_norm`` with a 1-D weight -- with

* a default implementation (CPU and every other device),
* an openreg-specific implementation (``register_kernel("openreg")``),
* a fake implementation (``register_fake``) for FakeTensor and ``torch.compile``,
* a backward (``register_autograd``).
"""

import torch
from torch import Tensor

__all__ = ["rms_norm"]

_REDUCED = (torch.float16, torch.bfloat16)


def _check(x: Tensor, weight: Tensor) -> None:
    # The same checks in every implementation, so a bad call fails the same way
    # eagerly, under FakeTensor and under torch.compile. The dispatcher lets
    # None through for a Tensor argument: a TypeError that names it.
    for name, t in (("x", x), ("weight", weight)):
        if not isinstance(t, Tensor):
            raise TypeError(f"openreg::rms_norm: {name} must be a Tensor, got {type(t).__name__}")
    if x.device != weight.device:
        raise RuntimeError(
            f"openreg::rms_norm: x and weight must be on the same device, got x on {x.device} "
            f"and weight on {weight.device}"
        )
    if not x.dtype.is_floating_point:
        raise TypeError(f"openreg::rms_norm: x must be a floating-point tensor, got {x.dtype}")
    if weight.dtype != x.dtype:
        raise TypeError(f"openreg::rms_norm: weight must have x's dtype ({x.dtype}), got {weight.dtype}")
    if x.dim() < 1 or weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(
            f"openreg::rms_norm: weight must be 1-D with x.shape[-1] = "
            f"{x.shape[-1] if x.dim() else None} elements, got shape {tuple(weight.shape)}"
        )


def _upcast(t: Tensor) -> Tensor:
    # Reductions in float32 for half/bfloat16, as torch.nn.functional.rms_norm.
    return t.float() if t.dtype in _REDUCED else t


# [docs:pyop-define]
@torch.library.custom_op("openreg::rms_norm", mutates_args=())
def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """RMS normalisation over the last dimension: ``x / sqrt(mean(x**2, -1) + eps) * weight``.

    As ``torch.nn.functional.rms_norm`` with a 1-D ``weight`` of size
    ``x.shape[-1]``; half and bfloat16 inputs are reduced in float32. This body
    is the default implementation: every device without a kernel of its own
    (the CPU) runs it."""
    _check(x, weight)
    xf = _upcast(x)
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * rstd * _upcast(weight)).to(x.dtype)


@rms_norm.register_kernel("openreg")
def _rms_norm_openreg(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    # Vendor: the device-specific kernel. Here: one reduction kernel
    # (vector_norm) instead of pow + mean, and in-place updates, so fewer
    # launches and temporaries on the device's stream.
    _check(x, weight)
    xf = _upcast(x)
    n = x.shape[-1]
    rstd = torch.linalg.vector_norm(xf, dim=-1, keepdim=True).square_().div_(n).add_(eps).rsqrt_()
    return xf.mul(rstd).mul_(_upcast(weight)).to(x.dtype)


@rms_norm.register_fake
def _rms_norm_fake(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    _check(x, weight)
    return torch.empty_like(x)
# [docs:pyop-define:end]


# [docs:pyop-autograd]
def _rms_norm_setup_context(ctx, inputs, output) -> None:
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def _rms_norm_backward(ctx, grad: Tensor):
    # y = xhat * w with xhat = x * rstd, rstd = (mean(x^2) + eps)^-1/2:
    #   dx = rstd * (g*w - xhat * mean(g*w * xhat)),  dw = sum over rows of g * xhat.
    # Written with torch operations, so it runs on any device and traces.
    x, weight = ctx.saved_tensors
    xf, gf, wf = _upcast(x), _upcast(grad), _upcast(weight)
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + ctx.eps)
    xhat = xf * rstd
    gxhat = gf * wf
    dx = dw = None
    if ctx.needs_input_grad[0]:
        dx = (rstd * (gxhat - xhat * (gxhat * xhat).mean(-1, keepdim=True))).to(x.dtype)
    if ctx.needs_input_grad[1]:
        dw = (gf * xhat).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype)
    return dx, dw, None


rms_norm.register_autograd(_rms_norm_backward, setup_context=_rms_norm_setup_context)
# [docs:pyop-autograd:end]
