"""Area ``capi``, group ``multidevice``: programs replicated over several devices.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..core import Failed, Skipped, check
from ..plugin import compile_options
from ._common import ADD_ONE

if TYPE_CHECKING:
    from ..context import Context


@check("capi", "multidevice", requires=("multi_device",))
def execute_replicated(ctx: Context) -> None:
    """A program compiled for N replicas runs with one argument list per
    device; each device's output is its own input plus one."""
    c = ctx.client
    devs = c.addressable_devices()
    if len(devs) < 2:
        raise Skipped(f"one addressable device ({len(devs)})")
    n = min(len(devs), 4)
    exe = c.compile(ADD_ONE, options=compile_options(num_replicas=n))
    bufs = [c.from_host(np.full(4, k, np.float32), device=d)
            for k, d in enumerate(devs[:n])]
    try:
        outs = exe.execute(None, device_lists=[[b] for b in bufs])
        for k, lst in enumerate(outs):
            o = c.buffer(lst[0])
            v = o.to_host()
            o.destroy()
            if not np.array_equal(v, np.full(4, k + 1, np.float32)):
                raise Failed(f"replica {k} computed {v}, expected {k + 1}")
    finally:
        for b in bufs:
            b.destroy()
        exe.destroy()
