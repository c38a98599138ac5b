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


import torch  # noqa: E402

from . import _C  # noqa: F401  (registers the backend with c10/ATen)
from . import openreg

__all__ = ["openreg"]


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


_register()
