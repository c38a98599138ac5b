"""Module conversions keep Parameter objects, so tied weights stay tied.

GPT-2, BERT and T5 tie the output head to the input embedding (one Parameter
in two modules). ``nn.Module._apply`` (``.to()``, ``.cpu()``, ``.half()``,
``to_empty``) keeps each Parameter object by swapping ``param.data`` where
``torch._has_compatible_shallow_copy_type(param, converted)`` holds, as it
does between CPU and CUDA; anywhere else it makes a new Parameter per module
and the tie is lost without an error (docs/pytorch-gaps.md, gap 31). These
tests convert tied modules to the device and back, and compare what a tied
model trains against the CPU."""

import gc

import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import target
from tests.target import DEVICE, HW

ELT = 4  # bytes of a float32


def tied_pair(vocab=10, dim=4):
    """An embedding and an output head sharing one weight (what GPT-2 ties)."""
    emb, head = nn.Embedding(vocab, dim), nn.Linear(dim, vocab, bias=False)
    head.weight = emb.weight
    return nn.ModuleList([emb, head])


class TiedLM(nn.Module):
    """The smallest tied language model: embedding, a layer norm, the head."""

    def __init__(self, vocab=32, dim=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, tokens):
        return self.head(self.ln(self.emb(tokens)))


def identities(module):
    """Which named parameters are one object: the groups of names, sorted."""
    groups = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    return sorted(sorted(names) for names in groups.values())


def allocated():
    gc.collect()
    target.device_module.synchronize()
    return target.device_module.memory_allocated()


@pytest.mark.device
class TestTiedWeights:
    hw_classification = HW.ACCELERATOR

    def test_to_device_keeps_the_tie(self):
        # The reproducer: holds on the CPU and on CUDA.
        m = tied_pair().to(DEVICE)
        assert m[0].weight is m[1].weight
        assert m[0].weight.device.type == DEVICE
        assert len(list(m.parameters())) == 1

    def test_the_parameter_object_survives_the_round_trip(self):
        m = tied_pair()
        p = m[0].weight
        m.to(DEVICE)
        assert m[0].weight is p and m[1].weight is p and p.device.type == DEVICE
        m.cpu()
        assert m[0].weight is p and m[1].weight is p and p.device.type == "cpu"

    def test_the_device_method_keeps_the_tie(self):
        # Module.<device>() from generate_methods_for_privateuse1_backend.
        m = getattr(tied_pair(), DEVICE)()
        assert m[0].weight is m[1].weight and m[0].weight.device.type == DEVICE

    @pytest.mark.parametrize("convert", ["half", "bfloat16", "double", "to_dtype"])
    def test_dtype_conversions_on_the_device_keep_the_tie(self, convert):
        m = tied_pair().to(DEVICE)
        m = m.to(torch.float16) if convert == "to_dtype" else getattr(m, convert)()
        assert m[0].weight is m[1].weight
        assert m[0].weight.device.type == DEVICE

    def test_to_empty_keeps_the_tie(self):
        # From CPU, as on CUDA (from "meta", no device keeps it: tie_weights()).
        m = tied_pair().to_empty(device=DEVICE)
        assert m[0].weight is m[1].weight and m[0].weight.device.type == DEVICE

    def test_load_state_dict_writes_the_one_tied_weight(self):
        src = tied_pair()
        m = tied_pair().to(DEVICE)
        m.load_state_dict(src.state_dict())
        assert m[0].weight is m[1].weight
        torch.testing.assert_close(m[1].weight.cpu(), src[1].weight, rtol=0, atol=0)

    def test_gradients_move_with_their_parameters(self):
        m = TiedLM()
        m(torch.arange(8).view(2, 4)).sum().backward()
        grad = m.emb.weight.grad.clone()
        m.to(DEVICE)
        assert m.emb.weight.grad is m.head.weight.grad
        assert m.emb.weight.grad.device.type == DEVICE
        torch.testing.assert_close(m.emb.weight.grad.cpu(), grad, rtol=0, atol=0)

    def test_the_device_holds_one_copy_of_a_tied_weight(self):
        # 256 x 64 float32 = 64 KiB, a multiple of every allocator's rounding.
        m = tied_pair(vocab=256, dim=64)
        before = allocated()
        m.to(DEVICE)
        assert allocated() - before == 256 * 64 * ELT
        del m
        assert allocated() == before

    @settings(max_examples=10, deadline=None)
    @given(ties=st.lists(st.integers(0, 2), min_size=1, max_size=5))
    def test_any_pattern_of_sharing_survives_the_round_trip(self, ties):
        # Layer i takes the weight of layer ties[i] (if earlier), else its own.
        layers = nn.ModuleList(nn.Linear(3, 3) for _ in ties)
        for i, j in enumerate(ties):
            if j < i:
                layers[i].weight = layers[j].weight
        expected = identities(layers)
        layers.to(DEVICE)
        assert identities(layers) == expected
        assert all(p.device.type == DEVICE for p in layers.parameters())
        layers.cpu()
        assert identities(layers) == expected

    def test_a_tied_model_trains_as_on_the_cpu(self):
        torch.manual_seed(0)
        cpu = TiedLM()
        dev = TiedLM()
        dev.load_state_dict(cpu.state_dict())
        dev.to(DEVICE)
        assert len(list(dev.parameters())) == len(list(cpu.parameters())) == 3
        tokens = torch.randint(0, 32, (4, 8))
        opts = [torch.optim.Adam(m.parameters(), lr=1e-2) for m in (cpu, dev)]
        for _ in range(3):
            losses = []
            for m, opt, x in zip((cpu, dev), opts, (tokens, tokens.to(DEVICE))):
                opt.zero_grad()
                logits = m(x[:, :-1])
                loss = nn.functional.cross_entropy(logits.reshape(-1, 32), x[:, 1:].reshape(-1))
                loss.backward()
                losses.append(loss)
                # The head's gradient adds to the embedding's: one tensor.
                assert m.head.weight.grad is m.emb.weight.grad
            torch.testing.assert_close(losses[1].cpu(), losses[0], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(dev.emb.weight.grad.cpu(), cpu.emb.weight.grad,
                                       rtol=1e-5, atol=1e-6)
            for opt in opts:
                opt.step()
        assert dev.head.weight is dev.emb.weight


@pytest.mark.device
class TestSetData:
    hw_classification = HW.ACCELERATOR

    def test_data_of_a_cpu_parameter_takes_a_device_tensor(self):
        # `param.data = t` across devices, as between CPU and CUDA.
        p = nn.Parameter(torch.ones(3))
        p.data = torch.full((3,), 2.0, device=DEVICE)
        assert isinstance(p, nn.Parameter) and p.device.type == DEVICE and p.requires_grad
        assert p.cpu().tolist() == [2.0, 2.0, 2.0]
        p.data = torch.zeros(3)
        assert p.device.type == "cpu" and p.tolist() == [0.0, 0.0, 0.0]

    def test_shallow_copy_type_answers_as_between_cpu_and_cuda(self):
        ask = torch._has_compatible_shallow_copy_type
        cpu, dev = torch.ones(2), torch.ones(2, device=DEVICE)
        assert ask(cpu, dev) and ask(dev, cpu) and ask(dev, dev)
        assert ask(dev, torch.ones(2, dtype=torch.float64, device=DEVICE))
        assert not ask(dev, torch.ones(2).to_sparse())
        assert not ask(torch.ones(2).to_sparse(), dev)

    def test_data_of_another_layout_is_refused(self):
        p = nn.Parameter(torch.ones(2, device=DEVICE))
        with pytest.raises(RuntimeError, match=r"`variable` and `tensor` have incompatible "
                                               r"tensor type"):
            p.data = torch.ones(2).to_sparse()
        assert p.device.type == DEVICE and p.cpu().tolist() == [1.0, 1.0]
