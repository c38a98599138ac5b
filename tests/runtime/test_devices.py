"""Devices of the runtime: count, properties, the per-thread current device, invalid
ordinals, and error names."""

import threading

import pytest

from tests.runtime._helpers import on_device, rt
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

OpenRegError = rt.OpenRegError


# ---------------------------------------------------------------- devices
@pytest.mark.runtime
class TestDevices:
    hw_classification = HW.ACCELERATOR

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
