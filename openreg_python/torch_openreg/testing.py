"""Test instrumentation for openreg (not needed to use the device).

:func:`recorded_kernels` shows which device kernels ran, from the runtime's
own trace (every launch is named: ATen operators by their schema name,
hand-written kernels by the name they launch with). Tests use it to prove
*which* implementation ran (openreg's DispatchStub kernel, a custom
operator's device kernel) without counters in the shipped code.
"""

import contextlib
from typing import Iterator, List

import torch

from . import _runtime

__all__ = ["recorded_kernels"]


@contextlib.contextmanager
def recorded_kernels() -> Iterator[List[str]]:
    """Collect the names of the device kernels that run inside the block.

    The list is filled when the block exits, after a device synchronisation,
    in execution order. Not re-entrant: the block owns the runtime's trace.
    """
    names: List[str] = []
    torch.openreg.synchronize()
    _runtime.trace_start()
    try:
        yield names
    finally:
        torch.openreg.synchronize()
        names.extend(r["name"] for r in _runtime.trace_stop() if r["kind"] == "kernel")
