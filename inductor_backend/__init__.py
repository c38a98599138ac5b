"""``torch_openreg.inductor``: ``torch.compile`` for the openreg device.

Installed from the top-level folder ``inductor_backend/`` (see
docs/building.md). Importing this package imports neither ``torch._dynamo``
nor ``torch._inductor``; the registrations happen lazily, the first time
PyTorch needs them (docs/compile.md explains each hook):

* Dynamo's device interface: when ``torch._dynamo`` has been
  imported (``register_dynamo``), through the import hook that
  ``install_lazy_registration`` puts on ``sys.meta_path``;
* Inductor's backend: when Inductor asks the device module for it
  (``torch.openreg.Scheduling`` and friends, see ``inductor_attr``);
* the debugging backend ``torch.compile(backend="openreg")``: Dynamo's
  ``torch_dynamo_backends`` entry point (pyproject.toml).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from types import ModuleType
from typing import Any, Callable

_lock = threading.RLock()
_dynamo_registered = False
_inductor_registered = False


# [docs:register-dynamo]
def register_dynamo() -> None:
    """Registers the Dynamo device interface for ``openreg`` and ``openreg:N``."""
    global _dynamo_registered
    with _lock:
        if _dynamo_registered:
            return
        import torch
        from torch._dynamo.device_interface import register_interface_for_device

        from .device_interface import OpenRegInterface

        register_interface_for_device("openreg", OpenRegInterface)
        for i in range(torch.openreg.device_count()):
            register_interface_for_device(f"openreg:{i}", OpenRegInterface)
        # Dynamo handles a device's stream functions only if they are "torch
        # in-graph functions"; torch.cuda's are listed by name in
        # trace_rules.py, a PrivateUse1 module's must be declared.
        torch._dynamo.allow_in_graph([torch.openreg.stream, torch.openreg.current_stream])
        _dynamo_registered = True
# [docs:register-dynamo:end]


# [docs:register-inductor]
def register_inductor() -> None:
    """Registers the Inductor backend (scheduling, wrappers, per-device config)
    and the device op overrides for ``openreg``."""
    global _inductor_registered
    with _lock:
        if _inductor_registered:
            return
        from torch._inductor.codegen.common import (
            register_backend_for_device,
            register_device_op_overrides,
        )

        from . import config
        from .device_op_overrides import OpenRegDeviceOpOverrides
        from .scheduling import OpenRegScheduling
        from .wrapper import OpenRegCppWrapperCodegen, OpenRegPythonWrapperCodegen

        register_device_op_overrides("openreg", OpenRegDeviceOpOverrides())
        register_backend_for_device(
            "openreg",
            OpenRegScheduling,
            OpenRegPythonWrapperCodegen,
            OpenRegCppWrapperCodegen,
            device_custom_config=config,
        )
        _inductor_registered = True
# [docs:register-inductor:end]


def inductor_attr(name: str) -> Any:
    """``torch.openreg.<name>`` for the names Inductor looks up on a PrivateUse1
    device module (``init_backend_registration`` in
    torch/_inductor/codegen/common.py). Registering here, before Inductor reads
    them, is what makes the first compilation find the backend."""
    register_inductor()
    from torch._inductor.codegen.common import get_scheduling_for_device, get_wrapper_codegen_for_device

    return {
        "Scheduling": get_scheduling_for_device("openreg"),
        "PythonWrapperCodegen": get_wrapper_codegen_for_device("openreg"),
        "CppWrapperCodegen": get_wrapper_codegen_for_device("openreg", cpp_wrapper=True),
        "WrapperFxCodegen": get_wrapper_codegen_for_device("openreg", fx_wrapper=True),
    }[name]


INDUCTOR_ATTRS = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")


class _RunAfterImport(importlib.abc.MetaPathFinder):
    """Runs a callback right after a named module has been executed.

    Used for ``torch._dynamo``: Dynamo's device registry has no
    PrivateUse1 hook in 2.13 (docs/compile.md, "What PyTorch would need to
    change"). The finder only wraps the module's own loader; it changes nothing
    in torch.
    """

    def __init__(self, hooks: dict[str, Callable[[ModuleType], None]]):
        self.hooks = hooks

    def find_spec(self, fullname: str, path: Any, target: Any = None):
        callback = self.hooks.get(fullname)
        if callback is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        del self.hooks[fullname]
        if not self.hooks and self in sys.meta_path:
            sys.meta_path.remove(self)
        inner = spec.loader

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return inner.create_module(spec)

            def exec_module(self, module):
                inner.exec_module(module)
                callback(module)

        spec.loader = _Loader()
        return spec


def install_lazy_registration() -> None:
    """Called by ``import torch_openreg``: arranges for ``register_dynamo`` to
    run as soon as Dynamo's device registry exists (at once if it already does)."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None and hasattr(dynamo, "allow_in_graph"):  # fully imported
        register_dynamo()
        return
    if not any(isinstance(f, _RunAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RunAfterImport({"torch._dynamo": lambda m: register_dynamo()}))
