"""The device's c10d backend (``occl`` on openreg): every operation, reduce op
and a spread of dtypes on 2 and 3 ranks against a CPU oracle
(workers/collectives.py), plus (openreg only) OCCL's transports and its
registration."""

import pytest

from tests._subprocess import run_python
from tests.target import HW, IS_OPENREG

from ._launch import check_ok, needs_dist_backend, run_ranks

pytestmark = needs_dist_backend


@pytest.mark.distributed
class TestCollectives:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("nranks", [2, 3])
    def test_every_operation_matches_cpu(self, nranks):
        env = {"EXAMPLES": "5" if nranks == 2 else "3"}
        if IS_OPENREG:  # and the ranks reached each other through OCCL's shared memory
            env["OCCL_EXPECT_TRANSPORT"] = "shm+ipc"
        results = run_ranks("collectives.py", nranks, timeout=400, env=env)
        check_ok(results)
        for _, out, _ in results:
            assert out.rstrip().endswith("OK"), out

    # The same checks over each of OCCL's transports: shared memory with
    # copy-in (zero copy off) and TCP forced on one host; the test above runs
    # the default (zero copy for large messages).
    @pytest.mark.openreg_only
    @pytest.mark.slow
    @pytest.mark.parametrize("env", [{"OCCL_ZERO_COPY": "0", "OCCL_EXPECT_TRANSPORT": "shm"},
                                     {"OCCL_TRANSPORT": "tcp", "OCCL_EXPECT_TRANSPORT": "tcp"}],
                             ids=["copy-in", "tcp"])
    def test_every_operation_matches_cpu_over_each_transport(self, env):
        results = run_ranks("collectives.py", 2, timeout=400, env={"EXAMPLES": "3", **env})
        check_ok(results)
        for _, out, _ in results:
            assert out.rstrip().endswith("OK"), out

    # Over TCP, OCCL's large all-reduce is a pipeline of its own (direct
    # sends from the input, staged receives, reductions overlapping the
    # transfers): small chunks, so that the staging buffers wrap and the last
    # chunk is smaller than the number of ranks.
    @pytest.mark.openreg_only
    @pytest.mark.parametrize("nranks", [2, 3])
    def test_tcp_pipelined_allreduce(self, nranks):
        results = run_ranks("collectives.py", nranks, timeout=400,
                            env={"ONLY": "test_large_allreduce_every_dtype",
                                 "OCCL_TRANSPORT": "tcp", "OCCL_TCP_CHUNK": "4096",
                                 "OCCL_EXPECT_TRANSPORT": "tcp"})
        check_ok(results)
        for _, out, _ in results:
            assert out.rstrip().endswith("OK"), out

    # torch_openreg registers occl, for openreg tensors only.
    @pytest.mark.openreg_only
    def test_registered_on_import(self):
        r = run_python(
            "import torch, torch.distributed as dist\n"
            "from torch_openreg.distributed import ProcessGroupOCCL\n"
            "assert 'occl' in dist.Backend.backend_list\n"
            "assert dist.Backend.default_device_backend_map['openreg'] == 'occl'\n"
            "assert dist.Backend.backend_capability['occl'] == ['openreg']\n"
            "print('ok')\n", timeout=120)
        assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
