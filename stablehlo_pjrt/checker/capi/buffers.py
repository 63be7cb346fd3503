"""Area ``capi``, group ``buffers``: buffers: deletion, donation, external
references, device pointers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ... import _capi as C
from ..core import Failed, check
from ._common import ADD_ONE, DONATE, E, _expect_error

if TYPE_CHECKING:
    from ..context import Context


@check("capi", "buffers")
def deleted_buffer_use(ctx: Context) -> None:
    """IsDeleted (XLA's test): false for a fresh buffer, true after
    PJRT_Buffer_Delete; ToHostBuffer and Execute with it are then errors
    (not crashes); Destroy still works."""
    c = ctx.client
    exe = c.compile(ADD_ONE)
    b = c.from_host(np.arange(4, dtype=np.float32))
    try:
        if b.is_deleted():
            raise Failed("IsDeleted is true for a fresh buffer")
        b.delete()
        if not b.is_deleted():
            raise Failed("IsDeleted is false after Delete")
        _expect_error(lambda: b.to_host(), "ToHostBuffer of a deleted buffer")
        _expect_error(lambda: exe.execute([b]), "Execute with a deleted buffer")
    finally:
        b.destroy()
        exe.destroy()


@check("capi", "buffers", requires=("donation",))
def donation(ctx: Context) -> None:
    """An input aliased to an output (tf.aliasing_output) is donated: after
    Execute it is deleted (or the plugin copies: then it keeps its value);
    the output is right; non_donatable_input_indices keeps it alive."""
    c = ctx.client
    exe = c.compile(DONATE)
    x = np.arange(8, dtype=np.float32)
    try:
        b = c.from_host(x)
        o = c.buffer(exe.execute([b])[0][0])
        if not np.array_equal(o.to_host(), x * x):
            raise Failed("the donating program gave a wrong result")
        o.destroy()
        if not b.is_deleted():
            # Donation is an optimisation a plugin may skip; then the
            # input must be intact.
            if not np.array_equal(b.to_host(), x):
                raise Failed("the input was not donated, but its value changed")
        b.destroy()
        b = c.from_host(x)
        o = c.buffer(exe.execute([b], non_donatable=[0])[0][0])
        if b.is_deleted():
            raise Failed("an input listed in non_donatable_input_indices was donated")
        if not np.array_equal(b.to_host(), x):
            raise Failed("a non-donatable input changed")
        o.destroy()
        b.destroy()
    finally:
        exe.destroy()


@check("capi", "buffers")
def external_reference_count(ctx: Context) -> None:
    """IncreaseAndDecreaseReferenceCount and
    DecreaseReferenceCountReturnsError (XLA's tests): increase then
    decrease succeed; a decrease with no reference held is
    INVALID_ARGUMENT."""
    c, p = ctx.client, ctx.plugin
    b = c.from_host(np.arange(4, dtype=np.float32))
    try:
        p.call("PJRT_Buffer_IncreaseExternalReferenceCount",
               C.Buffer_IncreaseExternalReferenceCount_Args(buffer=b.handle))
        p.call("PJRT_Buffer_DecreaseExternalReferenceCount",
               C.Buffer_DecreaseExternalReferenceCount_Args(buffer=b.handle))
        _expect_error(lambda: p.call(
            "PJRT_Buffer_DecreaseExternalReferenceCount",
            C.Buffer_DecreaseExternalReferenceCount_Args(buffer=b.handle)),
            "DecreaseExternalReferenceCount with no reference held",
            (E.INVALID_ARGUMENT,))
    finally:
        b.destroy()


@check("capi", "buffers")
def opaque_device_memory_pointer(ctx: Context) -> None:
    """OpaqueDeviceMemoryDataPointer (XLA's test): non-NULL for a buffer."""
    c, p = ctx.client, ctx.plugin
    b = c.from_host(np.arange(4, dtype=np.float32))
    try:
        ptr = p.call("PJRT_Buffer_OpaqueDeviceMemoryDataPointer",
                     C.Buffer_OpaqueDeviceMemoryDataPointer_Args(
                         buffer=b.handle)).device_memory_ptr
        if not ptr:
            raise Failed("the device memory pointer is NULL")
    finally:
        b.destroy()
