"""Elementwise transcendental and rounding ops on floats and complex numbers.

Like the reference interpreter (``mapWithUpcastToDouble`` in
openxla/stablehlo ``stablehlo/reference/Element.cpp``), real functions are
evaluated in float64 and rounded once to the result type; complex64 ones in
complex128. numpy's float64 functions are accurate to about 1 ULP, so f32
and narrower results are (nearly always) correctly rounded. float32 exp,
expm1, log, log1p, sin, cos, tanh and logistic get the same bits from the
C kernels of ops/fastmath.py (where built; sine otherwise by a faster
float64 route, :func:`sin_f32`).
"""

import math

import numpy as np

from ..registry import annotate, kernel
from .elementwise import (
    C128,
    F16,
    F32,
    F64,
    _complex_divide,
    _via,
    as_result,
    by_table,
    exact_carrier,
    kind,
    operand_dtype,
    result_dtype,
    round_f64,
    unsupported_type,
    via_f64_ufunc,
)
from .fastmath import f32_kernel


def _transcendental(op, f64_fn, c128_fn=None, fast=None):
    """Builder body: ``f64_fn`` on float64 / ``c128_fn`` on complex128;
    ``fast``: the name of a fastmath.f32_kernel computing ``f64_fn`` on float32."""
    dt = operand_dtype(op)
    rt = result_dtype(op)
    k = kind(dt)
    if k == "float":
        if dt == F64:
            return as_result(f64_fn, rt)

        def run(*xs):
            return round_f64(np.asarray(f64_fn(*[x.astype(F64) for x in xs])), rt)
        run.__name__ = op.name.split(".")[-1]
        run = via_f64_ufunc(f64_fn, [t.dtype for t in op.operand_types], rt) or run
        if len(op.operand_types) == 1:
            if fast is not None and dt == rt == F32:
                return f32_kernel(fast, as_result(run, rt))
            run = by_table(run, (op.name, f64_fn), dt, rt)
        return as_result(run, rt)
    if k == "complex" and c128_fn is not None:
        if dt == C128:
            return as_result(c128_fn, rt)

        def run_c(*xs):
            return np.asarray(c128_fn(*[x.astype(C128) for x in xs])).astype(rt)
        return as_result(run_c, rt)
    unsupported_type(op, dt)


def _exact(op, fn):
    """Builder body for ops whose result is exactly representable (rounding)."""
    dt = operand_dtype(op)
    if kind(dt) != "float":
        unsupported_type(op, dt)
    car = exact_carrier(dt)
    return as_result(fn if car == dt else _via(car, fn, dt), dt)


@kernel("stablehlo.exponential", traits=("elementwise", "fusible", "foldable", "transcendental"))
def exponential(op):
    """spec: exponential."""
    return _transcendental(op, np.exp, np.exp, fast="exp_f32")


def _expm1_complex(z):
    # exp(z) - 1 without cancellation: re = expm1(x) cos(y) - 2 sin^2(y/2),
    # im = exp(x) sin(y).
    x, y = z.real, z.imag
    s = np.sin(0.5 * y)
    re = np.expm1(x) * np.cos(y) - 2.0 * s * s
    # y == 0 (a real input): im is y itself, never exp(x) * 0 = inf * 0 = NaN.
    im = np.where(y == 0, y, np.exp(x) * np.sin(y))
    out = np.empty(np.shape(z), C128)
    out.real = re
    out.imag = im
    # The formula is exact in the limit; outside of finite inputs use exp - 1.
    return np.where(np.isfinite(z), out, np.exp(z) - 1)


@kernel("stablehlo.exponential_minus_one", traits=("elementwise", "fusible", "foldable", "transcendental"))
def exponential_minus_one(op):
    """spec: exponential_minus_one. ``exp(x) - 1`` accurate near 0."""
    return _transcendental(op, np.expm1, _expm1_complex, fast="expm1_f32")


@kernel("stablehlo.log", traits=("elementwise", "fusible", "foldable", "transcendental"))
def log(op):
    """spec: log. Natural logarithm (principal branch for complex)."""
    return _transcendental(op, np.log, np.log, fast="log_f32")


def _log1p_complex(z):
    # log(1 + z): re = 0.5 * log1p(2x + x^2 + y^2) keeps precision for small
    # |z|; im = atan2(y, 1 + x). Large |z| uses log directly (no overflow).
    x, y = z.real, z.imag
    small = (np.abs(x) < 0.5) & (np.abs(y) < 0.5)
    re_small = 0.5 * np.log1p(x * (2.0 + x) + y * y)
    direct = np.log(z + 1)
    out = np.empty(np.shape(z), C128)
    out.real = np.where(small, re_small, direct.real)
    out.imag = np.where(small, np.arctan2(y, 1.0 + x), direct.imag)
    return out


@kernel("stablehlo.log_plus_one", traits=("elementwise", "fusible", "foldable", "transcendental"))
def log_plus_one(op):
    """spec: log_plus_one. ``log(1 + x)`` accurate near 0."""
    return _transcendental(op, np.log1p, _log1p_complex, fast="log1p_f32")


def _logistic(x):
    return 1.0 / (1.0 + np.exp(-x))


def _logistic_complex(z):
    # Complex reciprocal with C99 Annex G infinities (numpy's gives NaN).
    with np.errstate(all="ignore"):
        return _complex_divide(np.ones_like(z), 1.0 + np.exp(-z))


@kernel("stablehlo.logistic", traits=("elementwise", "fusible", "foldable", "transcendental"))
def logistic(op):
    """spec: logistic. ``1 / (1 + exp(-x))``."""
    return _transcendental(op, _logistic, _logistic_complex, fast="logistic_f32")


@kernel("stablehlo.sine", traits=("elementwise", "fusible", "foldable", "transcendental"))
def sine(op):
    """spec: sine. float32: the C kernel (fastmath), or :func:`sin_f32`
    where it is not built; both give the float64 detour's bits."""
    if operand_dtype(op) == result_dtype(op) == F32:
        return f32_kernel("sin_f32", sin_f32)
    return _transcendental(op, np.sin, np.sin)


# sin_f32's guard: a float64 value whose low 29 mantissa bits (those float32
# rounding drops) lie within _SIN_GUARD units of the halfway pattern 2**28
# may round differently from a float64 sin that differs from it by up to
# that much; those elements take np.sin itself.
_LOW29 = np.uint64((1 << 29) - 1)
_SIN_GUARD = 1 << 16
_HALFWAY_LO = np.uint64((1 << 28) - _SIN_GUARD)
_GUARD_WIDTH = np.uint64(2 * _SIN_GUARD)
# Below this size the plain float64 sin (no guard passes).
_SIN_MIN = 256
# |x| from which float32 inputs take np.sin (tan's argument reduction is
# only trusted, below, for moderate arguments).
_SIN_TAN_MAX = np.float32(1024)
_tan = np.tan   # (tests put a less accurate tan here: the guard must absorb it)


def sin_f32(x):
    """sin of a float32 array, bit-identical to rounding np.sin of its
    float64 value once (the other real transcendentals' rule), at about half
    the cost: numpy's float64 sin is libm's scalar loop (8-15 ns per element
    here), its float64 tan a vector loop (1.3 ns).

    In float64: t = tan(x / 2) (x / 2 is exact), s = 2t / (1 + t^2), within
    a few float64 ULPs of sin(x) (each step is relatively accurate: near the
    zeros of sin t is near 0 or a pole, where 2t / (1 + t^2) keeps t's
    relative error), i.e. tens of thousands of times closer than the guard.
    Rounding s to float32 gives what rounding np.sin(x) gives unless s lies
    within the guard of a halfway point between two float32 values (about 1
    element in 4000) -- those, |x| >= 1024 and non-finite x take np.sin.
    tests/test_kernel_fast_paths.py compares the two bit for bit over every
    float32 in [1, 2), around the first 330 multiples of pi, random values
    of every scale and the special values.
    """
    if x.size < _SIN_MIN:
        return round_f64(np.asarray(np.sin(x.astype(F64))), F32)
    t = np.multiply(x, np.float64(0.5))      # exact, and float64
    _tan(t, out=t)
    d = np.multiply(t, t)
    d += 1.0
    t *= 2.0
    t /= d
    y = t.astype(F32)
    bits = t.view(np.uint64)                 # t is not needed any more
    bits -= _HALFWAY_LO
    bits &= _LOW29
    redo = bits < _GUARD_WIDTH
    big = np.max(np.abs(x))
    if not big < _SIN_TAN_MAX:               # large, infinite or NaN inputs
        redo |= ~(np.abs(x) < _SIN_TAN_MAX)
    if redo.any():
        i = np.nonzero(redo)
        y[i] = np.sin(x[i].astype(F64)).astype(F32)
    return y


@kernel("stablehlo.cosine", traits=("elementwise", "fusible", "foldable", "transcendental"))
def cosine(op):
    """spec: cosine."""
    return _transcendental(op, np.cos, np.cos, fast="cos_f32")


@kernel("stablehlo.tan", traits=("elementwise", "fusible", "foldable", "transcendental"))
def tan(op):
    """spec: tan."""
    return _transcendental(op, np.tan, np.tan)


@kernel("stablehlo.tanh", traits=("elementwise", "fusible", "foldable", "transcendental"))
def tanh(op):
    """spec: tanh."""
    return _transcendental(op, np.tanh, np.tanh, fast="tanh_f32")


@kernel("stablehlo.sqrt", traits=("elementwise", "fusible", "exact", "foldable", "one_rounding"))
def sqrt(op):
    """spec: sqrt. Correctly rounded: IEEE 754 requires it of every sqrt
    (numpy's float16/float32 loops included, on every host), so those types
    skip the float64 detour; others take it (one rounding of the float64
    root is exact)."""
    dt = operand_dtype(op)
    if dt in (F16, F32):
        return as_result(np.sqrt, result_dtype(op))
    return _transcendental(op, np.sqrt, np.sqrt)


def _rsqrt(x):
    return 1.0 / np.sqrt(x)


def _rsqrt_complex(z):
    # 1 / sqrt(z) with C99 Annex G division: 1 / (inf + inf i) = 0 - 0i, as
    # std::complex and XLA CPU (numpy's complex division gives NaN there).
    with np.errstate(all="ignore"):
        return _complex_divide(np.ones_like(z), np.sqrt(z))


@kernel("stablehlo.rsqrt", traits=("elementwise", "fusible", "foldable", "transcendental"))
def rsqrt(op):
    """spec: rsqrt. ``1 / sqrt(x)`` in float64 (complex128), rounded once."""
    return _transcendental(op, _rsqrt, _rsqrt_complex)


def _cbrt_complex(z):
    # Reference formula: |z|^(1/3) * (cos(arg/3) + i sin(arg/3)).
    theta = np.arctan2(z.imag, z.real) / 3.0
    r = np.power(z.real * z.real + z.imag * z.imag, 1.0 / 6.0)
    out = np.empty(np.shape(z), C128)
    out.real = r * np.cos(theta)
    out.imag = r * np.sin(theta)
    return out


@kernel("stablehlo.cbrt", traits=("elementwise", "fusible", "foldable", "transcendental"))
def cbrt(op):
    """spec: cbrt. Real cube root (negative for negative x); complex principal root."""
    return _transcendental(op, np.cbrt, _cbrt_complex)


def _atan2_complex(y, x):
    # Reference: atan2(y, x) = -i * log((x + i*y) / sqrt(x^2 + y^2)).
    return -1j * np.log((x + 1j * y) / np.sqrt(x * x + y * y))


@kernel("stablehlo.atan2", traits=("elementwise", "fusible", "foldable", "chlo_broadcast", "transcendental"))
def atan2(op):
    """spec: atan2. ``atan2(lhs, rhs)`` with the IEEE special cases (C atan2)."""
    return _transcendental(op, np.arctan2, _atan2_complex)


@kernel("stablehlo.floor", traits=("elementwise", "fusible", "exact", "cheap", "foldable", "no_rounding"))
def floor(op):
    """spec: floor. roundToIntegralTowardNegative."""
    return _exact(op, np.floor)


@kernel("stablehlo.ceil", traits=("elementwise", "fusible", "exact", "cheap", "foldable", "no_rounding"))
def ceil(op):
    """spec: ceil. roundToIntegralTowardPositive."""
    return _exact(op, np.ceil)


def _round_afz(x):
    # roundToIntegralTiesToAway. trunc keeps the sign of zero; x - trunc(x)
    # is exact, so the 0.5 test is exact too (floor(|x| + 0.5) is not).
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t)


@kernel("stablehlo.round_nearest_afz", traits=("elementwise", "fusible", "exact", "foldable", "no_rounding"))
def round_nearest_afz(op):
    """spec: round_nearest_afz. Nearest integer, ties away from zero."""
    return _exact(op, _round_afz)


@kernel("stablehlo.round_nearest_even", traits=("elementwise", "fusible", "exact", "foldable", "no_rounding"))
def round_nearest_even(op):
    """spec: round_nearest_even. Nearest integer, ties to even (np.rint)."""
    return _exact(op, np.rint)


# The float64 functions the f32/f16 kernels above evaluate, on a Python float
# (registry.KernelInfo.scalar_math: loopgen.py's scalar loop bodies).
def _logistic_scalar(x, _exp=math.exp):
    return 1.0 / (1.0 + _exp(-x))


def _rsqrt_scalar(x, _sqrt=math.sqrt):
    return 1.0 / _sqrt(x)


for _builder, _fn in ((sine, math.sin), (cosine, math.cos), (tan, math.tan),
                      (tanh, math.tanh), (exponential, math.exp),
                      (exponential_minus_one, math.expm1), (log, math.log),
                      (log_plus_one, math.log1p), (logistic, _logistic_scalar),
                      (rsqrt, _rsqrt_scalar), (cbrt, math.cbrt)):
    annotate(_builder, scalar_math=_fn)
del _builder, _fn
