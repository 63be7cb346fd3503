"""Area ``capi``, group ``version``: the PJRT_Api table: its version and which
slots it fills.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

from ... import _capi as C
from ..core import Failed, check

if TYPE_CHECKING:
    from ..context import Context


@check("capi", "version")
def api_version(ctx: Context) -> None:
    """The table's version is 0.x and its struct_size covers the slots
    that every minor version since 0.1 has (through PJRT_Buffer_ReadyEvent)."""
    p = ctx.plugin
    if p.version[0] != C.API_MAJOR:
        raise Failed(f"major version {p.version[0]}, the mirror speaks {C.API_MAJOR}")
    if p.version_struct_size != ctypes.sizeof(C.PJRT_Api_Version):
        raise Failed(f"PJRT_Api_Version.struct_size is {p.version_struct_size}, the "
                     f"header's is {ctypes.sizeof(C.PJRT_Api_Version)}")
    need = C.PJRT_Api.PJRT_Buffer_ReadyEvent.offset + 8
    if p.api_struct_size < need:
        raise Failed(f"PJRT_Api.struct_size {p.api_struct_size} < {need}")


@check("capi", "version")
def table_slots(ctx: Context) -> None:
    """Slots inside the table's struct_size are non-NULL for the core
    functions a framework calls unconditionally."""
    p = ctx.plugin
    core = ["PJRT_Error_Destroy", "PJRT_Error_Message", "PJRT_Error_GetCode",
            "PJRT_Event_Destroy", "PJRT_Event_IsReady", "PJRT_Event_Await",
            "PJRT_Event_OnReady", "PJRT_Client_Create", "PJRT_Client_Destroy",
            "PJRT_Client_Devices", "PJRT_Client_AddressableDevices",
            "PJRT_Client_Compile", "PJRT_Client_BufferFromHostBuffer",
            "PJRT_LoadedExecutable_Execute", "PJRT_Buffer_ToHostBuffer",
            "PJRT_Buffer_Destroy", "PJRT_Buffer_ReadyEvent"]
    missing = [n for n in core if not p.has(n)]
    if missing:
        raise Failed(f"NULL slots: {missing}")


@check("capi", "version")
def newer_minor_table_slots(ctx: Context) -> None:
    """Slots past the plugin's PJRT_Api.struct_size are never read (a caller
    with a newer header must treat them as absent): the kit sees how many
    of the mirror's functions the plugin's minor version leaves out."""
    p = ctx.plugin
    beyond = [n for n in C.API_FUNCTIONS
              if getattr(C.PJRT_Api, n).offset + 8 > p.api_struct_size]
    if p.version[1] < C.API_MINOR and not beyond:
        raise Failed(f"minor version {p.version[1]} < {C.API_MINOR} but the table is "
                     "as large as the mirror's")
    for n in beyond:
        if p.has(n):
            raise Failed(f"{n} is past struct_size but was read")
