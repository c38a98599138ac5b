"""Dynamo's view of the openreg device (``torch._dynamo.device_interface``).

Dynamo and Inductor never call ``torch.openreg`` directly: they look the device
up with ``get_interface_for_device("openreg")`` and use what this class
provides. Dynamo also recognises stream and event code inside compiled
functions by identity with the objects listed here (``Stream``, ``Event``,
``current_stream``, ``stream``), so these are the very objects of
``torch.openreg``, not wrappers.

Vendor: copy this class and point every attribute at your device module.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._dynamo.device_interface import (
    DeviceInterface,
    caching_worker_current_devices,
    caching_worker_device_properties,
)

from .. import _C

_openreg = torch.openreg  # the device module (torch_openreg.openreg)


# [docs:device-interface]
class OpenRegInterface(DeviceInterface):
    device = _openreg.device  # type: ignore[assignment]
    # Dynamo puts these into graphs: they must subclass torch.Stream/torch.Event.
    Stream = _openreg.Stream  # type: ignore[assignment]
    Event = _openreg.Event  # type: ignore[assignment]

    class Worker:
        """Answers in compile worker processes, where the device must not be
        initialised: properties are cached by the parent before workers start
        (``caching_device_properties`` in torch/_inductor/async_compile.py)."""

        @staticmethod
        def set_device(device: int) -> None:
            caching_worker_current_devices["openreg"] = device

        @staticmethod
        def current_device() -> int:
            if "openreg" in caching_worker_current_devices:
                return caching_worker_current_devices["openreg"]
            return _openreg.current_device()

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> Any:
            if isinstance(device, str):
                device = torch.device(device)
            if isinstance(device, torch.device):
                if device.type != "openreg":
                    raise ValueError(f"expected an openreg device, got {device}")
                device = device.index
            if device is None:
                device = OpenRegInterface.Worker.current_device()
            if "openreg" not in caching_worker_device_properties:
                caching_worker_device_properties["openreg"] = [
                    _openreg.get_device_properties(i) for i in range(_openreg.device_count())
                ]
            return caching_worker_device_properties["openreg"][device]

    current_device = staticmethod(_openreg.current_device)
    set_device = staticmethod(_openreg.set_device)
    device_count = staticmethod(_openreg.device_count)
    is_available = staticmethod(_openreg.is_available)
    synchronize = staticmethod(_openreg.synchronize)
    stream = staticmethod(_openreg.stream)  # type: ignore[assignment]
    current_stream = staticmethod(_openreg.current_stream)
    set_stream = staticmethod(_openreg.set_stream)  # type: ignore[assignment]
    memory_allocated = staticmethod(_openreg.memory_allocated)
    is_bf16_supported = staticmethod(_openreg.is_bf16_supported)  # type: ignore[arg-type]

    @staticmethod
    def exchange_device(device: int) -> int:
        if device >= 0:
            _openreg._lazy_init()
        return _C._exchange_device(device)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        return _C._maybe_exchange_device(device)

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        _C._set_current_stream(stream_id, device_index)

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        """The runtime handle (``orStream_t``) of the current stream, as an int."""
        from ._launcher import current_raw_stream

        _openreg._lazy_init()
        return current_raw_stream(device_idx)

    @staticmethod
    def get_device_properties(device: torch.types.Device = None) -> Any:
        return _openreg.get_device_properties(device)

    @classmethod
    def get_cache_system_info(cls) -> dict[str, object] | None:
        # From 2.15, Inductor puts this into the FX graph cache key (gap 22
        # fixed by the hook; earlier releases never call it and the key gets
        # the hash through config.py instead).
        from .source_hash import source_hash

        return {"backend_source_hash": source_hash()}

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> int:
        # Part of Inductor's cache key (codecache.py), as for CUDA.
        major, minor = _openreg.get_device_capability(device)
        return major * 10 + minor

    @staticmethod
    def is_triton_capable(device: torch.types.Device = None) -> bool:
        return False  # openreg kernels are C++ (see scheduling.py)
# [docs:device-interface:end]
