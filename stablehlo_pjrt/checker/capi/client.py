"""Area ``capi``, group ``client``: the client, its devices and memories.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

from ... import _capi as C
from ..core import Failed, check
from ._common import round_trip_and_close

if TYPE_CHECKING:
    from ..context import Context


@check("capi", "client")
def platform(ctx: Context) -> None:
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


@check("capi", "client")
def devices(ctx: Context) -> None:
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


@check("capi", "client", requires=("memory_kinds",))
def memories(ctx: Context) -> None:
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
        # Each memory describes itself (the calls must answer; the text is free).
        for fn, cls in (("PJRT_Memory_DebugString", C.Memory_DebugString_Args),
                        ("PJRT_Memory_ToString", C.Memory_ToString_Args)):
            p.call(fn, cls(memory=m))
    # One kind id per kind, and different kinds have different ids.
    if any(len(v) != 1 for v in kind_ids.values()) or \
            len({min(v) for v in kind_ids.values()}) != len(kind_ids):
        raise Failed(f"memory kind ids do not match the kinds one to one: {kind_ids}")
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


@check("capi", "client")
def second_client(ctx: Context) -> None:
    """A second client can be created, used and destroyed while the first lives."""
    round_trip_and_close(ctx.new_client(),
                         "round trip through a second client changed the data")


@check("capi", "client")
def device_zero(ctx: Context) -> None:
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


@check("capi", "client")
def default_device_assignment(ctx: Context) -> None:
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
