"""Area ``capi``: the plugin's PJRT C API behaviour, driven the way a
framework drives it (see plugin.py), each result compared with what
pjrt_c_api.h promises and with what the reference plugin does.

The groups follow XLA's own C API test (xla/pjrt/c/pjrt_c_api_test.cc) and
add what it cannot check from inside one build: struct sizes of older and
newer callers, every element type and host-buffer semantics, error codes of
bad arguments, and behaviour after errors.
"""

from __future__ import annotations

import ctypes
from ctypes import c_void_p

import numpy as np

from .. import _capi as C
from .. import compat
from .core import Failed, Skipped, Unsupported
from .plugin import (
    DTYPES,
    TYPE_NAMES,
    PluginError,
    compile_options,
    int64_array,
)

E = C.ErrorCode

ADD_ONE = """
module @add_one {
  func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {
    %c = stablehlo.constant dense<1.0> : tensor<4xf32>
    %0 = stablehlo.add %a, %c : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
"""

TWO_OUTPUTS = """
module @two_outputs {
  func.func public @main(%a: tensor<2x3xf32>, %b: tensor<i32>) -> (tensor<i32>, tensor<3x2xf32>, tensor<2x3xi1>) {
    %0 = stablehlo.transpose %a, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
    %z = stablehlo.constant dense<0.0> : tensor<2x3xf32>
    %1 = stablehlo.compare GT, %a, %z : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
    return %b, %0, %1 : tensor<i32>, tensor<3x2xf32>, tensor<2x3xi1>
  }
}
"""

DONATE = """
module @donate {
  func.func public @main(%a: tensor<8xf32> {tf.aliasing_output = 0 : i32}) -> tensor<8xf32> {
    %0 = stablehlo.multiply %a, %a : tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
"""


def _expect_error(fn, what: str, codes=None):
    """Runs ``fn``; it must raise a PluginError (with one of ``codes``)."""
    try:
        fn()
    except PluginError as e:
        if codes and e.code not in codes:
            raise Failed(f"{what}: error code {e} (expected one of "
                         f"{[_code_name(c) for c in codes]})") from None
        if not e.message.strip():
            raise Failed(f"{what}: error with an empty message") from None
        return e
    raise Failed(f"{what}: the call succeeded, an error was expected")


def _serialized(ctx, exe) -> bytes:
    """PJRT_Executable_Serialize of ``exe``: its bytes (the plugin's copy freed)."""
    s = ctx.plugin.call("PJRT_Executable_Serialize", C.Executable_Serialize_Args(
        executable=exe.executable))
    blob = C.read_bytes(s.serialized_bytes, s.serialized_bytes_size)
    if s.serialized_executable_deleter:
        ctypes.CFUNCTYPE(None, c_void_p)(s.serialized_executable_deleter)(
            s.serialized_executable)
    return blob


def _code_name(c):
    return {v: k for k, v in vars(E).items() if not k.startswith("_")}.get(c, str(c))


def register(reg):
    chk = reg.check

    # -- version and table ---------------------------------------------------

    @chk("capi", "version")
    def api_version(ctx):
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

    @chk("capi", "version")
    def table_slots(ctx):
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

    @chk("capi", "version")
    def newer_minor_table_slots(ctx):
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

    # -- struct_size compatibility --------------------------------------------

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

    @chk("capi", "struct_size", params=sorted(STRUCT_CALLS))
    def newer_caller(ctx, name):
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

    @chk("capi", "struct_size", params=sorted(STRUCT_CALLS))
    def older_caller(ctx, name):
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

    # -- plugin attributes ----------------------------------------------------

    @chk("capi", "attributes")
    def plugin_attributes(ctx):
        """PJRT_Plugin_Attributes: names unique and non-empty; StableHLO
        versions (if given) are 3 integers with minimum <= current."""
        attrs = ctx.plugin.attributes()
        if any(not k for k in attrs):
            raise Failed(f"an attribute has an empty name: {attrs}")
        cur, low = attrs.get("stablehlo_current_version"), attrs.get("stablehlo_minimum_version")
        for name, v in (("stablehlo_current_version", cur),
                        ("stablehlo_minimum_version", low)):
            if v is not None and (not isinstance(v, list) or len(v) != 3):
                raise Failed(f"{name} = {v!r}: expected a list of 3 integers")
        if cur and low and tuple(low) > tuple(cur):
            raise Failed(f"stablehlo_minimum_version {low} > current {cur}")

    # -- client, devices, memories --------------------------------------------

    @chk("capi", "client")
    def platform(ctx):
        """PlatformName and PlatformVersion are strings; ProcessIndex is 0 in a
        single-process client."""
        c, p = ctx.client, ctx.plugin
        if not c.platform_name():
            raise Failed("empty platform name")
        p.call("PJRT_Client_PlatformVersion", C.Client_PlatformVersion_Args(client=c.handle))
        idx = p.call("PJRT_Client_ProcessIndex",
                     C.Client_ProcessIndex_Args(client=c.handle)).process_index
        if idx != 0:
            raise Failed(f"process index {idx} in a single-process client")

    @chk("capi", "client")
    def devices(ctx):
        """Devices non-empty; addressable devices are among them; ids unique;
        each description's id and process index agree with the lookups;
        LookupDevice(id) and LookupAddressableDevice(local id) find the device."""
        c, p = ctx.client, ctx.plugin
        devs, addr = c.devices(), c.addressable_devices()
        if not devs or not addr:
            raise Failed(f"{len(devs)} device(s), {len(addr)} addressable")
        if not set(addr) <= set(devs):
            raise Failed("an addressable device is not in PJRT_Client_Devices")
        ids = []
        for d in devs:
            desc = p.call("PJRT_Device_GetDescription",
                          C.Device_GetDescription_Args(device=d)).device_description
            did = p.call("PJRT_DeviceDescription_Id",
                         C.DeviceDescription_Id_Args(device_description=desc)).id
            ids.append(did)
            pi = p.call("PJRT_DeviceDescription_ProcessIndex",
                        C.DeviceDescription_ProcessIndex_Args(
                            device_description=desc)).process_index
            k = p.call("PJRT_DeviceDescription_Kind",
                       C.DeviceDescription_Kind_Args(device_description=desc))
            if not C.read_str(k.device_kind, k.device_kind_size):
                raise Failed(f"device {did}: empty kind")
            for fn, cls in (("PJRT_DeviceDescription_DebugString",
                             C.DeviceDescription_DebugString_Args),
                            ("PJRT_DeviceDescription_ToString",
                             C.DeviceDescription_ToString_Args)):
                p.call(fn, cls(device_description=desc))
            p.call("PJRT_DeviceDescription_Attributes",
                   C.DeviceDescription_Attributes_Args(device_description=desc))
            found = p.call("PJRT_Client_LookupDevice", C.Client_LookupDevice_Args(
                client=c.handle, id=did)).device
            if found != d:
                raise Failed(f"LookupDevice({did}) returned another device")
            is_addr = p.call("PJRT_Device_IsAddressable",
                             C.Device_IsAddressable_Args(device=d)).is_addressable
            if is_addr != (d in addr):
                raise Failed(f"device {did}: IsAddressable={is_addr} disagrees with "
                             "PJRT_Client_AddressableDevices")
            if is_addr:
                if pi != 0:
                    raise Failed(f"addressable device {did} has process index {pi}")
                hw = p.call("PJRT_Device_LocalHardwareId",
                            C.Device_LocalHardwareId_Args(device=d)).local_hardware_id
                if hw >= 0 and p.has("PJRT_Client_LookupAddressableDevice"):
                    f2 = p.call("PJRT_Client_LookupAddressableDevice",
                                C.Client_LookupAddressableDevice_Args(
                                    client=c.handle, local_hardware_id=hw)).addressable_device
                    if f2 != d:
                        raise Failed(f"LookupAddressableDevice({hw}) returned another device")
        if len(set(ids)) != len(ids):
            raise Failed(f"device ids not unique: {ids}")

    @chk("capi", "client", requires=("memory_kinds",))
    def memories(ctx):
        """Each addressable device's default memory is among its addressable
        memories, which are among the client's; every memory has a kind and
        is addressable by the devices that list it; memory ids are unique;
        Memory_Kind_Id maps the kinds to ids one to one."""
        c, p = ctx.client, ctx.plugin
        a = p.call("PJRT_Client_AddressableMemories",
                   C.Client_AddressableMemories_Args(client=c.handle))
        client_mems = C.read_pointers(a.addressable_memories, a.num_addressable_memories)
        if not client_mems:
            raise Failed("PJRT_Client_AddressableMemories is empty")
        ids, kind_ids = set(), {}
        for m in client_mems:
            mid = p.call("PJRT_Memory_Id", C.Memory_Id_Args(memory=m)).id
            if mid in ids:
                raise Failed(f"memory id {mid} repeated")
            ids.add(mid)
            kind = c.memory_kind(m)
            if not kind:
                raise Failed(f"memory {mid}: empty kind")
            if p.has("PJRT_Memory_Kind_Id"):
                kind_ids.setdefault(kind, set()).add(p.call(
                    "PJRT_Memory_Kind_Id", C.Memory_Kind_Id_Args(memory=m)).kind_id)
        # One kind id per kind, and different kinds have different ids.
        if any(len(v) != 1 for v in kind_ids.values()) or \
                len({min(v) for v in kind_ids.values()}) != len(kind_ids):
            raise Failed(f"memory kind ids do not match the kinds one to one: {kind_ids}")
            for fn, cls in (("PJRT_Memory_DebugString", C.Memory_DebugString_Args),
                            ("PJRT_Memory_ToString", C.Memory_ToString_Args)):
                p.call(fn, cls(memory=m))
        for d in c.addressable_devices():
            b = p.call("PJRT_Device_AddressableMemories",
                       C.Device_AddressableMemories_Args(device=d))
            mems = C.read_pointers(b.memories, b.num_memories)
            default = c.default_memory(d)
            if default not in mems:
                raise Failed("a device's default memory is not among its memories")
            for m in mems:
                if m not in client_mems:
                    raise Failed("a device memory is not among the client's")
                r = p.call("PJRT_Memory_AddressableByDevices",
                           C.Memory_AddressableByDevices_Args(memory=m))
                if d not in C.read_pointers(r.devices, r.num_devices):
                    raise Failed("a memory of a device does not list that device")

    @chk("capi", "client")
    def second_client(ctx):
        """A second client can be created, used and destroyed while the first lives."""
        c2 = ctx.new_client()
        try:
            x = np.arange(4, dtype=np.float32)
            b = c2.from_host(x)
            if not np.array_equal(b.to_host(), x):
                raise Failed("round trip through a second client changed the data")
            b.destroy()
        finally:
            c2.close()

    # -- transfers -------------------------------------------------------------

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

    @chk("capi", "transfers", params=[(t,) for t in TYPES],
         ids=[TYPE_NAMES[t].lower() for t in TYPES], requires=_type_req)
    def roundtrip(ctx, t):
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

    @chk("capi", "transfers")
    def large(ctx):
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

    @chk("capi", "transfers", params=sorted(STRIDED), requires=("strided_transfers",))
    def strided(ctx, kind):
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

    @chk("capi", "transfers", params=sorted(SEMANTICS))
    def host_buffer_semantics(ctx, name):
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

    @chk("capi", "transfers", requires=("layouts",))
    def host_layout_to_host(ctx):
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

    @chk("capi", "transfers")
    def buffer_metadata(ctx):
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

    @chk("capi", "transfers", requires=("multi_device",))
    def copy_to_device(ctx):
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

    # -- events ----------------------------------------------------------------

    @chk("capi", "events")
    def ready_event(ctx):
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

    @chk("capi", "events")
    def execute_events(ctx):
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

    @chk("capi", "events", requires=("error_buffers",))
    def error_through_event(ctx):
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

    # -- compile ---------------------------------------------------------------

    BAD_PROGRAMS = {
        "not_mlir": ("mlir", b"this is not a module"),
        "type_error": ("mlir", b"""module { func.func public @main(%a: tensor<2xf32>) -> tensor<3xf32> {
          return %a : tensor<2xf32> } }"""),
        "unknown_op": ("mlir", b"""module { func.func public @main(%a: tensor<2xf32>) -> tensor<2xf32> {
          %0 = stablehlo.no_such_op %a : tensor<2xf32>
          return %0 : tensor<2xf32> } }"""),
        "unknown_format": ("no-such-format", ADD_ONE.encode()),
        "empty": ("mlir", b""),
    }

    @chk("capi", "compile", params=sorted(BAD_PROGRAMS))
    def compile_error(ctx, name):
        """A bad program is an error with a message (INVALID_ARGUMENT for an
        unknown format), never a crash or an executable."""
        fmt, code = BAD_PROGRAMS[name]
        # CompileInvalidProgramFormat (XLA's test): an unknown format is
        # INVALID_ARGUMENT.
        codes = (E.INVALID_ARGUMENT,) if name == "unknown_format" else (
            E.INVALID_ARGUMENT, E.UNIMPLEMENTED, E.FAILED_PRECONDITION, E.INTERNAL, E.UNKNOWN)
        _expect_error(lambda: ctx.client.compile(code, fmt), f"compiling {name}", codes)

    @chk("capi", "compile")
    def bad_compile_options(ctx):
        """CompileInvalidOption (XLA's test): compile options that are not a
        CompileOptionsProto are INVALID_ARGUMENT."""
        for opts in (b"\xff\xff\xff garbage", b"invalid compile options"):
            _expect_error(lambda: ctx.client.compile(ADD_ONE, options=opts),
                          f"compiling with options {opts!r}", (E.INVALID_ARGUMENT,))

    # -- executable metadata -----------------------------------------------------

    @chk("capi", "executable")
    def metadata(ctx):
        """NumOutputs, OutputElementTypes, OutputDimensions, Name, NumReplicas,
        NumPartitions and AddressableDevices describe the compiled program."""
        c, p = ctx.client, ctx.plugin
        exe = c.compile(TWO_OUTPUTS)
        try:
            if exe.num_outputs() != 3:
                raise Failed(f"NumOutputs {exe.num_outputs()}, expected 3")
            types = exe.output_types()
            want = [C.BufferType.S32, C.BufferType.F32, C.BufferType.PRED]
            if types != want:
                raise Failed(f"OutputElementTypes {[TYPE_NAMES.get(t) for t in types]}, "
                             f"expected {[TYPE_NAMES[t] for t in want]}", op="PJRT_Executable_OutputElementTypes")
            dims = exe.output_dims()
            if dims != [(), (3, 2), (2, 3)]:
                raise Failed(f"OutputDimensions {dims}, expected [(), (3, 2), (2, 3)]")
            n = p.call("PJRT_Executable_Name", C.Executable_Name_Args(executable=exe.executable))
            if not C.read_str(n.executable_name, n.executable_name_size):
                raise Failed("empty executable name")
            r = p.call("PJRT_Executable_NumReplicas", C.Executable_NumReplicas_Args(
                executable=exe.executable)).num_replicas
            q = p.call("PJRT_Executable_NumPartitions", C.Executable_NumPartitions_Args(
                executable=exe.executable)).num_partitions
            if (r, q) != (1, 1):
                raise Failed(f"replicas/partitions {(r, q)}, compiled for (1, 1)")
            a = p.call("PJRT_LoadedExecutable_AddressableDevices",
                       C.LoadedExecutable_AddressableDevices_Args(executable=exe.handle))
            if a.num_addressable_devices != 1:
                raise Failed(f"{a.num_addressable_devices} addressable devices, expected 1")
        finally:
            exe.destroy()

    @chk("capi", "executable")
    def output_memory_kinds(ctx):
        """OutputMemoryKinds: one non-empty kind per output."""
        c, p = ctx.client, ctx.plugin
        exe = c.compile(TWO_OUTPUTS)
        try:
            a = p.call("PJRT_Executable_OutputMemoryKinds",
                       C.Executable_OutputMemoryKinds_Args(executable=exe.executable))
            if a.num_outputs != 3:
                raise Failed(f"{a.num_outputs} memory kinds for 3 outputs")
            ptrs = C.read_pointers(a.memory_kinds, 3)
            sizes = (ctypes.c_size_t * 3).from_address(a.memory_kind_sizes)[:]
            kinds = [C.read_str(x, s) for x, s in zip(ptrs, sizes)]
            if not all(kinds):
                raise Failed(f"empty output memory kind: {kinds}")
        finally:
            exe.destroy()

    @chk("capi", "executable")
    def fingerprint_stable(ctx):
        """Compiling the same program twice gives the same fingerprint."""
        c = ctx.client
        e1, e2 = c.compile(ADD_ONE), c.compile(ADD_ONE)
        try:
            f1, f2 = e1.fingerprint(), e2.fingerprint()
            if f1 != f2:
                raise Failed(f"fingerprints differ: {f1[:16]!r} vs {f2[:16]!r}")
            e3 = c.compile(TWO_OUTPUTS)
            f3 = e3.fingerprint()
            e3.destroy()
            if f1 and f1 == f3:
                raise Failed("two different programs have the same fingerprint")
        finally:
            e1.destroy()
            e2.destroy()

    @chk("capi", "executable")
    def execute_results(ctx):
        """Executing a program with several outputs of several types gives the
        reference's values."""
        c = ctx.client
        exe = c.compile(TWO_OUTPUTS)
        x = np.array([[1, -2, 3], [-4, 5, 0]], np.float32)
        a, b = c.from_host(x), c.from_host(np.array(7, np.int32))
        try:
            outs = [c.buffer(h) for h in exe.execute([a, b])[0]]
            got = [o.to_host() for o in outs]
            for o in outs:
                o.destroy()
            want = [np.array(7, np.int32), x.T, x > 0]
            for k, (g, w) in enumerate(zip(got, want)):
                if g.dtype != w.dtype or not np.array_equal(g, w):
                    raise Failed(f"output {k}: {g!r}, expected {w!r}")
        finally:
            a.destroy()
            b.destroy()
            exe.destroy()

    # -- serialization -----------------------------------------------------------

    @chk("capi", "serialization", requires=("serialization",))
    def serialize_roundtrip(ctx):
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
            from .plugin import Executable
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

    # -- buffers: deletion and donation -------------------------------------------

    @chk("capi", "buffers")
    def deleted_buffer_use(ctx):
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

    @chk("capi", "buffers", requires=("donation",))
    def donation(ctx):
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

    # -- several devices --------------------------------------------------------

    @chk("capi", "multidevice", requires=("multi_device",))
    def execute_replicated(ctx):
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

    # -- bad arguments -------------------------------------------------------------

    @chk("capi", "errors")
    def bad_element_type(ctx):
        """BufferFromHostBuffer with PJRT_Buffer_Type_INVALID is an error."""
        x = np.zeros(4, np.float32)
        _expect_error(lambda: ctx.client.from_host(x, btype=C.BufferType.INVALID),
                      "BufferFromHostBuffer(type=INVALID)")

    @chk("capi", "errors")
    def lookup_missing_device(ctx):
        """LookupDevice of an id no device has is an error (INVALID_ARGUMENT or NOT_FOUND)."""
        p, c = ctx.plugin, ctx.client
        _expect_error(lambda: p.call("PJRT_Client_LookupDevice", C.Client_LookupDevice_Args(
            client=c.handle, id=987654)), "LookupDevice(987654)",
            (E.INVALID_ARGUMENT, E.NOT_FOUND))

    @chk("capi", "errors")
    def execute_wrong_arity(ctx):
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

    @chk("capi", "errors")
    def execute_wrong_type(ctx):
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

    @chk("capi", "errors")
    def to_host_too_small(ctx):
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


    # -- older callers: fields a newer header appended -----------------------------
    #
    # A caller built against an older pjrt_c_api.h passes a struct that ends
    # before the fields later minors appended. The bytes after its
    # struct_size belong to the caller (here: 0xA5 canaries, which as a
    # pointer fault): a plugin reading them as fields crashes or misbehaves.
    # It must treat them as absent, or refuse the call with INVALID_ARGUMENT
    # (XLA's plugins of 0.106 refuse every smaller struct).

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

    @chk("capi", "struct_size")
    def older_caller_client_create(ctx):
        """PJRT_Client_Create_Args from before kv_try_get_callback (0.6x): the
        plugin creates a working client without reading the absent fields, or
        refuses with INVALID_ARGUMENT."""
        p = ctx.plugin
        view, _ = _older(C.Client_Create_Args(), "kv_try_get_callback")
        refused = _older_call(p, "PJRT_Client_Create", view)
        if refused is not None:
            return refused
        from .plugin import Client
        c = Client.__new__(Client)
        c.plugin, c.handle, c._opts = p, view.client, None
        try:
            x = np.arange(3, dtype=np.float32)
            b = c.from_host(x)
            if not np.array_equal(b.to_host(), x):
                raise Failed("the client made from an older struct transfers wrong data")
            b.destroy()
        finally:
            c.close()

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

    @chk("capi", "struct_size")
    def older_caller_execute_options(ctx):
        """PJRT_ExecuteOptions from before `context` (0.5x): the fields after
        it (context, call_location, task ids, ...) are absent and must not be
        read; Execute gives the right result, or INVALID_ARGUMENT."""
        return _execute_older(ctx, options_first_absent="context")

    @chk("capi", "struct_size")
    def older_caller_execute_args(ctx):
        """PJRT_LoadedExecutable_Execute_Args from before execute_device: the
        plugin runs on the executable's own device, or INVALID_ARGUMENT."""
        return _execute_older(ctx, args_first_absent="execute_device")

    @chk("capi", "struct_size", requires=("serialization",))
    def older_caller_deserialize(ctx):
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
        from .plugin import Executable
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

    # -- behaviours XLA's own C API tests check --------------------------------
    #
    # xla/pjrt/c/pjrt_c_api_test.cc and xla/pjrt/plugin/test/ (gtest suites
    # linked into the plugin's build); each check names the test it follows.

    @chk("capi", "attributes")
    def attribute_names(ctx):
        """PluginAttributes (XLA's test of that name): the names are unique and
        include xla_version, stablehlo_current_version and
        stablehlo_minimum_version (JAX serializes programs for the version the
        plugin declares)."""
        a = ctx.plugin.call("PJRT_Plugin_Attributes", C.Plugin_Attributes_Args())
        names = []
        if a.num_attributes:
            for nv in (C.PJRT_NamedValue * a.num_attributes).from_address(a.attributes):
                names.append(C.read_str(nv.name, nv.name_size))
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise Failed(f"attribute names repeated: {dup}")
        missing = [n for n in ("xla_version", "stablehlo_current_version",
                               "stablehlo_minimum_version") if n not in names]
        if missing:
            raise Failed(f"attributes missing: {missing} (has {names})")

    @chk("capi", "client")
    def device_zero(ctx):
        """DeviceId, LookupDevice, DeviceLocalHardwareId and
        LookupAddressableDevice (XLA's tests): the first device has id 0 and
        local hardware id 0; LookupDevice(0) and LookupAddressableDevice(0)
        find it; every device id is >= 0."""
        c, p = ctx.client, ctx.plugin
        devs = c.devices()
        ids = []
        for d in devs:
            desc = p.call("PJRT_Device_GetDescription",
                          C.Device_GetDescription_Args(device=d)).device_description
            ids.append(p.call("PJRT_DeviceDescription_Id",
                              C.DeviceDescription_Id_Args(device_description=desc)).id)
        if any(i < 0 for i in ids):
            raise Failed(f"negative device ids: {ids}")
        if ids[0] != 0:
            raise Failed(f"the first device has id {ids[0]}, not 0")
        d0 = p.call("PJRT_Client_LookupDevice", C.Client_LookupDevice_Args(
            client=c.handle, id=0)).device
        if d0 != devs[0]:
            raise Failed("LookupDevice(0) is not the first device")
        hw = p.call("PJRT_Device_LocalHardwareId",
                    C.Device_LocalHardwareId_Args(device=devs[0])).local_hardware_id
        if hw != 0:
            raise Failed(f"the first device has local hardware id {hw}, not 0")
        a0 = p.call("PJRT_Client_LookupAddressableDevice",
                    C.Client_LookupAddressableDevice_Args(
                        client=c.handle, local_hardware_id=0)).addressable_device
        if a0 != devs[0]:
            raise Failed("LookupAddressableDevice(0) is not the first device")

    @chk("capi", "errors", params=["-1", "num_devices"])
    def lookup_device_bad_id(ctx, which):
        """LookupDeviceNegativeId / LookupDeviceOutOfRangeId (XLA's tests):
        LookupDevice(-1) and LookupDevice(number of devices) are
        INVALID_ARGUMENT."""
        c, p = ctx.client, ctx.plugin
        did = -1 if which == "-1" else len(c.devices())
        _expect_error(lambda: p.call("PJRT_Client_LookupDevice", C.Client_LookupDevice_Args(
            client=c.handle, id=did)), f"LookupDevice({did})", (E.INVALID_ARGUMENT,))

    @chk("capi", "client")
    def default_device_assignment(ctx):
        """GetDefaultDeviceAssignmentNominal (XLA's test): an assignment for
        min(2, devices) replicas x 1 partition is given, with ids of the
        client's devices, each once."""
        c, p = ctx.client, ctx.plugin
        n = min(2, len(c.devices()))
        out = (ctypes.c_int * n)()
        p.call("PJRT_Client_DefaultDeviceAssignment", C.Client_DefaultDeviceAssignment_Args(
            client=c.handle, num_replicas=n, num_partitions=1, default_assignment_size=n,
            default_assignment=ctypes.addressof(out)))
        ids = set()
        for d in c.devices():
            desc = p.call("PJRT_Device_GetDescription",
                          C.Device_GetDescription_Args(device=d)).device_description
            ids.add(p.call("PJRT_DeviceDescription_Id",
                           C.DeviceDescription_Id_Args(device_description=desc)).id)
        got = list(out)
        if len(set(got)) != n or not set(got) <= ids:
            raise Failed(f"default assignment {got}: not {n} distinct ids of {sorted(ids)}")

    @chk("capi", "errors")
    def default_device_assignment_too_small(ctx):
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

    @chk("capi", "events")
    def await_done_with_host_buffer(ctx):
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

    @chk("capi", "compile")
    def compile_hlo_module(ctx):
        """CompileXlaComputation (XLA's test): a serialized HloModuleProto
        (format "hlo") of XLA's TupleCreate program compiles; run, its three
        outputs are its inputs (the first plus one). A plugin that takes only
        StableHLO answers UNIMPLEMENTED or INVALID_ARGUMENT: unsupported."""
        xc = compat.jax_internal("lib", "xla_client")
        text = ("func.func public @main(%v1: tensor<f32>, %v2: tensor<3xf32>, "
                "%v3: tensor<2x3xf32>) -> (tensor<f32>, tensor<3xf32>, tensor<2x3xf32>) {\n"
                "  %one = stablehlo.constant dense<1.0> : tensor<f32>\n"
                "  %0 = stablehlo.add %v1, %one : tensor<f32>\n"
                "  return %0, %v2, %v3 : tensor<f32>, tensor<3xf32>, tensor<2x3xf32>\n}\n")
        proto = xc._xla.mlir.mlir_module_to_xla_computation(
            text, use_tuple_args=False, return_tuple=True).as_serialized_hlo_module_proto()
        c = ctx.client
        try:
            exe = c.compile(proto, fmt="hlo")
        except PluginError as e:
            if e.code in (E.UNIMPLEMENTED, E.INVALID_ARGUMENT):
                raise Unsupported(f"format 'hlo': {e}") from None
            raise
        ins = [np.array(2.5, np.float32), np.arange(3, dtype=np.float32),
               np.arange(6, dtype=np.float32).reshape(2, 3)]
        bufs = [c.from_host(x) for x in ins]
        try:
            outs = [c.buffer(h) for h in exe.execute(bufs)[0]]
            got = [o.to_host() for o in outs]
            for o in outs:
                o.destroy()
            want = [ins[0] + 1, ins[1], ins[2]]
            if len(got) != 3 or any(g.shape != w.shape or not np.array_equal(g, w)
                                    for g, w in zip(got, want)):
                raise Failed(f"the HLO program gave {got}, expected {want}")
        finally:
            for b in bufs:
                b.destroy()
            exe.destroy()

    @chk("capi", "compile")
    def compile_only_with_client_topology(ctx):
        """CompileWithSharedTopology (xla/pjrt/plugin/test): PJRT_Compile of a
        pass-through i32 program for the client's own topology
        (PJRT_Client_TopologyDescription) gives an executable with one
        output. Unsupported when the plugin has no compile-only path."""
        c, p = ctx.client, ctx.plugin
        for name in ("PJRT_Client_TopologyDescription", "PJRT_Compile"):
            if not p.has(name):
                raise Unsupported(f"{name} is not in the table")
        topo = p.call("PJRT_Client_TopologyDescription",
                      C.Client_TopologyDescription_Args(client=c.handle)).topology
        code = (b"module { func.func @main(%arg0: tensor<i32>) -> tensor<i32> {\n"
                b"  return %arg0 : tensor<i32> } }")
        code_buf = ctypes.create_string_buffer(code, len(code))
        fmt = ctypes.create_string_buffer(b"mlir", 4)
        prog = C.PJRT_Program(code=ctypes.addressof(code_buf), code_size=len(code),
                              format=ctypes.addressof(fmt), format_size=4)
        prog.struct_size = C.struct_size(C.PJRT_Program)
        opts = compile_options()
        opts_buf = ctypes.create_string_buffer(opts, len(opts))
        try:
            a = p.call("PJRT_Compile", C.Compile_Args(
                topology=topo, program=ctypes.addressof(prog),
                compile_options=ctypes.addressof(opts_buf), compile_options_size=len(opts)))
        except PluginError as e:
            # XLA's CPU plugin of 0.106 answers NOT_FOUND "No compiler factory
            # for platform": it has no compile-only compiler registered.
            if e.code in (E.UNIMPLEMENTED, E.NOT_FOUND):
                raise Unsupported(f"no compile-only path: {e}") from None
            raise
        try:
            n = p.call("PJRT_Executable_NumOutputs", C.Executable_NumOutputs_Args(
                executable=a.executable)).num_outputs
            if n != 1:
                raise Failed(f"the compiled pass-through program has {n} outputs")
        finally:
            p.call("PJRT_Executable_Destroy", C.Executable_Destroy_Args(
                executable=a.executable))

    @chk("capi", "buffers")
    def external_reference_count(ctx):
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

    @chk("capi", "buffers")
    def opaque_device_memory_pointer(ctx):
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
