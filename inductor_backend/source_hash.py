"""The hash of this backend's code generators, for Inductor's FX graph cache key.

Inductor's cache key covers torch and its config, not an out-of-tree backend's
code (docs/pytorch-gaps.md, gap 22): a changed backend must never reuse graphs
compiled by the old one. The installed location goes in too: a C++-wrapper
graph compiles against this installation's include and library folders
(absolute paths), and the cache (/tmp/torchinductor_<user> by default) is
shared by every installation of the same user; a graph cached by a deleted one
failed to compile.

Where it reaches the key depends on the release (torch_gates
DEVICE_CACHE_SYSTEM_INFO): from 2.15 through the device interface's
``get_cache_system_info()`` (device_interface.py), before through the
per-device config (config.py's ``backend_source_hash``).
"""

import functools
import hashlib
import pathlib


@functools.cache
def source_hash() -> str:
    here = pathlib.Path(__file__).parent
    # The headers are those the C++ wrapper includes (cpp_wrapper=True).
    files = sorted([*here.glob("*.py"), *here.glob("include/*.h")])
    location = str(here.resolve()).encode()
    return hashlib.sha256(location + b"".join(p.read_bytes() for p in files)).hexdigest()[:16]
