"""Memory management for openreg, modelled on ``torch.cuda.memory``.

The caching allocator is a ``c10::DeviceAllocator``, so the statistics are
thin wrappers over ``torch.accelerator``'s generic functions plus device
indexing; snapshots, the memory fraction and the pinned-host statistics go
through ``torch_openreg._C`` (Module.cpp).
"""

import pickle
import sys
from collections import OrderedDict
from typing import Any, Optional

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
    """Peak of :func:`memory_allocated` since start or :func:`reset_peak_memory_stats`."""
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device: Any = None) -> int:
    """Bytes held by the caching allocator on ``device`` (allocated + cached)."""
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device: Any = None) -> int:
    """Peak of :func:`memory_reserved` since start or :func:`reset_peak_memory_stats`."""
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device: Any = None) -> None:
    """Restart the ``peak`` statistics of ``device``'s allocator from their current values."""
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    """Zero the accumulated statistics of ``device``'s allocator (totals, ``num_ooms``, ...)."""
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def empty_cache() -> None:
    """Return every unused cached block of every device to the runtime."""
    from . import is_initialized

    if is_initialized():
        torch.accelerator.empty_cache()


def mem_get_info(device: Any = None) -> tuple:
    """(free, total) bytes of device memory, as the runtime sees it."""
    return tuple(_C._mem_get_info(_index(device)))


# ------------------------------------------------------------ summaries
def memory_stats_as_nested_dict(device: Any = None) -> "dict[str, Any]":
    """:func:`memory_stats` as a nested dictionary (``torch.cuda``'s layout)."""
    from . import is_initialized

    if not is_initialized():
        return {}
    nested: dict = {}
    for key, value in memory_stats(device).items():
        *path, last = key.split(".")
        d = nested
        for part in path:
            d = d.setdefault(part, {})
        d[last] = value
    return nested


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A human-readable table of the allocator statistics of ``device``, laid
    out as ``torch.cuda.memory_summary``'s."""
    index = _index(device)
    stats = memory_stats(index)

    def fmt_size(sz: int, pref: int) -> str:
        prefixes = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"]
        prefix = prefixes[0]
        for new_prefix in prefixes[1:]:
            if pref < 768 * 1024:
                break
            prefix, sz, pref = new_prefix, sz // 1024, pref / 1024
        return f"{sz:6d} {prefix}"

    def fmt_count(cnt: int, pref: int) -> str:
        prefixes = [" ", "K", "M"]
        prefix = prefixes[0]
        for new_prefix in prefixes[1:]:
            if pref < 750 * 1000:
                break
            prefix, cnt, pref = new_prefix, cnt // 1000, pref / 1000
        return f"{cnt:7d} {prefix} "

    metrics = [
        ("allocated_bytes", "Allocated memory", fmt_size),
        ("active_bytes", "Active memory", fmt_size),
        ("requested_bytes", "Requested memory", fmt_size),
        ("reserved_bytes", "Device reserved memory", fmt_size),
        ("inactive_split_bytes", "Non-releasable memory", fmt_size),
        ("allocation", "Allocations", fmt_count),
        ("active", "Active allocs", fmt_count),
        ("segment", "Device reserved segments", fmt_count),
        ("inactive_split", "Non-releasable allocs", fmt_count),
    ]
    lines = ["=" * 75, f" {'':16} PyTorch openreg memory summary, device ID {index:<14d} ", "-" * 75,
             f"  {'':6} openreg OOMs: {stats.get('num_ooms', 0):<12d} | {'':4} orMalloc retries: "
             f"{stats.get('num_alloc_retries', 0):<10d}  ",
             "=" * 75, "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  "]
    for key, name, formatter in metrics:
        lines.append("-" * 75)
        subs = [("all", name)]
        if not abbreviated:
            subs += [("large_pool", "      from large pool"), ("small_pool", "      from small pool")]
        pref = None
        for sub, sub_name in subs:
            vals = [stats.get(f"{key}.{sub}.{m}", 0) for m in ("current", "peak", "allocated", "freed")]
            pref = pref or vals
            cells = " | ".join(formatter(v, p) for v, p in zip(vals, pref))
            lines.append(f" {sub_name:<21} | {cells} ")
    lines.append("=" * 75)
    return "|" + "|\n|".join(lines) + "|\n"


# ------------------------------------------------------------ snapshots
def _record_memory_history(
    enabled: Optional[str] = "all",
    context: Optional[str] = "all",
    stacks: str = "all",
    max_entries: int = sys.maxsize,
    device: Any = None,
    clear_history: bool = False,
) -> None:
    """Record a stack trace per allocation, and with ``enabled="all"`` a
    history of allocator actions, for :func:`_snapshot` (as
    ``torch.cuda.memory._record_memory_history``; the arguments mean the
    same). ``enabled=None`` stops recording. ``device`` is accepted for
    compatibility: recording covers every openreg device, as CUDA's does."""
    from . import _lazy_init

    if not isinstance(max_entries, int) or isinstance(max_entries, bool):
        raise TypeError(f"_record_memory_history: max_entries must be an int, "
                        f"got {type(max_entries).__name__}")
    if max_entries < 0:
        raise ValueError(f"_record_memory_history: max_entries must be >= 0, got {max_entries}")
    _lazy_init()
    _C._record_memory_history(enabled, context, stacks, min(max_entries, sys.maxsize),
                              bool(clear_history))


def _snapshot(device: Any = None) -> "dict[str, Any]":
    """The allocator state of every openreg device: ``{"segments": [...],
    "device_traces": [[...] per device]}``, as ``torch.cuda.memory._snapshot``
    lays it out (``torch.cuda._memory_viz`` and pytorch.org/memory_viz read it)."""
    from . import _lazy_init

    _lazy_init()
    return _C._memory_snapshot()


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Pickle :func:`_snapshot` to ``filename`` (open it at pytorch.org/memory_viz)."""
    s = _snapshot()
    with open(filename, "wb") as f:
        pickle.dump(s, f)


def memory_snapshot() -> "list[dict[str, Any]]":
    """The caching allocator's segments on every openreg device, with their blocks
    (``torch.cuda.memory_snapshot``'s list of dicts)."""
    return _snapshot()["segments"]


# ------------------------------------------------------------ limits
def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """Cap what the caching allocator may reserve on ``device`` at
    ``fraction * total_memory``; allocations beyond it raise
    ``torch.OutOfMemoryError`` naming the fraction and the limit."""
    index = _index(device)
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if not 0 <= fraction <= 1:  # (nan too)
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _C._set_memory_fraction(fraction, index)


def get_per_process_memory_fraction(device: Any = None) -> float:
    """The fraction set by :func:`set_per_process_memory_fraction` (1.0 if none)."""
    return _C._get_memory_fraction(_index(device))


# ------------------------------------------------------------ pinned host memory
def host_memory_stats_as_nested_dict() -> "dict[str, Any]":
    """Statistics of the pinned host allocator, nested (``torch.cuda``'s keys)."""
    from . import is_initialized

    if not is_initialized():
        return {}
    return _C._host_memory_stats()


def host_memory_stats() -> "OrderedDict[str, Any]":
    """Statistics of the pinned host allocator (``pin_memory()``), with
    ``torch.cuda.host_memory_stats``'s keys: ``allocations``,
    ``allocated_bytes``, ``active_requests``, ``active_bytes`` (each
    ``.current/.peak/.allocated/.freed``), ``num_host_alloc``,
    ``num_host_free``, ``host_alloc_time.*`` and ``host_free_time.*``."""
    result = []

    def add(prefix: str, obj: Any) -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                add(f"{prefix}.{k}" if prefix else k, v)
        else:
            result.append((prefix, obj))

    add("", host_memory_stats_as_nested_dict())
    return OrderedDict(sorted(result))


def reset_peak_host_memory_stats() -> None:
    """Restart the ``peak`` statistics of the pinned host allocator from their current values."""
    _C._reset_peak_host_memory_stats()


def reset_accumulated_host_memory_stats() -> None:
    """Zero the accumulated counters (allocations, frees, ...) of the pinned host allocator."""
    _C._reset_accumulated_host_memory_stats()
