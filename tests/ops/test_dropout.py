"""Dropout on openreg: native_dropout and native_dropout_backward, fused (Dropout.cpp).

For a device tensor torch.dropout calls native_dropout (bool mask) as it does
for CUDA; openreg scales by the mask in one pass that reads the bool mask
directly. Oracle: the CPU computing x * mask * scale with the same mask.
"""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import target
from tests.target import DEVICE, HW

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def exact(dev_result, cpu_result):
    assert dev_result.device.type == DEVICE and dev_result.dtype == cpu_result.dtype
    torch.testing.assert_close(dev_result.cpu(), cpu_result, rtol=0, atol=0, equal_nan=True)


@pytest.mark.ops
class TestFusedDropout:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("dtype", FLOATS, ids=str)
    def test_forward_and_backward_match_the_cpu_formula(self, dtype):
        torch.manual_seed(0)
        x = torch.randn(4, 5, 6, dtype=dtype)
        x[0, 0, :3] = torch.tensor([float("inf"), float("nan"), -float("inf")], dtype=dtype)
        out, mask = torch.native_dropout(x.to(DEVICE), 0.3, True)
        assert mask.dtype == torch.bool and mask.device.type == DEVICE
        keep = mask.cpu()
        # inf and NaN propagate through dropped positions (x * 0), as in CUDA's kernel.
        exact(out, x * keep * (1 / 0.7))
        g = torch.randn(4, 5, 6, dtype=dtype)
        exact(torch.ops.aten.native_dropout_backward(g.to(DEVICE), mask, 1 / 0.7), g * keep * (1 / 0.7))

    @settings(max_examples=25, deadline=None)
    @given(shape=st.lists(st.integers(1, 7), min_size=1, max_size=4),
           p=st.floats(0.05, 0.95), transpose=st.booleans())
    def test_shapes_and_layouts(self, shape, p, transpose):
        x = torch.randn(*shape)
        xd = x.to(DEVICE)
        if transpose and x.dim() > 1:
            x, xd = x.transpose(0, -1), xd.transpose(0, -1)
        out, mask = torch.native_dropout(xd, p, True)
        exact(out, x * mask.cpu() * (1 / (1 - p)))

    def test_autograd_through_dropout(self):
        torch.manual_seed(0)
        x = torch.randn(8, 16)
        xd = x.to(DEVICE).requires_grad_()
        target.device_module.manual_seed(3)
        y = F.dropout(xd, 0.25, training=True)
        (y * y).sum().backward()
        keep = (y.detach().cpu() != 0) | (x == 0)
        scale = 1 / 0.75
        exact(y.detach(), x * keep * scale)
        exact(xd.grad, 2 * (x * keep * scale) * keep * scale)

    def test_same_seed_same_mask(self):
        x = torch.randn(64, device=DEVICE)
        target.device_module.manual_seed(7)
        a = F.dropout(x, 0.5)
        target.device_module.manual_seed(7)
        b = F.dropout(x, 0.5)
        assert torch.equal(a.cpu(), b.cpu())

    def test_mask_on_another_device_is_refused(self):
        g = torch.randn(3, device=DEVICE)
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            torch.ops.aten.native_dropout_backward(g, torch.ones(3, dtype=torch.bool), 2.0)

    def test_other_dtypes_take_the_composite_path(self):
        # A float mask (not native_dropout's own) and a non-float input: x * mask * scale.
        g = torch.randn(5)
        m = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0])
        exact(torch.ops.aten.native_dropout_backward(g.to(DEVICE), m.to(DEVICE), 2.0), g * m * 2.0)
        c = torch.randn(5, dtype=torch.complex64)
        keep = torch.tensor([True, False, True, False, True])
        exact(torch.ops.aten.native_dropout_backward(c.to(DEVICE), keep.to(DEVICE), 2.0),
              c * keep * 2.0)

    def test_eval_mode_is_identity(self):
        x = torch.randn(10, device=DEVICE)
        out, mask = torch.native_dropout(x, 0.5, False)
        exact(out, x.cpu())
        assert bool(mask.all())

    def test_integer_inputs_behave_as_on_the_cpu(self):
        # Backward: x * mask * scale promotes to float. Forward scales in place
        # (native_dropout's CPU formula), which an integer tensor refuses.
        g = torch.arange(6)
        keep = torch.tensor([True, False, True, True, False, True])
        exact(torch.ops.aten.native_dropout_backward(g.to(DEVICE), keep.to(DEVICE), 2.0),
              g * keep * 2.0)
        with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
            torch.native_dropout(g.to(DEVICE), 0.5, True)
