"""Fuzz kind ``capi``: the plugin's C API argument structs, driven through its
real entry points (``GetPjrtApi`` of the shared library, called with ctypes
as a C client would), each case in a worker subprocess (fuzzlib.py).

A case names one PJRT function and, for each of its input fields, either a
valid value or a mutation: NULL where a pointer is expected, a garbage or
stale handle or a live handle of another type, an enum value outside the
header's, a huge or negative size/count/dimension, a pointer-and-count pair
whose pointer is NULL; and a ``struct_size`` below, at or above the
header's (or a NULL args pointer). Cases are drawn by hypothesis
(structure-aware, seeded: :func:`generate`).

What the plugin cannot check is left out on purpose, as for any C library:
a non-NULL *data* pointer is always valid for the size the case gives with
it (a 1 MiB scratch area; sizes and counts are either within it or absurd,
>= 2**47 bytes, which no mapping can have), and event/error handles (C
objects the plugin returns by address) are either NULL or live.

Expected answers: success, or a PJRT_Error whose code is one the header
documents for bad arguments (INVALID_ARGUMENT, or FAILED_PRECONDITION,
NOT_FOUND, OUT_OF_RANGE, RESOURCE_EXHAUSTED, UNIMPLEMENTED). A case whose
mutation the plugin can detect (a NULL or foreign handle, a struct_size below
the header, a NULL array with a count, an absurd count or size, a negative
dimension, an unknown enum) must get an error. Findings: a signal or hang
(fuzzlib), INTERNAL/UNKNOWN (an unexpected exception inside the plugin), or
success where an error was due.
"""

from __future__ import annotations

import ctypes
import json
import os
from ctypes import c_void_p

HUGE = 2 ** 47          # no user-space mapping on x86-64/aarch64 is this large
SCRATCH = 1 << 20       # bytes behind every data pointer a case passes

# Handle types the plugin looks up in its handle table (garbage is checkable)
# and C objects it returns by address (only NULL or live ones are passed).
TABLE_TYPES = ("Client", "Device", "Memory", "Buffer", "DeviceDescription", "Executable",
               "LoadedExecutable", "Topology", "ExecuteContext", "AsyncTrackingEvent")
C_TYPES = ("Event", "Error")

E_TYPES = "buffer_type"
E_SEMANTICS = "semantics"
E_CODE = "error_code"
ENUMS = {E_TYPES: list(range(1, 32)), E_SEMANTICS: [0, 1, 2, 3], E_CODE: list(range(1, 17))}


def h(t, optional=False):
    return ("h", t, optional)


# Input fields of every function the fuzzer drives: class per field.
#   ("h", type, optional)  a handle           ("e", enum)   an enum
#   ("i",)                 an integer          ("cb",)       a callback (NULL/valid)
#   ("dims", count)        int64 dimensions + their count field
#   ("strides", count)     int64 byte strides + count (for the dims of the case)
#   ("bytes", size, what)  bytes + size field  ("out", size)  a destination + its size
#   ("program",) ("options",) ("layout",) ("named", count) ("args",)  nested structs
FUNCS = {
    "PJRT_Plugin_Initialize": {},
    "PJRT_Plugin_Attributes": {},
    "PJRT_Client_Create": {"create_options": ("named", "num_options")},
    "PJRT_Client_Destroy": {"client": h("Client", True)},
    "PJRT_Client_PlatformName": {"client": h("Client")},
    "PJRT_Client_ProcessIndex": {"client": h("Client")},
    "PJRT_Client_PlatformVersion": {"client": h("Client")},
    "PJRT_Client_TopologyDescription": {"client": h("Client")},
    "PJRT_Client_Devices": {"client": h("Client")},
    "PJRT_Client_AddressableDevices": {"client": h("Client")},
    "PJRT_Client_AddressableMemories": {"client": h("Client")},
    "PJRT_Client_LookupDevice": {"client": h("Client"), "id": ("i",)},
    "PJRT_Client_LookupAddressableDevice": {"client": h("Client"), "local_hardware_id": ("i",)},
    "PJRT_Client_UpdateGlobalProcessInfo": {"client": h("Client")},
    "PJRT_Client_DmaMap": {"client": h("Client"), "size": ("i",)},
    "PJRT_Client_DmaUnmap": {"client": h("Client")},
    "PJRT_Client_DefaultDeviceAssignment": {
        "client": h("Client"), "num_replicas": ("i",), "num_partitions": ("i",),
        "default_assignment": ("out", "default_assignment_size")},
    "PJRT_Client_BufferFromHostBuffer": {
        "client": h("Client"), "type": ("e", E_TYPES), "dims": ("dims", "num_dims"),
        "byte_strides": ("strides", "num_byte_strides"),
        "host_buffer_semantics": ("e", E_SEMANTICS), "device": h("Device", True),
        "memory": h("Memory", True), "data": ("data",)},
    "PJRT_Client_CreateUninitializedBuffer": {
        "client": h("Client"), "shape_dims": ("dims", "shape_num_dims"),
        "shape_element_type": ("e", E_TYPES), "device": h("Device", True),
        "memory": h("Memory", True)},
    "PJRT_Client_CreateErrorBuffer": {
        "client": h("Client"), "error_code": ("e", E_CODE),
        "error_message": ("bytes", "error_message_size", "text"),
        "shape_dims": ("dims", "shape_num_dims"), "shape_element_type": ("e", E_TYPES),
        "memory": h("Memory", True)},   # NULL: the default memory
    "PJRT_Client_CreateViewOfDeviceBuffer": {
        "client": h("Client"), "dims": ("dims", "num_dims"), "element_type": ("e", E_TYPES),
        "device": h("Device", True), "memory": h("Memory", True),
        "on_delete_callback": ("cb",), "device_buffer_ptr": ("data",)},
    "PJRT_Client_Compile": {
        "client": h("Client"), "program": ("program",),
        "compile_options": ("bytes", "compile_options_size", "options")},
    "PJRT_Compile": {
        "topology": h("Topology"), "program": ("program",),
        "compile_options": ("bytes", "compile_options_size", "options"),
        "client": h("Client", True)},
    "PJRT_Client_Load": {
        "client": h("Client"), "executable": h("Executable"),
        "compile_options": ("bytes", "compile_options_size", "options")},
    "PJRT_DeviceDescription_Id": {"device_description": h("DeviceDescription")},
    "PJRT_DeviceDescription_ProcessIndex": {"device_description": h("DeviceDescription")},
    "PJRT_DeviceDescription_Attributes": {"device_description": h("DeviceDescription")},
    "PJRT_DeviceDescription_Kind": {"device_description": h("DeviceDescription")},
    "PJRT_DeviceDescription_DebugString": {"device_description": h("DeviceDescription")},
    "PJRT_DeviceDescription_ToString": {"device_description": h("DeviceDescription")},
    "PJRT_Device_GetDescription": {"device": h("Device")},
    "PJRT_Device_IsAddressable": {"device": h("Device")},
    "PJRT_Device_LocalHardwareId": {"device": h("Device")},
    "PJRT_Device_AddressableMemories": {"device": h("Device")},
    "PJRT_Device_DefaultMemory": {"device": h("Device")},
    "PJRT_Device_MemoryStats": {"device": h("Device")},
    "PJRT_Device_ClearMemoryStats": {"device": h("Device")},
    "PJRT_Device_GetAttributes": {"device": h("Device")},
    "PJRT_Device_PoisonExecution": {
        "device": h("Device"), "launch_id": ("i",), "error_code": ("e", E_CODE),
        "error_message": ("bytes", "error_message_size", "text")},
    "PJRT_Device_CreateAsyncTrackingEvent": {
        "device": h("Device"), "description": ("bytes", "description_size", "text")},
    "PJRT_AsyncTrackingEvent_Destroy": {"obj": h("AsyncTrackingEvent", True)},
    "PJRT_Memory_Id": {"memory": h("Memory")},
    "PJRT_Memory_Kind": {"memory": h("Memory")},
    "PJRT_Memory_Kind_Id": {"memory": h("Memory")},
    "PJRT_Memory_DebugString": {"memory": h("Memory")},
    "PJRT_Memory_ToString": {"memory": h("Memory")},
    "PJRT_Memory_AddressableByDevices": {"memory": h("Memory")},
    "PJRT_ExecuteContext_Create": {},
    "PJRT_ExecuteContext_Destroy": {"context": h("ExecuteContext", True)},
    "PJRT_Executable_Destroy": {"executable": h("Executable", True)},
    "PJRT_Executable_Name": {"executable": h("Executable")},
    "PJRT_Executable_NumReplicas": {"executable": h("Executable")},
    "PJRT_Executable_NumPartitions": {"executable": h("Executable")},
    "PJRT_Executable_NumOutputs": {"executable": h("Executable")},
    "PJRT_Executable_SizeOfGeneratedCodeInBytes": {"executable": h("Executable")},
    "PJRT_Executable_GetCostAnalysis": {"executable": h("Executable")},
    "PJRT_Executable_GetCompiledMemoryStats": {"executable": h("Executable")},
    "PJRT_Executable_OutputElementTypes": {"executable": h("Executable")},
    "PJRT_Executable_OutputDimensions": {"executable": h("Executable")},
    "PJRT_Executable_OutputMemoryKinds": {"executable": h("Executable")},
    "PJRT_Executable_ParameterMemoryKinds": {"executable": h("Executable")},
    "PJRT_Executable_Fingerprint": {"executable": h("Executable")},
    "PJRT_Executable_OptimizedProgram": {"executable": h("Executable"),
                                         "program": ("program_out",)},
    "PJRT_Executable_Serialize": {"executable": h("Executable")},
    "PJRT_Executable_GetCompileOptions": {"executable": h("Executable")},
    "PJRT_Executable_DeserializeAndLoad": {
        "client": h("Client"),
        "serialized_executable": ("bytes", "serialized_executable_size", "executable"),
        "overridden_serialized_compile_options": (
            "bytes", "overridden_serialized_compile_options_size", "options_or_none")},
    "PJRT_LoadedExecutable_Destroy": {"executable": h("LoadedExecutable", True)},
    "PJRT_LoadedExecutable_GetExecutable": {"loaded_executable": h("LoadedExecutable")},
    "PJRT_LoadedExecutable_AddressableDevices": {"executable": h("LoadedExecutable")},
    "PJRT_LoadedExecutable_AddressableDeviceLogicalIds": {
        "executable": h("LoadedExecutable")},
    "PJRT_LoadedExecutable_Fingerprint": {"executable": h("LoadedExecutable")},
    "PJRT_LoadedExecutable_GetDeviceAssignment": {"executable": h("LoadedExecutable")},
    "PJRT_LoadedExecutable_Delete": {"executable": h("LoadedExecutable")},
    "PJRT_LoadedExecutable_IsDeleted": {"executable": h("LoadedExecutable")},
    "PJRT_LoadedExecutable_Execute": {
        "executable": h("LoadedExecutable"), "options": ("options",),
        "argument_lists": ("args",), "execute_device": h("Device", True)},
    "PJRT_Buffer_Destroy": {"buffer": h("Buffer", True)},
    "PJRT_Buffer_ElementType": {"buffer": h("Buffer")},
    "PJRT_Buffer_Dimensions": {"buffer": h("Buffer")},
    "PJRT_Buffer_UnpaddedDimensions": {"buffer": h("Buffer")},
    "PJRT_Buffer_DynamicDimensionIndices": {"buffer": h("Buffer")},
    "PJRT_Buffer_GetMemoryLayout": {"buffer": h("Buffer")},
    "PJRT_Buffer_OnDeviceSizeInBytes": {"buffer": h("Buffer")},
    "PJRT_Buffer_Device": {"buffer": h("Buffer")},
    "PJRT_Buffer_Memory": {"buffer": h("Buffer")},
    "PJRT_Buffer_Delete": {"buffer": h("Buffer")},
    "PJRT_Buffer_IsDeleted": {"buffer": h("Buffer")},
    "PJRT_Buffer_IsOnCpu": {"buffer": h("Buffer")},
    "PJRT_Buffer_ReadyEvent": {"buffer": h("Buffer")},
    "PJRT_Buffer_UnsafePointer": {"buffer": h("Buffer")},
    "PJRT_Buffer_IncreaseExternalReferenceCount": {"buffer": h("Buffer")},
    "PJRT_Buffer_DecreaseExternalReferenceCount": {"buffer": h("Buffer")},
    "PJRT_Buffer_OpaqueDeviceMemoryDataPointer": {"buffer": h("Buffer")},
    "PJRT_Buffer_CopyToDevice": {"buffer": h("Buffer"), "dst_device": h("Device")},
    "PJRT_Buffer_CopyToMemory": {"buffer": h("Buffer"), "dst_memory": h("Memory")},
    "PJRT_Buffer_ToHostBuffer": {"src": h("Buffer"), "host_layout": ("layout",),
                                 "dst": ("out", "dst_size")},
    "PJRT_Buffer_CopyRawToHost": {"buffer": h("Buffer"), "dst": ("data",),
                                  "offset": ("i",), "transfer_size": ("i",)},
    "PJRT_Buffer_Bitcast": {"buffer": h("Buffer"), "element_type": ("e", E_TYPES),
                            "dims": ("dims", "num_dims")},
    "PJRT_TopologyDescription_Create": {
        "topology_name": ("bytes", "topology_name_size", "text"),
        "create_options": ("named", "num_options")},
    "PJRT_TopologyDescription_Destroy": {"topology": h("Topology", True)},
    "PJRT_TopologyDescription_PlatformName": {"topology": h("Topology")},
    "PJRT_TopologyDescription_PlatformVersion": {"topology": h("Topology")},
    "PJRT_TopologyDescription_GetDeviceDescriptions": {"topology": h("Topology")},
    "PJRT_TopologyDescription_Attributes": {"topology": h("Topology")},
    "PJRT_TopologyDescription_Serialize": {"topology": h("Topology")},
    "PJRT_TopologyDescription_Fingerprint": {"topology": h("Topology")},
    "PJRT_TopologyDescription_Deserialize": {
        "serialized_topology": ("bytes", "serialized_topology_size", "topology")},
    # Implemented in C (_shim.c): errors and events.
    "PJRT_Error_Destroy": {"error": h("Error", True)},
    "PJRT_Error_Message": {"error": h("Error")},
    "PJRT_Error_GetCode": {"error": h("Error")},
    "PJRT_Error_ForEachPayload": {"error": h("Error")},
    "PJRT_Event_Destroy": {"event": h("Event", True)},
    "PJRT_Event_IsReady": {"event": h("Event")},
    "PJRT_Event_Error": {"event": h("Event")},
    "PJRT_Event_Await": {"event": h("Event")},
    "PJRT_Event_OnReady": {"event": h("Event"), "callback": ("cb", True)},
    "PJRT_Event_Create": {},
    "PJRT_Event_Set": {"event": h("Event"), "error_code": ("e", E_CODE),
                       "error_message": ("bytes", "error_message_size", "text")},
    # Slots the plugin leaves unimplemented: UNIMPLEMENTED, whatever the args.
    "PJRT_CopyToDeviceStream_Destroy": {},
    "PJRT_AsyncHostToDeviceTransferManager_Destroy": {},
    "PJRT_Client_CreateBuffersForAsyncHostToDevice": {},
    "PJRT_Buffer_DonateWithControlDependency": {},
}
# Functions returning void (no error to check).
VOID = {"PJRT_Error_Destroy", "PJRT_Error_Message"}
# The args structs of the C-implemented functions (the mirror has no class
# for them: the project's plugin never calls them from Python).
_C_ARGS = {
    "PJRT_Error_Destroy": [("error", c_void_p)],
    "PJRT_Error_Message": [("error", c_void_p), ("message", c_void_p),
                           ("message_size", ctypes.c_size_t)],
    "PJRT_Error_GetCode": [("error", c_void_p), ("code", ctypes.c_int)],
    "PJRT_Error_ForEachPayload": [("error", c_void_p), ("visitor", c_void_p),
                                  ("user_arg", c_void_p)],
    "PJRT_Event_Destroy": [("event", c_void_p)],
    "PJRT_Event_IsReady": [("event", c_void_p), ("is_ready", ctypes.c_bool)],
    "PJRT_Event_Error": [("event", c_void_p)],
    "PJRT_Event_Await": [("event", c_void_p)],
    "PJRT_Event_OnReady": [("event", c_void_p), ("callback", c_void_p),
                           ("user_arg", c_void_p)],
    "PJRT_Event_Create": [("event", c_void_p)],
    "PJRT_Event_Set": [("event", c_void_p), ("error_code", ctypes.c_int),
                       ("error_message", c_void_p), ("error_message_size", ctypes.c_size_t)],
    "PJRT_AsyncTrackingEvent_Destroy": [("obj", c_void_p)],
}
# Unimplemented slots: any struct will do.
_ANY_ARGS = [("obj", c_void_p)]

# Mutations the plugin can always detect, by field class: the case must get
# an error. (A NULL destination with a size is ToHostBuffer's size query; a
# destination larger than needed is fine; a stale handle may be reused.)
DETECTABLE = {
    "h": {"null", "garbage", "small", "other"},
    "e": {"bad"},
    "dims": {"negative", "absurd", "null_count", "absurd_count", "too_many_dims"},
    "bytes": {"null_size", "absurd_size"},
    "out": {"null_size"},
    "named": {"null_count", "absurd_count"},
    "data": {"null"},
}
NOT_DETECTABLE = {("PJRT_Buffer_ToHostBuffer", "dst", "null_size"),
                  ("PJRT_Buffer_CopyRawToHost", "dst", "null"),
                  ("PJRT_Client_DmaMap", "data", "null")}
OK_CODES = {3, 5, 8, 9, 11, 12}   # INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED,
#                                   FAILED_PRECONDITION, OUT_OF_RANGE, UNIMPLEMENTED


# --------------------------------------------------------------------------
# Generation (parent side): hypothesis strategies over FUNCS


def strategies():
    """The hypothesis strategy of one case (a JSON-able dict)."""
    from hypothesis import strategies as st

    interesting = [0, 1, -1, 2, 3, 7, 64, 2 ** 31 - 1, -2 ** 31, 2 ** 32, 2 ** 63 - 1,
                   -2 ** 63, HUGE]
    ints = st.one_of(st.sampled_from(interesting), st.integers(-2 ** 63, 2 ** 63 - 1))

    def handle(t, optional):
        valid = st.just(["valid"])
        if t in C_TYPES:
            return st.one_of(valid, valid, valid, st.just(["null"]))
        return st.one_of(
            valid, valid, valid, valid,
            st.just(["null"]),
            st.tuples(st.just("garbage"), st.integers(4097, 2 ** 64 - 1)).map(list),
            st.tuples(st.just("small"), st.integers(1, 4096)).map(list),
            st.tuples(st.just("other"), st.sampled_from(
                [x for x in TABLE_TYPES if x != t and x != "AsyncTrackingEvent"])).map(list),
            st.just(["stale"]))

    def enum(name):
        valid = ENUMS[name]
        return st.one_of(
            st.tuples(st.just("valid"), st.sampled_from(valid)).map(list),
            st.tuples(st.just("valid"), st.sampled_from(valid)).map(list),
            st.tuples(st.just("bad"), st.integers(-2 ** 31, 2 ** 31 - 1).filter(
                lambda v: v not in valid and v != 0)).map(list))

    small_dims = st.lists(st.integers(0, 16), max_size=4)
    dims = st.one_of(
        small_dims.map(lambda d: ["valid", d]), small_dims.map(lambda d: ["valid", d]),
        small_dims.map(lambda d: ["valid", d]),
        st.lists(st.integers(-2 ** 63, -1), min_size=1, max_size=3).map(
            lambda d: ["negative", d + [2]]),
        st.lists(st.integers(2 ** 16, 2 ** 40), min_size=3, max_size=4).map(
            lambda d: ["absurd", d]),
        st.integers(1, 8).map(lambda k: ["null_count", k]),
        st.sampled_from([HUGE, 2 ** 63 - 1, 2 ** 64 - 1]).map(lambda k: ["absurd_count", k]),
        st.integers(65, 120).map(lambda k: ["too_many_dims", k]))
    strides = st.one_of(
        st.just(["none"]), st.just(["none"]), st.just(["dense"]),
        st.lists(st.integers(-64, 64), max_size=4).map(lambda s: ["shuffled", s]),
        st.just(["strides_count"]),
        st.sampled_from([HUGE, 2 ** 63 - 1]).map(lambda s: ["absurd", s]),
        st.integers(1, 4).map(lambda k: ["null_count", k]))
    byte_kinds = st.one_of(
        st.just(["valid"]), st.just(["valid"]), st.just(["valid"]),
        st.binary(max_size=64).map(lambda b: ["garbage", b.hex()]),
        st.just(["empty"]),
        st.integers(1, 64).map(lambda k: ["null_size", k]),
        st.sampled_from([HUGE, 2 ** 63 - 1, 2 ** 64 - 1]).map(lambda k: ["absurd_size", k]))
    out = st.one_of(
        st.just(["valid"]), st.just(["valid"]), st.just(["query"]),
        st.integers(0, 64).map(lambda k: ["short", k]),
        st.integers(1, 64).map(lambda k: ["null_size", k]),
        st.sampled_from([HUGE, 2 ** 63 - 1]).map(lambda k: ["absurd_size", k]))
    named = st.one_of(
        st.just(["valid", []]),
        st.lists(st.tuples(st.sampled_from(["num_devices", "x", "", "n\u00e9"]),
                           st.sampled_from([0, 1, 2, 3, 4, 99]), ints),
                 max_size=3).map(lambda v: ["valid", [list(t) for t in v]]),
        st.integers(1, 4).map(lambda k: ["null_count", k]),
        st.sampled_from([HUGE, 2 ** 63 - 1]).map(lambda k: ["absurd_count", k]))
    program = st.one_of(
        st.just(["valid"]), st.just(["valid"]), st.just(["null"]),
        st.fixed_dictionaries({"code": byte_kinds, "format": st.sampled_from(
            ["mlir", "hlo", "", "tosa", "valid"]),
            "size": st.sampled_from(["full", 0, 8, 16, 24, "full+8"])}).map(
                lambda d: ["mut", d]))
    program_out = st.one_of(
        st.just(["query"]), st.just(["valid"]), st.just(["null"]),
        st.integers(0, 64).map(lambda k: ["short", k]),
        st.sampled_from([HUGE, 2 ** 63 - 1]).map(lambda k: ["absurd_size", k]))
    options = st.one_of(
        st.just(["valid"]), st.just(["valid"]), st.just(["null"]),
        st.fixed_dictionaries({
            "size": st.sampled_from(["full", 0, 8, 16, 40, "full+8"]),
            "non_donatable": st.one_of(
                st.just(["none"]), st.lists(ints, max_size=3).map(lambda v: ["valid", v]),
                st.integers(1, 4).map(lambda k: ["null_count", k]),
                st.just(["absurd_count", HUGE])),
            "send_recv": st.sampled_from([0, 0, 1, HUGE])}).map(lambda d: ["mut", d]))
    args = st.fixed_dictionaries({
        "num_devices": st.one_of(st.just(1), st.just(1), st.sampled_from([0, 2, 64, HUGE])),
        "num_args": st.one_of(st.just(1), st.just(1), st.sampled_from([0, 2, 64, HUGE])),
        "lists": st.sampled_from(["valid", "valid", "null", "null_inner"]),
        "outputs": st.sampled_from(["valid", "valid", "null", "null_inner"]),
        "arg": handle("Buffer", False),
        "events": st.sampled_from(["valid", "null"])})
    layout = st.sampled_from([["null"], ["null"], ["row_major"], ["column_major"]])
    cb = st.sampled_from([["valid"], ["null"]])

    def field(cls):
        kind = cls[0]
        if kind == "h":
            return handle(cls[1], cls[2])
        if kind == "e":
            return enum(cls[1])
        if kind == "i":
            return ints.map(lambda v: ["int", v])
        if kind == "dims":
            return dims
        if kind == "strides":
            return strides
        if kind == "bytes":
            return byte_kinds
        if kind == "out":
            return out
        if kind == "named":
            return named
        if kind == "program":
            return program
        if kind == "program_out":
            return program_out
        if kind == "options":
            return options
        if kind == "args":
            return args
        if kind == "layout":
            return layout
        if kind == "cb":
            return cb
        if kind == "data":
            return st.sampled_from([["valid"], ["valid"], ["valid"], ["null"]])
        raise ValueError(cls)

    def valid(cls):
        """Only valid values of the field (the base a case mutates)."""
        kind = cls[0]
        if kind == "h":
            return st.just(["valid"])
        if kind == "e":
            return st.sampled_from(ENUMS[cls[1]]).map(lambda v: ["valid", v])
        if kind == "dims":
            return small_dims.map(lambda d: ["valid", d])
        if kind == "strides":
            return st.sampled_from([["none"], ["dense"]])
        if kind in ("bytes", "program", "options", "cb", "data"):
            return st.just(["valid"])
        if kind in ("out", "program_out"):
            return st.sampled_from([["valid"], ["query"]])
        if kind == "named":
            return st.just(["valid", []])
        if kind == "args":
            return st.fixed_dictionaries({
                "num_devices": st.just(1), "num_args": st.just(1), "lists": st.just("valid"),
                "outputs": st.just("valid"), "arg": st.just(["valid"]),
                "events": st.sampled_from(["valid", "null"])})
        return field(cls)   # ints, layouts: every value is a valid call

    size = st.one_of(*([st.just("full")] * 12), st.sampled_from(
        ["null_args", 0, 8, 15, 16, 24, "full-8", "full+8", "full+4096", 2 ** 63]))

    def case(name):
        """A valid call of ``name`` with at most two fields mutated (and
        perhaps its struct_size): one fault at a time reaches the checks
        behind the first one."""
        fields = FUNCS[name]
        which = (st.sets(st.sampled_from(sorted(fields)), max_size=2) if fields
                 else st.just(frozenset()))
        return st.tuples(
            st.fixed_dictionaries({k: valid(v) for k, v in fields.items()}),
            st.fixed_dictionaries({k: field(v) for k, v in fields.items()}),
            which, size).map(lambda t: {
                "fn": name, "size": t[3],
                "f": {k: (t[1][k] if k in t[2] else t[0][k]) for k in fields}})
    return st.sampled_from(sorted(FUNCS)).flatmap(case)


def generate(n: int, seed: int) -> list[bytes]:
    """``n`` distinct cases drawn by hypothesis from ``seed`` (the same seed
    gives the same cases)."""
    from fuzzlib import draw
    return draw(strategies(), n, seed,
                encode=lambda c: json.dumps(c, sort_keys=True).encode())


# --------------------------------------------------------------------------
# The worker: builds each case in memory and calls the plugin


class World:
    """The plugin loaded as a foreign library, one client, and fixtures."""

    def __init__(self):
        import numpy as np

        from stablehlo_pjrt import _capi as C
        from stablehlo_pjrt import _shim
        from stablehlo_pjrt.checker.capi import _common as capi_checks
        from stablehlo_pjrt.checker.plugin import Client, Plugin, compile_options
        self.C, self.np = C, np
        self.plugin = Plugin(_shim.__file__)
        self.plugin.initialize()
        self.client = Client(self.plugin)
        self.device = self.client.addressable_devices()[0]
        self.memory = self.client.default_memory(self.device)
        self.description = self.plugin.call("PJRT_Device_GetDescription", C.Device_GetDescription_Args(
            device=self.device)).device_description
        self.topology = self.plugin.call("PJRT_Client_TopologyDescription",
                                         C.Client_TopologyDescription_Args(
                                             client=self.client.handle)).topology
        self.program = capi_checks.ADD_ONE.encode()
        self.options = compile_options()
        self.exe = self.client.compile(self.program)
        s = self.plugin.call("PJRT_Executable_Serialize", C.Executable_Serialize_Args(
            executable=self.exe.executable))
        self.serialized = C.read_bytes(s.serialized_bytes, s.serialized_bytes_size)
        t = self.plugin.call("PJRT_TopologyDescription_Serialize",
                             C.TopologyDescription_Serialize_Args(topology=self.topology))
        self.serialized_topology = C.read_bytes(t.serialized_bytes, t.serialized_bytes_size)
        self.scratch = (ctypes.c_ubyte * (3 * SCRATCH))()
        # Data pointers point into the middle: strides may go back or forward.
        self.data = ctypes.addressof(self.scratch) + SCRATCH
        self.callbacks = []
        stale = self.client.from_host(np.zeros(1, np.float32))
        self.stale = stale.handle
        stale.destroy()
        self.Client = Client

    # -- objects -----------------------------------------------------------

    def fresh(self, t):
        """A live object of type ``t`` for this case (destroyed after it)."""
        C, p, np = self.C, self.plugin, self.np
        if t == "Client":
            return self.client.handle
        if t == "Device":
            return self.device
        if t == "Memory":
            return self.memory
        if t == "DeviceDescription":
            return self.description
        if t == "Topology":
            return self.topology
        if t == "Buffer":
            b = self.client.from_host(np.arange(4, dtype=np.float32))
            self.cleanup.append(("PJRT_Buffer_Destroy", C.Buffer_Destroy_Args, "buffer",
                                 b.handle))
            return b.handle
        if t == "LoadedExecutable":
            e = self.client.compile(self.program)
            self.cleanup.append(("PJRT_LoadedExecutable_Destroy",
                                 C.LoadedExecutable_Destroy_Args, "executable", e.handle))
            self.cleanup.append(("PJRT_Executable_Destroy", C.Executable_Destroy_Args,
                                 "executable", e.executable))
            return e.handle
        if t == "Executable":
            e = p.call("PJRT_LoadedExecutable_GetExecutable",
                       C.LoadedExecutable_GetExecutable_Args(
                           loaded_executable=self.exe.handle)).executable
            self.cleanup.append(("PJRT_Executable_Destroy", C.Executable_Destroy_Args,
                                 "executable", e))
            return e
        if t == "ExecuteContext":
            c = p.call("PJRT_ExecuteContext_Create", C.ExecuteContext_Create_Args()).context
            self.cleanup.append(("PJRT_ExecuteContext_Destroy", C.ExecuteContext_Destroy_Args,
                                 "context", c))
            return c
        if t == "AsyncTrackingEvent":
            d = b"fuzz"
            buf = ctypes.create_string_buffer(d)
            self.keep.append(buf)
            ev = p.call("PJRT_Device_CreateAsyncTrackingEvent",
                        C.Device_CreateAsyncTrackingEvent_Args(
                            device=self.device, description=ctypes.addressof(buf),
                            description_size=4)).event
            self.cleanup.append(("PJRT_AsyncTrackingEvent_Destroy", C.SimpleArgs, "obj", ev))
            return ev
        if t == "Event":
            b = self.fresh("Buffer")
            ev = p.call("PJRT_Buffer_ReadyEvent", C.Buffer_ReadyEvent_Args(buffer=b)).event
            self.events.append(ev)
            return ev
        if t == "Error":
            err = p.raw_call("PJRT_Client_LookupDevice", C.Client_LookupDevice_Args(
                client=self.client.handle, id=-5))
            self.errors.append(err)
            return err
        raise ValueError(t)

    def handle(self, fn, t, mut):
        kind = mut[0]
        if kind == "valid":
            if fn == "PJRT_Event_Set":
                ev = self._call_c("PJRT_Event_Create")
                self.events.append(ev)
                return ev
            if fn in ("PJRT_Event_Destroy", "PJRT_Error_Destroy"):
                # Destroyed by the call (or leaked if it was refused): never
                # by the cleanup, which could free it twice.
                h = self.fresh(t)
                (self.events if t == "Event" else self.errors).remove(h)
                return h
            if fn == "PJRT_Client_Destroy":
                return self.Client(self.plugin).handle
            return self.fresh(t)
        if kind == "null":
            return 0
        if kind in ("garbage", "small"):
            return mut[1]
        if kind == "other":
            return self.fresh(mut[1])
        if kind == "stale":
            return self.stale
        raise ValueError(mut)

    def _call_c(self, name):
        cls = self.args_class(name)
        a = cls()
        self.plugin.call(name, a)
        return a.event

    # -- args structs ------------------------------------------------------

    def args_class(self, fn):
        C = self.C
        if fn == "PJRT_AsyncTrackingEvent_Destroy":
            return C.SimpleArgs
        cls = C.args_classes().get(fn)
        if cls is not None:
            return cls
        fields = _C_ARGS.get(fn, _ANY_ARGS)
        return C._args(fn + "_Args", fields)

    def bytes_for(self, what):
        if what == "text":
            return b"fuzz message"
        if what == "options":
            return self.options
        if what == "options_or_none":
            return b""
        if what == "executable":
            return self.serialized
        if what == "topology":
            return self.serialized_topology
        raise ValueError(what)

    def put(self, data: bytes) -> int:
        """Copies ``data`` into a fresh C buffer (kept for this case)."""
        buf = ctypes.create_string_buffer(bytes(data), max(1, len(data)))
        self.keep.append(buf)
        return ctypes.addressof(buf)

    def int64s(self, values) -> int:
        arr = (ctypes.c_int64 * max(1, len(values)))(*[_wrap(v, ctypes.c_int64)
                                                       for v in values])
        self.keep.append(arr)
        return ctypes.addressof(arr)

    def run_case(self, case: dict) -> str:
        """Builds and runs one case: 'ok', 'err', or a finding ('unclean ...')."""
        self.keep, self.cleanup, self.events, self.errors = [], [], [], []
        try:
            return self._run(case)
        finally:
            self._clean()

    def _run(self, case):
        C, p = self.C, self.plugin
        fn = case["fn"]
        cls = self.args_class(fn)
        full = C.struct_size(cls) if cls._fields_ else 16
        raw = (ctypes.c_ubyte * (ctypes.sizeof(cls) + 4096 + 64))()
        a = cls.from_buffer(raw)
        spec = FUNCS[fn]
        detectable = []
        element_itemsize = 4
        dims_value = None
        for name, cls_ in spec.items():
            mut = case["f"][name]
            kind = cls_[0]
            if isinstance(mut, list) and mut[0] in DETECTABLE.get(kind, ()) and \
                    (fn, name, mut[0]) not in \
                    NOT_DETECTABLE and not (kind == "h" and cls_[2] and mut[0] == "null"):
                detectable.append(f"{name}:{mut[0]}")
            if kind == "h":
                setattr(a, name, self.handle(fn, cls_[1], mut) or None)
            elif kind == "e":
                setattr(a, name, mut[1])
                if name in ("type", "element_type", "shape_element_type") and mut[0] == "valid":
                    element_itemsize = _itemsize(mut[1])
            elif kind == "i":
                setattr(a, name, _wrap(mut[1], getattr(cls, name)))
            elif kind == "dims":
                count = cls_[1]
                if mut[0] in ("valid", "negative", "absurd"):
                    dims_value = list(mut[1])
                    setattr(a, name, self.int64s(mut[1]))
                    setattr(a, count, len(mut[1]))
                elif mut[0] == "null_count":
                    setattr(a, count, mut[1])
                elif mut[0] == "absurd_count":
                    setattr(a, name, self.int64s([1] * 8))
                    setattr(a, count, mut[1])
                elif mut[0] == "too_many_dims":
                    setattr(a, name, self.int64s([1] * mut[1]))
                    setattr(a, count, mut[1])
            elif kind == "strides":
                pass  # after the dims (below)
            elif kind == "bytes":
                size_field, what = cls_[1], cls_[2]
                if mut[0] == "valid":
                    data = self.bytes_for(what)
                    if data:
                        setattr(a, name, self.put(data))
                        setattr(a, size_field, len(data))
                elif mut[0] == "garbage":
                    data = bytes.fromhex(mut[1])
                    setattr(a, name, self.put(data))
                    setattr(a, size_field, len(data))
                elif mut[0] == "empty":
                    setattr(a, name, self.put(b""))
                elif mut[0] == "null_size":
                    setattr(a, size_field, mut[1])
                elif mut[0] == "absurd_size":
                    setattr(a, name, self.put(b"x" * 16))
                    setattr(a, size_field, mut[1])
            elif kind == "out":
                size_field = cls_[1]
                if mut[0] == "valid":
                    setattr(a, name, self.data)
                    setattr(a, size_field, SCRATCH)
                elif mut[0] == "short":
                    setattr(a, name, self.data)
                    setattr(a, size_field, mut[1])
                elif mut[0] == "null_size":
                    setattr(a, size_field, mut[1])
                elif mut[0] == "absurd_size":
                    setattr(a, name, self.data)
                    setattr(a, size_field, mut[1])
            elif kind == "data":
                if mut[0] == "valid":
                    setattr(a, name, self.data)
            elif kind == "cb":
                if mut[0] == "valid":
                    setattr(a, name, self.callback(fn))
            elif kind == "named":
                self.named(a, name, cls_[1], mut)
            elif kind == "program":
                setattr(a, name, self.program_struct(mut, detectable))
            elif kind == "program_out":
                setattr(a, name, self.program_out(mut))
            elif kind == "options":
                setattr(a, name, self.execute_options(mut, detectable))
            elif kind == "args":
                detectable += self.execute_lists(a, mut)
            elif kind == "layout":
                setattr(a, name, self.layout(mut))
        if dims_value is None or any(d <= 0 for d in dims_value) or any(
                d < 0 for d in dims_value):
            # No data is read for an empty (or refused) shape: NULL is fine.
            detectable = [d for d in detectable if d not in ("data:null",
                                                             "device_buffer_ptr:null")]
        for name, cls_ in spec.items():
            if cls_[0] == "strides":
                detectable += self.strides(a, name, cls_[1], case["f"][name], dims_value,
                                           element_itemsize)
        size = case["size"]
        if size == "null_args":
            ptr = 0
            detectable.append("args:NULL")
        else:
            n = {"full": full, "full-8": full - 8, "full+8": full + 8,
                 "full+4096": full + 4096}.get(size, size)
            if not isinstance(n, int) or n < 0:
                n = full
            a.struct_size = n
            ptr = ctypes.addressof(raw)
            if n < 16 and cls._fields_:
                detectable.append(f"struct_size:{n}")
            elif n < full:
                # An older caller's struct: the fields past n are absent (read
                # as zero), whatever the case put there.
                past = {f for f in spec if getattr(cls, f).offset + getattr(cls, f).size > n}
                past |= {f for f, c_ in spec.items() if len(c_) > 1 and
                         isinstance(c_[1], str) and hasattr(cls, c_[1]) and
                         getattr(cls, c_[1]).offset + getattr(cls, c_[1]).size > n}
                detectable = [d for d in detectable if d.split(":")[0] not in past]
                detectable += [f"{f}:absent" for f in sorted(past)
                               if spec.get(f, ("",))[0] == "h" and not spec[f][2]]
        err = self.call(fn, ptr)
        if fn in VOID:
            return "ok"
        if not err:
            self.collect_outputs(fn, a)
            if detectable:
                return "unclean accepted " + ",".join(detectable)
            return "ok"
        code, msg = p.error_info(err)
        p.error_destroy(err)
        if code not in OK_CODES:
            return f"unclean code {code}: {' '.join(msg.split())[:240]}"
        return "err"

    def call(self, fn, ptr):
        p = self.plugin
        if not p.has(fn):
            return None
        from stablehlo_pjrt.checker.plugin import FN
        f = p._callables.get(fn)
        if f is None:
            f = p._callables[fn] = FN(p._fns[fn])
        return f(ptr)

    # -- nested structs ----------------------------------------------------

    def callback(self, fn):
        p = self.plugin
        if fn == "PJRT_Event_OnReady":
            from stablehlo_pjrt.checker.plugin import ON_READY

            def on_ready(err, _user):
                if err:
                    p.error_destroy(err)
            cb = ON_READY(on_ready)
        else:
            cb = ctypes.CFUNCTYPE(None, c_void_p, c_void_p)(lambda *_: None)
        self.callbacks.append(cb)   # may be called after the case: kept for good
        return ctypes.cast(cb, c_void_p).value

    def named(self, a, name, count, mut):
        C = self.C
        if mut[0] == "valid":
            items = mut[1]
            arr = (C.PJRT_NamedValue * max(1, len(items)))()
            self.keep.append(arr)
            for nv, (key, t, v) in zip(arr, items):
                kb = key.encode()
                nv.struct_size = C.struct_size(C.PJRT_NamedValue)
                nv.name = self.put(kb)
                nv.name_size = len(kb)
                nv.type = t
                if t == C.NamedValueType.kString:
                    s = str(v).encode()
                    nv.string_value = self.put(s)
                    nv.value_size = len(s)
                elif t == C.NamedValueType.kInt64List:
                    nv.int64_array_value = self.int64s([v, 1])
                    nv.value_size = 2
                elif t in (C.NamedValueType.kInt64, C.NamedValueType.kFloat,
                           C.NamedValueType.kBool):
                    nv.int64_value = _wrap(v, ctypes.c_int64)
                    nv.value_size = 1
                else:  # an unknown type: its value is not read
                    nv.int64_value = 0
                    nv.value_size = 1
            setattr(a, name, ctypes.addressof(arr))
            setattr(a, count, len(items))
        elif mut[0] == "null_count":
            setattr(a, count, mut[1])
        elif mut[0] == "absurd_count":
            arr = (C.PJRT_NamedValue * 1)()
            self.keep.append(arr)
            setattr(a, name, ctypes.addressof(arr))
            setattr(a, count, mut[1])

    def program_struct(self, mut, detectable):
        C = self.C
        if mut[0] == "null":
            detectable.append("program:NULL")
            return None
        prog = C.PJRT_Program()
        self.keep.append(prog)
        full = C.struct_size(C.PJRT_Program)
        prog.struct_size = full
        code, fmt = self.program, b"mlir"
        if mut[0] == "mut":
            d = mut[1]
            ck = d["code"]
            if ck[0] == "garbage":
                code = bytes.fromhex(ck[1])
            elif ck[0] == "empty":
                code = b""
            if d["format"] != "valid":
                fmt = d["format"].encode()
            prog.struct_size = {"full": full, "full+8": full + 8}.get(d["size"], d["size"])
            if prog.struct_size < 16:
                detectable.append(f"program.struct_size:{prog.struct_size}")
            if ck[0] in ("null_size", "absurd_size") and _covers(prog, "code_size"):
                detectable.append(f"program.code:{ck[0]}")
            if ck[0] == "null_size":
                prog.code, prog.code_size = None, ck[1]
                code = None
            elif ck[0] == "absurd_size":
                prog.code, prog.code_size = self.put(b"x" * 16), ck[1]
                code = None
        if code is not None:
            prog.code, prog.code_size = self.put(code), len(code)
        prog.format, prog.format_size = self.put(fmt), len(fmt)
        return ctypes.addressof(prog)

    def program_out(self, mut):
        C = self.C
        if mut[0] == "null":
            return None
        prog = C.PJRT_Program()
        self.keep.append(prog)
        prog.struct_size = C.struct_size(C.PJRT_Program)
        if mut[0] == "valid":
            prog.code, prog.code_size = self.data, SCRATCH
        elif mut[0] == "short":
            prog.code, prog.code_size = self.data, mut[1]
        elif mut[0] == "absurd_size":
            prog.code, prog.code_size = self.data, mut[1]
        return ctypes.addressof(prog)

    def execute_options(self, mut, detectable):
        C = self.C
        if mut[0] == "null":
            return None
        o = C.PJRT_ExecuteOptions()
        self.keep.append(o)
        full = C.struct_size(C.PJRT_ExecuteOptions)
        o.struct_size = full
        if mut[0] == "mut":
            d = mut[1]
            o.struct_size = {"full": full, "full+8": full + 8}.get(d["size"], d["size"])
            if o.struct_size < 16:
                detectable.append(f"options.struct_size:{o.struct_size}")
            nd = d["non_donatable"]
            if nd[0] in ("null_count", "absurd_count") and \
                    _covers(o, "num_non_donatable_input_indices"):
                detectable.append(f"non_donatable:{nd[0]}")
            if nd[0] == "valid":
                o.non_donatable_input_indices = self.int64s(nd[1])
                o.num_non_donatable_input_indices = len(nd[1])
            elif nd[0] == "null_count":
                o.num_non_donatable_input_indices = nd[1]
            elif nd[0] == "absurd_count":
                o.non_donatable_input_indices = self.int64s([0])
                o.num_non_donatable_input_indices = nd[1]
            if d["send_recv"]:
                o.num_send_ops = d["send_recv"]   # with NULL callbacks
                if _covers(o, "num_send_ops"):    # else absent: an older caller's
                    detectable.append("num_send_ops")
        return ctypes.addressof(o)

    def execute_lists(self, a, mut):
        """argument_lists/output_lists/events of an Execute case: each list
        has room for 64 entries; counts beyond that are absurd (>= 2**47)."""
        detect = []
        nd, na = mut["num_devices"], mut["num_args"]
        a.num_devices, a.num_args = nd, na
        if nd not in (1,):
            detect.append(f"num_devices:{nd}")   # the executable runs on 1 device
        if na not in (1,):
            detect.append(f"num_args:{na}")      # add_one takes 1 argument
        arg = mut["arg"]
        if arg[0] not in ("valid",):
            detect.append(f"argument:{arg[0]}")
        h = self.handle("PJRT_LoadedExecutable_Execute", "Buffer", arg) or 0
        inner = (c_void_p * 64)(*([h] * 64))
        outer = (c_void_p * 64)(*([ctypes.addressof(inner)] * 64))
        outs = [(c_void_p * 64)() for _ in range(2)]
        out_outer = (c_void_p * 64)(*([ctypes.addressof(outs[0])] * 64))
        events = (c_void_p * 64)()
        self.keep += [inner, outer, outs, out_outer, events]
        if mut["lists"] == "valid":
            a.argument_lists = ctypes.addressof(outer)
        elif mut["lists"] == "null_inner":
            a.argument_lists = ctypes.addressof((c_void_p * 64)())
            self.keep.append(a.argument_lists)
            if na:
                detect.append("argument_lists:NULL inner")
        elif nd:
            detect.append("argument_lists:NULL")
        if mut["outputs"] == "valid":
            a.output_lists = ctypes.addressof(out_outer)
        elif mut["outputs"] == "null_inner":
            blank = (c_void_p * 64)()
            self.keep.append(blank)
            a.output_lists = ctypes.addressof(blank)
            detect.append("output_lists:NULL inner")
        elif nd:
            detect.append("output_lists:NULL")
        if mut["events"] == "valid":
            a.device_complete_events = ctypes.addressof(events)
        self.execute_outputs = (outs[0], events)
        return detect

    def strides(self, a, name, count, mut, dims, itemsize):
        if mut[0] == "none" or dims is None:
            return []
        rank = len(dims)
        if mut[0] == "dense":
            st, acc = [], itemsize
            for d in reversed(dims):
                st.append(acc)
                acc *= max(d, 1)
            values = list(reversed(st))
        elif mut[0] == "shuffled":
            values = [v * itemsize for v in (mut[1] + [1] * rank)[:rank]]
        elif mut[0] == "strides_count":
            values = [itemsize] * (rank + 1)
            setattr(a, name, self.int64s(values))
            setattr(a, count, rank + 1)
            return ["strides_count"]
        elif mut[0] == "absurd":
            if not rank or not all(dims):
                return []
            values = [mut[1]] * rank
            setattr(a, name, self.int64s(values))
            setattr(a, count, rank)
            return ["strides:absurd"]
        elif mut[0] == "null_count":
            setattr(a, count, mut[1])
            return ["strides:null_count"]
        else:
            return []
        setattr(a, name, self.int64s(values))
        setattr(a, count, rank)
        return []

    def layout(self, mut):
        C = self.C
        if mut[0] == "null":
            return None
        rank = 1
        m2m = (ctypes.c_int64 * 1)(0)
        self.keep.append(m2m)
        lay = C.PJRT_Buffer_MemoryLayout(type=C.MemoryLayoutType.Tiled)
        lay.struct_size = C.struct_size(C.PJRT_Buffer_MemoryLayout)
        lay.tiled.struct_size = C.struct_size(C.PJRT_Buffer_MemoryLayout_Tiled)
        lay.tiled.minor_to_major = ctypes.addressof(m2m)
        lay.tiled.minor_to_major_size = rank
        self.keep.append(lay)
        return ctypes.addressof(lay)

    # -- after the call ----------------------------------------------------

    def collect_outputs(self, fn, a):
        """Destroys what a successful call created (outputs), so that a
        worker's memory stays flat over thousands of cases."""
        C = self.C
        made = {"buffer": ("PJRT_Buffer_Destroy", C.Buffer_Destroy_Args, "buffer"),
                "dst_buffer": ("PJRT_Buffer_Destroy", C.Buffer_Destroy_Args, "buffer"),
                "out_buffer": ("PJRT_Buffer_Destroy", C.Buffer_Destroy_Args, "buffer")}
        if fn in ("PJRT_Client_BufferFromHostBuffer", "PJRT_Client_CreateUninitializedBuffer",
                  "PJRT_Client_CreateErrorBuffer", "PJRT_Client_CreateViewOfDeviceBuffer",
                  "PJRT_Buffer_CopyToDevice", "PJRT_Buffer_CopyToMemory",
                  "PJRT_Buffer_Bitcast"):
            for f, (name, cls, field) in made.items():
                if hasattr(a, f) and getattr(a, f):
                    self.cleanup.append((name, cls, field, getattr(a, f)))
            if getattr(a, "done_with_host_buffer", None):
                self.events.append(a.done_with_host_buffer)
        if fn in ("PJRT_Client_Compile", "PJRT_Client_Load",
                  "PJRT_Executable_DeserializeAndLoad"):
            h = getattr(a, "executable", None) if fn == "PJRT_Client_Compile" else \
                a.loaded_executable
            if h:
                self.cleanup.append(("PJRT_LoadedExecutable_Destroy",
                                     C.LoadedExecutable_Destroy_Args, "executable", h))
        if fn == "PJRT_Compile" and a.executable:
            self.cleanup.append(("PJRT_Executable_Destroy", C.Executable_Destroy_Args,
                                 "executable", a.executable))
        if fn == "PJRT_LoadedExecutable_GetExecutable" and a.executable:
            self.cleanup.append(("PJRT_Executable_Destroy", C.Executable_Destroy_Args,
                                 "executable", a.executable))
        if fn == "PJRT_Client_Create" and a.client:
            self.cleanup.append(("PJRT_Client_Destroy", C.Client_Destroy_Args, "client",
                                 a.client))
        if fn in ("PJRT_TopologyDescription_Create", "PJRT_TopologyDescription_Deserialize") \
                and a.topology:
            self.cleanup.append(("PJRT_TopologyDescription_Destroy",
                                 C.TopologyDescription_Destroy_Args, "topology", a.topology))
        if fn == "PJRT_ExecuteContext_Create" and a.context:
            self.cleanup.append(("PJRT_ExecuteContext_Destroy", C.ExecuteContext_Destroy_Args,
                                 "context", a.context))
        if fn == "PJRT_Device_CreateAsyncTrackingEvent" and a.event:
            self.cleanup.append(("PJRT_AsyncTrackingEvent_Destroy", C.SimpleArgs, "obj",
                                 a.event))
        if fn in ("PJRT_Buffer_ReadyEvent", "PJRT_Buffer_ToHostBuffer",
                  "PJRT_Buffer_CopyRawToHost", "PJRT_Event_Create") and a.event:
            self.events.append(a.event)
        if fn == "PJRT_LoadedExecutable_Execute":
            outs, events = self.execute_outputs
            for hnd in list(outs)[:1]:
                if hnd:
                    self.cleanup.append(("PJRT_Buffer_Destroy", C.Buffer_Destroy_Args,
                                         "buffer", hnd))
            for ev in list(events)[:1]:
                if ev:
                    self.events.append(ev)
        if fn in ("PJRT_Executable_Serialize", "PJRT_Executable_GetCompileOptions",
                  "PJRT_LoadedExecutable_GetDeviceAssignment",
                  "PJRT_TopologyDescription_Serialize"):
            blob = [getattr(a, f) for f, _ in type(a)._fields_ if f.startswith("serialized_")
                    and not f.endswith(("_bytes", "_size", "_deleter"))]
            deleter = [getattr(a, f) for f, _ in type(a)._fields_ if f.endswith("_deleter")]
            if blob and blob[0] and deleter and deleter[0]:
                ctypes.CFUNCTYPE(None, c_void_p)(deleter[0])(blob[0])

    def _clean(self):
        p = self.plugin
        for name, cls, field, h in reversed(self.cleanup):
            err = p.raw_call(name, cls(**{field: h}))
            if err:
                p.error_destroy(err)
        for ev in self.events:
            err = p.raw_call("PJRT_Event_Destroy", self.args_class("PJRT_Event_Destroy")(
                event=ev))
            if err:
                p.error_destroy(err)
        for err in self.errors:
            p.error_destroy(err)


def _covers(struct, field) -> bool:
    """Whether ``struct``'s own struct_size includes ``field`` (a field past it
    is absent: the plugin reads it as zero, whatever the bytes are)."""
    f = getattr(type(struct), field)
    return struct.struct_size >= f.offset + f.size


def _itemsize(t):
    import numpy as np

    from stablehlo_pjrt.checker.plugin import DTYPES
    dt = DTYPES.get(t)
    return np.dtype(dt).itemsize if dt is not None else 1


def _wrap(v, ctype):
    """``v`` as the C type of a field (two's complement, as a C caller's
    assignment would)."""
    if hasattr(ctype, "size"):  # a ctypes field descriptor
        bits = ctype.size * 8
    else:
        bits = ctypes.sizeof(ctype) * 8
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


_WORLD = None


def work(data: bytes) -> str:
    """The fuzzlib worker entry: one case."""
    global _WORLD
    if _WORLD is None:
        os.environ.setdefault("STABLEHLO_REF_NUM_DEVICES", "1")
        _WORLD = World()
    return _WORLD.run_case(json.loads(data))
