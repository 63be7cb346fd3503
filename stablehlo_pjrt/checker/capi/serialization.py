"""Area ``capi``, group ``serialization``: executable serialization round trips.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

import numpy as np

from ... import _capi as C
from ..core import Failed, check
from ._common import ADD_ONE, _serialized

if TYPE_CHECKING:
    from ..context import Context


@check("capi", "serialization", requires=("serialization",))
def serialize_roundtrip(ctx: Context) -> None:
    """Serialize -> DeserializeAndLoad gives an executable with the same
    outputs (and fingerprint, when the plugin has one)."""
    c, p = ctx.client, ctx.plugin
    exe = c.compile(ADD_ONE)
    try:
        blob = _serialized(ctx, exe)
        if not blob:
            raise Failed("Serialize returned no bytes")
        buf = ctypes.create_string_buffer(blob, len(blob))
        d = p.call("PJRT_Executable_DeserializeAndLoad",
                   C.Executable_DeserializeAndLoad_Args(
                       client=c.handle, serialized_executable=ctypes.addressof(buf),
                       serialized_executable_size=len(blob)))
        from ..plugin import Executable
        exe2 = Executable(c, d.loaded_executable)
        x = np.arange(4, dtype=np.float32)
        b = c.from_host(x)
        try:
            o = c.buffer(exe2.execute([b])[0][0])
            if not np.array_equal(o.to_host(), x + 1):
                raise Failed("the deserialized executable computes something else")
            o.destroy()
            f1, f2 = exe.fingerprint(), exe2.fingerprint()
            if f1 and f2 and f1 != f2:
                raise Failed("the deserialized executable has another fingerprint")
        finally:
            b.destroy()
            exe2.destroy()
    finally:
        exe.destroy()
