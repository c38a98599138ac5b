"""Automatic mixed precision support for ``torch.autocast("openreg")``.

The operator policies (which ops run in float16/bfloat16, which in float32,
which promote) are registered in C++ (``csrc/aten/kernels/Autocast.cpp``). This file
holds what ``torch.amp`` asks the device module for.
"""

import torch

# [docs:amp-supported-dtypes]
# torch.amp.autocast calls torch.openreg.get_amp_supported_dtype() when it is
# constructed for "openreg"; any other dtype makes it warn and disable
# itself. Vendor: list the low-precision dtypes your matmul/conv kernels
# really support.
_AMP_DTYPES = (torch.float16, torch.bfloat16)


def get_amp_supported_dtype() -> list:
    """The dtypes ``torch.autocast("openreg", dtype=...)`` accepts."""
    return list(_AMP_DTYPES)
# [docs:amp-supported-dtypes:end]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Whether bfloat16 is supported, as ``torch.cuda.is_bf16_supported``: True,
    openreg runs it natively."""
    return torch.bfloat16 in _AMP_DTYPES
