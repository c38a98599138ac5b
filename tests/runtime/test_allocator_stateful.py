"""Stateful (hypothesis) tests of orMalloc/orFree.

The machine keeps a model of the live blocks and checks, after every step:
blocks are 512-aligned, lie inside the device's arena and never overlap;
their total never exceeds the capacity; orMemGetInfo's free/used arithmetic
matches the model; orPointerGetAttributes agrees with the model; and every
block still holds the distinct bytes written into it through H2D memcpy.

Capacity is fixed per process (4G by default), so the capacity rules are
exercised properly in a child pytest run with OPENREG_DEVICE_MEMORY=64M
(TestAllocatorSmallCapacity); the same machine also runs in-process on device
1 with the default capacity.
"""

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests._subprocess import child_env
from tests.runtime._helpers import ALIGN, MB, REPO, HostBuf, d2h, h2d, round_up, rt
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

OpenRegError = rt.OpenRegError

CHILD_ENV = "OPENREG_ALLOCATOR_MACHINE_CHILD"
PATTERN = 128  # bytes written at the start and at the end of every block

sizes = st.one_of(
    st.integers(1, 4096),
    st.integers(4097, 2 * MB),
    st.integers(4 * MB, 40 * MB),
    st.sampled_from([1, ALIGN - 1, ALIGN, ALIGN + 1, MB, 3 * MB + 7, 8 * MB, 20 * MB]),
)


def pattern(tag: int, n: int) -> bytes:
    return bytes((tag * 31 + i * 7 + 1) % 251 for i in range(n))


# How often the interesting branches ran (checked in the child run).
STATS = {"malloc_gap": 0, "malloc_ok": 0, "malloc_oom": 0, "malloc_fragmented": 0, "exact_model": 0}


class AllocatorMachine(RuleBasedStateMachine):
    DEVICE = 0

    def __init__(self):
        super().__init__()
        self.device = self.DEVICE
        rt.set_device(self.device)
        self.total = rt.get_device_properties(self.device)["total_memory"]
        free, total = rt.mem_get_info()
        assert total == self.total
        if os.environ.get(CHILD_ENV):
            assert self.total == 64 * MB
        self.baseline_used = total - free
        self.live = {}  # ptr -> (requested size, tag)
        self.freed = set()  # pointers freed by the machine (maybe reused since)
        self.next_tag = 0
        self.pinned = rt.malloc_host(64)
        # With nothing allocated the free list is one range starting at the
        # arena base, so the first fit is the base: from it the model knows
        # the exact free gaps.
        self.base = None
        if self.baseline_used == 0:
            p = rt.malloc(1)
            rt.free(p)
            self.base = p
            assert rt.pointer_attributes(p)["device"] == self.device
            STATS["exact_model"] += 1

    # ------------------------------------------------------------ model
    def used(self) -> int:
        return sum(round_up(n) for n, _ in self.live.values())

    def remaining(self) -> int:
        return self.total - self.baseline_used - self.used()

    def largest_gap(self):
        if self.base is None:
            return None
        best, cursor = 0, self.base
        for p in sorted(self.live):
            best = max(best, p - cursor)
            cursor = p + round_up(self.live[p][0])
        return max(best, self.base + self.total - cursor)

    def write_pattern(self, p: int, n: int, tag: int):
        k = min(n, PATTERN)
        h2d(p, pattern(tag, k))
        if n >= 2 * k:
            h2d(p + n - k, pattern(tag + 1000, k))

    def check_pattern(self, p: int):
        n, tag = self.live[p]
        k = min(n, PATTERN)
        assert d2h(p, k) == pattern(tag, k), f"block {p:#x} was overwritten"
        if n >= 2 * k:
            assert d2h(p + n - k, k) == pattern(tag + 1000, k), f"block {p:#x} tail overwritten"

    def do_malloc(self, n: int) -> int:
        p = rt.malloc(n)
        assert p != 0
        self.live[p] = (n, self.next_tag)
        self.freed.discard(p)
        self.write_pattern(p, n, self.next_tag)
        self.next_tag += 1
        return p

    def do_free(self, p: int):
        rt.free(p)
        del self.live[p]
        self.freed.add(p)

    # ------------------------------------------------------------ rules
    @rule(n=sizes)
    def malloc(self, n):
        need = round_up(n)
        gap = self.largest_gap()
        if need > self.remaining():
            with pytest.raises(OpenRegError) as ei:
                rt.malloc(n)
            assert ei.value.name == "orErrorMemoryAllocation"
            assert f"requested {n} bytes" in str(ei.value)
            STATS["malloc_oom"] += 1
            return
        if gap is not None and need > gap:
            # Enough bytes in total, but not contiguous.
            with pytest.raises(OpenRegError) as ei:
                rt.malloc(n)
            assert ei.value.name == "orErrorMemoryAllocation"
            STATS["malloc_fragmented"] += 1
            return
        self.do_malloc(n)
        STATS["malloc_ok"] += 1

    @precondition(lambda self: self.base is not None)
    @rule(minus=st.sampled_from([0, 0, 1, ALIGN, ALIGN + 1]))
    def malloc_largest_gap(self, minus):
        # Whatever the history, the largest contiguous free range (known
        # exactly from the model) can be allocated in one piece.
        gap = self.largest_gap()
        if gap - minus <= 0:
            return
        self.do_malloc(gap - minus)
        STATS["malloc_gap"] += 1

    @rule(extra=st.integers(1, 64 * 1024))
    def malloc_beyond_remaining(self, extra):
        before = rt.mem_get_info()
        n = self.remaining() + extra
        with pytest.raises(OpenRegError) as ei:
            rt.malloc(n)
        assert ei.value.name == "orErrorMemoryAllocation"
        assert ei.value.code == 2
        assert f"out of memory on device openreg:{self.device}" in str(ei.value)
        assert rt.mem_get_info() == before

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def free(self, data):
        p = data.draw(st.sampled_from(sorted(self.live)))
        self.do_free(p)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def free_then_reallocate_same_size(self, data):
        p = data.draw(st.sampled_from(sorted(self.live)))
        n = self.live[p][0]
        self.do_free(p)
        # The freed range alone is big enough: this must succeed.
        self.do_malloc(n)

    @precondition(lambda self: self.freed - set(self.live))
    @rule(data=st.data())
    def double_free(self, data):
        p = data.draw(st.sampled_from(sorted(self.freed - set(self.live))))
        with pytest.raises(OpenRegError) as ei:
            rt.free(p)
        assert ei.value.name == "orErrorInvalidDevicePointer"
        assert "not the start of a live allocation" in str(ei.value)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def free_interior_pointer(self, data):
        p = data.draw(st.sampled_from(sorted(self.live)))
        off = data.draw(st.integers(1, round_up(self.live[p][0]) - 1))
        with pytest.raises(OpenRegError) as ei:
            rt.free(p + off)
        assert ei.value.name == "orErrorInvalidDevicePointer"
        assert "not the start of a live allocation" in str(ei.value)
        self.check_pattern(p)  # the block is still there

    @rule(pinned=st.booleans())
    def free_host_pointer(self, pinned):
        buf = HostBuf(64)
        p = self.pinned if pinned else buf.ptr
        with pytest.raises(OpenRegError) as ei:
            rt.free(p)
        assert ei.value.name == "orErrorInvalidDevicePointer"
        assert "not a device pointer" in str(ei.value)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def round_trip(self, data):
        p = data.draw(st.sampled_from(sorted(self.live)))
        self.check_pattern(p)

    @precondition(lambda self: len(self.live) >= 2)
    @rule(data=st.data())
    def copy_between_blocks(self, data):
        a, b = data.draw(st.lists(st.sampled_from(sorted(self.live)), min_size=2,
                                  max_size=2, unique=True))
        na, ta = self.live[a]
        nb, _ = self.live[b]
        if na != nb:
            return
        rt.memcpy(b, a, na, rt.DeviceToDevice)
        self.live[b] = (nb, ta)
        self.check_pattern(b)

    # ------------------------------------------------------------ invariants
    @invariant()
    def blocks_aligned_disjoint_and_in_arena(self):
        prev_end = None
        for p in sorted(self.live):
            assert p % ALIGN == 0
            if self.base is not None:
                assert self.base <= p and p + round_up(self.live[p][0]) <= self.base + self.total
            if prev_end is not None:
                assert p >= prev_end, f"block {p:#x} overlaps the previous one"
            prev_end = p + round_up(self.live[p][0])

    @invariant()
    def accounting_matches(self):
        free, total = rt.mem_get_info()
        assert total == self.total
        assert self.baseline_used + self.used() <= total
        assert total - free == self.baseline_used + self.used()

    @invariant()
    def attributes_match(self):
        for p, (n, _) in self.live.items():
            a = rt.pointer_attributes(p + n - 1)
            assert a["type"] == "device" and a["device"] == self.device
            assert a["device_pointer"] == p
            assert a["allocation_size"] == round_up(n)

    def teardown(self):
        try:
            for p in sorted(self.live):
                self.check_pattern(p)
        finally:
            for p in list(self.live):
                self.do_free(p)
            rt.free_host(self.pinned)
        free, total = rt.mem_get_info()
        assert total - free == self.baseline_used
        if self.base is not None:
            # Everything coalesced back into one range: the whole arena fits.
            p = rt.malloc(self.total)
            rt.free(p)
            assert p == self.base
        rt.set_device(0)


class AllocatorMachineDevice1(AllocatorMachine):
    DEVICE = 1


COMMON = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))


@pytest.mark.runtime
class TestAllocatorInProcess(AllocatorMachineDevice1.TestCase):
    """Default 4G capacity, device 1."""

    hw_classification = HW.ACCELERATOR
    settings = settings(max_examples=60, stateful_step_count=40, **COMMON)


if os.environ.get(CHILD_ENV):

    @pytest.mark.runtime
    class TestAllocatorMachineChild(AllocatorMachine.TestCase):
        hw_classification = HW.ACCELERATOR
        settings = settings(max_examples=int(os.environ[CHILD_ENV]),
                            stateful_step_count=50, **COMMON)

    @pytest.mark.runtime
    class TestAllocatorMachineChildCoverage:
        hw_classification = HW.ACCELERATOR

        def test_branches_were_exercised(self):  # runs after the machine
            assert STATS["malloc_ok"] > 0 and STATS["malloc_oom"] > 0, STATS
            assert STATS["exact_model"] > 0 and STATS["malloc_gap"] > 0, STATS
            print("allocator machine branches:", STATS)


@pytest.mark.runtime
@pytest.mark.slow
class TestAllocatorSmallCapacity:
    # Strict mode backs device memory with a memfd (freed ranges are punched
    # out with fallocate); non-strict mode with anonymous memory (madvise).
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("strict", ["1", "0"], ids=["strict", "non_strict"])
    def test_machine_with_64M_capacity(self, strict):
        env = child_env({"OPENREG_DEVICE_MEMORY": "64M", "OPENREG_STRICT_MEMORY": strict,
                         CHILD_ENV: "80"}, clean_openreg_env=True)
        res = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "-x", os.path.relpath(__file__, REPO), "-k", "TestAllocatorMachineChild"],
            env=env, cwd=REPO, capture_output=True, text=True, timeout=120,
        )
        assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]
        assert "2 passed" in res.stdout, res.stdout[-2000:]
