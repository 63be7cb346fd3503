"""Matching run arguments to parameter types: exact by default, checked casts
on request.

A reference must not change the values it is given: an int64 ``10**12``
silently rounded into an f32 parameter, ``2**40`` wrapped to 0 in an i32 or a
NaN turned into an integer 0 would make its answer wrong without saying so.
So an array whose dtype or shape differs from its parameter is refused, with
the parameter named, unless the caller asks for a cast (``cast=True``,
``stablehlo-ref run --cast``); a cast refuses values it would change beyond
the target type's rounding (out of range, NaN/inf into integers, integers a
float type cannot hold exactly, finite values overflowing to inf). Python
scalars and lists carry no dtype of their own, so they always get the
checked cast.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import dtypes
from .errors import ArgumentError
from .types import TOKEN, TensorType, TokenType, TupleType, conforms, describe


def _where(i, fname):
    return f"argument #{i} (%arg{i}) of @{fname}"


def coerce(a: Any, t: Any, i: int, fname: str, cast: bool = False) -> Any:
    """``a`` as a value of parameter type ``t`` (the i-th of @fname)."""
    if t.__class__ is TensorType and a.__class__ is np.ndarray and a.shape == t.shape \
            and (a.dtype is t.dtype or a.dtype == t.dtype):
        return a  # the plugin's path: typed buffers of a static shape, two comparisons
    if isinstance(t, TensorType):
        if a.__class__ is np.ndarray and a.dtype == t.dtype and conforms(a, t):
            return a  # dynamic dimensions
        if isinstance(a, (np.ndarray, np.generic)):
            a = np.asarray(a)
            if a.dtype != t.dtype:
                if not cast:
                    raise ArgumentError(
                        f"{_where(i, fname)}: expected {t!r}, got an array of {a.dtype} "
                        f"({describe(a)}); convert it first, or pass cast=True "
                        "(stablehlo-ref run --cast) for a checked conversion")
                a = checked_cast(a, t.dtype, _where(i, fname))
        else:
            try:
                a = np.asarray(a)
            except Exception as e:
                raise ArgumentError(f"{_where(i, fname)}: expected {t!r}, got "
                                    f"{type(a).__name__} ({e})") from None
            if a.dtype != t.dtype:
                a = checked_cast(a, t.dtype, _where(i, fname))
        if not conforms(a, t) and not (t.quant is not None and a.dtype == t.dtype):
            raise ArgumentError(f"{_where(i, fname)}: expected {t!r}, got {describe(a)}")
        return a
    if isinstance(t, TokenType):
        return TOKEN
    if isinstance(t, TupleType):
        if not isinstance(a, tuple) or len(a) != len(t.types):
            raise ArgumentError(f"{_where(i, fname)}: expected {t!r}, got {describe(a)}")
        return tuple(coerce(x, tt, i, fname, cast) for x, tt in zip(a, t.types))
    return a


def checked_cast(a, dtype, what="value"):
    """``a.astype(dtype)`` if that keeps every value (up to the rounding of a
    float target); else ArgumentError naming ``what`` and the first bad value."""
    dtype = np.dtype(dtype)
    src = a.dtype
    if src == dtype:
        return a
    if src.kind not in "biufc" and src not in dtypes.ML_FLOATS \
            and src not in dtypes.SUB_BYTE_INTS:
        raise ArgumentError(f"{what}: cannot convert an array of {src} to {dtype}")
    if src.kind == "c" and not dtypes.is_complex(dtype):
        if np.any(a.imag != 0):
            raise ArgumentError(f"{what}: complex values with a nonzero imaginary part "
                                f"cannot become {dtype}")
        a = a.real
        src = a.dtype
    if dtypes.is_bool(dtype):
        bad = ~((a == 0) | (a == 1))
        if np.any(bad):
            raise _bad(what, a, bad, f"is not 0/1 (target {dtype})")
        return a.astype(dtype)
    if dtypes.is_integer(dtype):
        lo, hi = dtypes.int_info(dtype)
        if src.kind in "biu" or src in dtypes.SUB_BYTE_INTS:
            if a.size:
                amin, amax = int(a.min()), int(a.max())
                if amin < lo or amax > hi:
                    bad = (a < lo) | (a > hi) if src.kind != "u" or lo >= 0 else (a > hi)
                    raise _bad(what, a, bad, f"is out of range for {dtype} [{lo}, {hi}]")
            return a.astype(dtype)
        f = a.astype(np.float64)
        bad = ~np.isfinite(f) | (f != np.trunc(f)) | (f < lo) | (f > hi)
        if np.any(bad):
            raise _bad(what, a, bad, f"is not an integer in range for {dtype}")
        return f.astype(dtype)
    # float or complex target
    with np.errstate(all="ignore"):
        y = a.astype(dtype)
    if src.kind in "biu" or src in dtypes.SUB_BYTE_INTS:
        # integers must be exactly representable
        yf = y.astype(np.float64) if not dtypes.is_complex(dtype) else y.real.astype(np.float64)
        small = np.abs(a.astype(np.float64)) <= 2.0 ** 53
        bad = small & (yf != a.astype(np.float64))
        big = np.flatnonzero(~small)
        flat_a, flat_y = a.reshape(-1), yf.reshape(-1)
        bad_big = [k for k in big if not np.isfinite(flat_y[k])
                   or int(flat_y[k]) != int(flat_a[k])]
        if np.any(bad) or bad_big:
            if bad_big and not np.any(bad):
                bad = np.zeros(a.shape, bool)
                bad.reshape(-1)[bad_big] = True
            raise _bad(what, a, bad, f"is not exactly representable in {dtype}")
        return y
    finite_in = np.isfinite(a)
    finite_out = np.isfinite(y)
    bad = finite_in & ~finite_out
    if np.any(bad):
        raise _bad(what, a, bad, f"overflows {dtype}")
    return y


def _bad(what, a, bad, why):
    idx = np.argwhere(np.asarray(bad))
    first = tuple(int(v) for v in idx[0]) if idx.size else ()
    value = a[first] if a.ndim else a[()]
    value = value.item() if hasattr(value, "item") else value
    n = int(np.count_nonzero(bad))
    at = f" at index {list(first)}" if a.ndim else ""
    return ArgumentError(f"{what}: value {value!r}{at} {why}"
                         + (f" ({n} values)" if n > 1 else ""))
