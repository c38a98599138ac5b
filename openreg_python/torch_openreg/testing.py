"""Test instrumentation for openreg (not needed to use the device).

:func:`recorded_kernels` shows which device kernels ran, from the runtime's
own trace (every launch is named: ATen operators by their schema name,
hand-written kernels by the name they launch with). Tests use it to prove
*which* implementation ran (openreg's DispatchStub kernel, a custom
operator's device kernel) without counters in the shipped code.
"""

import contextlib
from typing import Any, Dict, Iterator, List

import torch

from . import _runtime

__all__ = ["recorded_kernels", "recorded_kernel_records"]


@contextlib.contextmanager
def recorded_kernel_records() -> Iterator[List[Dict[str, Any]]]:
    """Collect the trace records of the device kernels that run inside the
    block: name, device, stream (the runtime's id), start and end times,
    correlation id, ...

    The list is filled when the block exits, after a device synchronisation,
    in execution order. Not re-entrant: the block owns the runtime's trace.
    """
    records: List[Dict[str, Any]] = []
    torch.openreg.synchronize()
    _runtime.trace_start()
    try:
        yield records
    finally:
        torch.openreg.synchronize()
        records.extend(r for r in _runtime.trace_stop() if r["kind"] == "kernel")


@contextlib.contextmanager
def recorded_kernels() -> Iterator[List[str]]:
    """The names of the device kernels that run inside the block
    (:func:`recorded_kernel_records`, names only)."""
    names: List[str] = []
    records: List[Dict[str, Any]] = []
    try:
        with recorded_kernel_records() as records:
            yield names
    finally:
        names.extend(r["name"] for r in records)
