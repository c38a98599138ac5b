"""``torch.compile(backend="openreg")``: a debugging backend.

It checks that every input of the captured graph is on openreg (or the CPU),
then runs the graph through AOTAutograd with eager kernels, without Inductor.
When ``torch.compile(model)`` fails or disagrees with eager, this backend
tells whether Dynamo/AOTAutograd (fails here too) or Inductor (works here) is
at fault. Registered through Dynamo's ``torch_dynamo_backends`` entry point.
"""

from __future__ import annotations

from typing import Any

import torch


class UnsupportedDeviceError(RuntimeError):
    """A graph input is on a device the openreg backend does not handle."""


# [docs:debug-backend]
def openreg_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    from torch._dynamo.backends.common import aot_autograd
    from torch._subclasses.fake_tensor import FakeTensor

    for i, x in enumerate(example_inputs):
        if isinstance(x, torch.Tensor) and x.device.type not in ("openreg", "cpu"):
            kind = "FakeTensor" if isinstance(x, FakeTensor) else "tensor"
            raise UnsupportedDeviceError(
                f"backend 'openreg': graph input {i} is a {kind} on {x.device}; "
                "only openreg and cpu tensors are supported")
    return aot_autograd(fw_compiler=lambda g, _: g, bw_compiler=lambda g, _: g)(gm, example_inputs)
# [docs:debug-backend:end]
