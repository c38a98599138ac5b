"""OCCL collectives on the profiler's device timeline, with the c10d metadata
NCCL traces carry (the runtime's launch annotations)."""

import json
import os

import pytest

from tests.distributed._launch import check_ok, run_ranks
from tests.target import HW

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers", "profile_allreduce.py")


@pytest.mark.profiler
@pytest.mark.openreg_only
class TestCollectiveActivities:
    hw_classification = HW.ACCELERATOR

    def test_allreduce_kernel_carries_c10d_metadata(self):
        results = run_ranks(WORKER, 2, timeout=120)  # an absolute path: our own worker
        check_ok(results)
        for rank, (_, out, _) in enumerate(results):
            kernels = json.loads(out.strip().splitlines()[-1])
            (k,) = [k for k in kernels if k["name"] == "occl:allreduce"]
            assert k["pid"] == rank and k["dur"] > 0
            args = k["args"]
            assert args["Collective name"] == "allreduce"
            assert args["Group size"] == 2
            assert args["In msg nelems"] == 1024
            assert args["dtype"] == "float32"
            assert args["Seq"] >= 2
