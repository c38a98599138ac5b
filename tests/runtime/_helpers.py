"""Shared helpers for the runtime tests (not a test module).

``torch_openreg._runtime`` links only libopenreg, not torch, so it is loaded
here on its own, without running the ``torch_openreg`` package (and with it
torch and the torch glue): see ``tests/_torch_free.py``, which also lets
``make check-asan`` / ``make check-tsan`` run these tests against sanitizer
builds.
"""

import contextlib
import ctypes
import os
import sys
import threading
import time

from tests._subprocess import REPO  # noqa: F401  (re-exported for the runtime tests)
from tests._torch_free import load

# Used only by openreg-only tests (tests/target.py).
openreg_only = True


rt = load("_runtime")

ALIGN = 512
MB = 1 << 20

# Every blocking call that could hang on a runtime bug goes through this
# bound (seconds) instead of blocking the test session forever.
BLOCK_TIMEOUT = 20.0


# Preamble for child scripts (run with tests._subprocess.run_python): the
# runtime module on its own, as above.
CHILD_PRELUDE = (
    "import ctypes, json, os, sys, time\n"
    f"sys.path.insert(0, {REPO!r})\n"
    "from tests.runtime._helpers import rt\n"
    "assert 'torch' not in sys.modules\n"
)

# Through the package instead: imports torch, which loads the torch glue.
# (``import torch`` must come first: importing torch_openreg first re-enters
# it through torch's backend autoload.)
CHILD_PRELUDE_WITH_TORCH = (
    "import ctypes, json, os, sys, time\n"
    "import torch\n"
    "from torch_openreg import _runtime as rt\n"
)


class RuntimeHang(AssertionError):
    """A runtime call that should have returned did not (used by xfail(raises=...)
    so that a known hang is told apart from any other failure)."""


def call_with_timeout(fn, *args, timeout: float = BLOCK_TIMEOUT):
    """Call a (GIL-releasing) blocking runtime function with an upper bound."""
    box = {}

    def target():
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # re-raised in the caller
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise RuntimeHang(f"{getattr(fn, '__name__', fn)}{args} did not return "
                             f"within {timeout} s (runtime hang?)")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def sync_stream(stream: int, timeout: float = BLOCK_TIMEOUT):
    return call_with_timeout(rt.stream_synchronize, stream, timeout=timeout)


def sync_event(event: int, timeout: float = BLOCK_TIMEOUT):
    return call_with_timeout(rt.event_synchronize, event, timeout=timeout)


def wait_until(pred, timeout: float = 5.0, interval: float = 0.001) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()


class GateSet:
    """Gates that are always released on exit (so no test can hang on one)."""

    def __init__(self):
        self.gates = []

    def launch(self, stream: int, wait_entered: bool = True) -> "rt.Gate":
        g = rt.Gate()
        self.gates.append(g)
        rt.launch_gate(stream, g)
        if wait_entered:
            assert wait_until(lambda: g.entered), "gate host function never started"
        return g

    def release_all(self):
        for g in self.gates:
            g.release()


@contextlib.contextmanager
def gates():
    gs = GateSet()
    try:
        yield gs
    finally:
        gs.release_all()


@contextlib.contextmanager
def on_device(d: int):
    prev = rt.get_device()
    rt.set_device(d)
    try:
        yield
    finally:
        rt.set_device(prev)


class HostBuf:
    """A pageable host buffer addressed by integer pointer."""

    def __init__(self, data):
        if isinstance(data, int):
            self.buf = ctypes.create_string_buffer(data)
        else:
            self.buf = ctypes.create_string_buffer(bytes(data), len(data))
        self.size = ctypes.sizeof(self.buf)

    @property
    def ptr(self) -> int:
        return ctypes.addressof(self.buf)

    @property
    def bytes(self) -> bytes:
        return self.buf.raw


def h2d(dptr: int, data: bytes):
    src = HostBuf(data)
    rt.memcpy(dptr, src.ptr, len(data), rt.HostToDevice)


def d2h(dptr: int, n: int) -> bytes:
    dst = HostBuf(n)
    rt.memcpy(dst.ptr, dptr, n, rt.DeviceToHost)
    return dst.bytes


def round_up(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a
