"""Overhead of the stream sanitizer: a training step on openreg with it on vs off.

    python benchmarks/sanitizer.py           # BENCH_ROUNDS rounds (default 7)
    python benchmarks/sanitizer.py --quick   # one short round (a smoke run)

Each round times the same steps with the sanitizer off and on, interleaved
(each time a median of several timed loops); the ratio printed is the median
over rounds of on/off, from this one run. Two workloads: a small MLP, whose
many tiny kernels show the per-launch cost (clock ticks, shadow-map updates,
declaring each argument), and a transformer encoder step, whose kernels do real
work. The machines are noisy: read ratios, not absolute times.
"""

import argparse
import os
import statistics
import sys

from _timing import bench  # benchmarks/ is on sys.path when run as a script


def workloads(torch):
    import torch.nn as nn

    def mlp():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                              nn.Linear(128, 10)).to("openreg")
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(32, 64, device="openreg")
        y = torch.randint(0, 10, (32,), device="openreg")

        def step():
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        return step

    def transformer():
        torch.manual_seed(0)
        layer = nn.TransformerEncoderLayer(128, 4, 512, dropout=0.1, batch_first=True)
        model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).to("openreg")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.randn(8, 32, 128, device="openreg")

        def step():
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
        return step

    return [("MLP train step (tiny kernels)", mlp, 20, 5),
            ("transformer train step (2 layers, d=128)", transformer, 3, 5)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one short round")
    args = p.parse_args()
    os.environ.pop("OPENREG_STREAM_SANITIZER", None)
    import torch

    rounds = 1 if args.quick else int(os.environ.get("BENCH_ROUNDS", "7"))
    sync = torch.openreg.synchronize
    print(f"stream sanitizer overhead, {rounds} round(s); ratio = on/off, median over rounds")
    for name, make, inner, repeats in workloads(torch):
        if args.quick:
            inner, repeats = max(1, inner // 4), 2
        step = make()
        off_t, on_t, ratios = [], [], []
        for _ in range(rounds):
            torch.openreg.set_stream_sanitizer(False)
            off = bench(step, sync, inner, repeats)
            torch.openreg.set_stream_sanitizer(True)
            on = bench(step, sync, inner, repeats)
            torch.openreg.set_stream_sanitizer(False)
            off_t.append(off)
            on_t.append(on)
            ratios.append(on / off)
        print(f"  {name:42s} off {statistics.median(off_t) * 1e3:8.2f} ms   "
              f"on {statistics.median(on_t) * 1e3:8.2f} ms   ratio {statistics.median(ratios):5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
