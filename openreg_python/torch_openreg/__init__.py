"""OpenReg: a CPU-backed simulated accelerator for PyTorch's PrivateUse1 mechanism.

``import torch`` loads this package through the ``torch.backends`` entry point
(``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns that off; then ``import torch_openreg``
does the same). Loading it:

* loads ``libtorch_openreg`` (via ``torch_openreg._C``), whose static
  initialisers register the allocator, device guard, hooks, host allocator,
  generator and kernels for the PrivateUse1 dispatch key;
* renames PrivateUse1 to ``openreg`` and registers ``torch.openreg``;
* generates ``Tensor.openreg()``, ``Tensor.is_openreg``, ``Module.openreg()``
  and the storage methods.
"""



def _autoload() -> None:
    """Entry point of the ``torch.backends`` group.

    Importing the package does the work. Defined before ``import torch`` so
    that ``import torch_openreg`` as the *first* import (torch then runs its
    entry points while this module is still initialising) finds it.
    """


import atexit  # noqa: E402

import torch  # noqa: E402


# [docs:one-privateuse1-backend]
def _check_privateuse1_is_free() -> None:
    # Only one PrivateUse1 backend can live in a process. If another one got
    # there first (its entry point ran before ours), loading our library
    # would fail with duplicate-kernel registration errors: say what happened
    # and how to choose, before anything is registered.
    taken = torch._C._get_privateuse1_backend_name()
    if taken in ("privateuseone", "openreg"):
        return
    from importlib.metadata import entry_points

    backends = sorted({ep.value.split(":")[0].split(".")[0]
                       for ep in entry_points(group="torch.backends")} | {"torch_openreg"})
    raise RuntimeError(
        f"torch_openreg cannot register the device 'openreg': PrivateUse1 is already the "
        f"device '{taken}'. Only one PrivateUse1 backend can live in a process, and these "
        f"packages each register one: {', '.join(backends)}. Choose one: set "
        f"TORCH_DEVICE_BACKEND_AUTOLOAD=0 and import the package of the backend you want "
        f"(for example `import torch_openreg`), or uninstall the others.")
# [docs:one-privateuse1-backend:end]


_check_privateuse1_is_free()

from . import _C  # noqa: F401,E402  (registers the backend with c10/ATen)
from . import openreg
from .openreg.sanitizer import StreamRaceError  # noqa: F401

__all__ = ["inductor", "openreg", "ops", "profiler", "StreamRaceError"]


def _register() -> None:
    # Idempotent: the entry point and a plain import may both get here.
    if torch._C._get_privateuse1_backend_name() != "openreg":
        torch.utils.rename_privateuse1_backend("openreg")
    if not hasattr(torch, "openreg"):
        torch._register_device_module("openreg", openreg)
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
        )
    openreg.serialization._register()

# The Kineto plugin and the legacy profiler stubs register themselves when
# their library loads. Loading it with the package makes it the process's
# PrivateUse1 profiler: Kineto only ever uses the first one registered.
from . import profiler  # noqa: E402,F401


_register()

# AOTInductor: the model runner registered as "openreg"
# (torch._inductor.aoti_load_package), and the launch ABI and C shim that a
# package's model library calls. Loaded globally: a model library is linked
# against torch only and finds these symbols in the process (docs/deploy.md).
def _load_aoti_runtime() -> None:
    import ctypes
    import os

    lib = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")
    for name in ("libopenreg_inductor.so", "libopenreg_aoti_shim.so", "libopenreg_aoti.so"):
        ctypes.CDLL(os.path.join(lib, name), mode=os.RTLD_GLOBAL)


_load_aoti_runtime()

# Custom operators defined in Python (torch.ops.openreg.rms_norm); the C++ ones
# are registered by libtorch_openreg. After _register(): "openreg" must parse
# as a device type for register_kernel("openreg").
from . import ops  # noqa: E402
from . import distributed  # noqa: E402,F401  (registers the "occl" c10d backend)

# torch.compile: registers the Dynamo device interface and the Inductor
# backend lazily, when PyTorch first needs them (importing torch_openreg
# must not import torch._dynamo or torch._inductor; see docs/compile.md).
from . import inductor  # noqa: E402

inductor.install_lazy_registration()


def _let_autograd_workers_finish() -> None:
    # torch 2.13's backward stashes a Python object (a contextvars copy) in
    # the thread-local state that the openreg autograd worker thread adopts;
    # the worker drops it just after backward() returns, which needs the GIL.
    # If the script ends right there, the worker meets a finalizing
    # interpreter, is torn down inside a noexcept destructor and the process
    # aborts ("terminate called without an active exception"). Releasing the
    # GIL briefly at exit lets it finish. (Any non-CPU device has the race;
    # CUDA included.)
    if openreg.is_initialized():
        import time

        time.sleep(0.02)


atexit.register(_let_autograd_workers_finish)
