"""Shared helpers for tests/compile (not a test module)."""

import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch._inductor.utils import run_and_get_code


def compile_and_run(fn, *args, **compile_kwargs):
    """(result, generated wrapper sources, frame counter) of torch.compile(fn)(*args).

    With ``mode=`` (which only the default backend takes) the counter is None."""
    counter = None if "mode" in compile_kwargs else CompileCounterWithBackend("inductor")
    compiled = torch.compile(fn, backend=counter or "inductor", **compile_kwargs)
    result, codes = run_and_get_code(compiled, *args)
    return result, codes, counter


def assert_openreg_code(codes):
    """The generated wrapper defines and launches openreg C++ kernels."""
    code = "\n".join(codes)
    assert "openreg_compile(async_compile, 'cpp_" in code, code
    assert "device='openreg:" in code or "empty_strided" not in code, code
    return code


def to(tree, device):
    return torch.utils._pytree.tree_map(
        lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, tree)
