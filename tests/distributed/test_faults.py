"""Faults: a dead peer, a hung peer and mismatched collectives give
DistBackendError naming the collective, its sequence number and the rank,
within the timeout; survivors exit cleanly, with nothing of their peers
still mapped (no OCCL segment, no peer device buffer opened for zero copy),
and nothing is left in /dev/shm."""


import pytest

from ._launch import run_ranks
from tests._subprocess import shm_entries, shm_left_behind
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only


def assert_nothing_left(out, before):
    assert "MAPPINGS 0 0" in out, out  # survivor: peers' buffers and segments unmapped
    # Every new entry counts, not only ours by name (OCCL must create none:
    # its segments are memfds), except another job's live ones (_subprocess.py).
    left = shm_left_behind(before)
    assert left == set(), left


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


@pytest.mark.distributed
class TestLeftBehindCheck:
    """The /dev/shm check of the multi-process tests (tests/_subprocess.py):
    a leak counts, whether nobody holds the entry or a process of the test's
    own tree does; another job's live entry (the other pytest-xdist worker's)
    and an orphaned multiprocessing semaphore do not."""
    hw_classification = HW.GENERIC

    def test_what_counts_as_left_behind(self):
        import os
        import signal
        import subprocess
        import sys
        import time

        tag = f"shmcheck-{os.getpid()}"
        paths = {k: f"/dev/shm/{tag}-{k}" for k in ("leak", "ours", "other")}
        # A multiprocessing semaphore whose process exited without unlinking
        # it: its tree's resource tracker unlinks it, not counted.
        paths["semaphore"] = f"/dev/shm/sem.mp-{tag}"
        before = shm_entries()
        hold = "import sys, time; f = open(sys.argv[1], 'w'); print(f.name, flush=True); time.sleep(60)"
        # Another job's: a process reparented away from this one (double fork).
        other = subprocess.run(
            [sys.executable, "-c", "import subprocess, sys; p = subprocess.Popen("
             "[sys.executable, '-c', sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE, "
             "stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True); "
             "print(p.pid, flush=True); p.stdout.readline()", hold, paths["other"]],
            capture_output=True, text=True, timeout=60)
        other_pid = int(other.stdout.split()[0])
        ours = subprocess.Popen([sys.executable, "-c", hold, paths["ours"]], stdout=subprocess.PIPE)
        try:
            ours.stdout.readline()
            open(paths["leak"], "w").close()
            open(paths["semaphore"], "w").close()
            deadline = time.monotonic() + 30
            while not os.path.exists(paths["other"]) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert shm_left_behind(before) == {f"{tag}-leak", f"{tag}-ours"}
        finally:
            ours.kill()
            ours.wait(timeout=30)
            os.kill(other_pid, signal.SIGKILL)
            for p in paths.values():
                if os.path.exists(p):
                    os.unlink(p)
        assert shm_left_behind(before) == set()
