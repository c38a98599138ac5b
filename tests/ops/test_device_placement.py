"""Device placement: operators that mix openreg and CPU tensors fail as on CUDA,
before anything runs or is written (csrc/aten/core/DeviceCheck.h)."""

import pytest
import torch
import torch.nn.functional as F
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from tests import target
from tests.target import DEVICE, HW, device

SAME = "Expected all tensors to be on the same device"

# Operators that accept the CPU tensor the sweep moves, and why CUDA accepts it too.
ACCEPTED_ON_CUDA = {
    "to": "a copy operator",
    "__getitem__": "CPU index tensors are allowed (CUDA moves them)",
    "_unsafe_masked_index": "CPU index tensors are allowed (CUDA moves them)",
    "narrow": "start is a 0-dim CPU tensor, read as a scalar",
    "tensor_split": "tensor_indices_or_sections must be a CPU tensor, on CUDA too",
    "nn.functional.ctc_loss": "the lengths are read on the host (CUDA takes CPU lengths)",
    "expand_as": "only the other tensor's shape is used (composite, never reaches a kernel)",
    "view_as": "only the other tensor's shape is used",
    "reshape_as": "only the other tensor's shape is used",
    "resize_as_": "only the other tensor's shape is used",
    "broadcast_tensors": "only shapes are used: each result stays on its input's device",
    "atleast_1d": "each tensor is viewed on its own device",
    "atleast_2d": "each tensor is viewed on its own device",
    "atleast_3d": "each tensor is viewed on its own device",
    "diff": "the composite moves prepend/append to the input's device",
    "slice_scatter": "the composite writes src into a clone with copy_, which accepts any device",
    "select_scatter": "as slice_scatter",
    "diagonal_scatter": "as slice_scatter",
    "as_strided_scatter": "as slice_scatter",
}
NOT_APPLICABLE = {  # operators the sweep cannot exercise on this machine
    "jiterator_binary", "jiterator_4inputs_with_extra_args", "jiterator_binary_return_by_ref",
    "jiterator_2inputs_2outputs", "jiterator_unary",  # CUDA-only
}


def _mix_case(op):
    """(device args with one non-scalar tensor moved back to the CPU) or None."""
    if torch.float32 not in op.supported_dtypes("cpu"):
        return None
    for s in op.sample_inputs("cpu", torch.float32):
        flat, spec = tree_flatten((s.input, s.args, s.kwargs))
        tensors = [i for i, t in enumerate(flat) if isinstance(t, torch.Tensor)]
        movable = [i for i in tensors if flat[i].dim() > 0 and flat[i].numel() > 0]
        if len(tensors) >= 2 and movable:
            moved = movable[-1]
            dev = [t.to(DEVICE) if isinstance(t, torch.Tensor) and i != moved else t
                   for i, t in enumerate(flat)]
            return tree_unflatten(dev, spec)
    return None


MIX_OPS = [op for op in op_db if op.name not in NOT_APPLICABLE]
OUT_OPS = [op for op in op_db if op.supports_out and op.name not in NOT_APPLICABLE]


def _ids(op):
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


@pytest.mark.ops
@pytest.mark.smoke
class TestSameDeviceErrors:
    """The issue's own cases: CUDA's error, raised before anything is written."""
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("call", [
        lambda o, c: torch.add(c, o),
        lambda o, c: torch.add(o, c),
        lambda o, c: o.view(3, 1) @ c.view(1, 3),
        lambda o, c: torch.cat([o, c]),
        lambda o, c: F.linear(o.view(1, 3), c.view(1, 3)),
        lambda o, c: F.conv2d(o.view(1, 1, 1, 3), c.view(1, 1, 1, 3)),
        lambda o, c: torch.where(o > 0, o, c),
        lambda o, c: F.scaled_dot_product_attention(o.view(1, 1, 1, 3), c.view(1, 1, 1, 3),
                                                    c.view(1, 1, 1, 3)),
        # openreg's own custom operator
        pytest.param(lambda o, c: torch.ops.openreg.fused_bias_gelu(o.view(1, 3), c),
                     marks=pytest.mark.openreg_only),
    ], ids=["add_cpu_first", "add_device_first", "matmul", "cat", "linear", "conv2d", "where",
            "sdpa", "custom_op"])
    def test_mix_raises(self, call):
        o, c = torch.ones(3, device=DEVICE), torch.ones(3)
        with pytest.raises(RuntimeError, match="device"):
            call(o, c)

    def test_message_is_cudas(self):
        o, c = torch.ones(3, device=DEVICE), torch.ones(3)
        with pytest.raises(RuntimeError, match=SAME + f", but found at least two devices, {device(0)} and cpu!"):
            torch.add(c, o)
        with pytest.raises(RuntimeError, match=SAME + ", but got mat2 is on cpu, different from "
                           f"other tensors on {device(0)}"):
            torch.mm(o.view(1, 3), c.view(3, 1))

    @pytest.mark.parametrize("call", [
        lambda o, x: x.add_(o),
        lambda o, x: torch.add(o, o, out=x),
        lambda o, x: torch.mul(o, 2, out=x),
        lambda o, x: torch.mm(o.view(3, 1), o.view(1, 3), out=x.view(3, 1).expand(3, 3)),
        lambda o, x: torch.cumsum(o, 0, out=x),
        lambda o, x: x.copy_(o).mul_(o),
    ], ids=["inplace_cpu_self", "out_cpu", "out_cpu_scalar_other", "mm_out_cpu", "fallback_out_cpu",
            "inplace_after_copy"])
    def test_wrong_destination_is_not_written(self, call):
        o = torch.full((3,), 5.0, device=DEVICE)
        x = torch.zeros(3)
        before = x.clone()
        with pytest.raises(RuntimeError, match="device"):
            call(o, x)
        if not torch.equal(x, torch.full((3,), 5.0)):  # copy_ itself is allowed
            assert torch.equal(x, before)

    def test_two_openreg_devices(self):
        if target.device_module.device_count() < 2:
            pytest.skip(f"needs two {DEVICE} devices")
        a, b = torch.ones(3, device=device(0)), torch.ones(3, device=device(1))
        with pytest.raises(RuntimeError, match=SAME + ", but found at least two devices, "
                           f"{device(0)} and {device(1)}!"):
            a + b
        with pytest.raises(RuntimeError, match=SAME):
            torch.cat([a, b])

    def test_allowed_where_cuda_allows(self):
        o = torch.arange(5.0, device=DEVICE)
        assert (o + torch.tensor(2.0)).device.type == DEVICE                  # CPU scalar
        assert torch.where(o > 1, o, torch.tensor(0.0)).device.type == DEVICE  # CPU scalar
        assert o[torch.tensor([0, 4])].tolist() == [0.0, 4.0]                 # CPU indices
        o2 = o.clone()
        o2[torch.tensor([1])] = torch.tensor(9.0)                             # index_put_
        assert o2.tolist() == [0.0, 9.0, 2.0, 3.0, 4.0]
        assert torch.zeros(5).copy_(o).tolist() == o.tolist()                 # copies
        assert torch.arange(5.0).to(DEVICE).device.type == DEVICE

    def test_cpu_scalar_output_is_not_a_scalar(self):
        # TensorIterator exempts 0-dim CPU *inputs* only, never outputs.
        with pytest.raises(RuntimeError, match=SAME):
            torch.add(torch.ones((), device=DEVICE), 1, out=torch.zeros(()))


@pytest.mark.ops
class TestOpInfoDeviceMixSweep:
    """Every OpInfo operator with two or more tensor inputs, one non-scalar input
    moved to the CPU: a device error, unless CUDA accepts the mix too."""
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("op", MIX_OPS, ids=_ids)
    def test_mixed_inputs(self, op):
        case = _mix_case(op)
        if case is None:
            pytest.skip("no float32 sample with two tensors")
        inp, args, kwargs = case
        if op.name in ACCEPTED_ON_CUDA:
            op(inp, *args, **kwargs)  # must run, as on CUDA
            return
        with pytest.raises(RuntimeError, match="(?i)device"):
            op(inp, *args, **kwargs)

    @pytest.mark.parametrize("op", OUT_OPS, ids=_ids)
    def test_out_on_the_cpu(self, op):
        if torch.float32 not in op.supported_dtypes("cpu"):
            pytest.skip("no float32")
        try:
            s = next(iter(op.sample_inputs("cpu", torch.float32)))
            expected = op(s.input, *s.args, **s.kwargs)
        except (StopIteration, NotImplementedError, RuntimeError):
            pytest.skip("no runnable sample")
        if not isinstance(expected, torch.Tensor) or expected.layout != torch.strided:
            pytest.skip("not a single strided result")
        flat, _ = tree_flatten((s.input, s.args, s.kwargs))
        tensors = [t for t in flat if isinstance(t, torch.Tensor)]
        if not tensors:
            pytest.skip("a factory: out= decides the device")
        if all(t.dim() == 0 for t in tensors):
            pytest.skip("0-dim inputs are read as numbers (linspace(Tensor, ...)), on CUDA too")
        inp, args, kwargs = tree_map(lambda t: t.to(DEVICE) if isinstance(t, torch.Tensor) else t,
                                     (s.input, s.args, s.kwargs))
        out = torch.full_like(expected, 7) if expected.dtype != torch.bool else torch.ones_like(expected)
        before = out.clone()
        with pytest.raises(RuntimeError, match="(?i)device"):
            op(inp, *args, **kwargs, out=out)
        assert torch.equal(out, before), "a failed call wrote its CPU out= tensor"
