"""The runtime smoke subset: memory round trip, stream and event order, an asynchronous error."""

import pytest

from tests.runtime._helpers import (
    ALIGN,
    call_with_timeout,
    d2h,
    h2d,
    rt,
    sync_event,
    sync_stream,
)
from tests import target
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

OpenRegError = rt.OpenRegError


# ---------------------------------------------------------------- smoke
@pytest.mark.runtime
@pytest.mark.smoke
class TestSmoke:
    hw_classification = HW.ACCELERATOR

    def test_device_memory_round_trip(self):
        p = rt.malloc(1000)
        try:
            if target.MEMCHECK:  # ends at a guard page (docs/memcheck.md)
                assert (p + 1000) % 4096 == 0 and p % 8 == 0
            else:
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
