"""liboccl on its own, through the torch-free test module (no torch imported
by the ranks): every collective against numpy, asynchronous launches,
mismatches, a dead peer, argument checks."""

import pytest

from ._launch import check_ok, run_ranks
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only


@pytest.mark.distributed
class TestLibOccl:
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("nranks", [2, 3])
    def test_collectives_match_numpy(self, tmp_path, nranks):
        results = run_ranks("occl_lib.py", nranks, timeout=180, args=(tmp_path, "ops"))
        check_ok(results)
        assert all(out.startswith("OK") for _, out, _ in results)

    @pytest.mark.parametrize("nranks", [2, 3])
    @pytest.mark.parametrize("zero_copy", ["1", "0"])
    def test_zero_copy_and_copy_in_paths(self, tmp_path, nranks, zero_copy):
        results = run_ranks("occl_lib.py", nranks, timeout=180, args=(tmp_path, "zerocopy"),
                            env={"OCCL_ZERO_COPY": zero_copy})
        check_ok(results)
        want = "shm+ipc" if zero_copy == "1" else "shm"
        assert all(out.split() == ["OK", want] for _, out, _ in results), results

    def test_zero_copy_needs_every_rank(self, tmp_path):
        # One rank without exportable memory (non-strict) turns it off for all.
        results = run_ranks("occl_lib.py", 2, timeout=120, args=(tmp_path, "ops"),
                            env={"OCCL_EXPECT_TRANSPORT": "shm"},
                            per_rank_env={1: {"OPENREG_STRICT_MEMORY": "0"}})
        check_ok(results)

    @pytest.mark.parametrize("nranks", [2, 4])
    def test_split(self, tmp_path, nranks):
        check_ok(run_ranks("occl_lib.py", nranks, timeout=120, args=(tmp_path, "split")))

    @pytest.mark.parametrize("nranks", [2, 3])
    def test_forced_tcp(self, tmp_path, nranks):
        # OCCL_TRANSPORT=tcp: every pair over TCP (loopback), same results.
        results = run_ranks("occl_lib.py", nranks, timeout=180, args=(tmp_path, "ops"),
                            env={"OCCL_TRANSPORT": "tcp", "OCCL_EXPECT_TRANSPORT": "tcp"})
        check_ok(results)
        assert all(out.startswith("OK") for _, out, _ in results)

    @pytest.mark.parametrize("case", ["ops", "split"])
    def test_transport_is_picked_per_pair(self, tmp_path, case):
        # Rank 2 forces TCP: its pairs use TCP, the pair (0, 1) shared memory.
        results = run_ranks("occl_lib.py", 3, timeout=180, args=(tmp_path, case),
                            per_rank_env={0: {"OCCL_EXPECT_TRANSPORT": "shm+tcp"},
                                          1: {"OCCL_EXPECT_TRANSPORT": "shm+tcp"},
                                          2: {"OCCL_TRANSPORT": "tcp", "OCCL_EXPECT_TRANSPORT": "tcp"}})
        check_ok(results)

    def test_tcp_refuses_a_peer_with_the_wrong_identity(self, tmp_path):
        results = run_ranks("occl_lib.py", 2, timeout=120, args=(tmp_path, "impostor"),
                            env={"OCCL_TRANSPORT": "tcp"})
        check_ok(results)
        assert all(out.split() == ["OK", "tcp"] for _, out, _ in results), results
        assert results[0][2].count("refused a TCP connection with the wrong identity") == 3, \
            results[0][2]

    def test_dead_peer_over_tcp_fails_fast(self, tmp_path):
        results = run_ranks("occl_lib.py", 2, timeout=60, args=(tmp_path, "dead"),
                            env={"OCCL_TEST_TIMEOUT_MS": "20000", "OCCL_TRANSPORT": "tcp"})
        rc, out, err = results[0]
        assert rc == 0, err
        name, seconds = out.split()[1:3]
        assert name == "occlRemoteError" and float(seconds) < 5, out
        assert "rank 1's TCP connection" in out and "seq" in out, out

    def test_stream_capture_records_and_replays(self, tmp_path):
        # (Also under make check-tsan: the replay runs liboccl on the runtime's threads.)
        results = run_ranks("occl_lib.py", 2, timeout=120, args=(tmp_path, "capture"))
        check_ok(results)
        for _, out, err in results:
            assert "REPLAY FAILED" in out and "OK" in out, out
            assert "which was destroyed after the capture" in err, err[-2000:]

    def test_launch_is_asynchronous(self, tmp_path):
        check_ok(run_ranks("occl_lib.py", 2, timeout=60, args=(tmp_path, "async")))

    def test_small_allreduce_behind_queued_work_keeps_stream_order(self, tmp_path):
        check_ok(run_ranks("occl_lib.py", 2, timeout=60, args=(tmp_path, "order")))

    @pytest.mark.parametrize("nranks", [2, 3])
    def test_small_collectives_inline_and_deferred_stay_in_step(self, tmp_path, nranks):
        # OCCL_DEBUG marks where each operation finished: on the launching
        # thread (the peers were there) or on a worker after the attempt gave
        # up (a rank was late); both must happen, and every result is checked.
        results = run_ranks("occl_lib.py", nranks, timeout=120, args=(tmp_path, "lockstep"),
                            env={"OCCL_DEBUG": "1"})
        check_ok(results)
        err = "".join(e for _, _, e in results)
        assert "(inline)" in err and "(deferred)" in err, err[-3000:]

    def test_mismatched_sizes_fail_on_every_rank(self, tmp_path):
        results = run_ranks("occl_lib.py", 2, timeout=60, args=(tmp_path, "mismatch"))
        check_ok(results)
        for _, out, _ in results:
            assert out.startswith("ERROR occl"), out
        assert any("mismatched collectives" in out for _, out, _ in results)

    def test_dead_peer_fails_fast_and_names_it(self, tmp_path):
        results = run_ranks("occl_lib.py", 2, timeout=60, args=(tmp_path, "dead"),
                            env={"OCCL_TEST_TIMEOUT_MS": "20000"})
        rc, out, err = results[0]
        assert rc == 0, err
        name, seconds = out.split()[1:3]
        assert name == "occlRemoteError" and float(seconds) < 5, out
        assert "rank 1" in out and "died" in out and "seq" in out, out

    def test_tcp_staging_is_sized_by_the_message(self, tmp_path):
        results = run_ranks("occl_lib.py", 2, timeout=120, args=(tmp_path, "bigchunk"),
                            env={"OCCL_TRANSPORT": "tcp", "OCCL_TCP_CHUNK": str(1 << 30)})
        check_ok(results)
        for _, out, _ in results:
            assert out.split()[0] == "OK" and int(out.split()[1]) < 512, out  # peak RSS, MiB

    def test_invalid_arguments_are_refused(self, tmp_path):
        check_ok(run_ranks("occl_lib.py", 2, timeout=60, args=(tmp_path, "invalid")))
