"""The snippets of host code Inductor writes for device operations
(``torch._inductor.codegen.common.DeviceOpOverrides``), for openreg."""

from __future__ import annotations

from torch._inductor.codegen.common import DeviceOpOverrides


# [docs:device-op-overrides]
class OpenRegDeviceOpOverrides(DeviceOpOverrides):
    def import_get_raw_stream_as(self, name: str) -> str:
        return f"from torch_openreg.inductor._launcher import current_raw_stream as {name}"

    def set_device(self, device_idx: int) -> str:
        return f"torch.openreg.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.openreg.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.openreg.device({device_idx})"

    def current_stream(self) -> str:
        return "torch.openreg.current_stream()"

    def cpp_kernel_type(self) -> str:
        return "void*"  # a C++ kernel's address, as on the CPU

    def aten_device_type(self) -> str:
        # The C++ wrapper's ATen device type (asked from 2.15 on, gap 21;
        # earlier releases never call it).
        return "at::kPrivateUse1"
# [docs:device-op-overrides:end]
