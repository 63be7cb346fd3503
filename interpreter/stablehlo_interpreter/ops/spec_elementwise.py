"""Spec-mode elementwise functions (``numerics="spec"``): the C library's results.

The C++ reference interpreter (Element.cpp ``mapWithUpcastToDouble``)
evaluates float functions as the C library's double function of the value
converted to double, rounded once to the element type. For float32 and
narrower that rounding hides the double function's last-bit error, and the
accurate kernels (correctly rounded, or numpy's float64 rounded) give the
same bits; for float64 the C library's own last bit shows: glibc's
``expm1``, ``cbrt``... differ from numpy's (and numpy's SIMD loops vary by
host). So spec mode computes float64 functions with the C library itself
(glibc on Linux, as the C++ interpreter): ``spec_kernels.libm``, a C loop
(``_libm_loops``) that gives the bits of Python's ``math`` module, or
``math`` itself one element at a time where the C module is not built.

``logistic`` is not a library function there: ``1 / (1 + exp(-x))`` with
each step in the element type (Element.cpp ``logistic``), for every float
type.

The builders wrap the accurate ones (registered by elementwise*.py): in
accurate mode, or for other element types, they build the accurate kernel.
"""

import math

import numpy as np

from .. import dtypes, registry
from . import elementwise_math  # noqa: F401 - register the accurate builders first
from .c_complex import muldc3
from .elementwise import round_f64
from .fastmath import f32_kernel
from .spec_kernels import divdc3, is_spec, libm

F64 = np.dtype(np.float64)
F32 = np.dtype(np.float32)


_LIBM = {
    "stablehlo.exponential": (math.exp, np.exp),
    "stablehlo.exponential_minus_one": (math.expm1, np.expm1),
    "stablehlo.log": (math.log, np.log),
    "stablehlo.log_plus_one": (math.log1p, np.log1p),
    "stablehlo.sine": (math.sin, np.sin),
    "stablehlo.cosine": (math.cos, np.cos),
    "stablehlo.tan": (math.tan, np.tan),
    "stablehlo.tanh": (math.tanh, np.tanh),
    "stablehlo.cbrt": (math.cbrt, np.cbrt),
    "stablehlo.atan2": (math.atan2, np.arctan2),
    "stablehlo.power": (math.pow, np.power),
}


def _complex_expm1(z):
    # Element.cpp: std::exp(z) - complex(1, 0) (not a cancellation-free expm1).
    return np.exp(z) - np.complex128(1.0)


def _complex_log1p(z):
    # Element.cpp: std::log(z + complex(1, 0)); the + 0 turns an imaginary
    # -0 into +0, which picks the branch cut's upper side.
    return np.log(z + np.complex128(1.0))


# Complex functions whose reference formula is not the library function
# (evaluated in complex128, rounded to the element type).
_COMPLEX = {
    "stablehlo.exponential_minus_one": _complex_expm1,
    "stablehlo.log_plus_one": _complex_log1p,
}


def _narrow(np_fn, dt):
    """A float32-or-narrower function as the reference computes it: the
    double function (numpy's; its last-bit difference from glibc's almost
    never moves the rounding), rounded once to ``dt``. Spelled out here so
    that spec mode does not depend on how the accurate kernels are made."""
    def run(*xs):
        r = np_fn(*[np.asarray(x).astype(F64) for x in xs])
        return np.asarray(round_f64(np.asarray(r, F64), dt))
    return run


# float32 functions whose C loop (fastmath.f32_kernel) gives the float64
# detour's bits, the same as _narrow's: checked over every float32 input
# (tests/test_fastmath.py), so spec mode runs them too.
_F32_KERNELS = {
    "stablehlo.exponential": "exp_f32",
    "stablehlo.exponential_minus_one": "expm1_f32",
    "stablehlo.log": "log_f32",
    "stablehlo.log_plus_one": "log1p_f32",
    "stablehlo.sine": "sin_f32",
    "stablehlo.cosine": "cos_f32",
    "stablehlo.tanh": "tanh_f32",
}


def _spec_libm(name, accurate):
    fn = libm(*_LIBM[name])
    cfn = _COMPLEX.get(name)
    np_fn = _LIBM[name][1]

    def builder(op):
        dt = np.dtype(op.operand_types[0].dtype) if op.operand_types else None
        if not is_spec(op) or op.operand_types[0].quant is not None:
            return accurate(op)
        if cfn is not None and dt.kind == "c":
            return lambda z: np.asarray(np.asarray(cfn(z.astype(np.complex128))).astype(dt))
        if dt == F64:
            return fn
        if dtypes.is_float(dt):
            if dt == F32 and name in _F32_KERNELS and len(op.operand_types) == 1 \
                    and np.dtype(op.result_types[0].dtype) == F32:
                return f32_kernel(_F32_KERNELS[name], _narrow(np_fn, dt))
            return _narrow(np_fn, dt)
        return accurate(op)
    return builder


def _spec_logistic(accurate):
    exp64 = libm(math.exp, np.exp)

    def builder(op):
        dt = np.dtype(op.operand_types[0].dtype)
        if is_spec(op) and dt.kind == "c" and op.operand_types[0].quant is None:
            return lambda z: np.asarray(_spec_complex_logistic(z))
        if not is_spec(op) or dt.kind not in "fV" or op.operand_types[0].quant is not None \
                or dt.kind == "V" and dt.itemsize > 2:
            return accurate(op)
        if dt == F64:
            def run(x):
                e = exp64(-x)     # a fresh array: the two steps reuse it
                return np.divide(1.0, np.add(1.0, e, out=e), out=e)
            return run
        car = dt if dt.itemsize >= 4 else F32
        exp_narrow = _narrow(np.exp, dt)
        if dt == F32:
            exp_narrow = f32_kernel("exp_f32", exp_narrow)   # the same bits (_F32_KERNELS)

        def run_narrow(x):
            # exp in double, rounded to the element type; 1 + e and 1 / (.)
            # each rounded to it (float32 arithmetic rounds narrower types
            # correctly: the double rounding is innocuous).
            e = np.asarray(exp_narrow(-x))
            if dt == F32:   # e is a fresh array: both steps in place
                one = np.float32(1.0)
                return np.divide(one, np.add(one, e, out=e), out=e)
            s = (np.asarray(1.0, car) + e.astype(car)).astype(dt)
            return np.asarray((np.asarray(1.0, car) / s.astype(car)).astype(dt))
        return run_narrow
    return builder


def _complex(x, y, dt):
    out = np.empty(np.shape(x), np.complex128)
    out.real, out.imag = x, y
    return out.astype(dt)


def _spec_complex_divide(z, w):
    dt = z.dtype
    z, w = z.astype(np.complex128), w.astype(np.complex128)
    return _complex(*divdc3(z.real, z.imag, w.real, w.imag), dt)


def _spec_complex_rsqrt(z):
    # Element.cpp: 1.0 / std::sqrt(z), a complex division.
    s = np.sqrt(z.astype(np.complex128))
    return _complex(*divdc3(1.0, 0.0, s.real, s.imag), z.dtype)


def _spec_complex_sign(z):
    # Element.cpp sign: NaN + NaN i for a NaN part, +0 for zero, else
    # z / complex(|z| rounded to the element type, 0).
    dt = z.dtype
    part = np.float32 if dt == np.complex64 else np.float64
    z128 = z.astype(np.complex128)
    mag = np.hypot(z128.real, z128.imag).astype(part).astype(F64)
    x, y = divdc3(z128.real, z128.imag, mag, 0.0)
    nan = np.isnan(z.real) | np.isnan(z.imag)
    zero = (z.real == 0) & (z.imag == 0)
    x = np.where(nan, np.nan, np.where(zero, 0.0, x))
    y = np.where(nan, np.nan, np.where(zero, 0.0, y))
    return _complex(x, y, dt)


def _spec_complex_abs(z):
    # Element.cpp abs: std::abs(complex<double>), C's cabs, which glibc
    # computes as hypot (numpy's complex abs rounds differently).
    part = np.float32 if z.dtype == np.complex64 else np.float64
    z128 = z.astype(np.complex128)
    return np.hypot(z128.real, z128.imag).astype(part)


def _spec_complex_logistic(z):
    # Element.cpp logistic: one / (one + exponential(-z)), exponential in
    # complex128 rounded to the element type, the sum in the element type.
    dt = z.dtype
    e = np.exp(-(z.astype(np.complex128))).astype(dt)
    one = np.ones((), dt)
    s = np.empty(e.shape, dt)
    s.real = one.real + e.real
    s.imag = np.zeros((), one.real.dtype) + e.imag
    s = s.astype(np.complex128)
    return _complex(*divdc3(1.0, 0.0, s.real, s.imag), dt)


def _spec_complex_power(z, w):
    # libstdc++ std::pow(complex, complex) is C's cpow, which glibc computes
    # as cexp(w * clog(z)), the product by C's complex multiplication.
    dt = z.dtype
    z, w = np.broadcast_arrays(z.astype(np.complex128), w.astype(np.complex128))
    lz = np.log(z)
    x, y = muldc3(w.real, w.imag, lz.real, lz.imag)
    p = np.empty(z.shape, np.complex128)
    p.real, p.imag = x, y
    return np.exp(p).astype(dt)


_COMPLEX_ONLY = {
    "stablehlo.abs": _spec_complex_abs,
    "stablehlo.divide": _spec_complex_divide,
    "stablehlo.rsqrt": _spec_complex_rsqrt,
    "stablehlo.sign": _spec_complex_sign,
    "stablehlo.power": _spec_complex_power,
}


def _real_rsqrt(x):
    # Element.cpp: 1.0 / std::sqrt(x) in double (two roundings), rounded to
    # the element type.
    dt = x.dtype
    r = np.divide(1.0, np.sqrt(x.astype(F64)))
    return np.asarray(round_f64(np.asarray(r), dt))


_REAL_ONLY = {"stablehlo.rsqrt": _real_rsqrt}


def _spec_complex(name, accurate, fn):
    real_fn = _REAL_ONLY.get(name)

    def builder(op):
        dt = np.dtype(op.operand_types[0].dtype)
        if real_fn is not None and is_spec(op) and dtypes.is_float(dt) and \
                op.operand_types[0].quant is None:
            return real_fn
        if not is_spec(op) or dt.kind != "c" or op.operand_types[0].quant is not None:
            return accurate(op)
        # (numpy gives 0-d operands numpy scalars back; kernels return arrays)
        return lambda *xs: np.asarray(fn(*xs))
    return builder


def _install():
    # Each spec builder falls back to the accurate one it replaces, which
    # keeps its KernelInfo (scalar_math: loopgen.py asks it in the accurate
    # mode only).
    for name, fn in _COMPLEX_ONLY.items():
        registry.override_builder(name, lambda accurate, n=name, f=fn: _spec_complex(n, accurate, f))
    for name in _LIBM:
        registry.override_builder(name, lambda accurate, n=name: _spec_libm(n, accurate))
    registry.override_builder("stablehlo.logistic", _spec_logistic)


_install()
