"""The PJRT C API handlers: one Python function per C API function, named
after it (`Client_Create` serves `PJRT_Client_Create`), and nothing else.

Handlers take the address of the PJRT args struct, read it through the
ctypes mirror in _capi, call into the objects that implement the concepts
(client, device, buffer, executable, event) and raise `PjrtError` for
failures.  `table.build_api()` wires them into the PJRT_Api table; errors,
events and the memory vtable are implemented in C (_shim.c).
"""

from __future__ import annotations

import ctypes

import numpy as np

from . import _capi as C
from . import _shim, dispatch, interrupt, trace
from .buffer import (
    Buffer,
    buffer_from_host,
    copy_buffer,
    describe_with_value,
    device_and_memory,
    dtype_of,
    preview,
    short_type,
    to_host,
    view_of_memory,
)
from .client import Client, Topology, configured_num_devices, stablehlo_versions
from .device import Device, DeviceDescription, Memory
from .error import PjrtError, failed_precondition, invalid_argument, unimplemented
from .event import AsyncTrackingEvent, ready_event
from .executable import (
    CompileOptions,
    Executable,
    compile_args,
    compile_program,
    parse_serialized,
)
from .execute import ExecuteContext, LoadedExecutable
from .handles import (
    NamedValues,
    c_blob,
    c_helper,
    lookup,
    maybe_lookup,
    peek,
    read_named_values,
    release,
)
from .profiler import HANDLERS as _profiler_handlers

# "PJRT_<name>" -> handler; table.build_api wires each into its slot.
HANDLERS: dict = {}
# "PJRT_<name>" -> size of the args struct this plugin reads (the C
# trampoline calls the handler without the _sized wrapper when the caller's
# struct is at least that large).
ARGS_SIZES: dict = {}
# "PJRT_<name>" -> the struct_size of the first call whose args struct was
# smaller than ARGS_SIZES[name]: a caller built against an older pjrt_c_api.h
# (jaxlib 0.8/0.9 speak C API 0.80/0.90, this mirror 0.110). Only the _sized
# path sees those calls, so recording costs nothing on a current caller.
# docs/compatibility.md lists what each jaxlib line passes.
OLDER_CALLER_SIZES: dict = {}
# "PJRT_<name>" -> (getter, in_offset, ((out_offset, out_size), ...), constant):
# calls that read one object and write fields, served by the C trampoline
# through getter(handle) (see _shim.c, Slot); a constant getter's answer is
# cached in C until the handle is released.
GETTERS: dict = {}
# "PJRT_<name>" -> (fast, offsets): a C fast path of the call's common case
# (_shim.c, fast_execute), which calls fast() with the values it read.
FAST_PATHS: dict = {}


def handler(fn):
    name = "PJRT_" + fn.__name__
    cls = _ARGS.get(name)
    if cls is None:
        HANDLERS[name] = fn
    else:
        HANDLERS[name] = _sized(name, fn, C.struct_size(cls))
        ARGS_SIZES[name] = C.struct_size(cls)
    return fn


def getter(in_field, *out_fields, constant=False, live=0):
    """A handler for a call that only reads the object its args name in
    ``in_field`` and writes ``out_fields`` (none: a call such as a Destroy):
    the decorated ``fn(handle)`` returns the value of the out field (a tuple
    for several). The C
    trampoline calls it directly (no args struct built in Python); traced
    calls and callers with an older, smaller struct go through the plain
    handler made here, which does the same through ctypes.

    ``constant``: the answer never changes while the handle is live (jaxlib
    asks some of these on every Execute): the trampoline keeps it and
    answers later calls without Python, until ``handles.release``.

    ``live``: a buffer getter that the trampoline answers itself for the
    outputs of Execute's fast path while they are alive (_shim.c, g_live):
    1 for PJRT_Buffer_IsDeleted, 2 for PJRT_Buffer_ReadyEvent, 3 for
    PJRT_Buffer_Destroy (done in C, under the GIL, when nothing but the
    handle registry holds the buffer)."""
    def deco(fn):
        name = "PJRT_" + fn.__name__
        cls = _ARGS[name]

        def plain(ptr):
            a = cls.from_address(ptr)
            value = fn(getattr(a, in_field))
            if not out_fields:
                return
            if len(out_fields) == 1:
                setattr(a, out_fields[0], value)
            else:
                for field, v in zip(out_fields, value):
                    setattr(a, field, v)
        plain.__name__ = fn.__name__
        handler(plain)
        GETTERS[name] = (fn, getattr(cls, in_field).offset,
                         tuple((getattr(cls, f).offset, getattr(cls, f).size)
                               for f in out_fields), constant and bool(out_fields), live)
        return fn
    return deco


_ARGS = C.args_classes()
_ARGS["PJRT_AsyncTrackingEvent_Destroy"] = C.SimpleArgs  # args: the event only
_read_size = ctypes.c_size_t.from_address


def _sized(name, fn, size):
    """``fn`` under pjrt_c_api.h's struct_size rules. A caller built against an
    older header passes a smaller args struct: the handler works on a zeroed
    full-size copy (fields the caller does not know read as absent) and only
    the caller's bytes are copied back, so nothing is written past its struct.
    A larger struct is served in place (its extra fields are never touched).
    Arguments the shared readers refuse (_capi.BadArgument: a NULL array with
    a count, a size larger than any buffer) are INVALID_ARGUMENT naming the
    function; a MemoryError is RESOURCE_EXHAUSTED."""
    def run(ptr):
        try:
            return checked(ptr)
        except C.BadArgument as e:
            raise invalid_argument(f"{name}: {e}") from None
        except MemoryError:
            raise PjrtError(C.ErrorCode.RESOURCE_EXHAUSTED,
                            f"{name}: out of host memory") from None

    def checked(ptr):
        if not ptr:
            raise invalid_argument(f"{name}: the args pointer is NULL")
        n = _read_size(ptr).value
        if n >= size:
            return fn(ptr)
        if name not in OLDER_CALLER_SIZES:
            OLDER_CALLER_SIZES[name] = n
        if n < C.HEADER_SIZE:
            raise invalid_argument(
                f"{name}: args struct_size {n} is smaller than the struct header "
                f"(struct_size and extension_start, {C.HEADER_SIZE} bytes); this "
                f"plugin's {name}_Args has {size} bytes")
        buf = ctypes.create_string_buffer(size)
        ctypes.memmove(buf, ptr, n)
        try:
            return fn(ctypes.addressof(buf))
        finally:
            ctypes.memmove(ptr, buf, n)
    run.__name__ = fn.__name__
    run.__wrapped__ = fn
    return run


# ----------------------------------------------------------------------------
# Plugin
# ----------------------------------------------------------------------------

_plugin_attributes = None


@handler
def Plugin_Initialize(ptr):
    pass  # everything is set up lazily by Client_Create


@handler
def Plugin_Attributes(ptr):
    global _plugin_attributes
    a = C.Plugin_Attributes_Args.from_address(ptr)
    if _plugin_attributes is None:
        current, minimum = stablehlo_versions()
        attrs = {"xla_version": 2}
        if current:
            attrs["stablehlo_current_version"] = current
        if minimum:
            attrs["stablehlo_minimum_version"] = minimum
        _plugin_attributes = NamedValues(attrs)
    a.attributes = _plugin_attributes.address
    a.num_attributes = _plugin_attributes.count
    if trace.ENABLED:
        trace.note(attributes=_plugin_attributes.values)


# ----------------------------------------------------------------------------
# Client
# ----------------------------------------------------------------------------


@handler
def Client_Create(ptr):
    a = C.Client_Create_Args.from_address(ptr)
    options = read_named_values(a.create_options, a.num_options)
    try:
        import stablehlo_interpreter
        del stablehlo_interpreter  # imported to fail here, not at first compile
    except Exception as e:
        raise PjrtError(C.ErrorCode.FAILED_PRECONDITION,
                        f"the stablehlo_interpreter package cannot be imported: "
                        f"{type(e).__name__}: {e}") from None
    client = Client(options, _kv_store(a, options))
    a.client = client.handle
    if trace.ENABLED:
        trace.note(obj=client, options=options)


def _kv_store(a, options):
    """The caller's key-value store, read only for a client of several
    processes (num_nodes > 1): the callbacks are the caller's to leave
    unset otherwise. kv_try_get_* follow `client` in the struct: read only
    when the caller's struct_size covers them."""
    from .distributed import KvStore
    try:
        num_nodes = int(options.get("num_nodes", 1))
    except (TypeError, ValueError):
        return None  # Cluster.from_options reports the bad option
    if num_nodes <= 1 or not a.kv_get_callback or not a.kv_put_callback:
        return None
    try_get = try_get_arg = None
    end = C.Client_Create_Args.kv_try_get_user_arg.offset + ctypes.sizeof(ctypes.c_void_p)
    if a.struct_size >= end:
        try_get, try_get_arg = a.kv_try_get_callback, a.kv_try_get_user_arg
    return KvStore(a.kv_get_callback, a.kv_get_user_arg, a.kv_put_callback,
                   a.kv_put_user_arg, try_get, try_get_arg)


def _client(h) -> Client:
    return lookup(h, Client, "PJRT_Client")


@handler
def Client_Destroy(ptr):
    a = C.Client_Destroy_Args.from_address(ptr)
    if not a.client:
        return
    client = _client(a.client)
    client.destroyed = True
    release(a.client)
    if trace.ENABLED:
        trace.note(obj=client)


@getter("client", "platform_name", "platform_name_size", constant=True)
def Client_PlatformName(h):
    s = _client(h).name_c
    return s.address, s.size


@getter("client", "process_index", constant=True)
def Client_ProcessIndex(h):
    return _client(h).process_index


@getter("client", "platform_version", "platform_version_size", constant=True)
def Client_PlatformVersion(h):
    s = _client(h).version_c
    return s.address, s.size


@getter("client", "topology", constant=True)
def Client_TopologyDescription(h):
    return _client(h).topology.handle


@handler
def Client_Devices(ptr):
    a = C.Client_Devices_Args.from_address(ptr)
    c = _client(a.client)
    a.devices = c.all_devices_c[1]
    a.num_devices = len(c.all_devices)
    if trace.ENABLED:
        trace.note(obj=c, devices=[str(d) for d in c.all_devices])


@handler
def Client_AddressableDevices(ptr):
    a = C.Client_AddressableDevices_Args.from_address(ptr)
    c = _client(a.client)
    a.addressable_devices = c.devices_c[1]
    a.num_addressable_devices = len(c.devices)
    if trace.ENABLED:
        trace.note(obj=c, devices=[str(d) for d in c.devices])


@handler
def Client_LookupDevice(ptr):
    a = C.Client_LookupDevice_Args.from_address(ptr)
    a.device = _client(a.client).device_by_id(a.id).handle


@handler
def Client_LookupAddressableDevice(ptr):
    a = C.Client_LookupAddressableDevice_Args.from_address(ptr)
    a.addressable_device = _client(a.client).device_by_hardware_id(a.local_hardware_id).handle


@handler
def Client_AddressableMemories(ptr):
    a = C.Client_AddressableMemories_Args.from_address(ptr)
    c = _client(a.client)
    a.addressable_memories = c.memories_c[1]
    a.num_addressable_memories = len(c.memories)


@handler
def Client_UpdateGlobalProcessInfo(ptr):
    a = C.Client_UpdateGlobalProcessInfo_Args.from_address(ptr)
    _client(a.client)  # single process: nothing depends on other processes


@handler
def Client_DmaMap(ptr):
    a = C.Client_DmaMap_Args.from_address(ptr)
    _client(a.client)  # device memory is host memory: nothing to map


@handler
def Client_DmaUnmap(ptr):
    a = C.Client_DmaUnmap_Args.from_address(ptr)
    _client(a.client)


@handler
def Client_DefaultDeviceAssignment(ptr):
    a = C.Client_DefaultDeviceAssignment_Args.from_address(ptr)
    c = _client(a.client)
    r, p = a.num_replicas, a.num_partitions
    if r < 1 or p < 1:
        raise invalid_argument(f"invalid replica/partition counts {r}x{p}")
    if not a.default_assignment:
        raise invalid_argument("default_assignment is NULL")
    if a.default_assignment_size < r * p:
        # FAILED_PRECONDITION, as XLA's C API test of this case asks.
        raise failed_precondition(
            f"default_assignment has room for {a.default_assignment_size} ids, "
            f"{r * p} needed")
    flat = [d for row in c.default_assignment(r, p) for d in row]
    (ctypes.c_int * len(flat)).from_address(a.default_assignment)[:] = flat


@handler
def Client_BufferFromHostBuffer(ptr):
    a = C.Client_BufferFromHostBuffer_Args.from_address(ptr)
    client = _client(a.client)
    device, memory = device_and_memory(client, a.device, a.memory)
    dims = C.read_dims(a.dims, a.num_dims)
    strides = (C.read_int64s(a.byte_strides, a.num_byte_strides, "byte_strides")
               if a.num_byte_strides else None)
    # A device layout other than dense major-to-minor only changes how an
    # accelerator would store the data; numpy storage is always logical.
    buf, done = buffer_from_host(client, a.data, a.type, dims, strides,
                                 a.host_buffer_semantics, device, memory)
    a.buffer = buf.handle
    a.done_with_host_buffer = done
    if trace.ENABLED:
        trace.note(obj=client, result=str(buf), semantics=a.host_buffer_semantics,
                   value=preview(buf))


@handler
def Client_CreateUninitializedBuffer(ptr):
    a = C.Client_CreateUninitializedBuffer_Args.from_address(ptr)
    client = _client(a.client)
    device, memory = device_and_memory(client, a.device, a.memory)
    dims = C.read_dims(a.shape_dims, a.shape_num_dims, "shape_dims")
    array = np.zeros(dims, dtype_of(a.shape_element_type))
    buf = Buffer(array, a.shape_element_type, device, memory)
    a.buffer = buf.handle


@handler
def Client_CreateErrorBuffer(ptr):
    a = C.Client_CreateErrorBuffer_Args.from_address(ptr)
    client = _client(a.client)
    device, memory = device_and_memory(client, None, a.memory)
    dims = tuple(C.read_dims(a.shape_dims, a.shape_num_dims, "shape_dims"))
    message = C.read_str(a.error_message, a.error_message_size, "error_message")
    _error_code(a.error_code)
    if a.shape_element_type != C.BufferType.TOKEN:
        dtype_of(a.shape_element_type)  # a known element type
    buf = Buffer(None, a.shape_element_type, device, memory,
                 error=(a.error_code, message), shape=dims)
    a.buffer = buf.handle


@handler
def Client_CreateViewOfDeviceBuffer(ptr):
    a = C.Client_CreateViewOfDeviceBuffer_Args.from_address(ptr)
    client = _client(a.client)
    memory_h = a.memory if a.struct_size >= C.struct_size(C.Client_CreateViewOfDeviceBuffer_Args) else None
    device, memory = device_and_memory(client, a.device, memory_h)
    dims = tuple(C.read_dims(a.dims, a.num_dims))
    callback = a.on_delete_callback
    user_arg = a.on_delete_callback_arg
    device_ptr = a.device_buffer_ptr
    on_free = None
    if callback:
        fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(callback)

        def run_on_delete(fn=fn):
            fn(device_ptr, user_arg)
        on_free = run_on_delete
    buf = view_of_memory(device_ptr, a.element_type, dims, a.layout, on_free, device, memory)
    a.buffer = buf.handle
    if trace.ENABLED:
        trace.note(obj=client, result=str(buf), zero_copy=buf.borrowed, value=preview(buf))


@handler
@interrupt.cancel_on_interrupt("compilation")
def Client_Compile(ptr):
    a = C.Client_Compile_Args.from_address(ptr)
    client = _client(a.client)
    meta = compile_args(a.program, a.compile_options, a.compile_options_size)
    exe = LoadedExecutable(client, meta)
    a.executable = exe.handle
    if trace.ENABLED:
        trace.note(obj=client, result=str(exe), module=meta.program.text)


@handler
@interrupt.cancel_on_interrupt("loading an executable")
def Client_Load(ptr):
    a = C.Client_Load_Args.from_address(ptr)
    client = _client(a.client)
    exe = lookup(a.executable, Executable, "PJRT_Executable")
    meta = exe.meta
    if a.compile_options_size:
        options = CompileOptions(C.read_bytes(a.compile_options, a.compile_options_size))
        if options.serialized != meta.options.serialized:
            meta = compile_program(meta.code, meta.format, options)
    loaded = LoadedExecutable(client, meta)
    a.loaded_executable = loaded.handle


# ----------------------------------------------------------------------------
# Device descriptions, devices, memories
# ----------------------------------------------------------------------------


def _description(h) -> DeviceDescription:
    return lookup(h, DeviceDescription, "PJRT_DeviceDescription")


@getter("device_description", "id", constant=True)
def DeviceDescription_Id(h):
    return _description(h).id


@getter("device_description", "process_index", constant=True)
def DeviceDescription_ProcessIndex(h):
    return _description(h).process_index


@handler
def DeviceDescription_Attributes(ptr):
    a = C.DeviceDescription_Attributes_Args.from_address(ptr)
    d = _description(a.device_description)
    a.attributes = d.attrs_c.address
    a.num_attributes = d.attrs_c.count


@getter("device_description", "device_kind", "device_kind_size", constant=True)
def DeviceDescription_Kind(h):
    s = _description(h).kind_c
    return s.address, s.size


@getter("device_description", "debug_string", "debug_string_size", constant=True)
def DeviceDescription_DebugString(h):
    s = _description(h).debug_string_c
    return s.address, s.size


@getter("device_description", "to_string", "to_string_size", constant=True)
def DeviceDescription_ToString(h):
    s = _description(h).to_string_c
    return s.address, s.size


def _device(h) -> Device:
    return lookup(h, Device, "PJRT_Device")


@getter("device", "device_description", constant=True)
def Device_GetDescription(h):
    return _device(h).description.handle


@getter("device", "is_addressable", constant=True)
def Device_IsAddressable(h):
    return _device(h).addressable


@getter("device", "local_hardware_id", constant=True)
def Device_LocalHardwareId(h):
    return _device(h).local_hardware_id


@handler
def Device_AddressableMemories(ptr):
    a = C.Device_AddressableMemories_Args.from_address(ptr)
    d = _device(a.device)
    a.memories = d.memories_c[1]
    a.num_memories = len(d.memories)


@getter("device", "memory", constant=True)
def Device_DefaultMemory(h):
    return _device(h).default_memory.handle


@handler
def Device_MemoryStats(ptr):
    a = C.Device_MemoryStats_Args.from_address(ptr)
    d = _device(a.device)
    values = {name: False for name, _ in a._fields_ if name.endswith("_is_set")}
    values.update(d.memory_stats(), peak_bytes_in_use_is_set=True, num_allocs_is_set=True,
                  largest_alloc_size_is_set=True)
    for field, value in values.items():
        setattr(a, field, value)


@handler
def Device_ClearMemoryStats(ptr):
    a = C.Device_ClearMemoryStats_Args.from_address(ptr)
    _device(a.device).clear_memory_stats()


@handler
def Device_GetAttributes(ptr):
    a = C.Device_GetAttributes_Args.from_address(ptr)
    d = _device(a.device)
    # The attributes are owned by the device; the caller's deleter has
    # nothing to free.
    a.attributes = d.description.attrs_c.address
    a.num_attributes = d.description.attrs_c.count
    a.device_attributes = None
    a.attributes_deleter = c_helper("noop_deleter")


@handler
def Device_PoisonExecution(ptr):
    a = C.Device_PoisonExecution_Args.from_address(ptr)
    d = _device(a.device)
    code = _error_code(a.error_code)
    message = C.read_str(a.error_message, a.error_message_size, "error_message")
    # Fails the earliest queued (not yet started) run with this launch id on
    # the device (dispatch.poison); one that runs or has finished is not.
    a.poisoned = dispatch.poison(d, a.launch_id, code, message)


@handler
def Device_CreateAsyncTrackingEvent(ptr):
    a = C.Device_CreateAsyncTrackingEvent_Args.from_address(ptr)
    d = _device(a.device)
    ev = AsyncTrackingEvent(d, C.read_str(a.description, a.description_size))
    a.event = ev.handle


@handler
def AsyncTrackingEvent_Destroy(ptr):
    args = C.SimpleArgs.from_address(ptr)
    if args.obj:
        lookup(args.obj, AsyncTrackingEvent)
        release(args.obj)


def _memory(h) -> Memory:
    return lookup(h, Memory, "PJRT_Memory")


@getter("memory", "id", constant=True)
def Memory_Id(h):
    return _memory(h).id


@getter("memory", "kind", "kind_size", constant=True)
def Memory_Kind(h):
    kind = _memory(h).kind_c
    return kind.address, kind.size


@getter("memory", "kind_id", constant=True)
def Memory_Kind_Id(h):
    return _memory(h).kind_id


@getter("memory", "debug_string", "debug_string_size", constant=True)
def Memory_DebugString(h):
    s = _memory(h).debug_string_c
    return s.address, s.size


@getter("memory", "to_string", "to_string_size", constant=True)
def Memory_ToString(h):
    s = _memory(h).to_string_c
    return s.address, s.size


@handler
def Memory_AddressableByDevices(ptr):
    a = C.Memory_AddressableByDevices_Args.from_address(ptr)
    m = _memory(a.memory)
    a.devices = m.devices_array()[1]
    a.num_devices = len(m.devices)


# ----------------------------------------------------------------------------
# Execute contexts
# ----------------------------------------------------------------------------


@handler
def ExecuteContext_Create(ptr):
    a = C.ExecuteContext_Create_Args.from_address(ptr)
    a.context = ExecuteContext().handle


@handler
def ExecuteContext_Destroy(ptr):
    a = C.ExecuteContext_Destroy_Args.from_address(ptr)
    if a.context:
        lookup(a.context, ExecuteContext)
        release(a.context)


# ----------------------------------------------------------------------------
# Executables
# ----------------------------------------------------------------------------


def _executable(h):
    return lookup(h, Executable, "PJRT_Executable").meta


def _loaded(h) -> LoadedExecutable:
    return lookup(h, LoadedExecutable, "PJRT_LoadedExecutable")


@handler
def Executable_Destroy(ptr):
    a = C.Executable_Destroy_Args.from_address(ptr)
    if a.executable:
        lookup(a.executable, Executable, "PJRT_Executable")
        release(a.executable)


@handler
def Executable_Name(ptr):
    a = C.Executable_Name_Args.from_address(ptr)
    name = _executable(a.executable).name_c()
    a.executable_name = name.address
    a.executable_name_size = name.size


@getter("executable", "num_replicas", constant=True)
def Executable_NumReplicas(h):
    return _executable(h).num_replicas


@getter("executable", "num_partitions", constant=True)
def Executable_NumPartitions(h):
    return _executable(h).num_partitions


@getter("executable", "num_outputs", constant=True)
def Executable_NumOutputs(h):
    return _executable(h).num_outputs


@handler
def Executable_SizeOfGeneratedCodeInBytes(ptr):
    a = C.Executable_SizeOfGeneratedCodeInBytes_Args.from_address(ptr)
    a.size_in_bytes = len(_executable(a.executable).code)


@handler
def Executable_GetCostAnalysis(ptr):
    a = C.Executable_GetCostAnalysis_Args.from_address(ptr)
    _executable(a.executable)
    # The interpreter has no cost model: an empty property list is the
    # truthful answer.
    a.num_properties = 0
    a.properties = None


@handler
def Executable_GetCompiledMemoryStats(ptr):
    a = C.Executable_GetCompiledMemoryStats_Args.from_address(ptr)
    meta = _executable(a.executable)
    values = {name: 0 for name, _ in a._fields_[3:]}
    values.update(generated_code_size_in_bytes=len(meta.code),
                  argument_size_in_bytes=meta.argument_bytes(),
                  output_size_in_bytes=meta.output_bytes(),
                  total_size_in_bytes=meta.argument_bytes() + meta.output_bytes())
    for field, value in values.items():
        setattr(a, field, value)


@handler
def Executable_OutputElementTypes(ptr):
    a = C.Executable_OutputElementTypes_Args.from_address(ptr)
    meta = _executable(a.executable)
    a.output_types = meta.output_types_address()
    a.num_output_types = meta.num_outputs


@handler
def Executable_OutputDimensions(ptr):
    a = C.Executable_OutputDimensions_Args.from_address(ptr)
    meta = _executable(a.executable)
    a.num_outputs = meta.num_outputs
    a.dims, a.dim_sizes = meta.output_dims_addresses()


@handler
def Executable_OutputMemoryKinds(ptr):
    a = C.Executable_OutputMemoryKinds_Args.from_address(ptr)
    meta = _executable(a.executable)
    a.num_outputs = meta.num_outputs
    a.memory_kinds, a.memory_kind_sizes = meta.memory_kinds_addresses()


@handler
def Executable_ParameterMemoryKinds(ptr):
    a = C.Executable_ParameterMemoryKinds_Args.from_address(ptr)
    meta = _executable(a.executable)
    a.num_parameters = len(meta.input_types)
    a.memory_kinds, a.memory_kind_sizes = meta.memory_kinds_addresses("in")


@getter("executable", "executable_fingerprint", "executable_fingerprint_size", constant=True)
def Executable_Fingerprint(h):
    s = _executable(h).fingerprint_c
    return s.address, s.size


@getter("executable", "executable_fingerprint", "executable_fingerprint_size", constant=True)
def LoadedExecutable_Fingerprint(h):
    s = _loaded(h).meta.fingerprint_c
    return s.address, s.size


@handler
def Executable_OptimizedProgram(ptr):
    a = C.Executable_OptimizedProgram_Args.from_address(ptr)
    meta = _executable(a.executable)
    if not a.program:
        raise invalid_argument("program is NULL")
    program = C.PJRT_Program.from_address(a.program)
    # The interpreter runs the StableHLO it was given, unoptimized: that
    # program is the "optimized" one, handed out as the HloModuleProto it
    # converts to (ExecutableMeta.optimized_program).
    fmt_c, code = meta.optimized_program()
    program.format = fmt_c.address
    program.format_size = fmt_c.size
    if not program.code:
        program.code_size = len(code)
        return
    if program.code_size < len(code):
        raise invalid_argument(
            f"program buffer has {program.code_size} bytes, {len(code)} needed")
    ctypes.memmove(program.code, code, len(code))
    program.code_size = len(code)


@handler
def Shardings_PJRT_Executable_ParameterShardings(ptr):
    a = C.Shardings_ParameterShardings_Args.from_address(ptr)
    meta = _executable(a.executable)
    a.num_parameters, a.shardings, a.sharding_sizes = meta.shardings_addresses("in")


@handler
def Shardings_PJRT_Executable_OutputShardings(ptr):
    a = C.Shardings_OutputShardings_Args.from_address(ptr)
    meta = _executable(a.executable)
    a.num_outputs, a.shardings, a.sharding_sizes = meta.shardings_addresses("out")


@handler
def Executable_Serialize(ptr):
    a = C.Executable_Serialize_Args.from_address(ptr)
    meta = _executable(a.executable)
    data = meta.serialize()
    blob, addr = c_blob(data)
    a.serialized_bytes = addr
    a.serialized_bytes_size = len(data)
    a.serialized_executable = blob
    a.serialized_executable_deleter = c_helper("blob_free")


@handler
def Executable_GetCompileOptions(ptr):
    a = C.Executable_GetCompileOptions_Args.from_address(ptr)
    meta = _executable(a.executable)
    data = meta.options.serialized
    blob, addr = c_blob(data)
    a.serialized_bytes = addr
    a.serialized_bytes_size = len(data)
    a.serialized_compile_options = blob
    a.serialized_compile_options_deleter = c_helper("blob_free")


@handler
@interrupt.cancel_on_interrupt("loading a serialized executable")
def Executable_DeserializeAndLoad(ptr):
    a = C.Executable_DeserializeAndLoad_Args.from_address(ptr)
    client = _client(a.client)
    fmt, options_bytes, code = parse_serialized(
        C.read_bytes(a.serialized_executable, a.serialized_executable_size))
    if a.struct_size >= C.struct_size(C.Executable_DeserializeAndLoad_Args) and \
            (a.overridden_serialized_compile_options or
             a.overridden_serialized_compile_options_size):
        options_bytes = C.read_bytes(a.overridden_serialized_compile_options,
                                     a.overridden_serialized_compile_options_size,
                                     "overridden_serialized_compile_options")
    # The serialized form is the program itself: "loading" recompiles it.
    meta = compile_program(code, fmt, CompileOptions(options_bytes))
    a.loaded_executable = LoadedExecutable(client, meta).handle


@handler
def LoadedExecutable_Destroy(ptr):
    a = C.LoadedExecutable_Destroy_Args.from_address(ptr)
    if a.executable:
        exe = _loaded(a.executable)
        exe.deleted = True
        release(a.executable)
        if trace.ENABLED:
            trace.note(obj=exe)


@handler
def LoadedExecutable_GetExecutable(ptr):
    a = C.LoadedExecutable_GetExecutable_Args.from_address(ptr)
    a.executable = Executable(_loaded(a.loaded_executable).meta).handle


@handler
def LoadedExecutable_AddressableDevices(ptr):
    a = C.LoadedExecutable_AddressableDevices_Args.from_address(ptr)
    exe = _loaded(a.executable)
    a.addressable_devices = exe.devices_c[1]
    a.num_addressable_devices = len(exe.devices)


@handler
def LoadedExecutable_AddressableDeviceLogicalIds(ptr):
    a = C.LoadedExecutable_AddressableDeviceLogicalIds_Args.from_address(ptr)
    exe = _loaded(a.executable)
    a.addressable_device_logical_ids = ctypes.addressof(exe.logical_ids_c)
    a.num_addressable_device_logical_ids = len(exe.logical_ids)


@handler
def LoadedExecutable_GetDeviceAssignment(ptr):
    a = C.LoadedExecutable_GetDeviceAssignment_Args.from_address(ptr)
    exe = _loaded(a.executable)
    blob, addr = c_blob(exe.assignment_bytes)
    a.serialized_bytes = addr
    a.serialized_bytes_size = len(exe.assignment_bytes)
    a.serialized_device_assignment = blob
    a.serialized_device_assignment_deleter = c_helper("blob_free")


@handler
def LoadedExecutable_Delete(ptr):
    a = C.LoadedExecutable_Delete_Args.from_address(ptr)
    _loaded(a.executable).deleted = True


@getter("executable", "is_deleted")
def LoadedExecutable_IsDeleted(h):
    return _loaded(h).deleted


_P = ctypes.c_void_p


def _pointer_lists(address, outer: int, inner: int, what: str) -> list[list]:
    """``outer`` arrays of ``inner`` pointers each (Execute's argument
    lists), as ints: a NULL list or absurd count is INVALID_ARGUMENT before
    anything is read (the checks of the checked readers, ``_capi``); the
    reading is one C loop (``_shim.read_pointer_lists``)."""
    C.check_array(address, outer, 8, what)
    C.check_array(1, inner, 8, f"{what}[k]")  # the count alone
    try:
        return _shim.read_pointer_lists(address or 0, outer, inner)
    except ValueError as e:  # a NULL list with a count
        raise C.BadArgument(f"{what}: {e} but its count is {inner}") from None


def _output_lists(address, outer: int, num_outputs: int) -> None:
    """Checks Execute's output lists: ``outer`` destinations, non-NULL
    unless the program has no outputs (jaxlib passes NULL lists then: a pmap
    of jax.debug.print with no results). ``_shim.write_pointer_lists``
    writes them."""
    lists = C.read_pointers(address, outer, "output_lists")
    if num_outputs and not all(lists):
        raise invalid_argument("an output list (output_lists[k]) is NULL")


def _error_code(code: int) -> int:
    """A PJRT_Error_Code other than OK (1-16), as a caller must give for an error."""
    if not 1 <= code <= 16:
        raise invalid_argument(f"error code {code} is not a PJRT_Error_Code other than OK "
                               "(1-16)")
    return code


@handler
def LoadedExecutable_Execute(ptr):
    a = C.LoadedExecutable_Execute_Args.from_address(ptr)
    exe = _loaded(a.executable)
    num_devices = a.num_devices
    num_args = a.num_args
    if a.options:
        opts = C.read_sized(C.PJRT_ExecuteOptions, a.options)
        if opts is None:
            raise invalid_argument("PJRT_ExecuteOptions.struct_size is smaller than its header")
        if opts.num_send_ops or opts.num_recv_ops:
            raise unimplemented("send/recv callbacks are not supported by stablehlo_ref")
        non_donatable = set(C.read_int64s(opts.non_donatable_input_indices,
                                          opts.num_non_donatable_input_indices,
                                          "non_donatable_input_indices"))
        launch_id = opts.launch_id
    else:
        non_donatable = ()
        launch_id = 0
    execute_device = maybe_lookup(a.execute_device, Device) if a.execute_device else None
    argument_lists = [[lookup(h, Buffer, "PJRT_Buffer") for h in handles]
                      for handles in _pointer_lists(a.argument_lists, num_devices, num_args,
                                                    "argument_lists")]
    _output_lists(a.output_lists, num_devices, exe.meta.num_outputs)
    outputs = exe.execute(argument_lists, execute_device, non_donatable, launch_id)
    _shim.write_pointer_lists(a.output_lists, [[b.handle for b in outs] for outs in outputs])
    events = a.device_complete_events
    if events:
        # Complete when the run has finished (at once for an inline run).
        done = outputs.completion
        if done is None:
            _shim.ready_events(events, num_devices)
        else:
            (_P * num_devices).from_address(events)[:] = [
                done.c_event() for _ in range(num_devices)]
    if trace.ENABLED:
        trace.note(obj=exe,
                   inputs=[[describe_with_value(b) for b in args] for args in argument_lists],
                   outputs=[[describe_with_value(b) for b in outs] for outs in outputs],
                   dispatch="inline" if outputs.completion is None
                   else f"queued ({outputs.queued} in flight)")
    if outputs.interrupted:
        interrupt.rearm_interrupt()  # last: KeyboardInterrupt in the caller


def _execute_fast(executable: int, arguments: tuple[int, ...]):
    """LoadedExecutable_Execute's common case, called by the C trampoline
    (_shim.c, fast_execute) with the executable's handle and one device's
    argument handles, read without ctypes: LoadedExecutable.execute_fast's
    answer (None: the call needs the handler above, which then does all of
    it)."""
    exe = peek(executable)
    if type(exe) is not LoadedExecutable:
        return None
    return exe.execute_fast(arguments)


def _execute_fast_offsets() -> tuple[int, ...]:
    a, o = C.LoadedExecutable_Execute_Args, C.PJRT_ExecuteOptions
    return (a.executable.offset, a.options.offset, a.argument_lists.offset,
            a.num_devices.offset, a.num_args.offset, a.output_lists.offset,
            a.device_complete_events.offset, a.execute_device.offset,
            o.num_non_donatable_input_indices.offset + ctypes.sizeof(ctypes.c_size_t),
            o.num_send_ops.offset, o.num_recv_ops.offset,
            o.num_non_donatable_input_indices.offset)


FAST_PATHS["PJRT_LoadedExecutable_Execute"] = (_execute_fast, _execute_fast_offsets())


# ----------------------------------------------------------------------------
# Buffers
# ----------------------------------------------------------------------------


def _buffer(h) -> Buffer:
    return lookup(h, Buffer, "PJRT_Buffer")


@getter("buffer", live=3)
def Buffer_Destroy(h):
    buf = peek(h)
    if buf.__class__ is not Buffer:  # (the hot path: one lookup, checked here)
        if not h:
            return
        buf = _buffer(h)
    buf.destroy()  # (releases the handle)
    if trace.ENABLED:
        trace.note(obj=buf)


@getter("buffer", "type", constant=True)
def Buffer_ElementType(h):
    return _buffer(h).type


@getter("buffer", "dims", "num_dims", constant=True)
def Buffer_Dimensions(h):
    buf = _buffer(h)
    return buf.dims_array(), len(buf.shape)


@getter("buffer", "unpadded_dims", "num_dims", constant=True)
def Buffer_UnpaddedDimensions(h):
    buf = _buffer(h)
    return buf.dims_array(), len(buf.shape)


@getter("buffer", "dynamic_dim_indices", "num_dynamic_dims")
def Buffer_DynamicDimensionIndices(h):
    _buffer(h)
    return None, 0


@handler
def Buffer_GetMemoryLayout(ptr):
    a = C.Buffer_GetMemoryLayout_Args.from_address(ptr)
    layout = _buffer(a.buffer).layout()
    ctypes.memmove(ctypes.addressof(a.layout), ctypes.addressof(layout),
                   ctypes.sizeof(layout))


@getter("buffer", "on_device_size_in_bytes")
def Buffer_OnDeviceSizeInBytes(h):
    buf = _buffer(h)
    buf.check_alive()  # the size of a pending output is known: no wait
    return buf.nbytes


@getter("buffer", "device", constant=True)
def Buffer_Device(h):
    return _buffer(h).device.handle


@getter("buffer", "memory", constant=True)
def Buffer_Memory(h):
    return _buffer(h).memory.handle


@handler
def Buffer_Delete(ptr):
    a = C.Buffer_Delete_Args.from_address(ptr)
    buf = _buffer(a.buffer)
    buf.delete()
    if trace.ENABLED:
        trace.note(obj=buf)


@getter("buffer", "is_deleted", live=1)
def Buffer_IsDeleted(h):
    return _buffer(h).deleted


@getter("buffer", "is_on_cpu")
def Buffer_IsOnCpu(h):
    _buffer(h)
    # Every memory of a stablehlo_ref device is host memory. Saying so lets
    # jaxlib alias it as it does XLA CPU's: np.asarray(x) and memoryview(x)
    # become zero-copy read-only views that hold an external reference (see
    # Buffer.delete and donation.py for what such a reference guarantees;
    # taking one waits for a pending output's data).
    return True


@handler
def Buffer_CopyToDevice(ptr):
    a = C.Buffer_CopyToDevice_Args.from_address(ptr)
    buf = _buffer(a.buffer)
    device = _device(a.dst_device)
    # A copy onto the buffer's own device is a copy (jaxlib asks for one when
    # a transform moves an array where it already is), as on XLA CPU.
    new = copy_buffer(buf, device, device.default_memory)
    a.dst_buffer = new.handle
    if trace.ENABLED:
        trace.note(obj=buf, result=str(new))


@handler
def Buffer_CopyToMemory(ptr):
    a = C.Buffer_CopyToMemory_Args.from_address(ptr)
    buf = _buffer(a.buffer)
    memory = _memory(a.dst_memory)
    new = copy_buffer(buf, memory.devices[0], memory)  # its own memory too: a copy
    a.dst_buffer = new.handle
    if trace.ENABLED:
        trace.note(obj=buf, result=str(new))


@handler
def Buffer_ToHostBuffer(ptr):
    a = C.Buffer_ToHostBuffer_Args.from_address(ptr)
    buf = _buffer(a.src)
    # A pending buffer's copy is chained on its program (buffer.to_host).
    needed, event = to_host(buf, a.dst, a.dst_size, a.host_layout)
    if not a.dst:
        a.dst_size = needed
        a.event = None
    else:
        a.event = event
    if trace.ENABLED:
        trace.note(obj=buf, dst=f"{a.dst or 0:#x}", dst_size=a.dst_size,
                   value=preview(buf) if a.dst else "(size query)")


@handler
def Buffer_CopyRawToHost(ptr):
    a = C.Buffer_CopyRawToHost_Args.from_address(ptr)
    buf = _buffer(a.buffer)
    array = buf.live_array()
    raw = memoryview(np.ascontiguousarray(array)).cast("B") if buf.nbytes else memoryview(b"")
    if a.offset < 0 or a.transfer_size < 0 or a.offset + a.transfer_size > len(raw):
        raise invalid_argument(
            f"raw copy of [{a.offset}, {a.offset + a.transfer_size}) is outside the "
            f"{len(raw)} bytes of {buf}")
    if a.transfer_size:
        C.check_array(a.dst, a.transfer_size, 1, "dst")
        ctypes.memmove(a.dst, bytes(raw[a.offset:a.offset + a.transfer_size]), a.transfer_size)
    a.event = _shim.event_new(True)


@getter("buffer", "event", live=2)
def Buffer_ReadyEvent(h):
    buf = _buffer(h)
    # A pending output's event completes when its program has run (with the
    # run's error if it failed); deleted and error buffers report their
    # error, as the header asks.
    try:
        buf.check_alive()
        ready = buf.ready
        if ready is not None and not ready.done:
            if dispatch.on_worker():
                # A host callback asking for data queued behind its own
                # program: refused (dispatch.wait raises), never a hang.
                dispatch.wait(ready, str(buf))
            ready.asked()
            event = ready.c_event()
        else:
            event = ready_event()
    except PjrtError as e:
        event = ready_event(e)
    if trace.ENABLED:
        trace.note(obj=buf)
    return event


@handler
def Buffer_UnsafePointer(ptr):
    a = C.Buffer_UnsafePointer_Args.from_address(ptr)
    buf = _buffer(a.buffer)
    array = buf.live_array()
    a.buffer_pointer = array.ctypes.data if buf.nbytes else 0


@handler
def Buffer_OpaqueDeviceMemoryDataPointer(ptr):
    a = C.Buffer_OpaqueDeviceMemoryDataPointer_Args.from_address(ptr)
    buf = _buffer(a.buffer)
    array = buf.live_array()
    a.device_memory_ptr = array.ctypes.data if buf.nbytes else None


@handler
def Buffer_IncreaseExternalReferenceCount(ptr):
    a = C.Buffer_IncreaseExternalReferenceCount_Args.from_address(ptr)
    _buffer(a.buffer).add_external_reference()


@handler
def Buffer_DecreaseExternalReferenceCount(ptr):
    a = C.Buffer_DecreaseExternalReferenceCount_Args.from_address(ptr)
    _buffer(a.buffer).release_external_reference()


@handler
def Buffer_Bitcast(ptr):
    a = C.Buffer_Bitcast_Args.from_address(ptr)
    buf = _buffer(a.buffer)
    array = buf.live_array()
    dims = tuple(C.read_dims(a.dims, a.num_dims))
    new_dtype = dtype_of(a.element_type)
    nbytes = int(np.prod(dims, dtype=np.int64)) * new_dtype.itemsize
    if nbytes != buf.nbytes:
        raise invalid_argument(
            f"cannot bitcast {buf.describe()} ({buf.nbytes} bytes) to "
            f"{short_type(a.element_type)}{list(dims)} ({nbytes} bytes)")
    if buf.borrowed:
        array = array.copy()
    out = np.ascontiguousarray(array).reshape(-1).view(np.uint8).view(new_dtype).reshape(dims)
    new = Buffer(out, a.element_type, buf.device, buf.memory)
    a.out_buffer = new.handle


# ----------------------------------------------------------------------------
# Topology and compile-without-client
# ----------------------------------------------------------------------------


def _topology(h) -> Topology:
    return lookup(h, Topology, "PJRT_TopologyDescription")


@handler
def TopologyDescription_Create(ptr):
    a = C.TopologyDescription_Create_Args.from_address(ptr)
    # Checked like every caller string, though any name gives the one topology.
    C.read_str(a.topology_name, a.topology_name_size, "topology_name")
    options = read_named_values(a.create_options, a.num_options)
    a.topology = Topology(configured_num_devices(options)).handle


@handler
def TopologyDescription_Destroy(ptr):
    a = C.TopologyDescription_Destroy_Args.from_address(ptr)
    if not a.topology:
        return
    topo = _topology(a.topology)
    if not topo.owned_by_client:  # the client's own topology lives with it
        release(a.topology)


@getter("topology", "platform_name", "platform_name_size", constant=True)
def TopologyDescription_PlatformName(h):
    s = _topology(h).name_c
    return s.address, s.size


@getter("topology", "platform_version", "platform_version_size", constant=True)
def TopologyDescription_PlatformVersion(h):
    s = _topology(h).version_c
    return s.address, s.size


@handler
def TopologyDescription_GetDeviceDescriptions(ptr):
    a = C.TopologyDescription_GetDeviceDescriptions_Args.from_address(ptr)
    t = _topology(a.topology)
    a.descriptions = t.descriptions_c[1]
    a.num_descriptions = len(t.descriptions)


@handler
def TopologyDescription_Attributes(ptr):
    a = C.TopologyDescription_Attributes_Args.from_address(ptr)
    t = _topology(a.topology)
    a.attributes = t.attrs_c.address
    a.num_attributes = t.attrs_c.count


@handler
def TopologyDescription_Serialize(ptr):
    a = C.TopologyDescription_Serialize_Args.from_address(ptr)
    t = _topology(a.topology)
    blob, addr = c_blob(t.serialized)
    a.serialized_bytes = addr
    a.serialized_bytes_size = len(t.serialized)
    a.serialized_topology = blob
    a.serialized_topology_deleter = c_helper("blob_free")


@handler
def TopologyDescription_Deserialize(ptr):
    a = C.TopologyDescription_Deserialize_Args.from_address(ptr)
    data = C.read_bytes(a.serialized_topology, a.serialized_topology_size)
    a.topology = Topology.deserialize(data).handle


@getter("topology", "fingerprint", constant=True)
def TopologyDescription_Fingerprint(h):
    return _topology(h).fingerprint


@handler
@interrupt.cancel_on_interrupt("compilation")
def Compile(ptr):
    a = C.Compile_Args.from_address(ptr)
    _topology(a.topology)
    if a.client:
        _client(a.client)  # optional; if given it must be one of ours
    meta = compile_args(a.program, a.compile_options, a.compile_options_size)
    a.executable = Executable(meta).handle
    if trace.ENABLED:
        trace.note(module=meta.program.text)


# The profiler extension's calls (profiler.py), wired by table.py like these.
HANDLERS.update(_profiler_handlers)
