"""Elementwise ops: arithmetic, logic, bit ops, comparison, select, clamp, map.

Transcendental and rounding ops live in :mod:`.elementwise_math`; convert,
bitcast_convert and reduce_precision in :mod:`.elementwise_convert`. This
module also holds the numeric helpers they share.

Numerics, following the spec and its reference interpreter
(openxla/stablehlo ``stablehlo/reference/Element.cpp``):

* Integers wrap around (two's complement). numpy's native integer ufuncs
  already wrap; the sub-byte types (i2/i4/ui2/ui4, whose ml_dtypes
  arithmetic does not wrap) are computed in int64 and wrapped explicitly.
* Integer division by zero and ``INT_MIN / -1`` are undefined in the
  reference (APInt asserts); we use XLA's definition, which is what JAX
  programs observe: ``x / 0 = -1`` (all ones), ``INT_MIN / -1 = INT_MIN``,
  ``x % 0 = x``, ``INT_MIN % -1 = 0``.
* Floats: +, -, *, / of f16/bf16/f8/f6/f4 run in float32 and are rounded
  once to the result type (float32 has more than twice their precision plus
  two bits, so the double rounding is innocuous). Transcendental functions
  run in float64 and are rounded once, as the reference does
  (``mapWithUpcastToDouble``). complex64 functions run in complex128.

Every kernel accepts broadcastable operands (region bodies are evaluated
batched, with 0-d constants mixed with arrays) and returns an np.ndarray of
exactly the result dtype.
"""

import functools as _functools
import math as _math
import operator as _operator

import ml_dtypes
import numpy as np

from .. import dtypes
from ..errors import Interrupt
from ..regions import batched, broadcast_results, is_batchable
from ..registry import Unsupported, annotate, kernel

F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
C64 = np.dtype(np.complex64)
C128 = np.dtype(np.complex128)
BOOL = np.dtype(np.bool_)
I64 = np.dtype(np.int64)
U64 = np.dtype(np.uint64)

_UNSIGNED_OF = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32),
                8: np.dtype(np.uint64)}
_SIGNED_OF = {1: np.dtype(np.int8), 2: np.dtype(np.int16), 4: np.dtype(np.int32),
              8: np.dtype(np.int64)}


# --------------------------------------------------------------------------
# Shared helpers


def operand_dtype(op, i=0):
    return op.operand_types[i].dtype


def result_dtype(op, i=0):
    return op.result_types[i].dtype


def kind(dtype):
    """'bool', 'int', 'float' or 'complex' (the spec's element type classes)."""
    if dtypes.is_bool(dtype):
        return "bool"
    if dtypes.is_integer(dtype):
        return "int"
    if dtypes.is_complex(dtype):
        return "complex"
    if dtypes.is_float(dtype):
        return "float"
    raise Unsupported(f"unsupported element type {dtype}")


def as_result(fn, dtype):
    """Wrap ``fn`` so it always returns an ndarray of ``dtype``.

    numpy returns scalars for 0-d inputs; this turns them back into 0-d
    arrays. Kernels compute in the right dtype already, so the cast is a
    safety net that costs nothing when unused.
    """
    def run(*args):
        r = fn(*args)
        if r.__class__ is not np.ndarray:
            r = np.asarray(r)
        if r.dtype != dtype:
            r = r.astype(dtype)
        return r
    run.__name__ = getattr(fn, "__name__", "kernel")
    # Not __doc__ = fn.__doc__: a ufunc's __doc__ is formatted on every read
    # (0.1 ms, a tenth of a small program's whole compile).
    run.__wrapped__ = fn
    return run


def via_f64_ufunc(ufunc, dtypes, rdtype):
    """A kernel applying the float64 loop of ``ufunc`` to float32/float16
    operands ``dtypes`` and rounding once to ``rdtype`` (float32/float16), or
    None when that does not apply. One ufunc call that casts in its own
    cache-sized buffers: the bits of ``round_f64(ufunc(x.astype(F64)))``
    (the same float64 loop on the same values, the same cast) without two
    full-size float64 temporaries (exp of 1e6 f32: 1.2 ms, 4.5 ms with the casts)."""
    rdtype = np.dtype(rdtype)
    if not isinstance(ufunc, np.ufunc) or ufunc.nout != 1 or ufunc.nin != len(dtypes) \
            or rdtype not in (F32, F16) or any(np.dtype(d) not in (F32, F16) for d in dtypes):
        return None

    def run(*xs):
        shape = xs[0].shape if len(xs) == 1 else np.broadcast_shapes(*[x.shape for x in xs])
        out = np.empty(shape, rdtype)
        ufunc(*xs, out=out, dtype=F64, casting="unsafe")
        return out
    run.__name__ = ufunc.__name__
    return run


# Unary functions of 8- and 16-bit floats (f16, bf16, the f8 types) read
# their results from a table of the function's value at every bit pattern of
# the type (65536 or 256 entries, built by the kernel itself the first time
# an operand of TABLE_MIN elements comes): one gather instead of the float64
# detour (a cast, the function, a rounding). The kernels are elementwise, so
# the table gives their bits exactly, NaN payloads included.
TABLE_MIN = 4096
_TABLES = {}


def by_table(run, key, dtype, rdtype):
    """``run`` (a unary elementwise kernel from ``dtype`` to ``rdtype``) with
    operands of at least TABLE_MIN elements looked up in its table;
    ``key`` names the function (tables are shared by every op that
    computes the same function on the same types)."""
    dtype, rdtype = np.dtype(dtype), np.dtype(rdtype)
    if dtype.itemsize > 2 or dtype.kind not in "fV" or np.dtype(rdtype).itemsize > 8:
        return run
    index = np.dtype(f"uint{8 * dtype.itemsize}")
    key = (key, dtype, rdtype)

    def run_table(x):
        if x.size < TABLE_MIN or x.dtype != dtype:
            return run(x)
        table = _TABLES.get(key)
        if table is None:
            every = np.arange(1 << (8 * dtype.itemsize), dtype=np.uint32).astype(index)
            with np.errstate(all="ignore"):
                table = np.ascontiguousarray(run(every.view(dtype)), dtype=rdtype)
            table.flags.writeable = False
            _TABLES[key] = table   # a race builds the same table twice
        return table.take(x.view(index))
    run_table.__name__ = getattr(run, "__name__", "kernel")
    return run_table


def exact_carrier(dtype):
    """A numpy float type holding every value of ``dtype`` exactly, with ufuncs.

    f16/f32/f64 are their own carriers; the ml_dtypes floats use float32
    (ufunc support for them is partial and slow).
    """
    dtype = np.dtype(dtype)
    if dtype in (F16, F32, F64):
        return dtype
    return F32


def arith_carrier(dtype):
    """Where to compute +, -, *, /: float32 for every type narrower than it."""
    dtype = np.dtype(dtype)
    return F64 if dtype == F64 else F32


def round_f64(x, dtype):
    """Round a float64 array once (to nearest, ties to even) to float ``dtype``.

    numpy's float64 -> float32/float16 casts round once. ml_dtypes casts
    float64 through float32 (a double rounding that is wrong at ties), so for
    those types we first round to float32 *to odd* (a sticky last bit), which
    makes the final rounding exact: float32 has at least two more bits of
    precision and exponent range than all of them.
    """
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if dtype in (F64, F32, F16):
        return x.astype(dtype)
    return round_to_odd_f32(x).astype(dtype)


def round_to_odd_f32(x):
    """float64 -> float32 rounding to odd (exact values stay, inexact get an odd last bit)."""
    y = np.asarray(x.astype(F32))
    yb = y.view(np.uint32)
    inexact = (y.astype(F64) != x) & np.isfinite(y)
    fix = inexact & ((yb & 1) == 0)
    if fix.any():
        up = np.abs(y.astype(F64)) < np.abs(x)   # step the magnitude toward x
        yb = np.where(fix, np.where(up, yb + np.uint32(1), yb - np.uint32(1)), yb)
        y = yb.astype(np.uint32).view(F32)
    return y


def to_f64(x):
    """Exact float64 copy of a real float array (a no-op for float64)."""
    return x if x.dtype == F64 else x.astype(F64)


def unsigned_like(dtype):
    return _UNSIGNED_OF[np.dtype(dtype).itemsize]


def signed_like(dtype):
    return _SIGNED_OF[np.dtype(dtype).itemsize]


class IntInfo:
    """How integers of one element type are computed.

    ``car`` is the carrier dtype values are computed in (the type itself for
    the native numpy integers, int64 for the sub-byte types);
    ``to_car``/``from_car`` convert (``from_car`` wraps to ``bits`` bits);
    ``upat`` gives the unsigned ``bits``-bit pattern and ``spat`` the signed
    interpretation of that pattern (both in carrier-like containers).
    """

    def __init__(self, dtype):
        dtype = np.dtype(dtype)
        self.dtype = dtype
        self.bits = dtypes.bit_width(dtype)
        self.signed = not dtypes.is_unsigned(dtype)
        self.min, self.max = dtypes.int_info(dtype)
        self.sub_byte = dtype in dtypes.SUB_BYTE_INTS
        self.mask = (1 << self.bits) - 1
        if self.sub_byte:
            self.car = I64
            self.ucar = I64   # patterns are small non-negative int64 values
        else:
            self.car = dtype
            self.ucar = unsigned_like(dtype)

    def to_car(self, x):
        if self.sub_byte:
            return x.astype(I64)
        return x

    def from_car(self, r):
        """Carrier values (any integer dtype) -> the element type, wrapping."""
        if self.sub_byte:
            return wrap_bits(np.asarray(r).astype(I64), self.bits, self.signed).astype(self.dtype)
        r = np.asarray(r)
        return r if r.dtype == self.dtype else r.astype(self.dtype)

    def upat(self, c):
        """Unsigned bit pattern of carrier values ``c``."""
        c = np.asarray(c)
        if self.sub_byte:
            return c & self.mask
        return c.view(self.ucar) if c.dtype != self.ucar else c

    def spat(self, c):
        """Signed interpretation of the bit pattern of carrier values ``c``."""
        c = np.asarray(c)
        if self.sub_byte:
            return wrap_bits(c, self.bits, True)
        sdt = signed_like(self.dtype)
        return c.view(sdt) if c.dtype != sdt else c


def wrap_bits(v, bits, signed):
    """Reduce int64 values modulo 2**bits (two's complement if ``signed``)."""
    mask = (1 << bits) - 1
    u = v & mask
    if signed:
        half = 1 << (bits - 1)
        u = np.where(u >= half, u - (1 << bits), u)
    return u


def _int_unary(info, fn):
    """Unary integer kernel computed in the carrier and wrapped back."""
    if not info.sub_byte:
        return fn
    return lambda x: info.from_car(fn(info.to_car(x)))


def _int_binary(info, fn):
    if not info.sub_byte:
        return fn
    return lambda a, b: info.from_car(fn(info.to_car(a), info.to_car(b)))


def _via(carrier, fn, out):
    """Float kernel: compute ``fn`` on operands cast to ``carrier``, cast to ``out``."""
    carrier = np.dtype(carrier)

    def run(*xs):
        xs = [x if x.dtype == carrier else x.astype(carrier) for x in xs]
        r = np.asarray(fn(*xs))
        if r.dtype == out:
            return r
        if r.dtype == F64:
            return round_f64(r, out)
        return r.astype(out)
    return run


def unsupported_type(op, dtype):
    raise Unsupported(f"{op.name} does not support element type {dtype}")


# --------------------------------------------------------------------------
# Arithmetic


def _by_kind(op, int_wrap, *, bool_fn=None, int_fn=None, float_fn=None,
             complex_fn=None, float_carrier=exact_carrier, complex_wide=False):
    """Builder body shared by the unary and binary arithmetic ops: picks the
    kernel for the operand's kind once, at compile time.

    ``int_fn(info)`` returns a carrier-level kernel that ``int_wrap`` makes
    wrap around; the other ``*_fn`` are plain ufunc-like functions, run in
    ``float_carrier`` (floats) or complex128 (``complex_wide``) and rounded once.
    """
    dt = operand_dtype(op)
    rt = result_dtype(op)
    k = kind(dt)
    if k == "bool" and bool_fn is not None:
        fn = bool_fn
    elif k == "int" and int_fn is not None:
        info = IntInfo(dt)
        fn = int_wrap(info, int_fn(info))
    elif k == "float" and float_fn is not None:
        car = float_carrier(dt)
        fn = float_fn if car == dt else _via(car, float_fn, rt)
    elif k == "complex" and complex_fn is not None:
        fn = _via(C128, complex_fn, rt) if complex_wide and dt != C128 else complex_fn
    else:
        unsupported_type(op, dt)
    if fn.__class__ is np.ufunc and _is_scalar_op(op):
        zero_d = _zero_d_ufunc(fn, op, rt)
        if zero_d is not None:
            return zero_d
    return as_result(fn, rt)


def _ufunc_returns_arrays():
    """Does this numpy's ``ufunc(..., out=...)`` return a 0-d array for
    0-d operands (numpy 2.3 on), not a numpy scalar?"""
    try:
        r = np.add(np.zeros((), F32), np.zeros((), F32), out=...)
    except TypeError:
        return False
    return r.__class__ is np.ndarray and r.dtype == F32


_OUT_ARRAY = _ufunc_returns_arrays()


def _zero_d_ufunc(ufunc, op, rt):
    """as_result(ufunc, rt) for a 0-d op, as ``ufunc(..., out=...)``, which
    returns the 0-d array as_result would make of numpy's scalar (0.35 us a
    call instead of 0.49), or None: an older numpy, a quantized type, or a
    ufunc whose loop for the operand types does not give ``rt`` (as_result
    would cast). A batched region body calls it on whole arrays: the same
    ufunc, arrays out."""
    if not _OUT_ARRAY or any(getattr(t, "quant", None) is not None
                             for t in list(op.operand_types) + list(op.result_types)):
        return None
    dts = [t.dtype for t in op.operand_types]
    if ufunc.nin != len(dts) or ufunc.nout != 1:
        return None
    try:
        with np.errstate(all="ignore"):
            probe = ufunc(*[np.zeros((), d) for d in dts], out=...)
    except Interrupt:
        raise
    except Exception:   # noqa: BLE001 - no loop for these types: as_result's path decides
        return None
    if probe.__class__ is not np.ndarray or probe.dtype != rt:
        return None
    run = _functools.partial(ufunc, out=...)
    run.__name__ = ufunc.__name__
    run.__wrapped__ = ufunc   # (what fusion.py calls directly, as for as_result's)
    return run


def _binary_arith(op, *, float_carrier=arith_carrier, **fns):
    """Binary arithmetic: floats narrower than f32 compute in f32 (arith_carrier)."""
    return _by_kind(op, _int_binary, float_carrier=float_carrier, **fns)


@kernel("stablehlo.add", traits=("elementwise", "fusible", "exact", "cheap", "foldable", "reducer",
                                 "chlo_broadcast", "commutative", "one_rounding"))
def add(op):
    """spec: add. Booleans: logical OR; integers wrap; floats/complex: IEEE addition."""
    return _binary_arith(op, bool_fn=np.logical_or, int_fn=lambda i: np.add,
                         float_fn=np.add, complex_fn=np.add)


@kernel("stablehlo.subtract", traits=("elementwise", "fusible", "exact", "cheap", "foldable",
                                      "chlo_broadcast", "one_rounding"))
def subtract(op):
    """spec: subtract. Integers wrap; floats/complex: IEEE subtraction."""
    return _binary_arith(op, int_fn=lambda i: np.subtract, float_fn=np.subtract,
                         complex_fn=np.subtract)


def _complex_multiply(a, b):
    # The textbook formula with each product and sum rounded to the element
    # type, as the reference (Element.cpp operator*) and XLA compute it;
    # numpy's complex multiply rounds differently (it keeps more precision).
    a, b = np.broadcast_arrays(a, b)
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    out = np.empty(a.shape, a.dtype)
    out.real = ar * br - ai * bi
    out.imag = ar * bi + ai * br
    return out


@kernel("stablehlo.multiply", traits=("elementwise", "fusible", "exact", "cheap", "foldable", "reducer",
                                      "chlo_broadcast", "commutative", "one_rounding"))
def multiply(op):
    """spec: multiply. Booleans: logical AND; integers wrap; floats/complex: IEEE."""
    return _binary_arith(op, bool_fn=np.logical_and, int_fn=lambda i: np.multiply,
                         float_fn=np.multiply, complex_fn=_complex_multiply)


def _one_value(b, a_shape):
    """``b`` as a Python int when it is one value (0-d, or broadcast from one
    value over the other operand's shape: a broadcast constant, the divisor
    of JAX's floor_divide), else None."""
    if b.ndim == 0:
        return int(b[()])
    if b.shape == a_shape and b.size and not any(b.strides):
        return int(b[(0,) * b.ndim])
    return None


def _int_divide(info):
    """Truncating integer division with XLA's results for the undefined cases."""
    all_ones = -1 if info.signed else info.max

    def divide(a, b):
        d = _one_value(b, np.shape(a))
        if d is not None and d != 0 and d != -1:
            # One divisor, never a special case: no masks. An unsigned
            # power of two is a shift, another divisor one floor_divide by
            # a scalar (numpy divides by a scalar with libdivide); signed
            # values truncate as below, from the C remainder.
            car = np.asarray(a).dtype
            if not info.signed:
                if d & (d - 1) == 0:
                    return np.right_shift(a, car.type(d.bit_length() - 1))
                return np.floor_divide(a, car.type(d))
            ds = car.type(d)
            return np.floor_divide(np.subtract(a, np.fmod(a, ds)), ds)
        zero = b == 0
        if not info.signed and b.dtype == a.dtype and not zero.any():
            return np.floor_divide(a, b)    # unsigned: floor is truncation
        bad = zero
        if info.signed:
            # INT_MIN / -1 overflows: divide by 1 instead, giving INT_MIN.
            bad = zero | ((a == info.min) & (b == -1))
        bs = np.where(bad, np.ones_like(b), b)
        r = np.fmod(a, bs)                  # C remainder: sign of the dividend
        q = (a - r) // bs                   # exact division
        return np.where(zero, np.asarray(all_ones).astype(q.dtype), q)
    return divide


def _int_remainder(info):
    """C remainder (sign of the dividend); x % 0 = x and INT_MIN % -1 = 0 (XLA)."""
    def remainder(a, b):
        d = _one_value(b, np.shape(a))
        if d is not None and d != 0 and d != -1:
            # One divisor, not a special case (jnp.remainder's x % 2): the
            # C remainder itself, no masks.
            return np.fmod(a, np.asarray(a).dtype.type(d))
        zero = b == 0
        bad = zero
        if info.signed:
            bad = zero | ((a == info.min) & (b == -1))
        bs = np.where(bad, np.ones_like(b), b)
        r = np.fmod(a, bs)
        return np.where(zero, a, r)
    return remainder


def _complex_divide(a, b):
    """Complex division; infinities, NaNs and zero divisors as C99 Annex G.

    Finite operands with a nonzero divisor use numpy's division; the others
    follow __divdc3 (compiler-rt/libgcc), which std::complex division (the
    reference interpreter) and XLA CPU also implement: x/0 is an infinity
    signed by the divisor's real part, finite/inf is a signed zero, inf/finite
    an infinity.  numpy gives NaN or the wrong signs there.
    """
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    with np.errstate(all="ignore"):
        out = np.asarray(np.divide(a, b))
        ar, ai, br, bi = a.real, a.imag, b.real, b.imag
        special = ~(np.isfinite(ar) & np.isfinite(ai) & np.isfinite(br) & np.isfinite(bi)
                    & ((br != 0) | (bi != 0)))
        if not special.any():
            return out
        a_, b_, c_, d_ = ar[special], ai[special], br[special], bi[special]
        logbw = np.fmax(np.abs(c_), np.abs(d_))
        fin = np.isfinite(logbw) & (logbw != 0)
        ilogbw = np.where(fin, np.frexp(np.where(fin, logbw, 1.0))[1] - 1, 0)
        c = np.ldexp(c_, -ilogbw)
        d = np.ldexp(d_, -ilogbw)
        denom = c * c + d * d
        x = np.ldexp((a_ * c + b_ * d) / denom, -ilogbw)
        y = np.ldexp((b_ * c - a_ * d) / denom, -ilogbw)
        both_nan = np.isnan(x) & np.isnan(y)
        inf = np.inf
        f1 = both_nan & (denom == 0) & (~np.isnan(a_) | ~np.isnan(b_))
        s = np.copysign(inf, c)
        x = np.where(f1, s * a_, x)
        y = np.where(f1, s * b_, y)
        f2 = both_nan & ~f1 & (np.isinf(a_) | np.isinf(b_)) & np.isfinite(c) & np.isfinite(d)
        a2 = np.copysign(np.where(np.isinf(a_), 1.0, 0.0), a_)
        b2 = np.copysign(np.where(np.isinf(b_), 1.0, 0.0), b_)
        x = np.where(f2, inf * (a2 * c + b2 * d), x)
        y = np.where(f2, inf * (b2 * c - a2 * d), y)
        f3 = (both_nan & ~f1 & ~f2 & np.isinf(np.fmax(np.abs(c_), np.abs(d_)))
              & np.isfinite(a_) & np.isfinite(b_))
        c3 = np.copysign(np.where(np.isinf(c), 1.0, 0.0), c)
        d3 = np.copysign(np.where(np.isinf(d), 1.0, 0.0), d)
        x = np.where(f3, 0.0 * (a_ * c3 + b_ * d3), x)
        y = np.where(f3, 0.0 * (b_ * c3 - a_ * d3), y)
        res = np.empty(x.shape, out.dtype)
        res.real, res.imag = x, y
        out = out.copy() if out.ndim else out.reshape(())
        out[special] = res
    return out


@kernel("stablehlo.divide", traits=("elementwise", "fusible", "exact", "foldable", "chlo_broadcast",
                                    "one_rounding"))
def divide(op):
    """spec: divide. Integers truncate toward zero; complex division in complex128."""
    return _binary_arith(op, int_fn=_int_divide, float_fn=np.divide,
                         complex_fn=_complex_divide, complex_wide=True)


@kernel("stablehlo.remainder", traits=("elementwise", "fusible", "exact", "foldable", "chlo_broadcast",
                                       "one_rounding"))
def remainder(op):
    """spec: remainder. Sign of the dividend (C fmod), exact for floats.

    Complex remainder is TBD in the spec (#997) and unsupported upstream.
    """
    return _binary_arith(op, int_fn=_int_remainder, float_fn=np.fmod,
                         float_carrier=exact_carrier)


def _int_power(info):
    """Integer power by repeated squaring, wrapping (reference: Element.cpp power).

    A negative exponent gives 0 unless |base| = 1, where it uses |exponent|.
    """
    ucar = info.ucar if not info.sub_byte else U64

    def power(a, b):
        a, b = np.broadcast_arrays(a, b)
        zero_out = None
        if info.signed:
            neg = b < 0
            one = np.abs(a) == 1
            e = np.where(neg & one, -b, b)
            zero_out = neg & ~one
            e = np.where(zero_out, np.zeros_like(e), e)
        else:
            e = b
        e = np.asarray(e).astype(ucar)
        base = np.asarray(a).astype(ucar)
        result = np.ones(base.shape, ucar)
        while True:
            odd = (e & 1) != 0
            if odd.any():
                result = np.where(odd, result * base, result)
            e = e >> 1
            if not e.any():
                break
            base = base * base
        r = result.astype(info.car)
        if zero_out is not None:
            r = np.where(zero_out, np.zeros_like(r), r)
        return r
    return power


def _float_power(x, y):
    return np.power(x, y)


@kernel("stablehlo.power", traits=("elementwise", "fusible", "foldable", "chlo_broadcast", "transcendental"))
def power(op):
    """spec: power. Floats: C pow in float64, rounded once; complex: complex128 pow."""
    return _binary_arith(op, int_fn=_int_power, float_fn=_float_power,
                         complex_fn=np.power, float_carrier=lambda d: F64,
                         complex_wide=True)


_UINT_OF_SIZE = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32),
                 8: np.dtype(np.uint64)}


def _fix_equal(r, a, b, combine):
    """Where ``a == b`` set ``r``'s bits to ``combine(bits a, bits b)``.

    Equal floats have equal bits except for signed zeros, so `and` of the
    patterns gives max(-0, +0) = +0 and `or` gives min(-0, +0) = -0 --
    one masked pass, and none when no elements are equal.
    """
    eq = a == b
    if not eq.any():
        return r
    r = np.array(r, copy=None)  # 0-d results come back as numpy scalars
    if not r.flags.writeable:
        r = r.copy()
    u = _UINT_OF_SIZE[r.dtype.itemsize]
    combine(np.asarray(a).view(u), np.asarray(b).view(u), out=r.view(u), where=eq)
    return r


def _float_max(a, b):
    # IEEE-754 maximum: NaN propagates (np.maximum), and -0 < +0.
    return _fix_equal(np.maximum(a, b), a, b, np.bitwise_and)


def _float_min(a, b):
    return _fix_equal(np.minimum(a, b), a, b, np.bitwise_or)


def _complex_max(a, b):
    # Lexicographic on (real, imag); when a comparison involves NaN the
    # reference picks rhs.
    a, b = np.broadcast_arrays(a, b)
    take_a = np.where(a.real == b.real, a.imag > b.imag, a.real > b.real)
    return np.where(take_a, a, b)


def _complex_min(a, b):
    a, b = np.broadcast_arrays(a, b)
    take_a = np.where(a.real == b.real, a.imag < b.imag, a.real < b.real)
    return np.where(take_a, a, b)


# Small operands: the programs of expm, det and friends are hundreds of ops
# on 0-d values, where a kernel's ufunc calls (0.5 us each) and wrappers are
# its whole cost. Ops whose static result type is 0-d get a kernel that works
# on Python values and returns one of its operands or a shared read-only
# 0-d array (as folded constants are) -- with the general kernel's bits. The
# static type does not rule out arrays (region bodies run batched, their 0-d
# ops on whole arrays), so one ``ndim`` test sends those to the general
# kernel.
_SCALAR_FLOATS = frozenset({F16, F32, F64})


def _is_scalar_op(op):
    return all(t.shape == () for t in op.result_types) and \
        all(t.shape == () for t in op.operand_types)


def _scalar_or(general, scalar):
    """``scalar(a, b)`` for two 0-d operands, else ``general(a, b)``."""
    def run(a, b):
        if a.ndim or b.ndim:
            return general(a, b)
        return scalar(a, b)
    run.__name__ = getattr(general, "__name__", "kernel")
    # What as_result wrapped (fusion.py calls a wrapped ufunc directly).
    run.__wrapped__ = getattr(general, "__wrapped__", general)
    return run


def _scalar_float_max(a, b):
    """_float_max of two 0-d floats of _SCALAR_FLOATS: np.maximum returns
    ``a`` when ``a >= b`` or ``a`` is NaN, else ``b`` (a NaN ``b``
    included), and _fix_equal gives an equal pair the bits ``a & b`` (+0 for
    -0 and +0, else ``a``'s own) -- a copy of one operand's bits either way."""
    x = float(a)
    y = float(b)
    if x > y or x != x:
        return a
    if x == y and (x != 0.0 or not _math.copysign(1.0, x) < 0.0):
        return a
    return b


def _scalar_float_min(a, b):
    """_float_min likewise: ``a`` when ``a <= b`` or ``a`` is NaN, else
    ``b``; an equal pair gets ``a | b`` (-0 for -0 and +0, else ``a``)."""
    x = float(a)
    y = float(b)
    if x < y or x != x:
        return a
    if x == y and (x != 0.0 or _math.copysign(1.0, x) < 0.0):
        return a
    return b


def _with_scalar_path(op, general, scalar):
    """``general``, or when ``op`` is a 0-d op on floats of _SCALAR_FLOATS
    the kernel taking ``scalar`` for 0-d operands."""
    if _is_scalar_op(op) and operand_dtype(op) in _SCALAR_FLOATS:
        return _scalar_or(general, scalar)
    return general


@kernel("stablehlo.maximum", traits=("elementwise", "fusible", "exact", "cheap", "foldable", "reducer",
                                     "quant_same_params", "chlo_broadcast", "commutative", "no_rounding"))
def maximum(op):
    """spec: maximum. Bool: OR; floats: IEEE maximum (NaN wins, +0 > -0); complex: lexicographic."""
    return _with_scalar_path(op, _binary_arith(
        op, bool_fn=np.logical_or, int_fn=lambda i: np.maximum, float_fn=_float_max,
        complex_fn=_complex_max, float_carrier=exact_carrier), _scalar_float_max)


@kernel("stablehlo.minimum", traits=("elementwise", "fusible", "exact", "cheap", "foldable", "reducer",
                                     "quant_same_params", "chlo_broadcast", "commutative", "no_rounding"))
def minimum(op):
    """spec: minimum. Bool: AND; floats: IEEE minimum (NaN wins, -0 < +0); complex: lexicographic."""
    return _with_scalar_path(op, _binary_arith(
        op, bool_fn=np.logical_and, int_fn=lambda i: np.minimum, float_fn=_float_min,
        complex_fn=_complex_min, float_carrier=exact_carrier), _scalar_float_min)


def _unary_simple(op, **fns):
    return _by_kind(op, _int_unary, **fns)


@kernel("stablehlo.negate", traits=("elementwise", "fusible", "exact", "cheap", "foldable", "no_rounding"))
def negate(op):
    """spec: negate. Integers wrap (-INT_MIN = INT_MIN; unsigned: 2**n - x)."""
    return _unary_simple(op, int_fn=lambda i: np.negative, float_fn=np.negative,
                         complex_fn=np.negative)


@kernel("stablehlo.abs", traits=("elementwise", "fusible", "exact", "cheap", "foldable", "no_rounding"))
def abs_(op):
    """spec: abs. Integers: |INT_MIN| = INT_MIN; complex: modulus (a real result)."""
    return _unary_simple(op, int_fn=lambda i: np.abs if i.signed else (lambda x: x),
                         float_fn=np.abs, complex_fn=np.abs, complex_wide=True)


def _float_sign(x):
    # NaN -> NaN, +-0 -> +-0, else +-1 (np.sign keeps NaN but turns -0 into 0).
    return np.where((x == 0) | np.isnan(x), x, np.sign(x))


def _complex_sign(x):
    # Reference: NaN in either part -> (NaN, NaN); 0 -> (0, 0); else x / |x|
    # with |x| first rounded to the element type. Dividing each part by the
    # real modulus is what the complex division by (|x|, 0) computes exactly.
    comp = np.float32 if x.dtype == C64 else np.float64
    mag = np.abs(x).astype(comp).astype(F64)
    mag = np.where(mag == 0, 1.0, mag)
    out = np.empty(x.shape, C128)
    out.real = x.real / mag
    out.imag = x.imag / mag
    out = np.where(x == 0, 0, out)
    nan = np.isnan(x.real) | np.isnan(x.imag)
    return np.where(nan, complex(np.nan, np.nan), out).astype(x.dtype)


@kernel("stablehlo.sign", traits=("elementwise", "fusible", "exact", "cheap", "foldable", "no_rounding"))
def sign(op):
    """spec: sign. -1/0/1; floats keep NaN and the sign of zero; complex x/|x|."""
    return _unary_simple(op, int_fn=lambda i: np.sign, float_fn=_float_sign,
                         complex_fn=_complex_sign)


# --------------------------------------------------------------------------
# Logic and bits


def _bitwise(op, np_fn):
    dt = operand_dtype(op)
    k = kind(dt)
    if k not in ("bool", "int"):
        unsupported_type(op, dt)
    if k == "int":
        info = IntInfo(dt)
        return as_result(_int_binary(info, np_fn), dt)

    def bool_bitwise(a, b):
        if (a.ndim == 0) != (b.ndim == 0):
            # numpy's bool loops with one 0-d operand (a fused chain's
            # broadcast constant) run ~20x slower than with two arrays; on
            # the bytes (0 and 1) the bit operation is the same.
            return np_fn(a.view(np.uint8), b.view(np.uint8)).view(BOOL)
        return np_fn(a, b)
    return as_result(bool_bitwise, dt)


@kernel("stablehlo.and", traits=("elementwise", "fusible", "exact", "cheap", "foldable", "reducer",
                                 "chlo_broadcast", "commutative", "no_rounding"))
def and_(op):
    """spec: and. Bitwise AND (logical for booleans)."""
    return _bitwise(op, np.bitwise_and)


@kernel("stablehlo.or", traits=("elementwise", "fusible", "exact", "cheap", "foldable", "reducer",
                                "chlo_broadcast", "commutative", "no_rounding"))
def or_(op):
    """spec: or. Bitwise OR (logical for booleans)."""
    return _bitwise(op, np.bitwise_or)


@kernel("stablehlo.xor", traits=("elementwise", "fusible", "exact", "cheap", "foldable", "reducer",
                                 "chlo_broadcast", "commutative", "no_rounding"))
def xor(op):
    """spec: xor. Bitwise XOR (logical for booleans)."""
    return _bitwise(op, np.bitwise_xor)


@kernel("stablehlo.not", traits=("elementwise", "fusible", "exact", "cheap", "foldable", "no_rounding"))
def not_(op):
    """spec: not. Bitwise NOT (logical for booleans)."""
    dt = operand_dtype(op)
    k = kind(dt)
    if k == "bool":
        return as_result(np.logical_not, dt)
    if k != "int":
        unsupported_type(op, dt)
    return as_result(_int_unary(IntInfo(dt), np.invert), dt)


def _shift_amount(info, b, a_shape=None):
    """Shift amounts as unsigned patterns (negative amounts are huge) and the
    mask of amounts >= the bit width.

    An amount broadcast from one value (stride 0, e.g. a constant through
    broadcast_in_dim; threefry is full of them) is reduced to that value
    when the shifted operand has the full shape anyway."""
    if b.ndim and b.shape == a_shape and b.size and not any(b.strides):
        b = np.asarray(b[(0,) * b.ndim])
    ub = info.upat(info.to_car(b) if info.sub_byte else b)
    big = ub >= info.bits
    if not big.any():
        return ub, None
    return np.where(big, np.zeros_like(ub), ub), big


def _zero_big(r, big):
    """Results of amounts >= the bit width are 0."""
    if big is None:
        return r
    return np.where(big, np.zeros_like(r), r)


def _one_amount(info, b, a_shape):
    """The unsigned shift amount as a Python int when ``b`` is one value (0-d,
    or broadcast from one value over the shifted operand's shape), else None.
    Fused chains (fusion.py) pass broadcast constants 0-d: one ufunc call
    with a scalar per chunk, no mask arrays."""
    if b.ndim == 0:
        v = b[()]
    elif b.shape == a_shape and b.size and not any(b.strides):
        v = b[(0,) * b.ndim]
    else:
        return None
    return int(v) & info.mask


def _shift_builder(op, which):
    dt = operand_dtype(op)
    if kind(dt) != "int":
        unsupported_type(op, dt)
    info = IntInfo(dt)
    native = not info.sub_byte
    bits = info.bits
    ucar, scar = (info.ucar, signed_like(dt)) if native else (None, None)

    if which == "left":
        def shift_left(a, b):
            if native:
                n = _one_amount(info, b, a.shape)
                if n is not None:   # same bits as below, without mask arrays
                    if n >= bits:
                        return np.zeros(np.shape(a), dt)
                    return np.left_shift(info.upat(a), ucar.type(n)).view(dt)
            amt, big = _shift_amount(info, b, a.shape)
            ua = info.upat(info.to_car(a))
            r = _zero_big(np.left_shift(ua, amt.astype(ua.dtype)), big)
            return info.from_car(r if info.sub_byte else r.astype(dt, copy=False))
        return _with_invariant_amount(as_result(shift_left, dt), info, np.left_shift)
    if which == "logical":
        def shift_right_logical(a, b):
            if native:
                n = _one_amount(info, b, a.shape)
                if n is not None:
                    if n >= bits:
                        return np.zeros(np.shape(a), dt)
                    return np.right_shift(info.upat(a), ucar.type(n)).view(dt)
            amt, big = _shift_amount(info, b, a.shape)
            ua = info.upat(info.to_car(a))
            r = _zero_big(np.right_shift(ua, amt.astype(ua.dtype)), big)
            return info.from_car(r if info.sub_byte else r.astype(dt, copy=False))
        return _with_invariant_amount(as_result(shift_right_logical, dt), info, np.right_shift)

    def shift_right_arithmetic(a, b):
        if native:
            n = _one_amount(info, b, a.shape)
            if n is not None:   # amounts >= the width fill with the sign bit
                return np.right_shift(info.spat(a), scar.type(min(n, bits - 1))).view(dt)
        amt, big = _shift_amount(info, b, a.shape)
        sa = info.spat(info.to_car(a))
        r = np.right_shift(sa, amt.astype(sa.dtype))
        if big is not None:
            fill = np.where(sa < 0, -np.ones_like(sa), np.zeros_like(sa))
            r = np.where(big, fill, r)
        return info.from_car(r if info.sub_byte else r.astype(dt, copy=False))
    return _with_invariant_amount(as_result(shift_right_arithmetic, dt), info, np.right_shift,
                                  arithmetic=True)


def _with_invariant_amount(kernel, info, ufunc, arithmetic=False):
    """Mark ``kernel`` for fused chains (fusion.py): with an amount that is
    the same for every element (``b``, 0-d), ``ufunc(a, bind(b))`` gives the
    kernel's bits when ``bind(b)`` is not None -- unsigned types for the
    logical shifts (amounts >= the width give 0: bind is None, the kernel
    runs), signed ones for the arithmetic shift (such amounts shift by
    width - 1, filling with the sign bit)."""
    if info.sub_byte or info.signed != arithmetic:
        return kernel
    bits, mask = info.bits, info.mask
    scalar = info.dtype.type

    if arithmetic:
        def bind(b):
            return scalar(min(int(b) & mask, bits - 1))
    else:
        def bind(b):
            n = int(b) & mask
            return scalar(n) if n < bits else None
    return annotate(kernel, invariant_ufunc=(ufunc, bind))


@kernel("stablehlo.shift_left", traits=("elementwise", "fusible", "exact", "cheap", "foldable",
                                        "chlo_broadcast"))
def shift_left(op):
    """spec: shift_left. Amounts are unsigned; >= bit width gives 0 (APInt shl)."""
    return _shift_builder(op, "left")


@kernel("stablehlo.shift_right_logical", traits=("elementwise", "fusible", "exact", "cheap", "foldable",
                                                 "chlo_broadcast"))
def shift_right_logical(op):
    """spec: shift_right_logical. Amounts are unsigned; >= bit width gives 0."""
    return _shift_builder(op, "logical")


@kernel("stablehlo.shift_right_arithmetic", traits=("elementwise", "fusible", "exact", "cheap", "foldable",
                                                    "chlo_broadcast"))
def shift_right_arithmetic(op):
    """spec: shift_right_arithmetic. Amounts >= bit width fill with the sign bit."""
    return _shift_builder(op, "arithmetic")


def _bit_length(u):
    """Number of significant bits of non-negative integer patterns ``u``."""
    u = np.asarray(u).astype(U64)
    n = np.zeros(u.shape, np.int64)
    for s in (32, 16, 8, 4, 2, 1):
        hi = (u >> np.uint64(s)) != 0
        n += np.where(hi, s, 0)
        u = np.where(hi, u >> np.uint64(s), u)
    return n + (u != 0)


@kernel("stablehlo.count_leading_zeros", traits=("elementwise", "fusible", "foldable"))
def count_leading_zeros(op):
    """spec: count_leading_zeros. Zero bits above the highest set bit (n for 0)."""
    dt = operand_dtype(op)
    if kind(dt) != "int":
        unsupported_type(op, dt)
    info = IntInfo(dt)

    def count_leading_zeros(x):
        return info.from_car((info.bits - _bit_length(info.upat(info.to_car(x)))).astype(I64))
    return as_result(count_leading_zeros, dt)


@kernel("stablehlo.popcnt", traits=("elementwise", "fusible", "foldable"))
def popcnt(op):
    """spec: popcnt. Number of set bits of the two's complement pattern."""
    dt = operand_dtype(op)
    if kind(dt) != "int":
        unsupported_type(op, dt)
    info = IntInfo(dt)

    def popcnt(x):
        return info.from_car(np.bitwise_count(info.upat(info.to_car(x))).astype(I64))
    return as_result(popcnt, dt)


# --------------------------------------------------------------------------
# Comparison, selection


_CMP = {"EQ": np.equal, "NE": np.not_equal, "GE": np.greater_equal,
        "GT": np.greater, "LE": np.less_equal, "LT": np.less}


def _complex_compare(direction):
    if direction in ("EQ", "NE"):
        return _CMP[direction]
    strict = direction in ("GT", "LT")
    less = direction in ("LT", "LE")

    def compare_complex(a, b):
        # Lexicographic on (real, imag), as the spec says.
        if not less:
            a, b = b, a
        lt = (a.real < b.real) | ((a.real == b.real) & (a.imag < b.imag))
        if strict:
            return lt
        return lt | ((a.real == b.real) & (a.imag == b.imag))
    return compare_complex


# Float types whose bits, read as a signed integer of their width, give the
# total order after one xor (below); the other floats go through
# dtypes.total_order_key (uint64 keys).
_NATIVE_TOTALORDER = frozenset({F16, F32, F64, np.dtype(ml_dtypes.bfloat16)})


def _total_order_signed(x, signed, mag):
    """Signed integer keys of ``x`` (a float array of a type in
    :data:`_NATIVE_TOTALORDER`) in its own width, whose signed order is
    IEEE totalOrder: non-negative floats keep their bits, negative ones get
    every bit but the sign flipped (``s ^ ((s >> (w - 1)) & MAX)``), so
    -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN and NaNs by payload, as
    dtypes.total_order_key orders them, in three passes of the native type
    instead of widening to uint64 (``mag``: MAX, the signed type's maximum)."""
    s = np.asarray(x).view(signed)
    m = s >> signed.type(signed.itemsize * 8 - 1)
    m &= mag   # in place (0-d: numpy scalars rebind)
    m ^= s
    return m


# Float types whose TOTALORDER compare first asks whether the float compare
# gives the same answer (_float_order_is_total): numpy's own types, whose
# min reduction and == are SIMD loops (bfloat16's are ml_dtypes' scalar ones).
_PLAIN_ORDER_CHECKED = frozenset({F16, F32, F64})
# Below this many elements the checks' fixed cost (three numpy calls, ~3 us)
# exceeds what they save; the keys are computed as always.
_PLAIN_ORDER_MIN = 1024


def _float_order_is_total(a, b):
    """Whether the IEEE float comparison of ``a`` and ``b`` (broadcastable
    arrays of one float type) gives totalOrder's answer for every pair.

    totalOrder and the float order differ only where an operand is NaN
    (unordered as floats; ordered by sign and payload in totalOrder) or
    where both are zeros (-0 == +0 as floats; -0 < +0 in totalOrder). Every
    other float has one encoding per value, so its order and equality are
    the same in both. This proves the absence of both cases for the whole
    operands, at run time: no NaN in either (a min reduction is NaN iff an
    element is), and no zero in one of them. Costs two reductions and one
    compare pass, against the six passes of the two operands' keys; data
    with NaNs or zeros on both sides goes to the keys (a few us more)."""
    if max(a.size, b.size) < _PLAIN_ORDER_MIN:   # (and never empty below)
        return False
    if np.isnan(np.min(a)) or np.isnan(np.min(b)):
        return False
    return not (np.equal(a, 0).any() and np.equal(b, 0).any())


@kernel("stablehlo.compare", traits=("elementwise", "fusible", "exact", "cheap", "foldable",
                                     "chlo_broadcast", "no_rounding"))
def compare(op):
    """spec: compare. FLOAT uses IEEE quiet comparisons; TOTALORDER orders
    -NaN < -inf < ... < -0 < +0 < ... < inf < NaN (bitwise, like XLA);
    SIGNED/UNSIGNED pick the integer interpretation; complex is lexicographic."""
    direction = op.attrs["comparison_direction"]
    ctype = op.attrs.get("compare_type")
    if ctype is not None and not isinstance(ctype, str):
        raise Unsupported(f"compare: cannot decode compare_type {ctype!r}")
    fn = _CMP.get(direction)
    if fn is None:
        raise Unsupported(f"compare: unknown direction {direction!r}")
    dt = operand_dtype(op)
    k = kind(dt)
    general = _compare_general(op, direction, ctype, fn, dt, k)
    if _is_scalar_op(op):
        scalar = _scalar_compare(direction, ctype, dt, k, general)
        if scalar is not None:
            return _scalar_or(general, scalar)
    return general


_PY_CMP = {"EQ": _operator.eq, "NE": _operator.ne, "GE": _operator.ge,
           "GT": _operator.gt, "LE": _operator.le, "LT": _operator.lt}
# The results of the 0-d compares: shared and read-only, as folded constants are.
_TRUE0 = np.array(True)
_TRUE0.flags.writeable = False
_FALSE0 = np.array(False)
_FALSE0.flags.writeable = False


def _scalar_compare(direction, ctype, dt, k, general):
    """The 0-d compare on Python values (see _scalar_or), or None where the
    general kernel is the only one. Python's float comparisons are IEEE's
    quiet ones, on values every float type converts to exactly; TOTALORDER
    orders non-NaN values as floats do, except -0 < +0 (compared as the
    signs), and leaves NaNs (ordered by sign and payload) to ``general``."""
    py = _PY_CMP[direction]
    if k == "float" and ctype == "TOTALORDER":
        def compare_totalorder_scalar(a, b):
            x = float(a)
            y = float(b)
            if x != x or y != y:
                return general(a, b)
            if x == 0.0 and y == 0.0:
                x = _math.copysign(1.0, x)
                y = _math.copysign(1.0, y)
            return _TRUE0 if py(x, y) else _FALSE0
        return compare_totalorder_scalar
    if k == "float" and ctype in (None, "FLOAT"):
        def compare_float_scalar(a, b):
            return _TRUE0 if py(float(a), float(b)) else _FALSE0
        return compare_float_scalar
    if k == "int" and dt in _NATIVE_INTS and \
            (ctype is None or ctype == ("SIGNED" if dt.kind == "i" else "UNSIGNED")):
        def compare_int_scalar(a, b):
            return _TRUE0 if py(int(a), int(b)) else _FALSE0
        return compare_int_scalar
    return None


_NATIVE_INTS = frozenset(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8,
                                               np.uint16, np.uint32, np.uint64))


def _compare_general(op, direction, ctype, fn, dt, k):
    """The compare kernel for operands of any shape."""
    if k == "complex":
        return as_result(_complex_compare(direction), BOOL)
    if k == "float":
        car = exact_carrier(dt)
        if ctype == "TOTALORDER":
            signed = _SIGNED_OF[dt.itemsize] if dt in _NATIVE_TOTALORDER else None
            if signed is not None:
                # (np.iinfo once here: constructing it costs ~5 us a call,
                # a third of a 64K-element chunk's compare.)
                mag = signed.type(np.iinfo(signed).max)

                plain = dt in _PLAIN_ORDER_CHECKED

                def compare_totalorder_native(a, b):
                    if plain and _float_order_is_total(a, b):
                        return fn(a, b)
                    return fn(_total_order_signed(a, signed, mag),
                              _total_order_signed(b, signed, mag))
                return as_result(compare_totalorder_native, BOOL)

            def compare_totalorder(a, b):
                return fn(dtypes.total_order_key(a.astype(car, copy=False)),
                          dtypes.total_order_key(b.astype(car, copy=False)))
            return as_result(compare_totalorder, BOOL)
        return as_result(fn if car == dt else _via(car, fn, BOOL), BOOL)
    if k == "int":
        info = IntInfo(dt)
        if ctype == "UNSIGNED" and info.signed or ctype == "SIGNED" and not info.signed:
            # The comparison type reinterprets the bit pattern.
            conv = info.upat if ctype == "UNSIGNED" else info.spat

            def compare_reinterpreted(a, b):
                return fn(conv(info.to_car(a)), conv(info.to_car(b)))
            return as_result(compare_reinterpreted, BOOL)
        if info.sub_byte:
            return as_result(lambda a, b: fn(a.astype(I64), b.astype(I64)), BOOL)
        return as_result(fn, BOOL)
    return as_result(fn, BOOL)  # bool: false < true


@kernel("stablehlo.select", traits=("elementwise", "fusible", "exact", "cheap", "foldable",
                                    "quant_same_params", "chlo_broadcast", "no_rounding"))
def select(op):
    """spec: select. ``pred`` is 0-d (chooses a whole operand) or elementwise."""
    rt = result_dtype(op)

    def select(pred, on_true, on_false):
        if pred.ndim == 0 and on_true.shape == on_false.shape:
            return on_true if pred else on_false
        if pred.size >= _UNIFORM_MIN and pred.dtype == BOOL:
            # A mask that is all false or all true (NaN/-0 canonicalisation
            # in jnp.searchsorted, the bounds masks of take_along_axis and of
            # gathers with in-range indices) picks a whole operand: any()
            # and all() stop at the first element that decides them, so a
            # mixed mask costs about nothing here.
            pick = on_false if not pred.any() else (on_true if pred.all() else None)
            if pick is not None and pick.shape == pred.shape:
                return pick
        if pred.size >= _BIT_SELECT_MIN and on_true.dtype == on_false.dtype \
                and on_true.dtype.itemsize in _UINT_OF_SIZE and pred.dtype == BOOL:
            return _bit_select(pred, on_true, on_false)
        return np.where(pred, on_true, on_false)
    return as_result(select, rt)


# np.where branches per element (slow on unpredictable masks); from this size
# on, select by arithmetic on the bit patterns: f + (t - f) * pred in the
# unsigned type of the element's width (wrapping, so exact for any bits).
_BIT_SELECT_MIN = 4096
# From this size on a uniform mask is looked for (two numpy calls, about
# 1.5 us even when the first elements decide; a select of 4096 costs 5 us).
_UNIFORM_MIN = 1 << 14


# Above this many elements the bit select runs in blocks of _SELECT_BLOCK
# (512 KiB of 4-byte values): its three passes then stay in the core's cache.
_SELECT_BLOCK = 1 << 17


def _bit_select(pred, t, f):
    """``pred ? t : f`` for a bool ``pred`` and values of one type whose width
    has an unsigned integer type: three passes (subtract, multiply by the
    mask, add) on the bit patterns instead of np.where's branch per element
    (64K f32 with a random mask: 250 us with np.where, 36 us as the xor/and
    bit select, 29 us here; 1e6 f64: 2.7 -> 1.8 ms)."""
    u = _UINT_OF_SIZE[t.dtype.itemsize]
    n = pred.size
    # One operand all zero bits (where(x > 0, x, 0), masking; +0.0, not
    # -0.0): the other's bits times the mask, one pass (two for a zero
    # on_true: the mask is negated first).
    if _zero_bits(f, u):
        return np.multiply(t.view(u), pred).view(t.dtype)
    if _zero_bits(t, u):
        return np.multiply(f.view(u), np.logical_not(pred)).view(t.dtype)
    if n >= 2 * _SELECT_BLOCK:
        flat = [_flat_or_one(x, pred.shape) for x in (pred, t, f)]
        if all(x is not None for x in flat):
            p1, t1, f1 = flat
            out = np.empty(pred.shape, t.dtype)
            o1 = out.reshape(-1).view(u)
            tb, fb = t1.view(u), f1.view(u)
            for lo in range(0, n, _SELECT_BLOCK):
                hi = min(lo + _SELECT_BLOCK, n)
                _bit_select_into(o1[lo:hi], p1[lo:hi], tb[lo:hi], fb[lo:hi])
            return out
    tb, fb = t.view(u), f.view(u)
    r = np.subtract(tb, fb)
    if r.shape == pred.shape:
        np.multiply(r, pred, out=r)
    else:   # t and f broadcast to pred's shape
        r = np.multiply(r, pred)
    np.add(r, fb, out=r)
    return r.view(t.dtype)


def _zero_bits(x, u):
    """``x`` is one value (0-d, or broadcast: stride 0 on every axis) whose
    bit pattern, read as the unsigned type ``u``, is 0."""
    return x.size > 0 and not any(x.strides) and np.asarray(x[(0,) * x.ndim]).view(u) == 0


def _bit_select_into(r, pred, tb, fb):
    """``r = pred ? tb : fb`` on unsigned bit patterns: fb + (tb - fb) * pred."""
    np.subtract(tb, fb, out=r)
    np.multiply(r, pred, out=r)
    np.add(r, fb, out=r)


def _flat_or_one(x, shape):
    """``x`` as a flat array of ``size(shape)`` elements: a view of a
    C-contiguous ``x`` of that shape, a stride-0 view of a value broadcast
    from one element (or 0-d), else None."""
    if x.shape == shape and x.flags.c_contiguous:
        return x.reshape(-1)
    if x.size and not any(x.strides):
        n = 1
        for d in shape:
            n *= d
        return np.broadcast_to(x[(0,) * x.ndim], (n,))
    return None


@kernel("stablehlo.clamp", traits=("elementwise", "fusible", "exact", "cheap", "foldable", "no_rounding"))
def clamp(op):
    """spec: clamp. ``min(max(operand, min), max)`` with the maximum/minimum
    semantics of the element type (NaN propagates); min/max may be 0-d."""
    dt = operand_dtype(op, 1)
    rt = result_dtype(op)
    k = kind(dt)
    if k == "bool":
        mx, mn = np.logical_or, np.logical_and
    elif k == "int":
        info = IntInfo(dt)
        mx, mn = np.maximum, np.minimum
        if info.sub_byte:
            return as_result(lambda lo, x, hi: info.from_car(
                np.minimum(np.maximum(x.astype(I64), lo.astype(I64)), hi.astype(I64))), rt)
    elif k == "float":
        car = exact_carrier(dt)

        def clamp_float(lo, x, hi):
            return _float_min(_float_max(x, lo), hi)
        return as_result(clamp_float if car == dt else _via(car, clamp_float, rt), rt)
    else:
        mx, mn = _complex_max, _complex_min

    def clamp(lo, x, hi):
        return mn(mx(x, lo), hi)
    return as_result(clamp, rt)


# --------------------------------------------------------------------------
# Complex parts


@kernel("stablehlo.complex", traits=("elementwise", "fusible", "foldable", "chlo_broadcast"))
def complex_(op):
    """spec: complex. ``lhs + i * rhs`` built part by part (no inf * i NaNs)."""
    rt = result_dtype(op)

    def complex_(re, im):
        out = np.empty(np.broadcast_shapes(re.shape, im.shape), rt)
        out.real = re
        out.imag = im
        return out
    return as_result(complex_, rt)


@kernel("stablehlo.real", traits=("elementwise", "fusible", "cheap", "foldable", "no_rounding"))
def real(op):
    """spec: real. Real part; identity on floats."""
    rt = result_dtype(op)
    if kind(operand_dtype(op)) == "complex":
        return as_result(lambda x: np.real(x).copy(), rt)
    return as_result(lambda x: x, rt)


@kernel("stablehlo.imag", traits=("elementwise", "fusible", "cheap", "foldable", "no_rounding"))
def imag(op):
    """spec: imag. Imaginary part; zeros for floats."""
    rt = result_dtype(op)
    if kind(operand_dtype(op)) == "complex":
        return as_result(lambda x: np.imag(x).copy(), rt)
    return as_result(lambda x: np.zeros(x.shape, rt), rt)


@kernel("stablehlo.is_finite", traits=("elementwise", "fusible", "exact", "cheap", "foldable", "no_rounding"))
def is_finite(op):
    """spec: is_finite. False for +-inf and NaN."""
    dt = operand_dtype(op)
    if kind(dt) != "float":
        unsupported_type(op, dt)
    car = exact_carrier(dt)
    return as_result(np.isfinite if car == dt else _via(car, np.isfinite, BOOL), BOOL)


# --------------------------------------------------------------------------
# map


@kernel("stablehlo.map", special=True, traits=("judged_whole",))
def map_(op):
    """spec: map. ``result[i] = computation(inputs...[i])`` over all dimensions.

    A body made only of elementwise ops on 0-d tensors is evaluated once on
    the whole arrays; any other body runs once per element.
    """
    dims = tuple(op.attrs.get("dimensions", ()))
    rank = len(op.operand_types[0].shape) if op.operand_types else 0
    if dims != tuple(range(rank)):
        raise Unsupported(f"map: dimensions {dims} must be all of range({rank}) (C3)")
    rt = result_dtype(op)
    body = op.regions[0]
    vectorized = is_batchable(body)

    def map_(ctx, regions, *inputs):
        region = regions[0]
        shape = inputs[0].shape
        if vectorized:
            (res,) = broadcast_results(batched(ctx, region)(*inputs)[:1], shape)
            return np.array(res, dtype=rt)  # materialise a broadcast constant
        out = np.empty(shape, rt)
        for idx in np.ndindex(*shape):
            out[idx] = region(*[np.array(x[idx], dtype=x.dtype) for x in inputs])[0]
        return out
    return map_
