"""``torch.openreg``: the device module, modelled on ``torch.cuda``."""

import re
import threading
import uuid as _uuid
from typing import Any, Optional, Union

import torch

from .. import _C, _runtime

_device_t = Union[torch.device, str, int, None]

_initialized = False
_init_lock = threading.Lock()


_INDEX_IN_STRING = re.compile(r"openreg:(\d+)")


def _get_device_index(device: _device_t, optional: bool = True) -> int:
    """Index of an openreg ``device`` (str, int, torch.device or None)."""
    if device is None:
        if not optional:
            raise ValueError("Expected an openreg device, got None")
        return current_device()
    if isinstance(device, str):
        parsed = torch.device(device)
        # torch.device("openreg:256") is openreg:0 (the index is an int8):
        # the index as written is the one to check.
        m = _INDEX_IN_STRING.fullmatch(device)
        if m and parsed.type == "openreg" and int(m.group(1)) != parsed.index:
            return _check_index(int(m.group(1)))
        device = parsed
    if isinstance(device, torch.device):
        if device.type != "openreg":
            raise ValueError(f"Expected an openreg device, but got: {device}")
        return current_device() if device.index is None else device.index
    if isinstance(device, int):
        return device
    raise TypeError(f"Expected a torch.device, str, int or None, got {type(device).__name__}")


def _check_index(index: int) -> int:
    """``index`` if it names an openreg device; RuntimeError otherwise (C++'s check)."""
    return _C._check_device_index(index)


# ---------------------------------------------------------------- devices
def is_available() -> bool:
    """True if at least one openreg device exists."""
    return device_count() > 0


def device_count() -> int:
    """Number of openreg devices (``OPENREG_DEVICE_COUNT``, default 2)."""
    return _C._get_device_count()


def is_initialized() -> bool:
    """Whether the openreg backend has been initialised in this process."""
    return _initialized and not _is_in_bad_fork()


def _is_in_bad_fork() -> bool:
    return _C._is_in_bad_fork()


def _lazy_init() -> None:
    """Initialise the backend on first use (called by PyTorch too)."""
    global _initialized
    if is_initialized():
        return
    with _init_lock:
        if is_initialized():
            return
        if _is_in_bad_fork():
            raise RuntimeError(
                "Cannot re-initialize openreg in forked subprocess. To use openreg "
                "with multiprocessing, you must use the 'spawn' start method"
            )
        _C._init()
        _initialized = True


def init() -> None:
    """Initialise the backend explicitly (like ``torch.cuda.init``)."""
    _lazy_init()


def current_device() -> int:
    """Index of the current openreg device of this thread."""
    return _C._get_device()


def set_device(device: _device_t) -> None:
    """Set the current openreg device. Negative indices are ignored, as in CUDA."""
    index = _get_device_index(device)
    if index >= 0:
        _lazy_init()
        _check_index(index)
        _C._set_device(index)


class device:
    """Context manager that changes the current openreg device."""

    def __init__(self, device: Any):
        self.idx = _get_device_index(device, optional=True) if device is not None else -1
        self.prev_idx = -1

    def __enter__(self):
        if self.idx >= 0:
            _lazy_init()
            _check_index(self.idx)
        self.prev_idx = _C._exchange_device(self.idx)

    def __exit__(self, *args: Any) -> bool:
        self.idx = _C._maybe_exchange_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of ``obj`` (a tensor) current."""

    def __init__(self, obj: torch.Tensor):
        if not isinstance(obj, torch.Tensor):
            raise TypeError(f"device_of: expected a torch.Tensor, got {type(obj).__name__}")
        idx = obj.get_device() if obj.device.type == "openreg" else -1
        super().__init__(idx)


def synchronize(device: _device_t = None) -> None:
    """Wait for all work on every stream of ``device`` to finish."""
    _lazy_init()
    _C._synchronize(_check_index(_get_device_index(device)))


class _DeviceProperties:
    """Properties of an openreg device (cf. ``torch.cuda.get_device_properties``).

    The fields of ``torch.cuda``'s that mean something here, from the
    runtime's ``orDeviceProp``: ``name``, ``total_memory`` (the capacity,
    ``OPENREG_DEVICE_MEMORY``), ``multi_processor_count`` (worker threads per
    device, ``OPENREG_DEVICE_WORKERS``), ``major``/``minor`` (the
    simulation's "compute capability", 1.0), ``uuid`` (a ``uuid.UUID``, the
    same for a device in every process on this host: see docs/device.md),
    ``is_integrated`` (1: device memory is host RAM), ``is_multi_gpu_board``
    (0). Plus openreg's own ``strict_memory`` and ``stream_priority_range``.
    Hardware fields (``L2_cache_size``, ``warp_size``, clocks, shared memory,
    PCI ids, ...) have no meaning for the simulation and are absent.
    """

    def __init__(self, props: dict):
        self.name: str = props["name"]
        self.total_memory: int = props["total_memory"]
        self.multi_processor_count: int = props["multi_processor_count"]
        self.major: int = props["major"]
        self.minor: int = props["minor"]
        self.uuid: _uuid.UUID = _uuid.UUID(bytes=props["uuid"])
        self.is_integrated: int = props["is_integrated"]
        self.is_multi_gpu_board: int = props["is_multi_gpu_board"]
        self.strict_memory: bool = props["strict_memory"]
        self.stream_priority_range = (
            props["stream_priority_least"],
            props["stream_priority_greatest"],
        )

    def __repr__(self) -> str:
        return (
            f"_DeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory // (1024 * 1024)}MB, "
            f"multi_processor_count={self.multi_processor_count}, uuid={self.uuid}, "
            f"is_integrated={self.is_integrated}, is_multi_gpu_board={self.is_multi_gpu_board}, "
            f"strict_memory={self.strict_memory})"
        )


def get_device_properties(device: _device_t = None) -> _DeviceProperties:
    """Properties of ``device`` (name, total_memory, multi_processor_count, ...)."""
    # A pure runtime query: the runtime's own binding (orGetDeviceProperties).
    return _DeviceProperties(_runtime.get_device_properties(_check_index(_get_device_index(device))))


def get_device_name(device: _device_t = None) -> str:
    """The name of ``device`` (default: the current one), from :func:`get_device_properties`."""
    return get_device_properties(device).name


def get_device_capability(device: _device_t = None) -> tuple:
    """``(major, minor)`` version of ``device`` (default: the current one), as ``torch.cuda``'s."""
    props = get_device_properties(device)
    return props.major, props.minor


def can_device_access_peer(device: _device_t, peer: _device_t) -> bool:
    """Whether ``device`` can reach ``peer``'s memory (``orDeviceCanAccessPeer``).

    True for any two distinct openreg devices: every device's memory is mapped
    in this process, and copies between devices go device to device. False
    for a device and itself, as in CUDA."""
    device, peer = _get_device_index(device), _get_device_index(peer)
    for d in (device, peer):
        _check_index(d)
    return _runtime.device_can_access_peer(device, peer)


# As torch.cuda.OutOfMemoryError: the very class the allocator raises.
OutOfMemoryError = torch.OutOfMemoryError


def _sleep(microseconds: int) -> None:
    """Occupy the current stream for ``microseconds`` (like ``torch.cuda._sleep``)."""
    _lazy_init()
    _C._sleep(int(microseconds))


from .amp import get_amp_supported_dtype, is_bf16_supported  # noqa: E402
from . import serialization  # noqa: E402,F401  (torch.load placement, see there)
from .streams import Event, Stream, StreamContext, current_stream, default_stream, set_stream, stream  # noqa: E402
from .sanitizer import StreamRaceError, is_stream_sanitizer_enabled, set_stream_sanitizer  # noqa: E402
from . import memory  # noqa: E402,F401
from .graphs import (  # noqa: E402
    OpenRegGraph,
    graph,
    graph_pool_handle,
    is_current_stream_capturing,
    make_graphed_callables,
)
from .memory import (  # noqa: E402
    empty_cache,
    get_per_process_memory_fraction,
    host_memory_stats,
    host_memory_stats_as_nested_dict,
    memory_snapshot,
    memory_stats_as_nested_dict,
    memory_summary,
    reset_accumulated_host_memory_stats,
    reset_peak_host_memory_stats,
    set_per_process_memory_fraction,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)
from .random import (  # noqa: E402
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)



def __getattr__(name: str) -> Any:
    # Inductor looks its PrivateUse1 backend up on the device module
    # (torch.openreg.Scheduling, .PythonWrapperCodegen, .CppWrapperCodegen,
    # .WrapperFxCodegen); answering loads torch_openreg.inductor only then.
    from ..inductor import INDUCTOR_ATTRS, inductor_attr
    from ..torch_gates import INDUCTOR_BACKEND_INIT

    if name in INDUCTOR_ATTRS:
        return inductor_attr(name)
    if name == "_inductor_backend_init" and INDUCTOR_BACKEND_INIT:
        # 2.15's official hook (gap 16 fixed): Inductor calls it and the
        # backend registers itself, with its per-device config.
        from ..inductor import register_inductor

        return register_inductor
    raise AttributeError(f"module 'torch.openreg' has no attribute {name!r}")


__all__ = [
    "Event", "Stream", "StreamContext", "current_device", "current_stream",
    "default_stream", "device", "device_count", "device_of", "empty_cache",
    "get_amp_supported_dtype", "get_device_capability", "get_device_name",
    "get_device_properties", "is_bf16_supported",
    "get_rng_state", "get_rng_state_all", "init", "initial_seed", "is_available",
    "is_initialized", "manual_seed", "manual_seed_all", "max_memory_allocated",
    "max_memory_reserved", "mem_get_info", "memory_allocated", "memory_reserved",
    "memory_stats", "reset_accumulated_memory_stats", "reset_peak_memory_stats",
    "seed", "seed_all", "set_device", "set_rng_state", "set_rng_state_all",
    "set_stream", "stream", "synchronize",
    "StreamRaceError", "set_stream_sanitizer", "is_stream_sanitizer_enabled",
    "OutOfMemoryError", "can_device_access_peer", "get_per_process_memory_fraction",
    "host_memory_stats", "host_memory_stats_as_nested_dict", "memory_snapshot",
    "memory_stats_as_nested_dict", "memory_summary", "reset_accumulated_host_memory_stats",
    "reset_peak_host_memory_stats", "set_per_process_memory_fraction",
    "OpenRegGraph", "graph", "graph_pool_handle", "is_current_stream_capturing",
    "make_graphed_callables",
]
