"""The runtime's activity trace (what the profiler reads): records, correlation ids."""

import pytest

from tests.runtime._helpers import (
    HostBuf,
    gates,
    on_device,
    rt,
    sync_stream,
)
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only


# ---------------------------------------------------------------- tracing
@pytest.mark.runtime
class TestTracing:
    hw_classification = HW.ACCELERATOR

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

    def test_untraced_kernels_run_in_order_but_leave_no_record(self, stream, dev_block):
        # orLaunchUntraced: the backend's own bookkeeping (the ASan
        # allocator's poisoning) runs in stream order, off the trace.
        traced, untraced = rt.Gate(), rt.Gate()
        rt.trace_start()
        try:
            ran_traced = rt.launch_gate_kernel(stream, traced, rt.LaunchNeverInline)
            ran_untraced = rt.launch_gate_kernel(
                stream, untraced, rt.LaunchNeverInline | rt.LaunchUntraced)
            rt.memset_async(dev_block, 1, 16, stream)
            traced.release()
            untraced.release()
            sync_stream(stream)
        finally:
            records = rt.trace_stop()
        assert ran_traced() and ran_untraced() and untraced.entered
        assert [r["name"] for r in records] == ["gate_kernel", "orMemsetAsync"], records

    def test_no_records_after_stop(self, dev_block):
        rt.trace_start()
        rt.trace_stop()
        rt.memset(dev_block, 1, 16)
        rt.trace_start()
        assert rt.trace_stop() == []


@pytest.mark.runtime
class TestTraceSubscribers:
    hw_classification = HW.ACCELERATOR

    def test_two_subscribers_see_the_same_work(self):
        a, b = rt.TraceRecorder(), rt.TraceRecorder()
        p = rt.malloc(4096)
        try:
            a.start()
            b.start()
            rt.set_correlation_id(77)
            rt.memset(p, 1, 4096)
            rt.set_correlation_id(0)
            first = b.stop()  # b unsubscribes; a keeps listening
            rt.memset(p, 2, 512)
            second = a.stop()
        finally:
            rt.free(p)
        assert [(r["kind"], r["bytes"], r["correlation"]) for r in first] == [("memset", 4096, 77)]
        assert [(r["kind"], r["bytes"]) for r in second] == [("memset", 4096), ("memset", 512)]
        for r in second:
            assert r["launch_ns"] <= r["start_ns"] <= r["end_ns"]
            assert r["launch_thread"] > 0

    def test_stop_without_start_and_twice_is_harmless(self):
        r = rt.TraceRecorder()
        assert r.stop() == []
        r.start()
        r.start()  # already subscribed: one subscription
        p = rt.malloc(512)
        try:
            rt.memset(p, 0, 512)
        finally:
            rt.free(p)
        assert len(r.stop()) == 1
        assert r.stop() == []


@pytest.mark.runtime
class TestLaunchAnnotations:
    hw_classification = HW.ACCELERATOR

    def test_annotation_goes_to_the_next_launch_only(self):
        rec = rt.TraceRecorder()
        p = rt.malloc(4096)
        try:
            assert not rt.trace_is_active()
            rt.set_launch_annotation('Collective name="test"\nGroup size=2')  # not tracing: dropped
            rec.start()
            assert rt.trace_is_active()
            rt.memset(p, 0, 512)
            rt.set_launch_annotation('Collective name="test"\nGroup size=2')
            rt.memset(p, 1, 1024)
            rt.memset(p, 2, 2048)
            records = rec.stop()
        finally:
            rt.free(p)
        assert [(r["bytes"], r["annotation"]) for r in records] == [
            (512, ""), (1024, 'Collective name="test"\nGroup size=2'), (2048, "")]

    def test_an_annotation_left_when_tracing_stops_goes_with_the_next_launch(self):
        # The launch in between is untraced, a synchronous kernel on an idle
        # stream this thread launched on before: the hot path, which builds
        # no work item, still consumes the annotation.
        rec = rt.TraceRecorder()
        s = rt.stream_create(0)
        p = rt.malloc(4096)
        try:
            rt.launch_fill_i32(s, p, 16, 1, True)
            rec.start()
            rt.set_launch_annotation("left behind")
            rec.stop()
            rt.launch_fill_i32(s, p, 16, 2, True)
            rec.start()
            rt.launch_fill_i32(s, p, 16, 3, True)
            records = rec.stop()
        finally:
            rt.free(p)
            rt.stream_destroy(s)
        assert [(r["name"], r["annotation"]) for r in records] == [("fill_i32", "")]
