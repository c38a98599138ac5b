"""Shared helpers for tests/compile (not a test module)."""

import re

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch._inductor.utils import run_and_get_code

from tests.target import IS_OPENREG


def compile_and_run(fn, *args, **compile_kwargs):
    """(result, generated wrapper sources, frame counter) of torch.compile(fn)(*args).

    With ``mode=`` (which only the default backend takes) the counter is None."""
    counter = None if "mode" in compile_kwargs else CompileCounterWithBackend("inductor")
    compiled = torch.compile(fn, backend=counter or "inductor", **compile_kwargs)
    result, codes = run_and_get_code(compiled, *args)
    return result, codes, counter


def assert_inductor_code(codes):
    """Inductor generated the wrapper that ran (any device); on openreg, also
    what its Inductor backend generates (assert_openreg_code). The joined code."""
    code = "\n".join(codes)
    assert codes and "def call(" in code, code
    if IS_OPENREG:
        assert_openreg_code(codes)
    return code


@pytest.mark.openreg_only
def assert_openreg_code(codes):
    """The generated wrapper defines and launches openreg C++ kernels (the code
    of openreg's Inductor backend)."""
    code = "\n".join(codes)
    assert "openreg_compile(async_compile, 'cpp_" in code, code
    # Buffers come from the allocator called directly (wrapper.py,
    # make_allocation), never through torch.empty_strided.
    assert not re.search(r"= empty_strided\([^\n]*device='openreg", code), code
    return code


def to(tree, device):
    return torch.utils._pytree.tree_map(
        lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, tree)
