"""Streams and events for openreg, modelled on ``torch.cuda.Stream``/``Event``."""

from typing import Any, Optional

import torch

from .. import _C


def _check_type(func: str, arg: str, value: Any, cls: type) -> None:
    # A wrong argument is a TypeError that names it, not an AttributeError
    # from deep inside (torch.cuda's streams raise the latter).
    if not isinstance(value, cls):
        raise TypeError(f"{func}: expected {arg} to be a {cls.__module__}.{cls.__qualname__}, "
                        f"got {type(value).__name__}")


class Stream(torch.Stream):
    """An in-order queue of work on an openreg device.

    ``Stream(device=None, priority=0)`` creates a new stream; lower priority
    numbers are higher priority, as in CUDA (see ``priority_range()``).
    """

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> "Stream":
        from . import _get_device_index, _lazy_init

        if "stream_id" in kwargs:  # rebuilding a handle to an existing stream
            return super().__new__(cls, **kwargs)
        from . import _check_index

        _lazy_init()
        # Checked before torch.device(), which would wrap an index of 256 to 0.
        index = _check_index(_get_device_index(device))
        return super().__new__(cls, device=torch.device("openreg", index), priority=priority)

    @staticmethod
    def priority_range() -> tuple:
        """(least, greatest) priority; lower numbers run first."""
        return _C._stream_priority_range()

    @property
    def priority(self) -> int:
        """The priority the stream was created with (see :meth:`priority_range`)."""
        return _C._stream_priority(self.stream_id, self.device_index)

    @property
    def native_id(self) -> int:
        """The runtime's process-unique id of this stream (its row in profiler traces)."""
        return _C._stream_native_id(self.stream_id, self.device_index)

    def wait_event(self, event: "torch.Event") -> None:
        """Make work queued on this stream from now on wait until ``event`` completes.

        Returns at once: the host does not wait."""
        _check_type("wait_event", "event", event, torch.Event)
        event.wait(self)

    def record_event(self, event: "Optional[torch.Event]" = None) -> "torch.Event":
        """Record ``event`` (a new ``Event`` if None) on this stream and return it."""
        if event is None:
            event = Event()
        _check_type("record_event", "event", event, torch.Event)
        event.record(self)
        return event

    def wait_stream(self, stream: "torch.Stream") -> None:
        """Make work queued on this stream from now on wait for the work queued on ``stream`` so far."""
        _check_type("wait_stream", "stream", stream, torch.Stream)
        self.wait_event(stream.record_event())

    def __repr__(self) -> str:
        return (
            f"<torch.openreg.Stream device=openreg:{self.device_index} "
            f"stream_id={self.stream_id} priority={self.priority}>"
        )


class Event(torch.Event):
    """A marker in a stream; with ``enable_timing=True`` it measures device time."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        if interprocess:
            raise NotImplementedError("openreg events cannot be shared between processes")
        return super().__new__(cls, device="openreg", enable_timing=enable_timing, blocking=blocking)

    def elapsed_time(self, end_event: "torch.Event") -> float:
        """Milliseconds of device time between this event and ``end_event``."""
        return _C._event_elapsed_time(self, end_event)

    def __repr__(self) -> str:
        return f"<torch.openreg.Event device={self.device}>"


def _wrap(packed: tuple) -> Stream:
    stream_id, device_index, device_type = packed
    return Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)


def current_stream(device: Any = None) -> Stream:
    """The current stream of ``device`` for this thread."""
    from . import _get_device_index, _lazy_init

    _lazy_init()
    return _wrap(_C._get_current_stream(_get_device_index(device)))


def default_stream(device: Any = None) -> Stream:
    """The default stream of ``device``."""
    from . import _get_device_index, _lazy_init

    _lazy_init()
    return _wrap(_C._get_default_stream(_get_device_index(device)))


def set_stream(stream: torch.Stream) -> None:
    """Make ``stream`` the current stream of its device (this thread)."""
    if stream is None:
        return
    _check_type("set_stream", "stream", stream, torch.Stream)
    if stream.device.type != "openreg":
        raise ValueError(f"Expected an openreg stream, got a stream on {stream.device}")
    _C._set_current_stream(stream.stream_id, stream.device_index)


class StreamContext:
    """Context manager selecting a stream (and its device), like ``torch.cuda.StreamContext``."""

    def __init__(self, stream: Optional[torch.Stream]):
        if stream is not None:
            _check_type("stream", "stream", stream, torch.Stream)
        self.stream = stream
        self.src_prev_stream = None
        self.dst_prev_stream = None
        self.prev_device = None

    def __enter__(self):
        from . import current_device, set_device

        cur = self.stream
        if cur is None:
            return
        self.src_prev_stream = current_stream()
        self.prev_device = current_device()
        if self.src_prev_stream.device != cur.device:
            set_device(cur.device_index)
            self.dst_prev_stream = current_stream(cur.device_index)
        set_stream(cur)

    def __exit__(self, *args: Any) -> None:
        from . import set_device

        if self.stream is None:
            return
        if self.dst_prev_stream is not None:
            set_stream(self.dst_prev_stream)
        set_stream(self.src_prev_stream)
        set_device(self.prev_device)


def stream(stream: Optional[torch.Stream]) -> StreamContext:
    """``with torch.openreg.stream(s):`` runs the block with ``s`` current."""
    return StreamContext(stream)
