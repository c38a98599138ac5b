"""Asynchronous errors: failing kernels and illegal addresses in queued work, reported
at the next synchronisation (stream, event or device), once."""

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


# ---------------------------------------------------------------- async errors
@pytest.mark.runtime
class TestAsyncErrors:
    hw_classification = HW.ACCELERATOR

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

    def test_a_kernel_says_why_it_failed(self, stream):
        # orKernelSetErrorMessage: the reason is in the stream's error, for a
        # queued launch (reported at synchronize) and a synchronous one.
        rt.launch_failing_kernel(stream, reason="the peer never answered (rank 1)")
        with pytest.raises(OpenRegError) as ei:
            sync_stream(stream)
        msg = str(ei.value)
        assert "kernel 'fails_saying_why' failed: the peer never answered (rank 1)" in msg
        assert ei.value.name == "orErrorLaunchFailure"
        with pytest.raises(OpenRegError, match="failed: right now"):
            call_with_timeout(rt.launch_failing_kernel, stream, True, "right now")
        # Outside a kernel the call does nothing (and refuses NULL: not reachable here).
        rt.kernel_set_error_message_outside_a_kernel("ignored")
        rt.launch_failing_kernel(stream)
        with pytest.raises(OpenRegError, match="kernel 'always_fails' failed: unspecified launch failure"):
            sync_stream(stream)

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


@pytest.mark.runtime
class TestHugeSizes:
    """Sizes so large that pointer + size wraps around: refused by the range
    checks, never run (found by tests/runtime/test_fuzz_api.py: orMemset(p, v,
    SIZE_MAX) passed the check and wrote over the device's memory). In a child
    process, since without the fix the call brings the process down."""
    hw_classification = HW.ACCELERATOR

    def test_wrapping_ranges_are_refused(self):
        from tests._subprocess import run_python
        from tests.runtime._helpers import CHILD_PRELUDE

        code = CHILD_PRELUDE + (
            "p = rt.malloc(4096)\n"
            "host = ctypes.create_string_buffer(64)\n"
            "h = ctypes.addressof(host)\n"
            "calls = [lambda: rt.memset(p, 0x5A, 2**64 - 1),\n"
            "         lambda: rt.memset(p + 100, 0, 2**64 - 100),\n"
            "         lambda: rt.memcpy(p, p + 512, 2**64 - 1, rt.DeviceToDevice),\n"
            "         lambda: rt.memcpy(h, p, 2**64 - 8, rt.DeviceToHost),\n"
            "         lambda: rt.memcpy(p, h, 2**63, rt.HostToDevice)]\n"
            "for call in calls:\n"
            "    try:\n"
            "        call()\n"
            "    except rt.OpenRegError as e:\n"
            "        assert e.name == 'orErrorInvalidValue' and 'overruns' in str(e), e\n"
            "    else:\n"
            "        raise AssertionError('a wrapping range was accepted')\n"
            "rt.free(p)\n"
            "print('OK')\n")
        res = run_python(code, timeout=60)
        assert res.returncode == 0 and res.stdout.strip() == "OK", (res.returncode, res.stderr[-2000:])
