"""Example-based tests of the OpenReg runtime C API (through torch_openreg._runtime).

Per-process settings (device count, capacity, strict memory, worker count)
are exercised in child interpreters; everything else runs in-process with the
defaults (2 devices, 4G each, strict memory, 4 workers per device).
"""

import ctypes
import json
import re
import threading
import time

import pytest

from tests._subprocess import run_python
from tests.runtime._helpers import (
    ALIGN,
    CHILD_PRELUDE,
    CHILD_PRELUDE_WITH_TORCH,
    MB,
    HostBuf,
    RuntimeHang,
    call_with_timeout,
    d2h,
    gates,
    h2d,
    on_device,
    round_up,
    rt,
    sync_event,
    sync_stream,
    wait_until,
)

OpenRegError = rt.OpenRegError


@pytest.fixture
def stream():
    s = rt.stream_create(0)
    try:
        yield s
    finally:
        call_with_timeout(rt.stream_destroy, s)


@pytest.fixture
def dev_block():
    """A 4 KiB device block on device 0, freed afterwards."""
    p = rt.malloc(4096)
    try:
        yield p
    finally:
        rt.free(p)


# ---------------------------------------------------------------- smoke
@pytest.mark.runtime
@pytest.mark.smoke
class TestSmoke:
    def test_device_memory_round_trip(self):
        p = rt.malloc(1000)
        try:
            assert p % ALIGN == 0
            data = bytes(range(256)) * 4
            h2d(p, data[:1000])
            assert d2h(p, 1000) == data[:1000]
        finally:
            rt.free(p)

    def test_stream_event_order(self):
        log = rt.Log()
        s = rt.stream_create(0)
        e = rt.event_create()
        try:
            for i in range(5):
                rt.launch_log(s, log, i, 100)
            rt.event_record(e, s)
            sync_event(e)
            assert rt.event_query(e)
            assert log.values == [0, 1, 2, 3, 4]
            sync_stream(s)
            assert rt.stream_query(s)
        finally:
            rt.event_destroy(e)
            call_with_timeout(rt.stream_destroy, s)

    def test_async_error_is_reported(self, stream):
        rt.launch_failing_kernel(stream)
        with pytest.raises(OpenRegError) as ei:
            sync_stream(stream)
        assert ei.value.name == "orErrorLaunchFailure"
        assert "always_fails" in str(ei.value)


# ---------------------------------------------------------------- devices
@pytest.mark.runtime
class TestDevices:
    def test_count_and_properties(self):
        n = rt.device_count()
        assert n == 2
        for d in range(n):
            p = rt.get_device_properties(d)
            assert p["name"] == f"OpenReg Simulated Device {d}"
            assert p["total_memory"] == 4 << 30
            assert p["multi_processor_count"] == 4
            assert p["strict_memory"] is True
            assert (p["major"], p["minor"]) == (1, 0)
            assert (p["stream_priority_least"], p["stream_priority_greatest"]) == (0, -3)
        assert rt.stream_priority_range() == (0, -3)

    def test_mem_get_info_total_matches_properties(self):
        for d in range(rt.device_count()):
            with on_device(d):
                free, total = rt.mem_get_info()
                assert total == rt.get_device_properties(d)["total_memory"]
                assert 0 <= free <= total

    def test_set_and_get_device(self):
        assert rt.get_device() == 0
        with on_device(1):
            assert rt.get_device() == 1
            p = rt.malloc(10)
            try:
                assert rt.pointer_attributes(p)["device"] == 1
            finally:
                rt.free(p)
            s = rt.stream_create(0)
            try:
                assert rt.stream_device(s) == 1
            finally:
                rt.stream_destroy(s)
        assert rt.get_device() == 0

    def test_current_device_is_per_thread(self):
        seen = []
        with on_device(1):
            t = threading.Thread(target=lambda: seen.append(rt.get_device()))
            t.start()
            t.join(10)
            assert rt.get_device() == 1
        assert seen == [0]

    @pytest.mark.parametrize("bad", [2, 7, -1])
    def test_invalid_ordinal(self, bad):
        with pytest.raises(OpenRegError) as ei:
            rt.set_device(bad)
        assert ei.value.name == "orErrorInvalidDevice"
        assert ei.value.code == 101
        assert f"invalid device ordinal {bad}" in str(ei.value)
        assert rt.get_device() == 0  # unchanged
        with pytest.raises(OpenRegError) as ei:
            rt.get_device_properties(bad)
        assert ei.value.name == "orErrorInvalidDevice"
        assert f"ordinal {bad}" in str(ei.value)

    def test_error_names_and_strings(self):
        assert rt.error_name(0) == "orSuccess"
        assert rt.error_name(2) == "orErrorMemoryAllocation"
        assert rt.error_name(700) == "orErrorIllegalAddress"
        assert rt.error_string(2) == "out of memory"
        assert rt.error_name(12345) == "unrecognized error code"


# ---------------------------------------------------------------- memory
@pytest.mark.runtime
class TestMemory:
    def test_device_pointer_attributes(self):
        p = rt.malloc(1000)
        try:
            off = rt.kernel_view_offset(0)
            assert off != 0  # strict mode: a separate kernel view
            a = rt.pointer_attributes(p)
            assert a == {
                "type": "device", "device": 0, "device_pointer": p,
                "host_pointer": p + off, "allocation_size": 1024,
            }
            inner = rt.pointer_attributes(p + 700)
            assert inner["type"] == "device"
            assert inner["device_pointer"] == p
            assert inner["host_pointer"] == p + 700 + off
            assert inner["allocation_size"] == 1024
        finally:
            rt.free(p)
        # Freed: still device memory, but no enclosing allocation.
        a = rt.pointer_attributes(p)
        assert a["type"] == "device" and a["device"] == 0
        assert a["device_pointer"] == 0 and a["allocation_size"] == 0

    def test_device_pointer_attributes_on_device_1(self):
        with on_device(1):
            p = rt.malloc(5000)
            try:
                a = rt.pointer_attributes(p)
                assert a["type"] == "device" and a["device"] == 1
                assert a["allocation_size"] == round_up(5000)
                assert a["host_pointer"] == p + rt.kernel_view_offset(1)
            finally:
                rt.free(p)

    def test_pinned_host_pointer_attributes(self):
        p = rt.malloc_host(1000)
        try:
            a = rt.pointer_attributes(p)
            assert a["type"] == "host"
            assert a["device"] == -1
            assert a["device_pointer"] == p
            assert a["host_pointer"] == p
            assert a["allocation_size"] == 4096  # whole pages
            inner = rt.pointer_attributes(p + 100)
            assert inner["type"] == "host"
            assert inner["device_pointer"] == p
            assert inner["host_pointer"] == p + 100
            # pinned memory is ordinary host memory
            rt.write_host(p, b"hello")
            assert rt.read_host(p, 5) == b"hello"
        finally:
            rt.free_host(p)
        assert rt.pointer_attributes(p)["type"] == "unregistered"

    def test_pageable_pointer_attributes(self):
        buf = HostBuf(64)
        a = rt.pointer_attributes(buf.ptr)
        assert a == {
            "type": "unregistered", "device": -1, "device_pointer": 0,
            "host_pointer": buf.ptr, "allocation_size": 0,
        }

    def test_alignment_and_accounting(self):
        free0, total = rt.mem_get_info()
        ptrs = [rt.malloc(n) for n in (1, 511, 512, 513, 4097)]
        try:
            for p in ptrs:
                assert p % ALIGN == 0
            free1, _ = rt.mem_get_info()
            assert free0 - free1 == 512 + 512 + 512 + 1024 + 4608
        finally:
            for p in ptrs:
                rt.free(p)
        assert rt.mem_get_info() == (free0, total)

    def test_zero_size_and_null(self):
        assert rt.malloc(0) == 0
        rt.free(0)  # no-op
        rt.free_host(0)
        assert rt.malloc_host(0) == 0

    def test_out_of_memory(self):
        free, total = rt.mem_get_info()
        for n in (total + 1, free + ALIGN):
            with pytest.raises(OpenRegError) as ei:
                rt.malloc(n)
            assert ei.value.name == "orErrorMemoryAllocation"
            assert ei.value.code == 2
            assert "out of memory on device openreg:0" in str(ei.value)
            assert f"requested {n} bytes" in str(ei.value)
        assert rt.mem_get_info() == (free, total)

    def test_invalid_frees(self):
        p = rt.malloc(2048)
        try:
            with pytest.raises(OpenRegError) as ei:
                rt.free(p + 512)
            assert ei.value.name == "orErrorInvalidDevicePointer"
            assert "not the start of a live allocation" in str(ei.value)
            buf = HostBuf(16)
            with pytest.raises(OpenRegError) as ei:
                rt.free(buf.ptr)
            assert ei.value.name == "orErrorInvalidDevicePointer"
            assert "not a device pointer" in str(ei.value)
        finally:
            rt.free(p)
        with pytest.raises(OpenRegError) as ei:
            rt.free(p)
        assert ei.value.name == "orErrorInvalidDevicePointer"
        with pytest.raises(OpenRegError) as ei:
            rt.free_host(HostBuf(16).ptr)
        assert ei.value.name == "orErrorInvalidValue"

    def test_memcpy_all_kinds(self):
        data = bytes((i * 7 + 3) % 256 for i in range(3000))
        a, b = rt.malloc(3000), rt.malloc(3000)
        try:
            src, dst, dst2 = HostBuf(data), HostBuf(3000), HostBuf(3000)
            rt.memcpy(a, src.ptr, 3000, rt.HostToDevice)
            rt.memcpy(b, a, 3000, rt.DeviceToDevice)
            rt.memcpy(dst.ptr, b, 3000, rt.DeviceToHost)
            assert dst.bytes == data
            rt.memcpy(dst2.ptr, dst.ptr, 3000, rt.HostToHost)
            assert dst2.bytes == data
            # Default infers the direction.
            rt.memset(b, 0, 3000)
            rt.memcpy(b + 100, src.ptr, 50, rt.Default)
            out = HostBuf(200)
            rt.memcpy(out.ptr, b, 200)
            assert out.bytes == bytes(100) + data[:50] + bytes(50)
        finally:
            rt.free(a)
            rt.free(b)

    def test_memcpy_across_devices(self):
        data = bytes(range(200))
        a = rt.malloc(200)
        with on_device(1):
            b = rt.malloc(200)
        try:
            h2d(a, data)
            rt.memcpy(b, a, 200, rt.DeviceToDevice)
            assert d2h(b, 200) == data
        finally:
            rt.free(a)
            rt.free(b)

    @pytest.mark.parametrize("kind_name, direction", [
        ("HostToDevice", "d2h"), ("DeviceToHost", "h2d"), ("HostToHost", "h2d"),
        ("DeviceToDevice", "d2h"), ("HostToDevice", "d2d"),
    ])
    def test_memcpy_wrong_kind(self, dev_block, kind_name, direction):
        host = HostBuf(64)
        other = rt.malloc(64)
        try:
            dst, src = {
                "h2d": (dev_block, host.ptr),
                "d2h": (host.ptr, dev_block),
                "d2d": (other, dev_block),
            }[direction]
            for fn in (rt.memcpy, rt.memcpy_async):
                with pytest.raises(OpenRegError) as ei:
                    fn(dst, src, 64, getattr(rt, kind_name))
                assert ei.value.name == "orErrorInvalidMemcpyDirection"
                assert ei.value.code == 21
                assert f"kind is {kind_name}" in str(ei.value)
        finally:
            rt.free(other)

    def test_memcpy_invalid_kind_value(self, dev_block):
        host = HostBuf(8)
        with pytest.raises(OpenRegError) as ei:
            rt.memcpy(dev_block, host.ptr, 8, 9)
        assert ei.value.name == "orErrorInvalidMemcpyDirection"
        assert "invalid copy kind 9" in str(ei.value)

    def test_memcpy_out_of_bounds_is_rejected(self, dev_block):
        host = HostBuf(8192)
        with pytest.raises(OpenRegError) as ei:
            rt.memcpy(host.ptr, dev_block, 4097, rt.DeviceToHost)
        assert ei.value.name == "orErrorInvalidValue"
        assert "overruns its allocation of 4096 bytes" in str(ei.value)

    def test_memset(self, dev_block):
        rt.memset(dev_block, 0xAB, 4096)
        assert d2h(dev_block, 4096) == b"\xab" * 4096
        rt.memset(dev_block + 10, 0x01, 5)
        assert d2h(dev_block, 20) == b"\xab" * 10 + b"\x01" * 5 + b"\xab" * 5
        rt.memset(dev_block, 0x1FF, 1)  # value is converted to unsigned char
        assert d2h(dev_block, 1) == b"\xff"
        with pytest.raises(OpenRegError) as ei:
            rt.memset(HostBuf(8).ptr, 0, 8)
        assert ei.value.name == "orErrorInvalidValue"
        assert "not a device pointer" in str(ei.value)
        with pytest.raises(OpenRegError) as ei:
            rt.memset(dev_block, 0, 4097)
        assert ei.value.name == "orErrorInvalidValue"

    def test_free_does_not_depend_on_current_device(self):
        with on_device(1):
            free1 = rt.mem_get_info()[0]
            p = rt.malloc(4096)
        rt.free(p)  # current device is 0
        with on_device(1):
            assert rt.mem_get_info()[0] == free1

    def test_freed_memory_can_be_reallocated(self):
        free0, _ = rt.mem_get_info()
        p = rt.malloc(8 * MB)
        rt.free(p)
        q = rt.malloc(8 * MB)
        rt.free(q)
        assert rt.mem_get_info()[0] == free0


# ---------------------------------------------------------------- streams
@pytest.mark.runtime
class TestStreams:
    def test_priorities_are_clamped(self):
        made = []
        try:
            for asked, got in [(0, 0), (-1, -1), (-3, -3), (-10, -3), (5, 0)]:
                s = rt.stream_create(asked)
                made.append(s)
                assert rt.stream_priority(s) == got
            assert rt.stream_priority(0) == 0
            ids = [rt.stream_id(s) for s in made] + [rt.stream_id(0)]
            assert len(set(ids)) == len(ids)
        finally:
            for s in made:
                rt.stream_destroy(s)

    def test_query_while_gated(self, stream):
        log = rt.Log()
        with gates() as gs:
            g = gs.launch(stream)
            rt.launch_log(stream, log, 1)
            time.sleep(0.02)
            assert rt.stream_query(stream) is False
            assert log.values == []
            g.release()
            sync_stream(stream)
        assert rt.stream_query(stream) is True
        assert log.values == [1]

    def test_host_func_never_runs_inline(self, stream):
        # Even on an idle stream, a host function is queued: the caller does
        # not run it, and the stream is not ready until it has returned.
        with gates() as gs:
            g = gs.launch(stream, wait_entered=False)
            assert rt.stream_query(stream) is False
            assert wait_until(lambda: g.entered)
            assert rt.stream_query(stream) is False
            g.release()
            sync_stream(stream)
        assert rt.stream_query(stream) is True

    def test_in_order_on_one_stream(self, stream):
        log = rt.Log()
        for i in range(20):
            rt.launch_log(stream, log, i, 300 if i % 3 == 0 else 0)
        sync_stream(stream)
        assert log.values == list(range(20))

    def test_default_stream(self):
        log = rt.Log()
        rt.launch_log(0, log, 1, 500)
        rt.launch_log(0, log, 2)
        sync_stream(0)
        assert rt.stream_query(0)
        assert log.values == [1, 2]

    def test_destroy(self):
        with pytest.raises(OpenRegError) as ei:
            rt.stream_destroy(0)
        assert ei.value.name == "orErrorInvalidResourceHandle"
        assert "default stream cannot be destroyed" in str(ei.value)
        s = rt.stream_create(0)
        log = rt.Log()
        rt.launch_log(s, log, 1, 20000)
        call_with_timeout(rt.stream_destroy, s)  # waits for pending work
        assert log.values == [1]
        with pytest.raises(OpenRegError) as ei:
            rt.stream_query(s)
        assert ei.value.name == "orErrorInvalidResourceHandle"
        assert "not a live stream" in str(ei.value)


@pytest.mark.runtime
class TestEvents:
    def test_query_false_while_gated(self, stream):
        e = rt.event_create()
        try:
            assert rt.event_query(e)  # never recorded: nothing to wait for
            with gates() as gs:
                g = gs.launch(stream)
                rt.event_record(e, stream)
                time.sleep(0.01)
                assert rt.event_query(e) is False
                g.release()
                sync_event(e)
            assert rt.event_query(e) is True
        finally:
            rt.event_destroy(e)

    def test_elapsed_time_covers_sleep(self, stream):
        start, end = rt.event_create(), rt.event_create()
        try:
            rt.event_record(start, stream)
            rt.launch_sleep(stream, 20_000)
            rt.event_record(end, stream)
            sync_event(end)
            ms = rt.event_elapsed_time(start, end)
            assert 19.0 <= ms < 2000.0
            assert rt.event_elapsed_time(end, start) == pytest.approx(-ms)
        finally:
            rt.event_destroy(start)
            rt.event_destroy(end)

    def test_elapsed_time_not_ready_while_gated(self, stream):
        start, end = rt.event_create(), rt.event_create()
        try:
            with gates() as gs:
                rt.event_record(start, stream)
                g = gs.launch(stream)
                rt.event_record(end, stream)
                with pytest.raises(OpenRegError) as ei:
                    rt.event_elapsed_time(start, end)
                assert ei.value.name == "orErrorNotReady"
                g.release()
                sync_event(end)
            assert rt.event_elapsed_time(start, end) >= 0
        finally:
            rt.event_destroy(start)
            rt.event_destroy(end)

    def test_disable_timing(self, stream):
        a = rt.event_create(rt.EventDisableTiming)
        b = rt.event_create()
        try:
            rt.event_record(a, stream)
            rt.event_record(b, stream)
            sync_event(b)
            for args in ((a, b), (b, a)):
                with pytest.raises(OpenRegError) as ei:
                    rt.event_elapsed_time(*args)
                assert ei.value.name == "orErrorInvalidResourceHandle"
                assert "orEventDisableTiming" in str(ei.value)
        finally:
            rt.event_destroy(a)
            rt.event_destroy(b)

    def test_unrecorded_and_unknown_flags(self):
        a, b = rt.event_create(), rt.event_create()
        try:
            with pytest.raises(OpenRegError) as ei:
                rt.event_elapsed_time(a, b)
            assert ei.value.name == "orErrorInvalidResourceHandle"
            assert "has not been recorded" in str(ei.value)
            sync_event(a)  # never recorded: returns at once
        finally:
            rt.event_destroy(a)
            rt.event_destroy(b)
        with pytest.raises(OpenRegError) as ei:
            rt.event_create(0x80)
        assert ei.value.name == "orErrorInvalidValue"
        with pytest.raises(OpenRegError) as ei:
            rt.event_query(a)  # destroyed
        assert ei.value.name == "orErrorInvalidResourceHandle"

    def test_cross_stream_wait(self):
        a, b = rt.stream_create(0), rt.stream_create(0)
        e = rt.event_create()
        log = rt.Log()
        try:
            with gates() as gs:
                g = gs.launch(a)
                rt.launch_log(a, log, 1, 1000)
                rt.event_record(e, a)
                rt.launch_log(a, log, 3, 50_000)  # after the record: not waited for
                rt.stream_wait_event(b, e)
                rt.launch_log(b, log, 2)
                time.sleep(0.05)
                assert log.values == []
                assert rt.stream_query(b) is False
                g.release()
                sync_stream(b)
                assert log.values[:2] == [1, 2]
            sync_stream(a)
            assert log.values == [1, 2, 3]
        finally:
            rt.event_destroy(e)
            for s in (a, b):
                call_with_timeout(rt.stream_destroy, s)

    def test_cross_device_wait(self):
        a = rt.stream_create(0)
        with on_device(1):
            b = rt.stream_create(0)
        e = rt.event_create()
        log = rt.Log()
        try:
            with gates() as gs:
                g = gs.launch(a)
                rt.launch_log(a, log, 1)
                rt.event_record(e, a)
                rt.stream_wait_event(b, e)
                rt.launch_log(b, log, 2)
                time.sleep(0.03)
                assert log.values == []
                g.release()
                sync_stream(b)
            assert log.values == [1, 2]
        finally:
            rt.event_destroy(e)
            for s in (a, b):
                call_with_timeout(rt.stream_destroy, s)

    def test_wait_keeps_the_recorded_generation(self):
        # Re-recording an event does not change what an earlier wait waits for.
        a, b, c = (rt.stream_create(0) for _ in range(3))
        e = rt.event_create()
        log = rt.Log()
        try:
            with gates() as gs:
                g = gs.launch(a)
                rt.launch_log(a, log, 1)
                rt.event_record(e, a)
                rt.stream_wait_event(b, e)
                rt.launch_log(b, log, 2)
                rt.event_record(e, c)  # c is idle: this generation completes at once
                assert rt.event_query(e)
                time.sleep(0.02)
                assert log.values == []
                g.release()
                sync_stream(b)
            assert log.values == [1, 2]
        finally:
            rt.event_destroy(e)
            for s in (a, b, c):
                call_with_timeout(rt.stream_destroy, s)


# ---------------------------------------------------------------- priorities
PRIORITY_SCRIPT = CHILD_PRELUDE + r"""
def wait_until(pred, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.001)
    return False

out = {"workers": rt.get_device_properties(0)["multi_processor_count"]}
gate_stream = rt.stream_create(0)
low, mid, high = rt.stream_create(0), rt.stream_create(-1), rt.stream_create(-3)
low2 = rt.stream_create(0)
log = rt.Log()
g = rt.Gate()
try:
    rt.launch_gate(gate_stream, g)
    assert wait_until(lambda: g.entered)
    rt.launch_log(low, log, 1)
    rt.launch_log(low, log, 2)
    rt.launch_log(mid, log, 20)
    rt.launch_log(high, log, 30)
    rt.launch_log(high, log, 31)
    time.sleep(0.05)
    out["before_release"] = list(log.values)
finally:
    g.release()
for s in (low, mid, high, gate_stream):
    rt.stream_synchronize(s)
out["priority_order"] = list(log.values)

# FIFO between equal priorities (global enqueue order).
log2 = rt.Log()
g2 = rt.Gate()
try:
    rt.launch_gate(gate_stream, g2)
    assert wait_until(lambda: g2.entered)
    rt.launch_log(low, log2, 1)
    rt.launch_log(low2, log2, 2)
    rt.launch_log(low, log2, 3)
    rt.launch_log(low2, log2, 4)
finally:
    g2.release()
for s in (low, low2, gate_stream):
    rt.stream_synchronize(s)
out["fifo_order"] = list(log2.values)
print(json.dumps(out))
"""


@pytest.mark.runtime
class TestPriorities:
    def test_high_priority_runs_first_with_one_worker(self):
        res = run_python(PRIORITY_SCRIPT, env={"OPENREG_DEVICE_WORKERS": "1"}, timeout=60, clean_openreg_env=True)
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout.strip().splitlines()[-1])
        assert out["workers"] == 1
        assert out["before_release"] == []
        assert out["priority_order"] == [30, 31, 20, 1, 2]
        assert out["fifo_order"] == [1, 2, 3, 4]

    def test_invalid_worker_count(self):
        res = run_python(CHILD_PRELUDE + r"""
try:
    rt.stream_create(0)
except rt.OpenRegError as e:
    print(json.dumps([e.name, str(e)]))
""", env={"OPENREG_DEVICE_WORKERS": "0"}, timeout=60, clean_openreg_env=True)
        assert res.returncode == 0, res.stderr
        name, msg = json.loads(res.stdout.strip().splitlines()[-1])
        assert name == "orErrorInitializationError"
        assert "OPENREG_DEVICE_WORKERS='0'" in msg


# ---------------------------------------------------------------- scheduler wake-ups
# Stream t waits on e1, recorded on stream s behind a wait on e0, recorded on
# stream g behind a closed gate. When the gate opens, e0 and then e1 complete
# without any real work left on s: t must then run its log entry.
TRANSITIVE_WAIT_SCRIPT = CHILD_PRELUDE + r"""
t = rt.stream_create(0)   # created before s: the worker scans it first
s = rt.stream_create(0)
g = rt.stream_create(0)
e0, e1 = rt.event_create(), rt.event_create()
log = rt.Log()
gate = rt.Gate()
rt.launch_gate(g, gate)
rt.event_record(e0, g)        # g: [gate, record e0]
rt.stream_wait_event(s, e0)   # s: [wait e0]
rt.event_record(e1, s)        # s: [wait e0, record e1]
rt.stream_wait_event(t, e1)   # t: [wait e1]
rt.launch_log(t, log, 1)      # t: [wait e1, log 1]
time.sleep(0.05)
gate.release()
done = []
import threading
th = threading.Thread(target=lambda: (rt.stream_synchronize(t), done.append(1)), daemon=True)
th.start()
th.join(1.0)
print(json.dumps({"workers": rt.get_device_properties(0)["multi_processor_count"],
                  "synchronized": bool(done), "log": log.values,
                  "e1_done": rt.event_query(e1)}), flush=True)
os._exit(0)  # a stuck worker or synchroniser must not keep the child alive
"""

# Device 1's workers are all busy with unrelated gates. s (device 1) holds
# only markers: [wait e0, record e1]; t (device 0) waits on e1. After e0
# completes, stream_query(s) on the host thread completes e1. Device 0's
# workers are idle, so t's log entry should run at once.
QUERY_COMPLETES_EVENT_SCRIPT = CHILD_PRELUDE + r"""
import threading
rt.set_device(1)
busy = [rt.stream_create(0) for _ in range(rt.get_device_properties(1)["multi_processor_count"])]
s = rt.stream_create(0)
rt.set_device(0)
busy_gates = [rt.Gate() for _ in busy]
out = {}
try:
    for b, g in zip(busy, busy_gates):
        rt.launch_gate(b, g)
    end = time.monotonic() + 5
    while not all(g.entered for g in busy_gates) and time.monotonic() < end:
        time.sleep(0.001)
    a, t = rt.stream_create(0), rt.stream_create(0)
    e0, e1 = rt.event_create(), rt.event_create()
    log = rt.Log()
    ga = rt.Gate()
    rt.launch_gate(a, ga)
    rt.event_record(e0, a)          # a (device 0): [gate, record e0]
    rt.stream_wait_event(s, e0)     # s (device 1): [wait e0]
    rt.event_record(e1, s)          # s: [wait e0, record e1]
    rt.stream_wait_event(t, e1)     # t (device 0): [wait e1]
    rt.launch_log(t, log, 1)        # t: [wait e1, log 1]
    ga.release()
    time.sleep(0.1)                 # device 0 finishes the gate and idles
    out["query_s"] = rt.stream_query(s)
    out["e1_done"] = rt.event_query(e1)
    done = []
    th = threading.Thread(target=lambda: (rt.stream_synchronize(t), done.append(1)), daemon=True)
    th.start()
    th.join(1.0)
    out["synchronized"] = bool(done)
    out["log"] = log.values
finally:
    for g in busy_gates:
        g.release()
print(json.dumps(out), flush=True)
os._exit(0)
"""


def _child_json(script, env=None):
    res = run_python(script, env=env, timeout=60, clean_openreg_env=True)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.runtime
class TestSchedulerWakeups:
    def test_transitive_wait_with_default_workers(self):
        out = _child_json(TRANSITIVE_WAIT_SCRIPT)
        assert out == {"workers": 4, "synchronized": True, "log": [1], "e1_done": True}

    def test_transitive_wait_with_one_worker(self):
        out = _child_json(TRANSITIVE_WAIT_SCRIPT, env={"OPENREG_DEVICE_WORKERS": "1"})
        assert out["workers"] == 1 and out["e1_done"] is True
        if not out["synchronized"]:
            raise RuntimeHang(f"stream_synchronize(t) did not return; log {out['log']}")
        assert out["log"] == [1]

    def test_event_completed_by_stream_query_wakes_waiters(self):
        out = _child_json(QUERY_COMPLETES_EVENT_SCRIPT)
        assert out["query_s"] is True and out["e1_done"] is True
        if not out["synchronized"]:
            raise RuntimeHang(f"stream_synchronize(t) did not return; log {out['log']}")
        assert out["log"] == [1]


# ---------------------------------------------------------------- async copies
@pytest.mark.runtime
class TestAsyncMemcpy:
    def test_pinned_copies_are_asynchronous(self, stream, dev_block):
        n = 4096
        data = bytes((i * 13 + 1) % 256 for i in range(n))
        src, dst = rt.malloc_host(n), rt.malloc_host(n)
        try:
            rt.write_host(src, data)
            rt.write_host(dst, b"\0" * n)
            with gates() as gs:
                g = gs.launch(stream)
                rt.memcpy_async(dev_block, src, n, rt.HostToDevice, stream)
                rt.memcpy_async(dst, dev_block, n, rt.DeviceToHost, stream)
                time.sleep(0.02)
                assert rt.read_host(dst, n) == b"\0" * n
                assert rt.stream_query(stream) is False
                # The copy reads the pinned source when it runs, not when queued.
                rt.write_host(src, b"\x5a" * 16)
                g.release()
                sync_stream(stream)
            assert rt.read_host(dst, n) == b"\x5a" * 16 + data[16:]
        finally:
            rt.free_host(src)
            rt.free_host(dst)

    def test_pageable_copies_complete_on_return(self, stream, dev_block):
        n = 4096
        data = bytes((i * 5) % 256 for i in range(n))
        src = HostBuf(data)
        rt.memcpy_async(dev_block, src.ptr, n, rt.HostToDevice, stream)
        assert rt.stream_query(stream) is True
        ctypes.memset(src.ptr, 0, n)  # the host buffer may be reused at once
        dst = HostBuf(n)
        rt.memcpy_async(dst.ptr, dev_block, n, rt.DeviceToHost, stream)
        assert rt.stream_query(stream) is True
        assert dst.bytes == data

    def test_pageable_copy_waits_for_earlier_work(self, stream, dev_block):
        # Staged synchronously: the call itself waits for the gated stream.
        dst = HostBuf(64)
        with gates() as gs:
            g = gs.launch(stream)
            timer = threading.Timer(0.2, g.release)
            timer.start()
            try:
                t0 = time.monotonic()
                call_with_timeout(rt.memcpy_async, dst.ptr, dev_block, 64, rt.DeviceToHost, stream)
                waited = time.monotonic() - t0
            finally:
                timer.cancel()
        assert waited >= 0.15
        assert rt.stream_query(stream) is True

    def test_device_to_device_async_is_ordered(self, stream, dev_block):
        other = rt.malloc(4096)
        try:
            rt.memset(dev_block, 0x11, 4096)
            rt.memset(other, 0x22, 4096)
            with gates() as gs:
                g = gs.launch(stream)
                rt.memcpy_async(other, dev_block, 4096, rt.DeviceToDevice, stream)
                time.sleep(0.01)
                assert d2h(other, 4096) == b"\x22" * 4096
                g.release()
                sync_stream(stream)
            assert d2h(other, 4096) == b"\x11" * 4096
            # On an idle stream it is done on return.
            rt.memset(dev_block, 0x33, 4096)
            rt.memcpy_async(other, dev_block, 4096, rt.DeviceToDevice, stream)
            sync_stream(stream)
            assert d2h(other, 4096) == b"\x33" * 4096
        finally:
            rt.free(other)

    def test_memset_async_ordered_on_stream(self, stream, dev_block):
        rt.memset(dev_block, 0, 4096)
        with gates() as gs:
            g = gs.launch(stream)
            rt.memset_async(dev_block, 7, 4096, stream)
            time.sleep(0.01)
            assert d2h(dev_block, 8) == bytes(8)  # default stream is not gated
            g.release()
            sync_stream(stream)
        assert d2h(dev_block, 4096) == b"\x07" * 4096


# ---------------------------------------------------------------- async errors
@pytest.mark.runtime
class TestAsyncErrors:
    def test_failing_kernel_reported_at_synchronize(self, stream):
        sid = rt.stream_id(stream)
        rt.launch_failing_kernel(stream)
        with pytest.raises(OpenRegError) as ei:
            sync_stream(stream)
        err = ei.value
        assert err.name == "orErrorLaunchFailure" and err.code == 719
        msg = str(err)
        assert "always_fails" in msg
        assert f"stream {sid}" in msg
        assert "openreg:0" in msg
        assert "asynchronously" in msg
        sync_stream(stream)  # reported once
        assert rt.stream_query(stream)

    def test_failing_kernel_when_queued(self, stream):
        with gates() as gs:
            g = gs.launch(stream)
            rt.launch_failing_kernel(stream)  # queued behind the gate: no error yet
            g.release()
        with pytest.raises(OpenRegError) as ei:
            sync_stream(stream)
        assert ei.value.name == "orErrorLaunchFailure"
        assert "always_fails" in str(ei.value) and "stream" in str(ei.value)

    def test_failing_kernel_synchronous_launch(self, stream):
        with pytest.raises(OpenRegError) as ei:
            call_with_timeout(rt.launch_failing_kernel, stream, True)
        assert ei.value.name == "orErrorLaunchFailure"
        assert "always_fails" in str(ei.value)
        sync_stream(stream)  # nothing deferred

    def test_error_reported_through_event(self, stream):
        e = rt.event_create()
        try:
            rt.launch_failing_kernel(stream)
            rt.event_record(e, stream)
            with pytest.raises(OpenRegError) as ei:
                sync_event(e)
            assert ei.value.name == "orErrorLaunchFailure"
            assert "always_fails" in str(ei.value)
        finally:
            rt.event_destroy(e)

    def test_error_reported_by_device_synchronize(self):
        with on_device(1):
            s = rt.stream_create(0)
            try:
                rt.launch_failing_kernel(s)
                def sync_device_1():  # the current device is per thread
                    rt.set_device(1)
                    rt.device_synchronize()

                with pytest.raises(OpenRegError) as ei:
                    call_with_timeout(sync_device_1)
                assert ei.value.name == "orErrorLaunchFailure"
                assert "orDeviceSynchronize" in str(ei.value)
                assert "openreg:1" in str(ei.value)
                call_with_timeout(sync_device_1)  # reported once
            finally:
                rt.stream_destroy(s)

    @pytest.mark.parametrize("target", ["pinned", "device"])
    def test_use_after_free_in_queued_work(self, stream, target):
        blk = rt.malloc(4096)
        dst = rt.malloc_host(4096) if target == "pinned" else rt.malloc(4096)
        try:
            with gates() as gs:
                g = gs.launch(stream)
                rt.memcpy_async(dst, blk, 4096, rt.Default, stream)
                rt.free(blk)
                g.release()
            with pytest.raises(OpenRegError) as ei:
                sync_stream(stream)
            assert ei.value.name == "orErrorIllegalAddress" and ei.value.code == 700
            msg = str(ei.value)
            assert "not inside a live allocation" in msg
            assert f"stream {rt.stream_id(stream)}" in msg
        finally:
            (rt.free_host if target == "pinned" else rt.free)(dst)


# ---------------------------------------------------------------- kernels
@pytest.mark.runtime
class TestKernels:
    @pytest.mark.parametrize("sync", [True, False])
    def test_fill_i32(self, stream, sync):
        n = 1000
        p = rt.malloc(4 * n)
        try:
            rt.memset(p, 0, 4 * n)
            rt.launch_fill_i32(stream, p + 40, n - 20, -123456, sync)
            sync_stream(stream)
            out = (ctypes.c_int32 * n).from_buffer_copy(d2h(p, 4 * n))
            assert list(out) == [0] * 10 + [-123456] * (n - 20) + [0] * 10
        finally:
            rt.free(p)

    def test_fill_async_behind_gate(self, stream, dev_block):
        rt.memset(dev_block, 0, 4096)
        with gates() as gs:
            g = gs.launch(stream)
            rt.launch_fill_i32(stream, dev_block, 1024, 42, False)
            time.sleep(0.01)
            assert d2h(dev_block, 16) == bytes(16)
            g.release()
            sync_stream(stream)
        out = (ctypes.c_int32 * 1024).from_buffer_copy(d2h(dev_block, 4096))
        assert set(out) == {42}

    @pytest.mark.parametrize("sync", [True, False], ids=["synchronous", "inline"])
    def test_stream_busy_while_kernel_runs_on_caller(self, stream, sync):
        # A synchronous launch, and an asynchronous one on an idle stream (run
        # inline on the caller), both mark the stream not-ready while running.
        n = 16 * (1 << 20)  # 64 MiB of int32: tens of milliseconds
        p = rt.malloc(4 * n)
        seen = []
        stop = threading.Event()

        def poll():
            while not stop.is_set():
                seen.append(rt.stream_query(stream))

        try:
            t = threading.Thread(target=poll, daemon=True)
            t.start()
            time.sleep(0.005)
            try:
                call_with_timeout(rt.launch_fill_i32, stream, p, n, 5, sync)
                done_on_return = rt.stream_query(stream)
            finally:
                stop.set()
                t.join(10)
            assert done_on_return is True
            assert False in seen, "stream never reported not-ready while the kernel ran"
            assert seen[-1] is True
            tail = (ctypes.c_int32 * 4).from_buffer_copy(d2h(p + 4 * (n - 4), 16))
            assert list(tail) == [5] * 4
        finally:
            rt.free(p)

    def test_fill_on_device_1(self):
        with on_device(1):
            p = rt.malloc(64)
            try:
                rt.launch_fill_i32(0, p, 16, 7, True)
                assert list((ctypes.c_int32 * 16).from_buffer_copy(d2h(p, 64))) == [7] * 16
            finally:
                rt.free(p)

    def test_fill_rejects_freed_pointer(self, stream):
        p = rt.malloc(64)
        rt.free(p)
        with pytest.raises(ValueError):
            rt.launch_fill_i32(stream, p, 16, 1, True)


# ---------------------------------------------------------------- tracing
@pytest.mark.runtime
class TestTracing:
    def test_trace_records(self):
        with on_device(1):
            s = rt.stream_create(0)
            p = rt.malloc(4096)
            host = HostBuf(4096)
            try:
                rt.trace_start()
                try:
                    rt.set_correlation_id(4242)
                    rt.launch_fill_i32(s, p, 1024, 9, True)
                    rt.memcpy(host.ptr, p, 4096, rt.DeviceToHost)
                    rt.memset(p, 0, 1000)
                    rt.set_correlation_id(0)
                    sync_stream(s)
                finally:
                    records = rt.trace_stop()
                sid = rt.stream_id(s)
                default_sid = rt.stream_id(0)
            finally:
                rt.free(p)
                rt.stream_destroy(s)
        assert set(host.bytes[:4]) == {9, 0}  # int32 9, little endian
        by_kind = {}
        for r in records:
            by_kind.setdefault(r["kind"], []).append(r)
        assert set(by_kind) == {"kernel", "memcpy", "memset"}, records
        (k,), (c,), (m,) = by_kind["kernel"], by_kind["memcpy"], by_kind["memset"]
        assert k["name"] == "fill_i32" and k["bytes"] == 0 and k["stream"] == sid
        assert c["name"] == "orMemcpy" and c["bytes"] == 4096 and c["stream"] == default_sid
        assert m["name"] == "orMemset" and m["bytes"] == 1000
        for r in (k, c, m):
            assert r["device"] == 1
            assert r["correlation"] == 4242
            assert 0 < r["start_ns"] <= r["end_ns"]
        assert k["end_ns"] <= c["start_ns"] and c["end_ns"] <= m["start_ns"]

    def test_async_work_traced_and_correlated(self, stream):
        src = rt.malloc_host(256)
        p = rt.malloc(256)
        try:
            rt.trace_start()
            try:
                rt.set_correlation_id(7)
                with gates() as gs:
                    g = gs.launch(stream)
                    rt.memcpy_async(p, src, 256, rt.HostToDevice, stream)
                    rt.set_correlation_id(8)  # applies to later launches only
                    g.release()
                sync_stream(stream)
                rt.set_correlation_id(0)
            finally:
                records = rt.trace_stop()
        finally:
            rt.free(p)
            rt.free_host(src)
        copies = [r for r in records if r["kind"] == "memcpy"]
        assert len(copies) == 1
        assert copies[0]["name"] == "orMemcpyAsync"
        assert copies[0]["correlation"] == 7
        assert copies[0]["bytes"] == 256
        host_funcs = [r for r in records if r["kind"] == "host_func"]
        assert len(host_funcs) == 1 and host_funcs[0]["correlation"] == 7
        assert host_funcs[0]["end_ns"] <= copies[0]["start_ns"]

    def test_no_records_after_stop(self, dev_block):
        rt.trace_start()
        rt.trace_stop()
        rt.memset(dev_block, 1, 16)
        rt.trace_start()
        assert rt.trace_stop() == []


# ---------------------------------------------------------------- per-process settings
READ_DEVICE_POINTER = r"""
p = rt.malloc(4096)
rt.memset(p, 1, 4096)
print(json.dumps({"ptr": p, "offset": rt.kernel_view_offset(0),
                  "strict": rt.get_device_properties(0)["strict_memory"]}), flush=True)
if os.environ.get("PROBE_WRITE"):
    ctypes.memset(p + 8, 2, 4)
value = ctypes.c_int.from_address(p + 8).value
print(json.dumps({"value": value}), flush=True)
"""


@pytest.mark.runtime
class TestStrictMemory:
    @pytest.mark.parametrize("prelude, write", [
        (CHILD_PRELUDE, ""), (CHILD_PRELUDE_WITH_TORCH, ""), (CHILD_PRELUDE, "1"),
    ], ids=["read", "read_with_torch", "write"])
    def test_host_access_to_device_memory_faults(self, prelude, write):
        res = run_python(prelude + READ_DEVICE_POINTER, env={"PROBE_WRITE": write}, timeout=60, clean_openreg_env=True)
        assert res.returncode == -11, (res.returncode, res.stderr)
        first = json.loads(res.stdout.strip().splitlines()[0])
        assert first["strict"] is True and first["offset"] != 0
        assert len(res.stdout.strip().splitlines()) == 1  # the read never returned
        assert "illegal host access to device memory at address" in res.stderr
        m = re.search(r"at address (0x[0-9a-f]+) \(device openreg:0, offset (\d+)", res.stderr)
        assert m, res.stderr
        assert int(m.group(1), 16) == first["ptr"] + 8
        assert hex(first["ptr"] + 8)[2:] in res.stderr
        assert "OPENREG_STRICT_MEMORY=0" in res.stderr

    def test_non_strict_read_succeeds(self):
        for write, expected in [("", 0x01010101), ("1", 0x02020202)]:
            res = run_python(CHILD_PRELUDE + READ_DEVICE_POINTER,
                             env={"OPENREG_STRICT_MEMORY": "0", "PROBE_WRITE": write}, timeout=60, clean_openreg_env=True)
            assert res.returncode == 0, res.stderr
            lines = [json.loads(x) for x in res.stdout.strip().splitlines()]
            assert lines[0]["strict"] is False and lines[0]["offset"] == 0
            assert lines[1]["value"] == expected
        assert "illegal host access" not in res.stderr


FORK_SCRIPT = CHILD_PRELUDE + r"""
out = {}
pid = os.fork()  # before any device is initialised: the child may use it
if pid == 0:
    try:
        p = rt.malloc(16); rt.free(p); os._exit(0)
    except BaseException:
        os._exit(1)
out["fork_before_init"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
p = rt.malloc(16)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    res = {}
    for key, fn in [("malloc", lambda: rt.malloc(16)), ("free", lambda: rt.free(p)),
                    ("stream", lambda: rt.stream_create(0))]:
        try:
            fn()
            res[key] = ["ok", ""]
        except rt.OpenRegError as e:
            res[key] = [e.name, str(e)]
    os.write(w, json.dumps(res).encode())
    os._exit(0)
os.close(w)
data = b""
while chunk := os.read(r, 65536):
    data += chunk
os.waitpid(pid, 0)
out["child"] = json.loads(data)
rt.free(p)
print(json.dumps(out))
"""


@pytest.mark.runtime
class TestFork:
    def test_forked_child_cannot_use_an_initialised_runtime(self):
        res = run_python(FORK_SCRIPT, timeout=60, clean_openreg_env=True)
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout.strip().splitlines()[-1])
        assert out["fork_before_init"] == 0
        for key in ("malloc", "free"):
            name, msg = out["child"][key]
            assert name == "orErrorInitializationError", out
            assert "forked child" in msg
        assert "spawn" in out["child"]["malloc"][1]
        assert out["child"]["stream"][0] == "orErrorInitializationError"


ENV_PROBE = CHILD_PRELUDE + r"""
out = {}
def attempt(key, fn, *args):
    try:
        out[key] = ["ok", fn(*args)]
    except rt.OpenRegError as e:
        out[key] = [e.name, str(e)]
attempt("count", rt.device_count)
attempt("props_last", lambda: rt.get_device_properties(rt.device_count() - 1)["total_memory"])
attempt("set_last", lambda: rt.set_device(rt.device_count() - 1) or rt.mem_get_info())
attempt("set_past_end", lambda: rt.set_device(rt.device_count()))
attempt("malloc", rt.malloc, 16)
print(json.dumps(out))
"""


def _probe(env):
    res = run_python(ENV_PROBE, env=env, timeout=60, clean_openreg_env=True)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.runtime
class TestEnvironment:
    def test_invalid_device_memory(self):
        out = _probe({"OPENREG_DEVICE_MEMORY": "banana"})
        name, msg = out["count"]
        assert name == "orErrorInitializationError"
        assert "OPENREG_DEVICE_MEMORY='banana'" in msg
        assert out["malloc"][0] == "orErrorInitializationError"
        assert "OPENREG_DEVICE_MEMORY" in out["malloc"][1]

    def test_three_devices_with_suffix(self):
        out = _probe({"OPENREG_DEVICE_COUNT": "3", "OPENREG_DEVICE_MEMORY": "256M"})
        assert out["count"] == ["ok", 3]
        assert out["props_last"] == ["ok", 256 << 20]
        assert out["set_last"] == ["ok", [256 << 20, 256 << 20]]
        assert out["set_past_end"][0] == "orErrorInvalidDevice"
        assert "ordinal 3" in out["set_past_end"][1]
        assert out["malloc"][0] == "ok"

    @pytest.mark.parametrize("value, expected", [
        ("64MiB", 64 << 20), ("1g", 1 << 30), ("3000000", 3002368), ("2048K", 2 << 20),
    ])
    def test_size_suffixes(self, value, expected):
        out = _probe({"OPENREG_DEVICE_MEMORY": value, "OPENREG_DEVICE_COUNT": "1"})
        assert out["count"] == ["ok", 1]
        assert out["props_last"] == ["ok", expected]

    @pytest.mark.parametrize("env, var", [
        ({"OPENREG_DEVICE_MEMORY": "512K"}, "OPENREG_DEVICE_MEMORY"),  # below 1M
        ({"OPENREG_DEVICE_COUNT": "many"}, "OPENREG_DEVICE_COUNT"),
        ({"OPENREG_DEVICE_COUNT": "17"}, "OPENREG_DEVICE_COUNT"),
    ])
    def test_other_invalid_values(self, env, var):
        out = _probe(env)
        name, msg = out["count"]
        assert name == "orErrorInitializationError"
        assert var in msg
