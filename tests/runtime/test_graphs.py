"""Stream capture and graphs in the runtime (orStreamBeginCapture ...
orGraphLaunch), as CUDA's: recorded work does not run, a replay runs it in
capture order on the launch stream, fork and join through events, and the
calls that cannot work during a capture fail and invalidate it."""

import struct
import threading

import pytest

from tests.runtime._helpers import call_with_timeout, d2h, gates, h2d, rt, sync_stream
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

OpenRegError = rt.OpenRegError
NONE, ACTIVE, INVALIDATED = 0, 1, 2


def ints(values):
    return struct.pack(f"<{len(values)}i", *values)


def read_ints(p, n):
    return list(struct.unpack(f"<{n}i", d2h(p, 4 * n)))


@pytest.fixture
def buf():
    p = rt.malloc(4096)
    h2d(p, ints([1] * 8))
    try:
        yield p
    finally:
        rt.free(p)


def capture(stream, record, mode=rt.CaptureModeGlobal):
    rt.stream_begin_capture(stream, mode)
    try:
        record()
    except BaseException:
        try:
            rt.stream_end_capture(stream)
        except OpenRegError:
            pass
        raise
    return rt.stream_end_capture(stream)


@pytest.mark.runtime
class TestCaptureAndReplay:
    hw_classification = HW.ACCELERATOR

    def test_recorded_work_runs_only_at_replay_in_capture_order(self, stream, buf):
        counter = rt.OwnedCounter()

        def record():
            rt.launch_axpy_i32(stream, buf, 8, 2, 0, counter=counter)   # x*2
            rt.launch_axpy_i32(stream, buf, 8, 1, 3, counter=counter)   # +3
            assert rt.stream_is_capturing(stream) == ACTIVE
        g = capture(stream, record)
        try:
            assert rt.stream_is_capturing(stream) == NONE
            assert rt.graph_node_count(g) == 2
            sync_stream(stream)
            assert counter.runs == 0 and read_ints(buf, 8) == [1] * 8  # recorded, not run
            x = rt.graph_instantiate(g)
            try:
                for expected in (5, 13, 29):  # (x*2)+3, three replays
                    rt.graph_launch(x, stream)
                    sync_stream(stream)
                    assert read_ints(buf, 8) == [expected] * 8
                assert counter.runs == 6
            finally:
                rt.graph_exec_destroy(x)
        finally:
            rt.graph_destroy(g)
        assert counter.freed == 2  # owned arguments go with the last graph

    def test_synchronous_flag_is_recorded_too(self, stream, buf):
        g = capture(stream, lambda: rt.launch_axpy_i32(stream, buf, 8, 1, 1,
                                                       flags=rt.LaunchSynchronous))
        x = rt.graph_instantiate(g)
        rt.graph_destroy(g)  # the executable graph keeps the nodes
        assert read_ints(buf, 8) == [1] * 8
        rt.graph_launch(x, stream)
        sync_stream(stream)
        assert read_ints(buf, 8) == [2] * 8
        rt.graph_exec_destroy(x)

    def test_copies_and_memsets_are_recorded(self, stream, buf):
        other = rt.malloc(4096)
        try:
            def record():
                rt.memset_async(other, 0, 32, stream)
                rt.launch_axpy_i32(stream, buf, 8, 1, 4)
                rt.memcpy_async(other, buf, 16, 3, stream)  # device to device, 4 ints
            g = capture(stream, record)
            h2d(other, ints([7] * 8))
            assert read_ints(other, 8) == [7] * 8
            x = rt.graph_instantiate(g)
            rt.graph_launch(x, stream)
            sync_stream(stream)
            assert read_ints(other, 8) == [5] * 4 + [0] * 4
            rt.graph_exec_destroy(x)
            rt.graph_destroy(g)
        finally:
            rt.free(other)

    def test_replay_is_ordered_with_other_work_on_its_stream(self, stream, buf):
        g = capture(stream, lambda: rt.launch_axpy_i32(stream, buf, 8, 10, 0))
        x = rt.graph_instantiate(g)
        with gates() as gs:
            gs.launch(stream)                               # holds the stream
            rt.launch_axpy_i32(stream, buf, 8, 1, 1)        # 1 -> 2
            rt.graph_launch(x, stream)                      # 2 -> 20
            rt.launch_axpy_i32(stream, buf, 8, 1, 1)        # 20 -> 21
            assert read_ints(buf, 8) == [1] * 8
        sync_stream(stream)
        assert read_ints(buf, 8) == [21] * 8
        rt.graph_exec_destroy(x)
        rt.graph_destroy(g)

    def test_replay_from_another_thread_and_another_stream(self, stream, stream2, buf):
        g = capture(stream, lambda: rt.launch_axpy_i32(stream, buf, 8, 1, 1))
        x = rt.graph_instantiate(g)
        t = threading.Thread(target=lambda: [rt.graph_launch(x, stream2) for _ in range(5)])
        t.start()
        t.join(20)
        assert not t.is_alive()
        sync_stream(stream2)
        assert read_ints(buf, 8) == [6] * 8
        rt.graph_exec_destroy(x)
        rt.graph_destroy(g)

    def test_trace_reports_the_launch_and_the_nodes(self, stream, buf):
        g = capture(stream, lambda: [rt.launch_axpy_i32(stream, buf, 8, 1, 1) for _ in range(3)])
        x = rt.graph_instantiate(g)
        rt.trace_start()
        try:
            rt.set_correlation_id(77)
            rt.graph_launch(x, stream)
            rt.set_correlation_id(0)
            sync_stream(stream)
        finally:
            records = rt.trace_stop()
        launch = [r for r in records if r["kind"] == "graph"]
        nodes = [r for r in records if r["name"] == "axpy_i32"]
        assert len(launch) == 1 and len(nodes) == 3
        assert {r["correlation"] for r in launch + nodes} == {77}
        assert {r["stream"] for r in launch + nodes} == {rt.stream_id(stream)}
        assert all(launch[0]["start_ns"] <= r["start_ns"] <= r["end_ns"] <= launch[0]["end_ns"]
                   for r in nodes)
        rt.graph_exec_destroy(x)
        rt.graph_destroy(g)

    def test_dot_dump(self, stream, stream2, buf, tmp_path):
        def record():
            e1, e2 = rt.event_create(), rt.event_create()
            rt.launch_axpy_i32(stream, buf, 4, 1, 1)
            rt.event_record(e1, stream)
            rt.stream_wait_event(stream2, e1)                 # fork
            rt.launch_axpy_i32(stream2, buf + 16, 4, 1, 1)
            rt.memset_async(buf + 64, 0, 8, stream)
            rt.event_record(e2, stream2)
            rt.stream_wait_event(stream, e2)                  # join
            rt.launch_axpy_i32(stream, buf, 8, 1, 1)
            rt.event_destroy(e1)
            rt.event_destroy(e2)
        g = capture(stream, record)
        path = tmp_path / "g.dot"
        rt.graph_debug_dot_print(g, str(path))
        dot = path.read_text()
        assert dot.startswith("digraph openreg_graph {") and dot.rstrip().endswith("}")
        assert dot.count("kernel\\naxpy_i32") == 3 and "memset 0\\n8 bytes" in dot
        # fork: 0 -> 1 (stream2), 0 -> 2 (memset); join: 1 -> 3 and 2 -> 3
        for edge in ("n0 -> n1;", "n0 -> n2;", "n1 -> n3;", "n2 -> n3;"):
            assert edge in dot, dot
        with pytest.raises(OpenRegError, match="cannot write"):
            rt.graph_debug_dot_print(g, str(tmp_path / "missing" / "g.dot"))
        rt.graph_destroy(g)


@pytest.mark.runtime
class TestForkAndJoin:
    hw_classification = HW.ACCELERATOR

    def test_forked_stream_joins_and_replays_in_order(self, stream, stream2, buf):
        def record():
            e1, e2 = rt.event_create(), rt.event_create()
            rt.launch_axpy_i32(stream, buf, 8, 2, 0)            # x*2
            rt.event_record(e1, stream)
            rt.stream_wait_event(stream2, e1)
            assert rt.stream_is_capturing(stream2) == ACTIVE    # joined
            rt.launch_axpy_i32(stream2, buf, 8, 1, 5)           # +5
            rt.event_record(e2, stream2)
            rt.stream_wait_event(stream, e2)
            rt.launch_axpy_i32(stream, buf, 8, 3, 0)            # *3
            rt.event_destroy(e1)
            rt.event_destroy(e2)
        g = capture(stream, record)
        assert rt.stream_is_capturing(stream2) == NONE          # the capture ended for both
        x = rt.graph_instantiate(g)
        rt.graph_launch(x, stream)
        sync_stream(stream)
        assert read_ints(buf, 8) == [21] * 8                    # ((1*2)+5)*3
        rt.graph_exec_destroy(x)
        rt.graph_destroy(g)

    def test_unjoined_fork_fails_the_end(self, stream, stream2, buf):
        e = rt.event_create()
        rt.stream_begin_capture(stream)
        rt.launch_axpy_i32(stream, buf, 8, 1, 1)
        rt.event_record(e, stream)
        rt.stream_wait_event(stream2, e)
        rt.launch_axpy_i32(stream2, buf, 8, 1, 1)
        with pytest.raises(OpenRegError, match=r"did not join back") as ei:
            rt.stream_end_capture(stream)
        assert ei.value.name == "orErrorStreamCaptureUnjoined"
        assert rt.stream_is_capturing(stream) == NONE == rt.stream_is_capturing(stream2)
        rt.event_destroy(e)

    def test_ending_on_the_joined_stream_is_refused(self, stream, stream2, buf):
        e = rt.event_create()
        rt.stream_begin_capture(stream)
        rt.event_record(e, stream)
        rt.stream_wait_event(stream2, e)
        with pytest.raises(OpenRegError, match="end it there") as ei:
            rt.stream_end_capture(stream2)
        assert ei.value.name == "orErrorStreamCaptureUnmatched"
        with pytest.raises(OpenRegError) as ei:
            rt.stream_end_capture(stream)
        assert ei.value.name == "orErrorStreamCaptureInvalidated"
        rt.event_destroy(e)

    def test_waiting_on_work_outside_the_capture_is_refused(self, stream, stream2, buf):
        e = rt.event_create()
        rt.launch_axpy_i32(stream2, buf, 8, 1, 1)
        rt.event_record(e, stream2)
        rt.stream_begin_capture(stream)
        with pytest.raises(OpenRegError, match="outside the capture") as ei:
            rt.stream_wait_event(stream, e)
        assert ei.value.name == "orErrorStreamCaptureIsolation"
        assert rt.stream_is_capturing(stream) == INVALIDATED
        with pytest.raises(OpenRegError):
            rt.stream_end_capture(stream)
        sync_stream(stream2)
        rt.event_destroy(e)


@pytest.mark.runtime
class TestIllegalDuringCapture:
    """Each illegal call fails with its error, invalidates the capture (later
    work on the stream fails too), and the end reports the first reason; the
    stream is usable again afterwards."""
    hw_classification = HW.ACCELERATOR

    @pytest.fixture(autouse=True)
    def _scratch(self):
        self.scratch = rt.malloc(64)
        yield
        rt.free(self.scratch)

    def end_invalidated(self, stream, reason):
        assert rt.stream_is_capturing(stream) == INVALIDATED
        with pytest.raises(OpenRegError, match="was invalidated") as ei:
            rt.launch_axpy_i32(stream, self.scratch, 1, 1, 1)
        assert ei.value.name == "orErrorStreamCaptureInvalidated"
        with pytest.raises(OpenRegError, match=reason) as ei:
            rt.stream_end_capture(stream)
        assert ei.value.name == "orErrorStreamCaptureInvalidated"
        assert rt.stream_is_capturing(stream) == NONE

    @pytest.mark.parametrize("call,name", [
        ("stream_synchronize", "orStreamSynchronize"),
        ("stream_query", "orStreamQuery"),
    ])
    def test_sync_and_query_of_the_capturing_stream(self, stream, buf, call, name):
        for mode in (rt.CaptureModeGlobal, rt.CaptureModeThreadLocal, rt.CaptureModeRelaxed):
            rt.stream_begin_capture(stream, mode)
            rt.launch_axpy_i32(stream, buf, 8, 1, 1)
            with pytest.raises(OpenRegError, match=f"{name}: stream .* is capturing") as ei:
                getattr(rt, call)(stream)
            assert ei.value.name == "orErrorStreamCaptureUnsupported"
            self.end_invalidated(stream, name)
        assert read_ints(buf, 8) == [1] * 8  # nothing half-run

    @pytest.mark.parametrize("call", ["device_synchronize", "memcpy_d2h", "memset"])
    def test_unsafe_calls_by_mode(self, stream, buf, call):
        def do():
            if call == "device_synchronize":
                rt.device_synchronize()
            elif call == "memcpy_d2h":
                d2h(buf, 16)
            else:
                rt.memset(buf + 64, 0, 16)
        for mode in (rt.CaptureModeGlobal, rt.CaptureModeThreadLocal):
            rt.stream_begin_capture(stream, mode)
            with pytest.raises(OpenRegError, match="not permitted while stream") as ei:
                do()
            assert ei.value.name == "orErrorStreamCaptureUnsupported"
            self.end_invalidated(stream, "during the capture")
        rt.stream_begin_capture(stream, rt.CaptureModeRelaxed)
        do()  # relaxed: allowed
        g = rt.stream_end_capture(stream)
        rt.graph_destroy(g)

    def test_unsafe_call_from_another_thread(self, stream, buf):
        errors = []

        def other():
            try:
                rt.device_synchronize()
            except OpenRegError as e:
                errors.append(e)

        for mode, fails in ((rt.CaptureModeGlobal, True), (rt.CaptureModeThreadLocal, False)):
            rt.stream_begin_capture(stream, mode)
            t = threading.Thread(target=other)
            t.start()
            t.join(20)
            assert not t.is_alive()
            if fails:
                assert len(errors) == 1 and "begun by another thread" in str(errors[0])
                self.end_invalidated(stream, "called from another thread")
            else:
                assert len(errors) == 1  # still the global one: thread-local lets it
                rt.graph_destroy(rt.stream_end_capture(stream))

    def test_borrowed_kernel_arguments_cannot_be_recorded(self, stream, buf):
        rt.stream_begin_capture(stream)
        with pytest.raises(OpenRegError, match="orLaunchKernelOwned") as ei:
            rt.launch_fill_i32(stream, buf, 8, 9)
        assert ei.value.name == "orErrorStreamCaptureUnsupported"
        self.end_invalidated(stream, "whose arguments the caller owns")
        sync_stream(stream)
        assert read_ints(buf, 8) == [1] * 8

    def test_captured_event_query_sync_and_timing(self, stream):
        e = rt.event_create()
        for call in ("event_query", "event_synchronize"):
            rt.stream_begin_capture(stream)
            rt.event_record(e, stream)
            with pytest.raises(OpenRegError, match="last recorded in a capturing stream") as ei:
                getattr(rt, call)(e)
            assert ei.value.name == "orErrorCapturedEvent"
            self.end_invalidated(stream, "on an event recorded in the capture")
        # After the capture the event still names it: as CUDA, until re-recorded.
        with pytest.raises(OpenRegError) as ei:
            rt.event_query(e)
        assert ei.value.name == "orErrorCapturedEvent"
        rt.event_record(e, stream)
        sync_stream(stream)
        assert rt.event_query(e)
        rt.event_destroy(e)

    def test_default_stream_and_double_begin(self, stream):
        with pytest.raises(OpenRegError, match="default stream .* cannot be captured") as ei:
            rt.stream_begin_capture(0)
        assert ei.value.name == "orErrorStreamCaptureUnsupported"
        rt.stream_begin_capture(stream)
        with pytest.raises(OpenRegError, match="already capturing"):
            rt.stream_begin_capture(stream)
        with pytest.raises(OpenRegError, match="unknown capture mode"):
            rt.stream_begin_capture(0, 7)
        g = rt.stream_end_capture(stream)
        assert rt.graph_node_count(g) == 0
        rt.graph_destroy(g)
        with pytest.raises(OpenRegError, match="is not capturing"):
            rt.stream_end_capture(stream)

    def test_end_from_another_thread(self, stream):
        for mode, error in ((rt.CaptureModeGlobal, "orErrorStreamCaptureWrongThread"),
                            (rt.CaptureModeRelaxed, None)):
            rt.stream_begin_capture(stream, mode)
            box = {}

            def end():
                try:
                    box["graph"] = rt.stream_end_capture(stream)
                except OpenRegError as e:
                    box["error"] = e
            t = threading.Thread(target=end)
            t.start()
            t.join(20)
            if error:
                assert box["error"].name == error
                rt.graph_destroy(rt.stream_end_capture(stream))  # the right thread can
            else:
                rt.graph_destroy(box["graph"])

    def test_destroying_a_capturing_stream(self, buf):
        s = rt.stream_create(0)
        rt.stream_begin_capture(s)
        rt.launch_axpy_i32(s, buf, 8, 1, 1)
        call_with_timeout(rt.stream_destroy, s)
        s2 = rt.stream_create(0)  # the runtime is fine; the work never ran
        sync_stream(s2)
        assert read_ints(buf, 8) == [1] * 8
        call_with_timeout(rt.stream_destroy, s2)


@pytest.mark.runtime
class TestGraphHandles:
    hw_classification = HW.ACCELERATOR

    def test_invalid_handles(self, stream):
        for call, args in (("graph_instantiate", (0,)), ("graph_launch", (12345, stream)),
                           ("graph_destroy", (0,)), ("graph_exec_destroy", (0,)),
                           ("graph_node_count", (8,))):
            with pytest.raises(OpenRegError, match="is not a live") as ei:
                getattr(rt, call)(*args)
            assert ei.value.name == "orErrorInvalidResourceHandle"
        g = capture(stream, lambda: None)
        rt.graph_destroy(g)
        with pytest.raises(OpenRegError, match="is not a live graph"):
            rt.graph_destroy(g)

    def test_a_failing_node_is_reported_by_the_stream(self, stream):
        # A copy node checks its ranges when it runs: memory freed after the
        # capture fails the replay, asynchronously, naming the node.
        q = rt.malloc(64)
        g = capture(stream, lambda: rt.memcpy_async(q, q, 64, 3, stream))
        x = rt.graph_instantiate(g)
        rt.free(q)
        rt.graph_launch(x, stream)
        with pytest.raises(OpenRegError, match=r"graph node 0 \('orMemcpyAsync'\)") as ei:
            sync_stream(stream)
        assert ei.value.name == "orErrorIllegalAddress"
        rt.graph_exec_destroy(x)
        rt.graph_destroy(g)

    def test_many_replays_keep_memory_flat(self, stream, buf):
        counter = rt.OwnedCounter()
        g = capture(stream, lambda: rt.launch_axpy_i32(stream, buf, 8, 1, 1, counter=counter))
        x = rt.graph_instantiate(g)
        for _ in range(1000):
            rt.graph_launch(x, stream)
        sync_stream(stream)
        assert counter.runs == 1000 and counter.freed == 0
        assert read_ints(buf, 8) == [1001] * 8
        rt.graph_exec_destroy(x)
        rt.graph_destroy(g)
        assert counter.freed == 1
