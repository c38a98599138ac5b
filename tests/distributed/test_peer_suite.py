"""A small, stable subset of PyTorch's own distributed suite
(DistributedTest._DistTestBase) with BACKEND set to the device's c10d backend
(tests.target: occl on openreg), run by tools/occl_peer_suite.py as
test/distributed/test_distributed_spawn.py runs it for gloo.
docs/distributed.md lists the whole suite's results with occl."""

import json
import subprocess
import sys

import pytest

from tests._subprocess import REPO, child_env
from tests.target import DIST_BACKEND, HW

from ._launch import needs_dist_backend

pytestmark = needs_dist_backend

# Tests of the suite that exercise the backend itself (backend naming, groups made
# by new_group, destroying groups, ranks and sizes) and pass.
SUBSET = ["test_Backend_enum_class", "test_get_backend", "test_get_rank",
          "test_get_rank_size_group", "test_get_rank_size_full_group", "test_destroy_group",
          "test_destroy_full_group", "test_all_reduce_complex_unsupported_ops"]


@pytest.mark.distributed
@pytest.mark.slow
class TestPeerSuite:
    hw_classification = HW.ACCELERATOR

    def test_subset_passes(self, tmp_path):
        out = tmp_path / "results.json"
        args = [sys.executable, "tools/occl_peer_suite.py", "--json", str(out)]
        for name in SUBSET:
            args += ["-k", name]
        r = subprocess.run(args, cwd=REPO,
                           env=child_env({"TEMP_DIR": str(tmp_path), "BACKEND": DIST_BACKEND}),
                           capture_output=True, text=True, timeout=600)
        results = {row["test"]: row for row in json.loads(out.read_text())}
        ran = {name: row for name, row in results.items() if name in SUBSET}
        assert set(ran) == set(SUBSET), (sorted(results), r.stdout[-2000:])
        bad = {n: row for n, row in ran.items() if row["outcome"] != "passed"}
        assert not bad, (bad, r.stderr[-4000:])
