"""Overhead of torch.profiler on an openreg training step, as a ratio on/off.

    python benchmarks/profiler.py            # 7 rounds of 10 steps per case (about 1 minute)
    python benchmarks/profiler.py --quick    # 2 rounds of 3 steps (a smoke run for the tests)
    BENCH_ROUNDS=15 BENCH_THREADS=1 python benchmarks/profiler.py

The step trains a small CNN (the demo's: conv, batch norm, pooling, two linear
layers; batch 32, AdamW) and synchronises the device at its end. Each case
runs the same steps with the profiler off and on, alternately, in several
rounds; a round times every step of one profiling session (or of one
unprofiled run of as many steps) and keeps the median step. The ratio reported
is the median over rounds of on/off, from this one run. The cases:

* openreg, activities CPU + PrivateUse1: what a user of the plugin pays while
  recording (operators, device kernels, copies and their correlation);
* openreg, activity CPU only: the plugin is registered but stays out of the
  session (configure returns no session);
* cpu, activity CPU only: torch.profiler on the CPU device, for scale.

Only the recording is timed: turning the records into events and a trace
happens once, after the session (the "stop" column, median per session). The
machines are noisy: read the ratios, not the absolute times.
"""

import argparse
import os
import statistics
import sys
import time

TARGET = 1.3  # issue 7: at most 1.3x with CPU + PrivateUse1 activities


def make_step(torch, device: str):
    import torch.nn as nn

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(8 * 8 * 8, 64), nn.GELU(), nn.Linear(64, 10),
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x = torch.randn(32, 1, 16, 16, device=device)
    y = torch.randint(0, 10, (32,), device=device)
    sync = torch.openreg.synchronize if device.startswith("openreg") else (lambda: None)

    def step():
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sync()
    return step


def session(torch, step, steps: int, activities):
    """Median seconds per step over one run of `steps` steps (profiled if
    `activities`), and the seconds the profiler took to stop and collect."""
    from torch.profiler import profile

    times = []

    def run():
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)

    if not activities:
        run()
        return statistics.median(times), 0.0
    prof = profile(activities=activities)
    prof.__enter__()
    run()
    t0 = time.perf_counter()
    prof.__exit__(None, None, None)
    prof.events()  # the trace turned into events, as key_averages() does
    return statistics.median(times), time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="2 rounds of 3 steps: checks that it runs")
    p.add_argument("--steps", type=int, default=10, help="steps per session (default 10)")
    args = p.parse_args()
    rounds = 2 if args.quick else int(os.environ.get("BENCH_ROUNDS", "7"))
    steps = 3 if args.quick else args.steps

    import torch
    from torch.profiler import ProfilerActivity

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", torch.get_num_threads())))

    CPU, DEV = ProfilerActivity.CPU, ProfilerActivity.PrivateUse1
    cases = [  # name, device, activities when on
        ("openreg, CPU + PrivateUse1 activities", "openreg", [CPU, DEV]),
        ("openreg, CPU activity only", "openreg", [CPU]),
        ("cpu, CPU activity only (for scale)", "cpu", [CPU]),
    ]
    step_fns = {dev: make_step(torch, dev) for dev in ("openreg", "cpu")}
    # Warm up: one-time set-up of the kernels, the allocator and Kineto.
    for _, dev, acts in cases:
        session(torch, step_fns[dev], 3, None)
        session(torch, step_fns[dev], 2, acts)

    results = {name: ([], [], [], []) for name, _, _ in cases}  # off, on, ratio, stop
    for _ in range(rounds):
        for name, dev, acts in cases:  # interleaved, so all cases share the machine's noise
            off, _ = session(torch, step_fns[dev], steps, None)
            on, stop = session(torch, step_fns[dev], steps, acts)
            r = results[name]
            r[0].append(off)
            r[1].append(on)
            r[2].append(on / off)
            r[3].append(stop)

    def ms(s):
        return f"{s * 1e3:.2f}ms"

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; small CNN training step "
          f"(batch 32, AdamW); medians of {rounds} rounds x {steps} steps")
    print(f"  {'case':<40}{'off':>10}{'on':>10}{'ratio':>8}{'stop':>10}")
    for name, _, _ in cases:
        off, on, ratio, stop = (statistics.median(v) for v in results[name])
        print(f"  {name:<40}{ms(off):>10}{ms(on):>10}{ratio:>8.2f}{ms(stop):>10}")
    ratio = statistics.median(results[cases[0][0]][2])
    print(f"overhead ratio (openreg, CPU + PrivateUse1, on/off): {ratio:.2f}x "
          f"(target <= {TARGET}x){'' if ratio <= TARGET else '  MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
