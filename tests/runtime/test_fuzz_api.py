"""Fuzzing the runtime's C API (through torch_openreg._runtime) with valid and
invalid arguments, as a hypothesis state machine.

Every step calls one entry point with arguments drawn from pools that mix the
valid with the invalid: live, destroyed and forged stream and event handles;
pointers at a block's start, inside it, one past its end, into a freed block,
or forged; sizes of 0, small, past a block's end, past the device's capacity
and SIZE_MAX; every copy kind and out-of-range ones; forged IPC handles. Each
call must either succeed or fail with an error code of the runtime's own
(``OpenRegError`` with a named ``orError_t``), never crash, hang or raise
anything else; a call that is valid must succeed. After every step the
runtime's invariants hold: every live block still holds the bytes written
into it (no call corrupted another allocation), the device's used memory is
at least what the live blocks take, and the sticky error state is clean.

Host pointers are always valid buffers: the runtime cannot validate a host
address (neither can CUDA's), so a forged one would be a bug in the caller,
not a finding. Under ``make check-asan`` this runs with ASan and UBSan
(docs/sanitizer-builds.md).
"""

import os

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from tests.runtime._helpers import ALIGN, MB, HostBuf, d2h, h2d, round_up, rt
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

OpenRegError = rt.OpenRegError
SIZE_MAX = 2 ** 64 - 1
HOST_BYTES = 64 * 1024
# The error codes the runtime documents (openreg.h); anything else is a bug.
KNOWN_ERRORS = {
    "orErrorInvalidValue", "orErrorMemoryAllocation", "orErrorInvalidDevice",
    "orErrorInvalidDevicePointer", "orErrorInvalidResourceHandle", "orErrorNotReady",
    "orErrorInvalidMemcpyDirection", "orErrorLaunchFailure", "orErrorNotSupported",
    "orErrorIllegalAddress", "orErrorPeerAccessUnsupported", "orErrorMapBufferObjectFailed",
}
FORGED = [0, 1, 0x1000, 0xDEADBEEF000, SIZE_MAX & ~0xFFF]
TRACE = os.environ.get("OPENREG_TEST_FUZZ_TRACE") == "1"  # print every call (triage)


def pattern(tag: int, n: int) -> bytes:
    return bytes((tag * 37 + i * 11 + 3) % 251 for i in range(n))


class RuntimeApiFuzz(RuleBasedStateMachine):
    streams = Bundle("streams")
    events = Bundle("events")

    def __init__(self):
        super().__init__()
        rt.set_device(0)
        self.blocks = {}  # start -> (size, tag): live blocks and their contents
        self.freed = []
        self.dead_streams, self.dead_events = [], []
        self.live_streams, self.live_events = set(), set()
        self.host = HostBuf(HOST_BYTES)
        self.tag = 0
        self.capacity = rt.get_device_properties(0)["total_memory"]

    # -- calling -------------------------------------------------------------
    def call(self, fn, *args, valid=False):
        """Run one API call: success, or a documented error code."""
        if TRACE:
            print(f"{fn.__name__}{tuple(hex(a) if isinstance(a, int) and a > 4096 else a for a in args)}",
                  flush=True)
        try:
            return fn(*args)
        except OpenRegError as e:
            assert e.name in KNOWN_ERRORS, f"{fn.__name__}{args}: undocumented error {e.name}"
            assert not valid, f"{fn.__name__}{args} is valid but failed with {e.name}: {e}"
            return None

    # -- pools ----------------------------------------------------------------
    def device_pointer(self, data, n=0):
        """(pointer, whether [pointer, pointer + n) lies in one live allocation)."""
        kinds = ["forged"] + (["freed"] if self.freed else [])
        if self.blocks:
            kinds += ["start", "inside", "end"]
        kind = data.draw(st.sampled_from(kinds))
        if kind == "forged":
            p = data.draw(st.sampled_from(FORGED))
        elif kind == "freed":
            p = data.draw(st.sampled_from(self.freed))
        else:
            start = data.draw(st.sampled_from(sorted(self.blocks)))
            # The allocation the runtime checks against: the request rounded
            # up to OR_MALLOC_ALIGNMENT (what orPointerGetAttributes reports).
            size = round_up(self.blocks[start][0])
            p = start + {"start": 0, "inside": data.draw(st.integers(0, size - 1)), "end": size}[kind]
        return p, self.valid_range(p, n)

    def valid_range(self, p, n):
        # (A block's end or a freed start may be inside another live block.)
        return any(b <= p and p + n <= b + round_up(m) and p < b + round_up(m)
                   for b, (m, _) in self.blocks.items())

    def size(self, data):
        return data.draw(st.one_of(st.integers(0, 4096),
                                   st.sampled_from([0, 1, ALIGN - 1, MB, self.capacity + 1,
                                                    SIZE_MAX, SIZE_MAX // 2])))

    # -- memory ---------------------------------------------------------------
    @rule(data=st.data())
    def malloc(self, data):
        n = data.draw(st.one_of(st.integers(1, 64 * 1024),
                                st.sampled_from([0, self.capacity + 1, SIZE_MAX, SIZE_MAX // 2])))
        p = self.call(rt.malloc, n)
        if n == 0:
            assert p in (0, None)
            return
        if p is None:
            assert n > self.capacity // 2, f"malloc({n}) failed"
            return
        assert p % ALIGN == 0 and p not in self.blocks
        self.tag += 1
        h2d(p, pattern(self.tag, min(n, 256)))
        self.blocks[p] = (n, self.tag)

    @rule(data=st.data())
    def free(self, data):
        p, _ = self.device_pointer(data)
        live = p in self.blocks
        self.call(rt.free, p, valid=live)
        if live:
            del self.blocks[p]
            self.freed.append(p)
            self.freed = self.freed[-8:]
        # A freed block stays freed; a forged or inner pointer frees nothing.

    @rule(data=st.data())
    def memset(self, data):
        n = self.size(data)
        p, ok = self.device_pointer(data, n)
        if ok and n:
            return  # a valid memset would overwrite the pattern the invariant checks
        self.call(rt.memset, p, 0x5A, n)

    @rule(data=st.data())
    def memcpy(self, data):
        kind = data.draw(st.sampled_from([rt.HostToDevice, rt.DeviceToHost, rt.DeviceToDevice,
                                          rt.HostToHost, rt.Default, 5, 9, -1]))
        n = self.size(data)
        host = self.host.ptr
        if kind in (rt.HostToHost, rt.Default, 5, 9, -1):
            # Only real host buffers (and sizes they hold) where the runtime
            # may treat a pointer as host memory.
            n = min(n, HOST_BYTES)
            self.call(rt.memcpy, host, host, n, kind, valid=kind in (rt.HostToHost, rt.Default))
            return
        p, ok = self.device_pointer(data, n)
        if kind == rt.HostToDevice:
            if ok and n:
                return  # keep live contents; valid H2D copies run in malloc
            self.call(rt.memcpy, p, host, min(n, HOST_BYTES) if ok else n, kind)
        elif kind == rt.DeviceToHost:
            if ok and n > HOST_BYTES:
                return  # valid, but more than the host buffer holds
            # (An invalid one must be refused before a byte is written.)
            self.call(rt.memcpy, host, p, n, kind, valid=ok)
        else:  # device to device: the source side only; the destination is a scratch block
            scratch = rt.malloc(max(1, min(n, 4096)))
            try:
                self.call(rt.memcpy, scratch, p, n, kind, valid=ok and n <= 4096)
            finally:
                rt.free(scratch)

    @rule(data=st.data())
    def pointer_attributes(self, data):
        p, _ = self.device_pointer(data)
        self.call(rt.pointer_attributes, p)

    @rule(data=st.data())
    def ipc(self, data):
        p, _ = self.device_pointer(data)
        handle = self.call(rt.ipc_get_mem_handle, p, valid=p in self.blocks)
        forged = data.draw(st.one_of(st.binary(min_size=0, max_size=80),
                                     st.sampled_from([b"\x00" * 64, b"\xff" * 64])))
        self.call(rt.ipc_open_mem_handle, forged)
        if handle is not None:  # our own handle cannot be opened in its own process
            self.call(rt.ipc_open_mem_handle, handle)

    # -- streams and events ---------------------------------------------------
    @rule(target=streams, device=st.sampled_from([0, 1, -1, 99]))
    def stream_create(self, device):
        s = self.call(rt.stream_create, device, valid=device in (0, 1))
        if s is None:
            return FORGED[3]
        self.live_streams.add(s)
        return s

    @rule(s=consumes(streams))
    def stream_destroy(self, s):
        live = s in self.live_streams
        self.call(rt.stream_destroy, s, valid=live)
        if live:
            self.live_streams.discard(s)
            self.dead_streams.append(s)

    def any_stream(self, data, s):
        return data.draw(st.sampled_from([s, 0, *FORGED[2:], *self.dead_streams[-3:]]))

    @rule(data=st.data(), s=streams)
    def stream_ops(self, data, s):
        s = self.any_stream(data, s)
        valid = s == 0 or s in self.live_streams
        self.call(rt.stream_query, s, valid=valid)
        self.call(rt.stream_synchronize, s, valid=valid)
        self.call(rt.stream_priority, s, valid=valid)

    @rule(target=events)
    def event_create(self):
        e = self.call(rt.event_create, valid=True)
        self.live_events.add(e)
        return e

    @rule(e=consumes(events))
    def event_destroy(self, e):
        live = e in self.live_events
        self.call(rt.event_destroy, e, valid=live)
        if live:
            self.live_events.discard(e)
            self.dead_events.append(e)

    @rule(data=st.data(), e=events, s=streams)
    def event_ops(self, data, e, s):
        e = data.draw(st.sampled_from([e, *FORGED[2:], *self.dead_events[-3:]]))
        s = self.any_stream(data, s)
        live_e = e in self.live_events
        live_s = s == 0 or s in self.live_streams
        self.call(rt.event_record, e, s, valid=live_e and live_s)
        self.call(rt.stream_wait_event, s, e, valid=live_e and live_s)
        self.call(rt.event_query, e)
        self.call(rt.event_synchronize, e, valid=live_e)
        self.call(rt.event_elapsed_time, e, e)

    @rule(device=st.sampled_from([0, 1, -1, 2, 99]))
    def set_device(self, device):
        self.call(rt.set_device, device, valid=device in (0, 1))
        rt.set_device(0)

    # -- invariants -------------------------------------------------------------
    @invariant()
    def live_blocks_are_intact(self):
        for p, (n, tag) in self.blocks.items():
            m = min(n, 256)
            assert d2h(p, m) == pattern(tag, m), f"block {p:#x} was corrupted"

    @invariant()
    def memory_accounting(self):
        free, total = rt.mem_get_info()
        assert total == self.capacity
        assert total - free >= sum(n for n, _ in self.blocks.values())

    @invariant()
    def no_sticky_error(self):
        rt.get_last_error()  # clears the last error
        assert rt.peek_last_error() == 0

    def teardown(self):
        for s in list(self.live_streams):
            rt.stream_synchronize(s)
            rt.stream_destroy(s)
        for e in list(self.live_events):
            rt.event_destroy(e)
        for p in self.blocks:
            rt.free(p)
        rt.set_device(0)


TestRuntimeApiFuzz = RuntimeApiFuzz.TestCase
TestRuntimeApiFuzz.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                       suppress_health_check=[HealthCheck.too_slow])
TestRuntimeApiFuzz.hw_classification = HW.ACCELERATOR
TestRuntimeApiFuzz = pytest.mark.runtime(TestRuntimeApiFuzz)
