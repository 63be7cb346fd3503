"""C's complex division and multiplication, on float64 arrays.

The C++ reference interpreter divides complex values as ``complex<double>``
(Element.cpp), which the compiler turns into libgcc's ``__divdc3``; glibc's
``cpow`` multiplies with ``__muldc3``. Spec-mode kernels (spec_elementwise.py,
spec_kernels.py) reproduce both bit for bit, with whole-array steps.
"""

import numpy as np

F64 = np.dtype(np.float64)

_DBL = np.finfo(np.float64)
_RBIG = float(_DBL.max) / 2.0
_RMIN = float(_DBL.tiny)
_RMIN2 = float(_DBL.eps)
_RMINSCAL = 1.0 / float(_DBL.eps)
_RMAX2 = _RBIG * _RMIN2


def divdc3(a, b, c, d):
    """``(a + bi) / (c + di)`` in float64 arrays as C's complex division
    computes it for the C++ interpreter (libgcc ``__divdc3``: Smith's
    algorithm, scaled near the ends of the exponent range, then C99 Annex
    G's recovery of infinities and zeros that came out NaN + NaN i).
    Returns ``(real, imag)``."""
    a, b, c, d = (np.array(v, F64) for v in np.broadcast_arrays(a, b, c, d))
    with np.errstate(all="ignore"):
        dmajor = np.abs(c) < np.abs(d)
        big = np.where(dmajor, np.abs(d), np.abs(c))     # the larger part of the divisor
        half = big >= _RBIG
        a, b, c, d = (np.where(half, v / 2, v) for v in (a, b, c, d))
        big = np.where(half, big / 2, big)
        tiny = big < _RMIN2
        small_num = ((np.abs(a) < _RMIN) & (np.abs(b) < _RMAX2) & (big < _RMAX2)) | \
            ((np.abs(b) < _RMIN) & (np.abs(a) < _RMAX2) & (big < _RMAX2))
        scale = tiny | (~tiny & small_num)
        a, b, c, d = (np.where(scale, v * _RMINSCAL, v) for v in (a, b, c, d))
        # d-major: ratio = c / d
        r1 = c / d
        den1 = c * r1 + d
        x1 = np.where(np.abs(r1) > _RMIN, (a * r1 + b) / den1, (c * (a / d) + b) / den1)
        y1 = np.where(np.abs(r1) > _RMIN, (b * r1 - a) / den1, (c * (b / d) - a) / den1)
        # c-major: ratio = d / c
        r2 = d / c
        den2 = d * r2 + c
        x2 = np.where(np.abs(r2) > _RMIN, (b * r2 + a) / den2, (a + d * (b / c)) / den2)
        y2 = np.where(np.abs(r2) > _RMIN, (b - a * r2) / den2, (b - d * (a / c)) / den2)
        x = np.where(dmajor, x1, x2)
        y = np.where(dmajor, y1, y2)
        both = np.isnan(x) & np.isnan(y)
        if both.any():
            k1 = both & (c == 0.0) & (d == 0.0) & (~np.isnan(a) | ~np.isnan(b))
            inf_c = np.copysign(np.inf, c)
            x = np.where(k1, inf_c * a, x)
            y = np.where(k1, inf_c * b, y)
            k2 = both & ~k1 & (np.isinf(a) | np.isinf(b)) & np.isfinite(c) & np.isfinite(d)
            a2 = np.copysign(np.where(np.isinf(a), 1.0, 0.0), a)
            b2 = np.copysign(np.where(np.isinf(b), 1.0, 0.0), b)
            x = np.where(k2, np.inf * (a2 * c + b2 * d), x)
            y = np.where(k2, np.inf * (b2 * c - a2 * d), y)
            k3 = both & ~k1 & ~k2 & (np.isinf(c) | np.isinf(d)) & np.isfinite(a) & np.isfinite(b)
            c3 = np.copysign(np.where(np.isinf(c), 1.0, 0.0), c)
            d3 = np.copysign(np.where(np.isinf(d), 1.0, 0.0), d)
            x = np.where(k3, 0.0 * (a * c3 + b * d3), x)
            y = np.where(k3, 0.0 * (b * c3 - a * d3), y)
    return x, y


def muldc3(a, b, c, d):
    """``(a + bi) * (c + di)`` as C's complex multiplication (libgcc
    ``__muldc3``): the textbook formula, then C99 Annex G's recovery of
    infinities that came out NaN + NaN i. Returns ``(real, imag)``."""
    a, b, c, d = (np.array(v, F64) for v in np.broadcast_arrays(a, b, c, d))
    with np.errstate(all="ignore"):
        ac, bd, ad, bc = a * c, b * d, a * d, b * c
        x, y = ac - bd, ad + bc
        both = np.isnan(x) & np.isnan(y)
        if not both.any():
            return x, y

        def box(v):
            return np.copysign(np.where(np.isinf(v), 1.0, 0.0), v)

        def nan0(v):
            return np.where(np.isnan(v), np.copysign(0.0, v), v)
        z_inf = both & (np.isinf(a) | np.isinf(b))
        a1, b1 = np.where(z_inf, box(a), a), np.where(z_inf, box(b), b)
        c1, d1 = np.where(z_inf, nan0(c), c), np.where(z_inf, nan0(d), d)
        w_inf = both & (np.isinf(c1) | np.isinf(d1))
        c2, d2 = np.where(w_inf, box(c1), c1), np.where(w_inf, box(d1), d1)
        a2, b2 = np.where(w_inf, nan0(a1), a1), np.where(w_inf, nan0(b1), b1)
        over = both & ~z_inf & ~w_inf & (np.isinf(ac) | np.isinf(bd) | np.isinf(ad) |
                                         np.isinf(bc))
        a3, b3 = np.where(over, nan0(a2), a2), np.where(over, nan0(b2), b2)
        c3, d3 = np.where(over, nan0(c2), c2), np.where(over, nan0(d2), d2)
        recalc = z_inf | w_inf | over
        x = np.where(recalc, np.inf * (a3 * c3 - b3 * d3), x)
        y = np.where(recalc, np.inf * (a3 * d3 + b3 * c3), y)
    return x, y
