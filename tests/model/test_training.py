"""Small models: forward and backward on openreg equal the CPU's."""

import copy

import pytest
import torch
import torch.nn as nn

from tests.target import DEVICE, HW, device


def train(model, device, steps=5, seed=0):
    torch.manual_seed(seed)
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(16, 10, generator=g).to(device)
        y = torch.randint(0, 3, (16,), generator=g).to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 3))


@pytest.mark.model
@pytest.mark.smoke
class TestSmallModel:
    hw_classification = HW.ACCELERATOR

    def test_forward_backward_equals_cpu(self):
        m = mlp()
        md = copy.deepcopy(m).to(DEVICE)
        x = torch.randn(8, 10)
        out = m(x)
        outd = md(x.to(DEVICE))
        torch.testing.assert_close(outd.cpu(), out)
        out.square().mean().backward()
        outd.square().mean().backward()
        for (n, p), pd in zip(m.named_parameters(), md.parameters()):
            assert pd.grad.device.type == DEVICE, n
            torch.testing.assert_close(pd.grad.cpu(), p.grad, msg=n)

    def test_training_losses_equal_cpu(self):
        cpu_losses, cpu_model = train(mlp(), "cpu")
        dev_losses, dev_model = train(mlp(), DEVICE)
        torch.testing.assert_close(dev_losses, cpu_losses, rtol=1e-5, atol=1e-6)
        for p, pd in zip(cpu_model.parameters(), dev_model.parameters()):
            torch.testing.assert_close(pd.cpu(), p, rtol=1e-5, atol=1e-6)

    def test_cpu_leaf_gets_cpu_grad(self):
        w = torch.randn(4, requires_grad=True)  # CPU leaf
        y = (w.to(DEVICE) * 3).sum()
        y.backward()
        assert w.grad.device.type == "cpu"
        torch.testing.assert_close(w.grad, torch.full((4,), 3.0))

    def test_backward_on_second_device(self):
        m = mlp().to(device(1))
        x = torch.randn(4, 10, device=device(1))
        m(x).sum().backward()
        assert all(p.grad.device == torch.device(device(1)) for p in m.parameters())
