"""Shared helpers for the runtime tests (not a test module).

``torch`` is imported before ``torch_openreg._runtime`` on purpose: importing
``torch_openreg`` first re-enters it through torch's backend autoload and
fails with a circular import.
"""

import contextlib
import ctypes
import os
import subprocess
import sys
import threading
import time

import torch  # noqa: F401  (must come before torch_openreg)
from torch_openreg import _runtime as rt

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALIGN = 512
MB = 1 << 20

# Every blocking call that could hang on a runtime bug goes through this
# bound (seconds) instead of blocking the test session forever.
BLOCK_TIMEOUT = 20.0


def run_python(code: str, env: dict = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (environment knobs are read once per process)."""
    full_env = dict(os.environ)
    for key in ("OPENREG_DEVICE_COUNT", "OPENREG_DEVICE_MEMORY",
                "OPENREG_STRICT_MEMORY", "OPENREG_DEVICE_WORKERS"):
        full_env.pop(key, None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code], env=full_env, capture_output=True, text=True,
        timeout=timeout, cwd=REPO,
    )


# Preamble for child scripts: loads the extension module on its own (it
# links only libopenreg), skipping the ~1.5 s torch import. Same module, same
# library, as ``torch_openreg._runtime``.
CHILD_PRELUDE = (
    "import ctypes, json, os, sys, time\n"
    "import importlib.machinery, importlib.util\n"
    "_pkg = importlib.util.find_spec('torch_openreg').submodule_search_locations[0]\n"
    "_path = [os.path.join(_pkg, f) for f in os.listdir(_pkg) if f.startswith('_runtime.')][0]\n"
    "_loader = importlib.machinery.ExtensionFileLoader('_runtime', _path)\n"
    "rt = importlib.util.module_from_spec(importlib.util.spec_from_loader('_runtime', _loader))\n"
    "_loader.exec_module(rt)\n"
    "assert 'torch' not in sys.modules\n"
)

# The same, through the package (imports torch and the torch glue first).
CHILD_PRELUDE_WITH_TORCH = (
    "import ctypes, json, os, sys, time\n"
    "import torch\n"
    "from torch_openreg import _runtime as rt\n"
)


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
        raise AssertionError(f"{getattr(fn, '__name__', fn)}{args} did not return "
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
