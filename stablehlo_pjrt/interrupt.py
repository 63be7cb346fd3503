"""Ctrl-C and time limits for a running program.

Ctrl-C. The interpreter runs Python bytecode in the thread that called
Execute, so Python raises KeyboardInterrupt inside the run at once. Raised
through PJRT it would reach the user as ``JaxRuntimeError: INTERNAL``; instead
:func:`run` stops the run, Execute returns outputs that are error buffers
(CANCELLED, "interrupted": reading one raises that error) and, as the last
thing before returning to jaxlib, arranges for KeyboardInterrupt to be raised
in the Python frame that called into jaxlib, at its next line
(:func:`rearm_interrupt`). (XLA CPU
cannot stop a running program: Ctrl-C waits for it to finish.)

Time limit (opt-in): ``stablehlo_pjrt.set_execute_timeout(seconds)`` or
``STABLEHLO_REF_EXECUTE_TIMEOUT=seconds``. A timer thread raises
:class:`ExecutionTimeout` asynchronously in the running thread
(``PyThreadState_SetAsyncExc``); the interpreter reports it with the op it
was running, and Execute fails with DEADLINE_EXCEEDED. The limit covers one
Execute call (a pmap/shard_map run waits for all its device threads; the
exception lands in the calling thread).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import TypeVar

from stablehlo_interpreter import Interrupt

from . import config

T = TypeVar("T")

_timeout: list = []


class ExecutionTimeout(Interrupt):
    """Raised inside a run that exceeded the execute time limit (an
    interpreter ``Interrupt``: its fallbacks never swallow it)."""


def set_execute_timeout(seconds: float | None) -> None:
    """Limit every later Execute to ``seconds`` (None or 0: no limit)."""
    if seconds is not None and seconds < 0:
        raise ValueError(f"execute timeout must be >= 0, got {seconds}")
    _timeout[:] = [float(seconds)] if seconds else [0.0]


def execute_timeout() -> float:
    if not _timeout:
        _timeout.append(config.EXECUTE_TIMEOUT.value())
    return _timeout[0]


def set_async_exc(tid: int, exc: type[BaseException]) -> None:
    """Raise ``exc`` in thread ``tid`` at its next eval-breaker check
    (``PyThreadState_SetAsyncExc``).

    One that is no longer wanted (the work it was to stop ended first) is
    taken by that thread (:func:`raise_pending`, inside a ``try`` that
    catches it), never withdrawn with ``SetAsyncExc(tid, NULL)``: CPython
    3.11 then sets the interpreter's ``pending.async_exc`` flag, which only
    a thread raising an asynchronous exception clears, so the eval breaker
    stays set for good; with a trace function active (the Ctrl-C re-arm
    below, a debugger, coverage) the next Python call then spins forever at
    its RESUME instruction."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), ctypes.py_object(exc))


def raise_pending() -> None:
    """A Python call: its RESUME instruction checks the eval breaker, where
    CPython raises the calling thread's pending asynchronous exception (if
    any). The caller must not be a function entered after the exception was
    fired (its own RESUME would raise it first)."""


def run_limited(fn: Callable[[], T], seconds: float) -> T:
    """``fn()`` with ExecutionTimeout raised in this thread after ``seconds``."""
    tid = threading.get_ident()
    lock = threading.Lock()
    state = {"running": True, "fired": False}

    def fire():
        with lock:
            if state["running"]:
                state["fired"] = True
                set_async_exc(tid, ExecutionTimeout)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        return fn()
    finally:
        # Inline, not a helper: an ExecutionTimeout fired as the run ended
        # lands at the first eval-breaker check from here on, which is
        # inside this try (see set_async_exc).
        try:
            with lock:
                state["running"] = False
                fired = state["fired"]
            if fired:
                raise_pending()
        except ExecutionTimeout:
            pass  # fired as the run ended: the run's outcome stands
        timer.cancel()


_OWN = ("stablehlo_pjrt", "stablehlo_interpreter")


def _is_own(frame) -> bool:
    name = frame.f_globals.get("__name__", "") or ""
    return name.split(".", 1)[0] in _OWN


def rearm_interrupt(exc: type[BaseException] | BaseException = KeyboardInterrupt) -> None:
    """Raise ``exc`` (KeyboardInterrupt) in the Python code that called into
    jaxlib, at its next line.

    Re-raising the signal (``_thread.interrupt_main``) would fire at the next
    bytecode, which is still this handler or the next plugin handler jaxlib
    calls (jaxlib turns that into an error, or aborts on it). Instead a
    one-shot trace function is put on the first caller frame outside the
    plugin: its next 'line', 'return' or 'exception' event (the PJRT error
    jaxlib raises arrives as one) raises ``exc`` there, then tracing is
    restored to what it was (a debugger's or coverage's trace function).
    Python's tracing hooks are the only way to run code in a caller's frame;
    JAX has no hook for it (see docs/runtime.md, "JAX internals")."""
    import sys
    frame = sys._getframe(1)
    while frame is not None and _is_own(frame):
        frame = frame.f_back
    if frame is None:
        import _thread
        _thread.interrupt_main()
        return
    if getattr(frame.f_trace, "_stablehlo_interrupt", False):
        return  # this frame is armed already (two calls interrupted before it resumed)
    previous = sys.gettrace()
    # Armed on another frame that has not resumed yet: restore what that
    # arming saved, never this module's own global function.
    previous = getattr(previous, "_stablehlo_previous", previous)
    previous_local = frame.f_trace

    def local(f, event, arg):
        if event in ("line", "return", "exception") and f is frame:
            sys.settrace(previous)
            f.f_trace = previous_local
            raise exc
        return local

    def global_trace(f, event, arg):
        return None  # no tracing of other frames

    local._stablehlo_interrupt = True
    global_trace._stablehlo_previous = previous
    frame.f_trace = local
    frame.f_trace_lines = True
    sys.settrace(global_trace)


# ---------------------------------------------------------------------------
# Ctrl-C during compilation, and signals that arrive between PJRT calls.
#
# Signals reach Python in the main thread only. jaxlib 0.10.2 compiles on a
# worker thread while the main thread waits in BlockUntilReadyWithCancel,
# which checks for signals every 200 ms: Ctrl-C during a JAX compile raises
# KeyboardInterrupt there, by jaxlib itself, and the compile in progress runs
# to its end on the worker (nothing tells the plugin that its caller gave
# up; its result is dropped). What runs on the main thread (loading a cached
# or serialized executable, Execute, every other PJRT call, compiles of other
# frameworks) is handled here.

# Calls that may run long: a signal pending when one starts cancels it.
CANCEL_AT_START = frozenset({
    "PJRT_Client_Compile", "PJRT_Compile", "PJRT_Executable_DeserializeAndLoad",
    "PJRT_Client_Load", "PJRT_LoadedExecutable_Execute"})
INTERRUPTED = "was interrupted (KeyboardInterrupt)"


def on_pending_signal(slot: str, exc: BaseException | None) -> str | None:
    """The shim calls this when a Python signal handler raised as PJRT call
    ``slot`` was about to start: Ctrl-C pressed while jaxlib was in C++
    (serializing a module, preparing a dispatch). Without it the
    KeyboardInterrupt would surface inside whichever handler runs next, as
    that call's INTERNAL error (jaxlib aborts the process on an error from
    some calls). Long calls (compile, execute) are cancelled: returns the
    CANCELLED error's text. Others run as usual. Either way ``exc`` is raised
    in the Python caller (:func:`rearm_interrupt`)."""
    rearm_interrupt(KeyboardInterrupt() if exc is None else exc)
    if slot in CANCEL_AT_START:
        return f"stablehlo_ref: {slot} {INTERRUPTED} before it started"
    return None


def cancel_on_interrupt(what: str):
    """Decorator for compile/load handlers: Ctrl-C inside (on the main
    thread) stops the work, the call fails with CANCELLED and
    KeyboardInterrupt reaches the caller (:func:`rearm_interrupt`)."""
    def wrap(fn):
        import functools

        @functools.wraps(fn)
        def run(ptr):
            try:
                return fn(ptr)
            except KeyboardInterrupt:
                from ._capi import ErrorCode
                from .error import PjrtError
                rearm_interrupt()
                raise PjrtError(ErrorCode.CANCELLED,
                                f"stablehlo_ref: {what} {INTERRUPTED}") from None
        return run
    return wrap


def install_signal_hook() -> None:
    """Take pending signals at the start of every PJRT call (the shim calls
    :func:`on_pending_signal`)."""
    from . import _shim
    _shim.set_interrupt_hook(on_pending_signal)
