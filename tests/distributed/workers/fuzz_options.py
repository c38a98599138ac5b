"""The c10d backend's options with wrong types and out-of-range values, in a
single-process world (tests/distributed/test_fuzz_options.py runs this).

Usage: fuzz_options.py ctor EXAMPLES | init | env CASES_JSON

Prints one JSON object per line: {"case": ..., "outcome": "ok" or
"<ExceptionType>: <message>"} and, for ``ctor``, a final {"examples": n}.
A crash or a hang leaves the case being run as the last line of stderr
("RUN <case>"), for the test to name.
"""

import datetime
import json
import math
import os
import sys

import torch
import torch.distributed as dist
from torch_openreg._occl import ProcessGroupOCCL

# Used only by openreg-only tests (tests/target.py).
openreg_only = True

SECOND = datetime.timedelta(seconds=1)
INT_MAX = 2 ** 31 - 1


def emit(case, outcome, **extra):
    print(json.dumps({"case": case, "outcome": outcome, **extra}), flush=True)


def outcome_of(fn):
    try:
        fn()
        return "ok"
    except Exception as e:  # noqa: BLE001  (the test judges type and message)
        return f"{type(e).__name__}: {e}"


def allreduce_one(pg):
    """One all-reduce on a world of one: the communicator is created here."""
    t = torch.arange(4.0, device="openreg")
    pg.allreduce([t]).wait()
    assert t.cpu().tolist() == [0.0, 1.0, 2.0, 3.0], t


def set_timeout_then_allreduce(timeout):
    pg = ProcessGroupOCCL(dist.HashStore(), 0, 1, SECOND, "st")
    pg.set_timeout(timeout)
    allreduce_one(pg)


def open_fds():
    return len(os.listdir("/proc/self/fd"))


# ------------------------------------------------------------------ ctor
def ctor_cases():
    store = dist.HashStore()
    return {
        "valid": lambda: allreduce_one(ProcessGroupOCCL(store, 0, 1, SECOND, "valid")),
        "store=None": lambda: allreduce_one(ProcessGroupOCCL(None, 0, 1, SECOND, "g")),
        "store='x'": lambda: ProcessGroupOCCL("x", 0, 1, SECOND, "g"),
        "rank=1,size=1": lambda: ProcessGroupOCCL(store, 1, 1, SECOND, "g"),
        "rank=-1": lambda: ProcessGroupOCCL(store, -1, 1, SECOND, "g"),
        "rank=2**40": lambda: ProcessGroupOCCL(store, 2 ** 40, 1, SECOND, "g"),
        "size=0": lambda: ProcessGroupOCCL(store, 0, 0, SECOND, "g"),
        "size=-3": lambda: ProcessGroupOCCL(store, 0, -3, SECOND, "g"),
        "size=2**31": lambda: ProcessGroupOCCL(store, 0, 2 ** 31, SECOND, "g"),
        "rank='0'": lambda: ProcessGroupOCCL(store, "0", 1, SECOND, "g"),
        "rank=2**64": lambda: ProcessGroupOCCL(store, 2 ** 64, 1, SECOND, "g"),
        "timeout=-1s": lambda: ProcessGroupOCCL(store, 0, 1, -SECOND, "g"),
        "timeout=0": lambda: ProcessGroupOCCL(store, 0, 1, 0 * SECOND, "g"),
        "timeout=timedelta.max": lambda: ProcessGroupOCCL(store, 0, 1, datetime.timedelta.max, "g"),
        "timeout=5": lambda: ProcessGroupOCCL(store, 0, 1, 5, "g"),
        # Ten thousand years: in range for int64 microseconds, past steady_clock's
        # nanoseconds once added to now (liboccl's deadlines overflowed).
        "timeout=10000y": lambda: allreduce_one(
            ProcessGroupOCCL(store, 0, 1, datetime.timedelta(days=3652500), "long")),
        "group_name=None": lambda: ProcessGroupOCCL(store, 0, 1, SECOND, None),
        # Backend.set_timeout (c10d's _set_pg_timeout) takes the same checks.
        "set_timeout(-1s)": lambda: ProcessGroupOCCL(store, 0, 1, SECOND, "st").set_timeout(-SECOND),
        "set_timeout(timedelta.max)": lambda: ProcessGroupOCCL(store, 0, 1, SECOND, "st").set_timeout(
            datetime.timedelta.max),
        "set_timeout(10000y)": lambda: set_timeout_then_allreduce(datetime.timedelta(days=3652500)),
        "group_name=1MB": lambda: allreduce_one(ProcessGroupOCCL(store, 0, 1, SECOND, "n" * 2 ** 20)),
    }


def wait_cases():
    """Work.wait(timeout) on an all-reduce still queued behind 300 ms of
    device work on the caller's stream (so the wait really waits)."""
    pg = ProcessGroupOCCL(dist.HashStore(), 0, 1, 60 * SECOND, "wait")
    allreduce_one(pg)

    def wait(timeout):
        def run():
            t = torch.ones(4, device="openreg")
            torch.openreg._sleep(300_000)
            work = pg.allreduce([t])
            try:
                work.wait(timeout)
            finally:
                torch.openreg.synchronize()
            assert t.cpu().tolist() == [1.0] * 4
        return run

    return {
        "wait(10000y)": wait(datetime.timedelta(days=3652500)),
        "wait(timedelta.max)": wait(datetime.timedelta.max),
        "wait(-1s)": wait(-SECOND),
        "wait(1ms)": wait(datetime.timedelta(milliseconds=1)),
        "wait(60s)": wait(60 * SECOND),
    }


def fuzz_ctor(examples):
    """Hypothesis over the constructor's arguments: construction succeeds
    exactly when every argument is valid, and then a world of one works."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    store = dist.HashStore()
    ints = st.one_of(st.integers(-3, 3), st.sampled_from([INT_MAX, INT_MAX + 1, 2 ** 63 - 1, -2 ** 63]))
    timeouts = st.one_of(
        st.integers(-10 ** 6, 10 ** 6).map(lambda ms: datetime.timedelta(milliseconds=ms)),
        st.sampled_from([datetime.timedelta.max, datetime.timedelta.min, datetime.timedelta(0),
                         datetime.timedelta(days=3652500)]))
    wrong = st.sampled_from([None, "1", 1.5, math.nan, [], object()])
    count = [0]

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(store=st.one_of(st.just(store), wrong), rank=st.one_of(ints, wrong),
           size=st.one_of(ints, wrong), timeout=st.one_of(timeouts, wrong),
           name=st.one_of(st.text(max_size=20), wrong))
    def fuzz(store, rank, size, timeout, name):
        count[0] += 1
        case = f"ProcessGroupOCCL({store!r}, {rank!r}, {size!r}, {timeout!r}, {name!r})"
        print("RUN " + case, file=sys.stderr, flush=True)
        ints_ok = all(isinstance(v, int) and -2 ** 63 <= v < 2 ** 63 for v in (rank, size))
        valid = (isinstance(store, dist.Store) and ints_ok and 1 <= size <= INT_MAX
                 and 0 <= rank < size and isinstance(timeout, datetime.timedelta)
                 and datetime.timedelta(milliseconds=1) <= timeout < datetime.timedelta(days=10 ** 8)
                 and isinstance(name, str))
        try:
            pg = ProcessGroupOCCL(store, rank, size, timeout, name)
        except (TypeError, ValueError, RuntimeError) as e:
            assert not valid, f"{case} is valid but raised {type(e).__name__}: {e}"
            assert str(e).strip(), f"{case}: {type(e).__name__} without a message"
            return
        assert valid, f"{case} was accepted"
        if size == 1:
            allreduce_one(pg)

    fuzz()
    return count[0]


# ------------------------------------------------------------------ init
def init_cases():
    def init(**kw):
        def run():
            args = dict(backend="occl", store=dist.HashStore(), rank=0, world_size=1)
            args.update(kw)
            dist.init_process_group(**args)
            try:
                t = torch.arange(4.0, device="openreg")
                dist.all_reduce(t)
                assert t.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
            finally:
                dist.destroy_process_group()
        return run

    return {
        "valid": init(),
        "rank=1,world_size=1": init(rank=1),
        "rank=-1": init(rank=-1),
        "world_size=0": init(world_size=0),
        "world_size=-2": init(world_size=-2),
        "timeout=-1s": init(timeout=-SECOND),
        "timeout=0": init(timeout=0 * SECOND),
        "timeout=timedelta.max": init(timeout=datetime.timedelta.max),
        "timeout=10000y": init(timeout=datetime.timedelta(days=3652500)),
        "device_id=openreg:5": init(device_id=torch.device("openreg", 5)),
        "backend=occl:cpu": init(backend="cpu:occl"),
        "valid again": init(),  # nothing above left the default group half made
    }


# ------------------------------------------------------------------ env
def env_cases(cases):
    """cases: [[name, value], ...], invalid values before valid ones (a valid
    chunk size or OCCL_DEBUG is read once per process, then cached)."""
    fds = open_fds()
    for i, (name, value) in enumerate(cases):
        case = f"{name}={value!r}"
        print("RUN " + case, file=sys.stderr, flush=True)
        os.environ[name] = value
        try:
            pg = ProcessGroupOCCL(dist.HashStore(), 0, 1, 10 * SECOND, f"env{i}")
            out = outcome_of(lambda: allreduce_one(pg))
            del pg
        finally:
            del os.environ[name]
        emit(case, out, fds=open_fds() - fds)


def main():
    mode = sys.argv[1]
    torch.openreg.init()
    if mode in ("ctor", "init"):
        cases = ctor_cases() if mode == "ctor" else init_cases()
        if mode == "ctor":
            cases.update(wait_cases())
        for case, fn in cases.items():
            print("RUN " + case, file=sys.stderr, flush=True)
            emit(case, outcome_of(fn))
        if mode == "ctor":
            print(json.dumps({"examples": fuzz_ctor(int(sys.argv[2]))}), flush=True)
    elif mode == "env":
        env_cases(json.loads(sys.argv[2]))
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
