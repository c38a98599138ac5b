"""Fixtures shared by the runtime tests (tests/runtime/test_*.py).

The example-based tests exercise the runtime C API through
``torch_openreg._runtime`` (see ``_helpers.py``). Per-process settings (device
count, capacity, strict memory, worker count) are exercised in child
interpreters (``test_config.py``, ``test_scheduler.py``); everything else runs
in-process with the defaults (2 devices, 4G each, strict memory, 4 workers per
device).
"""

import pytest

from tests.runtime._helpers import call_with_timeout, rt

# Used only by openreg-only tests (tests/target.py).
openreg_only = True


def _new_stream():
    s = rt.stream_create(0)
    try:
        yield s
    finally:
        call_with_timeout(rt.stream_destroy, s)


@pytest.fixture
def stream():
    """A new stream on device 0 (priority 0), destroyed afterwards."""
    yield from _new_stream()


@pytest.fixture
def stream2():
    """A second one, for tests of two streams."""
    yield from _new_stream()


@pytest.fixture
def dev_block():
    """A 4 KiB device block on device 0, freed afterwards."""
    p = rt.malloc(4096)
    try:
        yield p
    finally:
        rt.free(p)
