"""Hugging Face transformers' device spec for openreg: how transformers' own test
suite learns to seed, count, empty and measure a device it does not know
(``TRANSFORMERS_TEST_DEVICE_SPEC``; docs/pytorch-suite.md, "Hugging Face's
tests").

transformers imports this file by its bare name from the directory it names
(``transformers/testing_utils.py``): it must be a file of the current
directory, so link it there first::

    ln -sf "$(python -m torch_openreg.transformers_device_spec)" .
    TRANSFORMERS_TEST_DEVICE_SPEC=transformers_device_spec.py \\
    TRANSFORMERS_TEST_DEVICE=openreg TRANSFORMERS_TEST_BACKEND=torch_openreg \\
        python -m pytest tests/models/vit/test_modeling_vit.py

(``python -m torch_openreg.transformers_device_spec`` prints this file's path.)

Vendor: a backend's spec names its device and its device module's functions,
the torch.cuda counterparts transformers uses for CUDA.
"""

import sys

import torch

#: The device type transformers' tests put their tensors on.
DEVICE_NAME = "openreg"

_module = torch.get_device_module(DEVICE_NAME)

# What transformers reads from a spec (testing_utils.update_mapping_from_spec).
MANUAL_SEED_FN = _module.manual_seed
EMPTY_CACHE_FN = _module.empty_cache
DEVICE_COUNT_FN = _module.device_count

# Memory and synchronisation, which transformers 5.25.0 does not read from a
# spec: for a device it does not know, backend_memory_allocated() answers 0
# and backend_synchronize() does nothing, so its memory tests measure nothing.
MEMORY_ALLOCATED_FN = _module.memory_allocated
MAX_MEMORY_ALLOCATED_FN = _module.max_memory_allocated
RESET_PEAK_MEMORY_STATS_FN = _module.reset_peak_memory_stats
RESET_MAX_MEMORY_ALLOCATED_FN = _module.reset_peak_memory_stats
SYNCHRONIZE_FN = _module.synchronize
TORCH_ACCELERATOR_MODULE = _module

# The tables of transformers.testing_utils that a spec does not reach, and
# this spec's entry for each.
_UNREAD = {
    "BACKEND_MEMORY_ALLOCATED": MEMORY_ALLOCATED_FN,
    "BACKEND_MAX_MEMORY_ALLOCATED": MAX_MEMORY_ALLOCATED_FN,
    "BACKEND_RESET_PEAK_MEMORY_STATS": RESET_PEAK_MEMORY_STATS_FN,
    "BACKEND_RESET_MAX_MEMORY_ALLOCATED": RESET_MAX_MEMORY_ALLOCATED_FN,
    "BACKEND_SYNCHRONIZE": SYNCHRONIZE_FN,
    "BACKEND_TORCH_ACCELERATOR_MODULE": TORCH_ACCELERATOR_MODULE,
}


def _fill_unread_tables() -> list:
    """The workaround of the gap above (docs/pytorch-suite.md): while
    transformers.testing_utils imports this spec, its tables already exist;
    put this device into those it would leave at their defaults. Only where
    the gap is: a table that already has the device (a transformers that
    reads these names from the spec) is left as it is. Returns the tables
    filled."""
    utils = sys.modules.get("transformers.testing_utils")
    filled = []
    for table, fn in _UNREAD.items():
        mapping = getattr(utils, table, None) if utils is not None else None
        if isinstance(mapping, dict) and DEVICE_NAME not in mapping:
            mapping[DEVICE_NAME] = fn
            filled.append(table)
    return filled


FILLED = _fill_unread_tables()

if __name__ == "__main__":
    print(__file__)
