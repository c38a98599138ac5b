"""Memory management for openreg, modelled on ``torch.cuda.memory``.

The caching allocator is a ``c10::DeviceAllocator``, so these are thin
wrappers over ``torch.accelerator``'s generic functions plus device indexing.
"""

from collections import OrderedDict
from typing import Any

import torch

from .. import _C


def _index(device: Any) -> int:
    from . import _check_index, _get_device_index, _lazy_init

    _lazy_init()
    return _check_index(_get_device_index(device))


def memory_stats(device: Any = None) -> "OrderedDict[str, Any]":
    """Allocator statistics, with the same keys as ``torch.cuda.memory_stats``."""
    return torch.accelerator.memory_stats(_index(device))


def memory_allocated(device: Any = None) -> int:
    """Bytes occupied by tensors on ``device``."""
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device: Any = None) -> int:
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device: Any = None) -> int:
    """Bytes held by the caching allocator on ``device`` (allocated + cached)."""
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device: Any = None) -> int:
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device: Any = None) -> None:
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def empty_cache() -> None:
    """Return every unused cached block of every device to the runtime."""
    from . import is_initialized

    if is_initialized():
        torch.accelerator.empty_cache()


def mem_get_info(device: Any = None) -> tuple:
    """(free, total) bytes of device memory, as the runtime sees it."""
    return tuple(_C._mem_get_info(_index(device)))
