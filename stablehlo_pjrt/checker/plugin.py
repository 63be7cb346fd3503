"""Any PJRT plugin, loaded by path and driven through its C API with ctypes.

This is the framework's side of the PJRT C API (what jaxlib's C++ does),
written in Python over the project's ctypes mirror (``stablehlo_pjrt._capi``)
so that the checker can call every function of a foreign plugin directly, with
chosen struct sizes and chosen bad arguments, and see each error code.

Struct sizes (pjrt_c_api.h): every argument struct starts with
``struct_size``, which the caller sets to the size of the struct *it* was
compiled against; newer headers only append fields.  A plugin must accept a
larger struct (from a newer caller) and must not read or write past the size
it is given; a plugin built against a newer header than the caller's must
either cope with the smaller struct or return an error (XLA's plugins return
INVALID_ARGUMENT through ``ActualStructSizeIsGreaterOrEqual``).  Likewise the
``PJRT_Api`` table itself has a ``struct_size``: function slots past it do not
exist in that plugin (an older minor version), and :meth:`Plugin.has` says so
instead of reading past the table.
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import c_bool, c_int, c_void_p
from typing import Iterable, TypeVar

import numpy as np

from .. import _capi as C
from .. import compat

FN = ctypes.CFUNCTYPE(c_void_p, c_void_p)

# Args structs the mirror does not declare (the project's own plugin handles
# errors and events in C, so it never needed them from Python).
Error_Destroy_Args = C._args("PJRT_Error_Destroy_Args", [("error", C.P)])
Error_Message_Args = C._args("PJRT_Error_Message_Args", [
    ("error", C.P), ("message", C.P), ("message_size", C.SIZE)])
Error_GetCode_Args = C._args("PJRT_Error_GetCode_Args", [
    ("error", C.P), ("code", C.ENUM)])
Event_Destroy_Args = C._args("PJRT_Event_Destroy_Args", [("event", C.P)])
Event_IsReady_Args = C._args("PJRT_Event_IsReady_Args", [
    ("event", C.P), ("is_ready", c_bool)])
Event_Error_Args = C._args("PJRT_Event_Error_Args", [("event", C.P)])
Event_Await_Args = C._args("PJRT_Event_Await_Args", [("event", C.P)])
Event_OnReady_Args = C._args("PJRT_Event_OnReady_Args", [
    ("event", C.P), ("callback", C.P), ("user_arg", C.P)])
ON_READY = ctypes.CFUNCTYPE(None, c_void_p, c_void_p)

S = TypeVar("S", bound=ctypes.Structure)

ERROR_NAMES = {v: k for k, v in vars(C.ErrorCode).items() if not k.startswith("_")}

# PJRT_Buffer_Type -> numpy dtype of the types a host array holds one element
# per byte-aligned slot. The checker keeps its own table (it must work for any
# plugin, so it does not borrow the reference plugin's). Sub-byte types
# (S1/U1, S2/U2, S4/U4, F4E2M1FN) are left out: some plugins transfer them
# packed and others unpacked, so the checker widens them inside programs.
def _dtype_table() -> dict[int, np.dtype]:
    import ml_dtypes
    T = C.BufferType
    named = {T.PRED: np.bool_, T.S8: np.int8, T.S16: np.int16, T.S32: np.int32,
             T.S64: np.int64, T.U8: np.uint8, T.U16: np.uint16, T.U32: np.uint32,
             T.U64: np.uint64, T.F16: np.float16, T.F32: np.float32, T.F64: np.float64,
             T.BF16: ml_dtypes.bfloat16, T.C64: np.complex64, T.C128: np.complex128,
             T.F8E5M2: ml_dtypes.float8_e5m2, T.F8E4M3FN: ml_dtypes.float8_e4m3fn,
             T.F8E4M3B11FNUZ: ml_dtypes.float8_e4m3b11fnuz,
             T.F8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
             T.F8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz, T.F8E4M3: ml_dtypes.float8_e4m3,
             T.F8E3M4: ml_dtypes.float8_e3m4, T.F8E8M0FNU: ml_dtypes.float8_e8m0fnu}
    return {t: np.dtype(d) for t, d in sorted(named.items())}


DTYPES = _dtype_table()
BUFFER_TYPES = {v: k for k, v in DTYPES.items()}
TYPE_NAMES = {v: k for k, v in vars(C.BufferType).items() if not k.startswith("_")}


class PluginError(Exception):
    """A PJRT function returned an error."""

    def __init__(self, function: str, code: int, message: str) -> None:
        self.function, self.code, self.message = function, code, message
        super().__init__(f"{function}: {ERROR_NAMES.get(code, code)}: {message}")

    @property
    def unimplemented(self) -> bool:
        return self.code == C.ErrorCode.UNIMPLEMENTED


class EventTimeout(TimeoutError):
    """An event did not fire in time."""

    def __init__(self, function: str, message: str) -> None:
        self.function = function
        super().__init__(message)


class LoadError(Exception):
    """The library could not be loaded or has no usable PJRT API."""


class Plugin:
    """One PJRT plugin: its API table and typed helpers over it."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            # RTLD_LOCAL: the plugin's symbols (often a whole XLA) must not
            # resolve those of other libraries in this process, or vice versa.
            self.lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        except OSError as e:
            raise LoadError(f"cannot load {path}: {e}") from None
        try:
            get = self.lib.GetPjrtApi
        except AttributeError:
            raise LoadError(f"{path} does not export GetPjrtApi") from None
        get.restype = c_void_p
        get.argtypes = []
        address = get()
        if not address:
            raise LoadError(f"GetPjrtApi of {path} returned NULL")
        self.address = address
        self.api_struct_size = ctypes.c_size_t.from_address(address).value
        version = C.PJRT_Api_Version.from_address(
            address + C.PJRT_Api.pjrt_api_version.offset)
        self.version = (version.major_version, version.minor_version)
        self.version_struct_size = version.struct_size
        self._fns: dict[str, int] = {}
        for name in C.API_FUNCTIONS:
            field = getattr(C.PJRT_Api, name)
            if field.offset + field.size <= self.api_struct_size:
                ptr = c_void_p.from_address(address + field.offset).value
                if ptr:
                    self._fns[name] = ptr
        self._callables: dict[str, object] = {}

    # -- calling ---------------------------------------------------------

    def has(self, name: str) -> bool:
        """Whether the plugin's table has a (non-NULL) slot for ``name``."""
        return name in self._fns

    def raw_call(self, name: str, args: ctypes.Structure,
                 struct_size: int | None = None) -> int | None:
        """Calls ``name`` with ``args`` (struct_size set to ``struct_size`` or
        the mirror's size); returns the PJRT_Error* (None on success)."""
        if name not in self._fns:
            raise PluginError(name, C.ErrorCode.UNIMPLEMENTED,
                              "not in the plugin's PJRT_Api table (slot past its "
                              "struct_size or NULL)")
        fn = self._callables.get(name)
        if fn is None:
            fn = self._callables[name] = FN(self._fns[name])
        args.struct_size = C.struct_size(type(args)) if struct_size is None else struct_size
        return fn(ctypes.addressof(args))

    def call(self, name: str, args: S, struct_size: int | None = None) -> S:
        """Calls ``name``; raises :class:`PluginError` for an error; returns ``args``."""
        err = self.raw_call(name, args, struct_size)
        if err:
            code, message = self.error_info(err)
            self.error_destroy(err)
            raise PluginError(name, code, message)
        return args

    def error_info(self, err: int) -> tuple[int, str]:
        m = Error_Message_Args(error=err)
        self.raw_call("PJRT_Error_Message", m)
        message = C.read_str(m.message, m.message_size)
        g = Error_GetCode_Args(error=err)
        if self.raw_call("PJRT_Error_GetCode", g):
            return C.ErrorCode.UNKNOWN, message
        return g.code, message

    def error_destroy(self, err: int) -> None:
        self.raw_call("PJRT_Error_Destroy", Error_Destroy_Args(error=err))

    # -- plugin ----------------------------------------------------------

    def initialize(self) -> None:
        if self.has("PJRT_Plugin_Initialize"):
            self.call("PJRT_Plugin_Initialize", C.Plugin_Initialize_Args())

    def attributes(self) -> dict:
        a = self.call("PJRT_Plugin_Attributes", C.Plugin_Attributes_Args())
        return read_named_values(a.attributes, a.num_attributes)

    # -- events ----------------------------------------------------------

    def event_wait(self, event: int, timeout: float) -> tuple[bool, PluginError | None]:
        """Waits for ``event`` through PJRT_Event_OnReady for at most
        ``timeout`` seconds: (fired, error delivered through the event).
        Does not destroy the event."""
        done = threading.Event()
        box: list = []

        def on_ready(err, _user):
            if err:
                code, message = self.error_info(err)
                self.error_destroy(err)  # the callback owns the error
                box.append(PluginError("event", code, message))
            done.set()

        cb = ON_READY(on_ready)
        self._keep_alive = getattr(self, "_keep_alive", [])
        self._keep_alive.append(cb)  # a late callback must still find it
        self.call("PJRT_Event_OnReady", Event_OnReady_Args(
            event=event, callback=ctypes.cast(cb, c_void_p).value))
        fired = done.wait(timeout)
        return fired, (box[0] if box else None)

    def event_await(self, event: int) -> None:
        self.call("PJRT_Event_Await", Event_Await_Args(event=event))

    def event_destroy(self, event: int | None) -> None:
        if event:
            self.call("PJRT_Event_Destroy", Event_Destroy_Args(event=event))

    def event_ready(self, event: int) -> bool:
        return self.call("PJRT_Event_IsReady", Event_IsReady_Args(event=event)).is_ready

    def event_error(self, event: int) -> PluginError | None:
        err = self.raw_call("PJRT_Event_Error", Event_Error_Args(event=event))
        if not err:
            return None
        code, message = self.error_info(err)
        self.error_destroy(err)
        return PluginError("PJRT_Event_Error", code, message)

    def finish(self, event: int | None, timeout: float, what: str) -> None:
        """Waits for ``event`` and destroys it; raises the error it carries,
        or TimeoutError if it never fires."""
        if not event:
            return
        fired, err = self.event_wait(event, timeout)
        if not fired:
            raise EventTimeout(what.split()[0], f"the event of {what} did not fire within "
                               f"{timeout:g} s")
        self.event_destroy(event)
        if err is not None:
            raise PluginError(what.split()[0], err.code, err.message)


def read_named_values(address: int | None, count: int) -> dict:
    """{name: value} of an array of PJRT_NamedValue."""
    out = {}
    if not address or not count:
        return out
    arr = (C.PJRT_NamedValue * count).from_address(address)
    for nv in arr:
        name = C.read_str(nv.name, nv.name_size)
        t = nv.type
        if t == C.NamedValueType.kString:
            out[name] = C.read_str(nv.string_value, nv.value_size)
        elif t == C.NamedValueType.kInt64:
            out[name] = nv.int64_value
        elif t == C.NamedValueType.kInt64List:
            out[name] = list(C.read_int64s(nv.int64_array_value, nv.value_size))
        elif t == C.NamedValueType.kFloat:
            out[name] = nv.float_value
        elif t == C.NamedValueType.kBool:
            out[name] = bool(nv.bool_value)
        else:
            out[name] = f"<unknown PJRT_NamedValue type {t}>"
    return out


def int64_array(values: Iterable[int]) -> ctypes.Array:
    values = list(values)
    return (ctypes.c_int64 * max(1, len(values)))(*values)


# ----------------------------------------------------------------------------
# Client-level helpers
# ----------------------------------------------------------------------------

DEFAULT_TIMEOUT = 60.0


def compile_options(num_replicas: int = 1, num_partitions: int = 1) -> bytes:
    """A serialized xla.CompileOptionsProto (jaxlib's class, as JAX sends)."""
    xc = compat.jax_internal("lib", "xla_client")
    o = xc.CompileOptions()
    o.num_replicas = num_replicas
    o.num_partitions = num_partitions
    return o.SerializeAsString()


class Buffer:
    def __init__(self, client: "Client", handle: int, dtype: np.dtype | None,
                 shape: Iterable[int]) -> None:
        self.client, self.handle, self.dtype, self.shape = client, handle, dtype, tuple(shape)

    def element_type(self) -> int:
        return self.client.plugin.call("PJRT_Buffer_ElementType",
                                       C.Buffer_ElementType_Args(buffer=self.handle)).type

    def dims(self) -> tuple:
        a = self.client.plugin.call("PJRT_Buffer_Dimensions",
                                    C.Buffer_Dimensions_Args(buffer=self.handle))
        return C.read_int64s(a.dims, a.num_dims)

    def to_host(self, dtype=None, shape=None, timeout=DEFAULT_TIMEOUT) -> np.ndarray:
        p = self.client.plugin
        dtype = np.dtype(dtype or self.dtype)
        shape = self.shape if shape is None else tuple(shape)
        q = p.call("PJRT_Buffer_ToHostBuffer", C.Buffer_ToHostBuffer_Args(src=self.handle))
        out = np.zeros(shape, dtype)
        if q.dst_size != out.nbytes:
            raise PluginError("PJRT_Buffer_ToHostBuffer", C.ErrorCode.INTERNAL,
                              f"asked for the size of {dtype}{list(shape)}: got "
                              f"{q.dst_size} bytes, expected {out.nbytes}")
        # A non-NULL dst even for 0 bytes: NULL asks for the size again.
        scratch = np.zeros(1, np.uint8)
        dst = out.ctypes.data if out.nbytes else scratch.ctypes.data
        a = p.call("PJRT_Buffer_ToHostBuffer", C.Buffer_ToHostBuffer_Args(
            src=self.handle, dst=dst, dst_size=out.nbytes))
        p.finish(a.event, timeout, "PJRT_Buffer_ToHostBuffer")
        return out

    def ready(self, timeout=DEFAULT_TIMEOUT) -> None:
        p = self.client.plugin
        a = p.call("PJRT_Buffer_ReadyEvent", C.Buffer_ReadyEvent_Args(buffer=self.handle))
        p.finish(a.event, timeout, "PJRT_Buffer_ReadyEvent")

    def delete(self) -> None:
        self.client.plugin.call("PJRT_Buffer_Delete", C.Buffer_Delete_Args(buffer=self.handle))

    def is_deleted(self) -> bool:
        return self.client.plugin.call("PJRT_Buffer_IsDeleted", C.Buffer_IsDeleted_Args(
            buffer=self.handle)).is_deleted

    def destroy(self) -> None:
        if self.handle:
            self.client.plugin.call("PJRT_Buffer_Destroy",
                                    C.Buffer_Destroy_Args(buffer=self.handle))
            self.handle = None


class Executable:
    def __init__(self, client: "Client", handle: int) -> None:
        self.client, self.handle = client, handle
        p = client.plugin
        self.executable = p.call("PJRT_LoadedExecutable_GetExecutable",
                                 C.LoadedExecutable_GetExecutable_Args(
                                     loaded_executable=handle)).executable

    def num_outputs(self) -> int:
        return self.client.plugin.call("PJRT_Executable_NumOutputs",
                                       C.Executable_NumOutputs_Args(
                                           executable=self.executable)).num_outputs

    def output_types(self) -> list[int]:
        a = self.client.plugin.call("PJRT_Executable_OutputElementTypes",
                                    C.Executable_OutputElementTypes_Args(
                                        executable=self.executable))
        if not a.num_output_types:
            return []
        return list((c_int * a.num_output_types).from_address(a.output_types))

    def output_dims(self) -> list[tuple]:
        a = self.client.plugin.call("PJRT_Executable_OutputDimensions",
                                    C.Executable_OutputDimensions_Args(
                                        executable=self.executable))
        sizes = (ctypes.c_size_t * a.num_outputs).from_address(a.dim_sizes)[:] \
            if a.num_outputs else []
        out, pos = [], 0
        for s in sizes:
            out.append(C.read_int64s(a.dims + 8 * pos, s) if s else ())
            pos += s
        return out

    def fingerprint(self) -> bytes:
        a = self.client.plugin.call("PJRT_Executable_Fingerprint",
                                    C.Executable_Fingerprint_Args(executable=self.executable))
        return C.read_bytes(a.executable_fingerprint, a.executable_fingerprint_size)

    def execute(self, args: list[Buffer], device_lists: list[list[Buffer]] | None = None,
                num_outputs: int | None = None, timeout=DEFAULT_TIMEOUT,
                non_donatable=None) -> list[list[int]]:
        """Runs on every addressable device of the executable (one argument
        list per device); returns the output buffer handles per device."""
        p = self.client.plugin
        lists = device_lists if device_lists is not None else [args]
        n_dev, n_args = len(lists), len(lists[0]) if lists else 0
        n_out = self.num_outputs() if num_outputs is None else num_outputs
        arg_arrays = [(c_void_p * max(1, n_args))(*[b.handle for b in lst]) for lst in lists]
        arg_lists = (c_void_p * n_dev)(*[ctypes.addressof(a) for a in arg_arrays])
        out_arrays = [(c_void_p * max(1, n_out))() for _ in range(n_dev)]
        out_lists = (c_void_p * n_dev)(*[ctypes.addressof(a) for a in out_arrays])
        events = (c_void_p * n_dev)()
        opts = C.PJRT_ExecuteOptions()
        opts.struct_size = C.struct_size(C.PJRT_ExecuteOptions)
        keep = None
        if non_donatable is not None:
            keep = int64_array(non_donatable)
            opts.non_donatable_input_indices = ctypes.addressof(keep)
            opts.num_non_donatable_input_indices = len(non_donatable)
        p.call("PJRT_LoadedExecutable_Execute", C.LoadedExecutable_Execute_Args(
            executable=self.handle, options=ctypes.addressof(opts),
            argument_lists=ctypes.addressof(arg_lists), num_devices=n_dev, num_args=n_args,
            output_lists=ctypes.addressof(out_lists),
            device_complete_events=ctypes.addressof(events)))
        for e in events:
            p.finish(e, timeout, "PJRT_LoadedExecutable_Execute")
        return [list(a[:n_out]) for a in out_arrays]

    def destroy(self) -> None:
        if self.handle:
            self.client.plugin.call("PJRT_LoadedExecutable_Destroy",
                                    C.LoadedExecutable_Destroy_Args(executable=self.handle))
            self.handle = None


class Client:
    """A PJRT_Client of a plugin, with the calls the checks need."""

    def __init__(self, plugin: Plugin, options: dict | None = None) -> None:
        self.plugin = plugin
        a = C.Client_Create_Args()
        self._opts = None
        if options:
            self._opts = named_values(options)
            a.create_options = ctypes.addressof(self._opts[0])
            a.num_options = len(options)
        self.handle = plugin.call("PJRT_Client_Create", a).client

    def close(self) -> None:
        if self.handle:
            self.plugin.call("PJRT_Client_Destroy", C.Client_Destroy_Args(client=self.handle))
            self.handle = None

    def platform_name(self) -> str:
        a = self.plugin.call("PJRT_Client_PlatformName",
                             C.Client_PlatformName_Args(client=self.handle))
        return C.read_str(a.platform_name, a.platform_name_size)

    def devices(self) -> list[int]:
        a = self.plugin.call("PJRT_Client_Devices", C.Client_Devices_Args(client=self.handle))
        return C.read_pointers(a.devices, a.num_devices)

    def addressable_devices(self) -> list[int]:
        a = self.plugin.call("PJRT_Client_AddressableDevices",
                             C.Client_AddressableDevices_Args(client=self.handle))
        return C.read_pointers(a.addressable_devices, a.num_addressable_devices)

    def default_memory(self, device: int) -> int:
        return self.plugin.call("PJRT_Device_DefaultMemory",
                                C.Device_DefaultMemory_Args(device=device)).memory

    def memory_kind(self, memory: int) -> str:
        a = self.plugin.call("PJRT_Memory_Kind", C.Memory_Kind_Args(memory=memory))
        return C.read_str(a.kind, a.kind_size)

    def from_host(self, array: np.ndarray, device: int | None = None, semantics: int = 0,
                  byte_strides=None, btype: int | None = None, memory: int | None = None,
                  timeout=DEFAULT_TIMEOUT, wait_done: bool = True) -> Buffer:
        """PJRT_Client_BufferFromHostBuffer of ``array`` (its strides are
        passed when ``byte_strides`` is True or given)."""
        p = self.plugin
        if device is None and memory is None:
            device = self.addressable_devices()[0]
        btype = BUFFER_TYPES[array.dtype] if btype is None else btype
        dims = int64_array(array.shape)
        a = C.Client_BufferFromHostBuffer_Args(
            client=self.handle, data=array.ctypes.data, type=btype,
            dims=ctypes.addressof(dims), num_dims=array.ndim,
            host_buffer_semantics=semantics, device=device, memory=memory)
        st = None
        if byte_strides is not None:
            st = int64_array(array.strides if byte_strides is True else byte_strides)
            a.byte_strides = ctypes.addressof(st)
            a.num_byte_strides = array.ndim
        p.call("PJRT_Client_BufferFromHostBuffer", a)
        if wait_done:
            p.finish(a.done_with_host_buffer, timeout,
                     "PJRT_Client_BufferFromHostBuffer (done_with_host_buffer)")
        buf = Buffer(self, a.buffer, array.dtype, array.shape)
        buf.done_event = None if wait_done else a.done_with_host_buffer
        return buf

    def compile(self, code: bytes | str, fmt: str = "mlir", options: bytes | None = None):
        p = self.plugin
        code = code.encode() if isinstance(code, str) else bytes(code)
        fmt_b = fmt.encode()
        code_buf = ctypes.create_string_buffer(code, len(code))
        fmt_buf = ctypes.create_string_buffer(fmt_b, len(fmt_b))
        prog = C.PJRT_Program(code=ctypes.addressof(code_buf), code_size=len(code),
                              format=ctypes.addressof(fmt_buf), format_size=len(fmt_b))
        prog.struct_size = C.struct_size(C.PJRT_Program)
        opts = compile_options() if options is None else options
        opts_buf = ctypes.create_string_buffer(opts, len(opts))
        a = p.call("PJRT_Client_Compile", C.Client_Compile_Args(
            client=self.handle, program=ctypes.addressof(prog),
            compile_options=ctypes.addressof(opts_buf), compile_options_size=len(opts)))
        return Executable(self, a.executable)

    def buffer(self, handle: int, dtype=None, shape=None) -> Buffer:
        """Wraps an output handle, reading its type and dims from the plugin."""
        b = Buffer(self, handle, None, ())
        t = b.element_type()
        b.dtype = DTYPES.get(t) if dtype is None else np.dtype(dtype)
        b.shape = b.dims() if shape is None else tuple(shape)
        b.type = t
        return b


def named_values(options: dict) -> tuple[ctypes.Array, list]:
    """A PJRT_NamedValue array for ``options`` (kept alive by the result)."""
    arr = (C.PJRT_NamedValue * max(1, len(options)))()
    keep = []
    for nv, (k, v) in zip(arr, options.items()):
        kb = k.encode()
        keep.append(kb)
        nv.struct_size = C.struct_size(C.PJRT_NamedValue)
        nv.name = ctypes.cast(ctypes.c_char_p(kb), c_void_p).value
        nv.name_size = len(kb)
        if isinstance(v, bool):
            nv.type, nv.bool_value, nv.value_size = C.NamedValueType.kBool, v, 1
        elif isinstance(v, int):
            nv.type, nv.int64_value, nv.value_size = C.NamedValueType.kInt64, v, 1
        elif isinstance(v, float):
            nv.type, nv.float_value, nv.value_size = C.NamedValueType.kFloat, v, 1
        elif isinstance(v, (list, tuple)):
            ints = int64_array(v)
            keep.append(ints)
            nv.type = C.NamedValueType.kInt64List
            nv.int64_array_value = ctypes.addressof(ints)
            nv.value_size = len(v)
        else:
            vb = str(v).encode()
            keep.append(vb)
            nv.type = C.NamedValueType.kString
            nv.string_value = ctypes.cast(ctypes.c_char_p(vb), c_void_p).value
            nv.value_size = len(vb)
    return arr, keep
