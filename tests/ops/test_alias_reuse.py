"""openreg runs ATen's CPU kernels on CPU aliases of its tensors, and reuses an
alias from one operator to the next (a small per-thread table keyed by the
openreg TensorImpl, the key only a hint, every reuse checked against the tensor's
current bytes, dtype, sizes, strides and offset). These tests change a tensor's
metadata in place between operators, recycle tensors and addresses, and keep
more tensors alive than the table holds, and compare every result with the CPU's:
a stale alias would read the wrong elements."""

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

from tests.target import DEVICE, HW

MUTATIONS = ["t_", "unsqueeze_", "squeeze_", "as_strided_", "set_", "resize_",
             "transpose_", "fill_", "add_"]


def mutate(x: torch.Tensor, step: str, other: torch.Tensor, i: int) -> None:
    """Apply one in-place change to x (the same on both devices)."""
    if step == "t_" and x.dim() <= 2:
        x.t_()
    elif step == "unsqueeze_" and x.dim() < 4:
        x.unsqueeze_(0)
    elif step == "squeeze_":
        x.squeeze_()
    elif step == "as_strided_":
        x.as_strided_((2, 3), (1, 2), storage_offset=1)
    elif step == "set_":  # same TensorImpl, another storage
        x.set_(other.untyped_storage(), 0, (4, 6))
    elif step == "resize_":
        x.resize_(5)
    elif step == "transpose_" and x.dim() >= 2:
        x.transpose_(0, x.dim() - 1)
    elif step == "fill_":
        x.fill_(float(i))
    elif step == "add_":
        x.add_(1.5)


@pytest.mark.ops
class TestAliasReuse:
    hw_classification = HW.ACCELERATOR

    @settings(max_examples=40, deadline=None)
    @given(st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=12))
    def test_in_place_metadata_changes_between_operators(self, steps):
        cpu = torch.arange(24.0).reshape(4, 6).clone()
        dev = cpu.to(DEVICE)
        others = [torch.arange(100.0, 124.0), torch.arange(200.0, 224.0)]
        others_dev = [o.to(DEVICE) for o in others]
        for i, step in enumerate(steps):
            mutate(cpu, step, others[i % 2], i)
            mutate(dev, step, others_dev[i % 2], i)
            assert dev.shape == cpu.shape and dev.stride() == cpu.stride()
            # Operators read the tensor through its (possibly reused) alias.
            torch.testing.assert_close((dev * 2 + 1).cpu(), cpu * 2 + 1)
            torch.testing.assert_close(dev.sum().cpu(), cpu.sum())
        torch.testing.assert_close(dev.cpu(), cpu)
        torch.testing.assert_close(others_dev[0].cpu(), others[0])

    def test_new_tensors_at_freed_addresses(self):
        # Freed tensors' blocks and TensorImpls are reused at once by the next
        # allocations: an alias keyed by an old TensorImpl must not be taken for
        # the new tensor unless it describes it exactly.
        shapes = [(6,), (2, 3), (3, 2), (1, 6)]
        for i in range(300):
            shape = shapes[i % len(shapes)]
            cpu = torch.arange(6.0).reshape(shape) + i
            dev = cpu.to(DEVICE)
            if i % 2 and dev.dim() == 2:
                cpu, dev = cpu.t(), dev.t()
            if i % 3 == 0:
                cpu, dev = cpu[..., 1:], dev[..., 1:]
            torch.testing.assert_close((dev + dev.sum()).cpu(), cpu + cpu.sum())
            del cpu, dev

    def test_more_live_tensors_than_the_table_holds(self):
        g = torch.Generator().manual_seed(0)
        cpus = [torch.randn(k + 1, generator=g) for k in range(64)]
        devs = [c.to(DEVICE) for c in cpus]
        for r in range(4):
            order = torch.randperm(64, generator=g).tolist()
            for j in order:
                a, b = devs[j], devs[(j + 1) % 64][:1]
                torch.testing.assert_close((a * b + r).cpu(), cpus[j] * cpus[(j + 1) % 64][:1] + r)

    def test_views_of_one_storage_in_turn(self):
        base_cpu = torch.arange(12.0).reshape(3, 4)
        base = base_cpu.to(DEVICE)
        views = [lambda t: t, lambda t: t.t(), lambda t: t[:, 1:], lambda t: t.view(4, 3),
                 lambda t: t[1], lambda t: t.as_strided((2, 2), (4, 1), 5)]
        for r in range(5):
            for v in views:
                torch.testing.assert_close((v(base) * 3).cpu(), v(base_cpu) * 3)
            base.add_(1)
            base_cpu.add_(1)

    @pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
    def test_out_arguments_the_kernel_resizes(self):
        # An out= tensor of the wrong size whose alias is cached on its block
        # (an operator read it first): the kernel resizes the alias, which
        # moves the openreg tensor to a new block and frees the old block
        # with its cached CPU alias while the call still refers to it.
        for n in range(2, 40):
            a_cpu = torch.arange(float(n))
            a = a_cpu.to(DEVICE)
            out_cpu = torch.ones(n // 2)
            out = out_cpu.to(DEVICE)
            torch.testing.assert_close((out + 1).cpu(), out_cpu + 1)
            torch.add(a, a, out=out)
            torch.add(a_cpu, a_cpu, out=out_cpu)
            assert out.shape == out_cpu.shape
            torch.testing.assert_close((out * 2).cpu(), out_cpu * 2)
            torch.testing.assert_close(out.cpu(), out_cpu)
