"""The model suite's models (tests/models/zoo.py) on openreg next to the CPU,
from one run: the time of one training step (forward, backward, AdamW step),
eager and compiled (torch.compile, default mode, forward and backward).

    python benchmarks/models.py                 # every model, eager and compiled
    python benchmarks/models.py --quick         # gpt2 only, fewer rounds (the test)
    python benchmarks/models.py --models vit resnet --no-compile

For each model it prints the step time on each device (median over
BENCH_ROUNDS rounds, each the median of timed loops; the devices interleaved
round by round, so that a noisy moment hits both) and the ratios the
real-models issue sets targets for: openreg eager / CPU eager at most 1.1,
openreg compiled / CPU compiled at most 1.1 (torch 2.15). Compile time is
not in the step time (the first calls compile, then the loops run). The
machines are noisy: read ratios, not absolute times. Nothing is asserted.
"""

import argparse
import copy
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _timing import bench  # noqa: E402  (benchmarks/ is on sys.path as a script)

BENCH_ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))


def make_step(torch, zoo, name, model, dev, compiled):
    fn = torch.compile(model) if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    kwargs = zoo.batch(name, device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        zoo.loss(fn, kwargs).backward()
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

    available = [n for n in zoo.MODELS if not zoo.missing(n)]  # timm, torchvision: 2.14.1
    names = a.models or (["gpt2"] if a.quick else available)
    rounds, inner, repeats = (2, 2, 2) if a.quick else (BENCH_ROUNDS, 5, 3)
    syncs = {"cpu": lambda: None, "openreg": torch.openreg.synchronize}
    modes = ["eager"] + ([] if a.no_compile else ["compiled"])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{rounds} rounds; step = forward + backward + AdamW")
    for name in names:
        base = zoo.build(name)
        for mode in modes:
            torch._dynamo.reset()
            steps = {dev: make_step(torch, zoo, name, copy.deepcopy(base).to(dev), dev,
                                    mode == "compiled") for dev in ("cpu", "openreg")}
            for dev, s in steps.items():  # compile (and warm up) outside the timing
                s()
                syncs[dev]()
            times = {dev: [] for dev in steps}
            for _ in range(rounds):
                for dev, s in steps.items():
                    times[dev].append(bench(s, syncs[dev], inner, repeats))
            cpu, dev = statistics.median(times["cpu"]), statistics.median(times["openreg"])
            print(f"{name:13s} {mode:8s} cpu {cpu * 1e3:8.2f} ms  openreg {dev * 1e3:8.2f} ms  "
                  f"openreg/cpu: {mode} step {dev / cpu:.2f}x", flush=True)


if __name__ == "__main__":
    main()
