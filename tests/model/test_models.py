"""A small transformer and a ResNet-style CNN train for 20 steps on openreg with
losses equal to the CPU's (without dropout: openreg's Philox generator and the
CPU's Mersenne Twister draw different masks from equal seeds); with dropout,
openreg's training is reproducible from its seed."""

import pytest
import torch
import torch.nn as nn

from tests import target
from tests.target import DEVICE, HW

STEPS = 20


class TinyTransformer(nn.Module):
    def __init__(self, vocab=100, d=64, layers=2, heads=4, seq=16, dropout=0.0):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=dropout, batch_first=True,
                                           norm_first=True)
        self.drop = nn.Dropout(dropout)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        x = self.drop(self.emb(tokens) + self.pos[: tokens.shape[1]])
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], device=tokens.device)
        return self.head(self.norm(self.enc(x, mask=mask, is_causal=True)))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class TinyResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.MaxPool2d(2))
        self.layers = nn.Sequential(BasicBlock(16, 16, 1), BasicBlock(16, 32, 2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        return self.fc(self.pool(self.layers(self.stem(x))).flatten(1))


def run(make_model, make_batch, loss_fn, device, seed_device):
    torch.manual_seed(0)
    model = make_model().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    data = torch.Generator().manual_seed(1)
    # Dropout draws from the device's generator.
    torch.manual_seed(1234)
    if seed_device:
        target.device_module.manual_seed_all(1234)
    losses = []
    for _ in range(STEPS):
        x, y = make_batch(data)
        loss = loss_fn(model(x.to(device)), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.model
@pytest.mark.slow
class TestTwentySteps:
    hw_classification = HW.ACCELERATOR

    def test_transformer(self):
        def batch(g):
            t = torch.randint(0, 100, (8, 16), generator=g)
            return t, torch.roll(t, -1, 1)

        def loss(logits, y):
            return nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())

        cpu = run(TinyTransformer, batch, loss, "cpu", False)
        dev = run(TinyTransformer, batch, loss, DEVICE, True)
        assert cpu[-1] < cpu[0]
        torch.testing.assert_close(dev, cpu, rtol=1e-5, atol=1e-5)

        # With dropout (embedding and attention): the same seed trains the
        # same way twice, the loss goes down, and dropout really dropped.
        def with_dropout():
            return TinyTransformer(dropout=0.1)

        a = run(with_dropout, batch, loss, DEVICE, True)
        b = run(with_dropout, batch, loss, DEVICE, True)
        assert a == b
        assert a[-1] < a[0]
        assert a != dev

    def test_resnet_cnn(self):
        fixed = torch.Generator().manual_seed(7)
        images, labels = torch.randn(16, 3, 32, 32, generator=fixed), torch.randint(0, 10, (16,), generator=fixed)

        def batch(g):  # a fixed small dataset, so the loss must go down
            idx = torch.randperm(16, generator=g)[:8]
            return images[idx], labels[idx]

        # Both sides with one intra-op thread: openreg's backward runs on
        # autograd's device thread with one OpenMP thread (docs/performance.md),
        # the CPU's on this thread with the process's count, and with two the
        # convolutions' weight gradients sum their batch in another order
        # (DIFFERENT ROUNDING, 1.5e-5 to 1.7e-4 after 20 steps).
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            cpu = run(TinyResNet, batch, nn.functional.cross_entropy, "cpu", False)
            dev = run(TinyResNet, batch, nn.functional.cross_entropy, DEVICE, True)
        finally:
            torch.set_num_threads(threads)
        assert cpu[-1] < cpu[0]
        torch.testing.assert_close(dev, cpu, rtol=1e-5, atol=1e-5)
