"""Launching rank sets from tests (not a test module).

Every launch picks a free port, bounds its wait with a timeout and kills
whatever is left, so a hung collective fails its test instead of the session,
and no process outlives it.
"""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests._subprocess import REPO, child_env
from tests.target import DEVICE, DIST_BACKEND

WORKERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers")

#: For device-generic tests that use the device's c10d backend
#: (tests.target.DIST_BACKEND): skipped when the device has none.
needs_dist_backend = pytest.mark.skipif(
    DIST_BACKEND is None,
    reason=f"no c10d backend for the device {DEVICE!r} (pass --dist-backend)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_all(procs):
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for p in procs:
        p.wait()


def run_ranks(script: str, nranks: int, *, timeout: float, env: dict = None, args=(),
              per_rank_env: dict = None):
    """Run ``workers/<script>`` once per rank (env:// variables set), in its
    own process group; returns [(returncode, stdout, stderr)] by rank.
    ``per_rank_env`` maps a rank to extra variables for that rank alone."""
    port = free_port()
    procs = []
    try:
        for r in range(nranks):
            e = child_env({"RANK": str(r), "WORLD_SIZE": str(nranks), "LOCAL_RANK": str(r),
                           "LOCAL_WORLD_SIZE": str(nranks), "MASTER_ADDR": "127.0.0.1",
                           "MASTER_PORT": str(port), **(env or {}),
                           **((per_rank_env or {}).get(r, {}))})
            procs.append(subprocess.Popen(
                [sys.executable, os.path.join(WORKERS, script), *map(str, args)], env=e,
                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                start_new_session=True))
        deadline = time.monotonic() + timeout
        outs = []
        for p in procs:
            left = max(0.1, deadline - time.monotonic())
            try:
                out, err = p.communicate(timeout=left)
            except subprocess.TimeoutExpired:
                _kill_all(procs)
                details = []
                for q in procs:
                    o, e2 = q.communicate()
                    details.append(f"--- stdout\n{o}\n--- stderr\n{e2[-3000:]}")
                raise AssertionError(f"{script}: ranks did not finish within {timeout} s\n"
                                     + "\n".join(details))
            outs.append((p.returncode, out, err))
        return outs
    finally:
        _kill_all(procs)


def check_ok(results):
    for r, (rc, out, err) in enumerate(results):
        assert rc == 0, f"rank {r} exited with {rc}\n--- stdout\n{out}\n--- stderr\n{err[-4000:]}"


def torchrun(script: str, nproc: int, *, timeout: float, args=(), env: dict = None):
    port = free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
           "--master-addr=127.0.0.1", f"--master-port={port}", script, *map(str, args)]
    p = subprocess.Popen(cmd, env=child_env(env), cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"torchrun {script} timed out\n{out}\n{err[-4000:]}")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return p.returncode, out, err
