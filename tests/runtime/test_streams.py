"""Streams: priorities, readiness, in-order execution, the default stream, destruction."""

import time

import pytest

from tests.runtime._helpers import (
    call_with_timeout,
    gates,
    rt,
    sync_stream,
    wait_until,
)
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

OpenRegError = rt.OpenRegError


# ---------------------------------------------------------------- streams
@pytest.mark.runtime
class TestStreams:
    hw_classification = HW.ACCELERATOR

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
