"""The model suite's models (tests/models/zoo.py) on openreg next to the CPU,
from one run: the time of one training step (forward, backward, AdamW step),
eager and compiled (torch.compile, default mode, forward and backward).

    python benchmarks/models.py                 # every model, eager and compiled
    python benchmarks/models.py --quick         # gpt2 only, fewer rounds (the test)
    python benchmarks/models.py --models vit resnet --no-compile

For each model it prints the step time on each device and the ratio the
real-models issue sets targets for: openreg eager / CPU eager at most 1.1,
openreg compiled / CPU compiled at most 1.1 (torch 2.15). The devices take
turns: BENCH_PAIRS pairs of samples (a sample: a few steps, then the
device's synchronize), the order alternating, and the ratio printed is the
median of the pairs' ratios. These machines change speed by up to 2x within
seconds; two samples taken back to back see the same machine, so their ratio
cancels what medians of whole rounds did not (the same command moved a
ratio from 1.00 to 1.82 between runs with rounds; docs/performance.md).
Compile time is not in the step time (the first calls compile, then the
samples run). Read ratios, not absolute times. Nothing is asserted.

The zoo's models are small, so their steps measure dispatch more than
arithmetic. ``gpt2_wide`` (this script's own: GPT-2 with d=256, 4 layers,
a 1024-token vocabulary, batch 8x128; about 0.2 s a step on two cores) is
the size where arithmetic dominates; it runs with the others by default
(BENCH_WIDE_PAIRS pairs of one step).
"""

import argparse
import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _timing import paired  # noqa: E402 (benchmarks/ is on sys.path when run as a script)

BENCH_PAIRS = int(os.environ.get("BENCH_PAIRS", "40"))
BENCH_WIDE_PAIRS = int(os.environ.get("BENCH_WIDE_PAIRS", "12"))
WIDE = "gpt2_wide"


def wide_gpt2(torch):
    """GPT-2 at a size where a step's time is its matmuls, not its dispatch,
    and a batch for it (input ids as labels), on the CPU."""
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=1024, n_positions=128, n_embd=256, n_layer=4,
                                  n_head=8, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    ids = torch.randint(0, 1024, (8, 128), generator=torch.Generator().manual_seed(1))
    return transformers.GPT2LMHeadModel(cfg), {"input_ids": ids, "labels": ids}


def make_step(torch, model, batch, dev, compiled):
    fn = torch.compile(model) if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    kwargs = {k: v.to(dev) for k, v in batch.items()}

    def step():
        opt.zero_grad(set_to_none=True)
        fn(**kwargs).loss.backward()
        opt.step()
    return step


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--models", nargs="+")
    p.add_argument("--no-compile", action="store_true")
    a = p.parse_args()

    import torch

    from tests.models import zoo

    available = [n for n in zoo.MODELS if not zoo.missing(n)] + [WIDE]  # timm: where torchvision is
    names = a.models or (["gpt2"] if a.quick else available)
    pairs, group = (4, 2) if a.quick else (BENCH_PAIRS, 3)
    syncs = {"cpu": lambda: None, "openreg": torch.openreg.synchronize}
    modes = ["eager"] + ([] if a.no_compile else ["compiled"])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{pairs} paired samples of {group} steps; step = forward + backward + AdamW")
    for name in names:
        base, batch = wide_gpt2(torch) if name == WIDE else (zoo.build(name), zoo.batch(name))
        n_pairs, n_group = (min(pairs, BENCH_WIDE_PAIRS), 1) if name == WIDE else (pairs, group)
        for mode in modes:
            torch._dynamo.reset()
            steps = {dev: make_step(torch, copy.deepcopy(base).to(dev), batch, dev,
                                    mode == "compiled") for dev in ("cpu", "openreg")}
            for dev, s in steps.items():  # compile (and warm up) outside the timing
                s()
                syncs[dev]()
            times, ratio = paired(steps, syncs, n_pairs, n_group)
            print(f"{name:13s} {mode:8s} cpu {times['cpu'] * 1e3:8.2f} ms  "
                  f"openreg {times['openreg'] * 1e3:8.2f} ms  "
                  f"openreg/cpu: {mode} step {ratio:.2f}x", flush=True)


if __name__ == "__main__":
    main()
