"""FSDP2 (fully_shard) on the device under test with its c10d backend
(tests.target: openreg with occl): a small transformer trains for 10 steps on
2 ranks with the same loss as a single-process run."""

import pytest

from ._launch import check_ok, needs_dist_backend, run_ranks
from tests.target import HW

pytestmark = needs_dist_backend


@pytest.mark.distributed
class TestFSDP2:
    hw_classification = HW.ACCELERATOR

    def test_fully_shard_matches_single_process(self):
        results = run_ranks("fsdp.py", 2, timeout=400)
        check_ok(results)
        assert all(out.strip().endswith("OK") for _, out, _ in results), results
