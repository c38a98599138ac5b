"""The c10d backend's options with wrong types and out-of-range values:
``ProcessGroupOCCL(store, rank, size, timeout, group_name)``,
``dist.init_process_group("occl", ...)``, ``Work.wait(timeout)`` and the
OCCL environment variables. Each must give a Python exception that names the
option, never a crash, a hang or a silent default.

Everything runs in a world of one process (a HashStore), in a child
(workers/fuzz_options.py) with a bounded wait, so a segfault fails the test
with the case that caused it. The constructor is also fuzzed with hypothesis
(derandomized, ``CTOR_EXAMPLES`` examples): construction must succeed
exactly when every argument is valid, and a valid world of one must then
all-reduce correctly. The environment variables get hand-picked garbage and
values from a fixed-seed generator, checked against what the variable
accepts (docs/distributed.md).
"""

import json
import os
import random
import re
import subprocess
import sys

import pytest

from tests._subprocess import REPO, child_env
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers", "fuzz_options.py")
CTOR_EXAMPLES = 150
GiB = 1 << 30


def run_worker(*args, timeout=120):
    try:
        p = subprocess.run([sys.executable, WORKER, *map(str, args)], env=child_env(),
                           cwd=REPO, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        raise AssertionError(f"{args[0]}: hung in {last_case(err)}") from None
    assert p.returncode == 0 and p.stdout.rstrip().endswith("DONE"), (
        f"{args[0]}: exited with {p.returncode} in {last_case(p.stderr)}\n"
        f"--- stdout\n{p.stdout[-3000:]}\n--- stderr\n{p.stderr[-4000:]}")
    lines = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    return {d["case"]: d for d in lines if "case" in d}, lines


def last_case(stderr):
    runs = [ln for ln in stderr.splitlines() if ln.startswith("RUN ")]
    return runs[-1][4:] if runs else "(before the first case)"


def check(results, expected):
    assert set(results) == set(expected), set(results) ^ set(expected)
    for case, want in expected.items():
        got = results[case]["outcome"]
        if want == "ok":
            assert got == "ok", f"{case}: {got}"
        else:
            assert re.match(want, got, re.S), f"{case}: expected {want!r}, got {got!r}"


PYBIND_TYPE = r"TypeError: __init__\(\): incompatible constructor arguments.*Invoked with: "


@pytest.mark.distributed
class TestProcessGroupOptions:
    hw_classification = HW.ACCELERATOR

    def test_constructor_and_wait(self):
        results, lines = run_worker("ctor", CTOR_EXAMPLES)
        check(results, {
            "valid": "ok",
            # Crashed (a null store dereferenced at the first collective).
            "store=None": r"TypeError: ProcessGroupOCCL: store must be a torch.distributed.Store, got None$",
            "store='x'": PYBIND_TYPE + r"'x', 0, 1",
            # Accepted, then failed only at the first collective, inside liboccl.
            "rank=1,size=1": r"ValueError: ProcessGroupOCCL: rank must be in \[0, size\) = \[0, 1\), got 1$",
            "rank=-1": r"ValueError: ProcessGroupOCCL: rank must be in \[0, size\) = \[0, 1\), got -1$",
            "rank=2**40": r"ValueError: .* got 1099511627776$",
            "size=0": r"ValueError: ProcessGroupOCCL: size must be in \[1, 2147483647\], got 0$",
            "size=-3": r"ValueError: ProcessGroupOCCL: size must be in \[1, 2147483647\], got -3$",
            "size=2**31": r"ValueError: ProcessGroupOCCL: size must be in \[1, 2147483647\], got 2147483648$",
            "rank='0'": PYBIND_TYPE + r".*'0', 1",
            "rank=2**64": PYBIND_TYPE + r".*18446744073709551616, 1",
            # Zero and negative timeouts became liboccl's 30-minute default.
            "timeout=-1s": r"ValueError: ProcessGroupOCCL: timeout must be positive, got -1000 ms$",
            "timeout=0": r"ValueError: ProcessGroupOCCL: timeout must be positive, got 0 ms$",
            "timeout=timedelta.max": (r"ValueError: ProcessGroupOCCL: timeout must be positive, got "
                                      r"-\d+ ms \(a timedelta too long to count in int64 "
                                      r"microseconds wraps around\)$"),
            "timeout=5": PYBIND_TYPE + r".*, 0, 1, 5, 'g'",
            "timeout=10000y": "ok",
            "group_name=None": PYBIND_TYPE + r".*seconds=1\), None",
            "group_name=1MB": "ok",
            "set_timeout(-1s)": r"ValueError: ProcessGroupOCCL: timeout must be positive, got -1000 ms$",
            "set_timeout(timedelta.max)": r"ValueError: ProcessGroupOCCL: timeout must be positive, got -\d+ ms \(a",
            "set_timeout(10000y)": "ok",
            # Work.wait's deadline overflowed: a false timeout at once.
            "wait(10000y)": "ok",
            "wait(timedelta.max)": r"ValueError: Work.wait: timeout must be positive, got -\d+ ms \(a timedelta",
            "wait(-1s)": r"ValueError: Work.wait: timeout must be positive, got -1000 ms$",
            "wait(1ms)": r"DistBackendError: OCCL allreduce \(seq \d+\) on rank 0: Work.wait timed out after 1 ms$",
            "wait(60s)": "ok",
        })
        assert lines[-1] == {"examples": CTOR_EXAMPLES}, lines[-1]

    def test_init_process_group(self):
        results, _ = run_worker("init")
        check(results, {
            "valid": "ok",
            "rank=1,world_size=1": r"ValueError: ProcessGroupOCCL: rank must be in \[0, size\) = \[0, 1\), got 1$",
            # torch's own checks, before any backend (the same for gloo).
            "rank=-1": r"AssertionError: rank must be non-negative if using store$",
            "world_size=0": r"AssertionError: world_size must be positive if using store$",
            "world_size=-2": r"AssertionError: world_size must be positive if using store$",
            "timeout=-1s": r"ValueError: ProcessGroupOCCL: timeout must be positive, got -1000 ms$",
            "timeout=0": r"ValueError: ProcessGroupOCCL: timeout must be positive, got 0 ms$",
            "timeout=timedelta.max": r"ValueError: ProcessGroupOCCL: timeout must be positive, got -\d+ ms \(a",
            "timeout=10000y": "ok",
            "device_id=openreg:5": r"ValueError: device_id openreg:5 is out of range",
            "backend=occl:cpu": r"RuntimeError: No backend type associated with device type openreg$",
            "valid again": "ok",
        })


# ------------------------------------------------------------------ environment
def accepts(name, value):
    """Whether OCCL accepts ``value`` for variable ``name`` (docs/distributed.md)."""
    if value == "":
        return True  # empty is unset
    if name == "OCCL_TRANSPORT":
        return value == "tcp"
    if name in ("OCCL_ZERO_COPY", "OCCL_DEBUG"):
        return value in ("0", "1")
    if name in ("OCCL_ZC_CHUNK", "OCCL_TCP_CHUNK"):
        return value.isascii() and value.isdigit() and 1 <= int(value) <= GiB
    if name == "OCCL_SOCKET_ADDR":
        return value == "127.0.0.1"
    raise AssertionError(name)


HAND_PICKED = {
    "OCCL_TRANSPORT": ["banana", "TCP", "tcp ", "shm", "ib", "0", "tcp"],
    "OCCL_ZERO_COPY": ["yes", "true", "2", "-1", "00", " 1", "0", "1"],
    "OCCL_DEBUG": ["INFO", "true", "2", "on", "1"],
    "OCCL_ZC_CHUNK": ["abc", "-5", "0", "+4096", " 4096", "4096 ", "4k", "1e6", "0x1000",
                      str(GiB + 1), str(2 ** 64), "99999999999999999999", "4096"],
    "OCCL_TCP_CHUNK": ["12x", "2000000000", "-1", "0", "1.5", "65536"],
    "OCCL_SOCKET_ADDR": ["not.an.ip", "256.1.1.1", "127.0.0.1:80", "::1", "8.8.8.8", " ",
                         "127.0.0.1"],
}


def generated(name, rng, n):
    """Values from a fixed-seed generator: numbers in and out of range,
    numbers with junk, random printable strings."""
    out = []
    for _ in range(n):
        kind = rng.randrange(4)
        if kind == 0:
            out.append(str(rng.choice([-1, 1]) * rng.randrange(0, 2 ** rng.randrange(1, 70))))
        elif kind == 1:
            out.append(str(rng.randrange(0, 3)) + rng.choice(["", "x", " ", ".0", "k", "\t"]))
        elif kind == 2:
            out.append("".join(rng.choice("0123456789abcxyz-+. :/") for _ in range(rng.randrange(1, 9))))
        else:
            out.append("".join(chr(rng.randrange(33, 127)) for _ in range(rng.randrange(1, 12))))
    if name == "OCCL_SOCKET_ADDR":
        out = [v for v in out if v != "127.0.0.1"]
    return out


@pytest.mark.distributed
class TestEnvironmentOptions:
    hw_classification = HW.ACCELERATOR

    def test_every_option_named(self):
        """Each variable OCCL reads (grep getenv occl/) is fuzzed here."""
        names = set()
        for d in ("occl/src", "occl/c10d"):
            for f in os.listdir(os.path.join(REPO, d)):
                with open(os.path.join(REPO, d, f)) as fh:
                    names |= set(re.findall(r'"(OCCL_[A-Z_]+)"', fh.read()))
        assert names == set(HAND_PICKED), names ^ set(HAND_PICKED)

    def test_garbage_values(self):
        rng = random.Random(20261201)
        cases = []
        for name, values in HAND_PICKED.items():
            for v in values + generated(name, rng, 12):
                cases.append((name, v))
        # Chunk sizes and OCCL_DEBUG are read once per process and then
        # cached: the refused values first, then the accepted ones.
        cases.sort(key=lambda c: accepts(*c))
        results, _ = run_worker("env", json.dumps(cases))
        assert len(results) == len(set(cases))
        for name, value in cases:
            r = results[f"{name}={value!r}"]
            if accepts(name, value):
                assert r["outcome"] == "ok", (name, value, r)
            else:
                # Named, at communicator creation, as a DistBackendError.
                assert r["outcome"].startswith(
                    "DistBackendError: OCCL: creating the communicator of rank 0 failed: "
                    f"occlCommInitRank: {name}"
                ) or (name == "OCCL_SOCKET_ADDR" and "(OCCL_SOCKET_ADDR)" in r["outcome"]), (name, value, r)
                if name != "OCCL_SOCKET_ADDR":
                    assert repr(value)[1:-1] in r["outcome"] or value in r["outcome"], r
            # A refused communicator leaves no file descriptor behind.
            assert r["fds"] <= 0, (name, value, r)


@pytest.mark.distributed
class TestIsOccl:
    hw_classification = HW.ACCELERATOR

    def test_without_a_group_and_with_a_wrong_one(self):
        """is_occl() raised AttributeError ('NoneType' object has no attribute
        '_get_backend') before init_process_group, and for a non-group."""
        import torch.distributed as dist
        import torch_openreg.distributed

        assert not dist.is_initialized()
        assert torch_openreg.distributed.is_occl() is False
        with pytest.raises(TypeError, match="is_occl: expected a torch.distributed.ProcessGroup, got str"):
            torch_openreg.distributed.is_occl("world")
