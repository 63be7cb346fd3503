"""Area ``capi``, group ``errors``: bad arguments: each must be an error with the
right code, not a crash.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

import numpy as np

from ... import _capi as C
from ..core import Failed, check
from ._common import ADD_ONE, TWO_OUTPUTS, E, _expect_error

if TYPE_CHECKING:
    from ..context import Context


@check("capi", "errors")
def bad_element_type(ctx: Context) -> None:
    """BufferFromHostBuffer with PJRT_Buffer_Type_INVALID is an error."""
    x = np.zeros(4, np.float32)
    _expect_error(lambda: ctx.client.from_host(x, btype=C.BufferType.INVALID),
                  "BufferFromHostBuffer(type=INVALID)")


@check("capi", "errors")
def lookup_missing_device(ctx: Context) -> None:
    """LookupDevice of an id no device has is an error (INVALID_ARGUMENT or NOT_FOUND)."""
    p, c = ctx.plugin, ctx.client
    _expect_error(lambda: p.call("PJRT_Client_LookupDevice", C.Client_LookupDevice_Args(
        client=c.handle, id=987654)), "LookupDevice(987654)",
        (E.INVALID_ARGUMENT, E.NOT_FOUND))


@check("capi", "errors")
def execute_wrong_arity(ctx: Context) -> None:
    """Execute with too few arguments is INVALID_ARGUMENT."""
    c = ctx.client
    exe = c.compile(TWO_OUTPUTS)
    b = c.from_host(np.zeros((2, 3), np.float32))
    try:
        _expect_error(lambda: exe.execute([b], num_outputs=3),
                      "Execute with 1 of 2 arguments", (E.INVALID_ARGUMENT,))
    finally:
        b.destroy()
        exe.destroy()


@check("capi", "errors")
def execute_wrong_type(ctx: Context) -> None:
    """Execute with an argument of another element type or shape is
    INVALID_ARGUMENT."""
    c = ctx.client
    exe = c.compile(ADD_ONE)
    try:
        for x in (np.zeros(4, np.int32), np.zeros(5, np.float32)):
            b = c.from_host(x)
            try:
                _expect_error(lambda: exe.execute([b]),
                              f"Execute(add_one) with {x.dtype}{list(x.shape)}",
                              (E.INVALID_ARGUMENT,))
            finally:
                b.destroy()
    finally:
        exe.destroy()


@check("capi", "errors")
def to_host_too_small(ctx: Context) -> None:
    """ToHostBuffer into a destination smaller than the buffer is an error."""
    c, p = ctx.client, ctx.plugin
    b = c.from_host(np.zeros(16, np.float32))
    out = np.zeros(4, np.float32)
    try:
        def go():
            a = p.call("PJRT_Buffer_ToHostBuffer", C.Buffer_ToHostBuffer_Args(
                src=b.handle, dst=out.ctypes.data, dst_size=out.nbytes))
            p.finish(a.event, 60, "PJRT_Buffer_ToHostBuffer")
        _expect_error(go, "ToHostBuffer with dst_size 16 for 64 bytes")
    finally:
        b.destroy()


@check("capi", "errors", params=["-1", "num_devices"])
def lookup_device_bad_id(ctx: Context, which: str) -> None:
    """LookupDeviceNegativeId / LookupDeviceOutOfRangeId (XLA's tests):
    LookupDevice(-1) and LookupDevice(number of devices) are
    INVALID_ARGUMENT."""
    c, p = ctx.client, ctx.plugin
    did = -1 if which == "-1" else len(c.devices())
    _expect_error(lambda: p.call("PJRT_Client_LookupDevice", C.Client_LookupDevice_Args(
        client=c.handle, id=did)), f"LookupDevice({did})", (E.INVALID_ARGUMENT,))


@check("capi", "errors")
def default_device_assignment_too_small(ctx: Context) -> None:
    """GetDefaultDeviceAssignmentBufferTooSmall (XLA's test): room for 7
    ids where 4 replicas x 2 partitions need 8 is FAILED_PRECONDITION,
    and nothing is written past the 7."""
    c, p = ctx.client, ctx.plugin
    out = (ctypes.c_int * 9)(*([-7] * 9))
    _expect_error(lambda: p.call(
        "PJRT_Client_DefaultDeviceAssignment", C.Client_DefaultDeviceAssignment_Args(
            client=c.handle, num_replicas=4, num_partitions=2, default_assignment_size=7,
            default_assignment=ctypes.addressof(out))),
        "DefaultDeviceAssignment(4x2) into 7 ints", (E.FAILED_PRECONDITION,))
    if list(out)[7:] != [-7, -7]:
        raise Failed("wrote past default_assignment_size")
