"""The PJRT_Api table: builds it and wires the handlers of `api` into it.

`build_api()` fills the static PJRT_Api struct owned by _shim with
trampoline addresses (one per slot), and registers the handler each
trampoline calls.  Errors, events and the memory vtable are implemented in C
(_shim.c) and wired here directly.  Functions the plugin does not provide
get a trampoline without handler, which reports a clear UNIMPLEMENTED error
(never a NULL pointer that jaxlib would call).  Tracing (trace.py) swaps
every Python slot between the bare and the traced handler.
"""

from __future__ import annotations

import ctypes
import sys
import threading

from . import _capi as C
from . import _shim, api, compat, shutdown, trace, trace_json

_HANDLERS = api.HANDLERS

_c_functions: dict = {}  # the slots implemented in C (errors, events)
_built = False
_build_lock = threading.Lock()
_traced_installed = None


def _is_quiet(name: str) -> bool:
    """Slots that, once Python is gone, should succeed silently (leaking)
    rather than report an error: jaxlib calls them from destructors (an
    external reference is released by the destructor of a numpy view or
    memoryview, which may run during interpreter shutdown; jaxlib aborts on
    an error there). PJRT_Client_UpdateGlobalProcessInfo too: in a
    multi-process run IFRT's watcher thread reports the processes' state
    with it until the end, and aborts on an error."""
    return (name.endswith("_Destroy") or name.endswith("_Delete")
            or name in ("PJRT_Buffer_DecreaseExternalReferenceCount",
                        "PJRT_Client_UpdateGlobalProcessInfo"))


def set_tracing(on: bool) -> None:
    """(Re)wires every Python slot, with or without the trace wrapper."""
    global _traced_installed
    if not _built or _traced_installed == on:
        return
    for index, name in enumerate(C.API_FUNCTIONS + C.SHARDINGS_EXTENSION_FUNCTIONS):
        if name in _c_functions:
            continue
        _set_slot(index, name, traced=on)
    _shim.set_trace_hook(trace.c_event_hook if on else None)
    _traced_installed = on


def _set_slot(index: int, name: str, traced: bool = False) -> int:
    """Wires one Python slot; returns its trampoline address. Untraced, a
    handler also gets the C fast paths (_shim.c, Slot): called without the
    struct_size wrapper for full-size args, and getters without ctypes."""
    fn = _HANDLERS.get(name)
    if fn is None or traced:
        return _shim.set_slot(index, name, None if fn is None else trace.traced(name, fn),
                              _is_quiet(name))
    # A handler replaced after api.py built it (faults.py) has no __wrapped__:
    # then every call goes through it.
    direct = getattr(fn, "__wrapped__", None)
    size = api.ARGS_SIZES.get(name, 0) if direct is not None else 0
    spec = api.GETTERS.get(name) if direct is not None else None
    fast = api.FAST_PATHS.get(name) if direct is not None else None
    if fast is not None:
        # The fast path tells the cache of the constant getters
        # PJRT_Buffer_Device and PJRT_Buffer_Memory its outputs' answers.
        fast_fn, offsets = fast
        return _shim.set_slot(index, name, fn, _is_quiet(name), direct, size,
                              fast=fast_fn, fast_offsets=offsets,
                              device_slot=C.API_FUNCTIONS.index("PJRT_Buffer_Device"),
                              memory_slot=C.API_FUNCTIONS.index("PJRT_Buffer_Memory"))
    if spec is None:
        return _shim.set_slot(index, name, fn, _is_quiet(name), direct, size)
    get, in_offset, outs, constant, live = spec
    return _shim.set_slot(index, name, fn, _is_quiet(name), direct, size, get, in_offset, outs,
                          constant, live=live)


# trace.add_hook/remove_hook (re)wire the table through set_tracing.
trace.on_enabled_change(set_tracing)


def build_api() -> None:
    """Fills the PJRT_Api table (idempotent)."""
    global _built
    with _build_lock:
        if _built:
            return
        if len(C.API_FUNCTIONS) > _shim.MAX_SLOTS:
            raise RuntimeError("the shim has fewer trampolines than the API has slots")
        c_functions = _shim.c_functions()
        _c_functions.update(c_functions)
        address, size = _shim.api_address()
        if ctypes.sizeof(C.PJRT_Api) > size:
            raise RuntimeError("PJRT_Api does not fit the shim's static storage")
        api_table = C.PJRT_Api.from_address(address)
        ctypes.memset(address, 0, ctypes.sizeof(C.PJRT_Api))
        api_table.struct_size = C.struct_size(C.PJRT_Api)
        api_table.extension_start = _build_extensions()
        api_table.pjrt_api_version.struct_size = C.struct_size(C.PJRT_Api_Version)
        api_table.pjrt_api_version.extension_start = None
        api_table.pjrt_api_version.major_version = C.API_MAJOR
        api_table.pjrt_api_version.minor_version = C.API_MINOR
        # STABLEHLO_REF_FAULT (off by default) breaks one handler or kernel
        # for the plugin checker's tests; unset, nothing changes.
        from . import faults
        faults.install(_HANDLERS)
        for index, name in enumerate(C.API_FUNCTIONS):
            if name in c_functions:
                setattr(api_table, name, c_functions[name])
            else:
                setattr(api_table, name, _set_slot(index, name))
        _built = True
        trace_json.install_from_env()
        trace.init_from_env()
        set_tracing(trace.ENABLED)
        if not trace.ENABLED:
            global _traced_installed
            _traced_installed = False
        # Ctrl-C pressed while jaxlib is in C++ is taken before the next
        # handler starts (interrupt.py), not inside it.
        from . import interrupt
        interrupt.install_signal_hook()
        _shim.mark_api_ready()
        # At exit, stop pool threads (which do not hold the GIL) from waiting
        # for it; JAX's own atexit cleanup runs on the main thread, which
        # holds the GIL, and is still served (see _shim.c, shutdown.py).
        shutdown.add_step("jax ordered effects", shutdown.JAX_EFFECTS, _wait_for_jax_effects)
        shutdown.add_step("begin exit", shutdown.BEGIN_EXIT, _shim.begin_exit)


def _wait_for_jax_effects():
    # JAX's own atexit handler waits for the runtime tokens of ordered
    # effects (jax.debug.print(ordered=True), io_callback(ordered=True)) with
    # the GIL released, which the shim refuses once exiting (and jaxlib
    # aborts on that error): wait for them while the plugin still serves
    # every thread. (Not in a process that never imported JAX.)
    if "jax" not in sys.modules:
        return
    dispatch = compat.jax_internal("", "dispatch")
    dispatch.runtime_tokens.block_until_ready()


_extensions = []  # keeps the extension structs alive (they live as long as the API)


def _build_extensions() -> int:
    """The chain of PJRT extensions the plugin offers; returns its head:
    shardings (output/parameter shardings of executables), then the profiler
    (profiler.py)."""
    first = len(C.API_FUNCTIONS)
    profiler_first = first + len(C.SHARDINGS_EXTENSION_FUNCTIONS)
    if profiler_first + len(C.PROFILER_API_FUNCTIONS) > _shim.MAX_SLOTS:
        raise RuntimeError("the shim has too few trampolines for the extensions")
    ext = C.PJRT_Shardings_Extension()
    ext.base.struct_size = C.struct_size(C.PJRT_Shardings_Extension)
    ext.base.type = C.EXTENSION_TYPE_SHARDINGS
    for k, name in enumerate(C.SHARDINGS_EXTENSION_FUNCTIONS):
        setattr(ext, name, _set_slot(first + k, name))
    # The profiler API's errors are PJRT_Errors of the shim (same args layout).
    profiler_api = C.PLUGIN_Profiler_Api()
    profiler_api.struct_size = ctypes.sizeof(C.PLUGIN_Profiler_Api)
    profiler_api.error_destroy = _c_functions["PJRT_Error_Destroy"]
    profiler_api.error_message = _c_functions["PJRT_Error_Message"]
    profiler_api.error_get_code = _c_functions["PJRT_Error_GetCode"]
    for k, (name, field) in enumerate(C.PROFILER_API_FIELDS):
        setattr(profiler_api, field, _shim.set_slot(profiler_first + k, name,
                                                    _HANDLERS.get(name), _is_quiet(name)))
    prof = C.PJRT_Profiler_Extension()
    prof.base.struct_size = ctypes.sizeof(C.PJRT_Profiler_Extension)
    prof.base.type = C.EXTENSION_TYPE_PROFILER
    prof.base.next = None
    prof.profiler_api = ctypes.addressof(profiler_api)
    ext.base.next = ctypes.addressof(prof)
    _extensions.extend([ext, profiler_api, prof])
    return ctypes.addressof(ext)


def capsule() -> object:
    """The PJRT_Api table as the PyCapsule JAX's register_plugin expects."""
    build_api()
    return _shim.api_capsule()

