"""Sub-groups on occl: dist.split_group (occlCommSplit underneath, no store
round trips) and dist.new_group, on 4 ranks (workers/groups.py)."""

import pytest

from ._launch import check_ok, run_ranks


@pytest.mark.distributed
class TestGroups:
    def test_split_group_and_new_group(self):
        results = run_ranks("groups.py", 4, timeout=300)
        check_ok(results)
        assert all(out.strip().endswith("OK") for _, out, _ in results), results
