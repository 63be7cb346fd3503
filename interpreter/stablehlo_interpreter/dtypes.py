"""Mapping between MLIR element types and numpy dtypes.

bf16, the float8/6/4 families and the 1/2/4-bit integers come from
``ml_dtypes``; everything else is a builtin numpy dtype. ``i1`` is the spec's
boolean type and maps to ``np.bool_``.
"""

from typing import Any

import ml_dtypes
import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray

_ALL_ELEMENT_TYPES: dict[str, np.dtype[Any] | None] = {
    "i1": np.dtype(np.bool_),
    "i2": np.dtype(ml_dtypes.int2),
    "i4": np.dtype(ml_dtypes.int4),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "ui1": np.dtype(ml_dtypes.uint1) if hasattr(ml_dtypes, "uint1") else None,
    "ui2": np.dtype(ml_dtypes.uint2),
    "ui4": np.dtype(ml_dtypes.uint4),
    "ui8": np.dtype(np.uint8),
    "ui16": np.dtype(np.uint16),
    "ui32": np.dtype(np.uint32),
    "ui64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "f8E4M3FN": np.dtype(ml_dtypes.float8_e4m3fn),
    "f8E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "f8E4M3FNUZ": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "f8E5M2FNUZ": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "f8E4M3B11FNUZ": np.dtype(ml_dtypes.float8_e4m3b11fnuz),
    "f8E4M3": np.dtype(ml_dtypes.float8_e4m3),
    "f8E3M4": np.dtype(ml_dtypes.float8_e3m4),
    "f8E8M0FNU": np.dtype(ml_dtypes.float8_e8m0fnu),
    "f4E2M1FN": np.dtype(ml_dtypes.float4_e2m1fn),
    "f6E2M3FN": np.dtype(ml_dtypes.float6_e2m3fn),
    "f6E3M2FN": np.dtype(ml_dtypes.float6_e3m2fn),
    "complex<f32>": np.dtype(np.complex64),
    "complex<f64>": np.dtype(np.complex128),
    # `index` only appears in shape computations of dynamic programs.
    "index": np.dtype(np.int64),
}
_ELEMENT_TO_DTYPE: dict[str, np.dtype[Any]] = {
    k: v for k, v in _ALL_ELEMENT_TYPES.items() if v is not None}
_DTYPE_TO_ELEMENT: dict[np.dtype[Any], str] = {}
for _k, _v in _ELEMENT_TO_DTYPE.items():
    if _k != "index":
        _DTYPE_TO_ELEMENT.setdefault(_v, _k)

# Sub-byte integers: ml_dtypes stores one element per byte.
SUB_BYTE_INTS = {np.dtype(ml_dtypes.int2), np.dtype(ml_dtypes.int4),
                 np.dtype(ml_dtypes.uint2), np.dtype(ml_dtypes.uint4)}
if hasattr(ml_dtypes, "uint1"):
    SUB_BYTE_INTS.add(np.dtype(ml_dtypes.uint1))

ML_FLOATS = {v for k, v in _ELEMENT_TO_DTYPE.items()
             if k.startswith(("f8", "f6", "f4", "bf16")) and k != "f64"}  # "f64" starts with "f6"


def from_element_type(name: str) -> np.dtype[Any]:
    """numpy dtype for an MLIR element type spelled as in the IR (``'bf16'``)."""
    try:
        return _ELEMENT_TO_DTYPE[name]
    except KeyError:
        raise TypeError(f"unsupported element type {name!r}") from None


def to_element_type(dtype: DTypeLike) -> str:
    """MLIR spelling of a numpy dtype (inverse of :func:`from_element_type`)."""
    dtype = np.dtype(dtype)
    try:
        return _DTYPE_TO_ELEMENT[dtype]
    except KeyError:
        raise TypeError(f"numpy dtype {dtype} has no StableHLO element type") from None


def is_bool(dtype: DTypeLike) -> bool:
    return np.dtype(dtype) == np.bool_


def is_complex(dtype: DTypeLike) -> bool:
    return np.dtype(dtype).kind == "c"


def is_float(dtype: DTypeLike) -> bool:
    """True for every real floating-point type, including the ml_dtypes ones."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype in ML_FLOATS


def is_integer(dtype: DTypeLike) -> bool:
    """True for signed and unsigned integers (not bool), incl. int2/int4."""
    dtype = np.dtype(dtype)
    return dtype.kind in "iu" or dtype in SUB_BYTE_INTS


def is_unsigned(dtype: DTypeLike) -> bool:
    dtype = np.dtype(dtype)
    if dtype in SUB_BYTE_INTS:
        return dtype.name.startswith("uint")
    return dtype.kind == "u"


def bit_width(dtype: DTypeLike) -> int:
    """Bit width of an element type as the spec counts it (i4 -> 4, bf16 -> 16)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return 1
    if dtype in SUB_BYTE_INTS or dtype in ML_FLOATS:
        name = to_element_type(dtype)
        if name.startswith("ui"):
            return int(name[2:])
        if name.startswith("i"):
            return int(name[1:])
        if name == "bf16":
            return 16
        return int(name[1])
    return dtype.itemsize * 8


def int_info(dtype: DTypeLike) -> tuple[int, int]:
    """(min, max) of an integer type, including the sub-byte ones."""
    dtype = np.dtype(dtype)
    if dtype in SUB_BYTE_INTS:
        sub = ml_dtypes.iinfo(dtype)  # type: ignore[no-untyped-call]
        return int(sub.min), int(sub.max)
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def finfo(dtype: DTypeLike) -> Any:
    """numpy's or ml_dtypes' finfo of a float type (bf16, f8, f6, f4 too)."""
    dtype = np.dtype(dtype)
    if dtype in ML_FLOATS:
        return ml_dtypes.finfo(dtype)  # type: ignore[no-untyped-call]
    return np.finfo(dtype)


_U64_MAX = np.iinfo(np.uint64).max
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _ulp_real(a: NDArray[Any], b: NDArray[Any]) -> NDArray[np.uint64]:
    """ULP distance per element of two flat real float arrays of one dtype."""
    dt = a.dtype
    bw = bit_width(dt)
    # The bit patterns, cut to the format's width (ml_dtypes stores f4/f6 in
    # the low bits of a byte, so the sign is bit bw-1, not bit 7).
    ua = a.view(_UINT[dt.itemsize]).astype(np.uint64)
    ub = b.view(_UINT[dt.itemsize]).astype(np.uint64)
    width_mask = np.uint64((1 << bw) - 1) if bw < 64 else np.uint64(_U64_MAX)
    ua &= width_mask
    ub &= width_mask
    fa = a.astype(np.float64)
    fb = b.astype(np.float64)
    # Unsigned formats (f8E8M0FNU) have no sign bit.
    signed = float(finfo(dt).min) < 0
    sign = np.uint64(1 << (bw - 1)) if signed else np.uint64(0)
    # Sign-magnitude: the distance is |ma - mb| on one side of zero and
    # ma + mb across it (so -0 and +0 are 0 apart).
    ma = ua & ~sign
    mb = ub & ~sign
    neg_a = (ua & sign) != 0
    neg_b = (ub & sign) != 0
    same_sign_diff = np.where(ma > mb, ma - mb, mb - ma)
    diff = np.where(neg_a != neg_b, ma + mb, same_sign_diff)
    finite = np.isfinite(fa) & np.isfinite(fb)
    out = np.where(finite, diff, np.uint64(_U64_MAX))
    out = np.where(np.isnan(fa) & np.isnan(fb), np.uint64(0), out)
    out = np.where(ua == ub, np.uint64(0), out)
    return out.astype(np.uint64)


def ulp_distance(a: ArrayLike, b: ArrayLike) -> NDArray[np.uint64]:
    """Number of representable values between same-dtype float arrays ``a``
    and ``b``, elementwise, as uint64 (StableHLO's reference `ULPDifference`):
    0 for equal values (-0 and +0 included) and for two NaNs of any payload;
    the uint64 maximum when one side is NaN or infinite and the other is not
    the same value. Complex: the larger distance of the real and imaginary
    parts. Every float format of :data:`ML_FLOATS` (bf16, f8/f6/f4) counts in
    its own width."""
    a = np.asarray(a)
    b = np.asarray(b)
    shape = a.shape

    def flat(x: NDArray[Any]) -> NDArray[Any]:
        return np.ascontiguousarray(x).reshape(-1)  # view() needs contiguity
    if is_complex(a.dtype):
        d = np.maximum(_ulp_real(flat(a.real), flat(b.real)),
                       _ulp_real(flat(a.imag), flat(b.imag)))
    else:
        d = _ulp_real(flat(a), flat(b))
    return d.reshape(shape)


def total_order_key(x: ArrayLike) -> NDArray[np.uint64]:
    """uint64 keys whose unsigned order is the total order of ``x``'s values:
    integers and booleans by value; floats by IEEE totalOrder (XLA's
    TOTALORDER comparison): -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN,
    NaNs further ordered by payload. Narrow floats count in their own width."""
    x = np.asarray(x)
    dt = x.dtype
    if dt == np.bool_:
        return x.astype(np.uint64)
    if is_integer(dt):
        if is_unsigned(dt):
            return x.astype(np.uint64)
        return x.astype(np.int64).view(np.uint64) ^ np.uint64(1 << 63)
    width = bit_width(dt)
    u = _UINT[dt.itemsize]
    bits = x.view(u)
    if width != dt.itemsize * 8:
        bits = bits & u((1 << width) - 1)
    if float(finfo(dt).min) >= 0:
        return bits.astype(np.uint64)  # unsigned formats (f8E8M0FNU): the bits are the order
    # Negative values: flip all bits; non-negative: set the sign bit. Done as
    # one xor with a mask built from the sign bit, in the format's own
    # unsigned width (a np.where over uint64 keys cost 35x more), widened once.
    shift = u(width - 1)
    sign = u(1 << (width - 1))
    flip = (bits >> shift) * u((1 << width) - 1 - (1 << (width - 1)))
    flip |= sign
    flip ^= bits
    return np.asarray(flip.astype(np.uint64))  # ufuncs make 0-d arrays scalars

