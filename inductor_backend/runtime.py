"""What the Python wrapper that Inductor generates for openreg calls at run time.

A generated wrapper defines each kernel as::

    cpp_fused_add_0 = openreg_compile(async_compile, 'cpp_fused_add_0',
                                      ['const float*', 'float*', 'const int64_t'], r'''...''')

and calls it like a function (``cpp_fused_add_0(arg0_1, buf0, 1024)``).
``compile_kernel`` builds the C++ source, with a trampoline that unpacks an
argument array, into a shared library through Inductor's own C++ code cache
(so compile workers, the on-disk cache and the FX graph cache all apply), and
wraps the trampoline in a ``_launcher.Kernel``: calling that translates
openreg tensors to kernel-view addresses and launches the kernel as device
work on the current stream.
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable

from torch._inductor.async_compile import get_compile_threads
from torch._inductor.codecache import CppCodeCache, LambdaFuture, _get_cpp_prefix_header
from torch._inductor.utils import clear_on_fresh_cache

from ._launcher import Kernel

ENTRY = "openreg_entry"


def arg_kind(cpp_type: str) -> str:
    """'p' (a tensor's data pointer), 'i' (integer) or 'f' (floating point)."""
    t = cpp_type.replace("const", "").strip()
    if t.endswith("*"):
        return "p"
    if t in ("float", "double"):
        return "f"
    if t in ("int64_t", "int32_t", "int", "long", "bool", "uint64_t", "uint32_t", "size_t"):
        return "i"
    raise NotImplementedError(f"openreg kernels: unsupported argument type {cpp_type!r}")


# [docs:trampoline]
def trampoline(argtypes: list[str]) -> str:
    """``extern "C" void openreg_entry(void* const* a)`` calling ``kernel(...)``:
    one C entry point for every kernel signature, so the launcher needs no
    per-signature code. Scalars arrive as int64 or double slots."""
    args = []
    for i, t in enumerate(argtypes):
        kind = arg_kind(t)
        if kind == "p":
            args.append(f"static_cast<{t}>(a[{i}])")
        elif kind == "i":
            args.append(f"static_cast<{t}>(*static_cast<const int64_t*>(a[{i}]))")
        else:
            args.append(f"static_cast<{t}>(*static_cast<const double*>(a[{i}]))")
    call = ",\n        ".join(args)
    return f'\nextern "C" void {ENTRY}(void* const* a) {{\n    kernel({call});\n}}\n'
# [docs:trampoline:end]


@clear_on_fresh_cache
class OpenRegKernelCodeCache(CppCodeCache):
    """Inductor's C++ code cache, with the flags of its CPU kernels (no libtorch)."""

    cache: dict[str, Callable[[], Any]] = {}
    cache_clear = staticmethod(cache.clear)
    cpp_compile_command_flags = {"include_pytorch": False, "shared": True}

    @classmethod
    def _get_uncompiled_header(cls, device: str) -> str | None:
        # Precompile cpp_prefix.h (every kernel includes it), as Inductor does
        # for its CPU kernels (CppPythonBindingsCodeCache); CppCodeCache
        # precompiles nothing, and parsing the header took ~1.5 s per kernel.
        return _get_cpp_prefix_header(device)


def _wrap(name: str, kinds: str, lib: ctypes.CDLL) -> Kernel:
    entry = ctypes.cast(getattr(lib, ENTRY), ctypes.c_void_p).value
    kernel = Kernel(name, entry, kinds)
    kernel.library = lib  # keeps the shared library loaded while the kernel lives
    return kernel


def compile_kernel(async_compile: Any, name: str, argtypes: list[str], source: str) -> Any:
    """A ``Kernel`` (or, with parallel compilation, a future of one)."""
    kinds = "".join(arg_kind(t) for t in argtypes)
    source = source + trampoline(argtypes)
    if get_compile_threads() <= 1:
        return _wrap(name, kinds, OpenRegKernelCodeCache.load(source))
    load = OpenRegKernelCodeCache.load_async(source, submit_fn=async_compile.submit)
    return LambdaFuture(lambda: _wrap(name, kinds, load()))
