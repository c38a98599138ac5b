"""Collectives of the device's c10d backend inside a graph capture
(docs/graphs.md, "Collectives in a graph"): on 2 ranks, every collective and a
DDP training step captured with torch.accelerator.Graph replay bit for bit as
the same calls made eagerly; a peer that does not replay and a destroyed
process group give a clear error and nothing hangs (workers/graph_capture.py)."""

import pytest

from tests.target import HW

from ._launch import check_ok, needs_dist_backend, run_ranks

pytestmark = needs_dist_backend


@pytest.mark.distributed
class TestCollectivesInGraphs:
    hw_classification = HW.ACCELERATOR

    def test_collectives_replay_as_eager(self):
        results = run_ranks("graph_capture.py", 2, timeout=240, args=("collectives",))
        check_ok(results)
        for rank, (_, out, _) in enumerate(results):
            assert f"rank {rank}: collectives replayed as eager" in out

    def test_ddp_step_replays_bit_equal(self):
        results = run_ranks("graph_capture.py", 2, timeout=300, args=("ddp",))
        check_ok(results)
        for rank, (_, out, _) in enumerate(results):
            assert f"rank {rank}: DDP step replayed as eager" in out

    def test_fsdp2_step_replays_bit_equal(self):
        results = run_ranks("graph_capture.py", 2, timeout=300, args=("fsdp2",))
        check_ok(results)
        for rank, (_, out, _) in enumerate(results):
            assert f"rank {rank}: FSDP2 step replayed as eager" in out


@pytest.mark.distributed
@pytest.mark.openreg_only
class TestCollectivesInGraphsErrors:
    hw_classification = HW.ACCELERATOR

    def test_peer_that_does_not_replay(self):
        # Rank 1 captures and never replays: rank 0's replay fails within the
        # group's timeout, naming the collective and the timeout; its next
        # collective says the communicator is broken. Nothing hangs.
        results = run_ranks("graph_capture.py", 2, timeout=240, args=("peer_does_not_replay",),
                            env={"CAPTURE_PG_TIMEOUT": "5"})
        check_ok(results)
        out, err = results[0][1], results[0][2]
        assert "rank 0: replay failed:" in out, out
        # The reason is in the error the replay's synchronize raises, not only on stderr.
        failed = next(line for line in out.splitlines() if "rank 0: replay failed:" in line)
        assert "occl:allreduce (graph replay) failed" in failed and "timed out" in failed, failed
        assert "occl:allreduce (graph replay) failed" in err and "timed out" in err, err[-3000:]
        assert "rank 0: next collective:" in out, out

    def test_another_thread_during_a_capture(self):
        results = run_ranks("graph_capture.py", 2, timeout=240, args=("other_thread",))
        check_ok(results)
        for rank, (_, out, _) in enumerate(results):
            assert f"rank {rank}: other thread refused:" in out, out
            assert f"rank {rank}: capture replayed" in out, out

    def test_replay_after_the_group_is_destroyed(self):
        results = run_ranks("graph_capture.py", 2, timeout=240, args=("destroyed_group",))
        check_ok(results)
        for rank, (_, out, err) in enumerate(results):
            failed = next(line for line in out.splitlines() if f"rank {rank}: replay failed:" in line)
            assert "which was destroyed after the capture" in failed, failed
            assert "which was destroyed after the capture" in err, err[-3000:]
