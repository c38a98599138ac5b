"""The device under test: the one place the suite takes its name from.

The suite has two kinds of tests:

* **device-generic** tests use only public PyTorch APIs (devices, memory,
  streams and events, operators against the CPU, autograd, AMP, RNG,
  serialization, the profiler, torch.distributed, torch.compile, graphs).
  They never write the device's name: they use ``DEVICE`` (``"openreg"``),
  ``device_module`` (``torch.openreg``, found through
  ``torch.get_device_module``) and ``DIST_BACKEND`` (the c10d backend).
* **openreg-only** tests check openreg's own internals (the runtime's C API,
  strict memory, the stream sanitizer, liboccl and its wire, the code its
  Inductor backend generates, its error messages and configuration
  variables, the docs and tools of this repository). They carry the
  ``openreg_only`` marker, on the class, the test or the module
  (``pytestmark``).

``pytest tests --device NAME [--dist-backend B]`` (or the environment
variables ``OPENREG_TESTS_DEVICE`` and ``OPENREG_TESTS_DIST_BACKEND``, which
the options set and child processes inherit) runs the device-generic tests
against another PrivateUse1 backend, loaded by its own autoload entry point;
the openreg-only tests are deselected. ``tests/template/test_suite_split.py``
checks that no device-generic test writes the name.
"""

import os
import sys

DEVICE_VAR = "OPENREG_TESTS_DEVICE"
DIST_BACKEND_VAR = "OPENREG_TESTS_DIST_BACKEND"

#: The device type under test ("openreg" unless --device says otherwise).
DEVICE = os.environ.get(DEVICE_VAR) or "openreg"
#: True when the suite runs against openreg itself.
IS_OPENREG = DEVICE == "openreg"
#: The device's c10d backend (None: the distributed tests are skipped).
DIST_BACKEND = os.environ.get(DIST_BACKEND_VAR) or ("occl" if IS_OPENREG else None)
#: True when openreg runs in memcheck mode (OPENREG_MEMCHECK, docs/memcheck.md):
#: no caching allocator, each allocation ends at a guard page.
MEMCHECK = IS_OPENREG and os.environ.get("OPENREG_MEMCHECK", "0").lower() not in ("", "0", "off")


def device(index=None) -> str:
    """``"<device>"`` or ``"<device>:<index>"``, for ``device=`` arguments."""
    return DEVICE if index is None else f"{DEVICE}:{index}"


class _DeviceModule:
    """``torch.<device>``, looked up on each use: importing this module (and
    collecting the tests) imports no torch and needs no backend, so a child
    interpreter or a collection with an unknown ``--device`` still imports it.
    Attribute reads only: to patch the module, patch
    ``torch.get_device_module(DEVICE)`` itself."""

    def __getattr__(self, name):
        import torch

        return getattr(torch.get_device_module(DEVICE), name)

    def __repr__(self):
        return f"<device module of {DEVICE!r}>"


#: torch.openreg for openreg: the device module, as torch.get_device_module(DEVICE).
device_module = _DeviceModule()


def busy(us: int) -> None:
    """Queue ``us`` microseconds of work on the current stream of the device,
    with the device module's ``_sleep`` (``torch.cuda._sleep``'s counterpart,
    the way PyTorch's own stream tests keep a stream busy). A backend without
    one skips the test that needs it, with that reason."""
    sleep = getattr(device_module, "_sleep", None)
    if sleep is None:
        import pytest

        pytest.skip(f"torch.{DEVICE} has no _sleep (torch.cuda._sleep) to queue device work")
    sleep(us)


# ------------------------------------------------ hardware classification ----
# Every test class declares PyTorch's hardware classification
# (``hw_classification = HW.ACCELERATOR`` or ``HW.GENERIC``; tests/conftest.py
# enforces it and selects with ``--hw-classification``). ``HW`` is
# torch.testing's HardwareClassification where the release has it (2.14 on)
# and the same enum before: that choice is a version gate, so it comes from the
# backend's gates module, loaded by path (importing its package would register
# the backend) and on first use.

_GATES_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "openreg_python", "torch_openreg", "torch_gates.py")
_GATES_MODULE = "torch_openreg.torch_gates"


def gates():
    """The version gates module (openreg_python/torch_openreg/torch_gates.py)."""
    module = sys.modules.get(_GATES_MODULE)
    if module is None:
        import importlib.util

        spec = importlib.util.spec_from_file_location(_GATES_MODULE, _GATES_FILE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[_GATES_MODULE] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[_GATES_MODULE]
            raise
    return module


def __getattr__(name):
    if name == "HW":
        return gates().HardwareClassification
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
