"""``torch_openreg.profiler``: openreg device activity in ``torch.profiler``.

Importing ``torch_openreg`` loads ``libopenreg_profiler`` (this module), which

* registers the Kineto plugin (``REGISTER_PRIVATEUSE1_PROFILER``): with
  ``torch.profiler.profile(activities=[ProfilerActivity.CPU,
  ProfilerActivity.PrivateUse1])`` every kernel, copy, memset and host function
  run on an openreg device shows up on a per-stream row of the trace, linked to
  the CPU operator that launched it;
* registers the legacy ``ProfilerStubs``, so that
  ``torch.autograd.profiler.profile(use_device="openreg")`` times operators with
  openreg events.

Range markers, like ``torch.cuda.nvtx``: :func:`range_push`, :func:`range_pop`,
:func:`mark` and the :func:`range` context manager put named spans on the
device timeline of a trace (as ``gpu_user_annotation`` events).
"""

import contextlib
import ctypes
import os
from typing import Iterator

__all__ = ["mark", "range", "range_pop", "range_push"]

_LIB = ctypes.CDLL(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "libopenreg_profiler.so")
)
_LIB.openreg_profiler_range_push.argtypes = [ctypes.c_char_p]
_LIB.openreg_profiler_range_push.restype = ctypes.c_int
_LIB.openreg_profiler_range_pop.argtypes = []
_LIB.openreg_profiler_range_pop.restype = ctypes.c_int
_LIB.openreg_profiler_mark.argtypes = [ctypes.c_char_p]
_LIB.openreg_profiler_mark.restype = None


def _name(msg: str) -> bytes:
    if not isinstance(msg, str):
        raise TypeError(f"expected a str range name, got {type(msg).__name__}")
    return msg.encode()


def range_push(msg: str) -> int:
    """Open a range named ``msg`` on the current device and stream; returns the depth."""
    return _LIB.openreg_profiler_range_push(_name(msg))


def range_pop() -> int:
    """Close the innermost range of this thread; returns the depth, or -1 if none was open."""
    return _LIB.openreg_profiler_range_pop()


def mark(msg: str) -> None:
    """An instant marker named ``msg`` on the current device and stream."""
    _LIB.openreg_profiler_mark(_name(msg))


@contextlib.contextmanager
def range(msg: str) -> Iterator[None]:  # noqa: A001  (mirrors torch.cuda.nvtx.range)
    """``with range("step"):`` pushes on entry and pops on exit."""
    range_push(msg)
    try:
        yield
    finally:
        range_pop()
