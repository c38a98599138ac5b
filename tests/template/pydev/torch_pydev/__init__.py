"""pydev: a PrivateUse1 backend written in Python alone, for the conformance runner.

Nothing here comes from this repository's backend: no C++, no runtime, no
allocator. It follows PyTorch's Python-backend route
(``torch.utils.backend_registration._setup_privateuseone_for_python_backend``,
``torch._C._acc``): the device's tensors are wrapper subclasses whose data is
a CPU tensor, every operator runs on that CPU tensor (``__torch_dispatch__``),
and factories reach a ``PrivateUse1`` fallback. It has one device, no
streams or events of its own (the Python device guard's are no-ops), no
memory statistics, no generator of its own and no c10d backend: the
conformance suite run against it must say so, class by class, without
crashing and without loading any other backend.

Loaded by its ``torch.backends`` entry point (``torch_pydev:_autoload``),
like any out-of-tree backend.
"""

import torch
from torch.utils._pytree import tree_map

NAME = "pydev"


class PyDevTensor(torch.Tensor):
    """A ``pydev`` tensor: its metadata mirror ``data``, a CPU tensor."""

    @staticmethod
    def __new__(cls, data: torch.Tensor):
        t = torch.Tensor._make_wrapper_subclass(
            cls, data.shape, strides=data.stride(), storage_offset=data.storage_offset(),
            dtype=data.dtype, layout=data.layout, device=torch.device(NAME, 0),
            requires_grad=data.requires_grad)
        t.data_cpu = data
        return t

    def __repr__(self):
        return f"PyDevTensor({self.data_cpu!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _run_on_cpu(func, args, kwargs or {})


def _to_cpu(x):
    if isinstance(x, PyDevTensor):
        return x.data_cpu
    if isinstance(x, torch.device) and x.type == NAME:
        return torch.device("cpu")
    if isinstance(x, str) and x.split(":")[0] == NAME:
        return "cpu"
    return x


def _run_on_cpu(func, args, kwargs):
    name = func.__name__.split(".")[0]
    tensors = [a for a in torch.utils._pytree.tree_leaves((args, kwargs))
               if isinstance(a, torch.Tensor)]
    if name not in _MIXED and any(isinstance(a, PyDevTensor) for a in tensors) and any(
            not isinstance(a, PyDevTensor) and a.dim() > 0 for a in tensors):
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least "
                           f"two devices, {NAME}:0 and cpu! (when calling {func})")
    out = func(*tree_map(_to_cpu, args), **tree_map(_to_cpu, kwargs))
    target = kwargs.get("device")
    if name in _TO_HOST or (target is not None and torch.device(target).type != NAME):
        return out
    # Results that are an input's data (in-place and out= operators) return that input.
    owners = {id(a.data_cpu): a for a in tensors if isinstance(a, PyDevTensor)}

    def wrap(o):
        if not isinstance(o, torch.Tensor) or isinstance(o, PyDevTensor):
            return o
        return owners[id(o)] if id(o) in owners else PyDevTensor(o)

    return tree_map(wrap, out)


# Operators whose CPU arguments are allowed next to pydev ones (copies), and
# those whose result stays on the host.
_MIXED = {"copy_", "_copy_from", "_to_copy", "_copy_from_and_resize", "set_"}
_TO_HOST = {"_local_scalar_dense", "is_pinned", "equal"}


def _factory_fallback(op, *args, **kwargs):
    # Factories (no tensor argument) reach the PrivateUse1 key: build on the
    # CPU and wrap. Operators with tensor arguments never get here: the
    # subclass's Python key comes first.
    kwargs = dict(kwargs)
    if "device" in kwargs:
        kwargs["device"] = torch.device("cpu")
    out = op(*args, **kwargs)
    return tree_map(lambda o: PyDevTensor(o) if isinstance(o, torch.Tensor) else o, out)


class _DeviceModule:
    """``torch.pydev``: the few calls PyTorch itself looks for."""

    @staticmethod
    def is_available():
        return True

    @staticmethod
    def is_initialized():
        return True

    @staticmethod
    def device_count():
        return 1

    @staticmethod
    def current_device():
        return 0

    @staticmethod
    def set_device(index):
        if int(getattr(index, "index", index) or 0) != 0:
            raise RuntimeError(f"{NAME} has one device, not {index}")

    @staticmethod
    def synchronize(device=None):
        return None

    @staticmethod
    def _is_in_bad_fork():
        return False

    @staticmethod
    def manual_seed_all(seed):
        return None

    @staticmethod
    def get_amp_supported_dtype():
        return [torch.float16, torch.bfloat16]


_LIB = None


def _autoload():
    """The ``torch.backends`` entry point."""
    global _LIB
    if torch._C._get_privateuse1_backend_name() == NAME:
        return
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    _setup_privateuseone_for_python_backend(NAME, backend_module=_DeviceModule())
    _LIB = torch.library.Library("_", "IMPL")
    _LIB.fallback(_factory_fallback, "PrivateUse1")
