"""OCCL for torch.distributed: the ``occl`` backend for openreg tensors.

Importing ``torch_openreg`` (which ``import torch`` does through the
``torch.backends`` entry point) registers ``occl`` with c10d, so::

    dist.init_process_group("occl")                    # openreg tensors
    dist.init_process_group("cpu:gloo,openreg:occl")   # both devices
    dist.init_process_group(device_id=torch.device("openreg", rank))

all work. ``import torch`` already imports ``torch.distributed``, so the
registration costs only loading ``torch_openreg._occl``.
"""

import torch.distributed as dist

from .. import _occl
from .._occl import ProcessGroupOCCL

__all__ = ["ProcessGroupOCCL", "is_occl"]


def _create_occl(dist_backend_opts, backend_options):
    # extended_api=True: c10d hands us its _DistributedBackendOptions.
    return ProcessGroupOCCL(
        dist_backend_opts.store,
        dist_backend_opts.group_rank,
        dist_backend_opts.group_size,
        dist_backend_opts.timeout,
        str(dist_backend_opts.group_id),
    )


def is_occl(group=None) -> bool:
    """True if ``group`` (default: the world) runs openreg collectives on OCCL;
    False when there is no world group yet."""
    if group is None and not dist.is_initialized():
        return False
    pg = group or dist.group.WORLD
    if not isinstance(pg, dist.ProcessGroup):
        raise TypeError(f"is_occl: expected a torch.distributed.ProcessGroup, got {type(pg).__name__}")
    try:
        return isinstance(pg._get_backend(torch.device("openreg")), ProcessGroupOCCL)
    except RuntimeError:
        return False


def _register() -> None:
    if "occl" in dist.Backend.backend_list:
        return
    # [docs:occl-register]
    # `devices` must be a list: a string would be iterated letter by letter.
    dist.Backend.register_backend("occl", _create_occl, extended_api=True, devices=["openreg"])
    # [docs:occl-register:end]


import torch  # noqa: E402

_register()
