"""Copies and memset: synchronous copies of every kind (and the wrong kinds),
asynchronous copies on streams.

Synchronous copies are in ``TestCopies``, asynchronous ones in ``TestAsyncMemcpy``."""

import ctypes
import threading
import time

import pytest

from tests.runtime._helpers import (
    HostBuf,
    call_with_timeout,
    d2h,
    gates,
    h2d,
    on_device,
    rt,
    sync_stream,
)
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

OpenRegError = rt.OpenRegError


# ---------------------------------------------------------------- synchronous copies
@pytest.mark.runtime
class TestCopies:
    hw_classification = HW.ACCELERATOR

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


# ---------------------------------------------------------------- async copies
@pytest.mark.runtime
class TestAsyncMemcpy:
    hw_classification = HW.ACCELERATOR

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
