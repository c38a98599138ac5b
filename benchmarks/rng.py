"""Random number generation: openreg's Philox kernels against the CPU's generator.

    python benchmarks/rng.py           # BENCH_ROUNDS rounds (default 7)
    python benchmarks/rng.py --quick   # one short round (a smoke run)

Each round times the same fill on the CPU (`torch.rand`'s kernel, the Mersenne
Twister, which runs on one thread) and on openreg (Philox, counter-based, so it
runs on every core), interleaved, each a median of several timed loops; the
ratio printed is the median over rounds of openreg/CPU, from this one run. The
target of the Philox issue is 4M uniform floats at most 1.2x the CPU.
"""

import argparse
import os
import statistics
import sys

from _timing import bench  # benchmarks/ is on sys.path when run as a script

N = 4 * 1024 * 1024
CASES = {
    "uniform_ float32 (torch.rand)": lambda t: t.uniform_(),
    "normal_ float32 (torch.randn)": lambda t: t.normal_(),
    "bernoulli_(0.5) float32 (dropout's mask)": lambda t: t.bernoulli_(0.5),
    "uniform_ float64": lambda t: t.uniform_(),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    rounds = 1 if args.quick else int(os.environ.get("BENCH_ROUNDS", "7"))
    n = N // 16 if args.quick else N
    inner, repeats = (2, 2) if args.quick else (5, 5)

    import torch

    sync = torch.openreg.synchronize
    print(f"{n} elements, {rounds} round(s), {torch.get_num_threads()} threads")
    print(f"{'case':45s} {'cpu ms':>8s} {'openreg ms':>11s} {'ratio':>6s}")
    for name, fill in CASES.items():
        dtype = torch.float64 if "float64" in name else torch.float32
        cpu_t, dev_t = torch.empty(n, dtype=dtype), torch.empty(n, dtype=dtype, device="openreg")
        ratios, cpu_ms, dev_ms = [], [], []
        for _ in range(rounds):
            c = bench(lambda: fill(cpu_t), lambda: None, inner, repeats)
            d = bench(lambda: fill(dev_t), sync, inner, repeats)
            ratios.append(d / c)
            cpu_ms.append(c * 1e3)
            dev_ms.append(d * 1e3)
        print(f"{name:45s} {statistics.median(cpu_ms):8.2f} {statistics.median(dev_ms):11.2f} "
              f"{statistics.median(ratios):6.2f}  ratio (openreg/cpu)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
