"""``torch.compile(backend="openreg")``: a debugging backend.

It checks that every value of the captured graph (its FakeTensors) is on
openreg or the CPU,
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
    """Compile ``gm`` with AOTAutograd and eager kernels (no Inductor), after
    checking that every traced value is on openreg or the CPU
    (:class:`UnsupportedDeviceError` otherwise)."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._subclasses.fake_tensor import FakeTensor

    # Every value Dynamo traced carries a FakeTensor with its device.
    for node in gm.graph.nodes:
        values = torch.utils._pytree.tree_leaves(node.meta.get("example_value"))
        for v in values:
            if isinstance(v, FakeTensor) and v.device.type not in ("openreg", "cpu"):
                raise UnsupportedDeviceError(
                    f"backend 'openreg': {node.op} {node.name!r} is a FakeTensor on "
                    f"{v.device}; only openreg and cpu tensors are supported")
    return aot_autograd(fw_compiler=lambda g, _: g, bw_compiler=lambda g, _: g)(gm, example_inputs)
# [docs:debug-backend:end]
