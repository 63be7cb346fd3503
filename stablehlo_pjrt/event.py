"""Events the Python side creates: ready events, completions of work that
finishes later, and async tracking events.

PJRT_Event itself (await, error, on-ready callbacks) is implemented in C
(_shim.c). Work that runs on the worker (dispatch.py) has a
:class:`Completion`: it hands out pending PJRT_Events (the per-device
completion events of Execute, the ready events of its output buffers, the
event of a host transfer chained on them) and sets them, with the work's
error if it failed, when the work is done. Python threads wait on it too.
"""

from __future__ import annotations

import _thread
import time
from collections.abc import Callable

from . import _shim
from .error import PjrtError
from .handles import register


def ready_event(error: PjrtError | None = None) -> int:
    """A completed PJRT_Event, failed with `error` when given."""
    if error is None:
        return _shim.event_new(True)
    return _shim.event_new(True, error.pjrt_code, str(error))


# One lock for the state of every completion: it is held for a few bytecodes.
_LOCK = _thread.allocate_lock()


class Completion:
    """The completion of one piece of asynchronous work.

    ``done`` turns True once, with ``error`` the (code, message) it failed
    with or None. Everything registered before that (C events, callbacks,
    waiting threads) is released by :meth:`set`; what is registered after
    sees the final state at once."""

    __slots__ = ("done", "error", "asked_ns", "_events", "_then", "_waiters")

    def __init__(self):
        self.done = False
        self.error = None
        self.asked_ns = 0   # when the caller first asked to wait (see asked())
        self._events = []
        self._then = []
        self._waiters = []

    def asked(self) -> None:
        """Notes that the caller waits for this work now (a ready event of
        one of its outputs was asked for, or a read waits for it): auto
        mode's evidence that running such work on the worker buys no
        overlap (dispatch.Awaited)."""
        if not self.asked_ns:
            self.asked_ns = time.perf_counter_ns()

    def c_event(self) -> int:
        """A PJRT_Event* (owned by the caller) that completes with this work."""
        with _LOCK:
            if not self.done:
                ev = _shim.event_new(False)
                self._events.append(ev)
                return ev
        if self.error is None:
            return _shim.event_new(True)
        return _shim.event_new(True, *self.error)

    def then(self, fn: Callable[[Completion], object]) -> None:
        """Calls ``fn(self)`` when done: on the thread that completes the
        work, or here if it is done already."""
        with _LOCK:
            if not self.done:
                self._then.append(fn)
                return
        fn(self)

    def wait(self) -> None:
        """Blocks until done (interruptible by Ctrl-C in the main thread)."""
        if self.done:
            return
        waiter = _thread.allocate_lock()
        waiter.acquire()
        with _LOCK:
            if self.done:
                return
            self._waiters.append(waiter)
        waiter.acquire()

    def set(self, error: tuple[int, str] | None = None) -> None:
        """Marks the work done (failed with ``error``), then runs the
        callbacks, wakes the waiters and sets the C events (their jaxlib
        callbacks run on this thread, without the GIL)."""
        with _LOCK:
            if self.done:
                return
            self.error = error
            self.done = True
            events, self._events = self._events, []
            thens, self._then = self._then, []
            waiters, self._waiters = self._waiters, []
        for fn in thens:
            try:
                fn(self)
            except Exception:  # noqa: BLE001 - one failing continuation must not block the rest
                import traceback
                traceback.print_exc()
        for w in waiters:
            w.release()
        for ev in events:
            if error is None:
                _shim.event_set(ev)
            else:
                _shim.event_set(ev, *error)


class AsyncTrackingEvent:
    """PJRT_AsyncTrackingEvent: a named marker on a device (the plugin has
    no profiler to report it to, so it only has to exist until destroyed)."""
    __slots__ = ("handle", "device", "description")

    def __init__(self, device, description):
        self.device = device
        self.description = description
        register(self)
