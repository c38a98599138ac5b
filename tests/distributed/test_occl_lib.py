"""liboccl on its own, through the torch-free test module (no torch imported
by the ranks): every collective against numpy, asynchronous launches,
mismatches, a dead peer, argument checks."""

import pytest

from ._launch import check_ok, run_ranks


@pytest.mark.distributed
class TestLibOccl:
    @pytest.mark.parametrize("nranks", [2, 3])
    def test_collectives_match_numpy(self, tmp_path, nranks):
        results = run_ranks("occl_lib.py", nranks, timeout=180, args=(tmp_path, "ops"))
        check_ok(results)
        assert all(out.startswith("OK") for _, out, _ in results)

    def test_launch_is_asynchronous(self, tmp_path):
        check_ok(run_ranks("occl_lib.py", 2, timeout=60, args=(tmp_path, "async")))

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

    def test_invalid_arguments_are_refused(self, tmp_path):
        check_ok(run_ranks("occl_lib.py", 2, timeout=60, args=(tmp_path, "invalid")))
