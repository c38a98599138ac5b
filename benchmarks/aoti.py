"""AOTInductor on openreg next to AOTInductor on the CPU and torch.compile on
openreg, from one run.

    python benchmarks/aoti.py           # full run
    python benchmarks/aoti.py --quick   # fewer rounds (what the test runs)

For the MLP and the transformer block of benchmarks/compile.py (inference,
no_grad) it prints:
  * run time per call of the AOTInductor package on openreg, on the CPU, and of
    torch.compile on openreg: each a median over ROUNDS rounds of a median of
    timed loops, the three interleaved round by round;
  * the ratios the issue sets targets for: AOTI openreg / AOTI CPU (target at
    most 1.1x) and AOTI openreg / torch.compile openreg;
  * package build time (export excluded, a fresh Inductor cache) and package size.
The machines are noisy: read ratios, not absolute times. Nothing is asserted.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

from _timing import bench  # benchmarks/ is on sys.path when run as a script
from compile import build  # the same models and inputs as benchmarks/compile.py

CASES = ("MLP 256-512-512-10, batch 64", "transformer block d=128 seq=64")


def package(case, dev, out_dir):
    """(loaded package, build seconds, package bytes, model, inputs) on `dev`."""
    model, args = build(torch, case, dev, quick=False)
    model.eval()
    ep = torch.export.export(model, args)
    path = os.path.join(out_dir, f"{dev}-{len(os.listdir(out_dir))}.pt2")
    t0 = time.perf_counter()
    torch._inductor.aoti_compile_and_package(ep, package_path=path)
    seconds = time.perf_counter() - t0
    return torch._inductor.aoti_load_package(path), seconds, os.path.getsize(path), model, args


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    opts = parser.parse_args()
    rounds, inner, repeats = (3, 5, 3) if opts.quick else (7, 20, 5)
    sync = torch.openreg.synchronize
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp, "inductor")
        out_dir = os.path.join(tmp, "packages")
        os.makedirs(out_dir)
        for case in CASES:
            with torch.no_grad():
                aoti_or, build_or, size_or, model, args = package(case, "openreg", out_dir)
                aoti_cpu, build_cpu, size_cpu, _, args_cpu = package(case, "cpu", out_dir)
                compiled = torch.compile(model)
                torch.testing.assert_close(aoti_or(*args).cpu(), model(*args).cpu(),
                                           atol=1e-4, rtol=1e-4)
                compiled(*args)
                times = {"aoti openreg": [], "aoti cpu": [], "compile openreg": []}
                for _ in range(rounds):
                    times["aoti openreg"].append(bench(lambda: aoti_or(*args), sync, inner, repeats))
                    times["aoti cpu"].append(bench(lambda: aoti_cpu(*args_cpu), lambda: None,
                                                   inner, repeats))
                    times["compile openreg"].append(bench(lambda: compiled(*args), sync, inner,
                                                          repeats))
            med = {k: statistics.median(v) for k, v in times.items()}
            print(f"{case}:")
            for k, v in med.items():
                print(f"  {k:16s} {v * 1e6:9.1f} us/call")
            print(f"  openreg/cpu: aoti run time {med['aoti openreg'] / med['aoti cpu']:.2f}x "
                  f"(target <= 1.1x)")
            print(f"  openreg aoti / openreg torch.compile: "
                  f"{med['aoti openreg'] / med['compile openreg']:.2f}x")
            print(f"  package build: openreg {build_or:.1f} s, cpu {build_cpu:.1f} s; "
                  f"size: openreg {size_or / 1e6:.2f} MB, cpu {size_cpu / 1e6:.2f} MB")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
