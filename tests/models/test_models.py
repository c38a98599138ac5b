"""Models nobody here wrote (tests/models/zoo.py: Hugging Face transformers,
random init, no download) train, generate, compile and run under autocast on
the device under test exactly as on the CPU.

Tolerances (docs/models.md says why): the device's float32 kernels are the
CPU's, so losses and gradients agree to rounding (relative 1e-4; a gradient
is compared relative to its tensor's largest entry, since batch norm over a
1x1 feature map gives gradients in the hundreds whose small entries carry
the big ones' rounding, plus a floor of 1e-5 and 1e-7 of the model's largest
gradient: a batch norm's bias that feeds another batch norm through a
convolution has a gradient that is zero but for rounding). Parameters after Adam are compared loosely: Adam
divides by the root of the second moment, so rounding noise in a gradient
that is zero up to rounding becomes a full step of size lr on one side and
not on the other, or a step of -lr against +lr: a parameter may differ by 2 lr
per step. bf16 autocast
rounds every matmul's inputs to 8 bits of mantissa: a loss within 5% of
float32's (MobileNetV2's batch norms over 1x1 maps are the worst, 2.6%), and
no further from it than the CPU's autocast.
"""

import copy

import pytest
import torch

from tests import target
from tests.target import DEVICE, HW

from . import zoo

pytest.importorskip("transformers", reason="the model suite needs transformers "
                                           "(requirements-dev.txt)")

# A model whose library this release cannot install (timm, torchvision) is
# skipped, with the reason (zoo.missing).
MODELS = [pytest.param(n, marks=pytest.mark.skipif(zoo.missing(n) is not None,
                                                   reason=str(zoo.missing(n))))
          for n in zoo.MODELS]
LMS = [n for n, e in zoo.MODELS.items() if e.lm]
TIED = [n for n, e in zoo.MODELS.items() if e.tied]
STEPS = 3
LR = 1e-3


def on(device, kwargs):
    return {k: v.to(device) for k, v in kwargs.items()}


def pair(name):
    """The model on the CPU and an equal copy on the device."""
    cpu = zoo.build(name)
    return cpu, copy.deepcopy(cpu).to(DEVICE)


def assert_grads_close(cpu, dev, rtol=1e-4):
    # The floor: a gradient that is zero but for rounding carries the rounding
    # of the model's largest gradients (float32: ~6e-8 of them).
    floor = 1e-5 + 1e-7 * max(p.grad.abs().max().item() for p in cpu.parameters()
                              if p.grad is not None)
    for (n, a), (_, d) in zip(cpu.named_parameters(), dev.named_parameters()):
        assert (a.grad is None) == (d.grad is None), n
        if a.grad is None:
            continue
        assert d.grad.device.type == DEVICE, n
        scale = a.grad.abs().max().item()
        torch.testing.assert_close(d.grad.cpu(), a.grad, rtol=rtol, atol=rtol * scale + floor,
                                   msg=lambda m, n=n: f"gradient of {n}: {m}")


def train(model, name, device, steps=STEPS, wrap=lambda m: m, autocast=None):
    """Losses of `steps` AdamW steps on batches 1..steps; the first step's
    gradients are left in the model's .grad (zeroed before each later step)."""
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    fn = wrap(model)
    losses = []
    for step in range(steps):
        if step:
            opt.zero_grad()
        kwargs = zoo.batch(name, seed=step + 1, device=device)
        if autocast is None:
            loss = zoo.loss(fn, kwargs)
        else:
            with torch.autocast(device, dtype=autocast):
                loss = zoo.loss(fn, kwargs)
        loss.backward()
        losses.append(loss.item())
        if step == 0:
            first = {n: p.grad.detach().clone() for n, p in model.named_parameters()
                     if p.grad is not None}
        opt.step()
    for n, p in model.named_parameters():
        p.grad = first.get(n)
    return losses


@pytest.mark.models
@pytest.mark.smoke
class TestModelsSmoke:
    hw_classification = HW.ACCELERATOR

    def test_gpt2_trains_and_generates_as_on_the_cpu(self):
        cpu, dev = pair("gpt2")
        assert dev.lm_head.weight is dev.transformer.wte.weight
        torch.testing.assert_close(train(dev, "gpt2", DEVICE, steps=2),
                                   train(cpu, "gpt2", "cpu", steps=2), rtol=1e-4, atol=1e-6)
        prompt = zoo.batch("gpt2")["input_ids"][:, :4]
        with torch.no_grad():
            want = cpu.eval().generate(prompt, max_new_tokens=4, do_sample=False, pad_token_id=0)
            got = dev.eval().generate(prompt.to(DEVICE), max_new_tokens=4, do_sample=False,
                                      pad_token_id=0)
        assert torch.equal(got.cpu(), want)

    # CI's relay job runs the smoke subset on 2.14.1, the one release with
    # torchvision (and so timm) here: there these two are checked in CI too.
    @pytest.mark.parametrize("name", [m for m in MODELS if m.values[0] in ("timm_resnet",
                                                                          "tv_mobilenet")])
    def test_timm_and_torchvision_models_train_as_on_the_cpu(self, name):
        cpu, dev = pair(name)
        torch.testing.assert_close(train(dev, name, DEVICE, steps=2),
                                   train(cpu, name, "cpu", steps=2), rtol=1e-4, atol=1e-6)
        assert_grads_close(cpu, dev)


@pytest.mark.models
class TestTraining:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("name", MODELS)
    def test_parameters_as_on_the_cpu(self, name):
        cpu, dev = pair(name)
        names_cpu = [n for n, _ in cpu.named_parameters()]
        assert [n for n, _ in dev.named_parameters()] == names_cpu
        assert len(list(dev.parameters())) == len(list(cpu.parameters()))
        assert all(p.device.type == DEVICE for p in dev.parameters())
        if name in TIED:  # the output head is the input embedding, on both
            assert dev.get_output_embeddings().weight is dev.get_input_embeddings().weight

    @pytest.mark.parametrize("name", MODELS)
    def test_training_steps(self, name):
        cpu, dev = pair(name)
        lc = train(cpu, name, "cpu")
        ld = train(dev, name, DEVICE)
        torch.testing.assert_close(ld, lc, rtol=1e-4, atol=1e-6)
        assert_grads_close(cpu, dev)
        for (n, a), (_, d) in zip(cpu.named_parameters(), dev.named_parameters()):
            torch.testing.assert_close(d.detach().cpu(), a.detach(), rtol=0, atol=2 * STEPS * LR,
                                       msg=lambda m, n=n: f"parameter {n}: {m}")
        # Batch norm's running statistics follow the parameters (loosely).
        for (n, a), (_, d) in zip(cpu.named_buffers(), dev.named_buffers()):
            torch.testing.assert_close(d.cpu(), a, rtol=1e-4, atol=2 * STEPS * LR,
                                       msg=lambda m, n=n: f"buffer {n}: {m}")

    @pytest.mark.parametrize("name", MODELS)
    def test_eval_forward(self, name):
        cpu, dev = pair(name)
        cpu.eval(), dev.eval()
        kwargs = zoo.batch(name)
        with torch.no_grad():
            out_c, out_d = cpu(**kwargs), dev(**on(DEVICE, kwargs))
        assert out_d.logits.device.type == DEVICE
        torch.testing.assert_close(out_d.logits.cpu(), out_c.logits, rtol=1e-4, atol=1e-5)


@pytest.mark.models
class TestGenerate:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("name", LMS)
    @pytest.mark.parametrize("use_cache", [True, False], ids=["kv_cache", "no_cache"])
    def test_greedy_generate(self, name, use_cache):
        cpu, dev = pair(name)
        cpu.eval(), dev.eval()
        prompt = zoo.batch(name)["input_ids"][:, :6]
        kw = dict(max_new_tokens=8, do_sample=False, use_cache=use_cache,
                  return_dict_in_generate=True, output_scores=True, pad_token_id=0)
        with torch.no_grad():
            gc = cpu.generate(prompt, **kw)
            gd = dev.generate(prompt.to(DEVICE), **kw)
        assert gd.sequences.device.type == DEVICE
        torch.testing.assert_close(torch.stack(gd.scores).cpu(), torch.stack(gc.scores),
                                   rtol=1e-4, atol=1e-5)
        assert torch.equal(gd.sequences.cpu(), gc.sequences)

    @pytest.mark.parametrize("name", LMS)
    def test_kv_cache_lives_on_the_device(self, name):
        _, dev = pair(name)
        dev.eval()
        prompt = zoo.batch(name, device=DEVICE)["input_ids"][:, :6]
        with torch.no_grad():
            out = dev.generate(prompt, max_new_tokens=2, do_sample=False, use_cache=True,
                               return_dict_in_generate=True, pad_token_id=0)
        cache = out.past_key_values
        tensors = [t for t in _tensors(cache)]
        assert tensors and all(t.device.type == DEVICE for t in tensors), type(cache)


def _tensors(obj):
    """Every tensor inside a cache object (transformers' Cache classes or tuples)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _tensors(x)
    elif hasattr(obj, "__dict__"):
        for x in vars(obj).values():
            yield from _tensors(x)


@pytest.mark.models
@pytest.mark.slow
class TestCompile:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("name", MODELS)
    def test_compiled_training_step(self, name):
        # One step of the compiled model (forward and backward through
        # Inductor) against the CPU's eager step.
        torch._dynamo.reset()
        cpu, dev = pair(name)
        lc = train(cpu, name, "cpu", steps=1)
        ld = train(dev, name, DEVICE, steps=1, wrap=torch.compile)
        torch.testing.assert_close(ld, lc, rtol=1e-4, atol=1e-5)
        assert_grads_close(cpu, dev, rtol=1e-3)


def grad_error(model, ref):
    """The largest gradient difference from ref's, relative to each tensor's
    largest entry in ref (the worst over the parameters)."""
    worst = 0.0
    for (n, a), (_, r) in zip(model.named_parameters(), ref.named_parameters()):
        if r.grad is not None:
            scale = r.grad.abs().max().item() + 1e-5
            worst = max(worst, (a.grad.float().cpu() - r.grad).abs().max().item() / scale)
    return worst


@pytest.mark.models
class TestAutocast:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("name", MODELS)
    def test_bf16_autocast_step(self, name):
        # The oracle is the float32 step on the CPU: the device's autocast
        # follows CUDA's policy lists (docs/amp.md), which keep more operators
        # in float32 than torch.autocast("cpu") does (softmax, exp, pow,
        # layer_norm...), so it must be close to float32 and no less accurate
        # than the CPU's own autocast.
        ref = zoo.build(name)
        cpu, dev = copy.deepcopy(ref), copy.deepcopy(ref).to(DEVICE)
        (l32,) = train(ref, name, "cpu", steps=1)
        (lc,) = train(cpu, name, "cpu", steps=1, autocast=torch.bfloat16)
        (ld,) = train(dev, name, DEVICE, steps=1, autocast=torch.bfloat16)
        assert abs(ld - l32) <= 5e-2 * abs(l32), (ld, lc, l32)
        assert abs(ld - l32) <= 2 * abs(lc - l32) + 2e-3 * abs(l32), (ld, lc, l32)
        err_dev, err_cpu = grad_error(dev, ref), grad_error(cpu, ref)
        assert err_dev <= max(2 * err_cpu, 5e-2), (err_dev, err_cpu)
