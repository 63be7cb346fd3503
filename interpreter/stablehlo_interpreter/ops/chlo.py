"""The chlo ("client HLO") dialect ops that appear in JAX programs.

Definitions: openxla/stablehlo stablehlo/dialect/ChloOps.td; special values
(poles, domain errors) follow the decompositions in
stablehlo/transforms/ChloLegalizeToStablehlo.cpp. Real special functions run
in float64 (numpy / scipy.special) and are rounded once to the result type,
which makes f16/bf16/f32 results as accurate as their type allows; complex
ones run in complex128.
"""

import math
import re

import numpy as np
import scipy.special as sps

from .. import dtypes
from ..registry import KERNELS, Unsupported, annotate, composite, kernel, with_trait

# The kernels the chlo.broadcast_* ops wrap (with_trait below) register first.
from . import elementwise, elementwise_math  # noqa: F401
from .elementwise import F32, _total_order_signed, as_result, by_table, round_f64, via_f64_ufunc
from .fastmath import f32_kernel

# --------------------------------------------------------------------------
# Elementwise helpers


def _is_float_type(t):
    return dtypes.is_float(t.dtype)


def _real_fn(op, fn, fast=None):
    """Kernel applying ``fn`` (float64 -> float64) to a floating-point operand;
    ``fast``: the name of a fastmath.f32_kernel computing it on float32."""
    t = op.result_types[0]
    if not all(_is_float_type(x) for x in op.operand_types):
        raise Unsupported(f"{op.name} of {op.operand_types[0].element_type}")
    dtype = t.dtype

    def run(*xs):
        with np.errstate(all="ignore"):
            return round_f64(np.asarray(fn(*[x.astype(np.float64) for x in xs])), dtype)
    direct = via_f64_ufunc(fn, [t.dtype for t in op.operand_types], dtype)
    if direct is not None:
        def run(*xs):
            with np.errstate(all="ignore"):
                return direct(*xs)
        run.__name__ = direct.__name__
    if len(op.operand_types) == 1:
        if fast is not None and op.operand_types[0].dtype == dtype == F32:
            return f32_kernel(fast, run)
        return by_table(run, (op.name, fn), op.operand_types[0].dtype, dtype)
    return run


def _real_or_complex_fn(op, fn):
    """Like `_real_fn`, complex operands computed in complex128."""
    t = op.operand_types[0]
    if dtypes.is_complex(t.dtype):
        dtype = op.result_types[0].dtype

        def run(x):
            with np.errstate(all="ignore"):
                return np.asarray(fn(x.astype(np.complex128))).astype(dtype)
        return run
    return _real_fn(op, fn)


# The traits (registry.TRAITS) of the elementwise chlo functions; _DIRECT:
# JAX serializes these for plugins as `stablehlo.composite "chlo.<op>"`
# whose decomposition is an f32 polynomial (1 to 50 ULP off in f32, more in
# f16; stablehlo_pjrt/lowerings.py wraps the "jax_composite" ones the same
# way). Run as composites, they take the kernels here: float64, rounded once.
# sinh and cosh use the exact functions (the composites below): their op
# kernels reproduce the decomposition's rounding for the conformance suites.
_MATH = ("elementwise", "fusible", "foldable")
_DIRECT = _MATH + ("direct_composite",)


def _unary(name, traits, fn, complex_ok=True, doc="", scalar=None, fast=None):
    """Registers chlo op ``name`` running ``fn`` in float64 (complex128),
    rounded once; ``scalar``: the same function on a Python float
    (registry.KernelInfo.scalar_math); ``fast``: its float32 C kernel
    (fastmath.f32_kernel), real-only ops."""
    def builder(op):
        if not complex_ok:
            return _real_fn(op, fn, fast)
        return _real_or_complex_fn(op, fn)
    builder.__name__ = name.split(".")[-1]
    builder.__doc__ = doc
    if scalar is not None:
        annotate(builder, scalar_math=scalar)
    kernel(name, traits=traits)(builder)
    return builder


_unary("chlo.acos", _DIRECT + ("transcendental",), np.arccos, scalar=math.acos,
       doc="chlo.acos: arc cosine (complex: principal branch).")
_unary("chlo.acosh", _DIRECT + ("transcendental",), np.arccosh, scalar=math.acosh,
       doc="chlo.acosh: inverse hyperbolic cosine.")
_unary("chlo.asin", _DIRECT + ("transcendental",), np.arcsin, scalar=math.asin,
       doc="chlo.asin: arc sine.")
_unary("chlo.asinh", _DIRECT + ("transcendental",), np.arcsinh, scalar=math.asinh,
       doc="chlo.asinh: inverse hyperbolic sine.")
_unary("chlo.atan", _DIRECT + ("transcendental",), np.arctan, scalar=math.atan,
       doc="chlo.atan: arc tangent.")
_unary("chlo.atanh", _DIRECT + ("transcendental",), np.arctanh, scalar=math.atanh,
       doc="chlo.atanh: inverse hyperbolic tangent.")


def _working_float(dtype):
    """The precision chlo decompositions compute in: at least f32."""
    return np.float64 if np.dtype(dtype) == np.float64 else np.float32


def _half_exps(x, w):
    """e^(x + log(1/2)) and e^(log(1/2) - x), the sums rounded in type w.

    This is how the chlo decompositions (and XLA) compute cosh/sinh for large
    |x| without overflowing early: the rounding of the exponent makes results
    differ from the exact value by up to ~|x| ulp, and the suites' expected
    values carry that error, so it is reproduced here.
    """
    xw = x.astype(w)
    log_half = w(np.log(0.5))
    ea = np.exp((xw + log_half).astype(np.float64)).astype(w)
    eb = np.exp((log_half - xw).astype(np.float64)).astype(w)
    return ea, eb


def _hyperbolic(name, traits, complex_fn, combine, small=None):
    def builder(op):
        t = op.operand_types[0]
        if dtypes.is_complex(t.dtype):
            return _real_or_complex_fn(op, complex_fn)
        if not _is_float_type(t):
            raise Unsupported(f"{name} of {t.element_type}")
        dtype = op.result_types[0].dtype
        w = _working_float(dtype)

        def run(x):
            with np.errstate(all="ignore"):
                ea, eb = _half_exps(x, w)
                res = combine(ea, eb)
                if small is not None:
                    x64 = x.astype(np.float64)
                    res = np.where(np.abs(x64) < 1, small(x64).astype(w), res)
                return np.asarray(res).astype(dtype)
        return run
    builder.__name__ = name.split(".")[-1]
    builder.__doc__ = (f"{name}: real operands as the chlo decomposition "
                       "(e^(x+log(1/2)) combined with e^(-x+log(1/2)) in f32 or f64); "
                       "complex operands in complex128.")
    kernel(name, traits=traits)(builder)


_hyperbolic("chlo.cosh", _MATH + ("transcendental",), np.cosh, lambda ea, eb: ea + eb)
# sinh: |x| < 1 uses an expm1 form, accurate to the type; exact sinh here.
_hyperbolic("chlo.sinh", _MATH + ("transcendental",), np.sinh, lambda ea, eb: ea - eb, small=np.sinh)
_unary("chlo.tan", _DIRECT + ("transcendental",), np.tan, scalar=math.tan,
       doc="chlo.tan: tangent.")
_unary("chlo.erf", _DIRECT + ("transcendental",), sps.erf, complex_ok=False, scalar=math.erf,
       fast="erf_f32", doc="chlo.erf: error function.")
_unary("chlo.erfc", _DIRECT + ("jax_composite", "transcendental"), sps.erfc,
       complex_ok=False, scalar=math.erfc, fast="erfc_f32",
       doc="chlo.erfc: complementary error function 1 - erf(x), without cancellation.")


# Below this |x|, erf_inv(x) = x * sqrt(pi)/2 to float64 precision (the next
# term, pi/12 x^2, is under 2^-53); above it, (1 + x) / 2 is exact in float64
# for any float32 x (its 24 significant bits lie above 2^-53).
_ERFINV_LINEAR = 2.0 ** -26
_SQRT_PI_2 = 0.88622692545275801365   # sqrt(pi) / 2
_SQRT_1_2 = 0.70710678118654752440    # 1 / sqrt(2)


def _erfinv_narrow(x):
    """erf_inv of float64 values that are float32 (or narrower) numbers.

    erf_inv(x) = ndtri((1 + x) / 2) / sqrt(2), with (1 + x) / 2 exact for
    these inputs: scipy's ndtri (cephes) is accurate to about 1e-16 and
    1.4x faster than scipy's erfinv (boost): 12 ms against 17 ms of process
    time per million values, most of the cost of jax.random.normal.
    The result is within a few float64 ulps, so rounding it once to float32
    is correct but in the rarest near-ties (tests/test_chlo.py sweeps it
    against scipy's erfinv). +-1 give +-inf, |x| > 1 and NaN give NaN.
    """
    out = sps.ndtri((1.0 + x) * 0.5)
    out *= _SQRT_1_2
    small = np.abs(x) < _ERFINV_LINEAR
    if small.any():
        out = np.where(small, x * _SQRT_PI_2, out)   # keeps the sign of zero
    return out


@kernel("chlo.erf_inv", traits=_DIRECT + ("jax_composite", "transcendental"))
def erf_inv(op):
    """chlo.erf_inv: inverse error function (+-inf at +-1, NaN outside [-1, 1]).

    float64 operands use scipy's erfinv; narrower floats (float32, float16,
    bfloat16, ...) the ndtri form of _erfinv_narrow, rounded once (float32:
    through fastmath.f32_kernel, the same bits)."""
    t = op.operand_types[0]
    if not _is_float_type(t):
        raise Unsupported(f"chlo.erf_inv of {t.element_type}")
    if np.dtype(t.dtype) == np.float64:
        return _real_fn(op, sps.erfinv)
    if np.dtype(t.dtype).itemsize > 4:
        raise Unsupported(f"chlo.erf_inv of {t.element_type}")
    return _real_fn(op, _erfinv_narrow, fast="erf_inv_f32")

_unary("chlo.bessel_i1e", ("fusible", "direct_composite") + ("transcendental",), sps.i1e, complex_ok=False,
       doc="chlo.bessel_i1e: exponentially scaled modified Bessel function of order 1.")


def _lgamma64(x):
    # log|Gamma(x)|; +inf at the poles (non-positive integers) and at +-inf.
    return np.where(np.isinf(x), np.inf, sps.gammaln(x))


_unary("chlo.lgamma", _DIRECT + ("jax_composite", "transcendental"), _lgamma64,
       complex_ok=False, scalar=math.lgamma,
       doc="chlo.lgamma: log of the absolute value of Gamma; +inf at poles and +-inf.")


def _digamma64(x):
    # Poles at zero and the negative integers give NaN (as the decomposition).
    pole = (x <= 0) & (x == np.floor(x))
    return np.where(pole, np.nan, sps.psi(x))


_unary("chlo.digamma", _DIRECT + ("jax_composite", "transcendental"), _digamma64, complex_ok=False,
       doc="chlo.digamma: derivative of lgamma; NaN at the poles x <= 0 integer.")


@composite("chlo.sinh")
def _sinh_exact(op):
    return _real_or_complex_fn(op, np.sinh)


@composite("chlo.cosh")
def _cosh_exact(op):
    return _real_or_complex_fn(op, np.cosh)


def _zeta64(x, q):
    """Hurwitz zeta with the domain rules of the chlo.zeta decomposition."""
    out = sps.zeta(x, q)
    nan, inf = np.nan, np.inf
    # Not defined for x < 1.
    out = np.where(x < 1, nan, out)
    q_le_zero = q <= 0
    x_int = x == np.floor(x)
    # For q <= 0, x must be an integer.
    out = np.where(q_le_zero & ~x_int, nan, out)
    # Poles at integer q <= 0: +inf when x is an even integer, else NaN.
    at_pole = q_le_zero & (q == np.floor(q))
    x_even_int = x_int & (np.fmod(x, 2) == 0)
    out = np.where(at_pole, np.where(x_even_int, inf, nan), out)
    # x == 1: the harmonic series diverges.
    return np.where(x == 1, inf, out)


def _polygamma64(n, x):
    """(-1)^(n+1) n! zeta(n+1, x); digamma for n == 0; NaN unless n is natural."""
    with np.errstate(all="ignore"):
        sign = 2.0 * np.fmod(n, 2.0) - 1.0
        res = sign * np.exp(sps.gammaln(n + 1)) * _zeta64(n + 1, x)
    res = np.where(n == 0, _digamma64(x), res)
    natural = (n == np.floor(n)) & (n >= 0)
    return np.where(natural, res, np.nan)


@kernel("chlo.zeta", traits=("chlo_broadcast", "transcendental"))
def zeta(op):
    """chlo.zeta: Hurwitz zeta function zeta(x, q) = sum_k (k + q)^-x."""
    return _real_fn(op, _zeta64)


@kernel("chlo.polygamma", traits=("chlo_broadcast", "transcendental"))
def polygamma(op):
    """chlo.polygamma: the n-th derivative of digamma at x."""
    return _real_fn(op, _polygamma64)


@kernel("chlo.conj", traits=("fusible",))
def conj(op):
    """chlo.conj: complex conjugate (identity on reals)."""
    return lambda x: np.conj(x)


@kernel("chlo.square", traits=("fusible", "exact", "one_rounding"))
def square(op):
    """chlo.square: x * x in the operand type. For IEEE floats numpy's square
    is that product (one rounding), as a one-operand ufunc that a fused
    chain calls directly and in place (the square of a variance: no new
    chunk-sized array per chunk)."""
    dt = op.operand_types[0].dtype
    if dt == op.result_types[0].dtype and dt in _SQUARE_UFUNC_TYPES:
        return as_result(np.square, dt)
    return lambda x: np.multiply(x, x)


_SQUARE_UFUNC_TYPES = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64))


@kernel("chlo.is_inf", traits=("fusible",))
def is_inf(op):
    """chlo.is_inf: true for +-inf."""
    return lambda x: np.isinf(x.astype(np.float64) if x.dtype in dtypes.ML_FLOATS else x)


@kernel("chlo.is_pos_inf", traits=("fusible",))
def is_pos_inf(op):
    """chlo.is_pos_inf: true for +inf."""
    return lambda x: np.asarray(x.astype(np.float64) == np.inf)


@kernel("chlo.is_neg_inf", traits=("fusible",))
def is_neg_inf(op):
    """chlo.is_neg_inf: true for -inf."""
    return lambda x: np.asarray(x.astype(np.float64) == -np.inf)


_UINT_OF = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


@kernel("chlo.next_after", traits=("elementwise", "fusible", "foldable", "chlo_broadcast"))
def next_after(op):
    """chlo.next_after: the representable value after x in the direction of y.

    On the bit patterns, as the decomposition: NaN if either is NaN; y if
    x == y; the smallest subnormal signed like y if x is +-0; otherwise x's
    magnitude moves one ulp toward y.
    """
    t = op.result_types[0]
    if not _is_float_type(t):
        raise Unsupported(f"next_after of {t.element_type}")
    dtype = t.dtype
    width = dtypes.bit_width(dtype)
    udt = _UINT_OF.get(width)
    if udt is None or np.dtype(dtype).itemsize * 8 != width:
        raise Unsupported(f"next_after of {t.element_type}")
    sign = udt(1 << (width - 1))
    mag = udt((1 << (width - 1)) - 1)
    one = udt(1)
    nan_bits = np.asarray(np.nan, dtype=np.float64).astype(dtype).view(udt)

    def run(x, y):
        xi = x.view(udt)
        yi = y.view(udt)
        xf = x.astype(np.float64)
        yf = y.astype(np.float64)
        x_abs = xi & mag
        y_abs = yi & mag
        x_sign = xi & sign
        y_sign = yi & sign
        smaller = (x_abs > y_abs) | (x_sign != y_sign)
        with np.errstate(over="ignore"):
            res = np.where(smaller, xi - one, xi + one).astype(udt)
        res = np.where(x_abs == 0, np.where(y_abs == 0, yi, y_sign | one), res)
        res = np.where(xf == yf, yi, res)
        res = np.where(np.isnan(xf) | np.isnan(yf), nan_bits, res)
        return np.asarray(res, dtype=udt).view(dtype)
    return run


# --------------------------------------------------------------------------
# mulhi


def _mulhi_u64(a, b):
    """High 64 bits of the 128-bit product of uint64 arrays, via 32-bit limbs."""
    m = np.uint64(0xFFFFFFFF)
    s = np.uint64(32)
    a_lo, a_hi = a & m, a >> s
    b_lo, b_hi = b & m, b >> s
    with np.errstate(over="ignore"):
        lo_lo = a_lo * b_lo
        hi_lo = a_hi * b_lo
        lo_hi = a_lo * b_hi
        hi_hi = a_hi * b_hi
        cross = (lo_lo >> s) + (hi_lo & m) + lo_hi
        return hi_hi + (hi_lo >> s) + (cross >> s)


@kernel("chlo.mulhi", traits=("elementwise", "fusible", "foldable"))
def mulhi(op):
    """chlo.mulhi: the most significant N bits of the 2N-bit product."""
    t = op.result_types[0]
    dtype = t.dtype
    if not dtypes.is_integer(dtype):
        raise Unsupported(f"mulhi of {t.element_type}")
    width = dtypes.bit_width(dtype)
    signed = not dtypes.is_unsigned(dtype)
    if width == 64:
        def run64(a, b):
            au = a.view(np.uint64)
            bu = b.view(np.uint64)
            hi = _mulhi_u64(au, bu)
            if signed:
                # Two's complement correction of the unsigned high word.
                with np.errstate(over="ignore"):
                    hi = hi - np.where(a < 0, bu, np.uint64(0)) - np.where(b < 0, au, np.uint64(0))
            return np.asarray(hi, dtype=np.uint64).view(dtype)
        return run64
    wide = np.int64 if signed else np.uint64
    shift = wide(width)

    def run(a, b):
        return np.asarray((a.astype(wide) * b.astype(wide)) >> shift).astype(dtype)
    return run


# --------------------------------------------------------------------------
# top_k


@kernel("chlo.top_k", traits=("judged_whole",))
def top_k(op):
    """chlo.top_k: the k largest entries along the last dimension and their indices.

    Ordered as the decomposition's sort (GT with TOTALORDER for floats, so
    NaN is largest and -0 < +0), stable: equal values keep index order.
    """
    return _top_k(op, int(op.attrs["k"]))


@composite("chlo.top_k")
def _top_k_composite(op):
    """`stablehlo.composite "chlo.top_k"` {k}: how JAX serializes lax.top_k
    for plugins. The decomposition is a full sort then a slice; the kernel
    gives the same values and indices (same total order and tie order) in
    O(n) for small k."""
    attrs = op.attrs.get("composite_attributes") or {}
    if set(attrs) != {"k"} or op.num_results != 2 or len(op.operand_types) != 1:
        raise Unsupported("chlo.top_k composite with other attributes or arity")
    return _top_k(op, int(np.asarray(attrs["k"]).reshape(())))


# A direct composite kernel that takes attributes, two results and 64-bit
# types (control.py's _direct_composite): top_k's results are exact.
annotate(_top_k_composite, composite_exact=True)


def _top_k(op, k):
    t = op.operand_types[0]
    if dtypes.is_complex(t.dtype):
        raise Unsupported("top_k of complex values")
    idx_dtype = op.result_types[1].dtype

    def run(x):
        n = x.shape[-1] if x.ndim else 1
        dk = _descending_key(x)
        if k == 0 or 4 * k >= n:
            order = np.argsort(dk, axis=-1, kind="stable")[..., :k]
        else:
            order = _smallest_k_stable(dk, k)
        values = np.take_along_axis(x, order, axis=-1)
        return [np.ascontiguousarray(values), order.astype(idx_dtype)]
    return run


_SINT_OF = {2: np.int16, 4: np.int32, 8: np.int64}


def _descending_key(x):
    """Keys whose ascending order is the descending total order of x.

    Computed in x's own width where the bit trick allows (a float's bits as a
    signed integer, magnitude bits flipped for negative values, order like
    the total order; ``~`` reverses any integer order without overflow);
    other types use the uint64 keys of dtypes.total_order_key.
    """
    dt = x.dtype
    if dtypes.is_integer(dt) and not dtypes.is_bool(dt):
        return ~x
    size = np.dtype(dt).itemsize
    if dtypes.is_float(dt) and size in _SINT_OF and dtypes.bit_width(dt) == size * 8:
        signed = np.dtype(_SINT_OF[size])
        mag = signed.type((1 << (size * 8 - 1)) - 1)   # the maximum (np.iinfo costs ~5 us)
        key = _total_order_signed(x, signed, mag)       # a fresh array (or a 0-d scalar)
        return np.invert(key, out=key) if isinstance(key, np.ndarray) else ~key
    return np.uint64(0xFFFFFFFFFFFFFFFF) - dtypes.total_order_key(x)


def _smallest_k_stable(dk, k):
    """Indices of the k smallest keys per row, as a stable argsort's first k.

    np.partition finds each row's k-th smallest key t in O(n); every key
    below t is taken, and of the keys equal to t the first ones by index
    (a stable sort's tie order, which is XLA's: its TopK sorts by value,
    then index). The k taken are then sorted stably by key.
    """
    n = dk.shape[-1]
    t = np.partition(dk, k - 1, axis=-1)[..., k - 1:k]
    below = np.flatnonzero(dk < t)
    rows = dk.size // n
    # How many each row still needs from its ties at t (a bincount of the
    # few indices below t: count_nonzero along an axis costs a full pass).
    need = k - np.bincount(below // n, minlength=rows)
    # The ties at t (usually few): their rank within their row, by index.
    eqi = np.flatnonzero(dk == t)
    row = eqi // n
    rank = np.arange(eqi.size) - np.searchsorted(row, row, side="left")
    taken = np.sort(np.concatenate([below, eqi[rank < need[row]]]))
    idx = (taken % n).reshape(dk.shape[:-1] + (k,))
    picked = np.take_along_axis(dk, idx, axis=-1)
    return np.take_along_axis(idx, np.argsort(picked, axis=-1, kind="stable"), axis=-1)


# --------------------------------------------------------------------------
# constants


@kernel("chlo.constant")
def constant(op):
    """chlo.constant: a constant tensor."""
    value = np.asarray(op.attrs["value"]).astype(op.result_types[0].dtype)
    value.flags.writeable = False
    return lambda: value


@kernel("chlo.constant_like")
def constant_like(op):
    """chlo.constant_like: a splat of `value` with the operand's shape."""
    dtype = op.result_types[0].dtype
    value = np.asarray(op.attrs["value"])
    if value.size != 1:
        raise Unsupported("constant_like with a non-scalar value")
    scalar = value.reshape(()).astype(dtype)
    return lambda x: np.full(x.shape, scalar, dtype=dtype)


# --------------------------------------------------------------------------
# ragged_dot

_DIMS_RE = re.compile(r"(\w+)\s*=\s*\[([^\]]*)\]")


def _parse_ragged_dims(text):
    dims = {m.group(1): tuple(int(v) for v in m.group(2).split(",") if v.strip())
            for m in _DIMS_RE.finditer(str(text))}
    keys = ("lhs_batching_dimensions", "rhs_batching_dimensions",
            "lhs_contracting_dimensions", "rhs_contracting_dimensions",
            "lhs_ragged_dimensions", "rhs_group_dimensions")
    return tuple(dims.get(k, ()) for k in keys)


def _letters():
    return iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _compute_dtype(dtype):
    if dtypes.is_complex(dtype):
        return np.complex128
    if dtypes.is_float(dtype):
        return np.float64
    if dtypes.is_bool(dtype):
        return np.bool_
    return np.uint64 if dtypes.is_unsigned(dtype) else np.int64


@kernel("chlo.ragged_dot")
def ragged_dot(op):
    """chlo.ragged_dot: a matmul over one ragged dimension split into groups.

    Mode 1 (ragged lhs non-contracting dim m): rows of group g use rhs[g];
    rows past the last group are zero. Mode 2 (ragged contracting dim k):
    the result gets a leading group dimension, group g contracts only its
    rows of k. Mode 3 (ragged batch dim): a plain dot_general.
    """
    lb, rb, lc, rc, lr, rg = _parse_ragged_dims(op.attrs["ragged_dot_dimension_numbers"])
    if len(lr) != 1 or len(rg) > 1:
        raise Unsupported("ragged_dot needs one lhs ragged dimension and at most one rhs group dimension")
    lr = lr[0]
    lhs_t, rhs_t, gs_t = op.operand_types
    out_t = op.result_types[0]
    if None in lhs_t.shape or None in rhs_t.shape or None in out_t.shape:
        raise Unsupported("dynamic shapes")
    if len(gs_t.shape) != 1:
        raise Unsupported("ragged_dot with batched group_sizes")
    lrank, rrank = len(lhs_t.shape), len(rhs_t.shape)
    if lr in lb:
        mode = 3
    elif lr in lc:
        mode = 2
    else:
        mode = 1
    if (mode == 1) != (len(rg) == 1):
        raise Unsupported("rhs group dimension does not match the ragged mode")
    letters = _letters()
    lsub = [next(letters) for _ in range(lrank)]
    rsub = [None] * rrank
    for l, r in zip(lb, rb):
        rsub[r] = lsub[l]
    for l, r in zip(lc, rc):
        rsub[r] = lsub[l]
    rfree = [d for d in range(rrank) if rsub[d] is None and d not in rg]
    for d in rfree:
        rsub[d] = next(letters)
    lfree = [d for d in range(lrank) if d not in lb and d not in lc]
    out_sub = [lsub[d] for d in lb] + [lsub[d] for d in lfree] + [rsub[d] for d in rfree]
    rsub_g = [s for d, s in enumerate(rsub) if d not in rg]
    spec = f"{''.join(lsub)},{''.join(rsub_g)}->{''.join(out_sub)}"
    out_dtype = out_t.dtype
    cdt = _compute_dtype(out_dtype)
    out_shape = tuple(out_t.shape)
    # Where the ragged dimension lands: in the result (modes 1, 3) or in rhs (2, 3).
    if mode == 1:
        out_axis = len(lb) + lfree.index(lr)
    elif mode == 3:
        out_axis = lb.index(lr)
        rhs_axis = rb[lb.index(lr)]
    else:
        rhs_axis = rc[lc.index(lr)]

    def run(lhs, rhs, group_sizes):
        lhs = lhs.astype(cdt)
        rhs = rhs.astype(cdt)
        out = np.zeros(out_shape, dtype=cdt)
        start = 0
        total = lhs.shape[lr]
        for g, size in enumerate(np.asarray(group_sizes).reshape(-1).tolist()):
            stop = min(start + max(int(size), 0), total)
            lsl = [slice(None)] * lrank
            lsl[lr] = slice(start, stop)
            part_l = lhs[tuple(lsl)]
            if mode == 1:
                part_r = np.take(rhs, g, axis=rg[0])
                osl = [slice(None)] * len(out_shape)
                osl[out_axis] = slice(start, stop)
                out[tuple(osl)] = np.einsum(spec, part_l, part_r)
            else:
                rsl = [slice(None)] * rrank
                rsl[rhs_axis] = slice(start, stop)
                part_r = rhs[tuple(rsl)]
                if mode == 2:
                    # The result has a leading group dimension.
                    if g < out_shape[0]:
                        out[g] = np.einsum(spec, part_l, part_r)
                else:
                    osl = [slice(None)] * len(out_shape)
                    osl[out_axis] = slice(start, stop)
                    out[tuple(osl)] = np.einsum(spec, part_l, part_r)
            start = stop
        return out.astype(out_dtype)
    return run


# --------------------------------------------------------------------------
# scan


@kernel("chlo.scan", special=True)
def scan(op):
    """chlo.scan: runs `body` along `dimension` of the inputs, threading carries.

    The body takes one slice of each input (the scan dimension removed) and
    the carries; it returns one slice of each output and the new carries.
    Outputs stack the slices along `dimension`; is_reverse scans from the end.
    """
    dim = int(op.attrs["dimension"])
    reverse = bool(op.attrs.get("is_reverse", False))
    seg_in = op.attrs.get("operandSegmentSizes")
    seg_out = op.attrs.get("resultSegmentSizes")
    if seg_in is None or seg_out is None:
        raise Unsupported("chlo.scan without segment sizes")
    n_in, n_init = int(seg_in[0]), int(seg_in[1])
    n_out, n_carry = int(seg_out[0]), int(seg_out[1])
    out_types = op.result_types[:n_out]
    if any(None in t.shape for t in out_types):
        raise Unsupported("dynamic shapes")
    if n_in:
        length = op.operand_types[0].shape[dim]
    else:
        length = out_types[0].shape[dim] if out_types else op.attrs.get("scan_dim_size")
    if length is None:
        raise Unsupported("scan dimension size unknown")
    length = int(length)
    wrap = (lambda vals: vals) if op.num_results != 1 else (lambda vals: vals[0])

    def run(ctx, regions, *operands):
        body = regions[0]
        inputs = operands[:n_in]
        carries = list(operands[n_in:n_in + n_init])
        slices = [[None] * length for _ in range(n_out)]
        steps = range(length - 1, -1, -1) if reverse else range(length)
        for i in steps:
            elems = [np.take(x, i, axis=dim) for x in inputs]
            res = body(*elems, *carries)
            for j in range(n_out):
                slices[j][i] = res[j]
            carries = list(res[n_out:n_out + n_carry])
        outs = []
        for j, t in enumerate(out_types):
            if length == 0:
                outs.append(np.zeros(t.shape, dtype=t.dtype))
            else:
                outs.append(np.stack(slices[j], axis=dim).astype(t.dtype, copy=False))
        return wrap(outs + carries)
    return run


# --------------------------------------------------------------------------
# Broadcasting binary ops: broadcast the operands (numpy-style, or by
# `broadcast_dimensions`), then run the non-broadcasting op's kernel.


_ENUM_RE = re.compile(r"<\s*\w+\s+(\w+)\s*>")


def _enum_word(v):
    if v is None:
        return None
    m = _ENUM_RE.search(str(v))
    return m.group(1) if m else str(v)


def _expander(in_shape, out_shape, bdims):
    """Function broadcasting a value of in_shape to out_shape."""
    in_shape = tuple(in_shape)
    out_shape = tuple(out_shape)
    if in_shape == out_shape:
        return lambda x: x
    if bdims is None:
        bdims = tuple(range(len(out_shape) - len(in_shape), len(out_shape)))
    shape = [1] * len(out_shape)
    for i, d in enumerate(bdims):
        shape[d] = in_shape[i]
    shape = tuple(shape)
    return lambda x: np.broadcast_to(x.reshape(shape), out_shape)


def _make_broadcast(name, target):
    def builder(op):
        from ..compiler import Op
        from ..types import TensorType
        out_t = op.result_types[0]
        if any(None in t.shape for t in list(op.operand_types) + [out_t]):
            raise Unsupported("dynamic shapes")
        out_shape = tuple(out_t.shape)
        bdims = op.attrs.get("broadcast_dimensions")
        bdims = tuple(bdims) if bdims is not None and name != "chlo.broadcast_select" else None
        attrs = {}
        if target == "stablehlo.compare":
            attrs["comparison_direction"] = _enum_word(op.attrs.get("comparison_direction"))
            ct = _enum_word(op.attrs.get("compare_type"))
            if ct is not None:
                attrs["compare_type"] = ct
        inner_types = [TensorType(out_shape, t.dtype, t.element_type, t.quant)
                       for t in op.operand_types]
        inner = Op(target, op.location, attrs, inner_types, op.result_types, [],
                   op.module, None)
        inner_builder = KERNELS.get(target)
        if inner_builder is None:
            raise Unsupported(f"no kernel for {target}")
        fn = inner_builder(inner)
        expand = [_expander(t.shape, out_shape, bdims) for t in op.operand_types]

        def run(*xs):
            return fn(*[e(x) for e, x in zip(expand, xs)])
        return run
    builder.__name__ = name.split(".")[-1]
    builder.__doc__ = (f"{name}: {target} after broadcasting the operands to the "
                       "result shape (numpy-style, or by broadcast_dimensions).")
    kernel(name)(builder)


# chlo.broadcast_<name> for every op with the chlo_broadcast trait
# (stablehlo.add -> chlo.broadcast_add, chlo.zeta -> chlo.broadcast_zeta).
for _target in sorted(with_trait("chlo_broadcast")):
    _make_broadcast("chlo.broadcast_" + _target.split(".", 1)[1], _target)
