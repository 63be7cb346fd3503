"""Area ``capi``, group ``struct_size``: struct_size compatibility: callers built
against newer and older headers (larger structs, and fields a newer header
appended).
"""

from __future__ import annotations

import ctypes
from ctypes import c_void_p
from typing import TYPE_CHECKING

import numpy as np

from ... import _capi as C
from ..core import Failed, check
from ._common import ADD_ONE, E, _code_name, _serialized, round_trip_and_close

if TYPE_CHECKING:
    from ..context import Context


def _struct_size_call(ctx, name, make, extra):
    """Calls ``name`` with struct_size = the mirror's + ``extra`` bytes
    (negative: an older caller), with canary bytes after the given size."""
    p = ctx.plugin
    args = make()
    full = C.struct_size(type(args))
    size = full + extra
    pad = 64
    raw = (ctypes.c_ubyte * (ctypes.sizeof(args) + pad))()
    ctypes.memmove(raw, ctypes.addressof(args), ctypes.sizeof(args))
    for i in range(max(size, 0), len(raw)):
        raw[i] = 0xA5
    view = type(args).from_buffer(raw)
    err = p.raw_call(name, view, struct_size=size)
    code = None
    if err:
        code, _ = p.error_info(err)
        p.error_destroy(err)
    touched = [i for i in range(max(size, 0), len(raw)) if raw[i] != 0xA5]
    return code, touched, view


STRUCT_CALLS = {
    "PJRT_Client_PlatformName": lambda ctx: (
        lambda: C.Client_PlatformName_Args(client=ctx.client.handle)),
    "PJRT_Client_Devices": lambda ctx: (
        lambda: C.Client_Devices_Args(client=ctx.client.handle)),
    "PJRT_Plugin_Attributes": lambda ctx: (lambda: C.Plugin_Attributes_Args()),
}


@check("capi", "struct_size", params=sorted(STRUCT_CALLS))
def newer_caller(ctx: Context, name: str) -> None:
    """A caller built against a newer header passes a larger struct_size:
    the call succeeds and nothing past the plugin's fields is written."""
    code, touched, _ = _struct_size_call(ctx, name, STRUCT_CALLS[name](ctx), 48)
    if code is not None:
        raise Failed(f"{name} with struct_size +48 returned {_code_name(code)}; "
                     "a larger struct_size must be accepted")
    full = C.struct_size(C.Client_Devices_Args)  # noqa: F841 - documents the rule
    if touched:
        raise Failed(f"{name} wrote into the bytes past the fields it knows "
                     f"(offsets {touched[:4]}...)")


@check("capi", "struct_size", params=sorted(STRUCT_CALLS))
def older_caller(ctx: Context, name: str) -> None:
    """A caller built against an older header passes a struct_size that
    stops before the last (output) field: the plugin returns an error
    (INVALID_ARGUMENT, as XLA's ActualStructSizeIsGreaterOrEqual does) or
    succeeds without writing past the given size; it never crashes."""
    code, touched, _ = _struct_size_call(ctx, name, STRUCT_CALLS[name](ctx), -8)
    if code is None and touched:
        raise Failed(f"{name} accepted struct_size -8 and wrote past it "
                     f"(offsets {touched[:4]}...)")
    if code is not None and code != E.INVALID_ARGUMENT:
        raise Failed(f"{name} with a too small struct_size returned "
                     f"{_code_name(code)}, expected INVALID_ARGUMENT")


def _older(args, first_absent: str):
    """A copy of ``args`` whose struct_size stops before ``first_absent``,
    with canary bytes from there on: (view, raw bytes)."""
    size = getattr(type(args), first_absent).offset
    raw = (ctypes.c_ubyte * (ctypes.sizeof(args) + 64))()
    ctypes.memmove(raw, ctypes.addressof(args), ctypes.sizeof(args))
    for i in range(size, len(raw)):
        raw[i] = 0xA5
    view = type(args).from_buffer(raw)
    view.struct_size = size
    return view, raw


def _older_call(p, name, view):
    """Calls with the view's own struct_size: None on success, or the
    error code (only INVALID_ARGUMENT is accepted)."""
    err = p.raw_call(name, view, struct_size=view.struct_size)
    if not err:
        return None
    code, msg = p.error_info(err)
    p.error_destroy(err)
    if code != E.INVALID_ARGUMENT:
        raise Failed(f"{name} from an older caller (struct_size {view.struct_size}): "
                     f"{_code_name(code)}: {msg} (expected success or INVALID_ARGUMENT)",
                     op=name)
    return (f"{name} refused the older caller's struct_size {view.struct_size} with "
            f"INVALID_ARGUMENT (allowed): {' '.join(msg.split())[:200]}")


@check("capi", "struct_size")
def older_caller_client_create(ctx: Context) -> str | None:
    """PJRT_Client_Create_Args from before kv_try_get_callback (0.6x): the
    plugin creates a working client without reading the absent fields, or
    refuses with INVALID_ARGUMENT."""
    p = ctx.plugin
    args = C.Client_Create_Args()
    if ctx.create_options:  # the run's options (an accelerator's allocator)
        from ..plugin import named_values
        opts, _keep = named_values(ctx.create_options)
        args.create_options = ctypes.addressof(opts)
        args.num_options = len(ctx.create_options)
    view, _ = _older(args, "kv_try_get_callback")
    refused = _older_call(p, "PJRT_Client_Create", view)
    if refused is not None:
        return refused
    from ..plugin import Client
    c = Client.__new__(Client)
    c.plugin, c.handle, c._opts = p, view.client, None
    round_trip_and_close(c, "the client made from an older struct transfers wrong data")
    return None


def _execute_older(ctx, options_first_absent=None, args_first_absent=None):
    c, p = ctx.client, ctx.plugin
    exe = c.compile(ADD_ONE)
    b = c.from_host(np.arange(4, dtype=np.float32))
    try:
        arg_list = (c_void_p * 1)(b.handle)
        arg_lists = (c_void_p * 1)(ctypes.addressof(arg_list))
        out_list = (c_void_p * 1)()
        out_lists = (c_void_p * 1)(ctypes.addressof(out_list))
        events = (c_void_p * 1)()
        opts = C.PJRT_ExecuteOptions()
        opts.struct_size = C.struct_size(C.PJRT_ExecuteOptions)
        keep = []
        if options_first_absent:
            opts, raw = _older(opts, options_first_absent)
            keep.append(raw)
        a = C.LoadedExecutable_Execute_Args(
            executable=exe.handle, options=ctypes.addressof(opts),
            argument_lists=ctypes.addressof(arg_lists), num_devices=1, num_args=1,
            output_lists=ctypes.addressof(out_lists),
            device_complete_events=ctypes.addressof(events))
        a.struct_size = C.struct_size(C.LoadedExecutable_Execute_Args)
        if args_first_absent:
            a, raw = _older(a, args_first_absent)
            keep.append(raw)
        refused = _older_call(p, "PJRT_LoadedExecutable_Execute", a)
        if refused is not None:
            return refused
        p.finish(events[0], 60, "PJRT_LoadedExecutable_Execute")
        o = c.buffer(out_list[0])
        got = o.to_host()
        o.destroy()
        if not np.array_equal(got, np.arange(4, dtype=np.float32) + 1):
            raise Failed(f"add_one gave {got} for an older caller",
                         op="PJRT_LoadedExecutable_Execute")
    finally:
        b.destroy()
        exe.destroy()


@check("capi", "struct_size")
def older_caller_execute_options(ctx: Context) -> str | None:
    """PJRT_ExecuteOptions from before `context` (0.5x): the fields after
    it (context, call_location, task ids, ...) are absent and must not be
    read; Execute gives the right result, or INVALID_ARGUMENT."""
    return _execute_older(ctx, options_first_absent="context")


@check("capi", "struct_size")
def older_caller_execute_args(ctx: Context) -> str | None:
    """PJRT_LoadedExecutable_Execute_Args from before execute_device: the
    plugin runs on the executable's own device, or INVALID_ARGUMENT."""
    return _execute_older(ctx, args_first_absent="execute_device")


@check("capi", "struct_size", requires=("serialization",))
def older_caller_deserialize(ctx: Context) -> str | None:
    """PJRT_Executable_DeserializeAndLoad_Args from before
    overridden_serialized_compile_options: the executable loads with its
    own options (or INVALID_ARGUMENT)."""
    c, p = ctx.client, ctx.plugin
    exe = c.compile(ADD_ONE)
    try:
        blob = _serialized(ctx, exe)
    finally:
        exe.destroy()
    buf = ctypes.create_string_buffer(blob, len(blob))
    view, _ = _older(C.Executable_DeserializeAndLoad_Args(
        client=c.handle, serialized_executable=ctypes.addressof(buf),
        serialized_executable_size=len(blob)), "overridden_serialized_compile_options")
    refused = _older_call(p, "PJRT_Executable_DeserializeAndLoad", view)
    if refused is not None:
        return refused
    from ..plugin import Executable
    exe2 = Executable(c, view.loaded_executable)
    b = c.from_host(np.arange(4, dtype=np.float32))
    try:
        o = c.buffer(exe2.execute([b])[0][0])
        if not np.array_equal(o.to_host(), np.arange(4, dtype=np.float32) + 1):
            raise Failed("the executable loaded by an older caller computes something "
                         "else")
        o.destroy()
    finally:
        b.destroy()
        exe2.destroy()
