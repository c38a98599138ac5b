"""Sub-groups on the device's c10d backend (tests.target; on openreg occl,
with occlCommSplit underneath and no store round trips): dist.split_group and
dist.new_group, on 4 ranks (workers/groups.py)."""

import pytest

from ._launch import check_ok, needs_dist_backend, run_ranks
from tests.target import HW

pytestmark = needs_dist_backend


@pytest.mark.distributed
class TestGroups:
    hw_classification = HW.ACCELERATOR

    def test_split_group_and_new_group(self):
        results = run_ranks("groups.py", 4, timeout=300)
        check_ok(results)
        assert all(out.strip().endswith("OK") for _, out, _ in results), results
