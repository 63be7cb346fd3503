"""Area ``capi``, group ``transfers``: host-to-device and device-to-host
transfers: every element type, strides, host-buffer semantics, layouts,
metadata and copies between devices.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

import numpy as np

from ... import _capi as C
from ..core import Failed, Skipped, Unsupported, check
from ..plugin import DTYPES, TYPE_NAMES, PluginError, int64_array
from ._common import E

if TYPE_CHECKING:
    from ..context import Context

TYPES = sorted(DTYPES, key=lambda t: t)


def _sample(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape)) if shape else 1
    if dtype == np.bool_:
        v = rng.integers(0, 2, n).astype(np.bool_)
    elif np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        v = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    elif np.issubdtype(dtype, np.complexfloating):
        v = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
    else:
        # Every bit pattern is a value of the narrow float types: random
        # bytes exercise NaNs, infinities and subnormals too.
        v = rng.integers(0, 256, n * dtype.itemsize, dtype=np.uint8).view(dtype)
    return v.reshape(shape)


def _same_bits(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and \
        np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8))


def _type_req(t):
    return (f"element_type:{TYPE_NAMES[t].lower()}",)


@check("capi", "transfers", params=[(t,) for t in TYPES],
     ids=[TYPE_NAMES[t].lower() for t in TYPES], requires=_type_req)
def roundtrip(ctx: Context, t: int) -> None:
    """Host -> device -> host is bit-exact for 0-d, empty, 2-d and 3-d arrays;
    the buffer reports the element type and dims it was given."""
    dtype = DTYPES[t]
    c = ctx.client
    for shape in [(), (0,), (3, 0, 2), (5, 7), (2, 3, 4)]:
        x = np.array(_sample(dtype, shape), order="C")  # ascontiguousarray makes 0-d 1-d
        try:
            b = c.from_host(x)
        except PluginError as e:
            if e.code in (E.UNIMPLEMENTED, E.INVALID_ARGUMENT) and shape == ():
                raise Unsupported(f"element type {TYPE_NAMES[t]}: {e}") from None
            raise
        try:
            if b.element_type() != t:
                raise Failed(f"{dtype}{list(shape)}: buffer type "
                             f"{TYPE_NAMES.get(b.element_type())}, expected {TYPE_NAMES[t]}")
            if tuple(b.dims()) != shape:
                raise Failed(f"{dtype}{list(shape)}: dims {b.dims()}")
            y = b.to_host()
            if not _same_bits(x, y):
                raise Failed(f"{dtype}{list(shape)}: the round trip changed the data")
        finally:
            b.destroy()


@check("capi", "transfers")
def large(ctx: Context) -> None:
    """A 64 MiB f32 array round-trips exactly."""
    x = np.arange(16 * 1024 * 1024, dtype=np.float32)
    b = ctx.client.from_host(x)
    try:
        if not np.array_equal(b.to_host(), x):
            raise Failed("64 MiB round trip changed the data")
    finally:
        b.destroy()


STRIDED = {
    "transposed": lambda a: a.T,
    "every_other_row": lambda a: a[::2],
    "every_other_column": lambda a: a[:, ::2],
    "broadcast_zero_stride": lambda a: np.broadcast_to(a[:1], a.shape),
}


@check("capi", "transfers", params=sorted(STRIDED), requires=("strided_transfers",))
def strided(ctx: Context, kind: str) -> None:
    """BufferFromHostBuffer with byte_strides of a non-contiguous view reads
    the logical array (the numpy view's values)."""
    base = np.arange(6 * 8, dtype=np.int32).reshape(6, 8)
    x = STRIDED[kind](base)
    b = ctx.client.from_host(x, byte_strides=True)
    try:
        y = b.to_host(shape=x.shape)
        if not np.array_equal(y, np.ascontiguousarray(x)):
            bad = np.argwhere(y != x)[0].tolist()
            raise Failed(f"strides {x.strides}: element {bad} is {y[tuple(bad)]}, "
                         f"expected {x[tuple(bad)]}", op="PJRT_Client_BufferFromHostBuffer")
    finally:
        b.destroy()


SEMANTICS = {
    "immutable_only_during_call": C.HostBufferSemantics.kImmutableOnlyDuringCall,
    "immutable_until_transfer_completes":
        C.HostBufferSemantics.kImmutableUntilTransferCompletes,
    "immutable_zero_copy": C.HostBufferSemantics.kImmutableZeroCopy,
    "mutable_zero_copy": C.HostBufferSemantics.kMutableZeroCopy,
}


@check("capi", "transfers", params=sorted(SEMANTICS))
def host_buffer_semantics(ctx: Context, name: str) -> None:
    """Each PJRT_HostBufferSemantics: the data arrives; for the two
    copying semantics, changing the host array once the plugin may reuse
    it (after the call, resp. after done_with_host_buffer) does not change
    the buffer."""
    sem = SEMANTICS[name]
    if sem >= C.HostBufferSemantics.kImmutableZeroCopy and \
            not ctx.capabilities.allows("zero_copy"):
        raise Skipped("requires zero_copy (not declared by the plugin)")
    x = np.arange(1024, dtype=np.float32)
    expect = x.copy()
    c = ctx.client
    try:
        b = c.from_host(x, semantics=sem, wait_done=False)
    except PluginError as e:
        if sem == C.HostBufferSemantics.kMutableZeroCopy and e.code in (
                E.UNIMPLEMENTED, E.INVALID_ARGUMENT):
            raise Unsupported(f"kMutableZeroCopy refused: {e}") from None
        raise
    zero_copy = sem >= C.HostBufferSemantics.kImmutableZeroCopy
    try:
        if sem == C.HostBufferSemantics.kImmutableOnlyDuringCall:
            x[:] = -1
        if not zero_copy:
            c.plugin.finish(b.done_event, 60, "done_with_host_buffer")
        if sem == C.HostBufferSemantics.kImmutableUntilTransferCompletes:
            x[:] = -1
        y = b.to_host()
        if not np.array_equal(y, expect):
            raise Failed(f"{name}: the buffer holds {y[:4]}..., expected {expect[:4]}...")
    finally:
        b.destroy()
    if zero_copy:
        # The plugin may use the host memory until the buffer is gone:
        # done_with_host_buffer fires at the latest when it is destroyed.
        c.plugin.finish(b.done_event, 60, "done_with_host_buffer after Buffer_Destroy")


@check("capi", "transfers", requires=("layouts",))
def host_layout_to_host(ctx: Context) -> None:
    """ToHostBuffer with a column-major host_layout writes the transposed
    bytes (or is refused with UNIMPLEMENTED/INVALID_ARGUMENT)."""
    c, p = ctx.client, ctx.plugin
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = c.from_host(x)
    try:
        m2m = int64_array([0, 1])
        layout = C.PJRT_Buffer_MemoryLayout(type=C.MemoryLayoutType.Tiled)
        layout.struct_size = C.struct_size(C.PJRT_Buffer_MemoryLayout)
        layout.tiled.struct_size = C.struct_size(C.PJRT_Buffer_MemoryLayout_Tiled)
        layout.tiled.minor_to_major = ctypes.addressof(m2m)
        layout.tiled.minor_to_major_size = 2
        out = np.zeros(12, np.float32)
        try:
            a = p.call("PJRT_Buffer_ToHostBuffer", C.Buffer_ToHostBuffer_Args(
                src=b.handle, host_layout=ctypes.addressof(layout),
                dst=out.ctypes.data, dst_size=out.nbytes))
            p.finish(a.event, 60, "PJRT_Buffer_ToHostBuffer")
        except PluginError as e:
            if e.code in (E.UNIMPLEMENTED, E.INVALID_ARGUMENT):
                raise Unsupported(f"column-major host layout: {e}") from None
            raise
        if not np.array_equal(out, x.T.ravel()):
            raise Failed(f"column-major copy gave {out.tolist()}, expected "
                         f"{x.T.ravel().tolist()}", op="PJRT_Buffer_ToHostBuffer")
    finally:
        b.destroy()


@check("capi", "transfers")
def buffer_metadata(ctx: Context) -> None:
    """Dimensions, UnpaddedDimensions, OnDeviceSizeInBytes (>= the data),
    Device, Memory and IsOnCpu of a fresh buffer are consistent."""
    c, p = ctx.client, ctx.plugin
    dev = c.addressable_devices()[0]
    x = np.zeros((3, 5), np.float64)
    b = c.from_host(x, device=dev)
    try:
        a = p.call("PJRT_Buffer_UnpaddedDimensions",
                   C.Buffer_UnpaddedDimensions_Args(buffer=b.handle))
        if C.read_int64s(a.unpadded_dims, a.num_dims) != (3, 5):
            raise Failed("UnpaddedDimensions differ from the dims")
        size = p.call("PJRT_Buffer_OnDeviceSizeInBytes",
                      C.Buffer_OnDeviceSizeInBytes_Args(
                          buffer=b.handle)).on_device_size_in_bytes
        if size < x.nbytes:
            raise Failed(f"OnDeviceSizeInBytes {size} < {x.nbytes}")
        d = p.call("PJRT_Buffer_Device", C.Buffer_Device_Args(buffer=b.handle)).device
        if d != dev:
            raise Failed("PJRT_Buffer_Device is not the device the buffer was put on")
        m = p.call("PJRT_Buffer_Memory", C.Buffer_Memory_Args(buffer=b.handle)).memory
        if m != c.default_memory(dev):
            raise Failed("a buffer put on a device is not in its default memory")
        p.call("PJRT_Buffer_IsOnCpu", C.Buffer_IsOnCpu_Args(buffer=b.handle))
    finally:
        b.destroy()


@check("capi", "transfers", requires=("multi_device",))
def copy_to_device(ctx: Context) -> None:
    """CopyToDevice to every other addressable device keeps the data and
    lands on that device."""
    c, p = ctx.client, ctx.plugin
    devs = c.addressable_devices()
    if len(devs) < 2:
        raise Skipped(f"one addressable device ({len(devs)})")
    x = np.arange(10, dtype=np.int64)
    b = c.from_host(x, device=devs[0])
    try:
        for d in devs[1:]:
            a = p.call("PJRT_Buffer_CopyToDevice", C.Buffer_CopyToDevice_Args(
                buffer=b.handle, dst_device=d))
            nb = c.buffer(a.dst_buffer)
            try:
                got = p.call("PJRT_Buffer_Device",
                             C.Buffer_Device_Args(buffer=nb.handle)).device
                if got != d:
                    raise Failed("the copy is not on the destination device")
                if not np.array_equal(nb.to_host(), x):
                    raise Failed("CopyToDevice changed the data")
            finally:
                nb.destroy()
    finally:
        b.destroy()
