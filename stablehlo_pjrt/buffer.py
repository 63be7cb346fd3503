"""Buffers: numpy arrays on a stablehlo_ref device.

A PJRT_Buffer is a C-contiguous numpy array (never an MLIR attribute) plus
the device/memory it lives on.  Arrays are treated as immutable once they are
in a buffer, which is what lets copies between devices and zero-copy host
buffers share memory safely.
"""

from __future__ import annotations

import ctypes
import threading

import ml_dtypes
import numpy as np

from . import _shim, dispatch
from ._capi import HUGE_BYTES, BufferType, HostBufferSemantics, MemoryLayoutType
from .device import Device, Memory
from .error import PjrtError, failed_precondition, invalid_argument, unimplemented
from .event import Completion
from .handles import _objects, int64_array, maybe_lookup, register, release

# ----------------------------------------------------------------------------
# Element types
# ----------------------------------------------------------------------------

# PJRT_Buffer_Type -> MLIR element type. The numpy dtype of each is the
# interpreter's (stablehlo_interpreter.dtypes, the one element-type table):
# sub-byte integer and float types are stored unpacked, one element per byte
# (ml_dtypes), which is also how XLA exchanges them with the host.
_ELEMENT_TYPES = {
    BufferType.PRED: "i1",
    BufferType.S8: "i8",
    BufferType.S16: "i16",
    BufferType.S32: "i32",
    BufferType.S64: "i64",
    BufferType.U8: "ui8",
    BufferType.U16: "ui16",
    BufferType.U32: "ui32",
    BufferType.U64: "ui64",
    BufferType.F16: "f16",
    BufferType.F32: "f32",
    BufferType.F64: "f64",
    BufferType.BF16: "bf16",
    BufferType.C64: "complex<f32>",
    BufferType.C128: "complex<f64>",
    BufferType.F8E5M2: "f8E5M2",
    BufferType.F8E4M3FN: "f8E4M3FN",
    BufferType.F8E4M3B11FNUZ: "f8E4M3B11FNUZ",
    BufferType.F8E5M2FNUZ: "f8E5M2FNUZ",
    BufferType.F8E4M3FNUZ: "f8E4M3FNUZ",
    BufferType.S4: "i4",
    BufferType.U4: "ui4",
    BufferType.S2: "i2",
    BufferType.U2: "ui2",
    BufferType.F8E4M3: "f8E4M3",
    BufferType.F8E3M4: "f8E3M4",
    BufferType.F8E8M0FNU: "f8E8M0FNU",
    BufferType.F4E2M1FN: "f4E2M1FN",
}
# PJRT's 1-bit integers have no StableHLO element type (host transfers only).
_HOST_ONLY_DTYPES = {
    BufferType.S1: np.dtype(ml_dtypes.int1),
    BufferType.U1: np.dtype(ml_dtypes.uint1),
}
_TYPE_NAMES = {v: k for k, v in vars(BufferType).items() if not k.startswith("_")}
# Built on first use from the interpreter's table (the plugin imports the
# interpreter lazily, so that a broken interpreter is reported by
# PJRT_Client_Create, not by loading the plugin).
_TYPES: dict = {}           # PJRT type -> (numpy dtype, MLIR element type or None)
_DTYPE_TO_TYPE: dict = {}
_ELEMENT_TO_TYPE: dict = {}


def _build_type_tables() -> dict:
    from stablehlo_interpreter import dtypes
    types = {t: (dtypes.from_element_type(et), et) for t, et in _ELEMENT_TYPES.items()}
    types.update((t, (dt, None)) for t, dt in _HOST_ONLY_DTYPES.items())
    _DTYPE_TO_TYPE.update((dt, t) for t, (dt, _) in types.items())
    _ELEMENT_TO_TYPE.update((et, t) for t, et in _ELEMENT_TYPES.items())
    _ELEMENT_TO_TYPE["!stablehlo.token"] = BufferType.TOKEN
    _TYPES.update(types)
    return _TYPES


def type_table() -> dict:
    """PJRT buffer type -> (numpy dtype, MLIR element type or None): the one table."""
    return dict(_TYPES or _build_type_tables())


def type_name(t: int) -> str:
    return _TYPE_NAMES.get(t, f"type#{t}")


def dtype_of(t: int) -> np.dtype:
    entry = (_TYPES or _build_type_tables()).get(t)
    if entry is None:
        if t == BufferType.TOKEN:
            raise invalid_argument("token buffers carry no host data")
        raise invalid_argument(f"unsupported PJRT buffer element type {type_name(t)}")
    return entry[0]


def type_of_dtype(dtype) -> int:
    _TYPES or _build_type_tables()
    t = _DTYPE_TO_TYPE.get(np.dtype(dtype))
    if t is None:
        raise unimplemented(f"numpy dtype {np.dtype(dtype)} has no PJRT buffer type")
    return t


def type_of_element(element_type: str) -> int:
    _TYPES or _build_type_tables()
    t = _ELEMENT_TO_TYPE.get(element_type)
    if t is None:
        raise unimplemented(f"element type {element_type} has no PJRT buffer type")
    return t


def short_type(t: int) -> str:
    """XLA-style short name (f32, s32, pred, ...) for traces."""
    return type_name(t).lower()


def c_strides(shape, itemsize: int) -> tuple[int, ...]:
    strides = []
    acc = itemsize
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(int(d), 1)
    return tuple(reversed(strides))


class Token:
    """Value of a token buffer (tokens have no data)."""

    def __repr__(self):
        return "token"


def _interpreter_token():
    try:
        import stablehlo_interpreter as shi
        return shi.TOKEN
    except Exception:  # interpreter unavailable: the plugin's own marker
        return TOKEN


TOKEN = Token()
# Buffers destroyed with external references still held (Buffer.orphan).
_ORPHANS: list = []

# ----------------------------------------------------------------------------
# Buffers
# ----------------------------------------------------------------------------


# Guards the transitions between a buffer's states when the worker
# (dispatch.py) and the caller's threads both touch it: deletion, pins, the
# data of an output arriving.
_deleted = _shim.deleted
_STATE = threading.Lock()
_new_buffer = object.__new__
_register_as = _objects.__setitem__  # handles.register without the call
_unregister = _objects.pop
_forget = _shim.forget
_stats_alloc = _shim.stats_alloc
_stats_free = _shim.stats_free


class Buffer:
    """PJRT_Buffer.

    `array` is a C-contiguous numpy array (or the token marker for TOKEN
    buffers), None after deletion.  `error` is set for error buffers
    (PJRT_Client_CreateErrorBuffer, failed or cancelled runs): using them
    reports that error.

    Asynchronous execution (dispatch.py) adds two states:

    * pending: an output whose program has not finished has `ready`, the
      run's :class:`Completion`, and no array yet (shape, type and size are
      known). Reading the data waits for it (:meth:`live_array`); ready
      events and transfers chain on it.
    * pinned: `pins` counts the queued or running programs and transfers
      that read the buffer. Deleting a pinned buffer marks it deleted at once
      (as the caller sees it) but keeps its data until the last of them
      finishes, so zero-copy host memory is handed back only then.
    """

    __slots__ = ("handle", "array", "type", "shape", "device", "memory",
                 "deleted", "nbytes", "error", "on_free", "borrowed", "external_refs",
                 "pins", "ready", "_held", "_deferred", "_dims_c", "_layout_c", "__weakref__")

    def __init__(self, array, buffer_type: int, device, memory=None,
                 on_free=None, error: tuple[int, str] | None = None,
                 shape: tuple[int, ...] | None = None, ready: Completion | None = None,
                 nbytes: int | None = None):
        self.array = array
        self.type = buffer_type
        self.shape = tuple(array.shape) if shape is None else shape
        self.device = device
        self.memory = memory if memory is not None else device.default_memory
        self.deleted = False
        self.error = error
        if nbytes is None:
            nbytes = 0 if (error or buffer_type == BufferType.TOKEN) else int(array.nbytes)
        self.nbytes = nbytes
        # Called once when the data is released (zero-copy host buffers
        # signal their done event, views run their on-delete callback).
        self.on_free = on_free
        # Borrowed arrays alias memory the caller owns and frees after
        # on_free; anything derived from them that outlives this buffer
        # (copies to other devices, execution results) must be copied.
        self.borrowed = on_free is not None
        # PJRT external references (jaxlib's zero-copy numpy views and DLPack
        # exports hold one): while any is held the memory must stay valid and
        # unchanged, even after delete() (see release_external_reference).
        self.external_refs = 0
        self._held = None
        self.pins = 0
        self._deferred = False  # deleted while pinned: the last unpin() lets go
        self.ready = ready
        self._dims_c = None
        self._layout_c = None
        device.allocated(self.nbytes)
        register(self)

    @classmethod
    def finished_output(cls, array, buffer_type: int, device, memory, nbytes: int) -> int:
        """``Buffer(array, buffer_type, device, memory).handle`` for a run's
        result that the buffer owns (Execute's fast path, every call):
        ``nbytes`` is ``array.nbytes``, known from the program's output type.
        Every slot is set as ``__init__`` sets it, without its defaults and
        branches (tests/test_execute_fast.py checks the two agree). Execute's
        fast path calls _shim.new_output, the same in C, where it is built
        (``finished_output`` below)."""
        b = _new_buffer(cls)
        b.array = array
        b.type = buffer_type
        b.shape = array.shape
        b.device = device
        b.memory = memory
        b.nbytes = nbytes
        _output_defaults(b)
        _stats_alloc(device.stats, nbytes)  # device.allocated(nbytes)
        h = b.handle = id(b)
        _register_as(h, b)
        return h

    # -- state ---------------------------------------------------------------

    def check_alive(self) -> None:
        """Raises the PjrtError a read would raise, without waiting for a
        pending buffer's data."""
        if self.deleted:
            raise failed_precondition(
                f"buffer {self.describe()} has been deleted or donated")
        if self.error is not None:
            raise PjrtError(*self.error)

    def live_array(self):
        """The data, or a PjrtError if the buffer cannot be read; waits for
        a pending buffer's program to finish."""
        ready = self.ready
        if ready is not None and not ready.done:
            dispatch.wait(ready, str(self))
        if self.deleted:
            raise failed_precondition(
                f"buffer {self.describe()} has been deleted or donated")
        if self.error is not None:
            raise PjrtError(*self.error)
        return self.array

    def delete(self) -> None:
        with _STATE:
            if self.deleted:
                return
            self.deleted = True
            _deleted(self.handle)  # the trampoline no longer answers for it
            if self.pins:
                # Queued or running work reads the data: the last unpin()
                # lets go of it.
                self._deferred = True
                return
            free = self._let_go()
        if free:
            self._free()

    def destroy(self) -> None:
        """PJRT_Buffer_Destroy: :meth:`delete`, :meth:`orphan`, then the
        handle is released (``handles.release``). The common case (alive,
        unpinned, no external reference, nothing to call back when the
        memory goes: every output of a jitted call) is done here without
        their calls, as they would do it."""
        h = self.handle
        with _STATE:
            plain = not (self.deleted or self.pins or self.external_refs
                         or self.on_free is not None)
            if plain:
                self.deleted = True
                self.array = None
        if not plain:
            self.delete()
            self.orphan()
            release(h)
            return
        # handles.release: the trampoline's answers for the handle go (its
        # live-output answer included), then the object.
        _forget(h)
        _unregister(h, None)
        _stats_free(self.device.stats, self.nbytes)  # device.freed(nbytes)

    def _let_go(self) -> bool:
        """Drops the data of a deleted buffer nothing pins (under _STATE);
        True when the memory is free now (the caller calls _free())."""
        if self.external_refs:
            # Someone outside holds a pointer to this memory (a numpy view or
            # DLPack capsule): the buffer is gone, the memory stays (as XLA's
            # external references keep a deleted buffer's memory) until the
            # last reference is released.
            self._held = self.array
            self.array = None
            return False
        self.array = None
        return True

    def _free(self) -> None:
        self.device.freed(self.nbytes)
        callback, self.on_free = self.on_free, None
        if callback is not None:
            callback()

    def pin(self) -> None:
        with _STATE:
            if not self.pins:
                # The trampoline no longer answers for it (its Destroy in C
                # frees only unpinned buffers).
                _deleted(self.handle)
            self.pins += 1

    def unpin(self) -> None:
        with _STATE:
            self.pins -= 1
            free = False
            if self.pins == 0 and self._deferred:
                self._deferred = False
                free = self._let_go()
        if free:
            self._free()

    def take_array(self):
        """The data of a donated buffer, handed over to the run that
        consumes it (the buffer keeps no reference: in-place updates need
        the interpreter to hold the only one). The buffer is deleted and
        pinned by that run only."""
        with _STATE:
            array, self.array = self.array, None
        if array is None:
            raise failed_precondition(f"buffer {self.describe()} has no data (deleted)")
        return array

    def fulfil(self, array=None, error: tuple[int, str] | None = None) -> None:
        """A pending output's data (or its run's error) has arrived."""
        with _STATE:
            if not self.deleted or self.pins:
                # (A deleted buffer still pinned by a queued program gets its
                # data for that program; the last unpin() releases it.)
                if error is None:
                    self.array = array
                else:
                    self.error = error
                    if not self.deleted:
                        self.device.freed(self.nbytes)
                        self.nbytes = 0
        self.ready = None

    def pinned_data(self):
        """The data for work that pinned this buffer (it may have been
        deleted since, as the caller sees it): raises the buffer's error."""
        if self.error is not None:
            raise PjrtError(*self.error)
        if self.array is None:
            raise failed_precondition(f"buffer {self.describe()} has no data (deleted)")
        return self.array

    def add_external_reference(self) -> None:
        # Waits for a pending output's data (jaxlib reads results in place
        # through an external reference and OpaqueDeviceMemoryDataPointer:
        # the address handed out must be the final one).
        self.live_array()
        with _STATE:
            if self.deleted:  # (by another thread since)
                raise failed_precondition(
                    f"buffer {self.describe()} has been deleted or donated")
            if not self.external_refs:
                _deleted(self.handle)  # (its Destroy in C frees only unreferenced buffers)
            self.external_refs += 1

    def release_external_reference(self) -> None:
        with _STATE:
            if self.external_refs <= 0:
                # INVALID_ARGUMENT, as XLA's C API test DecreaseReferenceCountReturnsError asks.
                raise invalid_argument(f"{self} has no external references to release")
            self.external_refs -= 1
            free = not self.external_refs and self.deleted and self._held is not None
            if free:
                self._held = None
        if free:
            self._free()

    def orphan(self) -> None:
        """PJRT_Buffer_Destroy while external references are held (a caller
        bug: jaxlib releases them first): the memory is leaked, never freed
        under a live view."""
        if self.external_refs:
            _ORPHANS.append(self)

    def describe(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        return f"{short_type(self.type)}[{dims}]"

    def __str__(self):
        state = " deleted" if self.deleted else ""
        # The memory space shows when it is not the device's default (the
        # PJRT trace then tells where each buffer lives).
        memory = "" if self.memory is self.device.default_memory else f" in {self.memory.kind}"
        return f"Buffer({self.describe()} on {self.device}{memory}{state}, {self.handle:#x})"

    # -- C views kept alive by the buffer ------------------------------------

    def dims_array(self) -> int:
        if self._dims_c is None:
            self._dims_c = int64_array(self.shape)
        return self._dims_c[1]

    def layout(self):
        """Dense major-to-minor layout as a PJRT_Buffer_MemoryLayout."""
        from ._capi import PJRT_Buffer_MemoryLayout, PJRT_Buffer_MemoryLayout_Tiled, struct_size
        if self._layout_c is None:
            rank = len(self.shape)
            m2m, m2m_addr = int64_array(range(rank - 1, -1, -1))
            layout = PJRT_Buffer_MemoryLayout()
            layout.struct_size = struct_size(PJRT_Buffer_MemoryLayout)
            layout.type = MemoryLayoutType.Tiled
            layout.tiled.struct_size = struct_size(PJRT_Buffer_MemoryLayout_Tiled)
            layout.tiled.minor_to_major = m2m_addr
            layout.tiled.minor_to_major_size = rank
            layout.tiled.tile_dims = None
            layout.tiled.tile_dim_sizes = None
            layout.tiled.num_tiles = 0
            self._layout_c = (layout, m2m)
        return self._layout_c[0]


# ----------------------------------------------------------------------------
# Host <-> buffer transfers
# ----------------------------------------------------------------------------


# PJRT_Buffer_Destroy of an output of Execute's fast path is done in C when
# the registry holds the only reference (_shim.c, destroy_live): what
# destroy() does in its common case, without running Python.
_shim.set_registry(_objects, Buffer)


def _output_defaults(b: Buffer) -> None:
    """The slots that every ready output a run owns starts with, as
    ``__init__`` sets them."""
    b.deleted = False
    b.error = None
    b.on_free = None
    b.borrowed = False
    b.external_refs = 0
    b._held = None
    b.pins = 0
    b._deferred = False
    b.ready = None
    b._dims_c = None
    b._layout_c = None


def _output_template() -> Buffer:
    """A Buffer whose slots hold what finished_output gives every output
    (the varying ones None): what _shim.new_output copies."""
    b = _new_buffer(Buffer)
    for name in ("handle", "array", "type", "shape", "device", "memory", "nbytes"):
        setattr(b, name, None)
    _output_defaults(b)
    return b


# finished_output(array, buffer_type, device, memory, nbytes) -> handle, as
# Buffer.finished_output: in one C call when the trampoline has it (about a
# third of the Python version's time); a trampoline built before it could
# lacks it.
if hasattr(_shim, "new_output"):
    _shim.set_output_template(_output_template())
    finished_output = _shim.new_output
else:
    finished_output = Buffer.finished_output


def host_view(data: int, dtype: np.dtype, dims: tuple[int, ...],
              byte_strides: tuple[int, ...] | None) -> np.ndarray:
    """A numpy view of caller memory described by PJRT (strides may be
    negative, with `data` pointing inside the buffer)."""
    itemsize = dtype.itemsize
    if any(d < 0 for d in dims):
        raise invalid_argument(f"negative dimension in {dims}")
    if byte_strides is None:
        byte_strides = c_strides(dims, itemsize)
    elif len(byte_strides) != len(dims):
        raise invalid_argument(
            f"{len(byte_strides)} byte strides given for {len(dims)} dimensions")
    if 0 in dims:
        return np.empty(dims, dtype)
    if not data:
        raise invalid_argument("host data pointer is NULL")
    lo = sum(min(0, (d - 1) * s) for d, s in zip(dims, byte_strides))
    hi = sum(max(0, (d - 1) * s) for d, s in zip(dims, byte_strides)) + itemsize
    if hi - lo >= HUGE_BYTES or data + lo < 0:
        # No mapping spans this: garbage strides, refused before any read.
        raise invalid_argument(
            f"byte strides {list(byte_strides)} of {dims} reach {hi - lo} bytes "
            f"(from offset {lo}), more than any host buffer")
    raw = (ctypes.c_char * (hi - lo)).from_address(data + lo)
    return np.ndarray(dims, dtype=dtype, buffer=raw, offset=-lo, strides=byte_strides)


def _has_odd_bools(view: np.ndarray) -> bool:
    """Whether a PRED view holds bytes other than 0 and 1. numpy compares and
    reinterprets bools by their byte (two "true" bytes 1 and 96 compare
    unequal, ``bitcast``/``view`` shows 96), so the buffers keep canonical
    bools only: a host byte other than 0 is true, stored as 1 (numpy makes
    such bools from ``view(bool)`` of other data, JAX's tests do)."""
    return view.dtype == np.bool_ and view.size > 0 and bool(
        (view.view(np.uint8) > 1).any())


def buffer_from_host(client, data: int, buffer_type: int, dims, byte_strides,
                     semantics: int, device, memory):
    """Implements PJRT_Client_BufferFromHostBuffer's data handling.

    Returns (buffer, done_event_address).
    """
    if buffer_type == BufferType.TOKEN:
        buf = Buffer(_interpreter_token(), BufferType.TOKEN, device, memory, shape=())
        return buf, _shim.event_new(True)
    dtype = dtype_of(buffer_type)
    dims = tuple(int(d) for d in dims)
    view = host_view(data, dtype, dims, byte_strides)
    dense = view.flags.c_contiguous
    odd_bools = _has_odd_bools(view)
    if semantics in (HostBufferSemantics.kImmutableZeroCopy,
                     HostBufferSemantics.kMutableZeroCopy) and dense and view.size \
            and not odd_bools:
        # Alias the caller's memory for the life of the buffer.  The caller
        # may free it once done_with_host_buffer fires, i.e. when the buffer
        # is deleted, so the event stays pending until then.
        view.flags.writeable = False
        done = _shim.event_new(False)
        fired = []

        def release_host_memory(done=done, fired=fired):
            if not fired:
                fired.append(True)
                _shim.event_set(done)

        buf = Buffer(view, buffer_type, device, memory, on_free=release_host_memory)
        return buf, done
    if semantics not in (HostBufferSemantics.kImmutableOnlyDuringCall,
                         HostBufferSemantics.kImmutableUntilTransferCompletes,
                         HostBufferSemantics.kImmutableZeroCopy,
                         HostBufferSemantics.kMutableZeroCopy):
        raise invalid_argument(f"unknown host buffer semantics {semantics}")
    # Copy now; the caller may reuse its memory as soon as we return.
    if odd_bools:
        # np.array, not ascontiguousarray: that makes a 0-d result 1-d.
        array = np.array(view.view(np.uint8) != 0, dtype=np.bool_, order="C")
    else:
        array = np.array(view, dtype=dtype, order="C", copy=True)
    array.flags.writeable = False
    return Buffer(array, buffer_type, device, memory), _shim.event_new(True)


def view_of_memory(data: int, buffer_type: int, dims, layout_ptr, on_free, device, memory):
    """Implements PJRT_Client_CreateViewOfDeviceBuffer (jaxlib's DLPack import).

    Device memory is host memory here, so a row-major view is the buffer
    itself, zero-copy: borrowed (never written, copied wherever it must
    outlive the buffer) and handed back through ``on_free`` when the buffer
    is deleted. Other layouts (a transposed torch tensor, numpy's Fortran
    order) are copied into a row-major array, the buffers' one storage
    order, and handed back at once: refusing them would not make jaxlib copy
    (its fallback asks PJRT C API clients for kMutableZeroCopy host buffers,
    which jaxlib's C API client itself rejects), and
    ``stablehlo_pjrt.from_dlpack(..., copy=False)`` refuses such layouts
    before asking."""
    if buffer_type == BufferType.TOKEN:
        raise invalid_argument("a view of device memory cannot be a token buffer")
    dtype = dtype_of(buffer_type)
    dims = tuple(int(d) for d in dims)
    strides = host_layout_strides(layout_ptr, dims, dtype.itemsize)
    view = host_view(data, dtype, dims, strides)
    if _has_odd_bools(view):
        view = view.view(np.uint8) != 0   # a canonical copy (see _has_odd_bools)
        borrow = False
    else:
        borrow = view.flags.c_contiguous
    if borrow:
        view.flags.writeable = False
        buf = Buffer(view, buffer_type, device, memory, on_free=on_free)
        buf.borrowed = True
        return buf
    array = np.array(view, order="C", copy=True)
    array.flags.writeable = False
    buf = Buffer(array, buffer_type, device, memory)
    if on_free is not None:
        on_free()
    return buf


def host_layout_strides(layout_ptr: int | None, shape, itemsize: int):
    """Byte strides requested by a PJRT_Buffer_MemoryLayout (None = dense)."""
    from ._capi import PJRT_Buffer_MemoryLayout, read_int64s
    if not layout_ptr:
        return None
    layout = PJRT_Buffer_MemoryLayout.from_address(layout_ptr)
    rank = len(shape)
    if layout.type == MemoryLayoutType.Strides:
        strides = read_int64s(layout.strides.byte_strides, layout.strides.num_byte_strides)
        if len(strides) != rank:
            raise invalid_argument(
                f"host layout has {len(strides)} strides for a rank-{rank} buffer")
        return strides
    if layout.type == MemoryLayoutType.Tiled:
        if layout.tiled.num_tiles:
            raise unimplemented("tiled host layouts are not supported by stablehlo_ref")
        m2m = read_int64s(layout.tiled.minor_to_major, layout.tiled.minor_to_major_size)
        if sorted(m2m) != list(range(rank)):
            raise invalid_argument(f"minor_to_major {m2m} is not a permutation of rank {rank}")
        strides = [0] * rank
        acc = itemsize
        for dim in m2m:
            strides[dim] = acc
            acc *= max(int(shape[dim]), 1)
        return tuple(strides)
    raise invalid_argument(f"unknown memory layout type {layout.type}")


def extent_bytes(shape, strides, itemsize: int) -> int:
    if any(d == 0 for d in shape):
        return 0
    hi = sum(max(0, (d - 1) * s) for d, s in zip(shape, strides)) + itemsize
    return hi


def to_host(buf: Buffer, dst: int | None, dst_size: int, layout_ptr: int | None):
    """Implements PJRT_Buffer_ToHostBuffer: ``(needed, event)``. With dst
    NULL, ``needed`` is the size the copy needs and ``event`` 0; otherwise
    ``event`` is the PJRT_Event* of the copy. The copy of a pending buffer
    (its program still running on the worker) is chained on the program:
    the worker copies when the data arrives, then sets the event, failed
    with the program's error if it failed."""
    buf.check_alive()
    if buf.type == BufferType.TOKEN:
        return (0, 0) if not dst else (None, _shim.event_new(True))
    itemsize = dtype_of(buf.type).itemsize
    shape = buf.shape
    strides = host_layout_strides(layout_ptr, shape, itemsize)
    if strides is not None and any(s < 0 for s in strides):
        raise invalid_argument("negative strides are not supported for host destinations")
    needed = buf.nbytes if strides is None else extent_bytes(shape, strides, itemsize)
    if not dst:
        return needed, 0
    if dst_size < needed:
        raise invalid_argument(
            f"destination has {dst_size} bytes but {buf.describe()} needs {needed}")
    ready = buf.ready
    if ready is not None and not ready.done:
        if dispatch.on_worker():
            dispatch.wait(ready, str(buf))  # refuses: it would never finish
        ready.asked()
        event = _shim.event_new(False)
        buf.pin()

        def copy_when_ready(_, buf=buf, event=event):
            try:
                _copy_out(buf.pinned_data(), dst, needed, strides)
            except PjrtError as e:
                _shim.event_set(event, e.pjrt_code, str(e))
            else:
                _shim.event_set(event)
            finally:
                buf.unpin()
        ready.then(copy_when_ready)
        return None, event
    _copy_out(buf.live_array(), dst, needed, strides)
    return None, _shim.event_new(True)


def _copy_out(array, dst: int, needed: int, strides) -> None:
    if needed == 0:
        return
    if strides is None:
        ctypes.memmove(dst, array.ctypes.data, needed)
    else:
        raw = (ctypes.c_char * needed).from_address(dst)
        out = np.ndarray(array.shape, dtype=array.dtype, buffer=raw, strides=strides)
        np.copyto(out, array)


def device_and_memory(client, device_h, memory_h):
    """The (device, memory) a new buffer goes to: the memory if given (on its
    first device), else the device's default memory (the client's first
    device when neither is given)."""
    memory = maybe_lookup(memory_h, Memory)
    given = maybe_lookup(device_h, Device)  # a non-NULL handle must be a live device
    if memory is not None:
        if not memory.devices:
            raise invalid_argument(f"{memory} is attached to no device")
        if given is not None and given not in memory.devices:
            raise invalid_argument(f"{given} cannot address {memory}")
        device = given or memory.devices[0]
    else:
        device = given or client.devices[0]
        memory = device.default_memory
    if not device.addressable:
        raise invalid_argument(
            f"{device} belongs to process {device.description.process_index}; process "
            f"{client.process_index} cannot put buffers there (not addressable)")
    return device, memory


def copy_buffer(buf: Buffer, device, memory) -> Buffer:
    """A copy of `buf` on another device or memory. The copy of a pending
    buffer is pending too, filled by the worker when the data arrives."""
    buf.check_alive()
    ready = buf.ready
    if ready is not None and not ready.done:
        if dispatch.on_worker():
            dispatch.wait(ready, str(buf))  # refuses: it would never finish
        done = Completion()
        new = Buffer(None, buf.type, device, memory, shape=buf.shape, ready=done,
                     nbytes=buf.nbytes)
        buf.pin()

        def copy_when_ready(_, buf=buf, new=new, done=done):
            try:
                array = _copied(buf, buf.pinned_data())
            except PjrtError as e:
                new.fulfil(error=(e.pjrt_code, str(e)))
                done.set((e.pjrt_code, str(e)))
            else:
                new.fulfil(array)
                done.set()
            finally:
                buf.unpin()
        ready.then(copy_when_ready)
        return new
    return Buffer(_copied(buf, buf.live_array()), buf.type, device, memory, shape=buf.shape)


def _copied(buf: Buffer, array):
    if buf.borrowed and hasattr(array, "copy"):
        array = array.copy()  # the source may hand its memory back to the caller
        array.flags.writeable = False
    return array


def preview(buf: Buffer) -> str:
    """The first values of a buffer, for the call trace."""
    ready = buf.ready
    if ready is not None and not ready.done:
        return "(pending)"
    if buf.error is not None:
        return "-"
    return preview_value(buf.array)


def preview_value(arr) -> str:
    """The first values of an array, for the call trace."""
    try:
        if arr is None or not hasattr(arr, "size"):
            return "-"
        if arr.size > 16:
            return np.array2string(arr.reshape(-1)[:16], separator=",") + "..."
        return np.array2string(arr, separator=",").replace("\n", "")
    except Exception:
        return "?"


def describe_with_value(buf: Buffer) -> str:
    return f"{buf} = {preview(buf)}"
