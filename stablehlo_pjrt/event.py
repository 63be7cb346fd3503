"""Events the Python side creates: ready events and async tracking events.

PJRT_Event itself (await, error, on-ready callbacks) is implemented in C
(_shim.c); execution is synchronous, so every event the plugin hands out is
already complete, carrying the error of the operation if it failed.
"""

from __future__ import annotations

from . import _shim
from .error import PjrtError
from .handles import register


def ready_event(error: PjrtError | None = None) -> int:
    """A completed PJRT_Event, failed with `error` when given."""
    if error is None:
        return _shim.event_new(True)
    return _shim.event_new(True, error.pjrt_code, str(error))


class AsyncTrackingEvent:
    """PJRT_AsyncTrackingEvent: a named marker on a device (nothing is
    asynchronous here, so it only has to exist until destroyed)."""
    __slots__ = ("handle", "device", "description")

    def __init__(self, device, description):
        self.device = device
        self.description = description
        register(self)
