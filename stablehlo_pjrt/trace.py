"""PJRT call tracing.

`STABLEHLO_PJRT_TRACE=1` logs every PJRT call the plugin serves to stderr,
one line per call, in the spirit of the PJRT documentation's example log:

    [stablehlo_pjrt] PJRT_Client_Create -> StablehloRefClient(devices=1)
    [stablehlo_pjrt] PJRT_Client_BufferFromHostBuffer Client(...) -> Buffer(s32[], ...)
    [stablehlo_pjrt] PJRT_Client_Compile ... module=...
    ...

The trace is a structured hook: every call produces one record
`hook(call, obj, details)` where `call` is the PJRT function name, `obj` the
plugin object the call is about (client, device, buffer, executable, event
address, ...) and `details` a dict with at least `ts_ns`, `dur_ns`,
`thread` and, when the call failed, `error`; handlers add call-specific keys
(inputs, outputs, module text, ...).  The stderr printer is just the default
hook; a Chrome-trace writer can be added with `add_hook`.

Tracing costs nothing when off: the table is then wired to the bare
handlers, and handlers guard their detail collection with `trace.ENABLED`.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable

from . import config

Hook = Callable[[str, object, dict], None]

ENABLED = False
_hooks: list[Hook] = []
# Called with the new state when tracing turns on or off (table.set_tracing
# rewires the PJRT_Api slots); trace.py itself knows nothing of the table.
_listeners: list[Callable[[bool], None]] = []
_local = threading.local()
_lock = threading.Lock()


def _short(value, limit: int = 2000) -> str:
    text = str(value)
    if len(text) > limit:
        text = text[:limit] + f"... <{len(text) - limit} more chars>"
    return text


def stderr_hook(call: str, obj: object, details: dict) -> None:
    """Default hook: one human-readable line (plus indented multi-line
    details such as the module text) on stderr."""
    parts = [f"[stablehlo_pjrt] {call}"]
    if obj is not None:
        parts.append(str(obj))
    extra = []
    block = []
    for key, value in details.items():
        if key in ("ts_ns", "dur_ns", "thread"):
            continue
        text = _short(value, 20000 if key == "module" else 2000)
        if "\n" in text:
            block.append(f"  {key}:\n" + "\n".join("    " + ln for ln in text.splitlines()))
        else:
            extra.append(f"{key}={text}")
    line = " ".join(parts)
    if extra:
        line += " " + " ".join(extra)
    dur = details.get("dur_ns")
    if dur is not None:
        line += f" [{dur / 1000:.0f}us]"
    out = line + ("\n" + "\n".join(block) if block else "")
    with _lock:
        try:
            sys.stderr.write(out + "\n")
            sys.stderr.flush()
        except Exception:
            pass  # tracing must never break the traced call


def add_hook(hook: Hook) -> None:
    """Adds a hook and turns tracing on (see table.set_tracing)."""
    if hook not in _hooks:
        _hooks.append(hook)
    _set_enabled(True)


def register_hook(hook: Hook) -> None:
    """Adds a hook without turning tracing on (for hooks installed while the
    table is built, which then enables tracing from ENABLED)."""
    if hook not in _hooks:
        _hooks.append(hook)


def remove_hook(hook: Hook) -> None:
    if hook in _hooks:
        _hooks.remove(hook)
    _set_enabled(bool(_hooks))


def _set_enabled(on: bool) -> None:
    global ENABLED
    if on == ENABLED:
        return
    ENABLED = on
    for listener in list(_listeners):
        listener(on)


def on_enabled_change(listener: Callable[[bool], None]) -> None:
    """Registers `listener(on)`, called whenever tracing turns on or off."""
    if listener not in _listeners:
        _listeners.append(listener)


def emit(call: str, obj: object, details: dict) -> None:
    for hook in list(_hooks):
        try:
            hook(call, obj, details)
        except Exception:
            pass  # a broken hook must not change PJRT behaviour


def note(**details) -> None:
    """Adds details to the record of the PJRT call running on this thread."""
    current = getattr(_local, "details", None)
    if current is not None:
        current.update(details)


def traced(call: str, handler: Callable[[int], object]) -> Callable[[int], object]:
    """Wraps a slot handler so that each call emits one record."""

    def run(args_ptr: int):
        details: dict = {}
        outer = getattr(_local, "details", None)
        _local.details = details
        t0 = time.perf_counter_ns()
        try:
            return handler(args_ptr)
        except BaseException as e:
            details["error"] = f"{type(e).__name__}: {e}"
            raise
        finally:
            _local.details = outer
            obj = details.pop("obj", None)
            if obj is None:
                obj = _primary_object(args_ptr)
            record = {"ts_ns": t0, "dur_ns": time.perf_counter_ns() - t0,
                      "thread": threading.get_ident()}
            record.update(details)
            emit(call, obj, record)

    run.__name__ = f"traced_{call}"
    return run


def _primary_object(args_ptr: int):
    """The object a call is about when its handler did not say: the first
    field after struct_size/extension_start is, for almost every PJRT args
    struct, the client/device/buffer/executable/... pointer."""
    try:
        import ctypes

        from .handles import _objects
        first = ctypes.c_void_p.from_address(args_ptr + 16).value
        return _objects.get(first) if first else None
    except Exception:
        return None


def c_event_hook(call: str, address: int) -> None:
    """Receives the calls implemented in C (events) when tracing is on."""
    emit(call, f"Event({address:#x})", {"ts_ns": time.perf_counter_ns(),
                                        "thread": threading.get_ident()})


def init_from_env() -> None:
    """STABLEHLO_PJRT_TRACE=1 adds the stderr hook (table.build_api also
    installs the Chrome trace writer of STABLEHLO_PJRT_TRACE_JSON, trace_json.py,
    another hook)."""
    if config.TRACE.value() and stderr_hook not in _hooks:
        _hooks.append(stderr_hook)
    global ENABLED
    ENABLED = bool(_hooks)
