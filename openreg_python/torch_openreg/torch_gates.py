"""Every difference between the supported PyTorch releases, in one place.

OpenReg supports the releases of ``torch-releases.txt`` (the last three) from
one tree. Where they differ, the code asks this module, never
``torch.__version__``: each gate below names the PyTorch change behind it and
the release from which it can be deleted (when the oldest release of the
window has the change, the gate and the code for the older releases go; the
test ``tests/docs/test_torch_gates.py`` fails once a gate is dead). The C++
side's twin is ``openreg_python/csrc/TorchGates.h``. Adding a release and
dropping the oldest: ``docs/upgrading.md``.

This module imports nothing from ``torch_openreg``: the test suite and the
conformance suite load it by path (``tests.target.gates()``,
``openreg_conformance.gates()``), without registering the backend, to read the
hardware classification and the gaps per release.

Vendor: keep this file; your gates are the same PyTorch changes.
"""

from __future__ import annotations

import enum
import os
import re
from dataclasses import dataclass

import torch

# ------------------------------------------------------------- releases ----


def release(version: str) -> tuple[int, int, int]:
    """``"2.13.0+cpu"`` -> ``(2, 13, 0)`` (local labels and pre-releases dropped)."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if not m:
        raise ValueError(f"not a torch release: {version!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def _window_file() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    # Installed: next to this file (CMake installs it); in the source tree:
    # the repository root.
    for path in (os.path.join(here, "torch-releases.txt"),
                 os.path.join(here, "..", "..", "torch-releases.txt")):
        if os.path.exists(path):
            return path
    raise FileNotFoundError("torch-releases.txt (the supported window) is missing")


def _read_window() -> tuple[tuple[int, int, int], ...]:
    with open(_window_file()) as f:
        lines = [line.split("#")[0].strip() for line in f]
    return tuple(release(v) for v in lines if v)


#: The supported releases, newest first (torch-releases.txt).
WINDOW = _read_window()
#: The oldest supported release: a gate whose change it has is dead.
OLDEST = min(WINDOW)
#: The running torch's release.
TORCH = release(torch.__version__)


def fmt(rel: tuple[int, int, int]) -> str:
    return ".".join(map(str, rel))


# ---------------------------------------------------------------- gates ----


@dataclass(frozen=True)
class Gate:
    """A PyTorch change that some releases of the window have and others not."""

    name: str
    since: tuple[int, int, int]  # the first release with the change
    change: str  # the PyTorch change: pull request or release note

    def __bool__(self) -> bool:
        return TORCH >= self.since


GATES: dict[str, Gate] = {}


def _gate(name, since, change) -> Gate:
    g = Gate(name, since, change)
    GATES[name] = g
    return g


# [docs:torch-gates]
#: torch.testing._internal.common_utils.HardwareClassification: the
#: hw_classification attribute of test classes and --hw-classification
#: selection (the Accelerator Integration WG's test classification; 2.14:
#: torch/testing/_internal/common_utils.py). Older releases: the same enum and
#: filter, below.
HW_CLASSIFICATION = _gate("HW_CLASSIFICATION", (2, 14, 0),
                          "HardwareClassification in torch.testing._internal.common_utils (2.14)")

#: torch.accelerator.random (initial_seed, get_rng_state, get_rng_state_all):
#: the current accelerator's generator through the device-generic API, which
#: reaches a PrivateUse1 backend through its generator hooks. 2.14:
#: torch/accelerator/random.py.
ACCELERATOR_RANDOM = _gate("ACCELERATOR_RANDOM", (2, 14, 0),
                           "torch.accelerator.random (2.14)")
#: Inductor's PrivateUse1 hook calls the device module's
#: ``_inductor_backend_init()``, which registers the backend itself (with its
#: device_custom_config); before, the hook registered the module's Scheduling
#: and wrapper classes without any config (docs/pytorch-gaps.md, gap 16).
#: 2.15: torch/utils/backend_registration.py documents the hook;
#: torch/_inductor/codegen/common.py init_backend_registration calls it.
INDUCTOR_BACKEND_INIT = _gate("INDUCTOR_BACKEND_INIT", (2, 15, 0),
                              "init_backend_registration calls <device module>."
                              "_inductor_backend_init (2.15)")
#: The C++ wrapper maps a device type to its ATen name through the device's
#: DeviceOpOverrides.aten_device_type(); cpp_utils.DEVICE_TO_ATEN (in-tree
#: devices only) is gone (gap 21). 2.15: torch/_inductor/codegen/cpp_utils.py
#: device_to_aten.
INDUCTOR_ATEN_DEVICE_TYPE = _gate("INDUCTOR_ATEN_DEVICE_TYPE", (2, 15, 0),
                                  "cpp_utils.device_to_aten asks DeviceOpOverrides."
                                  "aten_device_type() (2.15)")
#: Dynamo takes a device's Stream and Event classes from the registered device
#: interfaces (creating torch.<device>.Stream() in compiled code is traced, no
#: longer a graph break); before, only torch.cuda's and torch.xpu's by name.
#: 2.15: torch/_dynamo/variables/user_defined.py _in_graph_classes.
DYNAMO_DEVICE_STREAM_CLASSES = _gate("DYNAMO_DEVICE_STREAM_CLASSES", (2, 15, 0),
                                     "_in_graph_classes from the device interfaces (2.15)")
# [docs:torch-gates:end]


# ----------------------------------------------------------------- gaps ----
# The entries of docs/pytorch-gaps.md whose presence differs across the window
# (every other entry is in every supported release). Each gap's test is a
# strict expected failure where has_gap() is true and an ordinary test
# elsewhere; a workaround for a gap runs only where has_gap() is true.

#: gap number -> the first release of the window that no longer has it.
GAPS_FIXED_IN: dict[int, tuple[int, int, int]] = {
    4: (2, 14, 1),   # c10d Backend.register_backend turns devices="x" into ["x"]
    6: (2, 14, 1),   # _LocalOffsetBasedRNGTracker._device asks torch.accelerator
    23: (2, 14, 1),  # c10d picks a mixed group's default backend by device priority
    9: (2, 15, 0),   # common_device_type normalises the backend's name to privateuse1
    11: (2, 15, 0),  # emptyHostCache returns when no host allocator is registered
    16: (2, 15, 0),  # the device module's _inductor_backend_init hook
    21: (2, 15, 0),  # cpp_utils.device_to_aten asks DeviceOpOverrides.aten_device_type()
    22: (2, 15, 0),  # DeviceInterface.get_cache_system_info() goes into the FX cache key
}
#: gap number -> the first release of the window that has it (a new gap).
GAPS_NEW_IN: dict[int, tuple[int, int, int]] = {
}


def has_gap(number: int, rel: tuple[int, int, int] | None = None) -> bool:
    """Whether ``rel`` (default: the running torch) has gap ``number``."""
    rel = TORCH if rel is None else rel
    fixed, new = GAPS_FIXED_IN.get(number), GAPS_NEW_IN.get(number)
    return (fixed is None or rel < fixed) and (new is None or rel >= new)


# --------------------------------------------------- hardware classes ----


class _HardwareClassification(enum.Enum):
    """PyTorch 2.14's ``HardwareClassification``, for the releases before it
    (same names and values; deleted with the HW_CLASSIFICATION gate)."""

    GENERIC = "generic"
    ACCELERATOR = "accelerator"
    CPU = "cpu"
    CUDA = "cuda"
    MPS = "mps"
    XPU = "xpu"


def _filter_by_hw_classification(items, requirement, get_class, *, on_match):
    """PyTorch 2.14's ``filter_by_hw_classification`` for the releases before it:
    items whose class declares one of ``requirement`` go to ``on_match``;
    classless and unclassified items are not selected. Same summary line."""
    total = passed = no_class = unclassified = 0
    for item in items:
        total += 1
        cls = get_class(item)
        if cls is None:
            no_class += 1
            continue
        value = getattr(cls, "hw_classification", None)
        if value is None:
            unclassified += 1
            continue
        if not isinstance(value, _HardwareClassification):
            raise TypeError(f"{cls.__module__}.{cls.__name__}.hw_classification must be a "
                            "HardwareClassification")
        if value in requirement:
            passed += 1
            on_match(item)
    parts = [f"HW classification mode active ({[e.name for e in requirement]}):",
             f"total={total}, passed={passed},", f"unclassified={unclassified},"]
    if no_class:
        parts.append(f"no_class={no_class},")
    parts.append(f"mismatched={total - passed - unclassified - no_class}")
    print(" ".join(parts))


def _torch_testing_hw():
    # torch.testing._internal.common_utils loads a hypothesis profile of its own
    # on import; the suite's own settings are put back.
    try:
        import hypothesis
    except ImportError:  # pragma: no cover - hypothesis is a test requirement
        hypothesis = None
    before = hypothesis.settings.default if hypothesis else None
    from torch.testing._internal import common_utils

    if hypothesis is not None:
        hypothesis.settings.register_profile("before-torch-testing", before)
        hypothesis.settings.load_profile("before-torch-testing")
    return common_utils.HardwareClassification, common_utils.filter_by_hw_classification


_HW = None


def __getattr__(name):
    # HardwareClassification and filter_by_hw_classification, resolved on first
    # use: torch.testing is imported only by test runs, never by `import torch`.
    global _HW
    if name in ("HardwareClassification", "filter_by_hw_classification"):
        if _HW is None:
            _HW = (_torch_testing_hw() if HW_CLASSIFICATION else
                   (_HardwareClassification, _filter_by_hw_classification))
        return _HW[0] if name == "HardwareClassification" else _HW[1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
