"""Inductor settings for openreg graphs: the per-device config module
registered with ``register_backend_for_device(..., device_custom_config=...)``.

Inductor 2.13 puts this module into every FX-graph cache key (so changing a
value here recompiles), but its scheduler reads only the global
``torch._inductor.config``. The openreg wrapper codegen therefore applies
these values (a thread-local ``config.patch``) while Inductor schedules and
generates the code of an openreg graph (``scheduling_config_scope`` in
wrapper.py; docs/compile.md, "What PyTorch would need to change").
"""

import sys

# [docs:device-config]
# Inductor re-indexes a pointwise node into a reduction's (numel, rnumel)
# split so that they fuse, which assumes SIMD (Triton-style) kernel groups.
# It skips this for the device type "cpu" by name (scheduler.py, is_cpu()),
# but openreg's kernels come from the same CPU C++ generator, whose groups
# are (sizes, reduction sizes) tuples: any graph with a reduction next to a
# pointwise op (LayerNorm, softmax, every backward) fails with
# "TypeError: can't multiply sequence by non-int of type 'tuple'".
loop_reindexing_after_fusion: bool = False

# Inductor's kernel code generators ask get_current_backend() which language
# they emit; for a device type it does not know by name it answers
# config.cuda_backend ("triton"), so dtype propagation and upcasting would
# follow Triton's rules inside C++ kernels (bf16 autocast graphs fail with
# "KeyError: None" in the C++ code generator). openreg kernels are C++.
cuda_backend: str = "cpp"
# [docs:device-config:end]

# Inductor's FX graph cache key covers torch and its config, not this
# package's code generators (gap 22): before 2.15 the hash of our sources goes
# into the key through this value, so a changed backend never reuses stale
# compiled graphs (source_hash.py). From 2.15 the device interface's
# get_cache_system_info() carries it, the official hook, and this stays empty.
backend_source_hash: str = ""

from torch.utils._config_module import install_config_module  # noqa: E402

from ..torch_gates import has_gap  # noqa: E402
from .source_hash import source_hash  # noqa: E402

if has_gap(22):
    backend_source_hash = source_hash()
del has_gap, source_hash  # a config module holds settings only

install_config_module(sys.modules[__name__])
