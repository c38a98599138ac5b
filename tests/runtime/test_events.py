"""Events: readiness, timing, flags, and waits across streams and devices."""

import time

import pytest

from tests.runtime._helpers import (
    call_with_timeout,
    gates,
    on_device,
    rt,
    sync_event,
    sync_stream,
)
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

OpenRegError = rt.OpenRegError


# ---------------------------------------------------------------- events
@pytest.mark.runtime
class TestEvents:
    hw_classification = HW.ACCELERATOR

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
