"""Device and pinned host memory: allocation, alignment, accounting, out-of-memory,
pointer attributes and invalid frees."""

import pytest

from tests.runtime._helpers import (
    ALIGN,
    MB,
    HostBuf,
    on_device,
    round_up,
    rt,
)
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

OpenRegError = rt.OpenRegError


# ---------------------------------------------------------------- memory
@pytest.mark.runtime
class TestMemory:
    hw_classification = HW.ACCELERATOR

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
