"""PyTorch's own distributed test suite (torch/testing/_internal/distributed/
distributed_test.py, DistributedTest._DistTestBase) with BACKEND=occl, driven
the way test/distributed/test_distributed_spawn.py drives it: every test
spawns WORLD_SIZE ranks that call init_process_group(backend="occl").

    python tools/occl_peer_suite.py                    # everything (long: ~300 tests)
    python tools/occl_peer_suite.py -k test_all_reduce_sum -k test_barrier
    python tools/occl_peer_suite.py --json out.json    # per-test outcome and reason

Prints one line per test (outcome, name, reason) and the totals. The suite's
tests were written for gloo (CPU tensors), nccl (CUDA tensors) and ucc; with
BACKEND=occl the ones that need CUDA are skipped by the suite itself, and
the CPU-tensor ones meet a backend that serves only openreg tensors.
docs/distributed.md lists the results.
"""

import os
import sys
import tempfile

# distributed_test.py reads these at import time.
os.environ.setdefault("BACKEND", "occl")
os.environ.setdefault("WORLD_SIZE", "2")
if "TEMP_DIR" not in os.environ:
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="occl-peer-suite-")

import torch  # noqa: E402,F401  (loads torch_openreg, which registers occl)
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


def _reason(err_text: str) -> str:
    lines = [line.strip() for line in err_text.strip().splitlines() if line.strip()]
    # The most telling line: a child's exception message, else the last line.
    for line in reversed(lines):
        if "Error" in line or "Exception" in line or "error" in line:
            return line[:300]
    return (lines[-1] if lines else "")[:300]


def main(argv):
    import argparse
    import json
    import time
    import unittest

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", action="append", default=[],
                    help="run the tests whose name contains this (repeatable)")
    ap.add_argument("--json", help="write the per-test results here")
    args = ap.parse_args(argv)

    names = unittest.TestLoader().getTestCaseNames(TestDistBackendWithSpawn)
    if args.k:
        names = [n for n in names if any(k in n for k in args.k)]
    results = []

    class Result(unittest.TestResult):
        def addSuccess(self, test):
            results.append(("passed", test._testMethodName, ""))

        def addFailure(self, test, err):
            results.append(("failed", test._testMethodName, _reason(self._exc_info_to_string(err, test))))

        def addError(self, test, err):
            results.append(("error", test._testMethodName, _reason(self._exc_info_to_string(err, test))))

        def addSkip(self, test, reason):
            results.append(("skipped", test._testMethodName, reason.splitlines()[0][:200] if reason else ""))

        def addExpectedFailure(self, test, err):
            results.append(("xfailed", test._testMethodName, ""))

        def addUnexpectedSuccess(self, test):
            results.append(("xpassed", test._testMethodName, ""))

    t0 = time.monotonic()
    for name in names:
        before = len(results)
        TestDistBackendWithSpawn(name).run(Result())
        outcome, _, reason = results[-1] if len(results) > before else ("error", name, "no result")
        print(f"{outcome:8} {name}  {reason}", flush=True)
    totals = {}
    for outcome, _, _ in results:
        totals[outcome] = totals.get(outcome, 0) + 1
    print(f"\n{len(results)} tests in {time.monotonic() - t0:.0f} s: "
          + ", ".join(f"{v} {k}" for k, v in sorted(totals.items())), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"outcome": o, "test": n, "reason": r} for o, n, r in results], f, indent=1)
    return 0 if not any(o in ("failed", "error") for o, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
