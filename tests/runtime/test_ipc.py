"""IPC memory handles: orIpcGetMemHandle / orIpcOpenMemHandle / orIpcCloseMemHandle.

A spawned child process owns the device memory (the exporter); this process
opens it, reads and writes it through the runtime's copies, and closes it.
Every wait on the child is bounded, and the child is killed on any failure.
"""

import ctypes
import multiprocessing as mp
import os
import queue
import struct

import pytest

from tests._subprocess import run_python
from tests.runtime._helpers import CHILD_PRELUDE, rt
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

TIMEOUT = 30.0
# The exporter's first answer waits for a new interpreter to start and load
# the runtime: under ThreadSanitizer, beside CI's other lane, that took over
# 30 s once. Still bounded; the child is killed when it is exceeded.
STARTUP_TIMEOUT = 180.0
SIZE = 3 * 4096 + 512  # not a whole number of pages


def _exporter(to_parent, from_parent, size):
    """Child: allocate `size` bytes of device memory behind a padding block
    (so the allocation starts inside a page), fill it, export a handle, then
    serve 'read' requests until 'exit'."""
    from tests.runtime._helpers import rt as crt

    pad = crt.malloc(512)
    dev = crt.malloc(size)
    pattern = bytes(i % 251 for i in range(size))
    buf = ctypes.create_string_buffer(pattern, size)
    crt.memcpy(dev, ctypes.addressof(buf), size, crt.HostToDevice)
    to_parent.put((crt.ipc_get_mem_handle(dev), crt.ipc_get_mem_handle(dev + 1024), os.getpid()))
    while True:
        cmd = from_parent.get(timeout=STARTUP_TIMEOUT)
        if cmd == "read":
            out = ctypes.create_string_buffer(size)
            crt.memcpy(ctypes.addressof(out), dev, size, crt.DeviceToHost)
            to_parent.put(out.raw)
        elif cmd == "exit":
            crt.free(dev)
            crt.free(pad)
            return


class Exporter:
    def __init__(self, size=SIZE):
        ctx = mp.get_context("spawn")
        self.to_parent, self.from_parent = ctx.Queue(), ctx.Queue()
        self.proc = ctx.Process(target=_exporter, args=(self.to_parent, self.from_parent, size),
                                daemon=True)
        self.proc.start()
        try:
            self.handle, self.interior_handle, self.pid = self.get(STARTUP_TIMEOUT)
        except BaseException:
            self.stop()  # no exporter outlives a failed start
            raise

    def get(self, timeout=TIMEOUT):
        try:
            return self.to_parent.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"exporter did not answer within {timeout} s "
                                 f"(exit code {self.proc.exitcode})") from None

    def read(self):
        self.from_parent.put("read")
        return self.get()

    def stop(self):
        if self.proc.is_alive():
            self.from_parent.put("exit")
            self.proc.join(TIMEOUT)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(TIMEOUT)
        assert not self.proc.is_alive()


@pytest.fixture
def exporter():
    e = Exporter()
    try:
        yield e
    finally:
        e.stop()


def _mapped_memfds():
    """Mappings of runtime memfds in this process (device memory, own or opened)."""
    rt.mem_get_info()  # the current device is initialised (its own memory mapped)
    with open("/proc/self/maps") as f:
        return [line for line in f if "openreg-device" in line]


@pytest.mark.runtime
class TestIpc:
    hw_classification = HW.ACCELERATOR

    def test_peer_reads_and_writes_an_exported_allocation(self, exporter):
        before = _mapped_memfds()
        ptr = rt.ipc_open_mem_handle(exporter.handle)
        try:
            assert len(_mapped_memfds()) == len(before) + 2  # device addresses + kernel view
            out = ctypes.create_string_buffer(SIZE)
            rt.memcpy(ctypes.addressof(out), ptr, SIZE, rt.DeviceToHost)
            assert out.raw == bytes(i % 251 for i in range(SIZE))
            new = bytes(255 - (i % 256) for i in range(SIZE))
            src = ctypes.create_string_buffer(new, SIZE)
            rt.memcpy(ptr, ctypes.addressof(src), SIZE, rt.HostToDevice)
            assert exporter.read() == new  # the owner sees the peer's write
            rt.memset(ptr, 7, 16)
            assert exporter.read()[:17] == b"\x07" * 16 + new[16:17]
        finally:
            rt.ipc_close_mem_handle(ptr)
        assert _mapped_memfds() == before  # unmapped on close

    def test_opened_memory_is_device_memory_of_the_current_device(self, exporter):
        ptr = rt.ipc_open_mem_handle(exporter.handle)
        try:
            a = rt.pointer_attributes(ptr + 100)
            assert a["type"] == "device" and a["device"] == rt.get_device()
            assert a["device_pointer"] == ptr
            assert a["allocation_size"] >= SIZE
            # The kernel view is host-readable, the device address is not.
            assert ctypes.string_at(a["host_pointer"], 4) == bytes([100, 101, 102, 103])
            assert a["host_pointer"] != ptr + 100
            # Copies stay inside the allocation, like copies of own memory.
            out = ctypes.create_string_buffer(16)
            with pytest.raises(rt.OpenRegError, match="not inside"):
                rt.memcpy(ctypes.addressof(out), ptr + a["allocation_size"] - 8, 16,
                          rt.DeviceToHost)
            # A device-to-device copy from the peer's memory into our own.
            mine = rt.malloc(SIZE)
            try:
                rt.memcpy(mine, ptr, SIZE, rt.DeviceToDevice)
                rt.memcpy(ctypes.addressof(out), mine + 10, 16, rt.DeviceToHost)
                assert out.raw == bytes(range(10, 26))
            finally:
                rt.free(mine)
        finally:
            rt.ipc_close_mem_handle(ptr)

    def test_handle_of_an_interior_pointer_opens_the_whole_allocation(self, exporter):
        ptr = rt.ipc_open_mem_handle(exporter.interior_handle)
        try:
            out = ctypes.create_string_buffer(4)
            rt.memcpy(ctypes.addressof(out), ptr, 4, rt.DeviceToHost)
            assert out.raw == bytes([0, 1, 2, 3])
        finally:
            rt.ipc_close_mem_handle(ptr)

    def test_each_open_is_closed_once(self, exporter):
        before = _mapped_memfds()
        a = rt.ipc_open_mem_handle(exporter.handle)
        b = rt.ipc_open_mem_handle(exporter.handle)
        assert a != b
        rt.ipc_close_mem_handle(a)
        with pytest.raises(rt.OpenRegError) as e:
            rt.ipc_close_mem_handle(a)
        assert e.value.name == "orErrorInvalidDevicePointer"
        with pytest.raises(rt.OpenRegError) as e:
            rt.free(b)  # a peer's memory is closed, not freed
        assert "orIpcCloseMemHandle" in str(e.value)
        rt.ipc_close_mem_handle(b)
        assert _mapped_memfds() == before

    def test_a_handle_whose_owner_exited_is_refused(self):
        e = Exporter()
        handle = e.handle
        e.stop()
        with pytest.raises(rt.OpenRegError) as err:
            rt.ipc_open_mem_handle(handle)
        assert err.value.name == "orErrorInvalidResourceHandle"

    def test_a_forged_identity_is_refused(self, exporter):
        h = bytearray(exporter.handle)
        ino = struct.unpack_from("<Q", h, 16)[0]
        struct.pack_into("<Q", h, 16, ino + 1)  # same pid and fd, another memfd
        with pytest.raises(rt.OpenRegError) as err:
            rt.ipc_open_mem_handle(bytes(h))
        assert err.value.name == "orErrorInvalidResourceHandle"
        assert "refused" in str(err.value)
        with pytest.raises(rt.OpenRegError) as err:
            rt.ipc_open_mem_handle(b"\0" * 64)
        assert err.value.name == "orErrorInvalidResourceHandle"

    def test_only_device_allocations_can_be_exported(self):
        host = rt.malloc_host(64)
        try:
            with pytest.raises(rt.OpenRegError) as err:
                rt.ipc_get_mem_handle(host)
            assert err.value.name == "orErrorInvalidDevicePointer"
        finally:
            rt.free_host(host)
        dev = rt.malloc(512)
        rt.free(dev)
        with pytest.raises(rt.OpenRegError) as err:
            rt.ipc_get_mem_handle(dev)  # freed
        assert err.value.name == "orErrorInvalidDevicePointer"

    def test_anonymous_memory_cannot_be_exported(self):
        res = run_python(CHILD_PRELUDE + r"""
p = rt.malloc(512)
try:
    rt.ipc_get_mem_handle(p)
except rt.OpenRegError as e:
    print(e.name, "OPENREG_STRICT_MEMORY" in str(e))
""", timeout=STARTUP_TIMEOUT, env={"OPENREG_STRICT_MEMORY": "0"},
                         clean_openreg_env=True)
        assert res.returncode == 0, res.stderr
        assert res.stdout.split() == ["orErrorNotSupported", "True"]
