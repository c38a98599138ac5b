"""``python -m torch_openreg``: an nvidia-smi-like table of openreg devices."""

import sys

import torch

import torch_openreg  # noqa: F401


def _mib(n: int) -> str:
    return f"{n // (1024 * 1024)}MiB"


def main(argv=None) -> int:
    count = torch.openreg.device_count()
    width = 78
    print("+" + "-" * (width - 2) + "+")
    print(f"| OpenReg simulated devices    torch {torch.__version__:<20} devices: {count:<8}|")
    print("+" + "-" * (width - 2) + "+")
    print(f"| {'Idx':<4}{'Name':<30}{'Memory-Usage':<24}{'Strict':<8}{'Workers':<9}|")
    print("|" + "=" * (width - 2) + "|")
    for i in range(count):
        props = torch.openreg.get_device_properties(i)
        free, total = torch.openreg.mem_get_info(i)
        usage = f"{_mib(total - free)} / {_mib(total)}"
        strict = "on" if props.strict_memory else "off"
        print(f"| {i:<4}{props.name:<30}{usage:<24}{strict:<8}{props.multi_processor_count:<9}|")
    print("+" + "-" * (width - 2) + "+")
    print("Memory-Usage is device memory held by this process's runtime (allocator")
    print("segments included). Configure with OPENREG_DEVICE_COUNT, OPENREG_DEVICE_MEMORY,")
    print("OPENREG_STRICT_MEMORY and OPENREG_DEVICE_WORKERS.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
