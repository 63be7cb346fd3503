"""Area ``capi``, group ``events``: ready events, execution events, errors
delivered through events.
"""

from __future__ import annotations

import ctypes
from ctypes import c_void_p
from typing import TYPE_CHECKING

import numpy as np

from ... import _capi as C
from ..core import Failed, Unsupported, check
from ..plugin import int64_array
from ._common import ADD_ONE, E, _expect_error

if TYPE_CHECKING:
    from ..context import Context


@check("capi", "events")
def ready_event(ctx: Context) -> None:
    """A buffer's ReadyEvent fires through OnReady without error; Await
    and IsReady then agree; a second OnReady after it fired runs at once."""
    c, p = ctx.client, ctx.plugin
    b = c.from_host(np.ones(16, np.float32))
    try:
        ev = p.call("PJRT_Buffer_ReadyEvent", C.Buffer_ReadyEvent_Args(
            buffer=b.handle)).event
        # The buffer's data is on the device already: 10 s is ample.
        fired, err = p.event_wait(ev, 10)
        if not fired:
            raise Failed("ReadyEvent never fired (OnReady not called within 10 s)",
                         op="PJRT_Buffer_ReadyEvent")
        if err:
            raise Failed(f"ReadyEvent carried an error: {err}")
        p.event_await(ev)
        if not p.event_ready(ev):
            raise Failed("IsReady is false after Await")
        if p.event_error(ev) is not None:
            raise Failed("PJRT_Event_Error returned an error for a good buffer")
        fired, _ = p.event_wait(ev, 10)
        if not fired:
            raise Failed("OnReady on a fired event did not run its callback")
        p.event_destroy(ev)
    finally:
        b.destroy()


@check("capi", "events")
def execute_events(ctx: Context) -> None:
    """Execute's device_complete_events fire, and output buffers are ready."""
    c = ctx.client
    exe = c.compile(ADD_ONE)
    b = c.from_host(np.arange(4, dtype=np.float32))
    try:
        outs = exe.execute([b])  # waits on the completion event
        o = c.buffer(outs[0][0])
        o.ready(timeout=10)
        if not np.array_equal(o.to_host(), np.arange(4, dtype=np.float32) + 1):
            raise Failed("add_one gave a wrong result")
        o.destroy()
    finally:
        b.destroy()
        exe.destroy()


@check("capi", "events", requires=("error_buffers",))
def error_through_event(ctx: Context) -> None:
    """An error buffer (PJRT_Client_CreateErrorBuffer) delivers its code
    and message through its ReadyEvent and through ToHostBuffer."""
    c, p = ctx.client, ctx.plugin
    if not p.has("PJRT_Client_CreateErrorBuffer"):
        raise Unsupported("PJRT_Client_CreateErrorBuffer is not in the table")
    msg = b"kit-made error"
    dims = int64_array([2])
    mem = c.default_memory(c.addressable_devices()[0])
    a = p.call("PJRT_Client_CreateErrorBuffer", C.Client_CreateErrorBuffer_Args(
        client=c.handle, error_code=E.DATA_LOSS,
        error_message=ctypes.cast(ctypes.c_char_p(msg), c_void_p).value,
        error_message_size=len(msg), shape_dims=ctypes.addressof(dims),
        shape_num_dims=1, shape_element_type=C.BufferType.F32, memory=mem))
    b = c.buffer(a.buffer, np.float32, (2,))
    try:
        ev = p.call("PJRT_Buffer_ReadyEvent", C.Buffer_ReadyEvent_Args(
            buffer=b.handle)).event
        fired, err = p.event_wait(ev, 60)
        p.event_destroy(ev)
        if not fired:
            raise Failed("the ReadyEvent of an error buffer never fired")
        if err is None or err.code != E.DATA_LOSS or "kit-made error" not in err.message:
            raise Failed(f"ReadyEvent delivered {err}, expected DATA_LOSS 'kit-made error'")
        e2 = _expect_error(lambda: b.to_host(), "ToHostBuffer of an error buffer")
        if "kit-made error" not in e2.message:
            raise Failed(f"ToHostBuffer's error lost the message: {e2}")
    finally:
        b.destroy()


@check("capi", "events")
def await_done_with_host_buffer(ctx: Context) -> None:
    """BufferTransferImmutableUntilTransferCompletes (XLA's test): Await on
    done_with_host_buffer returns without error."""
    c, p = ctx.client, ctx.plugin
    x = np.arange(4, dtype=np.float32) + 41
    b = c.from_host(x, semantics=C.HostBufferSemantics.kImmutableUntilTransferCompletes,
                    wait_done=False)
    try:
        if b.done_event:
            p.event_await(b.done_event)
            p.event_destroy(b.done_event)
        if not np.array_equal(b.to_host(), x):
            raise Failed("the buffer does not hold the data")
    finally:
        b.destroy()
