"""Faults: a dead peer, a hung peer and mismatched collectives give
DistBackendError naming the collective, its sequence number and the rank,
within the timeout; survivors exit cleanly, with nothing of their peers
still mapped (no OCCL segment, no peer device buffer opened for zero copy),
and nothing is left in /dev/shm."""

import os

import pytest

from ._launch import run_ranks
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only


def shm_entries():
    # Every entry, not only ours by name: OCCL must create none at all (its
    # segments are memfds). Another job on the machine creating one during
    # the test would fail it too; /dev/shm is empty on the CI machines.
    return set(os.listdir("/dev/shm"))


def assert_nothing_left(out, before):
    assert "MAPPINGS 0 0" in out, out  # survivor: peers' buffers and segments unmapped
    assert shm_entries() - before == set(), shm_entries() - before


@pytest.mark.distributed
class TestFaults:
    hw_classification = HW.ACCELERATOR

    def test_killed_peer(self):
        before = shm_entries()
        results = run_ranks("faults.py", 2, timeout=120, args=("kill",), env={"OCCL_TIMEOUT": "60"})
        rc, out, err = results[0]
        assert rc == 0, err[-3000:]
        assert "RAISED" in out and "CLEAN EXIT" in out, out
        seconds = float(out.split("RAISED ")[1].split()[0])
        assert seconds < 10, out  # found by the pid watch, long before the 60 s timeout
        assert "allreduce (seq 2)" in out and "rank 1" in out and "died" in out, out
        assert results[1][0] == -9
        assert_nothing_left(out, before)

    def test_hung_peer_times_out(self):
        before = shm_entries()
        results = run_ranks("faults.py", 2, timeout=120, args=("hang",),
                            env={"OCCL_TIMEOUT": "3", "HANG": "8"})
        rc, out, err = results[0]
        assert rc == 0, err[-3000:]
        seconds = float(out.split("RAISED ")[1].split()[0])
        assert 2.5 < seconds < 8, out
        assert "timed out" in out and "rank 1" in out and "allreduce (seq 2)" in out, out
        assert_nothing_left(out, before)

    def test_mismatched_collectives(self):
        before = shm_entries()
        results = run_ranks("faults.py", 2, timeout=120, args=("mismatch",))
        outs = [out for _, out, _ in results]
        assert all("RAISED" in o and "CLEAN EXIT" in o for o in outs), results
        for o in outs:
            assert_nothing_left(o, before)
        assert any("mismatched collectives" in o and "broadcast" in o for o in outs), outs
