"""The stream-race sanitizer (see docs/sanitizer.md).

While it is on, every kernel, copy and memset declares the device (and pinned)
memory it reads and writes, and the runtime checks each access against the
happens-before order of streams and the host (stream order, events,
``wait_stream``, synchronisation, blocking copies). An access that a real,
asynchronous device could run concurrently with an earlier conflicting access on
another stream raises :class:`StreamRaceError` before the racing work runs.

Off by default; ``OPENREG_STREAM_SANITIZER=1`` turns it on for the whole process.
"""

import torch

from .. import _C


class StreamRaceError(RuntimeError):
    """A stream race found by the openreg stream sanitizer.

    The message names both accesses (operator, stream, whether it read or wrote),
    the memory (device, address, size, dtype and shape when known) and the fix.
    """


_C._set_stream_race_error(StreamRaceError)


def set_stream_sanitizer(enabled: bool) -> None:
    """Turn the stream sanitizer on or off.

    Either way its history is forgotten: only work issued while it is on is
    checked, and only against other work issued while it is on.
    """
    _C._set_stream_sanitizer(bool(enabled))


def is_stream_sanitizer_enabled() -> bool:
    """Whether the stream sanitizer is on."""
    return _C._is_stream_sanitizer_enabled()
