"""convert, bitcast_convert and reduce_precision.

convert follows the reference interpreter (openxla/stablehlo
``stablehlo/reference/Element.cpp``, ``convert``), which fills the spec's
TBDs the way XLA does:

* bool -> number: 0 / 1; number -> bool: ``x != 0`` (complex: real part only).
* integer -> integer: two's complement truncation / extension (wraps).
* integer or float -> float: round to nearest, ties to even, *once*.
* float -> integer: truncate toward zero; NaN -> 0; out of range saturates
  to the type's min / max (APFloat::convertToInteger).
* complex -> non-complex: the real part is converted; -> complex: imag = 0.
"""

import numpy as np

from .. import dtypes
from ..registry import Unsupported, annotate, kernel
from .elementwise import (
    C64,
    F16,
    F32,
    F64,
    I64,
    U64,
    as_result,
    kind,
    operand_dtype,
    result_dtype,
    round_f64,
    to_f64,
    wrap_bits,
)

# --------------------------------------------------------------------------
# convert


def _int_to_i64(x):
    """Integer array -> int64 (signed sources) or uint64 (unsigned), exact."""
    if dtypes.is_unsigned(x.dtype):
        return x.astype(U64)
    return x.astype(I64)


def _i64_to_f64_odd(v):
    """64-bit integers -> float64 rounded *to odd* (sticky last bit).

    A following round-to-nearest to a narrower float is then correct, which a
    plain int64 -> float64 -> narrower cast is not (double rounding at ties).
    The float64 sum ``hi + lo`` is the correctly rounded value; TwoSum gives
    its exact error, whose sign says which way to step an even result.
    """
    hi = (v >> np.array(32, v.dtype)) << np.array(32, v.dtype)
    lo = v - hi                                   # 0 <= lo < 2**32
    a = hi.astype(F64)                            # exact: 32 significant bits
    b = lo.astype(F64)                            # exact
    s = a + b
    bb = s - a
    err = (a - (s - bb)) + (b - bb)               # exact: true value - s
    sb = s.view(np.uint64)
    fix = (err != 0) & ((sb & np.uint64(1)) == 0)
    if fix.any():
        away = (err > 0) == (s > 0)               # true magnitude is larger
        sb = np.where(fix, np.where(away, sb + np.uint64(1), sb - np.uint64(1)), sb)
        s = sb.astype(np.uint64).view(F64)
    return s


def _int_to_float(x, dt):
    """Integers -> float type ``dt``, rounded once to nearest even."""
    if x.dtype.itemsize == 8 and x.dtype.kind in "iu":
        if dt in (F64, F32):
            return x.astype(dt)           # a single C conversion, correctly rounded
        return round_f64(_i64_to_f64_odd(x), dt)
    if x.dtype in dtypes.SUB_BYTE_INTS:
        x = x.astype(I64)
    return round_f64(x.astype(F64), dt)   # <= 32-bit integers are exact in float64


def _float_to_int(x, dt):
    """Floats -> integer type ``dt``: truncate, NaN -> 0, saturate."""
    lo, hi = dtypes.int_info(dt)
    t = np.trunc(to_f64(x))
    ok = (t >= float(lo)) & (t < float(hi + 1))   # both bounds exact powers of two
    car = U64 if lo == 0 else I64
    v = np.where(ok, t, 0.0).astype(car)
    v = np.where(ok, v, np.where(t > 0, np.asarray(hi, car),
                                 np.where(t < 0, np.asarray(lo, car), np.zeros((), car))))
    return v.astype(dt)


def _int_to_int(x, dt):
    if dt in dtypes.SUB_BYTE_INTS:
        v = x.astype(I64)   # uint64 sources wrap, keeping the low bits
        return wrap_bits(v, dtypes.bit_width(dt), not dtypes.is_unsigned(dt)).astype(dt)
    if x.dtype in dtypes.SUB_BYTE_INTS:
        x = x.astype(I64)
    return x.astype(dt)   # numpy integer casts wrap (two's complement)


def _float_to_float(x, dt):
    if x.dtype == dt:
        return x
    return round_f64(to_f64(x), dt)   # widening to float64 is exact


def _component(dt):
    return F32 if dt == C64 else F64


def build_convert(src, dst):
    """The conversion function from element dtype ``src`` to ``dst``."""
    ks, kd = kind(src), kind(dst)
    if src == dst:
        return lambda x: x
    if kd == "bool":
        if ks == "complex":
            return lambda x: x.real != 0
        if ks == "float":
            return lambda x: to_f64(x) != 0
        if ks == "int" and src in dtypes.SUB_BYTE_INTS:
            return lambda x: x.astype(I64) != 0
        return lambda x: x != 0
    if ks == "bool":
        # false -> 0, true -> 1, in any type.
        if kd == "int" and dst in dtypes.SUB_BYTE_INTS:
            return lambda x: x.astype(I64).astype(dst)
        if kd == "float" and dst not in (F16, F32, F64):
            return lambda x: x.astype(F32).astype(dst)
        return lambda x: x.astype(dst)
    if ks == "complex":
        if kd == "complex":
            return lambda x: x.astype(dst)   # each part rounded once
        inner = build_convert(_component(src), dst)
        return lambda x: inner(np.ascontiguousarray(x.real) if x.ndim else np.asarray(x.real))
    if kd == "complex":
        inner = build_convert(src, _component(dst))
        return lambda x: inner(x).astype(dst)
    if ks == "int" and kd == "int":
        return lambda x: _int_to_int(x, dst)
    if ks == "int" and kd == "float":
        return lambda x: _int_to_float(x, dst)
    if ks == "float" and kd == "int":
        return lambda x: _float_to_int(x, dst)
    if ks == "float" and kd == "float":
        return lambda x: _float_to_float(x, dst)
    raise Unsupported(f"convert from {src} to {dst}")


@kernel("stablehlo.convert", traits=("elementwise", "fusible", "exact", "cheap", "foldable", "one_rounding"))
def convert(op):
    """spec: convert. See the module docstring for the rules of each pair."""
    src, dst = operand_dtype(op), result_dtype(op)
    if getattr(op.operand_types[0], "quant", None) is not None or \
            getattr(op.result_types[0], "quant", None) is not None:
        raise Unsupported("convert on quantized tensors")
    run = as_result(build_convert(src, dst), dst)
    if kind(src) == kind(dst) == "int" and src != dst and \
            src not in dtypes.SUB_BYTE_INTS and dst not in dtypes.SUB_BYTE_INTS:
        # The C cast astype makes (wrapping, two's complement), written
        # straight into a fused chain's output chunk (fusion.py).
        return annotate(run, into=_int_to_int_into)
    return run


def _int_to_int_into(out, x):
    np.copyto(out, x, casting="unsafe")
    return out


# --------------------------------------------------------------------------
# bitcast_convert

_UINT = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16), 32: np.dtype(np.uint32),
         64: np.dtype(np.uint64)}


def _byte_aligned(dt):
    return not dtypes.is_bool(dt) and dtypes.bit_width(dt) % 8 == 0


def _to_bits(x, dt):
    """Bit patterns (in uint64) of a sub-byte / bool / <= 64-bit array."""
    n = dtypes.bit_width(dt)
    if dtypes.is_bool(dt):
        return x.astype(U64)
    if dt in dtypes.SUB_BYTE_INTS:
        return (x.astype(I64) & ((1 << n) - 1)).astype(U64)
    if n < 8:   # f4/f6: ml_dtypes keeps the pattern in the low bits of a byte
        return (x.view(np.uint8) & np.uint8((1 << n) - 1)).astype(U64)
    return x.view(_UINT[dt.itemsize * 8]).astype(U64)


def _from_bits(p, dt):
    """Inverse of :func:`_to_bits` for uint64 patterns of ``bit_width(dt)`` bits."""
    n = dtypes.bit_width(dt)
    if dtypes.is_bool(dt):
        return p != 0
    if dt in dtypes.SUB_BYTE_INTS:
        return wrap_bits(p.astype(I64), n, not dtypes.is_unsigned(dt)).astype(dt)
    if n < 8:
        return p.astype(np.uint8).view(dt)
    return p.astype(_UINT[dt.itemsize * 8]).view(dt)


@kernel("stablehlo.bitcast_convert", traits=("elementwise", "fusible", "exact", "cheap", "foldable",
                                             "quant_aware", "no_rounding"))
def bitcast_convert(op):
    """spec: bitcast_convert. Reinterprets the bits, little-endian: a wider
    element is made of the narrower ones along the last dimension, lowest
    bits first (as the reference's toBits/fromBits do)."""
    src, dst = operand_dtype(op), result_dtype(op)
    ns, nd = dtypes.bit_width(src), dtypes.bit_width(dst)
    if (kind(src) == "complex") != (kind(dst) == "complex"):
        raise Unsupported("bitcast_convert between complex and non-complex types (C2)")
    if ns % nd and nd % ns:
        raise Unsupported(f"bitcast_convert from {ns}-bit to {nd}-bit elements")
    # Shapes come from the operand, not the result type, so the kernel also
    # works when a region body is evaluated on whole arrays (regions.batched).
    def shape_of(x):
        if nd < ns:
            return x.shape + (ns // nd,)
        if nd > ns:
            return x.shape[:-1]
        return x.shape

    if _byte_aligned(src) and _byte_aligned(dst):
        # Same memory, read as the other type (numpy is little-endian here).
        def bitcast_convert(x):
            return np.ascontiguousarray(x).reshape(-1).view(dst).reshape(shape_of(x))
        return as_result(bitcast_convert, dst)

    def bitcast_convert_bits(x):
        p = _to_bits(x, src)
        if nd < ns:
            k = ns // nd
            shifts = (np.arange(k, dtype=np.uint64) * np.uint64(nd))
            p = (p[..., None] >> shifts) & np.uint64((1 << nd) - 1)
        elif nd > ns:
            k = nd // ns
            shifts = (np.arange(k, dtype=np.uint64) * np.uint64(ns))
            p = np.bitwise_or.reduce(p << shifts, axis=-1) if k > 1 else p[..., 0]
        return _from_bits(p, dst).reshape(shape_of(x))
    return as_result(bitcast_convert_bits, dst)


# --------------------------------------------------------------------------
# reduce_precision


@kernel("stablehlo.reduce_precision", traits=("elementwise", "fusible", "foldable", "no_rounding"))
def reduce_precision(op):
    """spec: reduce_precision. The bit-level algorithm of XLA / the reference
    (Element.cpp reducePrecision): round the mantissa to ``mantissa_bits``
    (ties to even), then flush values whose exponent does not fit
    ``exponent_bits`` to signed zero (underflow, no denormals) or infinity.
    NaN stays NaN, except that with 0 mantissa bits it becomes +inf."""
    dt = operand_dtype(op)
    if kind(dt) != "float":
        raise Unsupported(f"reduce_precision on {dt}")
    if getattr(op.operand_types[0], "quant", None) is not None:
        raise Unsupported("reduce_precision on quantized tensors")
    ebits = int(op.attrs["exponent_bits"])
    mbits = int(op.attrs["mantissa_bits"])
    width = dtypes.bit_width(dt)
    src_m = int(dtypes.finfo(dt).nmant)
    src_e = width - src_m - 1
    if dtypes.to_element_type(dt) == "f8E8M0FNU":
        raise Unsupported("reduce_precision on f8E8M0FNU (no sign bit)")
    if ebits < 1 or mbits < 0:
        raise Unsupported(f"reduce_precision with exponent_bits={ebits}, mantissa_bits={mbits}")
    full = (1 << width) - 1
    u64 = np.uint64
    inf_bits = (((1 << src_e) - 1) << src_m)   # +inf pattern of the source type

    def reduce_precision(x):
        v = _to_bits(x, dt)
        if mbits < src_m:
            last = 1 << (src_m - mbits)
            bias = (last >> 1) - 1
            x_last = (v & u64(last)) >> u64(src_m - mbits)
            v = ((v + x_last + u64(bias)) & u64(~(last - 1) & full))
        if ebits < src_e:
            sign_mask = 1 << (width - 1)
            exp_mask = ((1 << src_e) - 1) << src_m
            exp_bias = (1 << (src_e - 1)) - 1
            red_bias = (1 << (ebits - 1)) - 1
            red_max = exp_bias + red_bias
            red_min = exp_bias - red_bias
            x_exp = v & u64(exp_mask)
            signed_zero = v & u64(sign_mask)
            signed_inf = signed_zero | u64(exp_mask)
            v = np.where(x_exp > u64(red_max << src_m), signed_inf, v)
            v = np.where(x_exp <= u64(red_min << src_m), signed_zero, v)
        r = _from_bits(v & u64(full), dt)
        nan = np.isnan(x.astype(F32) if x.dtype not in (F16, F32, F64) else x)
        if nan.any():
            r = np.where(nan, x if mbits > 0 else _from_bits(np.full(x.shape, inf_bits, u64), dt), r)
        return r
    return as_result(reduce_precision, dt)
