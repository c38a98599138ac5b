"""The stream-race sanitizer: each known bug pattern is caught with a useful
message, correct programs report nothing, and real workloads run clean."""

import re
import subprocess
import sys

import pytest
import torch

from tests import target
from tests._subprocess import REPO, child_env, run_python
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

N = 1000


@pytest.fixture
def sanitizer():
    was_on = torch.openreg.is_stream_sanitizer_enabled()
    torch.openreg.synchronize()
    torch.openreg.set_stream_sanitizer(True)  # fresh history
    try:
        yield
    finally:
        torch.openreg.synchronize()
        torch.openreg.set_stream_sanitizer(was_on)


def side_stream():
    """A new stream that has waited for the current one (its inputs are ready)."""
    s = torch.openreg.Stream()
    s.wait_stream(torch.openreg.current_stream())
    return s


def stream_name(s):
    if s.stream_id == 0:
        return f"the default stream of openreg:{s.device_index}"
    return f"stream {s.native_id} of openreg:{s.device_index}"


def address(t):
    return f"0x{t.data_ptr():x}"


@pytest.mark.device
class TestSanitizerCatches:
    hw_classification = HW.ACCELERATOR

    def test_missing_wait_stream_for_inputs(self, sanitizer):
        # The side stream reads x, which the default stream is still writing:
        # it should have waited (side.wait_stream(current_stream())) first.
        x = torch.ones(N, device="openreg")
        side = torch.openreg.Stream()
        with torch.openreg.stream(side):
            with pytest.raises(torch.openreg.StreamRaceError) as info:
                x * 2
        msg = str(info.value)
        assert "a race between two streams" in msg
        assert "'aten::mul' reads it float32[1000] on " + stream_name(side) in msg
        assert "'aten::fill_' wrote it float32[1000] on the default stream of openreg:0" in msg
        assert f"openreg:0 memory at {address(x)} (4000 bytes)" in msg
        assert "wait_stream" in msg and "wait_event" in msg
        assert isinstance(info.value, RuntimeError)
        assert torch_openreg_error() is torch.openreg.StreamRaceError

    def test_default_stream_reads_what_a_side_stream_wrote(self, sanitizer):
        x = torch.ones(N, device="openreg")
        side = side_stream()
        with torch.openreg.stream(side):
            y = x * 2
        with pytest.raises(torch.openreg.StreamRaceError) as info:
            y + 1  # no torch.openreg.current_stream().wait_stream(side)
        msg = str(info.value)
        assert "'aten::add' reads it float32[1000] on the default stream of openreg:0" in msg
        # y was allocated by the kernel that wrote it.
        assert "'aten::mul' wrote it (new allocation) on " + stream_name(side) in msg
        assert address(y) in msg

    def test_racing_kernel_does_not_run(self, sanitizer):
        x = torch.ones(N, device="openreg")
        side = side_stream()
        with torch.openreg.stream(side):
            y = x * 2
        with pytest.raises(torch.openreg.StreamRaceError, match=r"'aten::add_' writes it"):
            y.add_(1)  # a write racing with the side stream's write
        torch.openreg.synchronize()
        assert torch.equal(y.cpu(), torch.full((N,), 2.0))  # untouched

    def test_write_after_read_on_another_stream(self, sanitizer):
        x = torch.ones(N, device="openreg")
        side = side_stream()
        with torch.openreg.stream(side):
            x.sum()  # reads x
        with pytest.raises(torch.openreg.StreamRaceError) as info:
            x.zero_()  # overwrites it while the side stream may still read it
        assert "'aten::zero_' writes it float32[1000] on the default stream" in str(info.value)
        assert "'aten::sum' read it float32[1000] on " + stream_name(side) in str(info.value)

    @pytest.mark.skipif(target.MEMCHECK, reason="needs the caching allocator's reuse of the "
                        "block, which memcheck mode (docs/memcheck.md) bypasses")
    def test_missing_record_stream_before_free_and_reuse(self, sanitizer):
        x = torch.ones(N, device="openreg")  # allocated on the default stream
        side = side_stream()
        with torch.openreg.stream(side):
            y = x * 2  # side reads x
        ptr = x.data_ptr()
        del x  # no x.record_stream(side): the block is free for the default stream at once
        with pytest.raises(torch.openreg.StreamRaceError) as info:
            z = torch.zeros(N, device="openreg")  # same block, overwritten
            assert z.data_ptr() == ptr
        msg = str(info.value)
        assert "freed memory reused while its last user may still be running" in msg
        assert f"memory at 0x{ptr:x}" in msg
        assert "'aten::mul' read it float32[1000] on " + stream_name(side) in msg
        assert "on the default stream of openreg:0" in msg
        assert "record_stream" in msg
        del y

    def test_nonblocking_d2h_copy_read_before_synchronising(self, sanitizer):
        x = torch.arange(N, device="openreg", dtype=torch.float32)
        side = side_stream()
        pinned = torch.empty(N).pin_memory()
        with torch.openreg.stream(side):
            pinned.copy_(x, non_blocking=True)  # a device worker writes it later
        # Using the buffer on another stream before synchronising: a race.
        with pytest.raises(torch.openreg.StreamRaceError) as info:
            pinned.to("openreg")
        msg = str(info.value)
        assert f"pinned host memory at {address(pinned)} (4000 bytes)" in msg
        assert "'orMemcpyAsync' wrote it on " + stream_name(side) in msg
        # Reading it on the host (checked by the host-access hook).
        with pytest.raises(torch.openreg.StreamRaceError) as info:
            torch_openreg_C()._sanitizer_host_access(pinned, False, "numpy()")
        msg = str(info.value)
        assert "the host reads memory that device work may still be writing" in msg
        assert "'numpy()' reads it on the host" in msg
        assert "synchronize()" in msg
        side.synchronize()
        torch_openreg_C()._sanitizer_host_access(pinned, False, "numpy()")
        assert torch.equal(pinned, torch.arange(N, dtype=torch.float32))

    def test_race_inside_the_fallback_and_on_out_arguments(self, sanitizer):
        a = torch.randn(8, 8, device="openreg")
        out = torch.empty(8, 8, device="openreg")
        side = side_stream()
        with torch.openreg.stream(side):
            torch.mul(a, 2, out=out)  # writes out
        with pytest.raises(torch.openreg.StreamRaceError, match=r"'aten::triu' reads it"):
            torch.triu(out)  # a boxed-fallback operator


@pytest.mark.device
class TestSanitizerAccepts:
    hw_classification = HW.ACCELERATOR

    def test_wait_stream(self, sanitizer):
        x = torch.ones(N, device="openreg")
        side = side_stream()
        with torch.openreg.stream(side):
            y = x * 2
        torch.openreg.current_stream().wait_stream(side)
        assert torch.equal((y + 1).cpu(), torch.full((N,), 3.0))

    def test_events(self, sanitizer):
        x = torch.ones(N, device="openreg")
        ready = torch.openreg.Event()
        ready.record()
        side = torch.openreg.Stream()
        side.wait_event(ready)
        with torch.openreg.stream(side):
            y = x * 2
            done = side.record_event()
        torch.openreg.current_stream().wait_event(done)
        assert torch.equal((y + x).cpu(), torch.full((N,), 3.0))

    def test_synchronize_orders_the_host(self, sanitizer):
        x = torch.ones(N, device="openreg")
        side = side_stream()
        with torch.openreg.stream(side):
            y = x * 2
        side.synchronize()  # or an event's synchronize(), or torch.openreg.synchronize()
        assert torch.equal((y + 1).cpu(), torch.full((N,), 3.0))

    def test_record_stream(self, sanitizer):
        x = torch.ones(N, device="openreg")
        side = side_stream()
        with torch.openreg.stream(side):
            y = x * 2
        x.record_stream(side)
        del x  # reused only after the side stream's work is done
        z = torch.zeros(N, device="openreg")
        torch.openreg.current_stream().wait_stream(side)
        assert torch.equal((y + z).cpu(), torch.full((N,), 2.0))

    def test_nonblocking_d2h_then_synchronize(self, sanitizer):
        x = torch.arange(N, device="openreg", dtype=torch.float32)
        pinned = torch.empty(N).pin_memory()
        pinned.copy_(x, non_blocking=True)
        torch.openreg.current_stream().synchronize()
        torch_openreg_C()._sanitizer_host_access(pinned, False, "numpy()")
        assert torch.equal(pinned.to("openreg").cpu(), torch.arange(N, dtype=torch.float32))

    def test_same_stream_is_ordered(self, sanitizer):
        side = torch.openreg.Stream()
        with torch.openreg.stream(side):
            x = torch.ones(N, device="openreg")
            pinned = torch.empty(N).pin_memory()
            pinned.copy_(x * 3, non_blocking=True)
            back = pinned.to("openreg", non_blocking=True)
            total = (back + x).sum()
        torch.openreg.current_stream().wait_stream(side)
        assert total.item() == 4 * N

    def test_training_step_on_a_side_stream(self, sanitizer):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 4)).to("openreg")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        data = torch.randn(8, 16, device="openreg")
        side = side_stream()
        with torch.openreg.stream(side):
            for _ in range(2):
                opt.zero_grad()
                model(data).square().mean().backward()
                opt.step()
        torch.openreg.current_stream().wait_stream(side)
        assert torch.isfinite(model(data)).all().item()

    def test_off_by_default_and_when_disabled(self):
        r = run_python("import torch; print(torch.openreg.is_stream_sanitizer_enabled())",
                       timeout=120, clean_openreg_env=True)
        assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr
        was_on = torch.openreg.is_stream_sanitizer_enabled()
        torch.openreg.synchronize()
        torch.openreg.set_stream_sanitizer(False)
        try:
            x = torch.ones(N, device="openreg")
            side = torch.openreg.Stream()
            with torch.openreg.stream(side):
                y = x * 2  # racy, but not checked
            assert torch.equal((y + 1).cpu(), torch.full((N,), 3.0))
        finally:
            torch.openreg.synchronize()
            torch.openreg.set_stream_sanitizer(was_on)


def torch_openreg_error():
    import torch_openreg

    return torch_openreg.StreamRaceError


def torch_openreg_C():
    import torch_openreg

    return torch_openreg._C


@pytest.mark.device
class TestSanitizerWholePrograms:
    hw_classification = HW.ACCELERATOR

    def test_environment_variable_turns_it_on(self):
        r = run_python(
            "import torch\n"
            "assert torch.openreg.is_stream_sanitizer_enabled()\n"
            "x = torch.ones(4, device='openreg')\n"
            "s = torch.openreg.Stream()\n"
            "with torch.openreg.stream(s):\n"
            "    try:\n"
            "        x + 1\n"
            "    except torch.openreg.StreamRaceError as e:\n"
            "        print('caught', type(e).__mro__[1].__name__)\n",
            timeout=120, env={"OPENREG_STREAM_SANITIZER": "1"})
        assert r.returncode == 0, r.stderr
        assert "caught RuntimeError" in r.stdout

    @pytest.mark.slow
    def test_model_tests_and_demo_run_clean(self):
        env = child_env({"OPENREG_STREAM_SANITIZER": "1"})
        r = subprocess.run([sys.executable, "-m", "pytest", "tests/model", "-x", "-q",
                            "-p", "no:cacheprovider"],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
        assert re.search(r"\d+ passed", r.stdout)
        r = subprocess.run([sys.executable, "examples/demo.py"], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
        assert "SUCCESS" in r.stdout
