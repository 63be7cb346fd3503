"""ctypes mirror of the PJRT C API structs (pjrt_c_api.h, version 0.110).

One header version is mirrored here, field for field, so that the rest of the
plugin can read the `Args` structs jaxlib hands us.  jaxlib 0.10.2 speaks
0.112 and accepts older plugin minor versions; every PJRT argument struct
starts with `struct_size`, and newer callers only append fields, so reading a
0.110 layout out of a 0.112 struct is sound.

Pointers are declared `c_void_p` (read back as int or None) instead of typed
ctypes pointers: the plugin deals in addresses (handles into its registry,
raw host data, arrays of handles) and converting them on demand is both
faster and simpler than ctypes pointer objects.
"""

from __future__ import annotations

import ctypes
from ctypes import (
    Structure,
    Union,
    c_bool,
    c_float,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint64,
    c_void_p,
)

API_MAJOR = 0
API_MINOR = 110

P = c_void_p          # any pointer
SIZE = c_size_t
ENUM = c_int          # C enums are int-sized on the ABIs jaxlib supports

# ----------------------------------------------------------------------------
# Enums
# ----------------------------------------------------------------------------


class ErrorCode:
    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class NamedValueType:
    kString = 0
    kInt64 = 1
    kInt64List = 2
    kFloat = 3
    kBool = 4


class BufferType:
    INVALID = 0
    PRED = 1
    S8 = 2
    S16 = 3
    S32 = 4
    S64 = 5
    U8 = 6
    U16 = 7
    U32 = 8
    U64 = 9
    F16 = 10
    F32 = 11
    F64 = 12
    BF16 = 13
    C64 = 14
    C128 = 15
    F8E5M2 = 16
    F8E4M3FN = 17
    F8E4M3B11FNUZ = 18
    F8E5M2FNUZ = 19
    F8E4M3FNUZ = 20
    S4 = 21
    U4 = 22
    TOKEN = 23
    S2 = 24
    U2 = 25
    F8E4M3 = 26
    F8E3M4 = 27
    F8E8M0FNU = 28
    F4E2M1FN = 29
    S1 = 30
    U1 = 31


class HostBufferSemantics:
    kImmutableOnlyDuringCall = 0
    kImmutableUntilTransferCompletes = 1
    kImmutableZeroCopy = 2
    kMutableZeroCopy = 3


class MemoryLayoutType:
    Tiled = 0
    Strides = 1


# ----------------------------------------------------------------------------
# Struct helpers
# ----------------------------------------------------------------------------


def _args(name: str, fields: list[tuple]) -> type[Structure]:
    """Declares `name` with the common `struct_size`/`extension_start` head."""
    cls = type(name, (Structure,), {
        "_fields_": [("struct_size", SIZE), ("extension_start", P)] + fields,
    })
    return cls


def struct_size(cls: type[Structure]) -> int:
    """PJRT_STRUCT_SIZE: offset of the last field plus its size."""
    last = cls._fields_[-1][0]
    return getattr(cls, last).offset + getattr(cls, last).size


class PJRT_Extension_Base(Structure):
    pass


PJRT_Extension_Base._fields_ = [
    ("struct_size", SIZE), ("type", ENUM), ("next", P)]


class PJRT_Api_Version(Structure):
    _fields_ = [("struct_size", SIZE), ("extension_start", P),
                ("major_version", c_int), ("minor_version", c_int)]


class _NamedValueUnion(Union):
    _fields_ = [("string_value", P), ("int64_value", c_int64),
                ("int64_array_value", P), ("float_value", c_float),
                ("bool_value", c_bool)]


class PJRT_NamedValue(Structure):
    _anonymous_ = ("u",)
    _fields_ = [("struct_size", SIZE), ("extension_start", P),
                ("name", P), ("name_size", SIZE), ("type", ENUM),
                ("u", _NamedValueUnion), ("value_size", SIZE)]


class PJRT_Buffer_MemoryLayout_Tiled(Structure):
    _fields_ = [("struct_size", SIZE), ("extension_start", P),
                ("minor_to_major", P), ("minor_to_major_size", SIZE),
                ("tile_dims", P), ("tile_dim_sizes", P), ("num_tiles", SIZE)]


class PJRT_Buffer_MemoryLayout_Strides(Structure):
    _fields_ = [("struct_size", SIZE), ("extension_start", P),
                ("byte_strides", P), ("num_byte_strides", SIZE)]


class _LayoutUnion(Union):
    _fields_ = [("tiled", PJRT_Buffer_MemoryLayout_Tiled),
                ("strides", PJRT_Buffer_MemoryLayout_Strides)]


class PJRT_Buffer_MemoryLayout(Structure):
    _anonymous_ = ("u",)
    _fields_ = [("struct_size", SIZE), ("extension_start", P),
                ("u", _LayoutUnion), ("type", ENUM)]


class PJRT_Program(Structure):
    _fields_ = [("struct_size", SIZE), ("extension_start", P),
                ("code", P), ("code_size", SIZE),
                ("format", P), ("format_size", SIZE)]


class PJRT_LogicalDeviceIds(Structure):
    _fields_ = [("replica", c_int), ("partition", c_int)]


class PJRT_ShapeSpec(Structure):
    _fields_ = [("struct_size", SIZE), ("extension_start", P),
                ("dims", P), ("num_dims", SIZE), ("element_type", ENUM)]


class PJRT_ExecuteOptions(Structure):
    _fields_ = [("struct_size", SIZE), ("extension_start", P),
                ("send_callbacks", P), ("recv_callbacks", P),
                ("num_send_ops", SIZE), ("num_recv_ops", SIZE),
                ("launch_id", c_int),
                ("non_donatable_input_indices", P),
                ("num_non_donatable_input_indices", SIZE),
                ("context", P), ("call_location", P),
                ("num_tasks", SIZE), ("task_ids", P), ("incarnation_ids", P),
                ("multi_slice_config", P),
                ("use_major_to_minor_data_layout_for_callbacks", c_bool)]


# ----------------------------------------------------------------------------
# Argument structs, in header order
# ----------------------------------------------------------------------------

Plugin_Initialize_Args = _args("PJRT_Plugin_Initialize_Args", [])
Plugin_Attributes_Args = _args("PJRT_Plugin_Attributes_Args", [
    ("attributes", P), ("num_attributes", SIZE)])

Client_Create_Args = _args("PJRT_Client_Create_Args", [
    ("create_options", P), ("num_options", SIZE),
    ("kv_get_callback", P), ("kv_get_user_arg", P),
    ("kv_put_callback", P), ("kv_put_user_arg", P),
    ("client", P),
    ("kv_try_get_callback", P), ("kv_try_get_user_arg", P)])
Client_Destroy_Args = _args("PJRT_Client_Destroy_Args", [("client", P)])
Client_PlatformName_Args = _args("PJRT_Client_PlatformName_Args", [
    ("client", P), ("platform_name", P), ("platform_name_size", SIZE)])
Client_ProcessIndex_Args = _args("PJRT_Client_ProcessIndex_Args", [
    ("client", P), ("process_index", c_int)])
Client_PlatformVersion_Args = _args("PJRT_Client_PlatformVersion_Args", [
    ("client", P), ("platform_version", P), ("platform_version_size", SIZE)])
Client_TopologyDescription_Args = _args(
    "PJRT_Client_TopologyDescription_Args", [("client", P), ("topology", P)])
Client_Devices_Args = _args("PJRT_Client_Devices_Args", [
    ("client", P), ("devices", P), ("num_devices", SIZE)])
Client_AddressableDevices_Args = _args("PJRT_Client_AddressableDevices_Args", [
    ("client", P), ("addressable_devices", P),
    ("num_addressable_devices", SIZE)])
Client_LookupDevice_Args = _args("PJRT_Client_LookupDevice_Args", [
    ("client", P), ("id", c_int), ("device", P)])
Client_LookupAddressableDevice_Args = _args(
    "PJRT_Client_LookupAddressableDevice_Args", [
        ("client", P), ("local_hardware_id", c_int),
        ("addressable_device", P)])
Client_UpdateGlobalProcessInfo_Args = _args(
    "PJRT_Client_UpdateGlobalProcessInfo_Args", [
        ("client", P), ("process_infos", P), ("num_process_infos", SIZE)])
Client_AddressableMemories_Args = _args(
    "PJRT_Client_AddressableMemories_Args", [
        ("client", P), ("addressable_memories", P),
        ("num_addressable_memories", SIZE)])
Client_Compile_Args = _args("PJRT_Client_Compile_Args", [
    ("client", P), ("program", P), ("compile_options", P),
    ("compile_options_size", SIZE), ("executable", P)])
Client_Load_Args = _args("PJRT_Client_Load_Args", [
    ("client", P), ("executable", P), ("compile_options", P),
    ("compile_options_size", SIZE), ("loaded_executable", P)])
Client_DefaultDeviceAssignment_Args = _args(
    "PJRT_Client_DefaultDeviceAssignment_Args", [
        ("client", P), ("num_replicas", c_int), ("num_partitions", c_int),
        ("default_assignment_size", SIZE), ("default_assignment", P)])
Client_DmaMap_Args = _args("PJRT_Client_DmaMap_Args", [
    ("client", P), ("data", P), ("size", SIZE)])
Client_DmaUnmap_Args = _args("PJRT_Client_DmaUnmap_Args", [
    ("client", P), ("data", P)])
Client_CreateUninitializedBuffer_Args = _args(
    "PJRT_Client_CreateUninitializedBuffer_Args", [
        ("client", P), ("shape_dims", P), ("shape_num_dims", SIZE),
        ("shape_element_type", ENUM), ("shape_layout", P),
        ("device", P), ("memory", P), ("buffer", P)])
Client_CreateErrorBuffer_Args = _args("PJRT_Client_CreateErrorBuffer_Args", [
    ("client", P), ("error_code", ENUM), ("error_message", P),
    ("error_message_size", SIZE), ("shape_dims", P),
    ("shape_num_dims", SIZE), ("shape_element_type", ENUM),
    ("shape_layout", P), ("memory", P), ("buffer", P),
    ("payload", P), ("num_payload", SIZE)])
Client_BufferFromHostBuffer_Args = _args(
    "PJRT_Client_BufferFromHostBuffer_Args", [
        ("client", P), ("data", P), ("type", ENUM),
        ("dims", P), ("num_dims", SIZE),
        ("byte_strides", P), ("num_byte_strides", SIZE),
        ("host_buffer_semantics", ENUM), ("device", P), ("memory", P),
        ("device_layout", P), ("done_with_host_buffer", P), ("buffer", P)])
Client_CreateViewOfDeviceBuffer_Args = _args(
    "PJRT_Client_CreateViewOfDeviceBuffer_Args", [
        ("client", P), ("device_buffer_ptr", P), ("dims", P),
        ("num_dims", SIZE), ("element_type", ENUM), ("layout", P),
        ("device", P), ("on_delete_callback", P),
        ("on_delete_callback_arg", P), ("stream", ctypes.c_ssize_t),
        ("buffer", P), ("memory", P)])

DeviceDescription_Id_Args = _args("PJRT_DeviceDescription_Id_Args", [
    ("device_description", P), ("id", c_int)])
DeviceDescription_ProcessIndex_Args = _args(
    "PJRT_DeviceDescription_ProcessIndex_Args", [
        ("device_description", P), ("process_index", c_int)])
DeviceDescription_Attributes_Args = _args(
    "PJRT_DeviceDescription_Attributes_Args", [
        ("device_description", P), ("num_attributes", SIZE),
        ("attributes", P)])
DeviceDescription_Kind_Args = _args("PJRT_DeviceDescription_Kind_Args", [
    ("device_description", P), ("device_kind", P),
    ("device_kind_size", SIZE)])
DeviceDescription_DebugString_Args = _args(
    "PJRT_DeviceDescription_DebugString_Args", [
        ("device_description", P), ("debug_string", P),
        ("debug_string_size", SIZE)])
DeviceDescription_ToString_Args = _args(
    "PJRT_DeviceDescription_ToString_Args", [
        ("device_description", P), ("to_string", P),
        ("to_string_size", SIZE)])

Device_GetDescription_Args = _args("PJRT_Device_GetDescription_Args", [
    ("device", P), ("device_description", P)])
Device_IsAddressable_Args = _args("PJRT_Device_IsAddressable_Args", [
    ("device", P), ("is_addressable", c_bool)])
Device_LocalHardwareId_Args = _args("PJRT_Device_LocalHardwareId_Args", [
    ("device", P), ("local_hardware_id", c_int)])
Device_AddressableMemories_Args = _args(
    "PJRT_Device_AddressableMemories_Args", [
        ("device", P), ("memories", P), ("num_memories", SIZE)])
Device_DefaultMemory_Args = _args("PJRT_Device_DefaultMemory_Args", [
    ("device", P), ("memory", P)])
Device_MemoryStats_Args = _args("PJRT_Device_MemoryStats_Args", [
    ("device", P),
    ("bytes_in_use", c_int64),
    ("peak_bytes_in_use", c_int64), ("peak_bytes_in_use_is_set", c_bool),
    ("num_allocs", c_int64), ("num_allocs_is_set", c_bool),
    ("largest_alloc_size", c_int64), ("largest_alloc_size_is_set", c_bool),
    ("bytes_limit", c_int64), ("bytes_limit_is_set", c_bool),
    ("bytes_reserved", c_int64), ("bytes_reserved_is_set", c_bool),
    ("peak_bytes_reserved", c_int64), ("peak_bytes_reserved_is_set", c_bool),
    ("bytes_reservable_limit", c_int64),
    ("bytes_reservable_limit_is_set", c_bool),
    ("largest_free_block_bytes", c_int64),
    ("largest_free_block_bytes_is_set", c_bool),
    ("pool_bytes", c_int64), ("pool_bytes_is_set", c_bool),
    ("peak_pool_bytes", c_int64), ("peak_pool_bytes_is_set", c_bool)])
Device_ClearMemoryStats_Args = _args("PJRT_Device_ClearMemoryStats_Args", [
    ("device", P)])
Device_PoisonExecution_Args = _args("PJRT_Device_PoisonExecution_Args", [
    ("device", P), ("launch_id", c_int32), ("error_code", ENUM),
    ("error_message", P), ("error_message_size", SIZE),
    ("poisoned", c_bool), ("payload", P), ("num_payload", SIZE)])
Device_GetAttributes_Args = _args("PJRT_Device_GetAttributes_Args", [
    ("device", P), ("attributes", P), ("num_attributes", SIZE),
    ("device_attributes", P), ("attributes_deleter", P)])
Device_CreateAsyncTrackingEvent_Args = _args(
    "PJRT_Device_CreateAsyncTrackingEvent_Args", [
        ("device", P), ("description", P), ("description_size", SIZE),
        ("event", P)])

Memory_Id_Args = _args("PJRT_Memory_Id_Args", [("memory", P), ("id", c_int)])
Memory_Kind_Args = _args("PJRT_Memory_Kind_Args", [
    ("memory", P), ("kind", P), ("kind_size", SIZE)])
Memory_Kind_Id_Args = _args("PJRT_Memory_Kind_Id_Args", [
    ("memory", P), ("kind_id", c_int)])
Memory_DebugString_Args = _args("PJRT_Memory_DebugString_Args", [
    ("memory", P), ("debug_string", P), ("debug_string_size", SIZE)])
Memory_ToString_Args = _args("PJRT_Memory_ToString_Args", [
    ("memory", P), ("to_string", P), ("to_string_size", SIZE)])
Memory_AddressableByDevices_Args = _args(
    "PJRT_Memory_AddressableByDevices_Args", [
        ("memory", P), ("devices", P), ("num_devices", SIZE)])

ExecuteContext_Create_Args = _args("PJRT_ExecuteContext_Create_Args", [
    ("context", P)])
ExecuteContext_Destroy_Args = _args("PJRT_ExecuteContext_Destroy_Args", [
    ("context", P)])

Executable_Destroy_Args = _args("PJRT_Executable_Destroy_Args", [
    ("executable", P)])
LoadedExecutable_Destroy_Args = _args("PJRT_LoadedExecutable_Destroy_Args", [
    ("executable", P)])
LoadedExecutable_GetExecutable_Args = _args(
    "PJRT_LoadedExecutable_GetExecutable_Args", [
        ("loaded_executable", P), ("executable", P)])
LoadedExecutable_GetDeviceAssignment_Args = _args(
    "PJRT_LoadedExecutable_GetDeviceAssignment_Args", [
        ("executable", P), ("serialized_bytes", P),
        ("serialized_bytes_size", SIZE),
        ("serialized_device_assignment", P),
        ("serialized_device_assignment_deleter", P)])
Executable_Name_Args = _args("PJRT_Executable_Name_Args", [
    ("executable", P), ("executable_name", P),
    ("executable_name_size", SIZE)])
Executable_NumReplicas_Args = _args("PJRT_Executable_NumReplicas_Args", [
    ("executable", P), ("num_replicas", SIZE)])
Executable_NumPartitions_Args = _args("PJRT_Executable_NumPartitions_Args", [
    ("executable", P), ("num_partitions", SIZE)])
LoadedExecutable_AddressableDevices_Args = _args(
    "PJRT_LoadedExecutable_AddressableDevices_Args", [
        ("executable", P), ("addressable_devices", P),
        ("num_addressable_devices", SIZE)])
LoadedExecutable_AddressableDeviceLogicalIds_Args = _args(
    "PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args", [
        ("executable", P), ("addressable_device_logical_ids", P),
        ("num_addressable_device_logical_ids", SIZE)])
Executable_OptimizedProgram_Args = _args(
    "PJRT_Executable_OptimizedProgram_Args", [
        ("executable", P), ("program", P)])
LoadedExecutable_Delete_Args = _args("PJRT_LoadedExecutable_Delete_Args", [
    ("executable", P)])
LoadedExecutable_IsDeleted_Args = _args(
    "PJRT_LoadedExecutable_IsDeleted_Args", [
        ("executable", P), ("is_deleted", c_bool)])
LoadedExecutable_Execute_Args = _args("PJRT_LoadedExecutable_Execute_Args", [
    ("executable", P), ("options", P), ("argument_lists", P),
    ("num_devices", SIZE), ("num_args", SIZE), ("output_lists", P),
    ("device_complete_events", P), ("execute_device", P)])
Executable_NumOutputs_Args = _args("PJRT_Executable_NumOutputs_Args", [
    ("executable", P), ("num_outputs", SIZE)])
Executable_SizeOfGeneratedCodeInBytes_Args = _args(
    "PJRT_Executable_SizeOfGeneratedCodeInBytes_Args", [
        ("executable", P), ("size_in_bytes", c_int64)])
Executable_Fingerprint_Args = _args("PJRT_Executable_Fingerprint_Args", [
    ("executable", P), ("executable_fingerprint", P),
    ("executable_fingerprint_size", SIZE)])
Executable_GetCostAnalysis_Args = _args(
    "PJRT_Executable_GetCostAnalysis_Args", [
        ("executable", P), ("num_properties", SIZE), ("properties", P)])
Executable_GetCompiledMemoryStats_Args = _args(
    "PJRT_Executable_GetCompiledMemoryStats_Args", [
        ("executable", P),
        ("generated_code_size_in_bytes", c_int64),
        ("argument_size_in_bytes", c_int64),
        ("output_size_in_bytes", c_int64),
        ("alias_size_in_bytes", c_int64),
        ("temp_size_in_bytes", c_int64),
        ("host_generated_code_size_in_bytes", c_int64),
        ("host_argument_size_in_bytes", c_int64),
        ("host_output_size_in_bytes", c_int64),
        ("host_alias_size_in_bytes", c_int64),
        ("host_temp_size_in_bytes", c_int64),
        ("peak_memory_in_bytes", c_int64),
        ("total_size_in_bytes", c_int64),
        ("total_allocation_bytes", c_int64),
        ("indefinite_allocations", c_int64),
        ("peak_unpadded_heap_bytes", c_int64)])
Executable_OutputElementTypes_Args = _args(
    "PJRT_Executable_OutputElementTypes_Args", [
        ("executable", P), ("output_types", P), ("num_output_types", SIZE)])
Executable_OutputDimensions_Args = _args(
    "PJRT_Executable_OutputDimensions_Args", [
        ("executable", P), ("num_outputs", SIZE), ("dims", P),
        ("dim_sizes", P)])
Executable_ParameterMemoryKinds_Args = _args(
    "PJRT_Executable_ParameterMemoryKinds_Args", [
        ("executable", P), ("num_parameters", SIZE), ("memory_kinds", P),
        ("memory_kind_sizes", P)])
Executable_OutputMemoryKinds_Args = _args(
    "PJRT_Executable_OutputMemoryKinds_Args", [
        ("executable", P), ("num_outputs", SIZE), ("memory_kinds", P),
        ("memory_kind_sizes", P)])
Executable_Serialize_Args = _args("PJRT_Executable_Serialize_Args", [
    ("executable", P), ("serialized_bytes", P),
    ("serialized_bytes_size", SIZE), ("serialized_executable", P),
    ("serialized_executable_deleter", P)])
Executable_GetCompileOptions_Args = _args(
    "PJRT_Executable_GetCompileOptions_Args", [
        ("executable", P), ("serialized_bytes", P),
        ("serialized_bytes_size", SIZE), ("serialized_compile_options", P),
        ("serialized_compile_options_deleter", P)])
Executable_DeserializeAndLoad_Args = _args(
    "PJRT_Executable_DeserializeAndLoad_Args", [
        ("client", P), ("serialized_executable", P),
        ("serialized_executable_size", SIZE), ("loaded_executable", P),
        ("overridden_serialized_compile_options", P),
        ("overridden_serialized_compile_options_size", SIZE)])
LoadedExecutable_Fingerprint_Args = _args(
    "PJRT_LoadedExecutable_Fingerprint_Args", [
        ("executable", P), ("executable_fingerprint", P),
        ("executable_fingerprint_size", SIZE)])

Buffer_Destroy_Args = _args("PJRT_Buffer_Destroy_Args", [("buffer", P)])
Buffer_ElementType_Args = _args("PJRT_Buffer_ElementType_Args", [
    ("buffer", P), ("type", ENUM)])
Buffer_Dimensions_Args = _args("PJRT_Buffer_Dimensions_Args", [
    ("buffer", P), ("dims", P), ("num_dims", SIZE)])
Buffer_UnpaddedDimensions_Args = _args("PJRT_Buffer_UnpaddedDimensions_Args", [
    ("buffer", P), ("unpadded_dims", P), ("num_dims", SIZE)])
Buffer_DynamicDimensionIndices_Args = _args(
    "PJRT_Buffer_DynamicDimensionIndices_Args", [
        ("buffer", P), ("dynamic_dim_indices", P), ("num_dynamic_dims", SIZE)])
Buffer_GetMemoryLayout_Args = _args("PJRT_Buffer_GetMemoryLayout_Args", [
    ("buffer", P), ("layout", PJRT_Buffer_MemoryLayout)])
Buffer_ToHostBuffer_Args = _args("PJRT_Buffer_ToHostBuffer_Args", [
    ("src", P), ("host_layout", P), ("dst", P), ("dst_size", SIZE),
    ("event", P)])
Buffer_OnDeviceSizeInBytes_Args = _args(
    "PJRT_Buffer_OnDeviceSizeInBytes_Args", [
        ("buffer", P), ("on_device_size_in_bytes", SIZE)])
Buffer_Delete_Args = _args("PJRT_Buffer_Delete_Args", [("buffer", P)])
Buffer_IsDeleted_Args = _args("PJRT_Buffer_IsDeleted_Args", [
    ("buffer", P), ("is_deleted", c_bool)])
Buffer_CopyRawToHost_Args = _args("PJRT_Buffer_CopyRawToHost_Args", [
    ("buffer", P), ("dst", P), ("offset", c_int64), ("transfer_size", c_int64),
    ("event", P)])
Buffer_CopyToDevice_Args = _args("PJRT_Buffer_CopyToDevice_Args", [
    ("buffer", P), ("dst_device", P), ("dst_buffer", P)])
Buffer_CopyToMemory_Args = _args("PJRT_Buffer_CopyToMemory_Args", [
    ("buffer", P), ("dst_memory", P), ("dst_buffer", P)])
Buffer_Bitcast_Args = _args("PJRT_Buffer_Bitcast_Args", [
    ("buffer", P), ("element_type", ENUM), ("dims", P), ("num_dims", SIZE),
    ("device_layout", P), ("out_buffer", P)])
Buffer_IsOnCpu_Args = _args("PJRT_Buffer_IsOnCpu_Args", [
    ("buffer", P), ("is_on_cpu", c_bool)])
Buffer_Device_Args = _args("PJRT_Buffer_Device_Args", [
    ("buffer", P), ("device", P)])
Buffer_Memory_Args = _args("PJRT_Buffer_Memory_Args", [
    ("buffer", P), ("memory", P)])
Buffer_ReadyEvent_Args = _args("PJRT_Buffer_ReadyEvent_Args", [
    ("buffer", P), ("event", P)])
Buffer_UnsafePointer_Args = _args("PJRT_Buffer_UnsafePointer_Args", [
    ("buffer", P), ("buffer_pointer", c_size_t)])
Buffer_IncreaseExternalReferenceCount_Args = _args(
    "PJRT_Buffer_IncreaseExternalReferenceCount_Args", [("buffer", P)])
Buffer_DecreaseExternalReferenceCount_Args = _args(
    "PJRT_Buffer_DecreaseExternalReferenceCount_Args", [("buffer", P)])
Buffer_OpaqueDeviceMemoryDataPointer_Args = _args(
    "PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args", [
        ("buffer", P), ("device_memory_ptr", P)])

TopologyDescription_Create_Args = _args(
    "PJRT_TopologyDescription_Create_Args", [
        ("topology_name", P), ("topology_name_size", SIZE),
        ("create_options", P), ("num_options", SIZE), ("topology", P)])
TopologyDescription_Destroy_Args = _args(
    "PJRT_TopologyDescription_Destroy_Args", [("topology", P)])
TopologyDescription_PlatformVersion_Args = _args(
    "PJRT_TopologyDescription_PlatformVersion_Args", [
        ("topology", P), ("platform_version", P),
        ("platform_version_size", SIZE)])
TopologyDescription_PlatformName_Args = _args(
    "PJRT_TopologyDescription_PlatformName_Args", [
        ("topology", P), ("platform_name", P), ("platform_name_size", SIZE)])
TopologyDescription_GetDeviceDescriptions_Args = _args(
    "PJRT_TopologyDescription_GetDeviceDescriptions_Args", [
        ("topology", P), ("descriptions", P), ("num_descriptions", SIZE)])
TopologyDescription_Serialize_Args = _args(
    "PJRT_TopologyDescription_Serialize_Args", [
        ("topology", P), ("serialized_bytes", P),
        ("serialized_bytes_size", SIZE), ("serialized_topology", P),
        ("serialized_topology_deleter", P)])
TopologyDescription_Deserialize_Args = _args(
    "PJRT_TopologyDescription_Deserialize_Args", [
        ("serialized_topology", P), ("serialized_topology_size", SIZE),
        ("topology", P)])
TopologyDescription_Attributes_Args = _args(
    "PJRT_TopologyDescription_Attributes_Args", [
        ("topology", P), ("attributes", P), ("num_attributes", SIZE)])
TopologyDescription_Fingerprint_Args = _args(
    "PJRT_TopologyDescription_Fingerprint_Args", [
        ("topology", P), ("fingerprint", c_uint64)])
Compile_Args = _args("PJRT_Compile_Args", [
    ("topology", P), ("program", P), ("compile_options", P),
    ("compile_options_size", SIZE), ("client", P), ("executable", P)])

# ----------------------------------------------------------------------------
# The PJRT_Api table
# ----------------------------------------------------------------------------

# Function-pointer fields of PJRT_Api, in header order (0.110).
API_FUNCTIONS = [
    "PJRT_Error_Destroy",
    "PJRT_Error_Message",
    "PJRT_Error_GetCode",
    "PJRT_Plugin_Initialize",
    "PJRT_Plugin_Attributes",
    "PJRT_Event_Destroy",
    "PJRT_Event_IsReady",
    "PJRT_Event_Error",
    "PJRT_Event_Await",
    "PJRT_Event_OnReady",
    "PJRT_Client_Create",
    "PJRT_Client_Destroy",
    "PJRT_Client_PlatformName",
    "PJRT_Client_ProcessIndex",
    "PJRT_Client_PlatformVersion",
    "PJRT_Client_Devices",
    "PJRT_Client_AddressableDevices",
    "PJRT_Client_LookupDevice",
    "PJRT_Client_LookupAddressableDevice",
    "PJRT_Client_AddressableMemories",
    "PJRT_Client_Compile",
    "PJRT_Client_DefaultDeviceAssignment",
    "PJRT_Client_BufferFromHostBuffer",
    "PJRT_DeviceDescription_Id",
    "PJRT_DeviceDescription_ProcessIndex",
    "PJRT_DeviceDescription_Attributes",
    "PJRT_DeviceDescription_Kind",
    "PJRT_DeviceDescription_DebugString",
    "PJRT_DeviceDescription_ToString",
    "PJRT_Device_GetDescription",
    "PJRT_Device_IsAddressable",
    "PJRT_Device_LocalHardwareId",
    "PJRT_Device_AddressableMemories",
    "PJRT_Device_DefaultMemory",
    "PJRT_Device_MemoryStats",
    "PJRT_Memory_Id",
    "PJRT_Memory_Kind",
    "PJRT_Memory_DebugString",
    "PJRT_Memory_ToString",
    "PJRT_Memory_AddressableByDevices",
    "PJRT_Executable_Destroy",
    "PJRT_Executable_Name",
    "PJRT_Executable_NumReplicas",
    "PJRT_Executable_NumPartitions",
    "PJRT_Executable_NumOutputs",
    "PJRT_Executable_SizeOfGeneratedCodeInBytes",
    "PJRT_Executable_GetCostAnalysis",
    "PJRT_Executable_OutputMemoryKinds",
    "PJRT_Executable_OptimizedProgram",
    "PJRT_Executable_Serialize",
    "PJRT_LoadedExecutable_Destroy",
    "PJRT_LoadedExecutable_GetExecutable",
    "PJRT_LoadedExecutable_AddressableDevices",
    "PJRT_LoadedExecutable_Delete",
    "PJRT_LoadedExecutable_IsDeleted",
    "PJRT_LoadedExecutable_Execute",
    "PJRT_Executable_DeserializeAndLoad",
    "PJRT_LoadedExecutable_Fingerprint",
    "PJRT_Buffer_Destroy",
    "PJRT_Buffer_ElementType",
    "PJRT_Buffer_Dimensions",
    "PJRT_Buffer_UnpaddedDimensions",
    "PJRT_Buffer_DynamicDimensionIndices",
    "PJRT_Buffer_GetMemoryLayout",
    "PJRT_Buffer_OnDeviceSizeInBytes",
    "PJRT_Buffer_Device",
    "PJRT_Buffer_Memory",
    "PJRT_Buffer_Delete",
    "PJRT_Buffer_IsDeleted",
    "PJRT_Buffer_CopyToDevice",
    "PJRT_Buffer_ToHostBuffer",
    "PJRT_Buffer_IsOnCpu",
    "PJRT_Buffer_ReadyEvent",
    "PJRT_Buffer_UnsafePointer",
    "PJRT_Buffer_IncreaseExternalReferenceCount",
    "PJRT_Buffer_DecreaseExternalReferenceCount",
    "PJRT_Buffer_OpaqueDeviceMemoryDataPointer",
    "PJRT_CopyToDeviceStream_Destroy",
    "PJRT_CopyToDeviceStream_AddChunk",
    "PJRT_CopyToDeviceStream_TotalBytes",
    "PJRT_CopyToDeviceStream_GranuleSize",
    "PJRT_CopyToDeviceStream_CurrentBytes",
    "PJRT_TopologyDescription_Create",
    "PJRT_TopologyDescription_Destroy",
    "PJRT_TopologyDescription_PlatformName",
    "PJRT_TopologyDescription_PlatformVersion",
    "PJRT_TopologyDescription_GetDeviceDescriptions",
    "PJRT_TopologyDescription_Serialize",
    "PJRT_TopologyDescription_Attributes",
    "PJRT_Compile",
    "PJRT_Executable_OutputElementTypes",
    "PJRT_Executable_OutputDimensions",
    "PJRT_Buffer_CopyToMemory",
    "PJRT_Client_CreateViewOfDeviceBuffer",
    "PJRT_Executable_Fingerprint",
    "PJRT_Client_TopologyDescription",
    "PJRT_Executable_GetCompiledMemoryStats",
    "PJRT_Memory_Kind_Id",
    "PJRT_ExecuteContext_Create",
    "PJRT_ExecuteContext_Destroy",
    "PJRT_Buffer_CopyRawToHost",
    "PJRT_AsyncHostToDeviceTransferManager_Destroy",
    "PJRT_AsyncHostToDeviceTransferManager_TransferData",
    "PJRT_Client_CreateBuffersForAsyncHostToDevice",
    "PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer",
    "PJRT_AsyncHostToDeviceTransferManager_Device",
    "PJRT_AsyncHostToDeviceTransferManager_BufferCount",
    "PJRT_AsyncHostToDeviceTransferManager_BufferSize",
    "PJRT_AsyncHostToDeviceTransferManager_SetBufferError",
    "PJRT_AsyncHostToDeviceTransferManager_AddMetadata",
    "PJRT_Client_DmaMap",
    "PJRT_Client_DmaUnmap",
    "PJRT_Client_CreateUninitializedBuffer",
    "PJRT_Client_UpdateGlobalProcessInfo",
    "PJRT_TopologyDescription_Deserialize",
    "PJRT_Client_CreateAliasBuffer",
    "PJRT_Client_FulfillAliasBuffer",
    "PJRT_LoadedExecutable_GetDeviceAssignment",
    "PJRT_Client_CreateErrorBuffer",
    "PJRT_AsyncHostToDeviceTransferManager_TransferLiteral",
    "PJRT_Buffer_CopyRawToHostFuture",
    "PJRT_Device_PoisonExecution",
    "PJRT_Device_CreateAsyncTrackingEvent",
    "PJRT_AsyncTrackingEvent_Destroy",
    "PJRT_Executable_GetCompileOptions",
    "PJRT_Buffer_DonateWithControlDependency",
    "PJRT_Event_Create",
    "PJRT_Event_Set",
    "PJRT_Device_GetAttributes",
    "PJRT_Client_Load",
    "PJRT_LoadedExecutable_AddressableDeviceLogicalIds",
    "PJRT_Buffer_Bitcast",
    "PJRT_Error_ForEachPayload",
    "PJRT_TopologyDescription_Fingerprint",
    "PJRT_Executable_ParameterMemoryKinds",
    "PJRT_Device_ClearMemoryStats",
    "PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace",
    "PJRT_TopologyDescription_GetMemorySpaceKindIds",
]


# The shardings extension (pjrt_c_api_shardings_extension.h, version 1):
# parameter/output shardings of an executable as serialized xla.OpSharding.
EXTENSION_TYPE_SHARDINGS = 19
SHARDINGS_EXTENSION_FUNCTIONS = [
    "PJRT_Shardings_PJRT_Executable_ParameterShardings",
    "PJRT_Shardings_PJRT_Executable_OutputShardings",
]
Shardings_ParameterShardings_Args = _args(
    "PJRT_Shardings_PJRT_Executable_ParameterShardings_Args", [
        ("executable", P), ("num_parameters", SIZE), ("shardings", P),
        ("sharding_sizes", P)])
Shardings_OutputShardings_Args = _args(
    "PJRT_Shardings_PJRT_Executable_OutputShardings_Args", [
        ("executable", P), ("num_outputs", SIZE), ("shardings", P),
        ("sharding_sizes", P)])


class PJRT_Shardings_Extension(Structure):
    _fields_ = [("base", PJRT_Extension_Base)] + [
        (name, P) for name in SHARDINGS_EXTENSION_FUNCTIONS]


# The profiler extension (pjrt_c_api_profiler_extension.h, version 1) and
# the profiler API it points at (xla/backends/profiler/plugin/profiler_c_api.h,
# PLUGIN_PROFILER_VERSION 1).  Its args structs have no extension_start.
EXTENSION_TYPE_PROFILER = 1
# (handler name, PLUGIN_Profiler_Api field)
PROFILER_API_FIELDS = [
    ("PLUGIN_Profiler_Create", "create"),
    ("PLUGIN_Profiler_Destroy", "destroy"),
    ("PLUGIN_Profiler_Start", "start"),
    ("PLUGIN_Profiler_Stop", "stop"),
    ("PLUGIN_Profiler_CollectData", "collect_data"),
]
PROFILER_API_FUNCTIONS = [name for name, _ in PROFILER_API_FIELDS]


class PLUGIN_Profiler_Api(Structure):
    _fields_ = ([("struct_size", SIZE), ("priv", P), ("error_destroy", P),
                 ("error_message", P), ("error_get_code", P)]
                + [(field, P) for _, field in PROFILER_API_FIELDS])


class PJRT_Profiler_Extension(Structure):
    _fields_ = [("base", PJRT_Extension_Base), ("profiler_api", P),
                ("traceme_context_id", ctypes.c_int64)]


class PLUGIN_Profiler_Create_Args(Structure):
    _fields_ = [("struct_size", SIZE), ("options", P), ("options_size", SIZE),
                ("profiler", P)]


class PLUGIN_Profiler_Destroy_Args(Structure):
    _fields_ = [("struct_size", SIZE), ("profiler", P)]


class PLUGIN_Profiler_Start_Args(PLUGIN_Profiler_Destroy_Args):
    pass


class PLUGIN_Profiler_Stop_Args(PLUGIN_Profiler_Destroy_Args):
    pass


class PLUGIN_Profiler_CollectData_Args(Structure):
    _fields_ = [("struct_size", SIZE), ("profiler", P), ("buffer", P),
                ("buffer_size_in_bytes", SIZE)]


class PJRT_Api(Structure):
    _fields_ = ([("struct_size", SIZE), ("extension_start", P),
                 ("pjrt_api_version", PJRT_Api_Version)]
                + [(name, P) for name in API_FUNCTIONS])


# Sanity checks against the sizes the C header implies on LP64.
assert ctypes.sizeof(PJRT_NamedValue) == 56
assert ctypes.sizeof(PJRT_Buffer_MemoryLayout) == 80
assert struct_size(PJRT_Api) == 40 + 8 * len(API_FUNCTIONS)
assert ctypes.sizeof(PLUGIN_Profiler_Api) == 80
assert ctypes.sizeof(PJRT_Profiler_Extension) == 40
assert ctypes.sizeof(PLUGIN_Profiler_CollectData_Args) == 32


# No user-space mapping is this large (x86-64 and aarch64 have 47-48 bit user
# address spaces): a size or count at least this big is a caller's garbage,
# refused before anything is read.
HUGE_BYTES = 1 << 47
# numpy arrays (the plugin's buffers) have at most 64 dimensions.
MAX_RANK = 64


class BadArgument(ValueError):
    """A pointer/size pair no valid call has: a NULL pointer with a nonzero
    size or count, or a size larger than any mapping. The C dispatcher reads
    ``pjrt_code``, so a handler that lets it escape answers INVALID_ARGUMENT."""

    pjrt_code = ErrorCode.INVALID_ARGUMENT


def check_array(address, count, item, what):
    """Refuses (BadArgument) ``count`` items of ``item`` bytes at ``address``
    when no valid call has them: NULL with a nonzero count, or more bytes
    than any mapping."""
    if count and not address:
        raise BadArgument(f"{what} is NULL but its count/size is {count}")
    if count * item >= HUGE_BYTES:
        raise BadArgument(f"{what} has count/size {count}, larger than any buffer")


def read_bytes(address: int | None, size: int, what: str = "a byte array") -> bytes:
    """Copies `size` bytes at `address` (b'' for size 0)."""
    if not size:
        return b""
    check_array(address, size, 1, what)
    return ctypes.string_at(address, size)


def read_str(address: int | None, size: int, what: str = "a string") -> str:
    return read_bytes(address, size, what).decode("utf-8", errors="replace")


def read_int64s(address: int | None, count: int, what: str = "an int64 array") -> tuple[int, ...]:
    if not count:
        return ()
    check_array(address, count, 8, what)
    return tuple((c_int64 * count).from_address(address))


def read_dims(address: int | None, count: int, what: str = "dims") -> tuple[int, ...]:
    """A shape: at most MAX_RANK non-negative dimensions whose product is
    below HUGE_BYTES (checked before a buffer of that shape is made)."""
    if count > MAX_RANK:
        raise BadArgument(f"{what} has {count} dimensions; at most {MAX_RANK} are supported")
    dims = read_int64s(address, count, what)
    if any(d < 0 for d in dims):
        raise BadArgument(f"{what} {list(dims)} has a negative dimension")
    n = 1
    for d in dims:
        n *= d
    if n >= HUGE_BYTES:
        raise BadArgument(f"{what} {list(dims)} has {n} elements, more than any buffer")
    return dims


def read_pointers(address: int | None, count: int, what: str = "a pointer array") -> list:
    """Reads `count` pointers (ints, None for NULL) at `address`."""
    if not count:
        return []
    check_array(address, count, 8, what)
    return (c_void_p * count).from_address(address)[:]


class SimpleArgs(Structure):
    """Head of the many args structs whose only field is one object."""
    _fields_ = [("struct_size", SIZE), ("extension_start", P), ("obj", P)]


# Every versioned struct starts with struct_size and extension_start.
HEADER_SIZE = 16


def args_classes() -> dict:
    """"PJRT_<Function>" -> the ctypes class of its PJRT_<Function>_Args."""
    return {cls.__name__[:-len("_Args")]: cls for cls in globals().values()
            if isinstance(cls, type) and issubclass(cls, Structure)
            and cls.__name__.startswith("PJRT_") and cls.__name__.endswith("_Args")}


def read_sized(cls: type[Structure], address: int):
    """The ``cls`` a caller put at ``address``, as pjrt_c_api.h's struct_size
    rules read it (for reading only): a struct as large as ours or larger is
    read in place (extra fields are not ours to read); a smaller one (an older
    header) is copied with the fields past its struct_size zero, i.e. absent.
    None if struct_size is below the header."""
    n = ctypes.c_size_t.from_address(address).value
    if n < HEADER_SIZE:
        return None
    if n >= struct_size(cls):
        return cls.from_address(address)  # the caller's own struct: read in place
    out = cls()
    ctypes.memmove(ctypes.addressof(out), address, n)
    return out
