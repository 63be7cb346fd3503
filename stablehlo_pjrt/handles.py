"""Registry mapping the opaque pointers handed to the PJRT caller to objects.

A PJRT_Client*, PJRT_Buffer*, ... given to jaxlib is an integer that only the
plugin interprets.  For most objects it is `id(obj)`; PJRT_Memory* must point
at a C struct with a vtable, so memories use an address from _shim.  The
registry keeps each object alive until the caller destroys it, and rejects
stale or foreign pointers with a clear error instead of crashing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from typing import Any, TypeVar

from . import _shim
from .error import invalid_argument

T = TypeVar("T")

_objects: dict[int, object] = {}


def register(obj: Any, handle: int | None = None) -> int:
    h = id(obj) if handle is None else handle
    obj.handle = h
    _objects[h] = obj
    return h


def release(handle: int | None) -> object | None:
    if not handle:
        return None
    return _objects.pop(handle, None)


def lookup(handle: int | None, kind: type[T], what: str | None = None) -> T:
    obj = _objects.get(handle)
    if type(obj) is kind:  # the hot path: every PJRT call looks one up
        return obj
    if obj is None or not handle or not isinstance(obj, kind):
        name = what or kind.__name__
        if not handle:
            raise invalid_argument(f"{name} pointer is NULL")
        raise invalid_argument(
            f"{name} pointer {handle:#x} is not a live {name} of the "
            "stablehlo_ref plugin (already destroyed, or never created here)")
    return obj


def maybe_lookup(handle: int | None, kind: type[T]) -> T | None:
    """Like lookup() but None for a NULL pointer."""
    if not handle:
        return None
    return lookup(handle, kind)


class CString:
    """A NUL-terminated copy of a string at a stable address.

    PJRT out-strings have the lifetime of the object that returns them, so the
    object keeps its CString instances alive.
    """

    __slots__ = ("text", "raw", "buf", "address", "size")

    def __init__(self, text: str | bytes):
        raw = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        self.text = text
        self.raw = raw
        self.buf = ctypes.create_string_buffer(raw, len(raw) + 1)
        self.address = ctypes.addressof(self.buf)
        self.size = len(raw)


def pointer_array(handles: Iterable[int]) -> tuple[object, int]:
    """A C array of pointers; returns (keepalive, address)."""
    handles = list(handles)
    arr = (ctypes.c_void_p * max(1, len(handles)))(*handles)
    return arr, ctypes.addressof(arr)


def int64_array(values: Iterable[int]) -> tuple[object, int]:
    values = [int(v) for v in values]
    arr = (ctypes.c_int64 * max(1, len(values)))(*values)
    return arr, ctypes.addressof(arr)


class NamedValues:
    """A PJRT_NamedValue array built from a dict, kept alive by its owner.

    str -> kString, bool -> kBool, int -> kInt64, float -> kFloat,
    list/tuple of ints -> kInt64List.
    """

    def __init__(self, values: dict):
        from ._capi import NamedValueType, PJRT_NamedValue, struct_size
        self.values = dict(values)
        n = len(self.values)
        self.array = (PJRT_NamedValue * max(1, n))()
        self._keep = []
        for i, (name, value) in enumerate(self.values.items()):
            nv = self.array[i]
            nv.struct_size = struct_size(PJRT_NamedValue)
            key = CString(name)
            self._keep.append(key)
            nv.name = key.address
            nv.name_size = key.size
            if isinstance(value, bool):
                nv.type = NamedValueType.kBool
                nv.bool_value = value
                nv.value_size = 1
            elif isinstance(value, int):
                nv.type = NamedValueType.kInt64
                nv.int64_value = value
                nv.value_size = 1
            elif isinstance(value, float):
                nv.type = NamedValueType.kFloat
                nv.float_value = value
                nv.value_size = 1
            elif isinstance(value, str):
                s = CString(value)
                self._keep.append(s)
                nv.type = NamedValueType.kString
                nv.string_value = s.address
                nv.value_size = s.size
            elif isinstance(value, (list, tuple)):
                arr, addr = int64_array(value)
                self._keep.append(arr)
                nv.type = NamedValueType.kInt64List
                nv.int64_array_value = addr
                nv.value_size = len(value)
            else:
                raise TypeError(f"unsupported named value type for {name!r}: "
                                f"{type(value).__name__}")
        self.address = ctypes.addressof(self.array)
        self.count = n


def read_named_values(address: int | None, count: int) -> dict:
    """Decodes a caller-provided PJRT_NamedValue array into a dict."""
    from ._capi import NamedValueType, PJRT_NamedValue, check_array, read_int64s, read_str
    out = {}
    if not count:
        return out
    check_array(address, count, ctypes.sizeof(PJRT_NamedValue), "the named values")
    arr = (PJRT_NamedValue * count).from_address(address)
    for nv in arr:
        name = read_str(nv.name, nv.name_size, "a named value's name")
        t = nv.type
        if t == NamedValueType.kString:
            out[name] = read_str(nv.string_value, nv.value_size, f"named value {name!r}")
        elif t == NamedValueType.kInt64:
            out[name] = int(nv.int64_value)
        elif t == NamedValueType.kInt64List:
            out[name] = list(read_int64s(nv.int64_array_value, nv.value_size,
                                         f"named value {name!r}"))
        elif t == NamedValueType.kFloat:
            out[name] = float(nv.float_value)
        elif t == NamedValueType.kBool:
            out[name] = bool(nv.bool_value)
        else:
            raise invalid_argument(f"named value {name!r} has unknown type {t}")
    return out


_c_helpers: dict = {}


def c_helper(name: str) -> int:
    """Address of a C function of the shim handed to the caller (the
    `blob_free` and `noop_deleter` deleters)."""
    if not _c_helpers:
        _c_helpers.update(_shim.c_helpers())
    return _c_helpers[name]


def c_blob(data: bytes) -> tuple[int, int]:
    """Copies `data` into C memory freed by the `blob_free` deleter; returns
    (blob, data address)."""
    b = _shim.blob_new(data)
    return b, _shim.blob_data(b)
