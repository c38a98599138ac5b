"""Streams, events and asynchronous copies through the PyTorch APIs."""

import time

import pytest
import torch

from tests import target
from tests.target import DEVICE, HW, busy, device


@pytest.mark.device
class TestStreams:
    hw_classification = HW.ACCELERATOR

    def test_default_and_current(self):
        d = target.device_module.default_stream()
        c = target.device_module.current_stream()
        assert d == c and d.stream_id == 0
        assert isinstance(c, target.device_module.Stream) and isinstance(c, torch.Stream)
        assert torch.accelerator.current_stream() == c

    def test_new_stream_and_context(self):
        s = target.device_module.Stream()
        assert s != target.device_module.default_stream()
        with target.device_module.stream(s):
            assert target.device_module.current_stream() == s
            assert torch.accelerator.current_stream() == s
        assert target.device_module.current_stream() == target.device_module.default_stream()
        with s:  # torch.Stream's own context manager
            assert target.device_module.current_stream() == s

    def test_stream_on_other_device(self):
        s1 = target.device_module.Stream(device=1)
        assert s1.device == torch.device(DEVICE, 1)
        with target.device_module.stream(s1):
            assert target.device_module.current_device() == 1
            t = torch.ones(2, device=DEVICE)
            assert t.device.index == 1
        assert target.device_module.current_device() == 0

    def test_set_stream(self):
        s = target.device_module.Stream()
        prev = target.device_module.current_stream()
        target.device_module.set_stream(s)
        try:
            assert target.device_module.current_stream() == s
        finally:
            target.device_module.set_stream(prev)

    @pytest.mark.openreg_only  # the wording is openreg's
    def test_a_cpu_stream_given_to_the_accelerator_says_what_is_wrong(self):
        # torch.accelerator.set_stream makes the stream's device current
        # before it checks the stream's type: the guard says the stream has
        # no device of this backend, not "invalid device index -1".
        prev = torch.accelerator.current_stream()
        with pytest.raises(RuntimeError, match="no device index") as e:
            torch.accelerator.set_stream(torch.Stream("cpu"))
        assert "CPU stream given to torch.accelerator.set_stream" in str(e.value)
        assert "-1" not in str(e.value)
        assert torch.accelerator.current_stream() == prev

    def test_priorities(self):
        least, greatest = target.device_module.Stream.priority_range()
        assert least == 0 and greatest < 0
        hi = target.device_module.Stream(priority=greatest)
        lo = target.device_module.Stream(priority=least)
        assert hi.priority == greatest and lo.priority == least
        # Out-of-range priorities are clamped, as in CUDA.
        assert target.device_module.Stream(priority=-100).priority == greatest

    def test_query_is_false_while_work_runs(self):
        s = target.device_module.Stream()
        with target.device_module.stream(s):
            busy(200_000)
        assert not s.query()
        s.synchronize()
        assert s.query()

    def test_work_on_one_stream_is_ordered(self):
        s = target.device_module.Stream()
        x = torch.zeros(1000, device=DEVICE)
        src = torch.arange(1000, dtype=torch.float32).pin_memory()
        with target.device_module.stream(s):
            busy(50_000)
            x.copy_(src, non_blocking=True)  # queued behind the sleep
            y = x * 2  # a kernel: runs after the copy
        s.synchronize()
        assert torch.equal(y.cpu(), src * 2)

    def test_stream_order_without_events_is_not_implied(self):
        # The default stream does not wait for another stream: a blocked side
        # stream leaves the default stream free to run.
        side = target.device_module.Stream()
        with target.device_module.stream(side):
            busy(300_000)
        t0 = time.perf_counter()
        torch.ones(10, device=DEVICE).sum().item()
        assert time.perf_counter() - t0 < 0.25
        assert not side.query()
        side.synchronize()


@pytest.mark.device
@pytest.mark.smoke
class TestEvents:
    hw_classification = HW.ACCELERATOR

    def test_wait_event_orders_streams(self):
        producer, consumer = target.device_module.Stream(), target.device_module.Stream()
        x = torch.zeros(100, device=DEVICE)
        src = torch.full((100,), 3.0).pin_memory()
        with target.device_module.stream(producer):
            busy(100_000)
            x.copy_(src, non_blocking=True)
            ev = target.device_module.Event()
            ev.record(producer)
        consumer.wait_event(ev)
        with target.device_module.stream(consumer):
            y = x + 1  # must see the copy
        consumer.synchronize()
        assert torch.equal(y.cpu(), torch.full((100,), 4.0))

    def test_wait_stream(self):
        a, b = target.device_module.Stream(), target.device_module.Stream()
        with target.device_module.stream(a):
            busy(50_000)
        b.wait_stream(a)
        assert not b.query()
        b.synchronize()
        assert a.query()

    def test_query_and_synchronize(self):
        s = target.device_module.Stream()
        e = target.device_module.Event()
        assert e.query()  # never recorded
        with target.device_module.stream(s):
            busy(100_000)
        e.record(s)
        assert not e.query()
        e.synchronize()
        assert e.query()

    def test_elapsed_time_measures_device_work(self):
        s = target.device_module.Stream()
        start = target.device_module.Event(enable_timing=True)
        end = target.device_module.Event(enable_timing=True)
        start.record(s)
        with target.device_module.stream(s):
            busy(30_000)
        end.record(s)
        end.synchronize()
        ms = start.elapsed_time(end)
        assert 29.0 <= ms < 1000.0

    def test_elapsed_time_needs_timing(self):
        a, b = target.device_module.Event(), target.device_module.Event()
        a.record()
        b.record()
        b.synchronize()
        with pytest.raises(ValueError, match="enable_timing=True"):
            a.elapsed_time(b)

    def test_generic_torch_event_and_stream(self):
        s = torch.Stream(device=DEVICE)
        e1 = torch.Event(device=DEVICE, enable_timing=True)
        e2 = torch.Event(device=DEVICE, enable_timing=True)
        e1.record(s)
        with s:
            busy(20_000)
        e2.record(s)
        e2.synchronize()
        assert e1.elapsed_time(e2) >= 19.0
        assert s.query()

    def test_record_event_returns_openreg_event(self):
        s = target.device_module.Stream()
        e = s.record_event()
        assert isinstance(e, target.device_module.Event)
        e.synchronize()


@pytest.mark.device
class TestAsyncCopies:
    hw_classification = HW.ACCELERATOR

    def test_h2d_non_blocking_is_asynchronous(self):
        src = torch.arange(4096, dtype=torch.float32).pin_memory()
        dst = torch.zeros(4096, device=DEVICE)
        s = target.device_module.current_stream()
        busy(100_000)
        t0 = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        assert time.perf_counter() - t0 < 0.05  # did not wait for the stream
        assert not s.query()
        target.device_module.synchronize()
        assert torch.equal(dst.cpu(), src)

    def test_d2h_non_blocking_result_visible_after_synchronize(self):
        src = torch.arange(4096, dtype=torch.float32, device=DEVICE)
        dst = torch.zeros(4096).pin_memory()
        busy(100_000)
        dst.copy_(src, non_blocking=True)
        assert torch.count_nonzero(dst).item() == 0  # not there yet
        target.device_module.current_stream().synchronize()
        assert torch.equal(dst, torch.arange(4096, dtype=torch.float32))

    def test_pageable_non_blocking_is_synchronous(self):
        src = torch.arange(100, dtype=torch.float32)
        dst = torch.empty(100, device=DEVICE)
        busy(30_000)
        dst.copy_(src, non_blocking=True)
        assert target.device_module.current_stream().query()
        assert torch.equal(dst.cpu(), src)

    def test_to_non_blocking(self):
        src = torch.randn(64, 64).pin_memory()
        d = src.to(DEVICE, non_blocking=True)
        back = d.to("cpu", non_blocking=True)
        target.device_module.synchronize()
        assert torch.equal(back, src)

    def test_non_contiguous_and_converting_copies(self):
        src = torch.randn(8, 6)
        d = torch.empty(6, 8, dtype=torch.float64, device=DEVICE)
        d.copy_(src.t())
        assert torch.equal(d.cpu(), src.t().double())
        h = torch.empty(8, 6, dtype=torch.float16)
        h.copy_(d.t())
        assert torch.equal(h, src.half())

    def test_peer_copy_between_devices(self):
        a = torch.randn(1000, device=device(0))
        with target.device_module.device(0):
            busy(50_000)  # the producer stream is busy
            b = a * 3
        c = b.to(device(1))
        assert c.device.index == 1
        assert torch.equal(c.cpu(), a.cpu() * 3)
        c2 = torch.empty(1000, device=device(1))
        c2.copy_(b)
        assert torch.equal(c2.cpu(), c.cpu())

    def test_pinned_buffer_not_reused_before_copy_runs(self):
        dst = torch.zeros(1 << 14, device=DEVICE)
        busy(100_000)
        src = torch.full((1 << 14,), 5.0, pin_memory=True)
        dst.copy_(src, non_blocking=True)
        del src  # the host allocator must keep the block until the copy ran
        other = torch.full((1 << 14,), 9.0, pin_memory=True)
        target.device_module.synchronize()
        assert torch.equal(dst.cpu(), torch.full((1 << 14,), 5.0))
        assert other[0].item() == 9.0
