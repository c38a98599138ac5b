"""Kernels: synchronous, inline and queued launches, and readiness while they run."""

import ctypes
import threading
import time

import pytest

from tests.runtime._helpers import (
    call_with_timeout,
    d2h,
    gates,
    on_device,
    rt,
    sync_stream,
    wait_until,
)
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only


# ---------------------------------------------------------------- kernels
@pytest.mark.runtime
class TestKernels:
    hw_classification = HW.ACCELERATOR

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
            # Read the stop flag before the query: the last sample is then
            # taken after the launch returned, so it must say ready. (Checked
            # after the query, a sample taken while the kernel ran could be
            # appended last when the poller is descheduled across the end.)
            while True:
                last = stop.is_set()
                seen.append(rt.stream_query(stream))
                if last:
                    break

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


# ---------------------------------------------------------------- never inline
@pytest.mark.runtime
class TestLaunchNeverInline:
    """orLaunchNeverInline: even on an idle stream the kernel runs on a device
    worker, so a launch of work that may block (a collective waiting for its
    peers) returns at once. Without the flag, an idle stream runs the kernel
    inline on the calling thread (the fast path), which blocks the caller."""
    hw_classification = HW.ACCELERATOR

    def test_runs_on_a_worker_and_the_launch_returns_at_once(self, stream):
        g = rt.Gate()
        box = {}

        def launch():
            box["caller"] = rt.this_thread_id()
            box["ran_on"] = rt.launch_gate_kernel(stream, g, rt.LaunchNeverInline)

        try:
            call_with_timeout(launch, timeout=5)  # returns although the gate is shut
            assert not rt.stream_query(stream)  # running: not ready
            deadline = time.monotonic() + 5
            while not box["ran_on"]() and time.monotonic() < deadline:
                time.sleep(0.001)
            assert box["ran_on"]() not in (0, box["caller"])  # on a device worker
            assert g.entered
        finally:
            g.release()
        sync_stream(stream)
        assert rt.stream_query(stream)

    def test_default_launch_on_an_idle_stream_runs_inline(self, stream):
        g = rt.Gate()
        g.release()  # an open gate: the kernel returns at once
        box = {}

        def launch():
            box["caller"] = rt.this_thread_id()
            box["ran_on"] = rt.launch_gate_kernel(stream, g, rt.LaunchDefault)

        call_with_timeout(launch)
        sync_stream(stream)
        assert box["ran_on"]() == box["caller"]  # the fast path: on the caller's thread


# ---------------------------------------------------------------- may defer
@pytest.mark.runtime
class TestLaunchMayDefer:
    """orLaunchMayDefer: on an idle stream the kernel is first tried inline on
    the calling thread; there it may give up (orErrorNotReady), and then a
    device worker calls it again, in stream order, while the stream stays
    busy. OCCL launches its small collectives this way."""
    hw_classification = HW.ACCELERATOR

    def test_finishing_attempt_runs_inline(self, stream):
        g = rt.Gate()
        g.release()
        box = {}

        def launch():
            box["caller"] = rt.this_thread_id()
            box["calls"] = rt.launch_defer_kernel(stream, g, defer=False)

        call_with_timeout(launch)
        sync_stream(stream)
        assert box["calls"]() == [box["caller"]]  # once, on the caller: no thread hop

    def test_given_up_attempt_finishes_on_a_worker_in_stream_order(self, stream):
        g = rt.Gate()
        box = {}
        log = rt.Log()

        def launch():
            box["caller"] = rt.this_thread_id()
            box["calls"] = rt.launch_defer_kernel(stream, g, defer=True)

        try:
            call_with_timeout(launch, timeout=5)  # returns although the gate is shut
            rt.launch_log(stream, log, 1)  # queued behind the deferred kernel
            assert not rt.stream_query(stream)  # busy between the attempt and the worker
            assert wait_until(lambda: len(box["calls"]()) == 2 and g.entered)
            calls = box["calls"]()
            assert calls[0] == box["caller"] and calls[1] not in (0, box["caller"])
            time.sleep(0.01)
            assert log.values == []  # stream order: the later item waits
            assert not rt.stream_query(stream)
        finally:
            g.release()
        sync_stream(stream)
        assert log.values == [1]
        assert rt.stream_query(stream)

    def test_busy_stream_queues_without_an_attempt(self, stream):
        g = rt.Gate()
        g.release()
        with gates() as gs:
            gs.launch(stream)
            calls = rt.launch_defer_kernel(stream, g, defer=True)
            time.sleep(0.01)
            assert calls() == []
            gs.release_all()
            sync_stream(stream)
        (only,) = calls()
        assert only != rt.this_thread_id()

    def test_not_ready_from_the_worker_is_a_failure(self, stream):
        g = rt.Gate()
        g.release()
        rt.launch_defer_kernel(stream, g, defer=True, not_ready_on_worker=True)
        with pytest.raises(rt.OpenRegError) as ei:
            sync_stream(stream)
        assert "defer_kernel" in str(ei.value)
        sync_stream(stream)
        assert rt.stream_query(stream)

    @pytest.mark.parametrize("other", ["LaunchSynchronous", "LaunchNeverInline"])
    def test_rejects_contradictory_flags(self, stream, other):
        g = rt.Gate()
        g.release()
        with pytest.raises(rt.OpenRegError) as ei:
            rt.launch_defer_kernel(stream, g, defer=False,
                                   flags=rt.LaunchMayDefer | getattr(rt, other))
        assert "orLaunchMayDefer" in str(ei.value)


# ---------------------------------------------------------------- lock-free claim
@pytest.mark.runtime
class TestLockFreeClaim:
    """A synchronous launch claims an idle stream it has used before without the
    scheduler lock. Streams must still run one item at a time, in order, and host
    waiters must still be woken."""
    hw_classification = HW.ACCELERATOR

    @pytest.mark.parametrize("threads", [1, 4])
    def test_many_threads_on_one_stream_run_one_kernel_at_a_time(self, stream, threads):
        iters = 3000
        count, overlaps, failed = call_with_timeout(rt.stress_stream, stream, threads, iters,
                                                    timeout=60)
        assert (count, overlaps, failed) == (threads * iters, 0, 0)

    def test_default_stream_under_contention(self):
        count, overlaps, failed = call_with_timeout(rt.stress_stream, 0, 4, 2000, timeout=60)
        assert (count, overlaps, failed) == (8000, 0, 0)

    def test_stream_synchronize_waits_for_a_lock_free_launch(self, stream):
        n = 16 * (1 << 20)  # 64 MiB of int32: tens of milliseconds
        p = rt.malloc(4 * n)
        try:
            known, go, done = threading.Event(), threading.Event(), threading.Event()

            def launch():
                rt.launch_fill_i32(stream, p, 16, 1, True)  # this thread now knows the stream
                known.set()
                go.wait(20)
                rt.launch_fill_i32(stream, p, n, 7, True)  # claimed without the lock
                done.set()

            t = threading.Thread(target=launch, daemon=True)
            t.start()
            # Only after the first launch has returned: the stream can then be busy
            # only with the large kernel.
            assert known.wait(20)
            go.set()
            assert wait_until(lambda: done.is_set() or rt.stream_query(stream) is False)
            sync_stream(stream)
            # The synchronize returned after the kernel: its last bytes are written.
            tail = (ctypes.c_int32 * 4).from_buffer_copy(d2h(p + 4 * (n - 4), 16))
            assert list(tail) == [7] * 4
            t.join(20)
        finally:
            rt.free(p)

    def test_launch_on_a_destroyed_stream_fails_even_after_fast_launches(self, dev_block):
        s = rt.stream_create(0)
        for _ in range(3):
            rt.launch_fill_i32(s, dev_block, 4, 1, True)
        call_with_timeout(rt.stream_destroy, s)
        with pytest.raises(rt.OpenRegError) as ei:
            rt.launch_fill_i32(s, dev_block, 4, 2, True)
        assert ei.value.name == "orErrorInvalidResourceHandle"
        assert "not a live stream" in str(ei.value)
        assert (ctypes.c_int32 * 4).from_buffer_copy(d2h(dev_block, 16))[:] == [1] * 4

    def test_destroyed_streams_are_reused_as_new_streams(self, dev_block):
        # Stream objects are recycled, never freed: a new stream may get the old
        # handle, and it starts idle, with a new id.
        s = rt.stream_create(0)
        rt.launch_fill_i32(s, dev_block, 4, 1, True)
        old_id = rt.stream_id(s)
        call_with_timeout(rt.stream_destroy, s)
        s2 = rt.stream_create(0)
        try:
            assert rt.stream_query(s2) is True and rt.stream_id(s2) != old_id
            rt.launch_fill_i32(s2, dev_block, 4, 3, True)
            assert (ctypes.c_int32 * 4).from_buffer_copy(d2h(dev_block, 16))[:] == [3] * 4
        finally:
            call_with_timeout(rt.stream_destroy, s2)
