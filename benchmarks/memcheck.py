"""Cost of memcheck (OPENREG_MEMCHECK=1, docs/memcheck.md) against the normal mode.

    python benchmarks/memcheck.py           # BENCH_ROUNDS rounds (default 5)
    python benchmarks/memcheck.py --quick   # one short round (a smoke run)

Memcheck is chosen when the runtime loads, so each round times the workloads in
two fresh child processes, normal mode then memcheck; the ratio printed is the
median over rounds of memcheck/normal, from this one run. The workloads: tiny
operators (an in-place one, which allocates nothing, and an out-of-place one,
whose allocation and free memcheck turns into a page mapping and a quarantine
entry), and the two training steps of benchmarks/sanitizer.py. The machines
are noisy: read ratios, not absolute times.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

from _timing import bench  # benchmarks/ is on sys.path when run as a script


def child(quick: bool) -> None:
    import torch

    from sanitizer import workloads

    def tiny_inplace():
        x = torch.ones(8, 32, device="openreg")
        return lambda: x.mul_(1.0001)

    def tiny_out_of_place():
        x = torch.ones(8, 32, device="openreg")
        return lambda: x * 1.0001

    cases = [("tiny in-place op (mul_, 8x32)", tiny_inplace, 200, 5),
             ("tiny op with an output (mul, 8x32)", tiny_out_of_place, 200, 5)]
    cases += workloads(torch)
    times = {}
    for name, make, inner, repeats in cases:
        if quick:
            inner, repeats = max(1, inner // 4), 2
        times[name] = bench(make(), torch.openreg.synchronize, inner, repeats)
    print(json.dumps(times))


def run_child(memcheck: bool, quick: bool) -> dict:
    env = dict(os.environ, OPENREG_MEMCHECK="1" if memcheck else "0")
    env.pop("OPENREG_MEMCHECK_ON_ERROR", None)
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([sys.executable, os.path.join(here, "memcheck.py"), "--child"]
                       + (["--quick"] if quick else []), env=env, capture_output=True,
                       text=True, timeout=900)
    if r.returncode != 0:
        raise SystemExit(f"benchmark child (memcheck={memcheck}) failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one short round")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.quick)
        return 0
    rounds = 1 if args.quick else int(os.environ.get("BENCH_ROUNDS", "5"))
    print(f"memcheck cost, {rounds} round(s) of fresh processes; "
          f"ratio = memcheck/normal, median over rounds")
    normal, checked = [], []
    for _ in range(rounds):
        normal.append(run_child(False, args.quick))
        checked.append(run_child(True, args.quick))
    for name in normal[0]:
        off = [r[name] for r in normal]
        on = [r[name] for r in checked]
        ratio = statistics.median(b / a for a, b in zip(off, on))
        print(f"  {name:42s} normal {statistics.median(off) * 1e3:8.3f} ms   "
              f"memcheck {statistics.median(on) * 1e3:8.3f} ms   ratio {ratio:5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
