"""Devices, device descriptions and memory spaces.

Every device of the stablehlo_ref platform is the numpy interpreter running in
this process; devices differ only by id, which lets multi-device programs be
laid out later (STABLEHLO_REF_NUM_DEVICES).  Each device has one memory
space of kind "device" (the default), where its buffers (numpy arrays) live,
plus the two host memory spaces JAX knows, "pinned_host" and
"unpinned_host" (all are host memory here; they are separate memory spaces
so that placement, transfers and the memory kinds of executables behave and
show in the PJRT trace as on XLA CPU/GPU).
"""

from __future__ import annotations

import array

from . import _shim
from .handles import CString, NamedValues, pointer_array, register

_stats_alloc = _shim.stats_alloc
_stats_free = _shim.stats_free
_stats_read = _shim.stats_read
_STATS = ("bytes_in_use", "peak_bytes_in_use", "num_allocs", "largest_alloc_size")

DEVICE_KIND = "StableHLO reference interpreter"
MEMORY_KIND = "device"
MEMORY_KIND_ID = 0
# The other memory kinds of every device, with their kind ids.
HOST_MEMORY_KINDS = (("pinned_host", 1), ("unpinned_host", 2))


class DeviceDescription:
    """PJRT_DeviceDescription: the static facts about a device."""

    __slots__ = ("handle", "id", "process_index", "kind", "attributes",
                 "kind_c", "to_string_c", "debug_string_c", "attrs_c")

    def __init__(self, device_id: int, process_index: int = 0,
                 attributes: dict | None = None):
        self.id = device_id
        self.process_index = process_index
        self.kind = DEVICE_KIND
        self.attributes = dict(attributes or {})
        self.kind_c = CString(self.kind)
        self.to_string_c = CString(f"StablehloRefDevice(id={device_id})")
        self.debug_string_c = CString(f"stablehlo_ref:{device_id}")
        self.attrs_c = NamedValues(self.attributes)
        register(self)

    def __str__(self):
        return self.to_string_c.text


class Memory:
    """PJRT_Memory: the memory space of one (or more) devices.

    The handle is a C struct from _shim (jaxlib reads a vtable through it).
    """

    __slots__ = ("handle", "id", "kind", "kind_id", "devices", "kind_c",
                 "to_string_c", "debug_string_c", "devices_c")

    def __init__(self, memory_id: int, kind: str = MEMORY_KIND,
                 kind_id: int = MEMORY_KIND_ID):
        self.id = memory_id
        self.kind = kind
        self.kind_id = kind_id
        self.devices: list[Device] = []
        self.kind_c = CString(kind)
        self.to_string_c = CString(f"StablehloRefMemory(id={memory_id}, kind={kind})")
        self.debug_string_c = CString(
            f"stablehlo_ref memory {memory_id} of kind {kind!r}")
        self.devices_c = None
        register(self, _shim.memory_new())

    def devices_array(self):
        if self.devices_c is None:
            self.devices_c = pointer_array(d.handle for d in self.devices)
        return self.devices_c

    def __str__(self):
        return self.to_string_c.text


class Device:
    """PJRT_Device: an interpreter device (of this process: addressable)."""

    __slots__ = ("handle", "client", "id", "local_hardware_id", "description",
                 "addressable", "memories", "default_memory", "memories_c", "stats")

    def __init__(self, client, device_id: int, local_hardware_id: int,
                 num_devices: int | None = None, process_index: int | None = None):
        self.client = client
        self.id = device_id
        self.local_hardware_id = local_hardware_id
        if process_index is None:
            process_index = client.process_index
        # A device of another process of a multi-process client
        # (distributed.py) is listed but not addressable.
        self.addressable = process_index == client.process_index
        self.description = DeviceDescription(
            device_id, process_index,
            {"interpreter": client.interpreter_name,
             "local_hardware_id": local_hardware_id})
        memory = Memory(device_id)
        memory.devices.append(self)
        self.memories = [memory]
        self.default_memory = memory
        # Host memory ids follow the device memories' ids 0..n-1.
        base = (num_devices if num_devices is not None else 1 << 20) + 2 * device_id
        for k, (kind, kind_id) in enumerate(HOST_MEMORY_KINDS):
            host = Memory(base + k, kind, kind_id)
            host.devices.append(self)
            self.memories.append(host)
        self.memories_c = pointer_array(m.handle for m in self.memories)
        # Allocation statistics for PJRT_Device_MemoryStats: bytes in use,
        # peak bytes in use, allocations, largest allocation; updated by
        # _shim.stats_alloc/stats_free (one C call each, atomic under the
        # GIL: no lock; the output buffers of Execute's fast path call them
        # directly).
        self.stats = array.array("q", [0, 0, 0, 0])
        register(self)

    def memory_of_kind(self, kind: str | None) -> Memory | None:
        """This device's memory of ``kind`` (None: the default memory)."""
        if kind is None:
            return self.default_memory
        for m in self.memories:
            if m.kind == kind:
                return m
        return None

    def allocated(self, nbytes: int) -> None:
        _stats_alloc(self.stats, nbytes)

    def freed(self, nbytes: int) -> None:
        _stats_free(self.stats, nbytes)

    def memory_stats(self) -> dict[str, int]:
        """PJRT_Device_MemoryStats' values, read together."""
        return dict(zip(_STATS, _stats_read(self.stats)))

    def clear_memory_stats(self) -> None:
        """PJRT_Device_ClearMemoryStats: the peak drops to what is in use."""
        _stats_read(self.stats, True)

    def __str__(self):
        return str(self.description)
