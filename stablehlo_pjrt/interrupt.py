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
import os
import threading

_timeout: list = []


class ExecutionTimeout(Exception):
    """Raised inside a run that exceeded the execute time limit."""


def set_execute_timeout(seconds: float | None) -> None:
    """Limit every later Execute to ``seconds`` (None or 0: no limit)."""
    if seconds is not None and seconds < 0:
        raise ValueError(f"execute timeout must be >= 0, got {seconds}")
    _timeout[:] = [float(seconds)] if seconds else [0.0]


def execute_timeout() -> float:
    if not _timeout:
        try:
            value = float(os.environ.get("STABLEHLO_REF_EXECUTE_TIMEOUT", "0") or 0)
        except ValueError:
            value = 0.0
        _timeout.append(max(value, 0.0))
    return _timeout[0]


def _set_async_exc(tid: int, exc) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(tid), ctypes.py_object(exc) if exc is not None else None)


def run_limited(fn, seconds: float):
    """``fn()`` with ExecutionTimeout raised in this thread after ``seconds``."""
    tid = threading.get_ident()
    lock = threading.Lock()
    state = {"running": True, "fired": False}

    def fire():
        with lock:
            if state["running"]:
                state["fired"] = True
                _set_async_exc(tid, ExecutionTimeout)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        return fn()
    finally:
        with lock:
            state["running"] = False
            if state["fired"]:
                # Not delivered yet (the run ended first): withdraw it.
                _set_async_exc(tid, None)
        timer.cancel()


_OWN = ("stablehlo_pjrt", "stablehlo_interpreter")


def _is_own(frame) -> bool:
    name = frame.f_globals.get("__name__", "") or ""
    return name.split(".", 1)[0] in _OWN


def rearm_interrupt() -> None:
    """Raise KeyboardInterrupt in the Python code that called into jaxlib,
    at its next line.

    Re-raising the signal (``_thread.interrupt_main``) would fire at the next
    bytecode, which is still this handler or the next plugin handler jaxlib
    calls (jaxlib turns that into an error, or aborts on it). Instead a
    one-shot trace function is put on the first caller frame outside the
    plugin: its next 'line' event raises KeyboardInterrupt there, then tracing
    is restored to what it was (a debugger's or coverage's trace function)."""
    import sys
    frame = sys._getframe(1)
    while frame is not None and _is_own(frame):
        frame = frame.f_back
    if frame is None:
        import _thread
        _thread.interrupt_main()
        return
    previous = sys.gettrace()
    previous_local = frame.f_trace

    def local(f, event, arg):
        if event in ("line", "return", "exception") and f is frame:
            sys.settrace(previous)
            f.f_trace = previous_local
            raise KeyboardInterrupt
        return local

    def global_trace(f, event, arg):
        return None  # no tracing of other frames

    frame.f_trace = local
    frame.f_trace_lines = True
    sys.settrace(global_trace)
