"""The PJRT C API of stablehlo_pjrt, called directly through the table's
function pointers (no JAX runtime): the C shim (trampolines, errors, events,
memory vtable), the ctypes mirror, and the client/buffer/executable handlers.
"""

from __future__ import annotations

import ctypes
import threading

import ml_dtypes
import numpy as np
import pytest

from stablehlo_pjrt import _capi as C
from stablehlo_pjrt import _shim, table
from stablehlo_pjrt.error import PjrtError

table.build_api()
API = C.PJRT_Api.from_address(_shim.api_address()[0])
FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)

IDENTITY = """
module @identity {
  func.func public @main(%a: tensor<2x3xf32>, %b: tensor<i32>) -> (tensor<i32>, tensor<2x3xf32>) {
    return %b, %a : tensor<i32>, tensor<2x3xf32>
  }
}
"""


def call(name: str, args) -> tuple[int, str] | None:
    """Calls PJRT function `name` like jaxlib would; returns (code, message)
    of the error (destroying it), or None on success."""
    args.struct_size = C.struct_size(type(args))
    fn = FN(getattr(API, name))
    err = fn(ctypes.addressof(args))
    if not err:
        return None
    info = _shim.error_info(err)
    destroy = C._args("D", [("error", C.P)])()
    destroy.struct_size = C.struct_size(type(destroy))
    destroy.error = err
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(API.PJRT_Error_Destroy)(ctypes.addressof(destroy))
    return info


def ok(name: str, args):
    err = call(name, args)
    assert err is None, f"{name} failed: {err}"
    return args


def event_destroy(ev):
    if ev:
        ok("PJRT_Event_Destroy", C._args("E", [("event", C.P)])(event=ev))


def event_await(ev):
    """PJRT_Event_Await: None, or (code, message) of the error it carries."""
    return call("PJRT_Event_Await", C._args("A", [("event", C.P)])(event=ev))


@pytest.fixture(scope="module")
def client():
    a = ok("PJRT_Client_Create", C.Client_Create_Args())
    yield a.client
    ok("PJRT_Client_Destroy", C.Client_Destroy_Args(client=a.client))


def devices_of(client):
    a = ok("PJRT_Client_Devices", C.Client_Devices_Args(client=client))
    return C.read_pointers(a.devices, a.num_devices)


def from_host(client, array: np.ndarray, btype: int, semantics=0, strides=None):
    dims = (ctypes.c_int64 * max(1, array.ndim))(*array.shape)
    a = C.Client_BufferFromHostBuffer_Args(
        client=client, data=array.ctypes.data if array.size else None, type=btype,
        dims=ctypes.addressof(dims), num_dims=array.ndim,
        host_buffer_semantics=semantics)
    if strides is not None:
        st = (ctypes.c_int64 * len(strides))(*strides)
        a.byte_strides = ctypes.addressof(st)
        a.num_byte_strides = len(strides)
    ok("PJRT_Client_BufferFromHostBuffer", a)
    return a.buffer, a.done_with_host_buffer


def to_host(buf, dtype, shape):
    q = ok("PJRT_Buffer_ToHostBuffer", C.Buffer_ToHostBuffer_Args(src=buf))
    out = np.zeros(shape, dtype)
    assert q.dst_size == out.nbytes
    a = ok("PJRT_Buffer_ToHostBuffer", C.Buffer_ToHostBuffer_Args(
        src=buf, dst=out.ctypes.data if out.size else None, dst_size=out.nbytes))
    if out.size:
        # The copy is done when the event is (later, if the buffer's program
        # still runs on the worker).
        event_await(a.event)
        event_destroy(a.event)
    return out


def destroy_buffer(buf):
    ok("PJRT_Buffer_Destroy", C.Buffer_Destroy_Args(buffer=buf))


# ---------------------------------------------------------------------------
# Table
# ---------------------------------------------------------------------------


def test_table_has_version_and_no_null_slots():
    assert API.struct_size == C.struct_size(C.PJRT_Api)
    assert (API.pjrt_api_version.major_version, API.pjrt_api_version.minor_version) == (0, 110)
    missing = [n for n in C.API_FUNCTIONS if not getattr(API, n)]
    assert missing == []


def test_unimplemented_slot_reports_clear_error():
    err = call("PJRT_CopyToDeviceStream_TotalBytes", C._args("X", [("stream", C.P)])())
    assert err is not None
    code, message = err
    assert code == C.ErrorCode.UNIMPLEMENTED
    assert "PJRT_CopyToDeviceStream_TotalBytes" in message and "stablehlo_ref" in message


def test_capsule_name():
    cap = table.capsule()
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.py_object]
    assert get_name(cap) == b"pjrt_c_api"


# ---------------------------------------------------------------------------
# Trampolines (a spare slot beyond the API's)
# ---------------------------------------------------------------------------

SPARE = _shim.MAX_SLOTS - 1


def test_trampoline_maps_pjrt_error_code_and_message():
    def handler(ptr):
        raise PjrtError(C.ErrorCode.NOT_FOUND, f"nothing at {ptr:#x}")

    _shim.set_slot(SPARE, "Test_Slot", handler, False)
    err = _shim.call_slot(SPARE, 0x1234)
    assert _shim.error_info(err) == (C.ErrorCode.NOT_FOUND, "nothing at 0x1234")
    _shim.error_destroy(err)


def test_trampoline_turns_stray_exception_into_internal_error():
    def handler(ptr):
        return {}["missing"]

    _shim.set_slot(SPARE, "Test_Slot", handler, False)
    err = _shim.call_slot(SPARE, 8)
    code, message = _shim.error_info(err)
    _shim.error_destroy(err)
    assert code == C.ErrorCode.INTERNAL
    assert "Test_Slot" in message and "KeyError" in message and "missing" in message


def test_trampoline_success_and_returned_error_pointer():
    _shim.set_slot(SPARE, "Test_Slot", lambda ptr: None, False)
    assert _shim.call_slot(SPARE, 8) is None
    made = _shim.error_new(C.ErrorCode.ABORTED, "made by handler")
    _shim.set_slot(SPARE, "Test_Slot", lambda ptr: made, False)
    err = _shim.call_slot(SPARE, 8)
    assert err == made
    assert _shim.error_info(err) == (C.ErrorCode.ABORTED, "made by handler")
    _shim.error_destroy(err)


def test_trampoline_parks_pending_exception():
    """jaxlib calls PJRT_Buffer_Destroy with a Python exception pending; the
    handler must run cleanly and the exception must survive the call."""
    seen = []

    def handler(ptr):
        # Would raise SystemError if the pending exception leaked in here.
        seen.append(int(ptr))
        return None

    _shim.set_slot(SPARE, "Test_Slot", handler, False)
    err, survived = _shim.call_slot_with_pending_error(SPARE, 77)
    assert err is None and survived and seen == [77]

    def failing(ptr):
        raise PjrtError(C.ErrorCode.ABORTED, "handler failed too")

    _shim.set_slot(SPARE, "Test_Slot", failing, False)
    err, survived = _shim.call_slot_with_pending_error(SPARE, 78)
    assert survived
    assert _shim.error_info(err) == (C.ErrorCode.ABORTED, "handler failed too")
    _shim.error_destroy(err)


def test_unset_handler_is_unimplemented():
    _shim.set_slot(SPARE, "Test_Slot", None, False)
    err = _shim.call_slot(SPARE, 8)
    assert _shim.error_info(err)[0] == C.ErrorCode.UNIMPLEMENTED
    _shim.error_destroy(err)


def test_trampolines_under_threads():
    counter = []
    lock = threading.Lock()

    def handler(ptr):
        with lock:
            counter.append(ptr)

    _shim.set_slot(SPARE, "Test_Slot", handler, False)
    fn = FN(_shim.set_slot(SPARE, "Test_Slot", handler, False))

    def work(i):
        for j in range(200):
            assert fn(i * 1000 + j + 1) is None

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(counter) == 1600


# ---------------------------------------------------------------------------
# Errors, events, memory vtable (C implementations)
# ---------------------------------------------------------------------------


def test_error_functions_and_vtable():
    err = _shim.error_new(C.ErrorCode.INVALID_ARGUMENT, "bad thing")
    msg = C._args("M", [("error", C.P), ("message", C.P), ("message_size", C.SIZE)])()
    msg.struct_size = C.struct_size(type(msg))
    msg.error = err
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(API.PJRT_Error_Message)(ctypes.addressof(msg))
    assert C.read_str(msg.message, msg.message_size) == "bad thing"
    code = ok("PJRT_Error_GetCode", C._args("G", [("error", C.P), ("code", C.ENUM)])(error=err))
    assert code.code == C.ErrorCode.INVALID_ARGUMENT
    # The PJRT_Error struct starts with its function table.
    vtable = ctypes.c_void_p.from_address(err).value
    get_code = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(
        ctypes.c_void_p.from_address(vtable + 40).value)
    assert get_code(err) == C.ErrorCode.INVALID_ARGUMENT
    _shim.error_destroy(err)


CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


def test_ready_event_callbacks_and_await():
    ev = _shim.event_new(True)
    got = []
    cb = CALLBACK(lambda err, arg: got.append((err, arg)))
    ok("PJRT_Event_OnReady", C._args("O", [("event", C.P), ("callback", C.P), ("user_arg", C.P)])(
        event=ev, callback=ctypes.cast(cb, ctypes.c_void_p).value, user_arg=42))
    assert got == [(None, 42)]
    r = ok("PJRT_Event_IsReady", C._args("R", [("event", C.P), ("is_ready", ctypes.c_bool)])(event=ev))
    assert r.is_ready
    assert call("PJRT_Event_Await", C._args("A", [("event", C.P)])(event=ev)) is None
    event_destroy(ev)


def test_pending_event_set_from_plugin_runs_callbacks_with_error():
    ev = _shim.event_new(False)
    got = []

    def on_ready(err, arg):
        got.append(_shim.error_info(err))
        _shim.error_destroy(err)

    cb = CALLBACK(on_ready)
    ok("PJRT_Event_OnReady", C._args("O", [("event", C.P), ("callback", C.P), ("user_arg", C.P)])(
        event=ev, callback=ctypes.cast(cb, ctypes.c_void_p).value))
    assert got == []
    event_destroy(ev)  # the caller lets go first; the plugin still holds it
    _shim.event_set(ev, C.ErrorCode.CANCELLED, "stopped")
    assert got == [(C.ErrorCode.CANCELLED, "stopped")]


def test_event_create_set_await_across_threads():
    a = ok("PJRT_Event_Create", C._args("C", [("event", C.P)])())
    ev = a.event
    result = []

    def waiter():
        result.append(call("PJRT_Event_Await", C._args("A", [("event", C.P)])(event=ev)))

    t = threading.Thread(target=waiter)
    t.start()
    msg = b"late failure"
    ok("PJRT_Event_Set", C._args("S", [("event", C.P), ("error_code", C.ENUM),
                                       ("error_message", ctypes.c_char_p),
                                       ("error_message_size", C.SIZE)])(
        event=ev, error_code=C.ErrorCode.DATA_LOSS, error_message=msg,
        error_message_size=len(msg)))
    t.join(10)
    assert result == [(C.ErrorCode.DATA_LOSS, "late failure")]
    err = call("PJRT_Event_Error", C._args("E", [("event", C.P)])(event=ev))
    assert err == (C.ErrorCode.DATA_LOSS, "late failure")
    # The whole struct: a smaller one is INVALID_ARGUMENT (pjrt_c_api.h's
    # struct_size rule; every field of it exists since the first minor).
    again = call("PJRT_Event_Set", C._args("S", [("event", C.P), ("error_code", C.ENUM),
                                                 ("error_message", C.P),
                                                 ("error_message_size", C.SIZE)])(event=ev))
    assert again[0] == C.ErrorCode.FAILED_PRECONDITION
    event_destroy(ev)


_AWAIT_HOLDING_GIL = """
import ctypes, threading, time
from stablehlo_pjrt import _capi as C, _shim, table
table.build_api()
api = C.PJRT_Api.from_address(_shim.api_address()[0])
ev = _shim.event_new(False)
threading.Thread(target=lambda: (time.sleep(0.2), _shim.event_set(ev))).start()
args = C._args("A", [("event", C.P)])(event=ev)
args.struct_size = C.struct_size(type(args))
# PYFUNCTYPE: the call keeps the GIL, as a pybind caller that never releases it
err = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(api.PJRT_Event_Await)(
    ctypes.addressof(args))
print("awaited", err)
"""


def test_event_await_holding_the_gil_lets_python_complete_it():
    """A caller that holds the GIL while it awaits a pending event (pybind
    code that never releases it) must not block the Python thread that
    completes the event: Await releases the GIL while it waits. Before, this
    hung (run in a subprocess with a time limit)."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", _AWAIT_HOLDING_GIL], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "awaited None"


_BEGIN_EXIT = """
import ctypes, threading, time
from stablehlo_pjrt import _shim, table
table.build_api()
SLOT = _shim.MAX_SLOTS - 1
entered = threading.Event()

def slow(ptr):
    entered.set()
    time.sleep(0.3)

tramp = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(
    _shim.set_slot(SLOT, "Test_Slow", slow, False))
# CFUNCTYPE releases the GIL: to the shim these are threads without it.
results = []
t = threading.Thread(target=lambda: results.append(tramp(None)))
t.start()
entered.wait(10)
t0 = time.perf_counter()
left = _shim.begin_exit(5.0)
waited = time.perf_counter() - t0
t.join(10)
late = tramp(None)  # a new call from a thread without the GIL: refused
info = _shim.error_info(late) if late else None
print("RESULT", left, results == [None], 0.1 < waited < 2.0, info)
"""


def test_begin_exit_waits_for_calls_in_progress():
    """_shim.begin_exit (the last step of the plugin's exit handler): calls
    already in progress from threads without the GIL finish first (waited
    for with the GIL released; a thread still waiting for the GIL when
    finalization starts is killed and aborts the process), later ones are
    refused (quiet ones succeed, leaking). In a subprocess: begin_exit is
    for good."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", _BEGIN_EXIT], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")][0]
    assert line.startswith("RESULT 0 True True (14, "), line  # 14: UNAVAILABLE
    assert "shutting down" in line


def test_memory_vtable_user_data(client):
    dev = devices_of(client)[0]
    mem = ok("PJRT_Device_DefaultMemory", C.Device_DefaultMemory_Args(device=dev)).memory
    vtable = ctypes.c_void_p.from_address(mem).value
    # struct_size, extension_start, instance_struct_size, get, set
    assert ctypes.c_size_t.from_address(vtable).value == 40
    get = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
        ctypes.c_void_p.from_address(vtable + 24).value)
    DTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    set_ = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, DTOR)(
        ctypes.c_void_p.from_address(vtable + 32).value)
    freed = []
    dtor = DTOR(lambda p: freed.append(p))
    key = 0xABC0
    assert get(mem, key) is None
    set_(mem, key, 0x1111, dtor)
    assert get(mem, key) == 0x1111
    set_(mem, key, 0x2222, dtor)
    assert get(mem, key) == 0x2222 and freed == [0x1111]
    kind = ok("PJRT_Memory_Kind", C.Memory_Kind_Args(memory=mem))
    assert C.read_str(kind.kind, kind.kind_size) == "device"


# ---------------------------------------------------------------------------
# Client, devices, buffers
# ---------------------------------------------------------------------------


def test_client_identity(client):
    name = ok("PJRT_Client_PlatformName", C.Client_PlatformName_Args(client=client))
    assert C.read_str(name.platform_name, name.platform_name_size) == "stablehlo_ref"
    ver = ok("PJRT_Client_PlatformVersion", C.Client_PlatformVersion_Args(client=client))
    text = C.read_str(ver.platform_version, ver.platform_version_size)
    assert "stablehlo_interpreter" in text and "StableHLO" in text
    devs = devices_of(client)
    assert len(devs) == 1
    desc = ok("PJRT_Device_GetDescription", C.Device_GetDescription_Args(device=devs[0]))
    d = desc.device_description
    assert ok("PJRT_DeviceDescription_Id", C.DeviceDescription_Id_Args(device_description=d)).id == 0
    kind = ok("PJRT_DeviceDescription_Kind", C.DeviceDescription_Kind_Args(device_description=d))
    assert "interpreter" in C.read_str(kind.device_kind, kind.device_kind_size)
    look = ok("PJRT_Client_LookupDevice", C.Client_LookupDevice_Args(client=client, id=0))
    assert look.device == devs[0]
    missing = call("PJRT_Client_LookupDevice", C.Client_LookupDevice_Args(client=client, id=5))
    assert missing[0] == C.ErrorCode.INVALID_ARGUMENT and "STABLEHLO_REF_NUM_DEVICES" in missing[1]


def test_plugin_attributes_carry_stablehlo_versions():
    from stablehlo_pjrt.handles import read_named_values
    a = ok("PJRT_Plugin_Attributes", C.Plugin_Attributes_Args())
    attrs = read_named_values(a.attributes, a.num_attributes)
    from jaxlib.mlir.dialects import stablehlo
    assert ".".join(map(str, attrs["stablehlo_current_version"])) == stablehlo.get_current_version()
    assert ".".join(map(str, attrs["stablehlo_minimum_version"])) == stablehlo.get_minimum_version()


def test_stale_handles_are_rejected(client):
    err = call("PJRT_Buffer_ElementType", C.Buffer_ElementType_Args(buffer=0xDEAD0))
    assert err[0] == C.ErrorCode.INVALID_ARGUMENT and "PJRT_Buffer" in err[1]
    err = call("PJRT_Buffer_ElementType", C.Buffer_ElementType_Args(buffer=client))
    assert err[0] == C.ErrorCode.INVALID_ARGUMENT


@pytest.mark.parametrize("dtype,btype", [
    (np.float32, C.BufferType.F32), (np.int64, C.BufferType.S64),
    (np.bool_, C.BufferType.PRED), (ml_dtypes.bfloat16, C.BufferType.BF16),
    (np.complex128, C.BufferType.C128), (ml_dtypes.int4, C.BufferType.S4),
    (ml_dtypes.float8_e4m3fn, C.BufferType.F8E4M3FN), (np.uint16, C.BufferType.U16),
])
@pytest.mark.parametrize("semantics", [0, 1, 2, 3])
def test_host_round_trip(client, dtype, btype, semantics):
    host = (np.arange(12) % 7 - 3).astype(dtype).reshape(3, 4)
    buf, done = from_host(client, host, btype, semantics)
    t = ok("PJRT_Buffer_ElementType", C.Buffer_ElementType_Args(buffer=buf))
    assert t.type == btype
    d = ok("PJRT_Buffer_Dimensions", C.Buffer_Dimensions_Args(buffer=buf))
    assert C.read_int64s(d.dims, d.num_dims) == (3, 4)
    state = _shim.event_state(done)
    # Zero-copy semantics keep the host memory until the buffer goes away.
    assert state[0] == (0 if semantics in (2, 3) else 1)
    np.testing.assert_array_equal(to_host(buf, dtype, (3, 4)), host)
    destroy_buffer(buf)
    assert _shim.event_state(done)[0] == 1
    event_destroy(done)


def test_host_strides_negative_and_empty(client):
    base = np.arange(24, dtype=np.int32).reshape(4, 6)
    view = base[::-1, ::2]
    buf, done = from_host(client, np.asarray(base), C.BufferType.S32, 0, strides=None)
    destroy_buffer(buf)
    event_destroy(done)
    # Pass the strided view's own pointer and (negative) strides.
    dims = (ctypes.c_int64 * 2)(*view.shape)
    st = (ctypes.c_int64 * 2)(*view.strides)
    a = ok("PJRT_Client_BufferFromHostBuffer", C.Client_BufferFromHostBuffer_Args(
        client=client, data=view.ctypes.data, type=C.BufferType.S32,
        dims=ctypes.addressof(dims), num_dims=2, byte_strides=ctypes.addressof(st),
        num_byte_strides=2, host_buffer_semantics=2))
    np.testing.assert_array_equal(to_host(a.buffer, np.int32, view.shape), view)
    destroy_buffer(a.buffer)
    event_destroy(a.done_with_host_buffer)
    empty = np.zeros((0, 5), np.float32)
    buf, done = from_host(client, empty, C.BufferType.F32)
    assert to_host(buf, np.float32, (0, 5)).shape == (0, 5)
    destroy_buffer(buf)
    event_destroy(done)


def test_to_host_with_layouts(client):
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    buf, done = from_host(client, host, C.BufferType.F32)
    event_destroy(done)
    # Column-major via minor_to_major = (0, 1).
    m2m = (ctypes.c_int64 * 2)(0, 1)
    layout = C.PJRT_Buffer_MemoryLayout(type=C.MemoryLayoutType.Tiled)
    layout.struct_size = C.struct_size(C.PJRT_Buffer_MemoryLayout)
    layout.tiled.minor_to_major = ctypes.addressof(m2m)
    layout.tiled.minor_to_major_size = 2
    out = np.zeros(6, np.float32)
    ok("PJRT_Buffer_ToHostBuffer", C.Buffer_ToHostBuffer_Args(
        src=buf, host_layout=ctypes.addressof(layout), dst=out.ctypes.data, dst_size=24))
    np.testing.assert_array_equal(out, host.T.reshape(-1))
    # Explicit padded strides.
    strides = (ctypes.c_int64 * 2)(16, 4)
    layout2 = C.PJRT_Buffer_MemoryLayout(type=C.MemoryLayoutType.Strides)
    layout2.struct_size = C.struct_size(C.PJRT_Buffer_MemoryLayout)
    layout2.strides.byte_strides = ctypes.addressof(strides)
    layout2.strides.num_byte_strides = 2
    q = ok("PJRT_Buffer_ToHostBuffer", C.Buffer_ToHostBuffer_Args(
        src=buf, host_layout=ctypes.addressof(layout2)))
    assert q.dst_size == 28
    padded = np.full(8, -1, np.float32)
    ok("PJRT_Buffer_ToHostBuffer", C.Buffer_ToHostBuffer_Args(
        src=buf, host_layout=ctypes.addressof(layout2), dst=padded.ctypes.data, dst_size=32))
    np.testing.assert_array_equal(padded.reshape(2, 4)[:, :3], host)
    small = np.zeros(2, np.float32)
    err = call("PJRT_Buffer_ToHostBuffer", C.Buffer_ToHostBuffer_Args(
        src=buf, dst=small.ctypes.data, dst_size=8))
    assert err[0] == C.ErrorCode.INVALID_ARGUMENT
    destroy_buffer(buf)


def test_delete_then_use(client):
    buf, done = from_host(client, np.ones(3, np.float32), C.BufferType.F32)
    event_destroy(done)
    ok("PJRT_Buffer_Delete", C.Buffer_Delete_Args(buffer=buf))
    assert ok("PJRT_Buffer_IsDeleted", C.Buffer_IsDeleted_Args(buffer=buf)).is_deleted
    err = call("PJRT_Buffer_ToHostBuffer", C.Buffer_ToHostBuffer_Args(src=buf))
    assert err[0] == C.ErrorCode.FAILED_PRECONDITION and "deleted" in err[1]
    ready = ok("PJRT_Buffer_ReadyEvent", C.Buffer_ReadyEvent_Args(buffer=buf)).event
    assert _shim.event_state(ready)[:2] == (1, C.ErrorCode.FAILED_PRECONDITION)
    event_destroy(ready)
    destroy_buffer(buf)


def test_memory_stats_track_allocations(client):
    dev = devices_of(client)[0]
    before = ok("PJRT_Device_MemoryStats", C.Device_MemoryStats_Args(device=dev)).bytes_in_use
    buf, done = from_host(client, np.ones(1000, np.float64), C.BufferType.F64)
    event_destroy(done)
    during = ok("PJRT_Device_MemoryStats", C.Device_MemoryStats_Args(device=dev)).bytes_in_use
    destroy_buffer(buf)
    after = ok("PJRT_Device_MemoryStats", C.Device_MemoryStats_Args(device=dev)).bytes_in_use
    assert during - before == 8000 and after == before


# ---------------------------------------------------------------------------
# Compile and execute (text MLIR, no JAX)
# ---------------------------------------------------------------------------


def compile_text(client, text: str, options: bytes = b""):
    code = text.encode()
    fmt = b"mlir"
    code_buf = ctypes.create_string_buffer(code, len(code))
    fmt_buf = ctypes.create_string_buffer(fmt, len(fmt))
    prog = C.PJRT_Program(code=ctypes.addressof(code_buf), code_size=len(code),
                          format=ctypes.addressof(fmt_buf), format_size=len(fmt))
    prog.struct_size = C.struct_size(C.PJRT_Program)
    opts = ctypes.create_string_buffer(options, max(1, len(options)))
    a = C.Client_Compile_Args(client=client, program=ctypes.addressof(prog),
                              compile_options=ctypes.addressof(opts),
                              compile_options_size=len(options))
    err = call("PJRT_Client_Compile", a)
    return a.executable, err


def execute(exe, buffers, n_out):
    args = (ctypes.c_void_p * max(1, len(buffers)))(*buffers)
    arg_lists = (ctypes.c_void_p * 1)(ctypes.addressof(args))
    outs = (ctypes.c_void_p * max(1, n_out))()
    out_lists = (ctypes.c_void_p * 1)(ctypes.addressof(outs))
    events = (ctypes.c_void_p * 1)()
    a = C.LoadedExecutable_Execute_Args(
        executable=exe, argument_lists=ctypes.addressof(arg_lists), num_devices=1,
        num_args=len(buffers), output_lists=ctypes.addressof(out_lists),
        device_complete_events=ctypes.addressof(events))
    err = call("PJRT_LoadedExecutable_Execute", a)
    if err is None:
        # A run on the worker (dispatch.py) reports its failure through the
        # completion event; an inline run through Execute itself.
        err = event_await(events[0])
        event_destroy(events[0])
    return list(outs[:n_out]), err


def test_compile_execute_identity_and_metadata(client):
    exe, err = compile_text(client, IDENTITY)
    assert err is None, err
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    bx, d1 = from_host(client, x, C.BufferType.F32)
    by, d2 = from_host(client, np.array(7, np.int32), C.BufferType.S32)
    (o1, o2), err = execute(exe, [bx, by], 2)
    assert err is None, err
    assert to_host(o1, np.int32, ()) == 7
    np.testing.assert_array_equal(to_host(o2, np.float32, (2, 3)), x)
    e = ok("PJRT_LoadedExecutable_GetExecutable",
           C.LoadedExecutable_GetExecutable_Args(loaded_executable=exe)).executable
    assert ok("PJRT_Executable_NumOutputs", C.Executable_NumOutputs_Args(executable=e)).num_outputs == 2
    t = ok("PJRT_Executable_OutputElementTypes", C.Executable_OutputElementTypes_Args(executable=e))
    assert list((ctypes.c_int * 2).from_address(t.output_types)) == [C.BufferType.S32, C.BufferType.F32]
    dims = ok("PJRT_Executable_OutputDimensions", C.Executable_OutputDimensions_Args(executable=e))
    sizes = list((ctypes.c_size_t * 2).from_address(dims.dim_sizes))
    assert sizes == [0, 2] and C.read_int64s(dims.dims, 2) == (2, 3)
    kinds = ok("PJRT_Executable_OutputMemoryKinds", C.Executable_OutputMemoryKinds_Args(executable=e))
    first = ctypes.c_void_p.from_address(kinds.memory_kinds).value
    assert ctypes.string_at(first) == b"device"
    fp = ok("PJRT_Executable_Fingerprint", C.Executable_Fingerprint_Args(executable=e))
    assert len(C.read_str(fp.executable_fingerprint, fp.executable_fingerprint_size)) == 64
    name = ok("PJRT_Executable_Name", C.Executable_Name_Args(executable=e))
    assert C.read_str(name.executable_name, name.executable_name_size) == "identity"
    da = ok("PJRT_LoadedExecutable_GetDeviceAssignment",
            C.LoadedExecutable_GetDeviceAssignment_Args(executable=exe))
    from jax._src.lib import xla_client
    assert C.read_bytes(da.serialized_bytes, da.serialized_bytes_size) == \
        xla_client.DeviceAssignment.create(np.array([[0]])).serialize()
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(da.serialized_device_assignment_deleter)(
        da.serialized_device_assignment)
    ser = ok("PJRT_Executable_Serialize", C.Executable_Serialize_Args(executable=e))
    blob = C.read_bytes(ser.serialized_bytes, ser.serialized_bytes_size)
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(ser.serialized_executable_deleter)(
        ser.serialized_executable)
    blob_buf = ctypes.create_string_buffer(blob, len(blob))
    re = ok("PJRT_Executable_DeserializeAndLoad", C.Executable_DeserializeAndLoad_Args(
        client=client, serialized_executable=ctypes.addressof(blob_buf),
        serialized_executable_size=len(blob)))
    (r1, r2), err = execute(re.loaded_executable, [bx, by], 2)
    assert err is None and to_host(r1, np.int32, ()) == 7
    for b in (bx, by, o1, o2, r1, r2):
        destroy_buffer(b)
    for d in (d1, d2):
        event_destroy(d)
    ok("PJRT_Executable_Destroy", C.Executable_Destroy_Args(executable=e))
    ok("PJRT_LoadedExecutable_Destroy", C.LoadedExecutable_Destroy_Args(executable=exe))
    ok("PJRT_LoadedExecutable_Destroy", C.LoadedExecutable_Destroy_Args(
        executable=re.loaded_executable))


def test_execute_errors_are_reported_and_recoverable(client, monkeypatch):
    import stablehlo_interpreter as shi
    from stablehlo_pjrt.execute import LoadedExecutable
    from stablehlo_pjrt.handles import lookup

    exe, err = compile_text(client, IDENTITY)
    assert err is None
    bx, d1 = from_host(client, np.zeros((2, 3), np.float32), C.BufferType.F32)
    by, d2 = from_host(client, np.array(1, np.int32), C.BufferType.S32)
    meta = lookup(exe, LoadedExecutable).meta

    def failing_run(*args):
        raise shi.ExecutionError("stablehlo.divide at loc(\"f.py\":3): division exploded",
                                 op_name="stablehlo.divide")

    # The plugin enters the interpreter through Program.call (and run).
    monkeypatch.setattr(meta.program, "run", failing_run)
    monkeypatch.setattr(meta.program, "call", lambda args: failing_run(*args))
    _, err = execute(exe, [bx, by], 2)
    assert err is not None
    assert err[0] == C.ErrorCode.INTERNAL
    assert "stablehlo.divide" in err[1] and "division exploded" in err[1]
    monkeypatch.undo()
    (o1, o2), err = execute(exe, [bx, by], 2)
    assert err is None
    # Wrong argument count is an argument error, not a crash.
    _, err = execute(exe, [bx], 2)
    assert err[0] == C.ErrorCode.INVALID_ARGUMENT
    for b in (bx, by, o1, o2):
        destroy_buffer(b)
    event_destroy(d1)
    event_destroy(d2)
    ok("PJRT_LoadedExecutable_Destroy", C.LoadedExecutable_Destroy_Args(executable=exe))


TWO_OUTPUTS = """
module @two {
  func.func public @main(%a: tensor<2x3xf32>, %b: tensor<f32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
    %bb = stablehlo.broadcast_in_dim %b, dims = [] : (tensor<f32>) -> tensor<2x3xf32>
    %s = stablehlo.add %a, %bb : tensor<2x3xf32>
    %p = stablehlo.multiply %a, %bb : tensor<2x3xf32>
    return %s, %p : tensor<2x3xf32>, tensor<2x3xf32>
  }
}
"""


def test_execute_fast_path_matches_the_full_path(client, monkeypatch):
    """Execute's C fast path (one device, nothing unusual) and the full
    handler (taken for an older caller's smaller struct) give the same
    outputs; the fast path is taken, and falls back where it must: an
    identity program's outputs are copies of its inputs either way, and a
    deleted input fails as the full path fails."""
    from stablehlo_pjrt import dispatch
    from stablehlo_pjrt.execute import LoadedExecutable

    answers = []
    fast = LoadedExecutable.execute_fast

    def counting(self, handles):
        out = fast(self, handles)
        answers.append(out is not None)
        return out

    monkeypatch.setattr(LoadedExecutable, "execute_fast", counting)
    dispatch.set_mode("sync")  # inline: the fast path's case
    try:
        exe, err = compile_text(client, TWO_OUTPUTS)
        assert err is None, err
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        bx, d1 = from_host(client, x, C.BufferType.F32)
        by, d2 = from_host(client, np.array(2.5, np.float32), C.BufferType.F32)
        (s1, p1), err = execute(exe, [bx, by], 2)
        assert err is None and answers == [True]
        full = C.struct_size(C.LoadedExecutable_Execute_Args) - 8  # no execute_device field
        args = (ctypes.c_void_p * 2)(bx, by)
        arg_lists = (ctypes.c_void_p * 1)(ctypes.addressof(args))
        outs = (ctypes.c_void_p * 2)()
        out_lists = (ctypes.c_void_p * 1)(ctypes.addressof(outs))
        a = C.LoadedExecutable_Execute_Args(
            executable=exe, argument_lists=ctypes.addressof(arg_lists), num_devices=1,
            num_args=2, output_lists=ctypes.addressof(out_lists))
        fn = FN(API.PJRT_LoadedExecutable_Execute)
        a.struct_size = full
        assert fn(ctypes.addressof(a)) is None
        assert answers == [True]  # the full handler ran, not the fast path
        for fast_out, full_out in ((s1, outs[0]), (p1, outs[1])):
            np.testing.assert_array_equal(to_host(fast_out, np.float32, (2, 3)),
                                          to_host(full_out, np.float32, (2, 3)))
        np.testing.assert_array_equal(to_host(s1, np.float32, (2, 3)), x + 2.5)
        np.testing.assert_array_equal(to_host(p1, np.float32, (2, 3)), x * 2.5)
        # Outputs aliasing inputs (identity) are copied, also on the fast path.
        ident, err = compile_text(client, IDENTITY)
        bi, d3 = from_host(client, np.array(7, np.int32), C.BufferType.S32)
        (o1, o2), err = execute(ident, [bx, bi], 2)
        assert err is None and answers[-1] is True
        np.testing.assert_array_equal(to_host(o2, np.float32, (2, 3)), x)
        destroy_buffer(bx)
        np.testing.assert_array_equal(to_host(o2, np.float32, (2, 3)), x)
        # A deleted input: the fast path declines, the full path reports it.
        _, err = execute(exe, [bx, by], 2)
        assert err[0] == C.ErrorCode.INVALID_ARGUMENT and "PJRT_Buffer" in err[1]
        for b in (by, bi, s1, p1, outs[0], outs[1], o1, o2):
            destroy_buffer(b)
        for d in (d1, d2, d3):
            event_destroy(d)
        for e in (exe, ident):
            ok("PJRT_LoadedExecutable_Destroy", C.LoadedExecutable_Destroy_Args(executable=e))
    finally:
        dispatch.set_mode("auto")


def test_constant_getter_answers_go_with_the_handle(client):
    """The trampoline keeps the answers of constant getters (a buffer's
    device and memory) until the handle is released: a destroyed buffer's
    handle is then rejected, not answered from the cache."""
    buf, done = from_host(client, np.zeros(3, np.float32), C.BufferType.F32)
    first = ok("PJRT_Buffer_Device", C.Buffer_Device_Args(buffer=buf)).device
    assert ok("PJRT_Buffer_Device", C.Buffer_Device_Args(buffer=buf)).device == first
    assert first == devices_of(client)[0]
    memory = ok("PJRT_Buffer_Memory", C.Buffer_Memory_Args(buffer=buf)).memory
    assert ok("PJRT_Buffer_Memory", C.Buffer_Memory_Args(buffer=buf)).memory == memory
    destroy_buffer(buf)
    event_destroy(done)
    for name, cls in (("PJRT_Buffer_Device", C.Buffer_Device_Args),
                      ("PJRT_Buffer_Memory", C.Buffer_Memory_Args)):
        err = call(name, cls(buffer=buf))
        assert err[0] == C.ErrorCode.INVALID_ARGUMENT and "PJRT_Buffer" in err[1]


def test_live_output_answers_follow_deletion(client):
    """The trampoline answers PJRT_Buffer_IsDeleted and PJRT_Buffer_ReadyEvent
    itself for the outputs of Execute's fast path while they are alive;
    once an output is deleted (PJRT_Buffer_Delete) Python answers again:
    IsDeleted is true and the ready event carries the deletion error."""
    from stablehlo_pjrt import _shim, dispatch

    dispatch.set_mode("sync")  # inline: the fast path's case
    try:
        exe, err = compile_text(client, TWO_OUTPUTS)
        assert err is None, err
        bx, d1 = from_host(client, np.ones((2, 3), np.float32), C.BufferType.F32)
        by, d2 = from_host(client, np.array(2.0, np.float32), C.BufferType.F32)
        (s, p), err = execute(exe, [bx, by], 2)
        assert err is None
        assert _shim.is_live(s) and _shim.is_live(p) and not _shim.is_live(bx)
        for b in (s, bx):  # answered in C, and by Python: the same
            assert ok("PJRT_Buffer_IsDeleted", C.Buffer_IsDeleted_Args(buffer=b)).is_deleted \
                is False
            ev = ok("PJRT_Buffer_ReadyEvent", C.Buffer_ReadyEvent_Args(buffer=b)).event
            assert _shim.event_state(ev)[:2] == (1, 0)
            event_destroy(ev)
        ok("PJRT_Buffer_Delete", C.Buffer_Delete_Args(buffer=s))
        assert not _shim.is_live(s)
        assert ok("PJRT_Buffer_IsDeleted", C.Buffer_IsDeleted_Args(buffer=s)).is_deleted is True
        ev = ok("PJRT_Buffer_ReadyEvent", C.Buffer_ReadyEvent_Args(buffer=s)).event
        ready, code = _shim.event_state(ev)[:2]
        assert ready and code == C.ErrorCode.FAILED_PRECONDITION
        event_destroy(ev)
        destroy_buffer(p)
        assert not _shim.is_live(p)  # released with its handle
        for b in (bx, by, s):
            destroy_buffer(b)
        for d in (d1, d2):
            event_destroy(d)
        ok("PJRT_LoadedExecutable_Destroy", C.LoadedExecutable_Destroy_Args(executable=exe))
    finally:
        dispatch.set_mode("auto")


def test_live_output_destroyed_in_c(client, monkeypatch):
    """PJRT_Buffer_Destroy of a live output that only the handle registry
    holds is done in C (_shim.c, destroy_live): the handle, its answers and
    its bytes go as Buffer.destroy lets them go. A buffer held elsewhere, or
    pinned, or externally referenced, is destroyed by Python."""
    from stablehlo_pjrt import _shim, dispatch, handles
    from stablehlo_pjrt.buffer import Buffer

    by_python = []
    destroy = Buffer.destroy
    monkeypatch.setattr(Buffer, "destroy", lambda b: (by_python.append(b.handle), destroy(b)))
    dev = devices_of(client)[0]

    def in_use():
        return ok("PJRT_Device_MemoryStats", C.Device_MemoryStats_Args(device=dev)).bytes_in_use

    dispatch.set_mode("sync")  # inline: the fast path's case
    try:
        exe, err = compile_text(client, TWO_OUTPUTS)
        assert err is None, err
        bx, d1 = from_host(client, np.ones((2, 3), np.float32), C.BufferType.F32)
        by, d2 = from_host(client, np.array(2.0, np.float32), C.BufferType.F32)
        before = in_use()
        (s, p), err = execute(exe, [bx, by], 2)
        assert err is None and in_use() == before + 48
        ok("PJRT_Buffer_Device", C.Buffer_Device_Args(buffer=s))  # (cached in C)
        destroy_buffer(s)
        assert by_python == [] and s not in handles._objects and not _shim.is_live(s)
        assert in_use() == before + 24
        err = call("PJRT_Buffer_Device", C.Buffer_Device_Args(buffer=s))
        assert err[0] == C.ErrorCode.INVALID_ARGUMENT  # the cached answer went too
        held = handles.peek(p)  # a second reference: Python's destroy
        destroy_buffer(p)
        assert by_python == [p] and held.deleted and held.array is None
        assert p not in handles._objects and in_use() == before
        del held

        (s, p), err = execute(exe, [bx, by], 2)
        assert err is None
        handles.peek(s).pin()  # pinned: not answered in C any more
        assert not _shim.is_live(s)
        ok("PJRT_Buffer_IncreaseExternalReferenceCount",
           C.Buffer_IncreaseExternalReferenceCount_Args(buffer=p))
        assert not _shim.is_live(p)
        ok("PJRT_Buffer_DecreaseExternalReferenceCount",
           C.Buffer_DecreaseExternalReferenceCount_Args(buffer=p))
        buf_s = handles.peek(s)
        destroy_buffer(s)
        assert buf_s.deleted and buf_s.array is not None  # kept for the pinning work
        buf_s.unpin()
        destroy_buffer(p)
        assert by_python[1:] == [s, p] and buf_s.array is None and in_use() == before
        for b in (bx, by):
            destroy_buffer(b)
        for d in (d1, d2):
            event_destroy(d)
        ok("PJRT_LoadedExecutable_Destroy", C.LoadedExecutable_Destroy_Args(executable=exe))
    finally:
        dispatch.set_mode("auto")


CONSTANT = """
module @constant {
  func.func public @main(%a: tensor<3xf32>) -> tensor<3xf32> {
    %c = stablehlo.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
    return %c : tensor<3xf32>
  }
}
"""


def test_fast_path_outputs_own_their_memory(client):
    """The fast path keeps a result as an output's memory only when it is
    writeable and C-contiguous (_shim.writable_c_contiguous, the buffer
    protocol's answer): a program returning its constant gets a copy per
    run, never the interpreter's array."""
    from stablehlo_pjrt import _shim, dispatch
    from stablehlo_pjrt.buffer import Buffer
    from stablehlo_pjrt.handles import lookup

    w = _shim.writable_c_contiguous
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    frozen = a.copy()
    frozen.flags.writeable = False
    assert w(a) and w(np.zeros(0)) and not w(frozen) and not w(a.T) and not w(3)
    dispatch.set_mode("sync")
    try:
        exe, err = compile_text(client, CONSTANT)
        assert err is None, err
        bx, d = from_host(client, np.zeros(3, np.float32), C.BufferType.F32)
        (o1,), err = execute(exe, [bx], 1)
        (o2,), err2 = execute(exe, [bx], 1)
        assert err is None and err2 is None
        arrays = [lookup(o, Buffer).array for o in (o1, o2)]
        assert arrays[0] is not arrays[1] and all(v.flags.writeable for v in arrays)
        np.testing.assert_array_equal(arrays[0], [1, 2, 3])
        for b in (bx, o1, o2):
            destroy_buffer(b)
        event_destroy(d)
        ok("PJRT_LoadedExecutable_Destroy", C.LoadedExecutable_Destroy_Args(executable=exe))
    finally:
        dispatch.set_mode("auto")


def _execute_nowait(exe, buffers, n_out, launch_id=0):
    """Execute with a launch id; returns (outputs, completion event) without
    waiting for the run."""
    args = (ctypes.c_void_p * max(1, len(buffers)))(*buffers)
    arg_lists = (ctypes.c_void_p * 1)(ctypes.addressof(args))
    outs = (ctypes.c_void_p * max(1, n_out))()
    out_lists = (ctypes.c_void_p * 1)(ctypes.addressof(outs))
    events = (ctypes.c_void_p * 1)()
    opts = C.PJRT_ExecuteOptions(launch_id=launch_id)
    opts.struct_size = C.struct_size(C.PJRT_ExecuteOptions)
    ok("PJRT_LoadedExecutable_Execute", C.LoadedExecutable_Execute_Args(
        executable=exe, options=ctypes.addressof(opts), argument_lists=ctypes.addressof(arg_lists),
        num_devices=1, num_args=len(buffers), output_lists=ctypes.addressof(out_lists),
        device_complete_events=ctypes.addressof(events)))
    return list(outs[:n_out]), events[0]


def test_poison_execution_fails_a_queued_run(client, monkeypatch):
    """PJRT_Device_PoisonExecution fails the earliest queued run with the
    launch id (its events and outputs carry the error); a run that is not
    queued is not poisoned."""
    import threading

    from stablehlo_pjrt import dispatch
    from stablehlo_pjrt.execute import LoadedExecutable
    from stablehlo_pjrt.handles import lookup

    monkeypatch.setattr(dispatch, "_mode", ["async"])
    exe, err = compile_text(client, IDENTITY)
    assert err is None
    meta = lookup(exe, LoadedExecutable).meta
    gate = threading.Event()
    original = meta.program.run

    def held(*args, **kwargs):
        gate.wait(30)
        return original(*args, **kwargs)
    # The plugin enters the interpreter through Program.call (and run).
    monkeypatch.setattr(meta.program, "run", held)
    monkeypatch.setattr(meta.program, "call", lambda args: held(*args))
    bx, d1 = from_host(client, np.ones((2, 3), np.float32), C.BufferType.F32)
    by, d2 = from_host(client, np.array(5, np.int32), C.BufferType.S32)
    first, e1 = _execute_nowait(exe, [bx, by], 2, launch_id=1)     # running, held
    second, e2 = _execute_nowait(exe, [bx, by], 2, launch_id=7)    # queued
    device = devices_of(client)[0]
    msg = ctypes.create_string_buffer(b"poisoned by the test")
    poison = C.Device_PoisonExecution_Args(device=device, launch_id=7,
                                           error_code=C.ErrorCode.ABORTED,
                                           error_message=ctypes.addressof(msg),
                                           error_message_size=20)
    assert ok("PJRT_Device_PoisonExecution", poison).poisoned
    poison.launch_id = 8
    assert not ok("PJRT_Device_PoisonExecution", poison).poisoned
    gate.set()
    assert event_await(e1) is None
    assert event_await(e2) == (C.ErrorCode.ABORTED, "poisoned by the test")
    assert to_host(first[0], np.int32, ()) == 5
    r = C.Buffer_ReadyEvent_Args(buffer=second[0])
    ok("PJRT_Buffer_ReadyEvent", r)
    assert event_await(r.event) == (C.ErrorCode.ABORTED, "poisoned by the test")
    for ev in (e1, e2, r.event, d1, d2):
        event_destroy(ev)
    for b in (bx, by, *first, *second):
        destroy_buffer(b)
    ok("PJRT_LoadedExecutable_Destroy", C.LoadedExecutable_Destroy_Args(executable=exe))


def test_compile_errors(client):
    _, err = compile_text(client, "this is not MLIR")
    assert err[0] == C.ErrorCode.INVALID_ARGUMENT
    bad_format = C.PJRT_Program(code=None, code_size=0)
    fmt = ctypes.create_string_buffer(b"tosa")
    bad_format.format = ctypes.addressof(fmt)
    bad_format.format_size = 4
    bad_format.struct_size = C.struct_size(C.PJRT_Program)
    err = call("PJRT_Client_Compile", C.Client_Compile_Args(
        client=client, program=ctypes.addressof(bad_format)))
    # INVALID_ARGUMENT, as XLA's plugins answer a format they do not take
    # (XLA's CompileInvalidProgramFormat test; the checker checks it too).
    assert err[0] == C.ErrorCode.INVALID_ARGUMENT and "'tosa'" in err[1]


def test_compile_options_and_device_assignment_codec():
    from jax._src.lib import xla_client

    from stablehlo_pjrt.executable import CompileOptions, decode_device_assignment, encode_device_assignment
    for assignment in ([[0]], [[0, 1]], [[3], [1]], [[0, 1, 2], [3, 4, 5]]):
        ref = xla_client.DeviceAssignment.create(np.array(assignment)).serialize()
        assert encode_device_assignment(assignment) == ref
        assert decode_device_assignment(ref) == assignment
    opts = xla_client.CompileOptions()
    opts.executable_build_options.num_replicas = 2
    opts.executable_build_options.num_partitions = 1
    opts.device_assignment = xla_client.DeviceAssignment.create(np.array([[1], [0]]))
    parsed = CompileOptions(opts.SerializeAsString())
    assert (parsed.num_replicas, parsed.num_partitions) == (2, 1)
    assert parsed.device_assignment == [[1], [0]]


REPLICATED = """
module @replicated attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 1 : i32} {
  func.func public @main(%x: tensor<3xui32>) -> tensor<3xui32> {
    %r = stablehlo.replica_id : tensor<ui32>
    %b = stablehlo.broadcast_in_dim %r, dims = [] : (tensor<ui32>) -> tensor<3xui32>
    %y = stablehlo.add %x, %b : tensor<3xui32>
    return %y : tensor<3xui32>
  }
}
"""


def test_replicated_program_runs_on_two_devices():
    from jax._src.lib import xla_client

    from stablehlo_pjrt.handles import NamedValues
    opts_nv = NamedValues({"num_devices": 2})
    c = ok("PJRT_Client_Create", C.Client_Create_Args(
        create_options=opts_nv.address, num_options=opts_nv.count)).client
    try:
        devs = devices_of(c)
        assert len(devs) == 2
        opts = xla_client.CompileOptions()
        opts.executable_build_options.num_replicas = 2
        opts.executable_build_options.num_partitions = 1
        opts.device_assignment = xla_client.DeviceAssignment.create(np.array([[1], [0]]))
        exe, err = compile_text(c, REPLICATED, opts.SerializeAsString())
        assert err is None, err
        addr = ok("PJRT_LoadedExecutable_AddressableDevices",
                  C.LoadedExecutable_AddressableDevices_Args(executable=exe))
        assert C.read_pointers(addr.addressable_devices, 2) == [devs[1], devs[0]]
        ids = ok("PJRT_LoadedExecutable_AddressableDeviceLogicalIds",
                 C.LoadedExecutable_AddressableDeviceLogicalIds_Args(executable=exe))
        logical = (C.PJRT_LogicalDeviceIds * 2).from_address(ids.addressable_device_logical_ids)
        assert [(x.replica, x.partition) for x in logical] == [(0, 0), (1, 0)]
        x0, d0 = from_host(c, np.array([10, 20, 30], np.uint32), C.BufferType.U32)
        x1, d1 = from_host(c, np.array([1, 2, 3], np.uint32), C.BufferType.U32)
        a0 = (ctypes.c_void_p * 1)(x0)
        a1 = (ctypes.c_void_p * 1)(x1)
        arg_lists = (ctypes.c_void_p * 2)(ctypes.addressof(a0), ctypes.addressof(a1))
        o0 = (ctypes.c_void_p * 1)()
        o1 = (ctypes.c_void_p * 1)()
        out_lists = (ctypes.c_void_p * 2)(ctypes.addressof(o0), ctypes.addressof(o1))
        ok("PJRT_LoadedExecutable_Execute", C.LoadedExecutable_Execute_Args(
            executable=exe, argument_lists=ctypes.addressof(arg_lists), num_devices=2,
            num_args=1, output_lists=ctypes.addressof(out_lists)))
        np.testing.assert_array_equal(to_host(o0[0], np.uint32, (3,)), [10, 20, 30])
        np.testing.assert_array_equal(to_host(o1[0], np.uint32, (3,)), [2, 3, 4])
        dev = ok("PJRT_Buffer_Device", C.Buffer_Device_Args(buffer=o1[0])).device
        assert dev == devs[0]
        for b in (x0, x1, o0[0], o1[0]):
            destroy_buffer(b)
        event_destroy(d0)
        event_destroy(d1)
        ok("PJRT_LoadedExecutable_Destroy", C.LoadedExecutable_Destroy_Args(executable=exe))
    finally:
        ok("PJRT_Client_Destroy", C.Client_Destroy_Args(client=c))


def test_view_of_host_memory_and_error_buffer(client):
    data = np.arange(4, dtype=np.float32)
    dims = (ctypes.c_int64 * 1)(4)
    deleted = []
    on_delete = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(
        lambda ptr, arg: deleted.append((ptr, arg)))
    v = ok("PJRT_Client_CreateViewOfDeviceBuffer", C.Client_CreateViewOfDeviceBuffer_Args(
        client=client, device_buffer_ptr=data.ctypes.data, dims=ctypes.addressof(dims),
        num_dims=1, element_type=C.BufferType.F32, device=devices_of(client)[0],
        on_delete_callback=ctypes.cast(on_delete, ctypes.c_void_p).value,
        on_delete_callback_arg=99))
    np.testing.assert_array_equal(to_host(v.buffer, np.float32, (4,)), data)
    destroy_buffer(v.buffer)
    assert deleted == [(data.ctypes.data, 99)]

    msg = b"upstream failed"
    e = ok("PJRT_Client_CreateErrorBuffer", C.Client_CreateErrorBuffer_Args(
        client=client, error_code=C.ErrorCode.ABORTED, error_message=ctypes.cast(
            ctypes.c_char_p(msg), ctypes.c_void_p).value,
        error_message_size=len(msg), shape_dims=ctypes.addressof(dims), shape_num_dims=1,
        shape_element_type=C.BufferType.F32))
    err = call("PJRT_Buffer_ToHostBuffer", C.Buffer_ToHostBuffer_Args(src=e.buffer))
    assert err == (C.ErrorCode.ABORTED, "upstream failed")
    ready = ok("PJRT_Buffer_ReadyEvent", C.Buffer_ReadyEvent_Args(buffer=e.buffer)).event
    assert _shim.event_state(ready) == (1, C.ErrorCode.ABORTED, "upstream failed")
    event_destroy(ready)
    destroy_buffer(e.buffer)


def test_older_callers_struct_size_is_respected(client):
    """A caller built against an older header passes a shorter args struct;
    fields it does not have must not be written."""
    dev = devices_of(client)[0]
    raw = (ctypes.c_char * ctypes.sizeof(C.Device_MemoryStats_Args))()
    ctypes.memset(raw, 0x5A, ctypes.sizeof(raw))
    a = C.Device_MemoryStats_Args.from_buffer(raw)
    short = C.Device_MemoryStats_Args.bytes_reserved.offset  # as before bytes_reserved existed
    a.struct_size = short
    a.extension_start = None
    a.device = dev
    fn = FN(API.PJRT_Device_MemoryStats)
    assert fn(ctypes.addressof(a)) is None
    assert a.num_allocs_is_set
    assert bytes(raw)[short:] == b"\x5a" * (ctypes.sizeof(raw) - short)


# ---------------------------------------------------------------------------
# struct_size (pjrt_c_api.h's versioning rules)
# ---------------------------------------------------------------------------


def call_sized(name: str, args, size: int):
    """Like `call`, with the caller's struct_size forced to ``size``; the
    struct sits in a buffer with 0xAB canary bytes after it."""
    n = ctypes.sizeof(args)
    buf = (ctypes.c_ubyte * (n + 64))(*([0xAB] * (n + 64)))
    ctypes.memmove(buf, ctypes.addressof(args), max(min(n, size), 8))
    ctypes.c_size_t.from_buffer(buf).value = size
    err = FN(getattr(API, name))(ctypes.addressof(buf))
    info = None
    if err:
        info = _shim.error_info(err)
        destroy = C._args("D", [("error", C.P)])()
        destroy.struct_size = C.struct_size(type(destroy))
        destroy.error = err
        ctypes.CFUNCTYPE(None, ctypes.c_void_p)(API.PJRT_Error_Destroy)(ctypes.addressof(destroy))
    return info, bytes(buf)


def test_older_caller_struct_is_not_written_past(client):
    # PJRT_Client_Devices_Args ends with num_devices: a caller whose header
    # stops before it gets `devices` and nothing past its struct_size.
    args = C.Client_Devices_Args(client=client)
    full = C.struct_size(C.Client_Devices_Args)
    err, raw = call_sized("PJRT_Client_Devices", args, full - 8)
    assert err is None
    assert raw[full - 8:] == b"\xab" * (len(raw) - (full - 8))
    devices = ctypes.c_void_p.from_buffer_copy(raw, C.Client_Devices_Args.devices.offset)
    assert devices.value  # the fields it knows are served


def test_newer_caller_struct_extra_bytes_untouched(client):
    args = C.Client_Devices_Args(client=client)
    full = C.struct_size(C.Client_Devices_Args)
    err, raw = call_sized("PJRT_Client_Devices", args, full + 16)
    assert err is None
    assert raw[full:full + 16] == b"\xab" * 16
    assert ctypes.c_size_t.from_buffer_copy(raw, C.Client_Devices_Args.num_devices.offset).value >= 1


@pytest.mark.parametrize("size", [0, 8, 15])
def test_struct_size_below_the_header_is_invalid_argument(client, size):
    err, raw = call_sized("PJRT_Client_Devices", C.Client_Devices_Args(client=client), size)
    assert err is not None and err[0] == C.ErrorCode.INVALID_ARGUMENT
    assert "struct_size" in err[1] and "PJRT_Client_Devices" in err[1]
    assert raw[16:] == b"\xab" * (len(raw) - 16)


def test_null_args_is_invalid_argument():
    err = FN(API.PJRT_Client_Devices)(None)
    info = _shim.error_info(err)
    assert info[0] == C.ErrorCode.INVALID_ARGUMENT and "NULL" in info[1]


def test_garbage_compile_options_are_invalid_argument(client):
    text = IDENTITY.encode()
    fmt = b"mlir"
    prog = C.PJRT_Program(code=ctypes.cast(ctypes.c_char_p(text), C.P), code_size=len(text),
                          format=ctypes.cast(ctypes.c_char_p(fmt), C.P), format_size=len(fmt))
    prog.struct_size = C.struct_size(C.PJRT_Program)
    opts = b"\xff\xff\xff garbage"
    err = call("PJRT_Client_Compile", C.Client_Compile_Args(
        client=client, program=ctypes.addressof(prog),
        compile_options=ctypes.cast(ctypes.c_char_p(opts), C.P), compile_options_size=len(opts)))
    assert err is not None and err[0] == C.ErrorCode.INVALID_ARGUMENT
    assert "CompileOptionsProto" in err[1]


def test_copy_to_own_memory_and_device_is_a_copy(client):
    # jaxlib asks for it (lax_autodiff_test's testScatterGradSymbolicZeroUpdate);
    # it was INVALID_ARGUMENT "already in".
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    buf, _ = from_host(client, x, C.BufferType.F32)
    mem = ok("PJRT_Buffer_Memory", C.Buffer_Memory_Args(buffer=buf)).memory
    dev = devices_of(client)[0]
    a = ok("PJRT_Buffer_CopyToMemory", C.Buffer_CopyToMemory_Args(buffer=buf, dst_memory=mem))
    b = ok("PJRT_Buffer_CopyToDevice", C.Buffer_CopyToDevice_Args(buffer=buf, dst_device=dev))
    for new in (a.dst_buffer, b.dst_buffer):
        assert new and new != buf
        np.testing.assert_array_equal(to_host(new, np.float32, (2, 3)), x)
        destroy_buffer(new)
    destroy_buffer(buf)
