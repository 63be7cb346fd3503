"""Value types of the interpreter, decoded from MLIR types at compile time.

At run time a tensor is a numpy array (0-d for scalars), a tuple is a Python
tuple and a token is the :data:`TOKEN` singleton.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from . import dtypes

DYNAMIC = None  # a `?` dimension in TensorType.shape


class Token:
    """The spec's `token` value: carries ordering, no data."""

    __slots__ = ()

    def __repr__(self):
        return "TOKEN"

    def __reduce__(self):
        return (_token, ())


def _token():
    return TOKEN


TOKEN = Token()


class QuantParams:
    """Parameters of a `!quant.uniform` element type (per-tensor or per-axis)."""

    __slots__ = ("storage_dtype", "expressed_dtype", "scales", "zero_points",
                 "quantized_dimension", "storage_min", "storage_max", "text")

    def __init__(self, storage_dtype, expressed_dtype, scales, zero_points,
                 quantized_dimension, storage_min, storage_max, text):
        self.storage_dtype = storage_dtype
        self.expressed_dtype = expressed_dtype
        self.scales = scales
        self.zero_points = zero_points
        self.quantized_dimension = quantized_dimension
        self.storage_min = storage_min
        self.storage_max = storage_max
        self.text = text

    @property
    def per_axis(self):
        return self.quantized_dimension is not None

    def __repr__(self):
        return self.text


class TensorType:
    """A ranked tensor type. ``shape`` holds ints, or None for `?` dims.

    ``dtype`` is the numpy dtype values of this type have (the storage type
    for quantized tensors, whose parameters are in ``quant``).
    """

    __slots__ = ("shape", "dtype", "element_type", "quant", "bounds")

    def __init__(self, shape: tuple[int | None, ...], dtype: Any, element_type: str,
                 quant: Any = None, bounds: Any = None) -> None:
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.element_type = element_type
        self.quant = quant
        self.bounds = bounds

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(d is not None for d in self.shape)

    def __eq__(self, other):
        return (isinstance(other, TensorType) and self.shape == other.shape
                and self.element_type == other.element_type)

    def __hash__(self):
        return hash((self.shape, self.element_type))

    def __repr__(self):
        dims = "".join(("?" if d is None else str(d)) + "x" for d in self.shape)
        return f"tensor<{dims}{self.element_type}>"


class TupleType:
    __slots__ = ("types",)

    def __init__(self, types: list[Any]) -> None:
        self.types = tuple(types)

    def __eq__(self, other):
        return isinstance(other, TupleType) and self.types == other.types

    def __hash__(self):
        return hash(self.types)

    def __repr__(self):
        return "tuple<" + ", ".join(map(repr, self.types)) + ">"


class TokenType:
    __slots__ = ()

    def __eq__(self, other):
        return isinstance(other, TokenType)

    def __hash__(self):
        return 7

    def __repr__(self):
        return "!stablehlo.token"


class OtherType:
    """A type the interpreter does not model (kept so errors can name it)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other):
        return isinstance(other, OtherType) and self.text == other.text

    def __hash__(self):
        return hash(self.text)

    def __repr__(self):
        return self.text


_QUANT_RE = re.compile(
    r"!quant\.uniform<(?P<storage>[a-z0-9]+)(?:<(?P<smin>-?\d+):(?P<smax>-?\d+)>)?"
    r":(?P<expressed>[a-z0-9A-Z]+)(?::(?P<axis>\d+))?,\s*(?P<params>.*)>$")
_SCALE_ZP_RE = re.compile(r"([-+0-9.eE]+|0x[0-9A-Fa-f]+)(?::(-?\d+))?")


def parse_quant(text):
    """Decode a `!quant.uniform<...>` element type spelled as in the IR."""
    m = _QUANT_RE.match(text)
    if not m:
        raise TypeError(f"unsupported quantized type {text}")
    storage = m.group("storage")
    if storage.startswith("u"):
        storage_name = "ui" + storage[1:]
    else:
        storage_name = storage
    storage_dtype = dtypes.from_element_type(storage_name)
    expressed_dtype = dtypes.from_element_type(m.group("expressed"))
    lo, hi = dtypes.int_info(storage_dtype)
    smin = int(m.group("smin")) if m.group("smin") is not None else lo
    smax = int(m.group("smax")) if m.group("smax") is not None else hi
    params = m.group("params").strip()
    axis = m.group("axis")
    if params.startswith("{"):
        params = params[1:-1]
    scales, zps = [], []
    for item in _split_top(params):
        sm = _SCALE_ZP_RE.fullmatch(item.strip())
        if not sm:
            raise TypeError(f"cannot read quantization parameters {item!r} of {text}")
        s = sm.group(1)
        scales.append(float.fromhex(s) if s.startswith("0x") else float(s))
        zps.append(int(sm.group(2)) if sm.group(2) is not None else 0)
    return QuantParams(storage_dtype, expressed_dtype,
                       np.array(scales, dtype=np.float64),
                       np.array(zps, dtype=np.int64),
                       int(axis) if axis is not None else None, smin, smax, text)


def _split_top(s):
    return [p for p in s.split(",") if p.strip()]


def from_mlir(t):
    """Decode an ``ir.Type`` into TensorType / TupleType / TokenType."""
    from jaxlib.mlir import ir
    if isinstance(t, ir.RankedTensorType):
        rt = t
        dyn = ir.ShapedType.get_dynamic_size()
        shape = tuple(None if d == dyn else d for d in rt.shape)
        et = str(rt.element_type)
        bounds = None
        enc = rt.encoding
        if enc is not None and str(enc).startswith('"!quant.'):
            # A quantized type the loader rewrote for jaxlib's verifier
            # (quant.rewrite_quantized_text): the encoding holds its text.
            q = parse_quant(str(enc)[1:-1])
            return TensorType(shape, q.storage_dtype, q.text, quant=q)
        if enc is not None:
            m = re.search(r"bounds<([^>]*)>", str(enc))
            if m:
                bounds = tuple(None if b.strip() == "?" else int(b)
                               for b in m.group(1).split(","))
        if et.startswith("!quant."):
            q = parse_quant(et)
            return TensorType(shape, q.storage_dtype, et, quant=q, bounds=bounds)
        return TensorType(shape, dtypes.from_element_type(et), et, bounds=bounds)
    if isinstance(t, ir.TupleType):
        tt = t
        return TupleType(from_mlir(tt.get_type(i)) for i in range(tt.num_types))
    s = str(t)
    if s == "!stablehlo.token":
        return TokenType()
    if isinstance(t, (ir.IntegerType, ir.FloatType)) or s == "index":
        # Scalars appear as block arguments of some regions (e.g. dynamic ops
        # after shape refinement); treat them as 0-d tensors.
        return TensorType((), dtypes.from_element_type(s), s)
    return OtherType(s)


def conforms(value, ty):
    """True if a runtime value matches a static type (used for argument checks)."""
    if isinstance(ty, TensorType):
        if not isinstance(value, np.ndarray) or value.dtype != ty.dtype:
            return False
        if value.ndim != len(ty.shape):
            return False
        return all(d is None or d == v for d, v in zip(ty.shape, value.shape))
    if isinstance(ty, TupleType):
        return (isinstance(value, tuple) and len(value) == len(ty.types)
                and all(conforms(v, t) for v, t in zip(value, ty.types)))
    if isinstance(ty, TokenType):
        return value is TOKEN
    return True


def describe(value):
    """Short human description of a runtime value, for error messages."""
    if isinstance(value, np.ndarray):
        et = dtypes._DTYPE_TO_ELEMENT.get(value.dtype, str(value.dtype))
        dims = "".join(f"{d}x" for d in value.shape)
        return f"tensor<{dims}{et}>"
    if isinstance(value, tuple):
        return "tuple<" + ", ".join(describe(v) for v in value) + ">"
    if value is TOKEN:
        return "!stablehlo.token"
    return type(value).__name__
