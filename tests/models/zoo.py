"""The models of tests/models: code nobody here wrote, built small from a
config with random weights (no download), one per family a user brings.

Each entry of MODELS builds a model from a seed and makes a batch for it
(from another seed), so that the CPU and the device under test start from
equal weights and see equal inputs. ``loss(model, batch)`` is what a
training loop minimises. The families (docs/models.md):

=============  ==========================================  ===========================
name           model (Hugging Face transformers)           what it covers
=============  ==========================================  ===========================
gpt2           GPT2LMHeadModel                             a decoder LM, head tied to
                                                           the embedding, KV cache
bert           BertForMaskedLM                             an encoder with a tied
                                                           masked-LM head
t5             T5ForConditionalGeneration                  a seq2seq model, relative
                                                           position buckets, tied head
vit            ViTForImageClassification                   a vision transformer
resnet         ResNetForImageClassification                a CNN with batch norm
mobilenet_v2   MobileNetV2ForImageClassification           a depthwise-separable CNN
                                                           (batch norm, ReLU6)
=============  ==========================================  ===========================

and, where the release has torchvision (requirements-torch-<release>.txt;
``missing`` says why not elsewhere), the same families from the other
libraries users bring:

=============  ==========================================  ===========================
timm_vit       timm VisionTransformer (vit_tiny_patch16)   a vision transformer (timm's
                                                           fused attention, class token)
timm_resnet    timm ResNet (resnet10t)                     a CNN with batch norm, tiered
                                                           stem, average pooling
tv_mobilenet   torchvision mobilenet_v3_small              a depthwise-separable CNN
                                                           (squeeze-excitation, hardswish)
=============  ==========================================  ===========================

Dropout is off in every config: the device's Philox generator and the CPU's
Mersenne Twister draw different masks from equal seeds (tests/model says
more), and these tests compare with the CPU.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib.util
from typing import Callable

import torch

VOCAB = 96
SEQ = 12
BATCH = 4
IMAGE = 32
CLASSES = 10


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str
    build: Callable[[], torch.nn.Module]  # the model, random init, train() mode
    batch: Callable[[torch.Generator], dict]  # keyword arguments of forward, on the CPU
    lm: bool = False  # has generate() and a KV cache
    tied: bool = False  # its output head is its input embedding
    library: str = "transformers"  # the package that defines it


def _transformers():
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def _gpt2():
    t = _transformers()
    cfg = t.GPT2Config(vocab_size=VOCAB, n_positions=4 * SEQ, n_embd=32, n_layer=2, n_head=4,
                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                       bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return t.GPT2LMHeadModel(cfg)


def _bert():
    t = _transformers()
    cfg = t.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=64,
                       max_position_embeddings=4 * SEQ, hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0, pad_token_id=0)
    return t.BertForMaskedLM(cfg)


def _t5():
    t = _transformers()
    cfg = t.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                     num_decoder_layers=2, num_heads=4, dropout_rate=0.0,
                     relative_attention_num_buckets=8, pad_token_id=0, eos_token_id=2,
                     decoder_start_token_id=0)
    return t.T5ForConditionalGeneration(cfg)


def _vit():
    t = _transformers()
    cfg = t.ViTConfig(image_size=IMAGE, patch_size=8, num_channels=3, hidden_size=32,
                      num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                      num_labels=CLASSES)
    return t.ViTForImageClassification(cfg)


def _resnet():
    t = _transformers()
    cfg = t.ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32],
                         depths=[1, 1], layer_type="basic", num_labels=CLASSES)
    return t.ResNetForImageClassification(cfg)


def _mobilenet_v2():
    t = _transformers()
    cfg = t.MobileNetV2Config(num_channels=3, image_size=IMAGE, depth_multiplier=0.25,
                              classifier_dropout_prob=0.0, num_labels=CLASSES)
    return t.MobileNetV2ForImageClassification(cfg)


# timm and torchvision classifiers answer logits; this gives them the
# interface of transformers' (keyword pixel_values and labels in, .logits and
# .loss out), so that every test and benchmark treats all models alike.
Output = collections.namedtuple("Output", "logits loss")


class Classifier(torch.nn.Module):
    def __init__(self, net: torch.nn.Module):
        super().__init__()
        self.net = net

    def forward(self, pixel_values, labels=None):
        logits = self.net(pixel_values)
        loss = None if labels is None else torch.nn.functional.cross_entropy(logits, labels)
        return Output(logits, loss)


def _timm_vit():
    import timm

    return Classifier(timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=IMAGE, patch_size=8, embed_dim=32,
        depth=2, num_heads=4, num_classes=CLASSES))


def _timm_resnet():
    import timm

    return Classifier(timm.create_model("resnet10t", pretrained=False, num_classes=CLASSES))


def _tv_mobilenet():
    import torchvision

    return Classifier(torchvision.models.mobilenet_v3_small(
        weights=None, num_classes=CLASSES, width_mult=0.5, dropout=0.0))


def _tokens(g, n=SEQ):
    return torch.randint(3, VOCAB, (BATCH, n), generator=g)


def _causal_lm_batch(g):
    ids = _tokens(g)
    return {"input_ids": ids, "labels": ids}


def _masked_lm_batch(g):
    ids = _tokens(g)
    masked = torch.rand(ids.shape, generator=g) < 0.3
    masked[:, 0] = True  # at least one masked position per row
    labels = torch.where(masked, ids, torch.full_like(ids, -100))
    return {"input_ids": torch.where(masked, torch.full_like(ids, 1), ids), "labels": labels}


def _seq2seq_batch(g):
    return {"input_ids": _tokens(g), "labels": _tokens(g, SEQ // 2)}


def _image_batch(g):
    return {"pixel_values": torch.randn(BATCH, 3, IMAGE, IMAGE, generator=g),
            "labels": torch.randint(0, CLASSES, (BATCH,), generator=g)}


MODELS = {e.name: e for e in (
    Entry("gpt2", _gpt2, _causal_lm_batch, lm=True, tied=True),
    Entry("bert", _bert, _masked_lm_batch, tied=True),
    Entry("t5", _t5, _seq2seq_batch, lm=True, tied=True),
    Entry("vit", _vit, _image_batch),
    Entry("resnet", _resnet, _image_batch),
    Entry("mobilenet_v2", _mobilenet_v2, _image_batch),
    Entry("timm_vit", _timm_vit, _image_batch, library="timm"),
    Entry("timm_resnet", _timm_resnet, _image_batch, library="timm"),
    Entry("tv_mobilenet", _tv_mobilenet, _image_batch, library="torchvision"),
)}


def missing(name: str) -> str | None:
    """Why ``name`` cannot be built with this torch, or None."""
    library = MODELS[name].library
    if importlib.util.find_spec(library) is None:
        return (f"{library} is not installed: torch 2.15.0 and 2.14.1 of the window have a "
                "torchvision that loads, 2.13.0's CPU build none "
                "(requirements-torch-<release>.txt, docs/models.md)")
    return None


def build(name: str, seed: int = 0) -> torch.nn.Module:
    """The model, from the seed, on the CPU."""
    torch.manual_seed(seed)
    return MODELS[name].build()


def batch(name: str, seed: int = 1, device="cpu") -> dict:
    """A batch of forward's keyword arguments, from its own generator (the
    same on every device), moved to ``device``."""
    g = torch.Generator().manual_seed(seed)
    return {k: v.to(device) for k, v in MODELS[name].batch(g).items()}


def loss(model: torch.nn.Module, kwargs: dict) -> torch.Tensor:
    """The model's own loss (transformers computes it from ``labels``)."""
    return model(**kwargs).loss
